/* Paced collectives for bench/event_rate.py (make bench, part k): THREADS
 * threads call ncclAllReduce on one-rank communicators of the simulator's shim
 * (each returns at once) at RATE calls per second in total for SECONDS, so that
 * an agent probing the library receives a known stream of ring-buffer events:
 * one per collective entry, and with "fail" one per return too (each call
 * passes an invalid datatype, so the shim refuses it at once; BPF sends a
 * return event only for a failed or slow call, ARGUS_SPAN_MIN_NS). Each thread paces itself in
 * 1 ms slots and catches up when late; a rate the threads cannot reach is
 * reported as what they did reach. Prints "calls N seconds S".
 *
 *   event_rate_load LIBNCCL THREADS RATE SECONDS [fail] */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int (*CommInitAllFn)(void **, int, const int *);
typedef int (*AllReduceFn)(const void *, void *, size_t, int, int, void *, void *);

static AllReduceFn g_all_reduce;
static CommInitAllFn g_comm_init_all;
static double g_rate_per_thread, g_seconds;
static int g_datatype = 7; /* float32; 99 (invalid) with "fail" */

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *run(void *arg)
{
	uint64_t *calls = arg;
	void *comm = NULL;
	const int dev = 0;
	static char send[64], recv[64];
	if (g_comm_init_all(&comm, 1, &dev) != 0 || comm == NULL)
		return NULL;
	const double t0 = now_s();
	for (;;) {
		const double t = now_s() - t0;
		if (t >= g_seconds)
			break;
		const uint64_t due = (uint64_t)(t * g_rate_per_thread);
		while (*calls < due) {
			g_all_reduce(send, recv, 16, g_datatype, 0 /* sum */, comm, NULL);
			(*calls)++;
		}
		const struct timespec slot = {0, 1000000};
		nanosleep(&slot, NULL);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 5 && !(argc == 6 && strcmp(argv[5], "fail") == 0)) {
		fprintf(stderr, "usage: event_rate_load LIBNCCL THREADS RATE SECONDS [fail]\n");
		return 2;
	}
	if (argc == 6)
		g_datatype = 99;
	const int threads = atoi(argv[2]);
	const double rate = atof(argv[3]);
	g_seconds = atof(argv[4]);
	if (threads < 1 || threads > 64 || rate <= 0 || g_seconds <= 0) {
		fprintf(stderr, "event_rate_load: THREADS 1..64, RATE > 0, SECONDS > 0\n");
		return 2;
	}
	void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (lib == NULL) {
		fprintf(stderr, "event_rate_load: %s\n", dlerror());
		return 2;
	}
	g_all_reduce = (AllReduceFn)dlsym(lib, "ncclAllReduce");
	g_comm_init_all = (CommInitAllFn)dlsym(lib, "ncclCommInitAll");
	if (g_all_reduce == NULL || g_comm_init_all == NULL) {
		fprintf(stderr, "event_rate_load: %s lacks ncclAllReduce/ncclCommInitAll\n", argv[1]);
		return 2;
	}
	g_rate_per_thread = rate / threads;
	pthread_t tid[64];
	uint64_t calls[64] = {0};
	const double t0 = now_s();
	for (int i = 0; i < threads; i++)
		pthread_create(&tid[i], NULL, run, &calls[i]);
	uint64_t total = 0;
	for (int i = 0; i < threads; i++) {
		pthread_join(tid[i], NULL);
		total += calls[i];
	}
	printf("calls %llu seconds %.3f\n", (unsigned long long)total, now_s() - t0);
	return 0;
}
