#!/usr/bin/env bash
# Writes the seed corpora under fuzz/corpus/ (checked in; run again after changing a
# seed here). Text seeds are written as they are; ELF seeds are built from a small C
# file with the system's gcc, kept tiny by the link flags. Nothing is downloaded.
# Other files there (inputs of past findings) are left alone.
set -euo pipefail
cd "$(dirname "$0")"
C=corpus
mkdir -p "$C"/{procfs_maps,procfs_environ,procfs_stat,elf_symbols,rdma_sysfs,gpu_wire,http_query,gpu_kernel_name}

# ---- /proc/PID/maps -----------------------------------------------------------------
m=$C/procfs_maps
printf '%s\n' \
  '55d0c6a00000-55d0c6a21000 r-xp 00001000 fd:01 1234567                    /usr/bin/python3.11' \
  '7f1c2a000000-7f1c2a021000 rw-p 00000000 00:00 0 ' \
  '7f1c2b000000-7f1c2b100000 r-xp 00002000 103:02 42   /opt/my libs/lib nccl.so.2' \
  '7f1c2c000000-7f1c2c001000 r-xp 00000000 08:01 99 /tmp/libshim.so (deleted)' \
  '7ffd1a000000-7ffd1a021000 rw-p 00000000 00:00 0                          [stack]' \
  'ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]' > $m/typical
printf '1000-2000 r-xp 00000000 08:01 5 /a\n3000-2000 r-xp 00000000 08:01 5 /a\n10000000000000000-10000000000000001 r-xp 0 08:01 5 /a\n1000-2000 r-xq 00000000 08:01 5 /a\n1000-2000 r-xp 00000000 0801 5 /a\n' > $m/malformed
printf '5500-5600 rw-p 00000000 00:00 0 [heap]' > $m/no_newline
printf '7f00-7f10 rw-s 00000000 00:05 7 /dev/zero (deleted) \n7f10-7f20 r-xp 00000000 08:01 9 /usr/lib/x86_64-linux-gnu/libcuda.so.1\n' > $m/deleted_suffix

# ---- /proc/PID/environ --------------------------------------------------------------
e=$C/procfs_environ
printf 'RANK=3\0WORLD_SIZE=8\0LOCAL_RANK=3\0MASTER_ADDR=10.0.0.1\0TORCHELASTIC_RUN_ID=job-42\0' > $e/torchrun
printf 'OMPI_COMM_WORLD_RANK=1\0OMPI_COMM_WORLD_SIZE=2\0SLURM_JOB_ID=77\0SLURM_PROCID=1' > $e/mpi_no_trailing_nul
printf '\0\0=x\0NOEQUALS\0A=1\0A=2\0B=\xff\xfe\0' > $e/odd

# ---- /proc/PID/stat -----------------------------------------------------------------
s=$C/procfs_stat
printf '4242 (python3) S 1 4242 4242 0 -1 4194560 123 0 0 0 17 4 0 0 20 0 9 0 987654 1000000 2000 18446744073709551615 1 1 0 0 0 0 0 16781312 16386 0 0 0 17 3 0 0 0 0 0\n' > $s/python
printf '17 (a) b) (c) R 1 17 17 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 555 0 0\n' > $s/parens_in_comm
printf '1 (init' > $s/truncated

# ---- ELF ----------------------------------------------------------------------------
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/lib.c" <<'SRC'
#include <sys/sdt.h>
int ncclAllReduce(void) { DTRACE_PROBE(argus, gpu_batch); return 1; }
int ncclCommInitRank(void) { return 2; }
static int helper(void) { return 3; }
int cuLaunchKernel(void) { return helper(); }
int _PyRuntime = 5;
int argus_gpu_wire_version(void) { return 1; }
#ifdef VERSIONED
__asm__(".symver old_ncclGetVersion,ncclGetVersion@NCCL_2.0");
__asm__(".symver new_ncclGetVersion,ncclGetVersion@@NCCL_2.1");
int old_ncclGetVersion(void) { return 20; }
int new_ncclGetVersion(void) { return 21; }
#endif
static void resolved(void) {}
static void (*resolver(void))(void) { return resolved; }
void ncclBroadcast(void) __attribute__((ifunc("resolver")));
__attribute__((weak)) int ncclGroupEnd(void) { return 0; }
SRC
printf 'NCCL_2.0 { global: nccl*; cuLaunchKernel; _PyRuntime; argus_gpu_wire_version; local: *; };\nNCCL_2.1 { global: ncclGetVersion; } NCCL_2.0;\n' > "$tmp/v.map"
small=(-shared -fPIC -nostdlib -O1 -Wl,--build-id=none -Wl,-z,noseparate-code -Wl,-z,max-page-size=0x10
       -Wl,-z,norelro -Wl,--hash-style=gnu)
