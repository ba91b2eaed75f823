#!/usr/bin/env bash
# gpu-check.sh: end-to-end check of libargus-cupti.so on a machine WITH an NVIDIA
# GPU and driver (it cannot pass anywhere else). It builds Argus, compiles a small
# CUDA program (named kernels in a loop, cudaMemcpy both ways), starts the agent,
# runs the program with the injection library, and checks that the GPU activity
# reached the agent's metrics and trace.
#
#   scripts/gpu-check.sh            (sudo is used for the agent unless run as root)
#
# Environment: ARGUS_GPU_CHECK_PORT (9746), ARGUS_GPU_CHECK_SECONDS (program run
# time, 8), ARGUS_GPU_CHECK_RESULTS (results dir), NVCC (nvcc to use),
# ARGUS_GPU_CHECK_SKIP_BUILD=1 (use the existing build/).
# Prints PASS/FAIL per check, keeps every output under the results dir, exits
# non-zero when any check failed. The agent is stopped on exit.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 2
PORT=${ARGUS_GPU_CHECK_PORT:-9746}
SECONDS_RUN=${ARGUS_GPU_CHECK_SECONDS:-8}
RESULTS=${ARGUS_GPU_CHECK_RESULTS:-$ROOT/build/gpu-check/$(date +%Y%m%d-%H%M%S)}
NVCC=${NVCC:-}
if [[ -z "$NVCC" ]]; then
  NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
fi
LIB="$ROOT/build/lib/libargus-cupti.so"
AGENT="$ROOT/build/bin/argus-agent"
BASE="http://127.0.0.1:$PORT"
KERNEL=argus_check_saxpy
SUDO=()
if [[ $EUID -ne 0 ]]; then SUDO=(sudo); fi

mkdir -p "$RESULTS"
SUMMARY="$RESULTS/summary.txt"
: >"$SUMMARY"
fails=0
pass() { echo "PASS $1" | tee -a "$SUMMARY"; }
fail() {
  echo "FAIL $1${2:+ ($2)}" | tee -a "$SUMMARY"
  fails=$((fails + 1))
}
finish() {
  echo "results: $RESULTS"
  if ((fails > 0)); then
    echo "gpu-check: $fails check(s) failed" | tee -a "$SUMMARY"
    exit 1
  fi
  echo "gpu-check: all checks passed" | tee -a "$SUMMARY"
  exit 0
}

