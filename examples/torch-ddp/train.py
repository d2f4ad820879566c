"""Data-parallel training with torch.distributed (gloo, CPU) under cann-train.

A small MLP learns a synthetic MNIST-like task (28×28 inputs, 10 classes:
noisy copies of ten fixed prototypes), DistributedDataParallel across every
process of every node. It is an ordinary torchrun script — RANK, WORLD_SIZE,
MASTER_ADDR … come from the launcher's environment — plus four calls to the
cann_train helper: restored_step() to resume, report() for the loss curve,
should_checkpoint()/saved() to commit checkpoints the node worker uploads.

  cann-train quickstart -f examples/torch-ddp/job.yaml
  torchrun --nproc_per_node 2 examples/torch-ddp/train.py   # without cann-train
"""
import argparse
import datetime
import math
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

try:
    import cann_train as ct
except ImportError:  # run from a checkout without the node worker
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
    import cann_train as ct


def batch_for(step, rank, size, prototypes, noise):
    """This rank's examples at this step: the same on any node, after any
    restart (seeded by step and rank)."""
    g = torch.Generator().manual_seed(1_000_003 * step + rank)
    y = torch.randint(0, 10, (size,), generator=g)
    x = (prototypes[y] + noise * torch.randn(size, 28 * 28, generator=g)) / math.sqrt(1 + noise * noise)
    return x, y


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=ct.total_steps() or 300)
    ap.add_argument("--batch", type=int, default=32, help="examples per rank and step")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--noise", type=float, default=10.0, help="noise / signal of the inputs (harder: larger)")
    ap.add_argument("--step-delay", type=float, default=0.0, help="seconds to sleep per step (demos)")
    args = ap.parse_args()

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(0)  # the same initial weights on every rank
    prototypes = torch.randn(10, 28 * 28, generator=torch.Generator().manual_seed(7))
    model = nn.Sequential(nn.Linear(28 * 28, args.hidden), nn.ReLU(), nn.Linear(args.hidden, 10))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    start = ct.restored_step()
    path = os.path.join(ct.checkpoint_dir(), "checkpoint.pt")
    if start:
        state = torch.load(path)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        assert state["step"] == start, (state["step"], start)
    ddp = nn.parallel.DistributedDataParallel(model)
    if rank == 0:
        print(f"world {world}, steps {start + 1}..{args.steps}, restart {os.environ.get('TORCHELASTIC_RESTART_COUNT')}", flush=True)

    t_last = time.monotonic()
    for step in range(start + 1, args.steps + 1):
        x, y = batch_for(step, rank, args.batch, prototypes, args.noise)
        loss = F.cross_entropy(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        mean /= world
        now = time.monotonic()
        ct.report(step, loss=mean.item(), samples_per_sec=args.batch / max(now - t_last, 1e-9))
        t_last = now
        if ct.should_checkpoint(step) or step == args.steps:
            if rank == 0:
                tmp = path + ".tmp"
                torch.save({"step": step, "model": model.state_dict(), "optimizer": opt.state_dict()}, tmp)
                os.replace(tmp, path)
                ct.saved(step)
            dist.barrier()
        if rank == 0 and step % 50 == 0:
            print(f"step {step} loss {mean.item():.4f}", flush=True)
        if args.step_delay:
            time.sleep(args.step_delay)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
