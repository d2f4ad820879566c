"""cann_train: what a training script needs from the cann-train node worker.

Dependency-free (standard library only, Python 3.7+). Copy it next to your
script or put this directory on PYTHONPATH. Every function is safe to call
when the script runs outside cann-train: reports go nowhere, the checkpoint
directory is ./checkpoints, nothing was restored.

    import cann_train as ct

    start = ct.restored_step()              # 0 on a fresh start
    if start:
        model.load_state_dict(torch.load(os.path.join(ct.checkpoint_dir(), "model.pt")))
    for step in range(start + 1, total + 1):
        loss = train_step()
        ct.report(step, loss=loss, lr=lr)   # liveness, progress, loss curve
        if ct.should_checkpoint(step):
            if ct.rank() == 0:
                torch.save(model.state_dict(), os.path.join(ct.checkpoint_dir(), "model.pt"))
                ct.saved(step)              # commit: the node worker uploads it

Protocol (the node worker's side is engine/launch/report.go)
-----------------------------------------------------------
Environment, set for every process:

  CANN_TRAIN_CHECKPOINT_DIR    directory to read and write checkpoints; the
                               node worker empties it and restores the run's
                               last uploaded checkpoint into it before launch
  CANN_TRAIN_RESTORED_STEP     step of that checkpoint (0: fresh start)
  CANN_TRAIN_CHECKPOINT_EVERY  the job's checkpoint_every, in steps
  CANN_TRAIN_REPORT_FILE       this process's report file (JSON lines)
  CANN_TRAIN_ACK_FILE          where the node worker acknowledges checkpoints
  CANN_TRAIN_REQUEST_FILE      where the node worker asks for a checkpoint
  CANN_TRAIN_RANK, CANN_TRAIN_WORLD_SIZE, CANN_TRAIN_TOTAL_STEPS
  CANN_TRAIN_RESTART_COUNT     how many times the run restarted the world
                               before this launch (a failure's relaunch; a
                               resume after a pause or a green wait is not
                               one), whatever the launcher: torchrun's
                               TORCHELASTIC_RESTART_COUNT, for ascend and
                               msrun jobs too

report() and saved() append one JSON object per line to the report file,
each line a single write on an O_APPEND descriptor (so lines never
interleave):

  {"event": "report", "step": 120, "loss": 0.31, "metrics": {"acc": 0.9}, "time": 1712345678.5}
  {"event": "saved", "step": 120, "time": 1712345679.0}
  {"event": "restored", "step": 100, "time": 1712345600.0}

The "restored" line is written once, the first time restored_step() is
called when a checkpoint was restored: a launch that then fails before its
first step is told apart from one that failed at its start (its imports).

After a "saved" line the node worker copies the checkpoint directory, then
replaces the ack file (write + rename) with the step it copied; saved()
returns once the ack file holds that step or a later one, so the script
must not touch the directory until saved() returns. The node worker
writes the request file (the same way) with a step when the run wants a
checkpoint before the next periodic one — a pause, a drain, a worker
stopping —: should_checkpoint() says yes at that step too, on every rank
(the step lies ahead of them all). Only global rank 0's
checkpoints are uploaded (other ranks' saved() return at once). Without
this helper a job still runs: liveness is then "the processes are alive",
and only the directory left at a clean exit is uploaded.
"""

import json
import math
import os
import time

__all__ = [
    "report", "checkpoint_dir", "should_checkpoint", "restored_step", "saved",
    "rank", "world_size", "total_steps", "restart_count", "managed",
]

_last_step = 0


def _env_int(name, default):
    v = os.environ.get(name, "")
    try:
        return int(v)
    except ValueError:
        return default


def managed():
    """True when the script runs under a cann-train node worker."""
    return bool(os.environ.get("CANN_TRAIN_REPORT_FILE"))


def rank():
    """The process's global rank (-1 for a process that is not a rank, such
    as msrun's scheduler); RANK / RANK_ID outside cann-train, else 0."""
    for name in ("CANN_TRAIN_RANK", "RANK", "RANK_ID"):
        if os.environ.get(name, "") != "":
            return _env_int(name, 0)
    return 0


def world_size():
    """The number of ranks."""
    for name in ("CANN_TRAIN_WORLD_SIZE", "WORLD_SIZE", "RANK_SIZE"):
        if os.environ.get(name, "") != "":
            return _env_int(name, 1)
    return 1


def total_steps():
    """The job's steps (0: not given)."""
    return _env_int("CANN_TRAIN_TOTAL_STEPS", 0)


def restart_count():
    """How many times the run restarted the world before this launch (0 on
    the first; a resume after a pause is no restart), with every launcher;
    TORCHELASTIC_RESTART_COUNT outside cann-train, else 0."""
    for name in ("CANN_TRAIN_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT"):
        if os.environ.get(name, "") != "":
            return _env_int(name, 0)
    return 0


def checkpoint_dir():
    """The directory to write checkpoints to and restore them from."""
    d = os.environ.get("CANN_TRAIN_CHECKPOINT_DIR") or os.path.join(os.getcwd(), "checkpoints")
    os.makedirs(d, exist_ok=True)
    return d


