/* See gpu_fold.h. */
#include "gpu/gpu_fold.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int by_start(const void *a, const void *b)
{
	const struct argus_gpu_rec *x = a, *y = b;
	return x->start_ns < y->start_ns ? -1 : x->start_ns > y->start_ns;
}

int32_t argus_fold_bucket(uint64_t duration_ns)
{
	static double log_gamma; /* written once with the same value by any thread: benign */
	if (duration_ns == 0)
		return 0;
	if (log_gamma == 0)
		log_gamma = log((1 + ARGUS_GPU_SKETCH_REL_ERR) / (1 - ARGUS_GPU_SKETCH_REL_ERR));
	return (int32_t)ceil(log((double)duration_ns) / log_gamma);
}

void argus_fold_init(struct argus_gpu_folder *f, argus_fold_emit_fn emit, void *ctx)
{
	memset(f, 0, sizeof *f);
	f->emit = emit;
	f->ctx = ctx;
}

static void emit_pending(struct argus_gpu_folder *f)
{
	if (f->nout == 0 && f->dropped == 0)
		return;
	f->emit(f->ctx, f->out, f->nout, f->dropped);
	f->stats.batches++;
	f->stats.records_out += f->nout;
	f->nout = 0;
	f->after_span = 0; /* what comes next is after the open span, if any */
	f->dropped = 0;
}

/* Emits out[0..n) (and the drops not yet reported); keeps the rest, in order. */
static void emit_first(struct argus_gpu_folder *f, uint32_t n)
{
	if (n == f->nout) {
		emit_pending(f);
		return;
	}
	if (n == 0 && f->dropped == 0)
		return;
	f->emit(f->ctx, f->out, n, f->dropped);
	f->stats.batches++;
	f->stats.records_out += n;
	memmove(f->out, f->out + n, (size_t)(f->nout - n) * sizeof f->out[0]);
	f->nout -= n;
	f->after_span -= n;
	f->dropped = 0;
}

/* Room for `n` more records in the pending batch, emitting it first if needed. */
static struct argus_gpu_rec *reserve(struct argus_gpu_folder *f, uint32_t n)
{
	if (f->nout + n > ARGUS_GPU_BATCH_MAX)
		emit_pending(f);
	struct argus_gpu_rec *r = &f->out[f->nout];
	f->nout += n;
	return r;
}

/* An entry whose sum does not fit a pair's 32 bits goes alone. */
static void emit_single(struct argus_gpu_folder *f, const struct argus_fold_slot *s)
{
	struct argus_gpu_sketch_rec k;
	memset(&k, 0, sizeof k);
	k.start_ns = f->span.start_ns;
	k.sum_ns = s->sum_ns;
	k.count = s->count;
	k.bucket = s->bucket;
	k.name_id = s->name_id;
	k.device_id = f->span.device_id;
	k.kind = ARGUS_GPU_SKETCH;
	memcpy(reserve(f, 1), &k, sizeof k);
	f->stats.sketch_recs++;
}

/* The span, then its sketch entries right after it, two a record (they may run
 * into the next batch). */
static void close_span(struct argus_gpu_folder *f)
{
	if (!f->open)
		return;
	memcpy(reserve(f, 1), &f->span, sizeof(struct argus_gpu_rec));
	struct argus_gpu_sketch_pair pair;
	uint32_t half = 0; /* entries in `pair` */
	for (uint32_t i = 0; i < f->nused; i++) {
		struct argus_fold_slot *s = &f->slots[f->used[i]];
		if (s->sum_ns > UINT32_MAX || s->bucket < INT16_MIN || s->bucket > INT16_MAX) {
			emit_single(f, s);
		} else {
			if (half == 0) {
				memset(&pair, 0, sizeof pair);
				pair.start_ns = f->span.start_ns;
				pair.device_id = f->span.device_id;
				pair.kind = ARGUS_GPU_SKETCH_PAIR;
			}
			pair.sum_ns[half] = (uint32_t)s->sum_ns;
			pair.count[half] = s->count;
			pair.name_id[half] = s->name_id;
			pair.bucket[half] = (int16_t)s->bucket;
			if (++half == 2) {
				memcpy(reserve(f, 1), &pair, sizeof pair);
				f->stats.sketch_recs++;
				half = 0;
			}
		}
		s->count = 0;
	}
	if (half == 1) {
		memcpy(reserve(f, 1), &pair, sizeof pair);
		f->stats.sketch_recs++;
	}
	f->stats.spans++;
	f->stats.sketch_entries += f->nused;
	f->nused = 0;
	f->open = 0;
}

