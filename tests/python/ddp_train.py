"""A small, real DDP training job on CPU (Gloo), for the Python layer's tests.

Run it with torchrun, e.g.
  torchrun --standalone --nproc_per_node 2 tests/python/ddp_train.py --steps 200
Each rank trains a small MLP on synthetic data through a DataLoader. The loop is
split into named functions so that stacks and profiles have something to show.
"""
import argparse
import gc
import json
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset


class SyntheticDataset(Dataset):
    def __init__(self, n, dim):
        g = torch.Generator().manual_seed(1234)
        self.x = torch.randn(n, dim, generator=g)
        self.y = torch.randint(0, 10, (n,), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], self.y[i]


def build_model(dim):
    return torch.nn.Sequential(
        torch.nn.Linear(dim, 256), torch.nn.ReLU(),
        torch.nn.Linear(256, 256), torch.nn.ReLU(),
        torch.nn.Linear(256, 10))


def train_step(model, opt, batch):
    x, y = batch
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()  # DDP all-reduces the gradients over Gloo here
    opt.step()
    return loss.item()


def should_stop(steps, done, stop_file):
    if steps and done >= steps:
        return True
    # Checked every few steps: a stat per step would show up in profiles.
    return bool(stop_file) and done % 10 == 0 and os.path.exists(stop_file)


def train_loop(model, opt, loader, steps, step_sleep, stop_file, collect_every):
    done = 0
    while True:
        for batch in loader:
            train_step(model, opt, batch)
            done += 1
            if collect_every and done % collect_every == 0:
                gc.collect()  # some training loops do this to bound pauses
            if step_sleep:
                time.sleep(step_sleep)
            if should_stop(steps, done, stop_file):
                return done


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100, help="0: until killed")
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--step-sleep", type=float, default=0.0)
    ap.add_argument("--ready-file", default="", help="written (per rank, .RANK) once training starts")
    ap.add_argument("--stop-file", default="", help="training stops once this file exists")
    ap.add_argument("--collect-every", type=int, default=0, help="gc.collect() every N steps")
    ap.add_argument("--gc-stats-file", default="",
                    help="after training, gc.get_stats() is written here (.RANK) before lingering")
    ap.add_argument("--workers", type=int, default=0, help="DataLoader worker processes")
    ap.add_argument("--linger", type=float, default=0.0, help="seconds to wait after training")
    args = ap.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = DDP(build_model(args.dim))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(SyntheticDataset(4096, args.dim), batch_size=32, shuffle=True,
                        num_workers=args.workers, persistent_workers=args.workers > 0)
    if args.ready_file:
        with open(f"{args.ready_file}.{rank}", "w") as f:
            f.write(str(os.getpid()))
    world = dist.get_world_size()
    steps = train_loop(model, opt, loader, args.steps, args.step_sleep, args.stop_file,
                       args.collect_every)
    if args.gc_stats_file:
        stats = gc.get_stats()  # read before the file work below can allocate
        with open(f"{args.gc_stats_file}.{rank}.tmp", "w") as f:
            json.dump(stats, f)
        os.rename(f"{args.gc_stats_file}.{rank}.tmp", f"{args.gc_stats_file}.{rank}")
    if args.linger:
        time.sleep(args.linger)
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        print(f"trained {steps} steps on {world} ranks")


if __name__ == "__main__":
    main()
