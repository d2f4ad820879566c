package spec

import (
	"fmt"
	"strings"
	"time"
)

// Names shared by workers, workflows and the CLI.
const (
	// ControlTaskQueue serves workflows and control activities.
	ControlTaskQueue = "cann-train"
	// DefaultClusterID is the workflow ID of the node registry.
	DefaultClusterID = "cann-train-cluster"
	// RunIDPrefix prefixes a TrainingRun's workflow ID: run/<name>.
	RunIDPrefix = "run/"

	// Workflow type names.
	WorkflowTrainingRun = "TrainingRun"
	WorkflowCluster     = "Cluster"

	// Activity type names.
	ActivityTrainChunk   = "TrainChunk"
	ActivityAcquireNodes = "AcquireNodes"
	// ActivityPlanCarbon reads the carbon signal, prices finished chunks
	// and plans the remaining work (control queue).
	ActivityPlanCarbon = "PlanCarbon"
	// ActivityProbeLinks measures every rank pair's links (node queues);
	// ActivityPlanTopology analyses them and picks the gradient
	// allreduce's algorithm (control queue).
	ActivityProbeLinks   = "ProbeLinks"
	ActivityPlanTopology = "PlanTopology"
	// ActivitySearchStrategy picks the data-parallel degree from the
	// scan's links and computation (control queue; strategy: auto).
	ActivitySearchStrategy = "SearchStrategy"
	// ActivityResolveCheckpoint looks up a checkpoint whose upload was
	// still in flight when its node was lost (control queue).
	ActivityResolveCheckpoint = "ResolveCheckpoint"
	// ActivityWriteReport stores a finished run's report next to its
	// checkpoints (control queue).
	ActivityWriteReport = "WriteReport"
	// ActivityEndedRuns says which of the runs holding nodes have ended
	// (control queue): the Cluster frees what a terminated run, which runs
	// no more code, still holds.
	ActivityEndedRuns = "EndedRuns"
	// ActivityCheckNodes asks a node worker which of other nodes' workers
	// are gone (their collective listeners refuse connections): a run
	// whose other ranks finished a chunk asks it about a rank that has
	// not reported (node queues).
	ActivityCheckNodes = "CheckNodes"
	// ActivityArmFault hands a signalled fault to a member node's worker
	// (its own task queue), so that it strikes inside the chunk in flight
	// too: a chunk's input is fixed when it starts.
	ActivityArmFault = "ArmFault"
	// ActivityEndChunk asks a node worker to end a run's chunk in flight
	// early, at a step its ranks agree on, with a checkpoint there
	// (EndChunkInput; node queues): a pause, drain or rescale signalled
	// during a long chunk takes effect within a second.
	ActivityEndChunk = "EndChunk"
	// ActivityRequestCheckpoint asks a node worker running a world of an
	// external job to have its processes checkpoint soon, at a step its
	// rank 0 is not past (CheckpointRequest; node queues; it returns that
	// step, 0 when it cannot ask): the helper's should_checkpoint() says
	// yes there. A pause or a drain then need not wait for the job's next
	// periodic checkpoint.
	ActivityRequestCheckpoint = "RequestCheckpoint"
	// ActivityFreeNodes asks the Cluster how many live free nodes an
	// acquire of a run could take now (QueryFree; control queue): a run
	// below its size ends a long chunk early when one is.
	ActivityFreeNodes = "FreeNodes"
	// ActivityProbeRead asks a node worker whether it reads a run's
	// checkpoint (ProbeReadInput; node queues; nil when it does): a run whose
	// external job's world could not launch because some nodes could not
	// read the checkpoint asks the world's other nodes, to tell a node cut
	// off from the bucket from a storage that serves nobody.
	ActivityProbeRead = "ProbeRead"
	// ActivityStoreKept asks an external job's first node to store the
	// checkpoint directory it kept when the bucket refused its upload
	// (StoreKeptInput → StoreKeptResult; node queues): a run that holds
	// for its storage stores it once the bucket takes writes again.
	ActivityStoreKept = "StoreKept"

	// Cluster signals, update and query.
	SignalRegister   = "register"
	SignalHeartbeat  = "heartbeat"
	SignalMarkFailed = "mark-failed"
	SignalRelease    = "release"
	// SignalDrain takes a node out of the pool (or puts it back): an
	// operator's maintenance, kept across the node's restarts.
	SignalDrain = "drain"
	// SignalWithdraw (payload Withdraw) ends the acquires of a run that
	// wait in the Cluster, taking nothing (ErrTypeAcquireWithdrawn): the
	// run was paused or rescaled while it waited for its first nodes.
	SignalWithdraw = "withdraw"
	UpdateAcquire  = "acquire"
	QueryNodes     = "nodes"
	// QueryRegistry answers the node records with the lease TTL they are
	// judged by (workflows.Registry).
	QueryRegistry = "registry"
	// QueryFree (argument: an AcquireRequest's RunID, DataSHA256 and
	// Leave) answers how many live free nodes an acquire of that run could
	// take now.
	QueryFree = "free"
	// UpdateHoldFree (argument: an AcquireRequest with Hold) holds up to
	// Count live free nodes for the run until Hold has passed, and
	// answers how many it held: other runs' acquires and QueryFree pass
	// them over meanwhile, so that a run that ends a chunk early to take
	// a node finds it still free at its chunk boundary. The run's next
	// acquire takes the nodes held for it first and ends the holds it did
	// not use; releasing its nodes ends them too.
	UpdateHoldFree = "hold-free"
	// UpdateForgetNode (payload ForgetNode) removes a node that no longer
	// exists from the registry: refused while a run holds it or its
	// worker renews its lease (`cann-train nodes forget`).
	UpdateForgetNode = "forget-node"

	// TrainingRun query and signals.
	QueryStatus = "status"
	// SignalInjectFault asks a node to SIGKILL (or SIGSTOP) itself at a
	// step (testing and demos; node workers honour it only with
	// --allow-fault-injection).
	SignalInjectFault = "inject-fault"
	// SignalPause holds the run at the next chunk boundary until
	// SignalResume; a resume also cuts a green-window wait short.
	SignalPause  = "pause"
	SignalResume = "resume"
	// SignalRescale (payload Rescale) changes the node count at the next
	// chunk boundary.
	SignalRescale = "rescale"
	// SignalGreenOverride (payload GreenOverride) ignores the green policy.
	SignalGreenOverride = "green-override"
	// SignalEvict (payload Evict): the Cluster tells a run that a node it
	// holds was drained; a built-in run moves off it at its next chunk
	// boundary.
	SignalEvict = "evict"

	// MemoCarbon is the memo key the run sets when its carbon budget
	// reaches BudgetAlertFraction.
	MemoCarbon = "carbon_budget"
)