agent_pid=""
prog_pid=""
cleanup() {
  if [[ -n "$prog_pid" ]] && kill -0 "$prog_pid" 2>/dev/null; then
    kill "$prog_pid" 2>/dev/null
    wait "$prog_pid" 2>/dev/null
  fi
  if [[ -n "$agent_pid" ]]; then
    "${SUDO[@]}" kill -TERM "$agent_pid" 2>/dev/null
    for _ in $(seq 1 50); do
      ps -p "$agent_pid" >/dev/null 2>&1 || break
      sleep 0.1
    done
    "${SUDO[@]}" kill -KILL "$agent_pid" 2>/dev/null
    wait "$agent_pid" 2>/dev/null
    agent_pid=""
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# 1. A GPU and a driver.
if nvidia-smi >"$RESULTS/nvidia-smi.txt" 2>&1 && nvidia-smi -L >>"$RESULTS/nvidia-smi.txt" 2>&1; then
  pass "nvidia-smi: $(nvidia-smi -L 2>/dev/null | head -n 1)"
else
  fail "nvidia-smi" "no GPU or driver; see nvidia-smi.txt"
  finish
fi

# 2. Build.
if [[ "${ARGUS_GPU_CHECK_SKIP_BUILD:-0}" == 1 ]]; then
  echo "build: skipped (ARGUS_GPU_CHECK_SKIP_BUILD=1)" >"$RESULTS/build.log"
elif make build >"$RESULTS/build.log" 2>&1; then
  pass "make build"
else
  fail "make build" "see build.log"
  finish
fi
for f in "$LIB" "$AGENT"; do
  if [[ ! -e "$f" ]]; then
    fail "built: $f" "missing"
    finish
  fi
done
nm -D --defined-only "$LIB" >"$RESULTS/exports.txt" 2>&1
readelf -n "$LIB" >"$RESULTS/usdt-notes.txt" 2>&1
if grep -qw InitializeInjection "$RESULTS/exports.txt" && grep -qw argus_gpu_wire_version "$RESULTS/exports.txt" &&
  grep -q "Name: gpu_batch" "$RESULTS/usdt-notes.txt" && grep -q "Name: gpu_name" "$RESULTS/usdt-notes.txt"; then
  pass "libargus-cupti.so exports and USDT notes"
else
  fail "libargus-cupti.so exports and USDT notes" "see exports.txt, usdt-notes.txt"
fi

# 3. The CUDA program: three named kernels in a loop, copies both ways.
SRC="$RESULTS/gpu_check_prog.cu"
PROG="$RESULTS/gpu_check_prog"
cat >"$SRC" <<'CUDA'
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

__global__ void argus_check_saxpy(int n, float a, const float* x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
__global__ void argus_check_scale(int n, float a, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] *= a;
}
__global__ void argus_check_fill(int n, float v, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = v;
}

#define CK(x)                                                                       \
  do {                                                                              \
    cudaError_t e_ = (x);                                                           \
    if (e_ != cudaSuccess) {                                                        \
      fprintf(stderr, "gpu_check_prog: %s: %s\n", #x, cudaGetErrorString(e_));    \
      return 1;                                                                     \
    }                                                                               \
  } while (0)

struct stats { uint64_t records, batches, names, skipped, untimed, dropped, buffers, denied;
               int32_t active, disabled, clock_identity, pad; int64_t offset; };

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char** argv) {
  double seconds = argc > 1 ? atof(argv[1]) : 8.0;
  const int n = 1 << 20;
  size_t bytes = n * sizeof(float);
  float* h = (float*)malloc(bytes);
  for (int i = 0; i < n; ++i) h[i] = 1.0f;
  float *x, *y;
  CK(cudaMalloc(&x, bytes));
  CK(cudaMalloc(&y, bytes));
  long iters = 0;
  double t0 = now_s();
  while (now_s() - t0 < seconds) {
    CK(cudaMemcpy(x, h, bytes, cudaMemcpyHostToDevice));
    for (int k = 0; k < 20; ++k) {
      argus_check_fill<<<(n + 255) / 256, 256>>>(n, 2.0f, y);
      argus_check_saxpy<<<(n + 255) / 256, 256>>>(n, 3.0f, x, y);
      argus_check_scale<<<(n + 255) / 256, 256>>>(n, 0.5f, y);
    }
    CK(cudaGetLastError());
    CK(cudaMemcpy(h, y, bytes, cudaMemcpyDeviceToHost));
    ++iters;
    usleep(2000);  /* some host time: the GPU is not busy all the time */
  }
  CK(cudaDeviceSynchronize());
  printf("iterations=%ld check=%g\n", iters, (double)h[0]);
  sleep(1); /* one flush period of the injection library */
  const char* lib = getenv("CUDA_INJECTION64_PATH");
  void* hl = lib ? dlopen(lib, RTLD_NOW | RTLD_NOLOAD) : NULL;
  int (*get)(struct stats*, size_t) = hl ? (int (*)(struct stats*, size_t))dlsym(hl, "argus_cupti_stats") : NULL;
  if (get) {
    struct stats s = {0};
    get(&s, sizeof s);
    printf("injection_loaded=1\nactive=%d\ndisabled=%d\nrecords=%llu\nbatches=%llu\nnames=%llu\ndropped=%llu\n"
           "clock_identity=%d\n", s.active, s.disabled, (unsigned long long)s.records,
           (unsigned long long)s.batches, (unsigned long long)s.names, (unsigned long long)s.dropped,
           s.clock_identity);
  } else {
    printf("injection_loaded=0\n");
  }
  cudaFree(x);
  cudaFree(y);
  free(h);
  return 0;
}
CUDA
if "$NVCC" -O2 -o "$PROG" "$SRC" -ldl >"$RESULTS/nvcc.log" 2>&1; then
  pass "nvcc compiles the check program"
else
  fail "nvcc compiles the check program" "see nvcc.log"
  finish
fi

# 4. The agent.
"${SUDO[@]}" "$AGENT" --listen "127.0.0.1:$PORT" --window 5 --debug-routes >"$RESULTS/agent.log" 2>&1 &
agent_pid=$!
up=0
for _ in $(seq 1 60); do
  if curl -sf "$BASE/healthz" >/dev/null 2>&1; then
    up=1
    break
  fi
  if ! ps -p "$agent_pid" >/dev/null 2>&1; then break; fi
  sleep 0.5
done
if ((up)); then
  pass "argus-agent up on $BASE"
else
  fail "argus-agent up on $BASE" "see agent.log"
  finish
fi

# 5. The program, with the injection library; sample the agent while it runs.
CUDA_INJECTION64_PATH="$LIB" RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 ARGUS_JOB_ID=gpu-check \
  "$PROG" "$SECONDS_RUN" >"$RESULTS/prog.out" 2>"$RESULTS/prog.err" &
prog_pid=$!
busy_seen=0
records_seen=0
records_total() {
  awk '/^argus_gpu_records_total([{ ])/ { s += $NF } END { print s + 0 }' "$1"
}
sample=0
while kill -0 "$prog_pid" 2>/dev/null; do
  sleep 1
  sample=$((sample + 1))
  curl -s "$BASE/metrics" >"$RESULTS/metrics.during.$sample.txt" 2>&1
  if grep -q 'argus_gpu_busy_ratio{[^}]*job_id="gpu-check"' "$RESULTS/metrics.during.$sample.txt"; then busy_seen=1; fi
  if awk -v t="$(records_total "$RESULTS/metrics.during.$sample.txt")" 'BEGIN { exit !(t > 0) }'; then records_seen=1; fi
done
wait "$prog_pid"
prog_rc=$?
prog_pid=""
sleep 2
curl -s "$BASE/metrics" >"$RESULTS/metrics.after.txt" 2>&1
curl -s "$BASE/api/v1/trace?seconds=30" >"$RESULTS/trace.json" 2>&1
curl -s "$BASE/api/v1/ranks" >"$RESULTS/ranks.json" 2>&1

if ((prog_rc == 0)); then
  pass "check program ran (exit 0)"
else
  fail "check program ran" "exit $prog_rc; see prog.err"
fi
if grep -q '^argus-cupti:' "$RESULTS/prog.err"; then
  fail "libargus-cupti.so stayed enabled" "$(grep -m1 '^argus-cupti:' "$RESULTS/prog.err")"
else
  pass "libargus-cupti.so stayed enabled (no argus-cupti: line)"
fi
if grep -q '^injection_loaded=1' "$RESULTS/prog.out" && grep -q '^active=1' "$RESULTS/prog.out" &&
  ! grep -q '^records=0$' "$RESULTS/prog.out"; then
  pass "library converted records ($(grep -m1 '^records=' "$RESULTS/prog.out"), $(grep -m1 '^batches=' "$RESULTS/prog.out"))"
else
  fail "library converted records" "see prog.out"
fi
if grep -q 'argus_gpu_busy_ratio{[^}]*job_id="gpu-check"' "$RESULTS/metrics.after.txt"; then busy_seen=1; fi
if awk -v t="$(records_total "$RESULTS/metrics.after.txt")" 'BEGIN { exit !(t > 0) }'; then records_seen=1; fi
if ((busy_seen)); then
  pass 'metrics: argus_gpu_busy_ratio{job_id="gpu-check",...}'
else
  fail 'metrics: argus_gpu_busy_ratio{job_id="gpu-check",...}' "see metrics.*.txt"
fi
if ((records_seen)); then
  pass "metrics: argus_gpu_records_total > 0"
else
  fail "metrics: argus_gpu_records_total > 0" "see metrics.*.txt"
fi
if grep -q "$KERNEL" "$RESULTS/trace.json"; then
  pass "trace: contains $KERNEL"
else
  fail "trace: contains $KERNEL" "see trace.json"
fi

cleanup
finish
