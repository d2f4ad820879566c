package workflows

import (
	"os"
	"path/filepath"
	"testing"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/cann-train/cann-train/spec"
)

// TestReplayRecordedHistories replays histories recorded from real runs on
// the embedded server: a run whose control worker was killed, one that
// replaced a SIGKILLed node, and the Cluster registry — recorded before
// the chunk-boundary controls existed, so they replay through the
// workflow.GetVersion default paths — a run that was paused and resumed,
// one whose adaptive compression codec was decided after its warm-up (a
// SideEffect), one whose strategy search moved it to fewer nodes; and two
// external jobs (a Python script on the helper): trainingrun_external.json,
// recorded before external jobs could pause — a rank crash that restarted
// the world, and a pause and resume it ignored, which replay through
// versionExternalPause's default (recorded once with that code; keep it) —
// trainingrun_external_pause.json, paused after a checkpoint upload
// and resumed from it, and trainingrun_external_green.json, stopped after
// a checkpoint uploaded outside its green slots, held on a green-window
// timer and relaunched from that checkpoint (energy modelled; it replays
// through versionExternalEnergy's default), and
// trainingrun_external_energy.json, the same with its nodes' meters read
// at launches and checkpoints, and trainingrun_external_metered.json, the
// pause and resume with the (absent) meters read;
// trainingrun_external_rollover.json, the first execution of a job whose
// launch was stopped after a checkpoint once the server suggested
// continue-as-new, ending in continue-as-new; and
// trainingrun_batch.json, a
// run whose carbon batch controller shrank its batch three times and that
// lost a node after the second change; trainingrun_pause_drain.json and
// cluster_drain.json, the paused run again, now also moving off a node
// drained while it held it, and the Cluster that told it;
// trainingrun_external_drain.json, an external job's world stopped after
// a checkpoint and relaunched without a drained node;
// trainingrun_external_lost.json, a world that crashed, what it trained
// past its last checkpoint kept as a lost segment (versionLostSegments); trainingrun_cancel.json,
// a run cancelled mid-chunk that released its nodes and ended Canceled;
// cluster_sweep.json, the Cluster of that test, which at its end freed the
// nodes a terminated run still held for the next run that needed them;
// trainingrun_recovery_acquire.json and cluster_recovery.json, the
// replaced node again, now named in the run's acquire request
// (versionFailedWithAcquire), and the Cluster that applied it;
// trainingrun_recovery_lost.json, the same with the failed chunk kept as
// a lost segment for energy accounting (versionLostSegments);
// trainingrun_recovery_gone.json, a run whose node died after a chunk's
// last step, found by asking a finished node (versionStragglerCheck), and
// trainingrun_recovery_salvage.json, the same resuming from the checkpoint
// rank 0 made at that chunk's end (versionSalvage), and
// trainingrun_recovery_salvage_absorbed.json, the same counting that
// chunk's loss, steps and stretch (versionSalvageAbsorb);
// trainingrun_recovery_frozen.json, a run whose node hung (SIGSTOP) after
// a chunk's last step, timed out heartbeating, and whose chunk was kept
// all the same (versionSalvageTimedOut); trainingrun_scan_lost.json, a
// run whose topology scan lost a node dead before it began, cancelled the
// scan's other probes (versionScanCancel) and replaced the node at its
// first chunk; trainingrun_fault_armed.json, a run whose node was told to
// SIGKILL itself while its chunk trained, the fault handed to the node's
// worker (versionArmFaults), its chunks ended where checkpoint_every, below
// chunk_steps, asked for checkpoints (versionCheckpointChunks);
// trainingrun_resumed.json, a run started with `run --resume` from a
// cancelled run's last checkpoint (RunInput.Resume);
// trainingrun_pause_settled.json, the paused, drained and rescaled run
// again, each pause settling the checkpoint still uploading before it
// said paused (versionSettlePending 1), and
// trainingrun_pause_background.json, the same settling it while paused
// (2); trainingrun_scale_settled.json, the same with its last rescale
// sent while it trained, made at the next boundary once that boundary's
// checkpoint had uploaded (versionChangeSettles); trainingrun_regrow.json,
// a run that lost a node with no spare free, went on with two and took it
// back when its worker returned (versionRegrow); trainingrun_codec_decided.json, an auto codec
// decided as the warm-up's last chunk reported, and
// trainingrun_codec_carried.json, a run resumed past that decision
// without its status, taking the codec its checkpoint carried
// (versionDecideOnMeasure); trainingrun_unknown_input.json, a workflow
// input with a misspelled field, failed at once (versionUnknownInput), and
// trainingrun_run_id_name.json, a run whose workflow ID is not run/<its
// spec's name>, failed at once (versionRunIDName), and
// trainingrun_node_unfit.json and cluster_unfit.json, a node worker without
// the data set replaced and kept failed as misconfigured (NodeUnfit), and
// trainingrun_storage_hold.json, a run whose bucket refused two uploads in
// a row, held with its nodes' state and stored it once resumed
// (versionStorageWaits), and trainingrun_load_hold.json, a run whose
// S3 bucket failed the reads of the checkpoint a recovery restored,
// held until it served them and a resume (versionLoadWaits), and
// trainingrun_storage_says.json, a storage hold whose every try says
// "store it now" (versionStoringSaysSo), and
// trainingrun_host_cannot_launch.json, an external job's spare that could
// not launch it replaced (versionHostCannotLaunch), and
// trainingrun_outage.json, a run whose server was down for three heartbeat
// timeouts resumed on the same nodes (versionServiceOutage), and
// trainingrun_temporal_stall.json, a run whose nodes' way to Temporal was
// cut twice for less than the heartbeat timeout, going on on the same
// nodes with no restart counted (versionTemporalUnreachable) and saying
// "training" after each (versionOutagePhase), and
// trainingrun_resolve_hold.json, the S3 run again, now also held while its
// bucket failed the lookup of the checkpoint uploading when its node was
// lost, and resumed from it (versionResolveWaits), and
// trainingrun_skip_gone.json, a run whose bucket lost three checkpoints
// and that fell back past the older missing ones in one restart
// (versionSkipGone), trainingrun_skip_gone_norestart.json, the same once
// such a fallback counted no restart (versionCorruptNoRestart), and
// trainingrun_slow_drain.json, a run with
// slow_node: drain that drained its throttled node and moved off it, and
// trainingrun_slow_replace.json, one with slow_node: replace that left it
// for the spare without draining it (AcquireRequest.Leave), and
// trainingrun_other_data.json, a run whose node held another data set
// (registered) that took the run's from its peers and gave that node
// back, trainingrun_data_pinned.json, a pinned run handed the nodes
// holding its pin first, and cluster_data.json, the registry that saw
// them, and cluster_same_data.json, the same registry where runs that
// knew no data set were handed nodes of the most common one first;
// trainingrun_stopped_node.json, a run whose rank-0 node's worker was
// stopped mid-chunk (SIGTERM): its ranks ended the chunk early at a
// checkpoint and the run replaced the node there (versionEndedEarly),
// then was cancelled; trainingrun_controls_end_chunk.json, a run of
// 10,000,000-step chunks paused and then moved off a drained node, each
// within its chunk, which its nodes were asked to end early
// (versionEndOnControl), then cancelled; and
// trainingrun_green_window_end.json, an interruptible green run whose
// 10,000,000-step chunk outlived its planned window, ended there on a
// timer (versionEndAtSlotEnd), then cancelled; cluster_stop.json, the
// Cluster of the stopped-node run, telling it of the stop
// (versionStopEvicts), and trainingrun_stopped_told.json, that run told;
// trainingrun_external_stop.json, an external job whose node's worker
// was stopped: its world stopped after its next checkpoint upload and
// relaunched on the spare; trainingrun_cancel_end_chunk.json, the
// paused and drained run of long chunks again, then cancelled mid-chunk:
// its chunk ended early at a checkpoint first (versionCancelEndsChunk);
// trainingrun_stopped_two.json, a run both of whose nodes' workers were
// stopped at once, each named by its ranks (ChunkResult.Stopping), both
// replaced in one recovery at the step the chunk ended;
// trainingrun_external_stop_late.json, an external job whose node's
// worker stopped further from its next checkpoint than its stop grace:
// relaunched from the last one on the spare, counting no restart
// (versionStoppingNoRestart); trainingrun_regrow_in_flight.json, a run of
// long chunks that shrank after a SIGKILL and, asking the Cluster while
// its chunk trained, grew back mid-chunk once the node's worker returned
// (versionNodesInFlight); trainingrun_external_request.json, an external
// job paused hundreds of steps before its next periodic checkpoint: its
// world asked for one (versionCheckpointRequest) and held there;
// trainingrun_external_cancel_request.json, the same run resumed, then
// cancelled: its world asked for a checkpoint and the run ended
// cancelled there (versionCancelAsksCheckpoint; the test records this
// one now); trainingrun_external_unreported.json, an external job paused
// while its processes were still starting: its first node said they had
// reported no step, and the world was stopped at once
// (versionStopUnreported); trainingrun_cancelling.json and
// trainingrun_external_cancelling.json, the two cancel runs above
// recorded again once a cancel drain had its phase, cancelling
// (versionCancellingPhase; their tests record these now);
// trainingrun_regrow_waiting_ask.json, the mid-chunk regrow again once the
// asks for a free node waited for one (versionFreeNodesWait): the node's
// worker started while the ask waited, and was found by it (its test
// records this one now); cluster_hold.json, the Cluster of that run: the
// node found held for the run (UpdateHoldFree) until its acquire took it;
// cluster_held_first.json, the same Cluster once an acquire took the nodes
// held for its run first and gave back the holds it did not use
// (versionHeldFirst; the run's test records this one now);
// trainingrun_evict_mid_chunk.json, a drained node kept for want of a
// free one, asked for every node_wait (versionEvictNodeWait) and replaced
// mid-chunk by a node found by an ask that waited;
// trainingrun_cut_off.json, a node cut off from the S3 bucket its peer
// read, held for once and replaced at the second try (versionCutOff);
// trainingrun_rank0_cut_off.json, a rank 0 that cannot write to the
// bucket: its holds stored by node-2 (versionAnySaver), then left;
// trainingrun_external_cut_off.json, an external job's node cut off from
// the bucket, found by asking its peer to read the checkpoint
// (versionProbeReads) and replaced at the second try, no restart
// counted (versionCutOffFree); trainingrun_cut_off_free.json, the
// built-in run's cut-off node replaced with its max_restarts of 1 spent
// on the node lost before (versionCutOffFree);
// trainingrun_external_unformed.json, the external job's again, each
// try's world stopped as soon as the cut-off node failed
// (versionStopUnformed); trainingrun_external_storage_hold.json, an
// external job whose bucket refused two uploads in a row: its world
// stopped, the kept checkpoint stored by node-1 at a resume
// (versionExternalStoreKept); trainingrun_external_cancel_kept.json, the
// same cancelled while it held, node-1 asked once more as it ended
// (versionKeptOnCancel); trainingrun_external_kept_pause.json, a pause's
// requested checkpoint refused, kept: the world stopped there, its
// training recorded, and the run held until a resume stored it
// (versionKeptForStop, versionKeptTrained); and
// trainingrun_external_kept_loss.json, a world lost after a kept refusal,
// node-1 asked to store it before the lost stretch was recorded
// (versionKeptAfterLoss, versionKeptLossTrained); and
// cluster_renewal_registers.json, a registry started anew after the old
// one was terminated, the other nodes registered by their lease renewals
// (versionRenewalRegisters); and, recorded with CANN_TRAIN_RECORD_ALL
// (cmd/cann-train/recordall_test.go: every execution of every e2e test)
// and picked for the changes they pass through,
// trainingrun_external_slot_end.json (TestExternalGreenWindow),
// trainingrun_fail_resolves.json (TestUnsharedBucketFailsTheRun),
// trainingrun_slow_full_chunks.json (TestCancelStopsTheChunkInFlight),
// trainingrun_stopped_came_back.json (TestStoppedNodeStaysWithItsPausedRun)
// and trainingrun_unreached_step.json (TestRunOutlivesTemporalStalls)
// (re-record with CANN_TRAIN_RECORD_HISTORY=$PWD/workflows/testdata
// go test -run 'TestControlWorkerKilledMidRun|TestNodeKilledMidRunIsReplaced|TestPauseResumeRealRun|TestCompressedRunSurvivesKillBitIdentical|TestStrategyAutoRealRun|TestExternalPauseResume|TestExternalGreenWindow|TestCarbonBatchControllerRealRun|TestExternalRollover|TestExternalDrainMovesTheWorld|TestExternalCrashCountsLostWork|TestCancelRealRun|TestShrunkRunGrowsBack|TestFrozenNodeIsReplaced|TestTopologyScanLosesADeadNodeRealRun|TestFaultReachesTheChunkInFlight|TestResumeEndedRun|TestNodeWithoutDataIsReplaced|TestRunHoldsForItsStorage|TestExternalHostWithoutTheJobIsReplaced|TestRunOutlivesAServiceOutage|TestRunCheckpointsOnS3|TestRunSkipsDeletedCheckpoints|TestSlowNodeIsNamed|TestNodeStopsGracefully|TestControlsEndALongChunk|TestGreenWindowEndsALongChunk|TestExternalStopMovesTheWorld|TestTwoNodesStopAtOnce|TestExternalStopPastTheGrace|TestShrunkRunGrowsBackMidChunk|TestExternalPauseAtARequestedCheckpoint|TestExternalPauseWhileStarting|TestDrainedNodeIsReplacedMidChunk|TestNodeCutOffFromTheBucketIsReplaced|TestRankZeroCutOffFromTheBucketIsLeft|TestExternalNodeCutOffFromTheBucketIsReplaced|TestExternalRunHoldsForItsStorage|TestExternalCancelledRunKeepsItsCheckpoint|TestExternalPauseStopsAtAKeptCheckpoint|TestExternalLossAfterAKeptRefusal|TestControlsWhileARunWaitsForNodes|TestRunSteeredWithHandWrittenJSON|TestStoppedNodeStaysWithItsPausedRun|TestSecondWorkerWithTheSameID|TestRegistryResetTakesEveryNodeBack'
// ./cmd/cann-train; keep the old ones unless their format changes). A
// change to workflow code that would break running workflows fails here
// with a nondeterminism error.
func TestReplayRecordedHistories(t *testing.T) {
	// The recorded run's workflow ID where the workflow depends on it (an
	// external job's launches are named after it, and its checkpoint
	// signals matched by that name); else the replayer's default.
	ids := map[string]string{
		"trainingrun_external.json":                "run/ext-record",
		"trainingrun_external_pause.json":          "run/ext-pause",
		"trainingrun_external_green.json":          "run/ext-green",
		"trainingrun_external_energy.json":         "run/ext-green",
		"trainingrun_external_metered.json":        "run/ext-pause",
		"trainingrun_external_rollover.json":       "run/ext-rollover",
		"trainingrun_external_drain.json":          "run/ext-drain",
		"trainingrun_external_lost.json":           "run/ext-lost",
		"trainingrun_external_lost_grace.json":     "run/ext-lost",
		"trainingrun_strict_signals.json":          "run/raw-json",
		"trainingrun_host_cannot_launch.json":      "run/ext-host",
		"trainingrun_slow_drain.json":              "run/slow-drain",
		"trainingrun_slow_replace.json":            "run/slow-replace",
		"trainingrun_external_stop.json":           "run/ext-stop",
		"trainingrun_external_stop_late.json":      "run/ext-stop-late",
		"trainingrun_external_request.json":        "run/ext-asked",
		"trainingrun_external_cancel_request.json": "run/ext-asked",
		"trainingrun_external_unreported.json":     "run/ext-starting",
		"trainingrun_external_cancelling.json":     "run/ext-asked",
		"trainingrun_external_cut_off.json":        "run/ext-cut-off",
		"trainingrun_external_unformed.json":       "run/ext-cut-off",
		"trainingrun_external_storage_hold.json":   "run/ext-held",
		"trainingrun_external_cancel_kept.json":    "run/ext-cancel-kept",
		"trainingrun_external_kept_pause.json":     "run/ext-kept-pause",
		"trainingrun_external_kept_loss.json":      "run/ext-kept-loss",
	}
	for _, tc := range []struct{ file, typ string }{
		{"trainingrun.json", spec.WorkflowTrainingRun},
		{"trainingrun_recovery.json", spec.WorkflowTrainingRun},
		{"trainingrun_recovery_acquire.json", spec.WorkflowTrainingRun},          // the failed node named in the acquire request
		{"trainingrun_recovery_lost.json", spec.WorkflowTrainingRun},             // … and its failed chunk a lost segment
		{"cluster_recovery.json", spec.WorkflowCluster},                          // that request applied
		{"cluster_rollover.json", spec.WorkflowCluster},                          // continued as new while an acquire waited
		{"trainingrun_recovery_gone.json", spec.WorkflowTrainingRun},             // a node gone after its chunk, found by CheckNodes
		{"trainingrun_recovery_salvage.json", spec.WorkflowTrainingRun},          // and that chunk's checkpoint kept
		{"trainingrun_recovery_salvage_absorbed.json", spec.WorkflowTrainingRun}, // … and the chunk counted as trained
		{"trainingrun_recovery_frozen.json", spec.WorkflowTrainingRun},           // a hung node's chunk kept after its heartbeat timeout
		{"trainingrun_pause.json", spec.WorkflowTrainingRun},
		{"trainingrun_compression.json", spec.WorkflowTrainingRun},
		{"trainingrun_codec_decided.json", spec.WorkflowTrainingRun}, // decided at the warm-up's end
		{"trainingrun_codec_carried.json", spec.WorkflowTrainingRun}, // resumed: the checkpoint's codec kept
		{"trainingrun_strategy.json", spec.WorkflowTrainingRun},
		{"trainingrun_strategy_scaling.json", spec.WorkflowTrainingRun}, // every scan times computation
		{"trainingrun_strategy_floor.json", spec.WorkflowTrainingRun},   // the plan's size is the run's min_nodes
		{"trainingrun_scan_lost.json", spec.WorkflowTrainingRun},        // a scan that lost a node cancelled its other probes
		{"trainingrun_fault_armed.json", spec.WorkflowTrainingRun},      // a signalled fault armed on the node in flight; checkpoint-sized chunks
		{"trainingrun_resumed.json", spec.WorkflowTrainingRun},          // started from an ended run's last checkpoint
		{"trainingrun_external.json", spec.WorkflowTrainingRun},
		{"trainingrun_external_pause.json", spec.WorkflowTrainingRun},
		{"trainingrun_external_green.json", spec.WorkflowTrainingRun},
		{"trainingrun_external_energy.json", spec.WorkflowTrainingRun},
		{"trainingrun_external_metered.json", spec.WorkflowTrainingRun},
		{"trainingrun_external_rollover.json", spec.WorkflowTrainingRun},
		{"trainingrun_batch.json", spec.WorkflowTrainingRun},
		{"trainingrun_pause_drain.json", spec.WorkflowTrainingRun},      // a held node drained: the run moved off it
		{"trainingrun_pause_settled.json", spec.WorkflowTrainingRun},    // each pause settled the upload in flight
		{"trainingrun_pause_background.json", spec.WorkflowTrainingRun}, // … while it held
		{"trainingrun_scale_settled.json", spec.WorkflowTrainingRun},    // a rescale at a boundary awaited its upload
		{"trainingrun_scale_grows.json", spec.WorkflowTrainingRun},      // a scale-up takes the free nodes and grows; started small
		{"trainingrun_regrow.json", spec.WorkflowTrainingRun},           // shrunk after a kill, grown back when the node returned
		{"trainingrun_external_drain.json", spec.WorkflowTrainingRun},   // the same for an external job's world
		{"trainingrun_external_lost.json", spec.WorkflowTrainingRun},    // a crashed world: what it trained past its checkpoint a lost segment
		{"trainingrun_cancel.json", spec.WorkflowTrainingRun},           // cancelled mid-chunk: nodes released, ends Canceled
		{"cluster.json", spec.WorkflowCluster},
		{"cluster_drain.json", spec.WorkflowCluster},                            // drains, one of a held node (the run told)
		{"cluster_resweep.json", spec.WorkflowCluster},                          // waiting acquires sweep again
		{"cluster_lease_incarnation.json", spec.WorkflowCluster},                // a second worker took node-1's ID: the first's renewals refused (versionLeaseIncarnation)
		{"cluster_stop_keeps_holder.json", spec.WorkflowCluster},                // a paused run's node restarted: kept for it, the run told (versionStopKeepsHolder)
		{"cluster_withdraw.json", spec.WorkflowCluster},                         // a waiting acquire withdrawn (SignalWithdraw)
		{"cluster_reserve.json", spec.WorkflowCluster},                          // the same, recorded with two waiters beside each other asking versionReserveStarved
		{"cluster_renewal_registers.json", spec.WorkflowCluster},                // started anew after a reset: the other nodes' renewals registered them (versionRenewalRegisters)
		{"trainingrun_controls_while_acquiring.json", spec.WorkflowTrainingRun}, // paused, resumed, rescaled while it waited for its first nodes
		{"cluster_sweep.json", spec.WorkflowCluster},                            // a terminated run's nodes freed for the next run
		{"trainingrun_unknown_input.json", spec.WorkflowTrainingRun},            // a misspelled input field: failed at once (versionUnknownInput)
		{"trainingrun_run_id_name.json", spec.WorkflowTrainingRun},              // run/raw-other with spec name raw-else: failed at once (versionRunIDName)
		{"trainingrun_node_unfit.json", spec.WorkflowTrainingRun},               // a node without data replaced (NodeUnfit: no version)
		{"cluster_unfit.json", spec.WorkflowCluster},                            // … and kept failed as misconfigured
		{"trainingrun_storage_hold.json", spec.WorkflowTrainingRun},             // held for a refusing bucket, stored at a resume (versionStorageWaits)
		{"trainingrun_load_hold.json", spec.WorkflowTrainingRun},                // held for a bucket that failed a restore's reads (versionLoadWaits)
		{"trainingrun_storage_says.json", spec.WorkflowTrainingRun},             // a storage hold whose tries say so (versionStoringSaysSo)
		{"trainingrun_host_cannot_launch.json", spec.WorkflowTrainingRun},       // a host that cannot launch the job replaced (versionHostCannotLaunch)
		{"trainingrun_outage.json", spec.WorkflowTrainingRun},                   // a server outage outlived on the same nodes (versionServiceOutage)
		{"trainingrun_temporal_stall.json", spec.WorkflowTrainingRun},           // two Temporal stalls, no restart counted (versionTemporalUnreachable, versionOutagePhase)
		{"trainingrun_resolve_hold.json", spec.WorkflowTrainingRun},             // held for a bucket that failed a lost upload's lookup (versionResolveWaits)
		{"trainingrun_skip_gone.json", spec.WorkflowTrainingRun},                // fell back past deleted checkpoints in one restart (versionSkipGone)
		{"trainingrun_skip_gone_norestart.json", spec.WorkflowTrainingRun},      // the same, the fallback counting no restart (versionCorruptNoRestart)
		{"trainingrun_slow_drain.json", spec.WorkflowTrainingRun},               // drained its slow node (slow_node: drain) and moved off it
		{"trainingrun_slow_replace.json", spec.WorkflowTrainingRun},             // left its slow node for a free one (slow_node: replace; no version)
		{"trainingrun_other_data.json", spec.WorkflowTrainingRun},               // a node on other data given back, the run's learnt (no version)
		{"trainingrun_data_pinned.json", spec.WorkflowTrainingRun},              // pinned: its pin's holders asked for first (no version)
		{"cluster_data.json", spec.WorkflowCluster},                             // … a node given back free (OtherData), a pin preferred
		{"cluster_same_data.json", spec.WorkflowCluster},                        // … and runs without one handed nodes of one data set (SameData)
		{"trainingrun_stopped_node.json", spec.WorkflowTrainingRun},             // a stopping node's chunk ended early, the node replaced there (versionEndedEarly)
		{"trainingrun_controls_end_chunk.json", spec.WorkflowTrainingRun},       // a pause and a drain ended the chunk in flight early (versionEndOnControl)
		{"trainingrun_green_window_end.json", spec.WorkflowTrainingRun},         // a green window's end ended the chunk in flight (versionEndAtSlotEnd)
		{"cluster_stop.json", spec.WorkflowCluster},                             // a held node's worker stopped: its run told (versionStopEvicts)
		{"trainingrun_stopped_told.json", spec.WorkflowTrainingRun},             // … and that run, told, replacing the node where its chunk ended
		{"trainingrun_external_stop.json", spec.WorkflowTrainingRun},            // an external world moved off a stopping node's at a checkpoint
		{"trainingrun_cancel_end_chunk.json", spec.WorkflowTrainingRun},         // cancelled mid-chunk: the chunk ended at a checkpoint first (versionCancelEndsChunk)
		{"trainingrun_stopped_two.json", spec.WorkflowTrainingRun},              // two nodes stopped at once, both replaced where the chunk ended (no version)
		{"trainingrun_external_stop_late.json", spec.WorkflowTrainingRun},       // a stop past the grace: no restart counted (versionStoppingNoRestart)
		{"trainingrun_regrow_in_flight.json", spec.WorkflowTrainingRun},         // grew back mid-chunk, asking the Cluster for free nodes (versionNodesInFlight)
		{"trainingrun_external_request.json", spec.WorkflowTrainingRun},         // a pause asked the external world for a checkpoint (versionCheckpointRequest)
		{"trainingrun_external_cancel_request.json", spec.WorkflowTrainingRun},  // … and a cancel too, ending there (versionCancelAsksCheckpoint)
		{"trainingrun_external_unreported.json", spec.WorkflowTrainingRun},      // paused while starting: stopped at once (versionStopUnreported)
		{"trainingrun_cancelling.json", spec.WorkflowTrainingRun},               // a cancel drain in phase cancelling (versionCancellingPhase)
		{"trainingrun_external_cancelling.json", spec.WorkflowTrainingRun},      // … an external world's too
		{"trainingrun_regrow_waiting_ask.json", spec.WorkflowTrainingRun},       // grew back mid-chunk, found by an ask that waited (versionFreeNodesWait)
		{"cluster_hold.json", spec.WorkflowCluster},                             // … its Cluster, holding the node found for the run (UpdateHoldFree)
		{"cluster_held_first.json", spec.WorkflowCluster},                       // … its acquire taking the held node first (versionHeldFirst)
		{"trainingrun_evict_mid_chunk.json", spec.WorkflowTrainingRun},          // a drained node replaced mid-chunk, asked for every node_wait (versionEvictNodeWait)
		{"trainingrun_cut_off.json", spec.WorkflowTrainingRun},                  // a node cut off from the bucket its peer read, replaced at the second try (versionCutOff)
		{"trainingrun_rank0_cut_off.json", spec.WorkflowTrainingRun},            // rank 0 cut off for writes: node-2 stores the holds (versionAnySaver), then the run leaves node-1
		{"trainingrun_cut_off_free.json", spec.WorkflowTrainingRun},             // … a built-in run's, with max_restarts spent on the node lost before (versionCutOffFree)
		{"trainingrun_external_cut_off.json", spec.WorkflowTrainingRun},         // an external job's node cut off: its peer asked to read (versionProbeReads), replaced at the second try, no restart counted (versionCutOffFree)
		{"trainingrun_external_unformed.json", spec.WorkflowTrainingRun},        // … each try's world stopped once the cut-off node failed (versionStopUnformed)
		{"trainingrun_external_storage_hold.json", spec.WorkflowTrainingRun},    // an external job's bucket refusing: the world stopped, the kept checkpoint stored (versionExternalStoreKept)
		{"trainingrun_external_cancel_kept.json", spec.WorkflowTrainingRun},     // … cancelled while it held, the kept checkpoint tried once more (versionKeptOnCancel)
		{"trainingrun_external_kept_pause.json", spec.WorkflowTrainingRun},      // a pause's checkpoint refused, kept: stopped there, trained recorded (versionKeptForStop, versionKeptTrained)
		{"trainingrun_external_kept_loss.json", spec.WorkflowTrainingRun},       // a world lost after a kept refusal: the kept one asked for first (versionKeptAfterLoss, versionKeptLossTrained)
		{"trainingrun_external_slot_end.json", spec.WorkflowTrainingRun},        // an external job's green launch stopped at its slot's end (versionExternalSlotEnd)
		{"trainingrun_fail_resolves.json", spec.WorkflowTrainingRun},            // a run failed on an unshared bucket, its lost upload resolved first (versionFailResolves)
		{"trainingrun_slow_full_chunks.json", spec.WorkflowTrainingRun},         // a chunk cancelled in flight, not judged for slowness (versionSlowFullChunks)
		{"trainingrun_stopped_came_back.json", spec.WorkflowTrainingRun},        // a paused run's stopped node came back to it (versionStoppedCameBack)
		{"trainingrun_unreached_step.json", spec.WorkflowTrainingRun},           // two Temporal stalls, the step each reached said (versionUnreachedStep)
		{"trainingrun_newer_rescale.json", spec.WorkflowTrainingRun},            // scripted: a rescale signalled while another acquired, applied after it (versionNewerRescale)
		{"trainingrun_external_short_fails.json", spec.WorkflowTrainingRun},     // scripted: an external script exited 0 at step 100 of 150: failed short of its steps (versionExternalShortFails)
		{"trainingrun_external_start_fails.json", spec.WorkflowTrainingRun},     // scripted: an external job's import failed the same way on two launches: failed, not relaunched again (versionStartFailRepeats)
		{"trainingrun_external_storage_fails.json", spec.WorkflowTrainingRun},   // scripted: an external world's upload at 80 failed, then its final one at 100: failed at once (versionStorageGivesUp)
		{"trainingrun_external_ask_again.json", spec.WorkflowTrainingRun},       // scripted: a pause's checkpoint request withdrawn by a resume; a later pause asked again, held there (versionAskAgain)
		{"trainingrun_green_unplanned.json", spec.WorkflowTrainingRun},          // scripted: a contiguous job's failed plan let it train, on to the end (versionUnplannedStarts)
		{"trainingrun_green_pause_in_wait.json", spec.WorkflowTrainingRun},      // scripted: paused in its green wait, the resume ended the pause only; a second resume cut the wait, a contiguous job on to the end (versionResumeEndsPause, versionOverrideStarts)
		{"trainingrun_green_resume_lost.json", spec.WorkflowTrainingRun},        // scripted: a resume cut the green wait, its chunk failed, the recovered run trained at once (versionResumeOutlivesLoss)
		{"trainingrun_green_wait_rollover.json", spec.WorkflowTrainingRun},      // scripted: a green wait re-decided on its signal's step, continued as new there, the history being long; the first run (versionRecheckGreenWait, versionRolloverInGreenWait)
		{"trainingrun_scale_asks_soon.json", spec.WorkflowTrainingRun},          // scripted: a scale-up short of a node asked for it a second on, took it at the next boundary (versionScaleAsksSoon)
		{"trainingrun_silent_suspects.json", spec.WorkflowTrainingRun},          // scripted: two ranks blamed once each, only the silent one replaced (versionSilentSuspects)
		{"trainingrun_saver_kept.json", spec.WorkflowTrainingRun},               // scripted: a node lost in a storage hold's save-only chunk, the state it stored kept (versionSaverKept)
		{"cluster_forget_stopped.json", spec.WorkflowCluster},                   // scripted: a node whose worker said it stopped forgotten within its lease (versionForgetStopped)
		{"trainingrun_asks_cut_found.json", spec.WorkflowTrainingRun},           // scripted: a drained node's ask cut by its chunk went on at once (versionCutAsks), the ask after a whole wait found c, taken at that chunk's boundary (versionFoundAsks)
		{"cluster_cancel_rolls_over.json", spec.WorkflowCluster},                // scripted: a cancel request continued it as new, r1 holding a, r2's wait ended for the rollover (versionCancelRollsOver)
	} {
		t.Run(tc.file, func(t *testing.T) {
			r := worker.NewWorkflowReplayer()
			r.RegisterWorkflowWithOptions(TrainingRun, workflow.RegisterOptions{Name: spec.WorkflowTrainingRun})
			r.RegisterWorkflowWithOptions(Cluster, workflow.RegisterOptions{Name: spec.WorkflowCluster})
			f, err := os.Open(filepath.Join("testdata", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			h, err := client.HistoryFromJSON(f, client.HistoryJSONOptions{})
			if err != nil {
				t.Fatalf("read %s: %v", tc.file, err)
			}
			opts := worker.ReplayWorkflowHistoryOptions{}
			id := ids[tc.file]
			if id == "" && len(h.Events) > 0 { // (servers since 1.27 record it)
				id = h.Events[0].GetWorkflowExecutionStartedEventAttributes().GetWorkflowId()
			}
			if id != "" {
				opts.OriginalExecution = workflow.Execution{ID: id}
			}
			if err := r.ReplayWorkflowHistoryWithOptions(nil, h, opts); err != nil {
				t.Fatalf("replay %s (%s): %v", tc.file, tc.typ, err)
			}
		})
	}
}