// Application error types that activities return and workflows act on.
const (
	// ErrTypePeerFailed: the collective lost a peer; details carry a
	// PeerFailure.
	ErrTypePeerFailed = "PeerFailed"
	// ErrTypeTemporalUnreachable: the node's heartbeats did not reach
	// Temporal (a transient RPC error the SDK retried for about a second),
	// so the SDK stopped its activity: the node is alive, its chunk or
	// world stopped. No node is to blame.
	ErrTypeTemporalUnreachable = "TemporalUnreachable"
	// ErrTypeNoState: the node holds no state for the chunk's first step
	// and no checkpoint was given.
	ErrTypeNoState = "NoState"
	// ErrTypeCorruptCheckpoint: the checkpoint to restore failed its hash
	// or does not decode; the run falls back to the one before.
	ErrTypeCorruptCheckpoint = "CorruptCheckpoint"
	// ErrTypeDataMismatch: a run's nodes hold different data sets and no
	// majority agrees on one (non-retryable).
	ErrTypeDataMismatch = "DataMismatch"
	// ErrTypeNoSuchCheckpoint: ResolveCheckpoint found no committed
	// checkpoint at the step (yet: retryable for a caller that waits).
	ErrTypeNoSuchCheckpoint = "NoSuchCheckpoint"
	// ErrTypeRunFailed types a failed run's workflow error whose causes
	// carry no type of their own.
	ErrTypeRunFailed = "RunFailed"
	// ErrTypeNotEnoughNodes: the Cluster could not fill the request in time.
	ErrTypeNotEnoughNodes = "NotEnoughNodes"
	// ErrTypeCheckpointUnfit: the checkpoint to restore is sound (its
	// hashes hold) but was written by a run of another job — another
	// model, seed, learning rate, batch or optimizer — so the trainer
	// refuses it. Not retryable, and no node's fault: the run fails at
	// once, dropping no checkpoint (before, it was reported as corrupt,
	// and the run fell back past every good checkpoint in turn).
	ErrTypeCheckpointUnfit = "CheckpointUnfit"
	// ErrTypeClusterRollover: the Cluster is continuing as new; an acquire
	// waiting there (or arriving) ends with nothing taken, to be asked
	// again of the next run of the Cluster (AcquireNodes does).
	ErrTypeClusterRollover = "ClusterRollover"
	// ErrTypeAcquireWithdrawn: the run withdrew its waiting acquire
	// (SignalWithdraw); nothing was taken.
	ErrTypeAcquireWithdrawn = "AcquireWithdrawn"
	// ErrTypeCheckpointStorage: rank 0 trained the chunk but could not
	// store its checkpoint (the bucket refused the write: full,
	// unreachable, not allowed).
	ErrTypeCheckpointStorage = "CheckpointStorage"
	// ErrTypeBucketNotShared: a node cannot see the checkpoint another
	// node of the run committed (the two do not reach the same bucket:
	// mem://, or file:// on different hosts). Not retryable: a recovery
	// would need that checkpoint.
	ErrTypeBucketNotShared = "BucketNotShared"
	// ErrTypeCheckpointNotHere: the node does not find the checkpoint to
	// restore and has not seen the run's checkpoints in that bucket: it
	// does not reach the bucket the run's nodes share (a host without the
	// shared mount). The run replaces the node; the Cluster marks it failed
	// as for any loss (the bucket is the run's: other runs may use it).
	ErrTypeCheckpointNotHere = "CheckpointNotHere"
	// ErrTypeCheckpointGone: the node does not find the checkpoint to
	// restore in a bucket where it found the run's checkpoints before: it
	// was deleted. The run falls back to the one before, as from a
	// corrupt one.
	ErrTypeCheckpointGone = "CheckpointGone"
	// ErrTypeCheckpointUnreachable: the node could not read the
	// checkpoint to restore — the bucket failed the request or did not
	// answer in time (an outage, expired credentials), not that the
	// checkpoint is missing or corrupt. Its detail is a CheckpointFailure
	// naming the step. The run blames no node and holds until the storage
	// serves it.
	ErrTypeCheckpointUnreachable = "CheckpointUnreachable"
	// ErrTypeNodeUnfit: the node cannot serve the run as it is set up (no
	// data set for the built-in model, a work directory it cannot write
	// for an external job). The run replaces it, and the
	// Cluster keeps it failed until its worker registers again. (NoData,
	// its type before, failed the run.)
	ErrTypeNodeUnfit = "NodeUnfit"
	// ErrTypeNothingKept: asked to store a checkpoint it kept
	// (ActivityStoreKept), the node keeps none at that step, or the one
	// it kept no longer matches its hash (its disk was wiped or
	// replaced). The run goes back to its last stored checkpoint.
	ErrTypeNothingKept = "NothingKept"
)

// Search attributes the workflows upsert; registered when the dev server
// starts and by `cann-train worker` on a real cluster.
const (
	SearchAttrModel  = "CannModel"  // Keyword
	SearchAttrNodes  = "CannNodes"  // Int
	SearchAttrStep   = "CannStep"   // Int
	SearchAttrStatus = "CannStatus" // Keyword
	// SearchAttrStrategy is the parallel strategy: "auto dp=2" once the
	// search chose, "fixed dp=3" for a job that fixed it, "external" for
	// a job's own script.
	SearchAttrStrategy = "CannStrategy" // Keyword
)

// NodeTaskQueue is the task queue a node worker serves.
func NodeTaskQueue(nodeID string) string { return "cann-train/node/" + nodeID }

// Node is one machine (or process) that runs a TrainChunk activity and hosts
// its rank(s).
type Node struct {
	ID        string `json:"id"`
	TaskQueue string `json:"task_queue"`
	// CommAddr is host:port of the node's collective listener.
	CommAddr string `json:"comm_addr"`
	Host     string `json:"host"`
	// Devices is how many ranks the node hosts (1 on CPU nodes).
	Devices int `json:"devices"`
	// DeviceIPs are the node's NPU NIC addresses by device id (from
	// /etc/hccn.conf; empty elsewhere): an external job's HCCL rank table
	// lists them, else the node's host address.
	DeviceIPs []string `json:"device_ips,omitempty"`
	// NPUIDs are the physical NPU ids (device ids, /dev/davinci<N>) the
	// node's worker drives, in the order its processes take them
	// (`worker node --npu-ids`, else npu-smi's healthy chips; empty where
	// neither names any, and from workers before it): an ascend launch
	// gives local rank i NPUIDs[i] as DEVICE_ID, ASCEND_DEVICE_ID and its
	// rank-table device_id (device_ip DeviceIPs[NPUIDs[i]]); without
	// them, 0..procs_per_node-1.
	NPUIDs []int `json:"npu_ids,omitempty"`
	// Incarnation is new each time the node's worker process starts, so
	// that the Cluster can tell a worker restarted under the same ID from
	// the process a run saw fail (empty from workers before it existed).
	Incarnation string `json:"incarnation,omitempty"`
	// DataSHA256 fingerprints the built-in model's data set the worker
	// loaded when it started (ChunkInput.DataSHA256's form; empty: none,
	// or a worker from before nodes said): `cann-train nodes` shows it,
	// and a run that knows its data set takes no free node holding
	// another (AcquireRequest.DataSHA256).
	DataSHA256 string `json:"data_sha256,omitempty"`
	// Protocol is the ChunkProtocolVersion of the worker's build (0 from
	// workers before it: see ChunkProtocol).
	Protocol int `json:"protocol,omitempty"`
	// FaultInjection says whether the worker takes `cann-train fault`
	// (FaultsAllowed, FaultsRefused; empty from workers before it said).
	FaultInjection string `json:"fault_injection,omitempty"`
	// CheckpointURL is the worker's default checkpoint bucket (its
	// --checkpoint-url, a password in it masked), where a run without a
	// checkpoint_url of its own keeps its checkpoints: `cann-train run`
	// looks there for an earlier run's (empty from workers before it
	// said).
	CheckpointURL string `json:"checkpoint_url,omitempty"`
}

