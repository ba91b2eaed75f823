/* The emulated GPU's activity records (bpf/argus_gpu_wire.h), for the
 * libcuda.so.1 shim (cuda_shim.c): every launch, copy (synchronous or on a
 * stream) and NCCL kernel (argus_sim_gpu_kernel, called by the NCCL shim)
 * becomes a record on the emulated timeline, kept in a bounded pending buffer.
 * Completed records (end <= now) cross the USDT probe argus:gpu_batch, sorted
 * by start, at most ARGUS_GPU_BATCH_MAX at a time: after every synchronize call,
 * when ARGUS_GPU_BATCH_MAX completed records are pending, and at
 * argus_sim_gpu_flush_all. Each kernel-name id is announced once through
 * argus:gpu_name before the first batch that uses it. ARGUS_SIM_GPU_ACTIVITY=0
 * turns it off. The probes fire under g_mu, so batches never interleave. Also
 * here: the truth's collective and point-to-point logs the NCCL shim keeps
 * through argus_sim_coll_note and argus_sim_p2p_note. */
#define _GNU_SOURCE
#include "cuda_shim_internal.h"

#include <argus_gpu_wire.h>
#include "gpu/gpu_fold.h"
/* USDT semaphores (argus_gpu_wire.h, "Listening"), as libargus-cupti.so has them. */
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>

__extension__ unsigned short argus_gpu_batch_semaphore __attribute__((unused, section(".probes")));
__extension__ unsigned short argus_gpu_name_semaphore __attribute__((unused, section(".probes")));

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Kernel names of the wire format: id = index + 1. */
struct gpu_name {
	int announced; /* argus:gpu_name fired */
	char name[128];
};

/* GPU activity (see the top of the file). */
#define GPU_PENDING_MAX 65536u
#define GPU_RECHECK_NS 1000000LL /* a full-but-incomplete buffer is recounted after 1 ms */
static int g_activity = -1;           /* -1: ARGUS_SIM_GPU_ACTIVITY not read yet */
static struct argus_gpu_rec *g_pending; /* [GPU_PENDING_MAX], in enqueue order */
static struct argus_gpu_rec *g_ready;   /* [GPU_PENDING_MAX]: scratch of a flush */
static size_t g_npending;
static unsigned long long g_dropped_unreported; /* lost since the previous batch */
static unsigned g_next_corr = 1;
static long long g_next_check_ns;
static struct gpu_name *g_names;
static size_t g_nnames, g_capnames;
static struct argus_sim_gpu_totals g_totals; /* exactly what crossed argus:gpu_batch */

/* ---- GPU activity records (all with g_mu held) ---- */

static int activity_on(void)
{
	if (g_activity < 0) {
		const char *v = getenv(ARGUS_SIM_GPU_ACTIVITY_ENV);
		g_activity = !(v && (strcmp(v, "0") == 0 || strcmp(v, "false") == 0 ||
				     strcmp(v, "off") == 0 || strcmp(v, "no") == 0));
	}
	return g_activity;
}

/* The wire id of a kernel name (registered on first sight), 0 if out of memory. */
unsigned name_id_for(const char *name)
{
	char buf[sizeof g_names[0].name];
	snprintf(buf, sizeof buf, "%s", name);
	for (size_t i = 0; i < g_nnames; i++)
		if (strcmp(g_names[i].name, buf) == 0)
			return (unsigned)(i + 1);
	if (!grow((void **)&g_names, &g_capnames, g_nnames, sizeof *g_names))
		return 0;
	g_names[g_nnames].announced = 0;
	memcpy(g_names[g_nnames].name, buf, sizeof buf);
	return (unsigned)++g_nnames;
}

/* One copy of each probe site: noinline/noclone keep a single stapsdt note each. */
static __attribute__((noinline, noclone)) void fire_gpu_name(unsigned id, const char *name)
{
	STAP_PROBE2(argus, gpu_name, id, name);
}