_told_restored = False


def restored_step():
    """The step of the checkpoint restored into checkpoint_dir() before this
    launch; 0 on a fresh start (then the directory is empty). Call it
    before loading the checkpoint: the node worker then knows the script
    got that far, should it fail before its first step."""
    global _told_restored
    step = _env_int("CANN_TRAIN_RESTORED_STEP", 0)
    if step > 0 and not _told_restored:
        _told_restored = True
        try:
            _append({"event": "restored", "step": step})
        except OSError:
            pass  # (a hint for the node worker, not worth failing over)
    return step


def should_checkpoint(step=None):
    """True at every checkpoint_every-th step, and at the step the run
    asked for a checkpoint at (the same answer on every rank, so
    collective saves stay in step). step defaults to the last step given
    to report(). Call it every step: a request is a few steps ahead.
    Before a sharded (collective) save, have the ranks agree on the
    answer, so that a request one node heard late still finds them all
    at the same step: with torch.distributed,
        ok = torch.tensor(int(should_checkpoint(step)), device=device)
        dist.all_reduce(ok, op=dist.ReduceOp.MAX)
    and save when ok.item()."""
    if step is None:
        step = _last_step
    if step <= 0:
        return False
    every = _env_int("CANN_TRAIN_CHECKPOINT_EVERY", 0)
    if every > 0 and step % every == 0:
        return True
    return step == _requested_step()


_request = (None, -1)  # (the request file's identity when read, its step)


def _requested_step():
    """The step of the node worker's last checkpoint request (-1: none).
    One stat() per call; the file is read again only when it changed."""
    global _request
    path = os.environ.get("CANN_TRAIN_REQUEST_FILE")
    if not path:
        return -1
    try:
        st = os.stat(path)
    except OSError:
        return -1
    key = (st.st_ino, st.st_mtime_ns, st.st_size)
    if key != _request[0]:
        _request = (key, _read_ack(path))
    return _request[1]


def _append(record):
    path = os.environ.get("CANN_TRAIN_REPORT_FILE")
    if not path:
        return
    record["time"] = time.time()
    line = (json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def _number(name, v):
    try:
        f = float(v.item() if hasattr(v, "item") else v)
    except (TypeError, ValueError):
        raise TypeError("cann_train.report: %s=%r is not a number" % (name, v))
    return f if math.isfinite(f) else None


def report(step, loss=None, **metrics):
    """Records progress: the step just completed, its loss and any other
    numbers (tensors with .item() are fine). Non-finite values are
    dropped. Call it every step or every few; it is one small write.
    samples_per_sec, if given, is this process's throughput (the run adds
    up the ranks'). Until rank 0 first reports (or commits a checkpoint),
    the run takes its world for one still starting: a pause, a drain or a
    cancel stops it at once rather than ask it for a checkpoint. Required
    on rank 0 when the job gives `steps`: the run completes only once rank
    0 has reported the last step (a script that ends without, even having
    committed checkpoints, ends its run failed, short of its steps)."""
    global _last_step
    step = int(step)
    _last_step = step
    rec = {"event": "report", "step": step}
    if loss is not None:
        lf = _number("loss", loss)
        if lf is not None:
            rec["loss"] = lf
    m = {}
    for k, v in metrics.items():
        f = _number(k, v)
        if f is not None:
            m[k] = f
    if m:
        rec["metrics"] = m
    _append(rec)


def _read_ack(path):
    try:
        with open(path) as f:
            return int(f.read().strip() or -1)
    except (OSError, ValueError):
        return -1


def saved(step, timeout=600.0):
    """Commits the checkpoint of `step` now complete in checkpoint_dir():
    returns once the node worker has copied it (True), or False after
    timeout seconds without an acknowledgement. Other ranks than 0, and
    scripts outside cann-train, return True at once. Raises ValueError on
    rank 0 when checkpoint_dir() holds no file: the checkpoint must be
    written there first (a run resumed from an empty one has nothing to
    load)."""
    step = int(step)
    if not managed() or rank() != 0:
        return True
    d = checkpoint_dir()
    if not [f for f in os.listdir(d) if f != ".cann-train-checkpoint-dir"]:
        # Committed, an empty directory would be restored as "the
        # checkpoint": nothing to load, the training lost.
        raise ValueError(
            "cann_train.saved(%d): the checkpoint directory %s is empty: write the "
            "checkpoint's files into cann_train.checkpoint_dir() "
            "(CANN_TRAIN_CHECKPOINT_DIR) before calling saved()" % (step, d))
    _append({"event": "saved", "step": step})
    ack = os.environ.get("CANN_TRAIN_ACK_FILE")
    if not ack:
        return True
    deadline = time.monotonic() + timeout
    pause = 0.005
    while _read_ack(ack) < step:
        if time.monotonic() > deadline:
            return False
        time.sleep(pause)
        pause = min(pause * 2, 0.1)
    return True