// Node.FaultInjection values.
const (
	FaultsAllowed = "allowed" // the worker runs with --allow-fault-injection
	FaultsRefused = "refused"
)

// ShortSHA256 is a fingerprint's first 12 hex digits, as messages and
// tables show it to people.
func ShortSHA256(sum string) string { return sum[:min(12, len(sum))] }

// NodeAsk is how a run waiting for a free node asks the Cluster for one
// (RunStatus.NodeAsk).
type NodeAsk struct {
	// Why the run wants a node ("growing back to 3 nodes", "replacing
	// node-2").
	Why string `json:"why"`
	// Next is when it asks next: at the first chunk boundary from then
	// on, or — on chunk_protocol 2 nodes — while a chunk trains, where a
	// free node ends the chunk early. Zero while an ask waits.
	Next time.Time `json:"next,omitzero"`
	// WaitingSince: an ask has waited since then for a node to come free
	// (it looks every few seconds).
	WaitingSince time.Time `json:"waiting_since,omitzero"`
}

// ChunkProtocolVersion is what this build's TrainChunk does besides
// training that the other nodes of a run must do too:
//   - 1 (ChunkProtocolDataCheck): a run's first chunk compares the nodes'
//     data sets (an allgather before training). Nodes of a run whose
//     first chunk speaks different versions would wait for each other
//     until their timeouts; the newer ones refuse the older at once
//     instead (their workers must be upgraded).
//   - 2 (ChunkProtocolEndEarly): the ranks vote, every fraction of a
//     second, on ending the chunk before its last step — a node whose
//     worker stops asks (ChunkResult.EndedBy), and so does one the run
//     asked to (ActivityEndChunk) — and the chunk ends with a checkpoint
//     at the step they agree on. They vote only when every node of the
//     membership speaks it, and the run asks only then.
//   - 3 (ChunkProtocolCheckpointRequest): an external job's world takes
//     checkpoint requests (ActivityRequestCheckpoint): each node worker
//     writes the step to its processes' request file (EnvRequestFile),
//     where the helper's should_checkpoint() finds it. The run asks only
//     when every node of the membership speaks it.
//   - 4 (ChunkProtocolReadCheck): the ranks of a chunk that restores a
//     checkpoint tell each other whether they read it (an allgather once
//     the group has formed): a rank whose read failed joins the group to
//     say so, and every rank then fails the chunk as CheckpointUnreachable
//     naming the nodes that could not read it and those that did
//     (CheckpointFailure.Unread, ReadBy) — a node cut off from a bucket
//     its peers read, or a storage that fails them all. Only when every
//     node of the membership speaks it.
//   - 5 (ChunkProtocolSaver): a save-only chunk's checkpoint is stored
//     by the node ChunkInput.Saver names (its first rank), not always
//     rank 0's: a run whose rank 0 cannot write to the bucket tries its
//     other nodes. Only when every node of the membership speaks it.
//   - 6 (ChunkProtocolReadProbe): the node worker answers whether it
//     reads a run's checkpoint (ActivityProbeRead: from its restore in
//     the world asked about, else by reading it). An external job's nodes
//     restore its checkpoint directory before the world forms, with no
//     group to compare reads in: when some could not, the run asks the
//     others that speak it whether they can. Per node: one that does not
//     is not asked.
//   - 7 (ChunkProtocolStoreKept): an external job's first node, asked to
//     (ExternalInput.KeepRefused), keeps on its disk the checkpoint
//     directory of an upload the bucket refused (CheckpointSaved.Kept;
//     a refused final upload is then the world's result,
//     ChunkResult.CheckpointFailed, not its error) and stores it when the
//     run asks (ActivityStoreKept). Only the first node's matters.
const ChunkProtocolVersion = 7

// The chunk protocol versions, by what each added (ChunkProtocolVersion).
const (
	ChunkProtocolDataCheck         = 1
	ChunkProtocolEndEarly          = 2
	ChunkProtocolCheckpointRequest = 3
	ChunkProtocolReadCheck         = 4
	ChunkProtocolSaver             = 5
	ChunkProtocolReadProbe         = 6
	ChunkProtocolStoreKept         = 7
)

// ChunkProtocol is the chunk protocol n's worker speaks: Protocol when it
// said, else 1 when it registered a data set (builds that did compared
// them) and 0 when not.
func (n Node) ChunkProtocol() int {
	switch {
	case n.Protocol > 0:
		return n.Protocol
	case n.DataSHA256 != "":
		return 1
	}
	return 0
}

// Membership is the set of nodes of one run generation; rank i runs on
// Nodes[i]. A new generation starts after every membership change.
type Membership struct {
	Generation int64  `json:"generation"`
	Nodes      []Node `json:"nodes"`
}

// EndsEarly reports whether every node of m speaks ChunkProtocolEndEarly:
// its chunks' ranks vote on ending a chunk early, and its run may ask them
// to (ActivityEndChunk).
func (m Membership) EndsEarly() bool { return m.speaks(ChunkProtocolEndEarly) }

// TakesCheckpointRequests reports whether every node of m speaks
// ChunkProtocolCheckpointRequest: its run may ask an external job's world
// for a checkpoint (ActivityRequestCheckpoint).
func (m Membership) TakesCheckpointRequests() bool {
	return m.speaks(ChunkProtocolCheckpointRequest)
}

// ComparesReads reports whether every node of m speaks
// ChunkProtocolReadCheck: the ranks of a chunk restoring a checkpoint
// compare their reads of it.
func (m Membership) ComparesReads() bool { return m.speaks(ChunkProtocolReadCheck) }

// AnySaver reports whether every node of m speaks ChunkProtocolSaver: a
// save-only chunk may have another node than rank 0's store its
// checkpoint (ChunkInput.Saver).
func (m Membership) AnySaver() bool { return m.speaks(ChunkProtocolSaver) }

// speaks reports whether m has nodes and every one speaks protocol p.
func (m Membership) speaks(p int) bool {
	for _, nd := range m.Nodes {
		if nd.ChunkProtocol() < p {
			return false
		}
	}
	return len(m.Nodes) > 0
}

// NodeIDs lists the members' IDs in rank order.
func (m Membership) NodeIDs() []string {
	ids := make([]string, len(m.Nodes))
	for i, n := range m.Nodes {
		ids[i] = n.ID
	}
	return ids
}

// HostShares is how many nodes of m run on rank's host (same Host), each
// of which reports an equal share of the host meter's energy, so that the
// run's sum counts the host once. A host meter sees everything the host
// draws: for the built-in CPU engine that is the training, on an
// accelerator host the devices a meter covers. Out of range: 1.
func (m Membership) HostShares(rank int) int {
	if rank < 0 || rank >= len(m.Nodes) {
		return 1
	}
	k := 0
	for _, nd := range m.Nodes {
		if nd.Host == m.Nodes[rank].Host {
			k++
		}
	}
	return max(k, 1)
}

// NodeProcess names one worker process of a node: the node's ID and the
// Incarnation the process registered with (empty: any of the node's).
type NodeProcess struct {
	ID          string `json:"id"`
	Incarnation string `json:"incarnation,omitempty"`
}

// Is reports whether n is the worker process p names.
func (p NodeProcess) Is(n Node) bool {
	return p.ID == n.ID && (p.Incarnation == "" || p.Incarnation == n.Incarnation)
}

