package activities

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/cann-train/cann-train/engine/checkpoint"
	"github.com/cann-train/cann-train/spec"
)

// TestTrainChunkNamesTheNodeCutOffFromTheBucket: in a new generation that
// restores the checkpoint at step 30, node-3 cannot reach the bucket (its
// route goes to an S3 endpoint nothing listens on) while node-1 and
// node-2 read the checkpoint. node-3 still joins the group to say so,
// and every rank fails the chunk alike, naming node-3 as the node that
// could not read it and the two that did — the run can tell a node cut
// off from the bucket from a storage down for all. When node-1 and
// node-3 both fail, node-2's read still names them both. And when every
// node speaks an older protocol, node-3 fails alone as before (its peers
// wait for it to join until their timeout).
func TestTrainChunkNamesTheNodeCutOffFromTheBucket(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "cann-train")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "cann-train-secret")
	dir := "file://" + t.TempDir()
	nodes, m := newNodes(t, 3, dir)
	s := spec.RunSpec{Name: "act", Nodes: 3, Steps: 60, ChunkSteps: 30}.WithDefaults()
	in := spec.ChunkInput{RunID: "run/act", Spec: s, Membership: m, Session: "run/act/g1/e1", Token: "tok", From: 0, To: 30, Checkpoint: true}
	res, errs := runChunk(t, nodes, in)
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	ref := res[0].Checkpoint
	if ref == nil {
		t.Fatal("no checkpoint at step 30")
	}
	// cutOff sends node i's reads of the run's bucket to an endpoint
	// nothing listens on.
	cutOff := func(i int) { useStore(nodes[i], ref.URL, deadRoute(t)) }
	cutOff(2)
	gen := int64(1)
	restore := func(old bool) []error {
		gen++
		rin := in
		rin.Membership.Generation, rin.Membership.Nodes = gen, slices.Clone(m.Nodes)
		if old {
			for i := range rin.Membership.Nodes {
				rin.Membership.Nodes[i].Protocol = spec.ChunkProtocolReadCheck - 1
			}
		}
		rin.Session = fmt.Sprintf("run/act/g%d/e1", gen)
		rin.From, rin.To, rin.Restore, rin.Checkpoint = 30, 60, ref, false
		_, errs := runChunk(t, nodes, rin)
		return errs
	}

	for _, tc := range []struct {
		name           string
		cut            int // a second node cut off (-1: none)
		unread, readBy []string
		own            []bool // whether node i's message is its own read's
	}{
		{name: "one node cut off", cut: -1, unread: []string{"node-3"}, readBy: []string{"node-1", "node-2"},
			own: []bool{false, false, true}},
		{name: "two nodes cut off", cut: 0, unread: []string{"node-1", "node-3"}, readBy: []string{"node-2"},
			own: []bool{true, false, true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.cut >= 0 {
				cutOff(tc.cut)
			}
			errs := restore(false)
			for i, err := range errs {
				var ae *temporal.ApplicationError
				var f spec.CheckpointFailure
				if !errors.As(err, &ae) || ae.Type() != spec.ErrTypeCheckpointUnreachable || ae.NonRetryable() || ae.Details(&f) != nil {
					t.Fatalf("node-%d: %v; want a retryable CheckpointUnreachable with its detail", i+1, err)
				}
				if !slices.Equal(f.Unread, tc.unread) || !slices.Equal(f.ReadBy, tc.readBy) || f.Step != 30 || f.Error != ae.Message() {
					t.Errorf("node-%d's detail %+v; want step 30, unread %v, read by %v, its message", i+1, f, tc.unread, tc.readBy)
				}
				read := "(node " + tc.readBy[0] + " read it)"
				if len(tc.readBy) > 1 {
					read = "(nodes " + strings.Join(tc.readBy, ", ") + " read it)"
				}
				if !strings.Contains(ae.Message(), read) {
					t.Errorf("node-%d says %q; want it to say %q", i+1, ae.Message(), read)
				}
				ownWords := fmt.Sprintf("node node-%d cannot read the checkpoint at step 30 from %s: ", i+1, dir)
				if got := strings.HasPrefix(ae.Message(), ownWords); got != tc.own[i] {
					t.Errorf("node-%d says %q; its own read's words: %v, want %v", i+1, ae.Message(), got, tc.own[i])
				}
			}
		})
	}

	// Nodes of an older build do not compare their reads: node-1's read
	// fails alone, its peers are left waiting for it to join (here until
	// their own connect timeout).
	for _, n := range nodes {
		n.connectWait, n.CheckpointRequestTimeout = 300*time.Millisecond, 500*time.Millisecond
	}
	errs = restore(true)
	wantLoadError(t, errs[0], spec.ErrTypeCheckpointUnreachable, "node node-1 cannot read the checkpoint at step 30")
	var f spec.CheckpointFailure
	var ae *temporal.ApplicationError
	if errors.As(errs[0], &ae); ae.Details(&f) != nil || len(f.Unread)+len(f.ReadBy) > 0 {
		t.Errorf("an older world's detail %+v; want no reads compared", f)
	}
	if !errors.As(errs[1], &ae) || ae.Type() != spec.ErrTypePeerFailed {
		t.Errorf("node-2 of an older world: %v; want it to give up waiting for node-1 (PeerFailed)", errs[1])
	}
}

