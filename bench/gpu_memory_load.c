/* Device memory calls on the simulator's libcuda shim, timed, for
 * bench/gpu_memory_overhead.py (make bench, part r). Links nothing: the shim is
 * dlopened from the path given, so the driver script can hand it a copy of its
 * own (an inode no other tracer probes).
 *
 *   gpu_memory_load LIBCUDA
 *
 * Prints "ready PID" once the shim is loaded and initialised (cuInit(0), one
 * reserved virtual range), then answers one command per line on stdin:
 *
 *   alloc N   N x (cuMemAlloc_v2 + cuMemFree_v2), 2 MiB each
 *   async N   N x (cuMemAllocAsync + cuMemFreeAsync) on the legacy stream
 *   vmm N     N x (cuMemCreate + cuMemMap + cuMemUnmap + cuMemRelease), one 2 MiB page
 *   reset     zero the call counts
 *   quit      exit
 *
 * Each run prints "KIND N NS FAILED": its wall time in ns (one CLOCK_MONOTONIC
 * read either side of the loop) and the calls that did not return
 * CUDA_SUCCESS. "counts" prints the successful calls since the last reset, by
 * API, as "api=n" pairs. (Whether the calls were probed is told by their time:
 * the "[uprobes]" area in the maps would not tell, since an agent's probe on
 * the dynamic loader, hit by the dlopen, maps it too.) */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PAGE_BYTES (2ull << 20) /* one 2 MiB page: the VMM granularity, and PyTorch's small segment */

#include "cuda_vmm_abi.h" /* the driver's virtual memory structs, as the shim implements them */

/* The rest of the driver ABI (cuda.h) these calls need. */
typedef unsigned long long CUdeviceptr;

static int (*cu_init)(unsigned);
static int (*cu_mem_alloc)(CUdeviceptr *, size_t);
static int (*cu_mem_free)(CUdeviceptr);
static int (*cu_mem_alloc_async)(CUdeviceptr *, size_t, void *);
static int (*cu_mem_free_async)(CUdeviceptr, void *);
static int (*cu_mem_create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
static int (*cu_mem_release)(CUmemGenericAllocationHandle);
static int (*cu_mem_map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
static int (*cu_mem_unmap)(CUdeviceptr, size_t);
static int (*cu_mem_address_reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);

enum { C_ALLOC, C_FREE, C_ALLOC_ASYNC, C_FREE_ASYNC, C_CREATE, C_MAP, C_UNMAP, C_RELEASE, C_N };
/* The API names the agent's metrics use (cuMemAlloc_v2 is "cuMemAlloc", ...). */
static const char *const kCountNames[C_N] = {"cuMemAlloc", "cuMemFree", "cuMemAllocAsync", "cuMemFreeAsync",
					     "cuMemCreate", "cuMemMap", "cuMemUnmap", "cuMemRelease"};
static unsigned long long g_counts[C_N];
static CUdeviceptr g_range; /* one reserved page for the vmm sets */

static long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

/* One call; counts it when it succeeded, else adds to *failed. */
static void tally(int rc, int which, unsigned long long *failed)
{
	if (rc == 0)
		g_counts[which]++;
	else
		(*failed)++;
}

static unsigned long long run_alloc(long n)
{
	unsigned long long failed = 0;
	for (long i = 0; i < n; i++) {
		CUdeviceptr p = 0;
		tally(cu_mem_alloc(&p, PAGE_BYTES), C_ALLOC, &failed);
		tally(cu_mem_free(p), C_FREE, &failed);
	}
	return failed;
}

static unsigned long long run_async(long n)
{
	unsigned long long failed = 0;
	for (long i = 0; i < n; i++) {
		CUdeviceptr p = 0;
		tally(cu_mem_alloc_async(&p, PAGE_BYTES, NULL), C_ALLOC_ASYNC, &failed);
		tally(cu_mem_free_async(p, NULL), C_FREE_ASYNC, &failed);
	}
	return failed;
}

static unsigned long long run_vmm(long n)
{
	CUmemAllocationProp prop;
	memset(&prop, 0, sizeof prop);
	prop.type = 1;
	prop.location.type = 1;
	prop.location.id = 0;
	unsigned long long failed = 0;
	for (long i = 0; i < n; i++) {
		CUmemGenericAllocationHandle h = 0;
		tally(cu_mem_create(&h, PAGE_BYTES, &prop, 0), C_CREATE, &failed);
		tally(cu_mem_map(g_range, PAGE_BYTES, 0, h, 0), C_MAP, &failed);
		tally(cu_mem_unmap(g_range, PAGE_BYTES), C_UNMAP, &failed);
		tally(cu_mem_release(h), C_RELEASE, &failed);
	}
	return failed;
}

static void *need(void *lib, const char *name)
{
	void *f = dlsym(lib, name);
	if (!f) {
		fprintf(stderr, "gpu_memory_load: no %s in the shim\n", name);
		exit(2);
	}
	return f;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: gpu_memory_load LIBCUDA\n");
		return 2;
	}
	void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		fprintf(stderr, "gpu_memory_load: %s\n", dlerror());
		return 2;
	}
	*(void **)&cu_init = need(lib, "cuInit");
	*(void **)&cu_mem_alloc = need(lib, "cuMemAlloc_v2");
	*(void **)&cu_mem_free = need(lib, "cuMemFree_v2");
	*(void **)&cu_mem_alloc_async = need(lib, "cuMemAllocAsync");
	*(void **)&cu_mem_free_async = need(lib, "cuMemFreeAsync");
	*(void **)&cu_mem_create = need(lib, "cuMemCreate");
	*(void **)&cu_mem_release = need(lib, "cuMemRelease");
	*(void **)&cu_mem_map = need(lib, "cuMemMap");
	*(void **)&cu_mem_unmap = need(lib, "cuMemUnmap");
	*(void **)&cu_mem_address_reserve = need(lib, "cuMemAddressReserve");
	if (cu_init(0) != 0 || cu_mem_address_reserve(&g_range, PAGE_BYTES, 0, 0, 0) != 0) {
		fprintf(stderr, "gpu_memory_load: cuInit or cuMemAddressReserve failed\n");
		return 2;
	}
	printf("ready %d\n", (int)getpid());
	fflush(stdout);

	char line[128];
	while (fgets(line, sizeof line, stdin)) {
		char kind[16] = "";
		long n = 0;
		if (sscanf(line, "%15s %ld", kind, &n) < 1)
			continue;
		if (strcmp(kind, "quit") == 0)
			break;
		if (strcmp(kind, "reset") == 0) {
			memset(g_counts, 0, sizeof g_counts);
			printf("reset\n");
		} else if (strcmp(kind, "counts") == 0) {
			for (int i = 0; i < C_N; i++)
				printf("%s%s=%llu", i ? " " : "", kCountNames[i], g_counts[i]);
			printf("\n");
		} else if (n > 0 && (!strcmp(kind, "alloc") || !strcmp(kind, "async") || !strcmp(kind, "vmm"))) {
			const long long t0 = now_ns();
			const unsigned long long failed =
				!strcmp(kind, "alloc") ? run_alloc(n) : !strcmp(kind, "async") ? run_async(n) : run_vmm(n);
			const long long t1 = now_ns();
			printf("%s %ld %lld %llu\n", kind, n, t1 - t0, failed);
		} else {
			printf("error %s\n", kind);
		}
		fflush(stdout);
	}
	return 0;
}