// AcquireRequest asks the Cluster for nodes for a run. It is idempotent: the
// run's healthy nodes are kept in their ranks and holes are filled.
type AcquireRequest struct {
	RunID string `json:"run_id"`
	Count int    `json:"count"`
	// MinCount, when in [1, Count), lets the Cluster answer at once with
	// fewer nodes — every live node the run holds or can take, at least
	// MinCount, healthy ones first in their rank order — instead of
	// waiting for Count (a run shrinking after a failure without spares).
	MinCount int `json:"min_count,omitempty"`
	// Wait bounds how long the Cluster waits for enough live nodes.
	Wait time.Duration `json:"wait"`
	// Failed are failures the Cluster records first (a run replacing the
	// nodes it lost says so in the same request: a separate mark-failed
	// signal costs the run a round trip to know it arrived first).
	Failed []MarkFailed `json:"failed,omitempty"`
	// DataSHA256 is the data set the run trains on, once its nodes
	// confirmed it: a free node that registered another (Node.DataSHA256)
	// is not handed out — it would refuse the run's chunks as unfit and
	// cost a restart. Nodes that registered none are.
	DataSHA256 string `json:"data_sha256,omitempty"`
	// PreferDataSHA256 is the data set the run's job pins
	// (RunSpec.DataSHA256) while its nodes have not confirmed one: free
	// nodes that registered it are handed out first, then those that
	// registered none, then the others (their first chunk then says
	// whether any node holds the pin; see ErrTypeDataMismatch).
	PreferDataSHA256 string `json:"prefer_data_sha256,omitempty"`
	// SameData: the run trains on the built-in model's data but knows no
	// data set yet (no pin, none confirmed): free nodes that registered
	// the set most live free nodes registered are handed out first, then
	// those that registered none, then the others — a pick across data
	// sets costs a restart at its first chunk, or fails the run where no
	// majority holds one.
	SameData bool `json:"same_data,omitempty"`
	// RecheckHeld: nodes the run holds are held to DataSHA256 too — one
	// whose worker registered again with another data set since the run
	// took it is dropped from its rank (and stays free for runs on its
	// data) instead of refusing the run's next chunk.
	RecheckHeld bool `json:"recheck_held,omitempty"`
	// Leave are nodes the run holds and gives back in this request (its
	// slow nodes, slow_node: replace): they are free again for other
	// runs but fill none of this request's ranks.
	Leave []string `json:"leave,omitempty"`
	// Avoid are nodes the run left for being slow (Leave, earlier): free
	// ones fill its ranks only when no other free node can.
	Avoid []string `json:"avoid,omitempty"`
	// Shun are worker processes of nodes the run found cut off from its
	// checkpoint bucket: not handed to it (nor counted or held for it)
	// while that process runs. The node's worker registering again — a
	// new incarnation, perhaps with its route mended — ends it; other
	// runs, on other buckets, may take the node meanwhile.
	Shun []NodeProcess `json:"shun,omitempty"`
	// Hold, in a FreeNodes ask, has the free nodes found held for the run
	// that long (UpdateHoldFree).
	Hold time.Duration `json:"hold,omitempty"`
}

// ReasonWorkerStopped is the MarkFailed reason of a node whose worker
// stopped on purpose (SIGTERM, Ctrl-C) and told the Cluster so.
const ReasonWorkerStopped = "worker stopped"

// MarkFailed tells the Cluster a node is not to be used again.
type MarkFailed struct {
	NodeID string `json:"node_id"`
	RunID  string `json:"run_id"`
	Reason string `json:"reason"`
	// Incarnation is the worker process that failed (Node.Incarnation as
	// the run or the worker knew it). When the node has registered again
	// since, as another process, that one is healthy: the Cluster only
	// takes the node from the run. Empty: whichever process holds the ID.
	Incarnation string `json:"incarnation,omitempty"`
	// Misconfigured: the node is alive but cannot serve any run of the
	// kind as it is (no data set for the built-in model). Its lease
	// renewals do not reinstate it, as they do a node blamed by mistake;
	// its worker registering again (restarted, fixed) does.
	Misconfigured bool `json:"misconfigured,omitempty"`
	// OtherData: the node is fit, but registered (Node.DataSHA256)
	// another data set than the run's. The Cluster takes it from the run
	// and keeps it free for runs on its data set: the run's next
	// acquires (AcquireRequest.DataSHA256) pass it over.
	OtherData bool `json:"other_data,omitempty"`
}

// DataDisagreement is the detail of a NodeUnfit error from a node whose
// data set is not the run's: the run's (the one its job pins, or the
// one most of its nodes hold) and the node's, as SHA-256 fingerprints.
type DataDisagreement struct {
	Run  string `json:"run"`
	Node string `json:"node"`
}

// Drain takes NodeID out of the pool (Drained) or puts it back. A run
// holding the node is told (SignalEvict); a built-in run replaces it at its
// next chunk boundary, an external job after its next checkpoint upload.
type Drain struct {
	NodeID  string `json:"node_id"`
	Drained bool   `json:"drained"`
	Reason  string `json:"reason,omitempty"`
}

// Evict is the SignalEvict payload: NodeID, which the run holds, was
// drained for Reason — or, with Undrained, put back before the run left it
// (the run keeps it).
type Evict struct {
	NodeID    string `json:"node_id"`
	Reason    string `json:"reason,omitempty"`
	Undrained bool   `json:"undrained,omitempty"`
	// Leave: the run itself moves off the node (a slow node, slow_node:
	// replace), which is not drained: the run's acquire request names it
	// (AcquireRequest.Leave), and only a free node takes its rank.
	Leave bool `json:"leave,omitempty"`
	// Stopping: the node's worker is stopping (the Cluster tells; it
	// ends a built-in chunk in flight itself, at its ranks' vote).
	Stopping bool `json:"stopping,omitempty"`
}

// Release returns a run's nodes to the pool.
type Release struct {
	RunID string `json:"run_id"`
}

// Withdraw ends a run's acquires waiting in the Cluster
// (SignalWithdraw).
type Withdraw struct {
	RunID string `json:"run_id"`
}

// EndedRun is a run, by workflow ID, that has ended, and How: its
// execution status in lower case ("terminated", "completed", …) or
// "deleted" when the server no longer knows it.
type EndedRun struct {
	RunID string `json:"run_id"`
	How   string `json:"how"`
}

// NodeHeartbeat renews a node's lease.
type NodeHeartbeat struct {
	NodeID string `json:"node_id"`
	// Incarnation is the renewing worker process's (empty from older
	// workers): the Cluster takes no lease renewal from another process
	// than the one registered (a second worker with the same --id).
	Incarnation string `json:"incarnation,omitempty"`
	// Node is the renewing worker's registration (spec.SignalRegister's):
	// a registry that does not know the node — reset, or started anew
	// after Temporal lost its state, by another node's registration —
	// registers it from this (empty from older workers, whose renewals
	// such a registry ignores).
	Node *Node `json:"node,omitempty"`
}

// CheckpointRef names one committed checkpoint in blob storage.
type CheckpointRef struct {
	URL    string `json:"url"` // bucket URL
	Run    string `json:"run"`
	Step   int64  `json:"step"`
	Key    string `json:"key"` // manifest key in the bucket
	SHA256 string `json:"sha256"`
	Bytes  int64  `json:"bytes"`
}

