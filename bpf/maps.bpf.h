/* Maps shared by every Argus BPF program. Each program file includes this; the
 * definitions are __weak so that `bpftool gen object` links them into one map. */
#ifndef ARGUS_MAPS_BPF_H
#define ARGUS_MAPS_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "argus.h"
#include "argus_python.h"

#define ARGUS_MAX_TRACKED 16384
#define ARGUS_MAX_STATS 65536
#define ARGUS_MAX_INFLIGHT 16384

/* tgid -> enum argus_tgid_state. Userspace writes TRACKED/IGNORED; BPF writes AUTO. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, ARGUS_MAX_TRACKED);
	__type(key, __u32);
	__type(value, __u32);
} tracked SEC(".maps") __weak;

/* Hot-path aggregates: calls, bytes and durations per (tgid, kind, op/api, code).
 * Per-CPU so that concurrent ranks never contend; userspace sums the CPUs. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, ARGUS_MAX_STATS);
	__type(key, struct argus_stat_key);
	__type(value, struct argus_stat_val);
} stats SEC(".maps") __weak;

/* Entry state of calls timed entry->return. LRU: threads that die mid-call
 * (or hang forever) must not fill the map. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, ARGUS_MAX_INFLIGHT);
	__type(key, struct argus_inflight_key);
	__type(value, struct argus_inflight);
} inflight SEC(".maps") __weak;

/* Counters per (tgid, kind, communicator): its collectives' sequence numbers,
 * and the splits and shrinks made from it (enum argus_seq_kind). LRU:
 * communicators destroyed without the agent noticing must not fill it. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, ARGUS_MAX_TRACKED);
	__type(key, struct argus_seq_key);
	__type(value, __u64);
} coll_seq SEC(".maps") __weak;

/* pid_tgid -> the thread's NCCL group state (ncclGroupStart depth, the open
 * group's number). LRU: a thread that dies inside a group must not hold a slot. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, ARGUS_MAX_INFLIGHT);
	__type(key, __u64);
	__type(value, struct argus_group_state);
} nccl_group SEC(".maps") __weak;

/* tgid -> where its Python interpreter is and how it is laid out (the GC
 * probes and the stack sampler read it). Written by the agent per rank. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, ARGUS_MAX_TRACKED);
	__type(key, __u32);
	__type(value, struct argus_py_proc);
} py_procs SEC(".maps") __weak;

/* Rare events to userspace. Size is set by the agent before load. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} events SEC(".maps") __weak;

/* Named error counters (enum argus_bpf_error), exported by the agent. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, ARGUS_ERR_MAX);
	__type(key, __u32);
	__type(value, __u64);
} bpf_errors SEC(".maps") __weak;

#endif