static void open_span(struct argus_gpu_folder *f, const struct argus_gpu_rec *k)
{
	memset(&f->span, 0, sizeof f->span);
	f->span.start_ns = k->start_ns;
	f->span.end_ns = k->end_ns;
	f->span.device_id = k->device_id;
	f->span.kind = ARGUS_GPU_SPAN;
	f->open = 1;
	f->after_span = f->nout;
}

/* The slot of (name, bucket) in the open span; NULL when the span is full. */
static struct argus_fold_slot *slot_for(struct argus_gpu_folder *f, uint32_t name_id, int32_t bucket)
{
	uint32_t h = (name_id * 2654435761u) ^ ((uint32_t)bucket * 40503u);
	for (uint32_t probe = 0; probe < ARGUS_FOLD_SLOTS; probe++) {
		uint32_t i = (h + probe) & (ARGUS_FOLD_SLOTS - 1);
		struct argus_fold_slot *s = &f->slots[i];
		if (s->count == 0) {
			if (f->nused >= ARGUS_GPU_SPAN_MAX_ENTRIES)
				return NULL;
			s->name_id = name_id;
			s->bucket = bucket;
			s->sum_ns = 0;
			f->used[f->nused++] = (uint16_t)i;
			return s;
		}
		if (s->name_id == name_id && s->bucket == bucket)
			return s;
	}
	return NULL;
}

static int ends_in_receive(const struct argus_gpu_rec *k)
{
	return (k->flags & ARGUS_GPU_F_P2P) && !(k->flags & ARGUS_GPU_F_SEND);
}

static int kept_alone(const struct argus_gpu_rec *k)
{
	return (k->flags & (ARGUS_GPU_F_NCCL | ARGUS_GPU_F_P2P)) || k->end_ns - k->start_ns >= ARGUS_GPU_FOLD_LONG_NS;
}

static void fold_kernel(struct argus_gpu_folder *f, const struct argus_gpu_rec *k)
{
	const uint64_t dur = k->end_ns - k->start_ns;
	const int alone = kept_alone(k);
	uint64_t gap = 0;
	f->stats.kernels_in++;
	if (f->frontier_ns != 0 && k->start_ns > f->frontier_ns) {
		gap = k->start_ns - f->frontier_ns;
		if (gap >= ARGUS_GPU_GAP_MIN_NS || alone) {
			if (gap >= ARGUS_GPU_GAP_MIN_NS) /* a drawn gap: no span across it */
				close_span(f);
			struct argus_gpu_rec *g = reserve(f, 1);
			memset(g, 0, sizeof *g);
			g->start_ns = f->frontier_ns;
			g->end_ns = k->start_ns;
			g->device_id = k->device_id;
			g->kind = ARGUS_GPU_GAP;
			g->flags = ends_in_receive(k) ? ARGUS_GPU_GAP_F_BUBBLE : 0;
			f->stats.gaps++;
			gap = 0;
		}
	}
	const uint64_t from = k->start_ns > f->frontier_ns ? k->start_ns : f->frontier_ns;
	const uint64_t cover = k->end_ns > from ? k->end_ns - from : 0;
	if (k->end_ns > f->frontier_ns)
		f->frontier_ns = k->end_ns;

	if (alone) {
		/* The first collective after a quiet spell likely starts a step (the host's
		 * rule for step marks): the span ends there, so a step's sketch gets it whole. */
		if (k->start_ns >= f->last_alone_ns + ARGUS_GPU_STEP_QUIET_NS)
			close_span(f);
		if (k->start_ns > f->last_alone_ns)
			f->last_alone_ns = k->start_ns;
		struct argus_gpu_rec *r = reserve(f, 1);
		*r = *k;
		r->flags |= ARGUS_GPU_F_FOLDED;
		r->bytes = cover;
		return;
	}
	const int32_t bucket = argus_fold_bucket(dur);
	struct argus_fold_slot *s = NULL;
	if (f->open && (k->start_ns - f->span.start_ns >= ARGUS_GPU_SPAN_MAX_NS || k->device_id != f->span.device_id))
		close_span(f);
	if (f->open && !(s = slot_for(f, k->name_id, bucket)))
		close_span(f); /* its sketch is full */
	if (!f->open) {
		open_span(f, k);
		s = slot_for(f, k->name_id, bucket);
	}
	s->count++;
	s->sum_ns += dur;
	f->span.kernels++;
	f->span.kernel_ns += dur;
	f->span.busy_ns += (uint32_t)cover;
	f->span.idle_ns += (uint32_t)gap;
	if (k->end_ns > f->span.end_ns)
		f->span.end_ns = k->end_ns;
	f->stats.folded++;
}