// ChunkInput is what one node's TrainChunk activity needs for steps [From, To).
type ChunkInput struct {
	RunID      string     `json:"run_id"`
	Spec       RunSpec    `json:"spec"`
	Membership Membership `json:"membership"`
	Rank       int        `json:"rank"`
	// Session names this communicator instance; unique per chunk attempt.
	Session string `json:"session"`
	// Token authenticates peers of this run (hex).
	Token   string         `json:"token"`
	From    int64          `json:"from"`
	To      int64          `json:"to"`
	Restore *CheckpointRef `json:"restore,omitempty"`
	// Checkpoint asks rank 0 to save a checkpoint at To. With From ==
	// To (and no AsyncCheckpoint) the chunk trains nothing and only
	// saves the state its nodes kept at that step: the run stores again
	// a checkpoint the storage refused (ReportStorageFailure).
	Checkpoint bool `json:"checkpoint"`
	// Saver, in a save-only chunk of nodes that all speak
	// ChunkProtocolSaver, is the node (by rank in Membership) whose
	// first rank stores the checkpoint instead of rank 0: every rank
	// holds the whole state. 0: rank 0.
	Saver int `json:"saver,omitempty"`
	// ReportStorageFailure: a checkpoint the bucket refuses does not fail
	// the chunk; its result says so (ChunkResult.CheckpointFailed at To)
	// and the nodes keep the state they reached, for a save-only chunk
	// to store it once the bucket takes it again.
	ReportStorageFailure bool `json:"report_storage_failure,omitempty"`
	// AsyncCheckpoint lets rank 0 upload that checkpoint in the background
	// and return at once (ChunkResult.PendingCheckpoint); the next chunk
	// on the node reports it committed (EarlierCheckpoint).
	AsyncCheckpoint bool `json:"async_checkpoint,omitempty"`
	// Evaluate asks rank 0 to evaluate on the held-out set at To.
	Evaluate bool `json:"evaluate"`
	// KillAtStep, when in (From, To], asks the node to SIGKILL itself once
	// that global step completes (fault injection; see SignalInjectFault).
	KillAtStep int64 `json:"kill_at_step,omitempty"`
	// Freeze makes that fault a SIGSTOP: the process hangs, its sockets
	// open, as a node stuck in a driver call does.
	Freeze bool `json:"freeze,omitempty"`
	// GlobalBatch is the run's global batch (samples per step over all
	// ranks), fixed at the start: after a rescale each rank takes
	// GlobalBatch / world samples. 0: BatchPerRank × world.
	GlobalBatch int `json:"global_batch,omitempty"`
	// Schedule is the batch controller's changes so far (green.batch):
	// from each FromStep on, that global batch and learning rate. Every
	// chunk carries the whole schedule: the data position of a step
	// depends on every batch before it.
	Schedule []BatchChange `json:"schedule,omitempty"`
	// Algorithm is the gradient allreduce's algorithm (ascend names: ring,
	// hd, rd, tree, hier); empty means ring.
	Algorithm string `json:"algorithm,omitempty"`
	// Codec is the codec an auto compression policy decided after the
	// warm-up ("" while undecided; see SyncStatus).
	Codec string `json:"codec,omitempty"`
	// Calibrate asks an undecided auto codec's ranks to time every
	// codec's exchange at the chunk's end, as the warm-up's last chunk
	// does: a run resumed past its warm-up before the decision measures
	// afresh (its earlier measurements are gone).
	Calibrate bool `json:"calibrate,omitempty"`
	// DataSHA256 is the fingerprint of the data set the run trains on
	// (engine.Dataset.SHA256 of the training and test sets: the run's
	// first chunk's, where every node agreed); a node whose data differs
	// is unfit (NodeUnfit). Empty at the run's first chunk: its ranks
	// compare theirs and the odd ones out are unfit.
	DataSHA256 string `json:"data_sha256,omitempty"`
}

// Fault kinds of InjectFault.
const (
	// FaultKill: the node SIGKILLs itself (a power cut). The default.
	FaultKill = "kill"
	// FaultFreeze: the node SIGSTOPs itself and hangs, its connections
	// open and its listener accepting, until something kills it.
	FaultFreeze = "freeze"
)

// Resumption is an earlier run of a name that a later one continued from
// its last checkpoint.
type Resumption struct {
	// Phase and Error are how the earlier run ended; Step its last step.
	Phase Phase  `json:"status"`
	Error string `json:"error,omitempty"`
	Step  int64  `json:"step"`
	// FromStep is the checkpoint the later run started from.
	FromStep int64 `json:"from_step"`
	// At is when the later run started.
	At time.Time `json:"at"`
	// DataSHA256 is the data set the earlier run trained on (its
	// RunStatus.DataSHA256): the later run's nodes compare theirs afresh,
	// and a change is named in its status.
	DataSHA256 string `json:"data_sha256,omitempty"`
	// Recoveries is how many recoveries the earlier run's status carried
	// over: theirs are closed (the later run's first step is not theirs).
	Recoveries int `json:"recoveries,omitempty"`
}

// NodesWord names nodes in a sentence: "node a", "nodes a, b".
func NodesWord(ids []string) string {
	if len(ids) == 1 {
		return "node " + ids[0]
	}
	return "nodes " + strings.Join(ids, ", ")
}

// CheckpointFailure is a checkpoint that could not be stored, or read
// (CheckpointUnreachable).
type CheckpointFailure struct {
	Step  int64  `json:"step"`
	Error string `json:"error"`
	// Unread and ReadBy, for a checkpoint that the ranks of a chunk
	// restoring it compared their reads of (ChunkProtocolReadCheck): the
	// nodes with a rank that could not read it, and the nodes whose
	// ranks read it from the bucket (a rank that kept its state read
	// nothing). Unread with ReadBy empty: the storage failed every node
	// that tried.
	Unread []string `json:"unread,omitempty"`
	ReadBy []string `json:"read_by,omitempty"`
}

// InjectFault is the SignalInjectFault payload.
type InjectFault struct {
	NodeID string `json:"node_id"`
	AtStep int64  `json:"at_step"`
	// Kind is FaultKill (also when empty) or FaultFreeze.
	Kind string `json:"kind,omitempty"`
}

// ArmFaultInput is the ActivityArmFault input: the node keeps the fault
// and strikes once a chunk of the run completes its step, also a chunk
// already running when it is armed.
type ArmFaultInput struct {
	RunID string      `json:"run_id"`
	Fault InjectFault `json:"fault"`
}

// EndChunkInput is the ActivityEndChunk input: the chunk is the one of
// Session (ChunkInput.Session), in flight or about to start on the node;
// Why says what asked (a pause, a drain), for the node's log.
type EndChunkInput struct {
	RunID   string `json:"run_id"`
	Session string `json:"session"`
	Why     string `json:"why,omitempty"`
}

// ProbeReadInput is ActivityProbeRead's input: read run RunID's
// checkpoint Checkpoint from its bucket. Session, when set, is the world
// that failed to restore it: a node whose part of that world restored it
// need not read it again.
type ProbeReadInput struct {
	RunID      string        `json:"run_id"`
	Checkpoint CheckpointRef `json:"checkpoint"`
	Session    string        `json:"session,omitempty"`
}

// KeptCheckpoint is a checkpoint the bucket refused that a node keeps on
// its disk: its step, the node and the file.
type KeptCheckpoint struct {
	Step int64  `json:"step"`
	Node string `json:"node"`
	File string `json:"file"`
}

