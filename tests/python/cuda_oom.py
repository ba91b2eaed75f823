"""A rank that runs out of GPU memory the way PyTorch's caching allocator does,
through the driver API (ctypes on a libcuda: the simulator's, in tests).

The pool grows by one driver allocation per step until OOM_STEP, which asks
for more than the GPU has (a batch of unusually long sequences). That call
fails with CUDA_ERROR_OUT_OF_MEMORY; the allocator frees its cached segments
(every other one is free in this model), asks its GPU's free and total memory
(for the error message), tries once more, fails again and raises: the rank
exits 1. What it did is written to TRUTH as JSON first, for
the test to hold the agent's figures against.

usage: cuda_oom.py LIBCUDA GO_FILE TRUTH SEGMENT_MIB OOM_STEP
  GO_FILE: the rank waits for it before its first step (the agent has found
  its interpreter by then, so the stack at the failure can be taken).
"""
import ctypes
import json
import os
import sys
import time

CUDA_ERROR_OUT_OF_MEMORY = 2


class Driver:
    def __init__(self, path):
        self.cu = ctypes.CDLL(path)
        self.cu.cuInit.argtypes = [ctypes.c_uint]
        self.cu.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
        self.cu.cuMemFree_v2.argtypes = [ctypes.c_uint64]
        self.cu.cuMemGetInfo_v2.argtypes = [ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)]
        if self.cu.cuInit(0) != 0:
            raise RuntimeError("cuInit failed")

    def alloc(self, nbytes):
        p = ctypes.c_uint64(0)
        return self.cu.cuMemAlloc_v2(ctypes.byref(p), nbytes), p.value

    def free(self, ptr):
        if self.cu.cuMemFree_v2(ptr) != 0:
            raise RuntimeError("cuMemFree failed")

    def mem_info(self):
        free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
        self.cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))
        return free.value, total.value


class CachingAllocator:
    def __init__(self, driver, truth):
        self.driver, self.truth = driver, truth
        self.segments = []  # (ptr, bytes), oldest first
        self.held = self.peak = 0

    def _grow(self, nbytes):
        r, ptr = self.driver.alloc(nbytes)
        if r == 0:
            self.segments.append((ptr, nbytes))
            self.held += nbytes
            self.peak = max(self.peak, self.held)
            self.truth["allocations"] += 1
            self.truth["allocated_bytes"] += nbytes
        else:
            self.truth["failures"] += 1
        return r

    def _release_cached(self):
        kept = []
        for i, (ptr, nbytes) in enumerate(self.segments):
            if i % 2 == 0:  # cached: no live tensor in it
                self.driver.free(ptr)
                self.held -= nbytes
                self.truth["frees"] += 1
                self.truth["freed_bytes"] += nbytes
            else:
                kept.append((ptr, nbytes))
        self.segments = kept

    def malloc(self, nbytes):
        r = self._grow(nbytes)
        if r == 0:
            return
        self.truth["oom"] = {"asked_bytes": nbytes, "held_bytes": self.held, "peak_bytes": self.peak}
        self._release_cached()
        free, total = self.driver.mem_info()
        if self._grow(nbytes) != 0:
            raise MemoryError(f"CUDA out of memory. Tried to allocate {nbytes >> 20} MiB; "
                              f"{free >> 20} MiB free of {total >> 20} MiB")


def allocate_activations(allocator, nbytes):
    allocator.malloc(nbytes)


def forward(allocator, nbytes):
    allocate_activations(allocator, nbytes)


def train_step(allocator, nbytes):
    forward(allocator, nbytes)


def main():
    lib, go_file, truth_path = sys.argv[1], sys.argv[2], sys.argv[3]
    segment, oom_step = int(sys.argv[4]) << 20, int(sys.argv[5])
    driver = Driver(lib)
    truth = {"pid": os.getpid(), "allocations": 0, "allocated_bytes": 0, "frees": 0, "freed_bytes": 0,
             "failures": 0, "oom": None}
    _, truth["total_bytes"] = driver.mem_info()
    allocator = CachingAllocator(driver, truth)
    print("ready", flush=True)
    while not os.path.exists(go_file):
        time.sleep(0.05)
    try:
        for step in range(oom_step + 1):
            train_step(allocator, 2 * truth["total_bytes"] if step == oom_step else segment)
            time.sleep(0.02)
    finally:
        with open(truth_path + ".tmp", "w") as f:
            json.dump(truth, f)
        os.rename(truth_path + ".tmp", truth_path)


main()