void argus_fold_add(struct argus_gpu_folder *f, struct argus_gpu_rec *recs, size_t n, uint64_t dropped)
{
	f->dropped += dropped;
	for (size_t i = 1; i < n; i++) {
		if (recs[i].start_ns < recs[i - 1].start_ns) {
			qsort(recs, n, sizeof *recs, by_start);
			break;
		}
	}
	for (size_t i = 0; i < n; i++) {
		const struct argus_gpu_rec *r = &recs[i];
		if (r->kind == ARGUS_GPU_KERNEL && r->end_ns >= r->start_ns) {
			fold_kernel(f, r);
		} else { /* copies, memsets, and what the agent counts as malformed: as they are */
			*reserve(f, 1) = *r;
		}
	}
}

void argus_fold_flush(struct argus_gpu_folder *f)
{
	close_span(f);
	emit_pending(f);
}

void argus_fold_end_buffer(struct argus_gpu_folder *f, uint64_t now_ns)
{
	const uint64_t start = f->span.start_ns;
	const int young = f->open && now_ns < start + ARGUS_GPU_SPAN_MAX_NS && start < now_ns + ARGUS_GPU_SPAN_MAX_NS;
	if (!young) {
		argus_fold_flush(f);
		return;
	}
	f->stats.carried++;
	emit_first(f, f->after_span);
}

void argus_unheard_add(struct argus_unheard *u, const struct argus_gpu_rec *recs, uint32_t n, uint64_t dropped)
{
	u->records += n;
	u->dropped += dropped;
	u->names_stale = 1;
	for (uint32_t i = 0; i < n; i++) {
		const struct argus_gpu_rec *r = &recs[i];
		if (r->kind == ARGUS_GPU_SPAN) {
			struct argus_gpu_span s;
			memcpy(&s, r, sizeof s);
			u->kernels += s.kernels;
		} else if (r->kind == ARGUS_GPU_KERNEL) {
			u->kernels++;
			if ((r->flags & ARGUS_GPU_F_NCCL) && !(r->flags & ARGUS_GPU_F_P2P) && u->nccl_kernels != UINT32_MAX)
				u->nccl_kernels++;
		}
	}
}

int argus_unheard_take(struct argus_unheard *u, struct argus_gpu_rec *out, uint64_t *dropped)
{
	if (u->records == 0 && u->dropped == 0)
		return 0;
	struct argus_gpu_unheard_rec r;
	memset(&r, 0, sizeof r);
	r.records = u->records;
	r.kernels = u->kernels;
	r.nccl_kernels = u->nccl_kernels;
	r.kind = ARGUS_GPU_UNHEARD;
	memcpy(out, &r, sizeof r);
	*dropped = u->dropped;
	u->records = u->kernels = u->dropped = 0;
	u->nccl_kernels = 0;
	return 1;
}