// StoreKeptInput is ActivityStoreKept's input: store the checkpoint
// directory at Step that the node kept for run RunID (its spec Spec names
// the bucket and the retention) when the bucket refused it in world
// Session.
type StoreKeptInput struct {
	RunID   string  `json:"run_id"`
	Spec    RunSpec `json:"spec"`
	Step    int64   `json:"step"`
	Session string  `json:"session,omitempty"`
}

// StoreKeptResult is ActivityStoreKept's answer: the checkpoint stored,
// or why the bucket refused it again (the node keeps it still).
type StoreKeptResult struct {
	Checkpoint *CheckpointRef     `json:"checkpoint,omitempty"`
	Failed     *CheckpointFailure `json:"failed,omitempty"`
	// Kept is, with Failed, the file on the node that keeps the refused
	// checkpoint (for `cann-train checkpoint store-kept`).
	Kept string `json:"kept,omitempty"`
}

// CheckpointRequest is ActivityRequestCheckpoint's input: the run's
// world Session should checkpoint at Step. Step 0 asks the node to pick
// the step (the world's first node, whose rank 0 commits checkpoints):
// far enough ahead of its processes that the run can tell the other
// nodes before their ranks reach it.
type CheckpointRequest struct {
	RunID   string `json:"run_id"`
	Session string `json:"session"`
	Step    int64  `json:"step,omitempty"`
	Why     string `json:"why,omitempty"`
	// StopUnreported: the run stops at once a world whose processes have
	// reported no step since their launch, rather than wait for its next
	// checkpoint; the node answers StepUnreported for such a world then
	// (else 0, as before: runs that do not set it stop no world on it).
	StopUnreported bool `json:"stop_unreported,omitempty"`
}

// StepUnreported is ActivityRequestCheckpoint's answer, when asked with
// CheckpointRequest.StopUnreported, for a world whose processes have
// reported no step (nor committed a checkpoint) since their launch: still
// starting, it has nothing to lose by stopping now.
const StepUnreported int64 = -1

// Freeze reports whether the fault hangs the node instead of killing it.
func (f InjectFault) Freeze() bool { return f.Kind == FaultFreeze }

// Validate checks the fault's kind.
func (f InjectFault) Validate() error {
	switch f.Kind {
	case "", FaultKill, FaultFreeze:
		return nil
	}
	return fmt.Errorf("fault kind %q: want %s or %s", f.Kind, FaultKill, FaultFreeze)
}

// ChunkProgress is the heartbeat detail of a running chunk.
type ChunkProgress struct {
	Step int64 `json:"step"` // steps completed so far (global step)
	To   int64 `json:"to"`
	// Loss, SamplesPerSec and CommShare are left out of the JSON (the
	// heartbeat details the Web UI shows) until measured: a chunk's first
	// beat, the only one of a chunk shorter than the worker's heartbeat
	// throttle, read "loss 0" otherwise.
	Loss          float32 `json:"loss,omitzero"`
	SamplesPerSec float64 `json:"samples_per_sec,omitzero"`
	// CommShare is the fraction of step time spent in collectives.
	CommShare      float64 `json:"comm_share,omitzero"`
	LastCheckpoint int64   `json:"last_checkpoint"`
	// FirstStepAt: the launch's (or chunk's) first step completed on this
	// node; zero before it. The status reads it to time a recovery whose
	// launch is still running (the workflow records it when it ends).
	FirstStepAt time.Time `json:"first_step_at,omitzero"`
	// At is when the node had Step (its clock): the status tells a chunk
	// or script that stopped stepping by its age.
	At time.Time `json:"at,omitzero"`
	// Storing is the step of a checkpoint the node is storing (0: none):
	// the chunk's own, saved before the chunk ends, or an earlier chunk's
	// whose background upload it waits for; StoringSince is when it began
	// (its clock). A status says so rather than guess it from a chunk
	// stepped to its end and silent since.
	Storing      int64     `json:"storing,omitzero"`
	StoringSince time.Time `json:"storing_since,omitzero"`
}

// ChunkResult is one node's report for a finished chunk.
type ChunkResult struct {
	NodeID        string         `json:"node_id"`
	Rank          int            `json:"rank"`
	From          int64          `json:"from"`
	To            int64          `json:"to"`
	FirstLoss     float32        `json:"first_loss"`
	LastLoss      float32        `json:"last_loss"`
	Seconds       float64        `json:"seconds"`
	SamplesPerSec float64        `json:"samples_per_sec"`
	CommShare     float64        `json:"comm_share"`
	Checkpoint    *CheckpointRef `json:"checkpoint,omitempty"`
	// PendingCheckpoint is a checkpoint still uploading when the chunk
	// ended (AsyncCheckpoint; Key empty); EarlierCheckpoint is an earlier
	// chunk's pending checkpoint, now committed.
	PendingCheckpoint *CheckpointRef `json:"pending_checkpoint,omitempty"`
	EarlierCheckpoint *CheckpointRef `json:"earlier_checkpoint,omitempty"`
	// CheckpointFailed is an earlier chunk's pending checkpoint whose
	// upload failed (the run keeps its older ones), or this chunk's own
	// (Step = To: ReportStorageFailure); for an external job's world, its
	// final upload, refused and kept (ExternalInput.KeepRefused).
	CheckpointFailed *CheckpointFailure `json:"checkpoint_failed,omitempty"`
	// EvalMetric names EvalValue, e.g. "test_accuracy"; empty when the
	// chunk did not evaluate.
	EvalMetric    string  `json:"eval_metric,omitempty"`
	EvalValue     float64 `json:"eval_value,omitempty"`
	WeightsSHA256 string  `json:"weights_sha256"`
	// DataSHA256 is the fingerprint of the node's data set
	// (ChunkInput.DataSHA256); empty from an external job.
	DataSHA256 string    `json:"data_sha256,omitempty"`
	StartedAt  time.Time `json:"started_at"`
	// FirstStepAt: the chunk's first step completed.
	FirstStepAt time.Time `json:"first_step_at"`
	EndedAt     time.Time `json:"ended_at"`
	// Cores is how many cores the node's worker computes on (its
	// GOMAXPROCS: the CPUs it may use, a container's quota included);
	// built-in model only.
	Cores int `json:"cores,omitempty"`
	// Joules is the node's measured energy for the chunk (facility
	// energy, PUE included); 0 when the node has no meter.
	Joules float64 `json:"joules,omitempty"`
	// Sync is how the chunk averaged gradients (runs with an optimizer,
	// compression or overlap policy).
	Sync *ChunkSync `json:"sync,omitempty"`
	// EndedBy, when set, is the node whose worker was stopping: the
	// chunk's ranks agreed to end it at To, before the step it was to
	// reach, with a checkpoint there (ChunkProtocolEndEarly).
	EndedBy string `json:"ended_by,omitempty"`
	// Stopping: this rank's node's worker was stopping too when the chunk
	// ended early (EndedBy names one stopping node of the chunk; several
	// may stop at once, as in a rolling restart of several hosts).
	Stopping bool `json:"stopping,omitempty"`
}

