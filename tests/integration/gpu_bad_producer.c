/* A hostile GPU-activity producer for the agent's tests: it fires the argus
 * USDT probes with a bad pointer, an oversized count, an unreadable name and
 * malformed records, then one good batch. The agent must count each problem,
 * keep every good record, and never crash.
 *
 *   gpu_bad_producer DELAY_MS    (waits DELAY_MS for the agent to attach first) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sdt.h>
#include <time.h>
#include <unistd.h>

#include "argus_gpu_wire.h"

#define OVERSIZED 100000u
#define GOOD 10u
#define MALFORMED 3u

__attribute__((visibility("default"))) unsigned argus_gpu_wire_version(void)
{
	return ARGUS_GPU_WIRE_VERSION;
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void fill(struct argus_gpu_rec *r, unsigned n, uint64_t t0)
{
	memset(r, 0, n * sizeof(*r));
	for (unsigned i = 0; i < n; i++) {
		r[i].start_ns = t0 + i * 2000ull;
		r[i].end_ns = r[i].start_ns + 1000;
		r[i].correlation_id = i + 1;
		r[i].name_id = 1;
		r[i].stream_id = 7;
		r[i].kind = ARGUS_GPU_KERNEL;
	}
}

int main(int argc, char **argv)
{
	long delay_ms = argc > 1 ? atol(argv[1]) : 2000;
	struct timespec d = {delay_ms / 1000, (delay_ms % 1000) * 1000000L};
	nanosleep(&d, NULL);

	static struct argus_gpu_rec recs[ARGUS_GPU_BATCH_MAX];
	static char name[64];
	uint32_t id = 1;
	uint64_t zero = 0;

	/* 1. An unreadable name, then the real one, written at run time: BPF cannot
	 * fault a page in, and a producer's interned names are always resident. */
	snprintf(name, sizeof(name), "%s", "bad_producer_kernel");
	STAP_PROBE2(argus, gpu_name, id, (const char *)8);
	STAP_PROBE2(argus, gpu_name, id, name);
	/* 2. An unreadable batch. */
	uint32_t n = 10;
	STAP_PROBE3(argus, gpu_batch, (void *)8, n, zero);
	/* 3. More records than a batch holds: BPF keeps the first ARGUS_GPU_BATCH_MAX. */
	fill(recs, ARGUS_GPU_BATCH_MAX, now_ns());
	n = OVERSIZED;
	STAP_PROBE3(argus, gpu_batch, recs, n, zero);
	/* 4. Malformed records (end before start) among good ones, and 5 reported drops. */
	fill(recs, GOOD + MALFORMED, now_ns() + 1000000000ull);
	for (unsigned i = GOOD; i < GOOD + MALFORMED; i++)
		recs[i].end_ns = recs[i].start_ns - 1;
	n = GOOD + MALFORMED;
	uint64_t dropped = 5;
	STAP_PROBE3(argus, gpu_batch, recs, n, dropped);

	printf("fired: good=%u truncated_to=%u lost=%u malformed=%u\n", GOOD + ARGUS_GPU_BATCH_MAX,
	       ARGUS_GPU_BATCH_MAX, OVERSIZED - ARGUS_GPU_BATCH_MAX + 5, MALFORMED);
	fflush(stdout);
	sleep(3); /* stay mapped while the agent reads */
	return 0;
}