gcc "${small[@]}" -DVERSIONED -Wl,--version-script="$tmp/v.map" "$tmp/lib.c" -o $C/elf_symbols/versioned.so
gcc "${small[@]}" "$tmp/lib.c" -o $C/elf_symbols/plain.so
gcc "${small[@]}" -s "$tmp/lib.c" -o $C/elf_symbols/stripped.so
gcc -static -nostdlib -O1 -Wl,--build-id=none -Wl,-z,max-page-size=0x10 -Wl,-e,cuLaunchKernel -Wl,-z,norelro \
  "$tmp/lib.c" -o $C/elf_symbols/static_exec 2>/dev/null || true
head -c 64 $C/elf_symbols/plain.so > $C/elf_symbols/header_only
chmod 644 $C/elf_symbols/*

# ---- sysfs counters and rates (fuzz_rdma_sysfs.cpp: per poll a seconds line, then per
# port: rate, state, phys_state, rcv_data, xmit_data, xmit_wait, symbol_error, link_downed)
r=$C/rdma_sysfs
poll() {  # seconds, then 2 x 8 lines
  printf '%s\n' "$@"
}
{
  poll 1 '400 Gb/sec (4X NDR)' '4: ACTIVE' '5: LinkUp' 1000 2000 0 0 0 '400 Gb/sec (4X NDR)' '4: ACTIVE' '5: LinkUp' 1000 2000 0 0 0
  poll 1 '400 Gb/sec (4X NDR)' '4: ACTIVE' '5: LinkUp' 900000000 900000000 50000000 10 1 '200 Gb/sec (2X NDR)' '4: ACTIVE' '5: LinkUp' 1000 2000 0 0 0
  poll 1 '400 Gb/sec (4X NDR)' '1: DOWN' '3: Disabled' 4294967000 12 0 100 2 '25 Gb/sec (1X EDR)' '4: ACTIVE' '5: LinkUp' 500 2000 0 0 0
} > $r/degrade
{
  poll 0 '2.5 Gb/sec (1X)' '4: ACTIVE' '5: LinkUp' 18446744073709551615 0 0 0 0 '10 Gb/sec (4X)' '2: INIT' '2: Polling' ' 7 ' N/A 12abc '' -1
  poll 3999 '53.125 Gb/sec (1X HDR)' '5: ACT_DEFER' '5: LinkUp' 3 0 0 0 0 '100 Mb/s' '4: ACTIVE' '5: LinkUp' 1 1 1 1 1
} > $r/edges
printf '1\n56 Gb/sec (4X FDR)\n4: ACTIVE\n5: LinkUp\n1\n1\n' > $r/short

# ---- GPU wire records: [u16 len][record], little-endian (bpf/argus.h layouts) ---------
python3 - "$C/gpu_wire" <<'PY'
import struct, sys
out = sys.argv[1]
EV_NCCL_COLL, EV_CALL_DONE, EV_GPU_BATCH, EV_GPU_NAME = None, None, None, None
# enum argus_event_type values are read from the header so the seeds follow it.
import re
src = open("../bpf/argus.h").read()
enum = re.search(r"enum argus_event_type\s*{(.*?)}", src, re.S).group(1)
vals, n = {}, 0
for name, val in re.findall(r"(ARGUS_EV_\w+)\s*(?:=\s*(\d+))?", enum):
    n = int(val) if val else n
    vals[name] = n
    n += 1
def hdr(t, tgid, ts): return struct.pack("<IIIIQ", t, tgid, tgid, 0, ts)
def frame(b): return struct.pack("<H", len(b)) + b
def rec(start, end, nbytes, corr, name, stream, dev, kind, flags):
    return struct.pack("<QQQIIIHBB", start, end, nbytes, corr, name, stream, dev, kind, flags)
def batch(tgid, ts, recs, sent=None, dropped=0):
    return hdr(vals["ARGUS_EV_GPU_BATCH"], tgid, ts) + struct.pack("<IIQ", len(recs), sent if sent is not None else len(recs), dropped) + b"".join(recs)
def name(tgid, nid, s):
    b = s.encode()[:255]
    return hdr(vals["ARGUS_EV_GPU_NAME"], tgid, 1) + struct.pack("<II", nid, 0) + b + b"\0" * (256 - len(b))
def coll(tgid, ts, seq, op=1, peer=-1, group=0):  # comm, seq, op, peer, bytes, group
    return hdr(vals["ARGUS_EV_NCCL_COLL"], tgid, ts) + struct.pack("<QQIiQQ", 0xdead, seq, op, peer, 4096, group)
def done(tgid, ts, start, cls): return hdr(vals["ARGUS_EV_CALL_DONE"], tgid, ts) + struct.pack("<QIIIiQ", start, cls, 1, 2, 0, 0xdead)
ms = 1_000_000
steps = []
t = 1_000 * ms
for step in range(3):
    steps.append(frame(coll(7, t, step + 1)))
    recs = [rec(t + i * 2 * ms, t + i * 2 * ms + ms, 0, i, 1 + i % 2, 7, 0, 1, 0) for i in range(8)]
    recs.append(rec(t + 20 * ms, t + 22 * ms, 0, 99, 3, 7, 0, 1, 0x1 | 0x2 | 0x4))
    recs.append(rec(t + 22 * ms, t + 23 * ms, 1 << 20, 100, 0, 8, 0, 2, 1 << 4))
    steps.append(frame(batch(7, t + 30 * ms, recs)))
    steps.append(frame(done(7, t + 25 * ms, t + 19 * ms, 1)))
    t += 100 * ms
names = frame(name(7, 1, "_Z10gemmKernelPfS_")) + frame(name(7, 2, "elementwise")) + frame(name(7, 3, "ncclDevKernel_SendRecv"))
open(f"{out}/steps", "wb").write(names + b"".join(steps))
# Out of order, overlapping, end before start, truncated (sent > n), dropped, empty.
odd = [rec(5 * ms, 4 * ms, 0, 1, 1, 1, 0, 1, 0), rec(1 * ms, 9 * ms, 0, 2, 1, 1, 0, 1, 0),
       rec(2 * ms, 3 * ms, 0, 3, 9, 2, 0, 3, 0), rec(0, 0, 0, 4, 0, 0, 0, 1, 0)]
open(f"{out}/odd", "wb").write(frame(batch(9, 10 * ms, odd, sent=300, dropped=17)) + frame(batch(9, 11 * ms, [], dropped=5))
                                + frame(batch(9, 1, [odd[0]])[:-3]))
open(f"{out}/names", "wb").write(frame(name(5, 0, "")) + frame(name(5, 4000000000, "x" * 300)))
# Communicators made from a parent (argus_nccl_child_event) and InitAll cliques:
# a split, a NOCOLOR one, a split whose handle comes later, a shrink whose list
# is longer than the record holds, and an InitAll claiming more than it carries.
def child(tgid, api, comm, parent, out, nth, color, key, n_excl, excl):
    excl = (list(excl) + [0] * 32)[:32]
    return (hdr(vals["ARGUS_EV_NCCL_CHILD"], tgid, 5) + struct.pack("<QQQQiIiiiI", comm, parent, out, nth, 0, api, color, key, n_excl, 0)
            + struct.pack("<32i", *excl))
def init_all(tgid, ndev, comms):
    comms = (list(comms) + [0] * 16)[:16]
    return hdr(vals["ARGUS_EV_NCCL_INIT_ALL"], tgid, 6) + struct.pack("<ii", 0, ndev) + struct.pack("<16Q", *comms)
SPLIT, SHRINK = 3, 4
open(f"{out}/comms", "wb").write(
    frame(coll(3, 1, 1)) + frame(child(3, SPLIT, 0xa1, 0xdead, 0x5000, 1, 0, 0, 0, []))
    + frame(child(3, SPLIT, 0, 0xdead, 0, 2, -1, 0, 0, [])) + frame(child(3, SPLIT, 0, 0xdead, 0x6000, 3, 1, 1, 0, []))
    + frame(coll(3, 2, 1, 6, 1, 7)) + frame(child(3, SHRINK, 0xa2, 0xa1, 0x7000, 1, 0, 0, 40, range(32)))
    + frame(child(3, SHRINK, 0xa3, 0xa2, 0x7000, 1, 0, 0, -5, [2**31 - 1, -2**31])) + frame(init_all(3, 1000, range(1, 17)))
    + frame(init_all(3, -1, [])))
# A folding producer (gpu/gpu_fold.h): span + sketch records, gap records, a kept NCCL
# kernel with its busy share, then a span that lies, and sketch records with no span.
def span(start, end, kernel_ns, busy, idle, kernels):
    return struct.pack("<QQQIIIHBB", start, end, kernel_ns, busy, idle, kernels, 0, 4, 0)
def sketch(start, sum_ns, count, bucket, nid):
    return struct.pack("<QQIiIIIHBB", start, sum_ns, count, bucket, 0, nid, 0, 0, 5, 0)
def gap(start, end, bubble): return rec(start, end, 0, 0, 0, 0, 0, 6, 1 if bubble else 0)
t = 2_000 * ms
folded = [gap(t - 3 * ms, t, True), span(t, t + 8 * ms, 7 * ms, 7 * ms, ms // 2, 40),
          sketch(t, 4 * ms, 30, 700, 1), sketch(t, 3 * ms, 10, 720, 2),
          rec(t + 8 * ms, t + 10 * ms, 2 * ms, 41, 3, 9, 0, 1, 0x1 | 0x10),
          span(t + 10 * ms, t + 9 * ms, 1, 2**32 - 1, 2**32 - 1, 0), sketch(t, 2**64 - 1, 2**32 - 1, -2**31, 7)]
unheard = struct.pack("<QQQQIHBB", 0, 0, 2**64 - 1, 12345, 2**32 - 1, 0, 7, 0)  # what nobody heard, saturated
folded.insert(0, unheard)
flood = [sketch(t + 20 * ms, 5, 1, 2**31 - 1, i) for i in range(256)]
open(f"{out}/folded", "wb").write(frame(coll(11, t, 1)) + frame(batch(11, t + 30 * ms, folded))
                                  + frame(batch(11, t + 31 * ms, flood)) + frame(coll(11, t + 100 * ms, 2)))
# Wire version 2: sketch entries two a record (an odd one's second has count 0), and
# a pair that lies (sums and buckets at their limits, a span start far off).
def pair(start, e0, e1):  # e = (sum_ns, count, name_id, bucket)
    return struct.pack("<QIIIIIIhhHBB", start, e0[0], e1[0], e0[1], e1[1], e0[2], e1[2], e0[3], e1[3], 0, 8, 0)
paired = [span(t, t + 8 * ms, 7 * ms, 7 * ms, 0, 41), pair(t, (4 * ms, 30, 1, 380), (3 * ms, 10, 2, 390)),
          pair(t, (1, 1, 3, 300), (0, 0, 0, 0)), pair(2**64 - 1, (2**32 - 1, 2**32 - 1, 7, -2**15), (2**32 - 1, 1, 8, 2**15 - 1))]
open(f"{out}/pairs", "wb").write(frame(coll(12, t, 1)) + frame(batch(12, t + 30 * ms, paired)) + frame(coll(12, t + 100 * ms, 2)))
PY

# ---- HTTP query values ----------------------------------------------------------------
q=$C/http_query
printf '20' > $q/last; printf '600' > $q/last_max; printf '1700000050.25' > $q/since
printf '2.5' > $q/seconds; printf '1e3' > $q/exp; printf -- '-0' > $q/neg_zero; printf '5\0junk' > $q/embedded_nul

# ---- Kernel names (gpu/cupti_convert) -------------------------------------------------
k=$C/gpu_kernel_name
printf '_Z22ncclDevKernel_SendRecvP11ncclDevComm' > $k/nccl_sendrecv
printf 'ncclKernel_AllReduce_RING_LL_Sum_float' > $k/nccl_plain
printf '_ZN7cutlass6KernelINS_4gemm6kernel4GemmEEEvNT_6ParamsE' > $k/cutlass
printf '_ZL11reduceKernelPfi' > $k/internal
printf '_Z99999999999x' > $k/bad_length
echo "fuzz/make_seeds.sh: $(find $C -type f | wc -l) seeds in $(du -sh $C | cut -f1)"
