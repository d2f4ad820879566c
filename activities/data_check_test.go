package activities

import (
	"errors"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/cann-train/cann-train/spec"
)

// TestChunkComparesDataSets: nodes that train one run must hold the same
// data set. At the run's first chunk (no fingerprint known) the ranks
// compare theirs: a node in the minority is unfit (NodeUnfit, replaced)
// and its peers name it; with no majority the chunk fails for good
// (DataMismatch), naming every node's. Once the run knows its data set's
// fingerprint, a node whose data differs is unfit before it joins.
func TestChunkComparesDataSets(t *testing.T) {
	const other = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
	for _, tc := range []struct {
		name  string
		nodes int
		odd   []int // nodes whose data differs
		known bool  // the run knows its fingerprint
		pin   string
		// want, by node: "" succeeds, "*" fails somehow, else the error
		// type and a phrase of its message.
		want []string
	}{
		{name: "first chunk, all agree", nodes: 3, want: []string{"", "", ""}},
		{name: "first chunk, one differs", nodes: 3, odd: []int{2}, want: []string{
			spec.ErrTypePeerFailed + ": node node-3's data set differs from the run's, sha256 " + short(mnistSumFor(t)) + " (node-3 001122334455…)",
			spec.ErrTypePeerFailed + ": node node-3's data set differs from the run's",
			spec.ErrTypeNodeUnfit + ": node node-3's data set (the test's MNIST) differs from its peers': sha256 001122334455…, 2 of 3 nodes hold " + short(mnistSumFor(t)),
		}},
		{name: "first chunk, no majority", nodes: 2, odd: []int{1}, want: []string{
			spec.ErrTypeDataMismatch + ": the nodes' data sets differ and no majority agrees on one: node-1 " + short(mnistSumFor(t)) + ", node-2 001122334455…",
			spec.ErrTypeDataMismatch + ": no majority",
		}},
		{name: "pinned, all hold it", nodes: 2, pin: "mnist", want: []string{"", ""}},
		{name: "pinned, one of two differs", nodes: 2, odd: []int{1}, pin: "mnist", want: []string{
			spec.ErrTypePeerFailed + ": node node-2's data set differs from the run's, sha256 " + short(mnistSumFor(t)) + " (node-2 001122334455…)",
			spec.ErrTypeNodeUnfit + ": node node-2's data set (the test's MNIST) differs from the one the job pins (data_sha256): sha256 001122334455…, not " + short(mnistSumFor(t)),
		}},
		{name: "pinned, held by a minority", nodes: 3, odd: []int{0, 2}, pin: "mnist", want: []string{
			spec.ErrTypeNodeUnfit + ": differs from the one the job pins",
			spec.ErrTypePeerFailed + ": node node-1's data set differs from the run's, sha256 " + short(mnistSumFor(t)) + " (node-1 001122334455…, node-3 001122334455…)",
			spec.ErrTypeNodeUnfit + ": differs from the one the job pins",
		}},
		{name: "pinned, nobody holds it", nodes: 2, pin: other, want: []string{
			spec.ErrTypeDataMismatch + ": no node holds the data set the job pins (data_sha256 001122334455…): node-1 " + short(mnistSumFor(t)) + ", node-2 " + short(mnistSumFor(t)) + " (check the pin",
			spec.ErrTypeDataMismatch + ": no node holds the data set the job pins",
		}},
		{name: "known, all agree", nodes: 2, known: true, want: []string{"", ""}},
		{name: "known, one differs", nodes: 2, odd: []int{1}, known: true, want: []string{
			"*", // (it waited for its peer)
			spec.ErrTypeNodeUnfit + ": node node-2's data set (the test's MNIST) differs from the one run run/data trains on: sha256 001122334455…, not " + short(mnistSumFor(t)),
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes, m := newNodes(t, tc.nodes, "file://"+t.TempDir())
			for _, i := range tc.odd {
				nodes[i].dataSum = other
			}
			for _, n := range nodes {
				n.connectWait = 2 * time.Second
			}
			s := spec.RunSpec{Name: "data", Nodes: tc.nodes, Steps: 4, ChunkSteps: 2, DataSHA256: tc.pin}.WithDefaults()
			if tc.pin == "mnist" {
				s.DataSHA256 = mnistSumFor(t)
			}
			in := spec.ChunkInput{RunID: "run/data", Spec: s, Membership: m, Session: "run/data/g1/e1", Token: "secret", From: 0, To: 2}
			if tc.known {
				in.DataSHA256 = mnistSum
			}
			res, errs := runChunk(t, nodes, in)
			for i, want := range tc.want {
				err := errs[i]
				switch {
				case want == "" && err != nil:
					t.Errorf("node %d: %v, want it to train", i, err)
				case want == "" && res[i].DataSHA256 != mnistSum:
					t.Errorf("node %d reports data %q, want %q", i, res[i].DataSHA256, mnistSum)
				case want == "*" && err == nil:
					t.Errorf("node %d trained without its peer", i)
				}
				if want == "" || want == "*" {
					continue
				}
				typ, phrase, _ := strings.Cut(want, ": ")
				var ae *temporal.ApplicationError
				if !errors.As(err, &ae) || ae.Type() != typ || !strings.Contains(ae.Message(), phrase) {
					t.Errorf("node %d: %v; want a %s error with %q", i, err, typ, phrase)
					continue
				}
				if ae.NonRetryable() != (typ == spec.ErrTypeDataMismatch) {
					t.Errorf("node %d: %s non-retryable %v", i, typ, ae.NonRetryable())
				}
				// Both name the node's data set and the run's: the run
				// learns its own, and whether to give the node back.
				wantData := spec.DataDisagreement{Run: mnistSum, Node: other}
				var pf spec.PeerFailure
				var d spec.DataDisagreement
				switch {
				case typ == spec.ErrTypePeerFailed && (ae.Details(&pf) != nil || pf.Rank != tc.odd[0]):
					t.Errorf("node %d names rank %d, want %d", i, pf.Rank, tc.odd[0])
				case typ == spec.ErrTypePeerFailed && (pf.Data == nil || *pf.Data != wantData):
					t.Errorf("node %d says the data sets are %+v, want %+v", i, pf.Data, wantData)
				case typ == spec.ErrTypeNodeUnfit && (ae.Details(&d) != nil || d != wantData):
					t.Errorf("node %d says the data sets are %+v, want %+v", i, d, wantData)
				}
			}
		})
	}
}

