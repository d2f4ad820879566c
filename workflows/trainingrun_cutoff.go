package workflows

import (
	"fmt"
	"slices"

	"go.temporal.io/sdk/workflow"

	"github.com/cann-train/cann-train/spec"
)

// CutOff is RunState.CutOff: the nodes that could not read the checkpoint
// at Step in the run's last try while other nodes of the chunk read it.
type CutOff struct {
	Step  int64    `json:"step"`
	Nodes []string `json:"nodes"`
}

// versionCutOff: nodes that could not read the checkpoint their peers
// read, two tries in a row, are replaced (cutOff); before, the run held
// as for a storage down until an operator drained them. Asked only then.
const versionCutOff = "cut-off"

// cutOff reports whether f — a chunk that failed only because nodes could
// not read the checkpoint it restores — shows nodes cut off from the
// bucket: nodes that could not read it in the try before either, while
// other nodes read it both times (spec.CheckpointFailure.ReadBy: the
// ranks compared their reads). f then names them as the failed nodes,
// like nodes that do not reach the run's bucket (CheckpointNotHere): the
// run replaces them (a restart, as for any node lost), and the Cluster
// holds them failed until their leases have shown them alive for a TTL.
// The run itself takes them no more while their worker processes run
// (RunState.CutOffLeft, AcquireRequest.Shun): taken back, each would cost
// a hold and a restart again — until max_restarts failed the run —
// where a run short of nodes should wait for one, or train on fewer.
// The first time, the run holds as for its storage, saying who is
// replaced if it fails so again, and remembers them (RunState.CutOff): a
// bucket that throttles, or serves some requests and not others, fails a
// healthy node's read as easily once. A try that no node read (ReadBy
// empty) is the storage's fault: nothing is remembered.
func (r *run) cutOff(ctx workflow.Context, f *chunkFailure) bool {
	u, prev := f.unread, r.st.CutOff
	r.st.CutOff = nil
	if len(u.ReadBy) == 0 || len(u.Unread) == 0 {
		return false
	}
	var again, first []string
	for _, id := range u.Unread {
		if prev != nil && prev.Step == u.Step && slices.Contains(prev.Nodes, id) {
			again = append(again, id)
		} else {
			first = append(first, id)
		}
	}
	if len(again) == 0 || workflow.GetVersion(ctx, versionCutOff, workflow.DefaultVersion, 1) < 1 {
		r.st.CutOff = &CutOff{Step: u.Step, Nodes: u.Unread}
		f.reason += fmt.Sprintf("; the run replaces %s if the next try fails so again", spec.NodesWord(u.Unread))
		return false
	}
	if len(first) > 0 {
		r.st.CutOff = &CutOff{Step: u.Step, Nodes: first}
	}
	why := fmt.Sprintf("%s could not read the checkpoint at step %d in two tries in a row while %s read it: cut off from the bucket (%s)",
		spec.NodesWord(again), u.Step, spec.NodesWord(u.ReadBy), u.Error)
	for _, id := range again {
		f.addUnfit(id, why, false)
		if i := slices.IndexFunc(r.st.Membership.Nodes, func(n spec.Node) bool { return n.ID == id }); i >= 0 {
			n := r.st.Membership.Nodes[i]
			r.st.CutOffLeft = append(r.st.CutOffLeft, spec.NodeProcess{ID: n.ID, Incarnation: n.Incarnation})
		}
	}
	f.failed, f.reason, f.storageDown = again, why, false
	return true
}