// PeerFailure is the detail of a PeerFailed error: whom a rank lost, at
// which step, and when it noticed. Rank -1 names nobody: a peer hung up
// while the group formed but is alive (it left because another rank
// failed; that rank's other peers name it).
type PeerFailure struct {
	Rank      int       `json:"rank"`
	Step      int64     `json:"step"`
	NoticedAt time.Time `json:"noticed_at"`
	// Data, when the rank's node holds another data set than the run's,
	// names both (the node's own NodeUnfit says it too, but it may be
	// cancelled before it reports).
	Data *DataDisagreement `json:"data,omitempty"`
	// Unfit, when set, says why the rank's node cannot serve the run, as
	// its peers found it before any collective (it runs an older build):
	// the run fails it as misconfigured, in these words.
	Unfit string `json:"unfit,omitempty"`
}

// CheckNodesInput asks a node worker whether the workers of some of a
// membership's nodes are alive.
type CheckNodesInput struct {
	Membership Membership `json:"membership"`
	// Ranks are the nodes (by rank) to ask about.
	Ranks []int `json:"ranks"`
}

// Recovery records one replacement of failed nodes.
type Recovery struct {
	Generation  int64    `json:"generation"`
	FailedNodes []string `json:"failed_nodes"`
	Replacement []string `json:"replacement"`
	Reason      string   `json:"reason"`
	// AtStep is the first step of the failed chunk; FailedAtStep the step
	// the surviving ranks were in when they lost their peer (0 if unknown).
	AtStep       int64 `json:"at_step"`
	FailedAtStep int64 `json:"failed_at_step"`
	// ResumeStep is the checkpoint step training restarted from.
	ResumeStep int64 `json:"resume_step"`
	// LostSteps were trained and thrown away: FailedAtStep − ResumeStep.
	LostSteps int64 `json:"lost_steps"`
	// StepUnknown: no node said how far the chunk got (a service outage
	// whose heartbeats' details were lost, a stall no node's word
	// survived): FailedAtStep is the chunk's first step, and the steps it
	// trained past ResumeStep were lost, how many unknown (LostSteps
	// counts only those before the chunk).
	StepUnknown bool `json:"step_unknown,omitempty"`
	// NoticedAt: the first peer noticed the loss. SeenAt: the workflow
	// acted on it. ReplacedAt: the new membership stood. ResumedAt: the
	// first step after the recovery completed.
	NoticedAt  time.Time `json:"noticed_at"`
	SeenAt     time.Time `json:"seen_at"`
	ReplacedAt time.Time `json:"replaced_at"`
	ResumedAt  time.Time `json:"resumed_at"`
	// ResumeLoss is the loss of the first step after the recovery (0:
	// unknown): with FailedAtStep and ResumeStep it shows whether the loss
	// curve went on where the checkpoint left it.
	ResumeLoss float32 `json:"resume_loss,omitempty"`
	// DetectSeconds: chunk start to failure seen by the workflow.
	DetectSeconds float64 `json:"detect_s"`
	// ReplaceSeconds: failure seen to new membership.
	ReplaceSeconds float64 `json:"replace_s"`
	// Shrunk: no spare was free, so the run went on with the remaining
	// healthy nodes (at least min_nodes).
	Shrunk bool `json:"shrunk,omitempty"`
	// Back are failed nodes the new membership holds again (their
	// workers restarted and registered under the same IDs); Nodes is the
	// new membership's size (0 in records from before it was kept).
	Back  []string `json:"back,omitempty"`
	Nodes int      `json:"nodes,omitempty"`
	// Outage: every node's heartbeats were lost at once and every node
	// answered after: the service was out, not the nodes. None was
	// failed or replaced, and no restart counted.
	Outage bool `json:"outage,omitempty"`
	// Stopped: the failed node's worker was stopping (SIGTERM): the
	// chunk's ranks ended it early, at a checkpoint (ChunkResult.EndedBy),
	// and the run replaced the node there. No step lost, no restart
	// counted.
	Stopped bool `json:"stopped,omitempty"`
	// Removed are the old membership's nodes the new one lacks: the
	// failed ones not back, and, after a shrink, any the Cluster no
	// longer found alive.
	Removed []string `json:"removed,omitempty"`
}

// Phase names a run's state, also the CannStatus search attribute.
type Phase string

const (
	PhaseAcquiring  Phase = "acquiring"
	PhaseTraining   Phase = "training"
	PhaseRecovering Phase = "recovering"
	// PhasePaused: held at a chunk boundary by SignalPause.
	PhasePaused Phase = "paused"
	// PhaseGreenWait: waiting for the next green window (RunStatus.WaitUntil).
	PhaseGreenWait Phase = "waiting-green"
	// PhaseStorageWait: the checkpoint storage refused the run's
	// checkpoints; the run holds at a chunk boundary, its nodes keeping
	// the state they reached, and stores it again from time to time
	// (RunStatus.WaitUntil: the next try) until the storage takes it.
	PhaseStorageWait Phase = "waiting-storage"
	// PhaseRescaling: changing the node count (SignalRescale).
	PhaseRescaling Phase = "rescaling"
	// PhaseCancelling: the workflow was cancelled and waits (up to the
	// job's cancel_grace) for its chunk in flight, or its external world,
	// to end at a checkpoint; then PhaseCancelled.
	PhaseCancelling Phase = "cancelling"
	PhaseCompleted  Phase = "completed"
	PhaseFailed     Phase = "failed"
	// PhaseCancelled: the workflow was cancelled (cann-train cancel,
	// temporal workflow cancel); its nodes were released, its checkpoints
	// kept.
	PhaseCancelled Phase = "cancelled"
)

// SlowNode is a node of a run whose computation (its chunk's time less
// the time its ranks waited in collectives) took Factor times the median
// of its peers' in the last chunk, and at least the slow threshold in
// each of Chunks chunks in a row, the first of them from step Since.
type SlowNode struct {
	NodeID string  `json:"node_id"`
	Factor float64 `json:"factor"`
	Chunks int     `json:"chunks"`
	Since  int64   `json:"since"`
}

// CrowdedNode is a node running more ranks than it has cores.
type CrowdedNode struct {
	NodeID string `json:"node_id"`
	Ranks  int    `json:"ranks"`
	Cores  int    `json:"cores"`
}

// ForgetNode asks the Cluster to remove NodeID from its registry.
type ForgetNode struct {
	NodeID string `json:"node_id"`
}

