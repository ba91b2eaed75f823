/* The emulated GPU's engine, for the libcuda.so.1 shim (cuda_shim.c): how long
 * a launch runs, the streams' timelines, and the queue of work issued behind an
 * operation whose end is not known at issue (struct deferred,
 * cuda_shim_internal.h), with the GPU's own thread that resolves that operation
 * and times what was queued behind it. Also the sim-private calls that put
 * externally timed kernels on the timeline or ask when it is idle (sim_gpu.h). */
#define _GNU_SOURCE
#include "cuda_shim_internal.h"

#include <argus_gpu_wire.h>

#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static struct deferred g_def[DEF_QUEUE_MAX]; /* a ring */
static size_t g_def_head;
size_t g_def_n;
pthread_cond_t g_def_cv = PTHREAD_COND_INITIALIZER; /* the queue moved */
static int g_gpu_thread_started;

long long device_busy_until(void)
{
	long long t = 0;
	for (size_t i = 0; i < g_nstreams; i++)
		if (g_streams[i].live && g_streams[i].busy_until > t)
			t = g_streams[i].busy_until;
	return t;
}

/* Runs a kernel or copy on stream `si` issued at `issued` (g_mu held). */
static void run_on_stream(size_t si, long long issued, long long dur_ns, unsigned long long bytes,
			  unsigned name_id, unsigned kind, unsigned flags)
{
	struct stream *s = &g_streams[si];
	long long start = s->busy_until > issued ? s->busy_until : issued;
	s->busy_until = start + dur_ns;
	enqueue(start, s->busy_until, bytes, name_id, si, kind, flags);
}

/* An NCCL (or other externally timed) kernel [start, end] on stream `si`: the
 * stream runs it, and every stream waits for its result (PyTorch makes the
 * compute stream wait on the NCCL stream's event). g_mu held. */
static void run_external(size_t si, unsigned name_id, long long start, long long end, unsigned flags)
{
	enqueue(start, end, 0, name_id, si, ARGUS_GPU_KERNEL, flags & 0x0fu);
	for (size_t i = 0; i < g_nstreams; i++)
		if (g_streams[i].live && g_streams[i].busy_until < end)
			g_streams[i].busy_until = end;
}

int deferring(void)
{
	return g_def_n > 0;
}

struct deferred *def_tail(void)
{
	return &g_def[(g_def_head + g_def_n) % DEF_QUEUE_MAX];
}

/* Waits (g_mu held) until there is room for one more deferred item. */
void def_wait_room(void)
{
	while (g_def_n >= DEF_QUEUE_MAX)
		pthread_cond_wait(&g_def_cv, &g_mu);
}

/* Waits (g_mu held) until every deferred item has been resolved and timed. */
void def_wait_empty(void)
{
	while (g_def_n > 0)
		pthread_cond_wait(&g_def_cv, &g_mu);
}

/* Times one queued item that needs no peer (g_mu held). */
static void def_replay(const struct deferred *d)
{
	if (d->type == DEF_EVENT) {
		struct stream *s = &g_streams[d->stream];
		if (d->event >= 0 && (size_t)d->event < g_nevents) {
			g_events[d->event].recorded = 1;
			g_events[d->event].at = s->busy_until > d->issued ? s->busy_until : d->issued;
		}
		return;
	}
	run_on_stream(d->stream, d->issued, d->dur_ns, d->bytes, d->name_id,
		      d->type == DEF_COPY ? ARGUS_GPU_MEMCPY : ARGUS_GPU_KERNEL, d->flags);
}

/* The emulated GPU's thread: resolves external items in issue order (the call
 * into `resolve` may block on the peers, without g_mu), then times what was
 * queued behind them. */
static void *gpu_thread_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&g_mu);
	for (;;) {
		while (g_def_n == 0)
			pthread_cond_wait(&g_def_cv, &g_mu);
		struct deferred d = g_def[g_def_head];
		if (d.type == DEF_EXTERNAL) {
			long long ready = device_busy_until();
			if (ready < d.issued)
				ready = d.issued;
			pthread_mutex_unlock(&g_mu);
			long long start = ready, end = ready;
			int ok = d.resolve(d.ctx, ready, &start, &end) == 0 && end >= start && start >= 0;
			pthread_mutex_lock(&g_mu);
			if (ok)
				run_external(d.stream, d.name_id, start, end, d.flags);
		} else {
			def_replay(&d);
		}
		g_def_head = (g_def_head + 1) % DEF_QUEUE_MAX;
		g_def_n--;
		pthread_cond_broadcast(&g_def_cv);
	}
	return NULL;
}