static __attribute__((noinline, noclone)) void fire_gpu_batch(const struct argus_gpu_rec *recs,
							       unsigned n, unsigned long long dropped)
{
	STAP_PROBE3(argus, gpu_batch, recs, n, dropped);
}

static int rec_cmp(const void *a, const void *b)
{
	const struct argus_gpu_rec *x = a, *y = b;
	if (x->start_ns != y->start_ns)
		return x->start_ns < y->start_ns ? -1 : 1;
	if (x->correlation_id != y->correlation_id)
		return x->correlation_id < y->correlation_id ? -1 : 1;
	return 0;
}

/* Adds one record to the totals (what the agent must count). */
static void count_record(const struct argus_gpu_rec *r)
{
	const uint64_t ns = r->end_ns - r->start_ns;
	if (r->kind == ARGUS_GPU_KERNEL) {
		g_totals.kernels++;
		g_totals.kernel_ns += ns;
		if (r->flags & ARGUS_GPU_F_NCCL) {
			g_totals.nccl_kernels++;
			g_totals.nccl_kernel_ns += ns;
		}
		if ((r->flags & (ARGUS_GPU_F_P2P | ARGUS_GPU_F_RECV)) == (ARGUS_GPU_F_P2P | ARGUS_GPU_F_RECV))
			g_totals.recv_kernels++;
	} else if (r->kind == ARGUS_GPU_MEMCPY) {
		g_totals.memcpy++;
		unsigned dir = (unsigned)r->flags >> ARGUS_GPU_COPY_SHIFT;
		if (dir == ARGUS_GPU_COPY_HTOD)
			g_totals.memcpy_bytes_htod += r->bytes;
		else if (dir == ARGUS_GPU_COPY_DTOH)
			g_totals.memcpy_bytes_dtoh += r->bytes;
		else if (dir == ARGUS_GPU_COPY_DTOD)
			g_totals.memcpy_bytes_dtod += r->bytes;
	}
}

static struct argus_unheard g_unheard; /* fired while no agent listened, not yet reported */

/* Both probes: the agent attaches gpu_batch, then gpu_name, and needs the names too. */
static int g_assume_listening = -1; /* ARGUS_SIM_GPU_ASSUME_LISTENING, read once */

static int agent_listening(void)
{
	if (g_assume_listening < 0) {
		const char *v = getenv(ARGUS_SIM_GPU_ASSUME_LISTENING_ENV);
		g_assume_listening = v && strcmp(v, "1") == 0;
	}
	if (g_assume_listening)
		return 1;
	return __atomic_load_n(&argus_gpu_batch_semaphore, __ATOMIC_RELAXED) != 0 &&
	       __atomic_load_n(&argus_gpu_name_semaphore, __ATOMIC_RELAXED) != 0;
}

/* A name is announced only to a listening agent; one announced to nobody is
 * announced again (with all the others) once one listens. */
static void announce_names(const struct argus_gpu_rec *recs, size_t n)
{
	if (!agent_listening()) {
		g_unheard.names_stale = 1;
		return;
	}
	for (size_t i = 0; i < n; i++) {
		unsigned id = recs[i].name_id;
		if (id >= 1 && id <= g_nnames && !g_names[id - 1].announced) {
			g_names[id - 1].announced = 1;
			fire_gpu_name(id, g_names[id - 1].name);
			g_totals.names++;
		}
	}
}

static void fire_and_count(const struct argus_gpu_rec *recs, unsigned n, unsigned long long dropped)
{
	if (!agent_listening()) { /* counted, and reported to the next agent */
		argus_unheard_add(&g_unheard, recs, n, dropped);
		g_totals.unheard_records += n;
		g_totals.dropped_unheard += dropped;
		return;
	}
	if (g_unheard.names_stale) {
		for (size_t i = 0; i < g_nnames; i++) {
			fire_gpu_name((unsigned)(i + 1), g_names[i].name);
			g_names[i].announced = 1;
			g_totals.names++;
		}
		g_unheard.names_stale = 0;
	}
	struct argus_gpu_rec u;
	uint64_t u_dropped = 0;
	if (argus_unheard_take(&g_unheard, &u, &u_dropped)) {
		fire_gpu_batch(&u, 1, u_dropped);
		g_totals.batches++;
		g_totals.records++;
		g_totals.dropped += u_dropped;
	}
	fire_gpu_batch(recs, n, dropped);
	g_totals.batches++;
	g_totals.records += n;
	g_totals.dropped += dropped;
}