// RunStatus answers the status query and is the run's result.
type RunStatus struct {
	RunID         string   `json:"workflow_id"`
	Phase         Phase    `json:"status"`
	Model         string   `json:"model"`
	Step          int64    `json:"step"`
	TotalSteps    int64    `json:"steps"`
	Nodes         []string `json:"nodes"`
	Generation    int64    `json:"generation"`
	InitialLoss   float32  `json:"initial_loss"`
	Loss          float32  `json:"final_loss"`
	EvalMetric    string   `json:"eval_metric_name,omitempty"`
	EvalValue     float64  `json:"eval_metric"`
	SamplesPerSec float64  `json:"samples_per_sec"`
	StepsPerSec   float64  `json:"steps_per_sec"`
	CommShare     float64  `json:"comm_share"`
	// ScalingEfficiency is the last chunk's SamplesPerSec over N times what
	// one rank with a core of its own computes at the same batch per rank
	// (measured by the topology scan; absent without one): 1 is perfect
	// data-parallel scaling. Ranks that share cores cannot reach it.
	ScalingEfficiency float64 `json:"scaling_efficiency,omitempty"`
	// SlowNodes are the nodes whose computation took much longer than
	// their peers' several chunks in a row: data-parallel ranks wait for
	// the slowest, so the run trains at its pace (a throttled or
	// oversubscribed host). Only live nodes; the run keeps them.
	SlowNodes []SlowNode `json:"slow_nodes,omitempty"`
	// Crowded, when the last chunk's node with the fewest cores has fewer
	// than the job's ranks_per_node, is that node: its ranks take turns
	// on its cores and the run trains at their pace.
	Crowded     *CrowdedNode   `json:"crowded,omitempty"`
	Chunks      int            `json:"chunks"`
	Checkpoints int            `json:"checkpoint_count"`
	LastCkpt    *CheckpointRef `json:"last_checkpoint,omitempty"`
	// CheckpointFailed is the last checkpoint whose upload failed since the
	// last one committed (nil once a later one commits): the storage's
	// trouble, seen while the run goes on.
	CheckpointFailed *CheckpointFailure `json:"checkpoint_failed,omitempty"`
	// KeptOnNode is, for an external job cancelled while its bucket
	// refused a checkpoint newer than LastCkpt, where the first node
	// keeps it (`cann-train checkpoint store-kept` stores it).
	KeptOnNode *KeptCheckpoint `json:"kept_on_node,omitempty"`
	Recoveries []Recovery      `json:"recoveries"`
	// Rollovers counts an external job's launches stopped after a
	// checkpoint so that the run could continue as new (its history had
	// grown long), each relaunched from that checkpoint.
	Rollovers int `json:"rollovers,omitempty"`
	// Resumed are the earlier runs of this name this one continues, each
	// from its last checkpoint (`cann-train run --resume`), oldest first.
	Resumed       []Resumption `json:"resumed,omitempty"`
	WeightsSHA256 string       `json:"weights_sha256,omitempty"`
	// DataSHA256 fingerprints the data set the run trains on (its nodes'
	// engine data set, compared at its first chunk).
	DataSHA256 string `json:"data_sha256,omitempty"`
	// ChunkIdleSeconds is the mean gap between one chunk's end (as the
	// slowest node reported) and the next chunk's start: the workflow's
	// own overhead (not counting gaps across a pause, a wait, a recovery
	// or a change of nodes).
	ChunkIdleSeconds float64   `json:"chunk_idle_s"`
	StartedAt        time.Time `json:"started_at"`
	UpdatedAt        time.Time `json:"updated_at"`
	Error            string    `json:"error,omitempty"`
	// CheckpointUnfit: the run failed because the checkpoint it was to
	// restore was written by a run of another job (ErrTypeCheckpointUnfit):
	// its own spec says nothing of the job that wrote it, so a later
	// --resume does not hold a job to it.
	CheckpointUnfit bool `json:"checkpoint_unfit,omitempty"`
	// Detail says what the phase is about, e.g. the green window waited for.
	Detail string `json:"detail,omitempty"`
	// WaitUntil is when the current green wait ends, or when a run that
	// holds for its checkpoint storage stores again.
	WaitUntil time.Time `json:"wait_until,omitzero"`
	// PauseRequested: a pause takes hold at the next chunk boundary.
	PauseRequested bool `json:"pause_requested,omitempty"`
	// PendingNodes is a rescale not yet applied (0: none).
	PendingNodes int `json:"pending_nodes,omitempty"`
	// RefusedRescale says why the last rescale signal was refused (a node
	// count out of range, e.g. a hand-written payload's misspelt field);
	// empty once one is accepted.
	RefusedRescale string `json:"refused_rescale,omitempty"`
	// RefusedSignal says why the last other control signal the run could
	// not act on was refused (a hand-sent green-override whose payload
	// does not decode).
	RefusedSignal string `json:"refused_signal,omitempty"`
	// IgnoredSignals are the signals sent to the run under a name it does
	// not know (`temporal workflow signal --name pasue …`), each with the
	// name it most likely meant: Temporal keeps them unread, nothing acts
	// on them. Filled by the status query.
	IgnoredSignals []string `json:"ignored_signals,omitempty"`
	// TargetNodes is the node count a run that went on with fewer nodes
	// (a failure without a spare, a drained node without a replacement)
	// grows back to as nodes come free (0: none).
	TargetNodes int `json:"target_nodes,omitempty"`
	// Evicting are drained nodes the run still holds; it replaces them
	// at its next chunk boundary (or shrinks without them, down to
	// min_nodes), or, when no node is free, keeps them and tries again a
	// minute later.
	Evicting []string `json:"evicting,omitempty"`
	// Stopping are those of Evicting that are not drained: their workers
	// are stopping (SIGTERM, Ctrl-C).
	Stopping []string `json:"stopping,omitempty"`
	// Leaving are slow nodes the run holds and moves off at a chunk
	// boundary (slow_node: replace) once a free node can take their rank;
	// they are not drained.
	Leaving []string `json:"leaving,omitempty"`
	// CutOff are the nodes the run left for being cut off from its
	// checkpoint bucket (they could not read what their peers read, or
	// rank 0 could not write what another node wrote, twice in a row): it
	// takes them no more until their workers register again.
	CutOff []string `json:"cut_off,omitempty"`
	// NodeAsk, while the run waits for a free node (to grow back to
	// TargetNodes, or to move off a node in Evicting or Leaving), says
	// when it asks the Cluster; the status query fills it in.
	NodeAsk *NodeAsk `json:"node_ask,omitempty"`
	// ClusterID is the Cluster workflow (node registry) the run takes
	// its nodes from.
	ClusterID string `json:"cluster_id,omitempty"`
	// MinNodes is the fewest nodes the run shrinks to after a failure.
	MinNodes    int `json:"min_nodes,omitempty"`
	GlobalBatch int `json:"global_batch,omitempty"`
	// RanksPerNode is how many ranks each node trains (set when above 1).
	RanksPerNode int         `json:"ranks_per_node,omitempty"`
	Rescalings   []Rescaling `json:"rescalings,omitempty"`
	// Segments are the stretches that trained (for energy accounting).
	Segments []Segment `json:"segments,omitempty"`
	// Green is set when the run has a green policy.
	Green *GreenStatus `json:"green,omitempty"`
	// Topology is what the scan at the run's start measured and chose
	// (spec topology_scan, or collective: auto).
	Topology *TopologyPlan `json:"topology,omitempty"`
	// Sync is the gradient exchange's policy and what it achieved (runs
	// with an optimizer, compression or overlap policy).
	Sync *SyncStatus `json:"sync,omitempty"`
	// Strategy is the parallel-strategy search's plan (strategy: auto).
	Strategy *StrategyPlan `json:"strategy,omitempty"`
	// Report is where the finished run's report (this status, as JSON)
	// was stored: the checkpoint bucket's URL and key.
	Report string `json:"report,omitempty"`
}

// ReportInput asks WriteReport to store a finished run's status as its
// report in the bucket URL.
type ReportInput struct {
	URL    string    `json:"url"`
	Run    string    `json:"run"`
	Status RunStatus `json:"status"`
}

// ReportKey is where a run's report lives in its bucket.
func ReportKey(run string) string { return "runs/" + run + "/report.json" }

// JobKey is where a run's job (its RunSpec as the run trains it) lives in
// its bucket, next to its checkpoints: `run --resume` of a name the
// server no longer knows checks the job against it.
func JobKey(run string) string { return "runs/" + run + "/job.json" }