/* Starts the GPU thread once (g_mu held); 0 on failure. */
static int gpu_thread_start(void)
{
	if (g_gpu_thread_started)
		return 1;
	pthread_attr_t a;
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	/* The thread must not take the host's signals (the sim's stop signals). */
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_t t;
	int rc = pthread_create(&t, &a, gpu_thread_main, NULL);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&a);
	if (rc != 0)
		return 0;
	g_gpu_thread_started = 1;
	return 1;
}

/* A launch or async copy: timed now, or queued behind an unresolved item
 * (g_mu held; may wait for room in the queue). */
void defer_or_run(size_t si, int type, long long dur_ns, unsigned long long bytes, unsigned name_id,
		  unsigned flags)
{
	long long now = now_ns();
	if (!deferring()) {
		run_on_stream(si, now, dur_ns, bytes, name_id, type == DEF_COPY ? ARGUS_GPU_MEMCPY : ARGUS_GPU_KERNEL,
			      flags);
		return;
	}
	def_wait_room();
	struct deferred *d = def_tail();
	memset(d, 0, sizeof *d);
	d->type = type;
	d->issued = now;
	d->stream = si;
	d->dur_ns = dur_ns;
	d->bytes = bytes;
	d->name_id = name_id;
	d->flags = flags;
	g_def_n++;
	pthread_cond_broadcast(&g_def_cv);
}

/* A launch's emulated duration: the function's, varied by up to
 * ARGUS_SIM_GPU_JITTER_PCT percent either way (real kernels of one name vary
 * from call to call; 0 or unset: exact). g_mu held. */
long long jittered_ns(unsigned us)
{
	static int pct = -1;
	static uint64_t seq;
	if (pct < 0) {
		const char *v = getenv(ARGUS_SIM_GPU_JITTER_ENV);
		pct = v ? atoi(v) : 0;
		if (pct < 0 || pct > 50)
			pct = 0;
	}
	long long ns = (long long)us * 1000LL;
	if (pct == 0)
		return ns;
	uint64_t x = ++seq * 0x9E3779B97F4A7C15ull; /* a fixed sequence: runs repeat */
	x ^= x >> 29;
	const long long span = ns * pct / 100;
	return ns - span + (long long)(x % (uint64_t)(2 * span + 1));
}

/* ---- sim-private GPU interface (sim_gpu.h) ---- */


CU_API long long argus_sim_gpu_ready_ns(void)
{
	long long now = now_ns();
	if (!initialized())
		return now;
	pthread_mutex_lock(&g_mu);
	def_wait_empty();
	long long t = device_busy_until();
	pthread_mutex_unlock(&g_mu);
	now = now_ns();
	return t > now ? t : now;
}

CU_API int argus_sim_gpu_kernel(void *stream, const char *name, long long start_ns,
				long long end_ns, unsigned flags)
{
	if (!initialized() || start_ns < 0 || end_ns < start_ns)
		return -1;
	pthread_mutex_lock(&g_mu);
	struct stream *s = stream_get((CUstream)stream);
	if (!s) {
		pthread_mutex_unlock(&g_mu);
		return -1;
	}
	run_external((size_t)(s - g_streams), name && *name ? name_id_for(name) : 0, start_ns, end_ns, flags);
	pthread_mutex_unlock(&g_mu);
	return 0;
}

CU_API int argus_sim_gpu_external(void *stream, const char *name, unsigned flags,
				  argus_sim_gpu_resolve_fn resolve, void *ctx)
{
	if (!initialized() || !resolve)
		return -1;
	pthread_mutex_lock(&g_mu);
	struct stream *s = stream_get((CUstream)stream);
	if (!s || !gpu_thread_start()) {
		pthread_mutex_unlock(&g_mu);
		return -1;
	}
	def_wait_room();
	struct deferred *d = def_tail();
	memset(d, 0, sizeof *d);
	d->type = DEF_EXTERNAL;
	d->issued = now_ns();
	d->stream = (size_t)(s - g_streams);
	d->name_id = name && *name ? name_id_for(name) : 0;
	d->flags = flags;
	d->resolve = resolve;
	d->ctx = ctx;
	g_def_n++;
	pthread_cond_broadcast(&g_def_cv);
	pthread_mutex_unlock(&g_mu);
	return 0;
}