/* --gpu-fold (ARGUS_SIM_GPU_FOLD=1): records go through the producer's folder. */
static int g_fold = -1;
static int g_fold_per_buffer; /* ARGUS_SIM_GPU_FOLD_PER_BUFFER=1: no span across buffers */
static struct argus_gpu_folder *g_folder;

static void folded_batch(void *ctx, const struct argus_gpu_rec *recs, uint32_t n, uint64_t dropped)
{
	(void)ctx;
	fire_and_count(recs, n, dropped);
}

static int fold_on(void)
{
	if (g_fold < 0) {
		const char *v = getenv(ARGUS_SIM_GPU_FOLD_ENV);
		g_fold = v && strcmp(v, "1") == 0;
		const char *pb = getenv(ARGUS_SIM_GPU_FOLD_PER_BUFFER_ENV);
		g_fold_per_buffer = pb && strcmp(pb, "1") == 0;
		if (g_fold && (g_folder = malloc(sizeof *g_folder)) != NULL)
			argus_fold_init(g_folder, folded_batch, NULL);
		else
			g_fold = 0;
	}
	return g_fold;
}

/* Hands `n` sorted records (and the drops not yet reported) to the agent in
 * chunks of at most ARGUS_GPU_BATCH_MAX, announcing new names first, and adds
 * them to the totals. Folding, the folder makes the batches (each call is the
 * end of a producer buffer at `now`: a young span goes on into the next). */
static void emit(struct argus_gpu_rec *recs, size_t n, long long now)
{
	for (size_t i = 0; i < n; i++)
		count_record(&recs[i]);
	if (fold_on()) {
		announce_names(recs, n);
		unsigned long long dropped = g_dropped_unreported;
		g_dropped_unreported = 0;
		argus_fold_add(g_folder, recs, n, dropped);
		if (g_fold_per_buffer)
			argus_fold_flush(g_folder);
		else
			argus_fold_end_buffer(g_folder, (uint64_t)now);
		return;
	}
	size_t off = 0;
	do {
		size_t m = n - off < ARGUS_GPU_BATCH_MAX ? n - off : ARGUS_GPU_BATCH_MAX;
		announce_names(recs + off, m);
		unsigned long long dropped = g_dropped_unreported;
		g_dropped_unreported = 0;
		fire_and_count(recs + off, (unsigned)m, dropped);
		off += m;
	} while (off < n);
}

/* Emits every pending record that has completed by `now`. */
static void flush_completed(long long now)
{
	size_t n = 0, keep = 0;
	for (size_t i = 0; i < g_npending; i++) {
		if ((long long)g_pending[i].end_ns <= now)
			g_ready[n++] = g_pending[i];
		else
			g_pending[keep++] = g_pending[i];
	}
	g_npending = keep;
	if (n == 0 && g_dropped_unreported == 0) {
		if (g_fold == 1) /* nothing new: a span kept open ends once it is old */
			argus_fold_end_buffer(g_folder, (uint64_t)now);
		return;
	}
	qsort(g_ready, n, sizeof *g_ready, rec_cmp);
	emit(g_ready, n, now);
}

/* Flushes once ARGUS_GPU_BATCH_MAX pending records have completed. */
static void maybe_flush_full(long long now)
{
	if (g_npending < ARGUS_GPU_BATCH_MAX || now < g_next_check_ns)
		return;
	size_t done = 0;
	for (size_t i = 0; i < g_npending; i++)
		done += (long long)g_pending[i].end_ns <= now;
	if (done >= ARGUS_GPU_BATCH_MAX)
		flush_completed(now);
	else
		g_next_check_ns = now + GPU_RECHECK_NS;
}

