"""A real DDP job on CPU (Gloo) whose process-group calls are counted by the
script itself, for the framework layer's tests (issue 31).

Run it with torchrun, e.g.
  torchrun --standalone --nproc_per_node 4 tests/python/pg_train.py --steps 200 --truth-dir /tmp/t
Each rank trains a small MLP through DistributedDataParallel. A comm hook counts
the gradient all-reduces DDP makes on the world group; with --subgroup, ranks
0 and 1 also all-reduce a loss on a group of their own (new_group, described
"pair_group") every step. What the script did is the truth the tests hold the
agent to: truth-DIR/rank-R.json, written when training stops.

Faults come from the environment, as a user's own code would make them:
  PG_TRAIN_SLOW_RANK=R:MS    rank R computes MS more milliseconds in each backward
  PG_TRAIN_HANG_RANK=R:STEP  rank R stops before step STEP's all-reduce, in a
                             function named wait_for_checkpoint, and never comes back
  PG_TRAIN_SLOW_DATA_RANK=R:MS  rank R's input pipeline takes MS more milliseconds
                             per batch (its collate waits, as on slow storage)
Batches come from a DataLoader over a synthetic dataset (--workers processes).
"""
import argparse
import json
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset


class SyntheticDataset(Dataset):
    def __init__(self, n, dim, seed):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, dim, generator=g)
        self.y = torch.randint(0, 10, (n,), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


class SlowCollate:
    """The default collate, MS milliseconds late: a batch read from slow storage."""
    def __init__(self, ms):
        self.ms = ms

    def __call__(self, items):
        time.sleep(self.ms / 1000.0)
        return torch.utils.data.default_collate(items)


def batches(loader):
    """Batches for ever, epoch after epoch."""
    while True:
        for b in loader:
            yield b


def env_fault(name):
    """(rank, value) from NAME=R:V, or (None, None)."""
    v = os.environ.get(name, "")
    if not v:
        return None, None
    r, x = v.split(":")
    return int(r), float(x)


def build_model(dim):
    return torch.nn.Sequential(
        torch.nn.Linear(dim, 128), torch.nn.ReLU(),
        torch.nn.Linear(128, 10))


def extra_backward_compute(ms):
    """Busy on the CPU for ms milliseconds: a rank whose backward costs more."""
    end = time.perf_counter() + ms / 1000.0
    x = 0
    while time.perf_counter() < end:
        x += 1
    return x


def wait_for_checkpoint():
    """A rank that never reaches its next all-reduce."""
    while True:
        time.sleep(1)


class Counter:
    def __init__(self):
        self.calls = {}

    def add(self, group, op):
        self.calls.setdefault(group, {}).setdefault(op, 0)
        self.calls[group][op] += 1


def counting_allreduce_hook(state, bucket):
    """DDP's default reduction (a sum, then the mean), counted."""
    counter, world = state
    counter.add("default_pg", "all_reduce")
    fut = dist.all_reduce(bucket.buffer(), async_op=True).get_future()
    return fut.then(lambda f: f.value()[0].div_(world))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100, help="0: until --stop-file")
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--step-sleep", type=float, default=0.02)
    ap.add_argument("--subgroup", action="store_true", help="ranks 0 and 1 also all-reduce on a group of two")
    ap.add_argument("--truth-dir", default="", help="rank-R.json is written here when training stops")
    ap.add_argument("--ready-file", default="", help="written (per rank, .RANK) once training starts")
    ap.add_argument("--stop-file", default="", help="training stops once this file exists")
    ap.add_argument("--linger", type=float, default=0.0, help="seconds to wait after training")
    ap.add_argument("--workers", type=int, default=0, help="DataLoader worker processes")
    args = ap.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    counter = Counter()
    # Every rank calls new_group (c10d's rule), members or not.
    pair = dist.new_group([0, 1], group_desc="pair_group") if args.subgroup else None
    slow_rank, slow_ms = env_fault("PG_TRAIN_SLOW_RANK")
    hang_rank, hang_step = env_fault("PG_TRAIN_HANG_RANK")
    slow_data_rank, slow_data_ms = env_fault("PG_TRAIN_SLOW_DATA_RANK")

    model = build_model(args.dim)
    if rank == slow_rank:
        model[0].register_full_backward_hook(lambda *_: extra_backward_compute(slow_ms) and None)
    ddp = DDP(model)
    ddp.register_comm_hook((counter, world), counting_allreduce_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    loader = DataLoader(SyntheticDataset(4096, args.dim, 1234 + rank), batch_size=32, shuffle=True,
                        num_workers=args.workers, persistent_workers=args.workers > 0,
                        collate_fn=SlowCollate(slow_data_ms) if rank == slow_data_rank else None)
    stream = batches(loader)
    if args.ready_file:
        with open(f"{args.ready_file}.{rank}", "w") as f:
            f.write(str(os.getpid()))

    started = time.time()
    done = 0
    while True:
        if rank == hang_rank and done == int(hang_step):
            with open(os.path.join(args.truth_dir, f"hang-{rank}.json"), "w") as f:
                json.dump({"rank": rank, "pid": os.getpid(), "step": done, "at": time.time()}, f)
            wait_for_checkpoint()
        x, y = next(stream)
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        loss.backward()
        opt.step()
        if pair is not None and rank in (0, 1):
            dist.all_reduce(loss.detach(), group=pair)
            counter.add("pair_group", "all_reduce")
        done += 1
        if args.step_sleep:
            time.sleep(args.step_sleep)
        if args.steps and done >= args.steps:
            break
        if args.stop_file and done % 5 == 0 and os.path.exists(args.stop_file):
            break

    finished = time.time()
    if args.truth_dir:
        truth = {"rank": rank, "world": world, "pid": os.getpid(), "steps": done, "started": started,
                 "finished": finished,
                 "calls": counter.calls,
                 "slow_rank": slow_rank, "slow_ms": slow_ms,
                 "slow_data_rank": slow_data_rank, "slow_data_ms": slow_data_ms, "workers": args.workers}
        tmp = os.path.join(args.truth_dir, f"rank-{rank}.json.tmp")
        with open(tmp, "w") as f:
            json.dump(truth, f)
        os.rename(tmp, os.path.join(args.truth_dir, f"rank-{rank}.json"))
    if args.linger:
        time.sleep(args.linger)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