// TestProbeReadSaysWhetherTheNodeReads: asked to read a run's checkpoint
// (ActivityProbeRead), a node that reaches the bucket answers nil; one
// whose route to it goes to an S3 endpoint nothing listens on answers
// CheckpointUnreachable in its own words; a checkpoint the bucket does
// not hold is no read either; an input without a checkpoint is refused.
func TestProbeReadSaysWhetherTheNodeReads(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "cann-train")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "cann-train-secret")
	dir := "file://" + t.TempDir()
	nodes, m := newNodes(t, 2, dir)
	s := spec.RunSpec{Name: "act", Nodes: 2, Steps: 30, ChunkSteps: 30}.WithDefaults()
	res, errs := runChunk(t, nodes, spec.ChunkInput{RunID: "run/act", Spec: s, Membership: m, Session: "run/act/g1/e1", Token: "tok",
		From: 0, To: 30, Checkpoint: true})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	ref := *res[0].Checkpoint
	useStore(nodes[1], ref.URL, deadRoute(t))
	missing := ref
	missing.Key, missing.Step = strings.Replace(ref.Key, "30", "90", 1), 90

	for _, tc := range []struct {
		name string
		node int
		ref  spec.CheckpointRef
		typ  string   // the error's type ("": nil)
		want []string // in its message
	}{
		{name: "reads it", node: 0, ref: ref},
		{name: "cut off", node: 1, ref: ref, typ: spec.ErrTypeCheckpointUnreachable,
			want: []string{"node node-2 cannot read the checkpoint at step 30 from " + dir}},
		// (The bucket holds the run's checkpoint at 30: this one is gone,
		// not out of the node's reach.)
		{name: "not in the bucket", node: 0, ref: missing, typ: spec.ErrTypeCheckpointGone,
			want: []string{"node node-1 does not find the run's checkpoint at step 90", "where the run's other checkpoints are"}},
		{name: "no checkpoint", node: 0, typ: "BadProbeInput", want: []string{"probe read: no checkpoint to read"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := probeRead(nodes[tc.node], spec.ProbeReadInput{RunID: "run/act", Checkpoint: tc.ref})
			if tc.typ == "" {
				if err != nil {
					t.Fatalf("node-%d: %v; want it to read the checkpoint", tc.node+1, err)
				}
				return
			}
			var ae *temporal.ApplicationError
			if !errors.As(err, &ae) || ae.Type() != tc.typ {
				t.Fatalf("node-%d: %v; want a %s", tc.node+1, err, tc.typ)
			}
			for _, w := range tc.want {
				if !strings.Contains(ae.Message(), w) {
					t.Errorf("message lacks %q: %s", w, ae.Message())
				}
			}
		})
	}
}

// deadRoute is a store whose requests go to an S3 endpoint nothing
// listens on: a node's route to a bucket cut (useStore gives it one).
func deadRoute(t *testing.T) *checkpoint.Store {
	t.Helper()
	dead, err := checkpoint.OpenWithOptions(t.Context(), "s3://ckpt?endpoint=http://127.0.0.1:1&use_path_style=true&region=us-east-1",
		checkpoint.Options{RequestTimeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dead.Close() })
	return dead
}

// probeRead runs n's ProbeRead as an activity.
func probeRead(n *Node, in spec.ProbeReadInput) error {
	var ts testsuite.WorkflowTestSuite
	env := ts.NewTestActivityEnvironment()
	env.RegisterActivityWithOptions(n.ProbeRead, activity.RegisterOptions{Name: spec.ActivityProbeRead})
	_, err := env.ExecuteActivity(spec.ActivityProbeRead, in)
	return err
}