void enqueue(long long start, long long end, unsigned long long bytes, unsigned name_id,
	     size_t stream_idx, unsigned kind, unsigned flags)
{
	if (!activity_on())
		return;
	if (!g_pending) {
		g_pending = calloc(GPU_PENDING_MAX, sizeof *g_pending);
		g_ready = calloc(GPU_PENDING_MAX, sizeof *g_ready);
		if (!g_pending || !g_ready) {
			free(g_pending);
			free(g_ready);
			g_pending = g_ready = NULL;
			g_dropped_unreported++;
			return;
		}
	}
	long long now = now_ns();
	if (g_npending == GPU_PENDING_MAX)
		flush_completed(now);
	if (g_npending == GPU_PENDING_MAX) {
		g_dropped_unreported++;
		return;
	}
	struct argus_gpu_rec *r = &g_pending[g_npending++];
	memset(r, 0, sizeof *r);
	r->start_ns = (uint64_t)start;
	r->end_ns = (uint64_t)end;
	r->bytes = bytes;
	r->correlation_id = g_next_corr++;
	r->name_id = name_id;
	r->stream_id = (uint32_t)stream_idx;
	r->device_id = (uint16_t)g_device_ord;
	r->kind = (uint8_t)kind;
	r->flags = (uint8_t)flags;
	maybe_flush_full(now);
}

/* After a synchronize call returned: hand over what has completed. */
void after_sync(void)
{
	pthread_mutex_lock(&g_mu);
	flush_completed(now_ns());
	pthread_mutex_unlock(&g_mu);
}

/* ---- sim-private GPU activity interface (sim_gpu.h) ---- */

/* The agent finds producers of the wire format by this symbol. */
CU_API unsigned argus_gpu_wire_version(void)
{
	return ARGUS_GPU_WIRE_VERSION;
}

CU_API void argus_sim_gpu_flush_all(void)
{
	for (int round = 0; round < 1000; round++) {
		pthread_mutex_lock(&g_mu);
		def_wait_empty();
		long long until = device_busy_until();
		for (size_t i = 0; i < g_npending; i++)
			if ((long long)g_pending[i].end_ns > until)
				until = (long long)g_pending[i].end_ns;
		int idle = g_npending == 0 && g_dropped_unreported == 0;
		if (idle && g_fold == 1)
			argus_fold_flush(g_folder); /* the end: the open span too, whatever its age */
		pthread_mutex_unlock(&g_mu);
		if (idle)
			return;
		sleep_until(until);
		pthread_mutex_lock(&g_mu);
		flush_completed(now_ns());
		pthread_mutex_unlock(&g_mu);
	}
}

CU_API int argus_sim_gpu_totals(struct argus_sim_gpu_totals *out, size_t size)
{
	if (!out)
		return -1;
	pthread_mutex_lock(&g_mu);
	memcpy(out, &g_totals, size < sizeof g_totals ? size : sizeof g_totals);
	pthread_mutex_unlock(&g_mu);
	return 0;
}

/* The truth's collective log (sim_gpu.h): a ring of the newest entries. */
static pthread_mutex_t g_coll_mu = PTHREAD_MUTEX_INITIALIZER;
static struct argus_sim_coll_rec *g_coll;
static size_t g_coll_next; /* entries ever added */
#define COLL_UPDATE_LOOKBACK 4096u