// mnistSumFor is the test data set's fingerprint (loaded first).
func mnistSumFor(t *testing.T) string {
	mnist(t)
	return mnistSum
}

// TestChunkRefusesOlderBuilds: a run's first chunk compares the nodes'
// data sets, which a node worker of an older build does not: every node
// names it at once (PeerFailed, Unfit in words saying so) rather than
// wait for it in the allgather until the timeouts. A build that
// registered a data set compares them; later chunks (the run's data set
// known) are the same on every build.
func TestChunkRefusesOlderBuilds(t *testing.T) {
	for _, tc := range []struct {
		name  string
		older spec.Node // node-2's registration
		known bool
		want  bool // refused
	}{
		{name: "first chunk, an older build", older: spec.Node{}, want: true},
		{name: "first chunk, a build that registered its data", older: spec.Node{DataSHA256: strings.Repeat("0", 64)}},
		{name: "a later chunk", older: spec.Node{}, known: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes, m := newNodes(t, 2, "file://"+t.TempDir())
			m.Nodes[1].Protocol, m.Nodes[1].DataSHA256 = tc.older.Protocol, tc.older.DataSHA256
			s := spec.RunSpec{Name: "builds", Nodes: 2, Steps: 4, ChunkSteps: 2}.WithDefaults()
			in := spec.ChunkInput{RunID: "run/builds", Spec: s, Membership: m, Session: "run/builds/g1/e1", Token: "secret", From: 0, To: 2}
			if tc.known {
				in.DataSHA256 = mnistSumFor(t)
			}
			_, errs := runChunk(t, nodes, in)
			for i, err := range errs {
				var ae *temporal.ApplicationError
				var pf spec.PeerFailure
				switch {
				case !tc.want && err != nil:
					t.Errorf("node %d: %v; want it to train", i, err)
				case !tc.want:
				case !errors.As(err, &ae) || ae.Type() != spec.ErrTypePeerFailed || ae.Details(&pf) != nil:
					t.Errorf("node %d: %v; want PeerFailed", i, err)
				case pf.Rank != 1 || !strings.HasPrefix(pf.Unfit, "node node-2 runs an older cann-train build (chunk protocol 0, not 1") ||
					pf.Unfit != ae.Message():
					t.Errorf("node %d names rank %d, unfit %q; want rank 1 unfit for its build", i, pf.Rank, pf.Unfit)
				}
			}
		})
	}
}
