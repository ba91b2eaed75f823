/* The floor of in-process hooking, for bench/run.sh part a: an LD_PRELOAD
 * library that counts the calls Argus probes (the collective, the synchronize,
 * the kernel launch) and forwards each to the real function (RTLD_NEXT). It
 * costs a call through a pointer and a thread-local increment: what a hook
 * inside the process pays at least, next to a uprobe's trap. It exists only to
 * be measured; Argus itself never injects into a training process this way.
 * At exit it prints its counts, so the run can check that it interposed. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum { kAllReduce, kStreamSync, kLaunch, kCalls };
static const char *const kNames[kCalls] = {"ncclAllReduce", "cuStreamSynchronize", "cuLaunchKernel"};
static __thread uint64_t t_counts[kCalls];

/* Resolved at the first call (the libraries are dlopened after start); a race
 * between threads stores the same pointer twice. */
static void *next_fn(int which)
{
	static void *resolved[kCalls];
	void *fn = __atomic_load_n(&resolved[which], __ATOMIC_ACQUIRE);
	if (fn == NULL) {
		fn = dlsym(RTLD_NEXT, kNames[which]);
		__atomic_store_n(&resolved[which], fn, __ATOMIC_RELEASE);
	}
	return fn;
}

typedef int (*AllReduceFn)(const void *, void *, size_t, int, int, void *, void *);
typedef int (*StreamSyncFn)(void *);
typedef int (*LaunchFn)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void *,
			void **, void **);

int ncclAllReduce(const void *send, void *recv, size_t count, int dtype, int op, void *comm, void *stream)
{
	t_counts[kAllReduce]++;
	AllReduceFn fn = (AllReduceFn)next_fn(kAllReduce);
	return fn ? fn(send, recv, count, dtype, op, comm, stream) : 2 /* ncclSystemError */;
}

int cuStreamSynchronize(void *stream)
{
	t_counts[kStreamSync]++;
	StreamSyncFn fn = (StreamSyncFn)next_fn(kStreamSync);
	return fn ? fn(stream) : 999 /* CUDA_ERROR_UNKNOWN */;
}

int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
		   unsigned shared, void *stream, void **params, void **extra)
{
	t_counts[kLaunch]++;
	LaunchFn fn = (LaunchFn)next_fn(kLaunch);
	return fn ? fn(f, gx, gy, gz, bx, by, bz, shared, stream, params, extra) : 999;
}

__attribute__((destructor)) static void report(void)
{
	fprintf(stderr, "interpose_count: ncclAllReduce %llu cuStreamSynchronize %llu cuLaunchKernel %llu\n",
		(unsigned long long)t_counts[kAllReduce], (unsigned long long)t_counts[kStreamSync],
		(unsigned long long)t_counts[kLaunch]);
}