CU_API void argus_sim_coll_note(uint64_t comm, uint64_t seq, long long call_ns, long long gpu_start_ns,
				long long gpu_end_ns)
{
	pthread_mutex_lock(&g_coll_mu);
	if (!g_coll)
		g_coll = calloc(ARGUS_SIM_COLL_LOG_MAX, sizeof *g_coll);
	if (!g_coll) {
		pthread_mutex_unlock(&g_coll_mu);
		return;
	}
	if (call_ns != 0) {
		struct argus_sim_coll_rec *e = &g_coll[g_coll_next++ % ARGUS_SIM_COLL_LOG_MAX];
		e->comm = comm;
		e->seq = seq;
		e->call_ns = call_ns;
		e->gpu_start_ns = gpu_start_ns;
		e->gpu_end_ns = gpu_end_ns;
	} else {
		size_t kept = g_coll_next < ARGUS_SIM_COLL_LOG_MAX ? g_coll_next : ARGUS_SIM_COLL_LOG_MAX;
		size_t look = kept < COLL_UPDATE_LOOKBACK ? kept : COLL_UPDATE_LOOKBACK;
		for (size_t k = 1; k <= look; k++) {
			struct argus_sim_coll_rec *e = &g_coll[(g_coll_next - k) % ARGUS_SIM_COLL_LOG_MAX];
			if (e->comm == comm && e->seq == seq) {
				e->gpu_start_ns = gpu_start_ns;
				e->gpu_end_ns = gpu_end_ns;
				break;
			}
		}
	}
	pthread_mutex_unlock(&g_coll_mu);
}

CU_API int argus_sim_coll_log(struct argus_sim_coll_rec *out, int max)
{
	if (!out || max <= 0)
		return 0;
	pthread_mutex_lock(&g_coll_mu);
	size_t kept = g_coll_next < ARGUS_SIM_COLL_LOG_MAX ? g_coll_next : ARGUS_SIM_COLL_LOG_MAX;
	if ((size_t)max < kept)
		kept = (size_t)max;
	for (size_t k = 0; k < kept; k++)
		out[k] = g_coll[(g_coll_next - kept + k) % ARGUS_SIM_COLL_LOG_MAX];
	pthread_mutex_unlock(&g_coll_mu);
	return (int)kept;
}

/* The truth's point-to-point log (sim_gpu.h): a ring like the collective log's. */
static pthread_mutex_t g_p2p_mu = PTHREAD_MUTEX_INITIALIZER;
static struct argus_sim_p2p_rec *g_p2p;
static size_t g_p2p_next; /* entries ever added */

CU_API void argus_sim_p2p_note(const struct argus_sim_p2p_rec *rec)
{
	if (!rec)
		return;
	pthread_mutex_lock(&g_p2p_mu);
	if (!g_p2p)
		g_p2p = calloc(ARGUS_SIM_P2P_LOG_MAX, sizeof *g_p2p);
	if (!g_p2p) {
		pthread_mutex_unlock(&g_p2p_mu);
		return;
	}
	if (rec->call_ns != 0) {
		g_p2p[g_p2p_next++ % ARGUS_SIM_P2P_LOG_MAX] = *rec;
	} else {
		size_t kept = g_p2p_next < ARGUS_SIM_P2P_LOG_MAX ? g_p2p_next : ARGUS_SIM_P2P_LOG_MAX;
		size_t look = kept < COLL_UPDATE_LOOKBACK ? kept : COLL_UPDATE_LOOKBACK;
		for (size_t k = 1; k <= look; k++) {
			struct argus_sim_p2p_rec *e = &g_p2p[(g_p2p_next - k) % ARGUS_SIM_P2P_LOG_MAX];
			if (e->comm == rec->comm && e->id == rec->id) {
				e->gpu_start_ns = rec->gpu_start_ns;
				e->gpu_end_ns = rec->gpu_end_ns;
				break;
			}
		}
	}
	pthread_mutex_unlock(&g_p2p_mu);
}

CU_API int argus_sim_p2p_log(struct argus_sim_p2p_rec *out, int max)
{
	if (!out || max <= 0)
		return 0;
	pthread_mutex_lock(&g_p2p_mu);
	size_t kept = g_p2p_next < ARGUS_SIM_P2P_LOG_MAX ? g_p2p_next : ARGUS_SIM_P2P_LOG_MAX;
	if ((size_t)max < kept)
		kept = (size_t)max;
	for (size_t k = 0; k < kept; k++)
		out[k] = g_p2p[(g_p2p_next - kept + k) % ARGUS_SIM_P2P_LOG_MAX];
	pthread_mutex_unlock(&g_p2p_mu);
	return (int)kept;
}
