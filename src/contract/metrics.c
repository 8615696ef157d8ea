/*-------------------------------------------------------------------------
 *
 * metrics.c
 *		Striped counters, gauges and histograms in shared memory.
 *
 * Every HTTP thread, the park and deadline threads, the decoder and each
 * snapshot worker write metrics on their hot paths: per request, per
 * write, per change.  A metric that all of them add to in one place makes
 * every write a cache-line transfer between cores, and the writers queue
 * on that line (seed 002: a third of the time of a scheduler went to one
 * shared record).  So each writer owns a stripe, a row of 64-bit slots
 * that no one else writes, and adds to its own slots with a plain load and
 * store; readers (the metrics endpoint, SQL functions in any backend) sum
 * the stripes when they read.  Writing costs the same with one writer or
 * sixteen; reading costs stripes x slots, which is paid only by a scrape.
 *
 * A table of MetricDefs describes the metrics; metrics_layout_init gives
 * each metric's series consecutive slots (a counter or a gauge one slot
 * per series, a histogram one per bucket, +Inf included, and one for the
 * sum of its observations), so adding a metric is one entry in a table.
 * Every process computes the same layout from the same table.
 *
 * Stripes are claimed: a thread or process takes a free one for as long as
 * it writes (metrics_claim_stripe) and gives it back when it ends; the
 * counts in it stay, and the next owner goes on adding to them, so totals
 * survive the writers.  When every stripe is held, a writer gets the one
 * shared overflow stripe, where it adds atomically: slower, never wrong.
 *
 * A histogram stores each bucket's own count, not cumulative counts, and
 * no separate total: a read sums the buckets over the stripes, then
 * accumulates them, and reports the last as both +Inf and the count.  So
 * at every read, even while writers race, the buckets are monotone and
 * +Inf equals the count, by construction rather than by ordering.  The sum
 * of observations is a separate slot: it may lag or lead the buckets by
 * the observations in flight, and is exact once writers are quiet.
 *
 * A reset does not touch the stripes (their writers add without a lock):
 * it records the current totals as a baseline that reads subtract.
 * Gauges are not reset: they are the level of something (connections
 * open), not a count since a moment.
 *
 * Notes on synchronization
 * ------------------------
 * - A slot of an owned stripe is written by its owner only, with relaxed
 *   atomic loads and stores (no read-modify-write); readers load it
 *   relaxed.  64-bit atomics do not tear, so a read sees each slot's value
 *   before or after an add, and a sum over stripes lies between the totals
 *   at the read's start and its end.  Slots of the overflow stripe are
 *   added with fetch_add; its sums use a compare-and-swap loop.
 * - owned[i] goes 0 -> 1 by compare-and-swap (acquire) when a writer
 *   claims stripe i, and back to 0 with a release store when it lets go:
 *   the next owner's loads of the slots see every store of the last.
 * - A reset holds reset_lock (a compare-and-swap spin: resets are rare and
 *   short) and writes the baseline inside the seqlock reset_seq: it makes
 *   it odd, stores the baseline, and makes it even with a release store.
 *   Readers copy the baseline slots they need and retry until reset_seq
 *   was the same even value before and after.  A baseline slot is never
 *   above the total it was taken from, and totals only grow, so a counter
 *   never reads negative and a histogram's buckets stay monotone.
 *
 * Nothing here calls PostgreSQL: the area is created in the postmaster's
 * shared memory (shared_state.c), and standalone tests drive it from
 * threads.
 *
 * IDENTIFICATION
 *	  src/contract/metrics.c
 *
 *-------------------------------------------------------------------------
 */
#include "metrics.h"

#include <errno.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef POSTGRES_H
#error "metrics.c is shared by threads and must not include postgres.h"
#endif

#define relaxed memory_order_relaxed
#define acquire memory_order_acquire
#define release memory_order_release

#define CACHE_LINE			64
#define SLOTS_PER_LINE		(CACHE_LINE / sizeof(uint64_t))

static inline _Atomic uint32_t *
metrics_owned(const Metrics *m)
{
	return (_Atomic uint32_t *) ((char *) m + m->owned_offset);
}

static inline _Atomic uint64_t *
metrics_baseline(const Metrics *m)
{
	return (_Atomic uint64_t *) ((char *) m + m->baseline_offset);
}

static inline _Atomic uint64_t *
metrics_stripe(const Metrics *m, uint32_t stripe)
{
	return (_Atomic uint64_t *) ((char *) m + m->data_offset) + (size_t) stripe * m->slots;
}

static size_t
align_up(size_t n, size_t to)
{
	return (n + to - 1) / to * to;
}

/* ---------------------------------------------------------------- layout */

static uint32_t
metric_series_of(const MetricDef *d)
{
	uint32_t	series = 1;

	for (uint32_t i = 0; i < d->ndims; i++)
		series *= d->dims[i].nvalues;
	return series;
}

static uint32_t
metric_width(const MetricDef *d)
{
	if (METRIC_IS_SAMPLED(d->kind))
		return 0;
	return metric_series_of(d) * (d->kind == METRIC_HISTOGRAM ? d->nbounds + 2 : 1);
}

/* Lays out `defs`; 0, or -1 when a definition is invalid or memory is short. */
int
metrics_layout_init(MetricsLayout *layout, const MetricDef *defs, uint32_t ndefs)
{
	uint32_t	next = 0;

	memset(layout, 0, sizeof(*layout));
	layout->base = malloc((ndefs ? ndefs : 1) * sizeof(uint32_t));
	layout->series = malloc((ndefs ? ndefs : 1) * sizeof(uint32_t));
	if (layout->base == NULL || layout->series == NULL)
		goto invalid;
	for (uint32_t i = 0; i < ndefs; i++)
	{
		const MetricDef *d = &defs[i];

		if (d->ndims > METRICS_MAX_DIMS)
			goto invalid;
		for (uint32_t k = 0; k < d->ndims; k++)
			if (d->dims[k].nvalues == 0)
				goto invalid;
		layout->series[i] = metric_series_of(d);
		if (d->kind == METRIC_HISTOGRAM)
		{
			if (d->nbounds == 0 || d->nbounds > METRICS_MAX_BOUNDS)
				goto invalid;
			for (uint32_t b = 1; b < d->nbounds; b++)
				if (!(d->bounds[b - 1] < d->bounds[b]))
					goto invalid;
		}
		layout->base[i] = next;
		next += metric_width(d);
	}
	layout->defs = defs;
	layout->ndefs = ndefs;
	layout->slots = (uint32_t) align_up(next ? next : 1, SLOTS_PER_LINE);
	return 0;

invalid:
	metrics_layout_free(layout);
	return -1;
}

void
metrics_layout_free(MetricsLayout *layout)
{
	free(layout->base);
	free(layout->series);
	layout->base = NULL;
	layout->series = NULL;
}

uint32_t
metrics_series_count(const MetricsLayout *layout, uint32_t metric)
{
	return layout->series[metric];
}

/*
 * The label list of a series, without braces ("route=\"shape\",kind=\"live\"",
 * or "" for a metric without dimensions), into buf; returns its length,
 * which is cap or more when it did not fit.
 */
size_t
metrics_series_labels(const MetricsLayout *layout, uint32_t metric, uint32_t series,
					  char *buf, size_t cap)
{
	const MetricDef *d = &layout->defs[metric];
	uint32_t	index[METRICS_MAX_DIMS];
	size_t		len = 0;

	for (uint32_t k = d->ndims; k-- > 0;)
	{
		index[k] = series % d->dims[k].nvalues;
		series /= d->dims[k].nvalues;
	}
	if (cap > 0)
		buf[0] = '\0';
	for (uint32_t k = 0; k < d->ndims; k++)
	{
		size_t		room = len < cap ? cap - len : 0;
		int			n = snprintf(room ? buf + len : NULL, room, "%s%s=\"%s\"", k ? "," : "",
								 d->dims[k].name, d->dims[k].values[index[k]]);

		if (n > 0)
			len += (size_t) n;
	}
	return len;
}

/* Bytes of shared memory for `nstripes` owned stripes, and the shared one. */
size_t
metrics_size(const MetricsLayout *layout, uint32_t nstripes)
{
	size_t		size = align_up(sizeof(Metrics), CACHE_LINE);

	size += align_up(nstripes * sizeof(_Atomic uint32_t), CACHE_LINE);
	size += align_up(layout->slots * sizeof(uint64_t), CACHE_LINE);
	size += (size_t) (nstripes + 1) * layout->slots * sizeof(uint64_t);
	return size + CACHE_LINE;	/* room to align the start */
}

/*
 * Lays out the area in `mem` (metrics_size bytes), every count zero, and
 * returns it (at the first cache-line boundary in `mem`).
 */
Metrics *
metrics_init(void *mem, const MetricsLayout *layout, uint32_t nstripes)
{
	Metrics    *m = (Metrics *) align_up((size_t) mem, CACHE_LINE);
	size_t		off = align_up(sizeof(Metrics), CACHE_LINE);

	memset(m, 0, metrics_size(layout, nstripes) - CACHE_LINE);
	m->nstripes = nstripes;
	m->slots = layout->slots;
	m->owned_offset = off;
	off += align_up(nstripes * sizeof(_Atomic uint32_t), CACHE_LINE);
	m->baseline_offset = off;
	off += align_up(layout->slots * sizeof(uint64_t), CACHE_LINE);
	m->data_offset = off;
	atomic_init(&m->reset_seq, 0);
	atomic_init(&m->reset_lock, 0);
	atomic_init(&m->resets, 0);
	return m;
}

/* The area metrics_init laid out in `mem`, from another mapping of it. */
Metrics *
metrics_attach(void *mem)
{
	return (Metrics *) align_up((size_t) mem, CACHE_LINE);
}

/* --------------------------------------------------------------- writers */

/* Whether the process `pid` is gone (a stripe it held is free to take). */
static bool
metrics_owner_gone(uint32_t pid)
{
	return kill((pid_t) pid, 0) != 0 && errno == ESRCH;
}

/*
 * Gives the caller, `owner` (its process id; threads of a process share
 * it), a stripe to write: a free one, or one whose owner process has gone
 * without letting go (it crashed), or, when all are held, the shared one.
 * Returns whether the stripe is the caller's own.
 */
bool
metrics_claim_stripe(Metrics *m, MetricsStripe *stripe, uint32_t owner)
{
	_Atomic uint32_t *owned = metrics_owned(m);

	for (int pass = 0; pass < 2; pass++)
	{
		for (uint32_t i = 0; i < m->nstripes; i++)
		{
			uint32_t	expected = atomic_load_explicit(&owned[i], relaxed);

			if (pass == 0 ? expected != 0 : (expected == 0 || !metrics_owner_gone(expected)))
				continue;
			if (atomic_compare_exchange_strong_explicit(&owned[i], &expected, owner,
														acquire, relaxed))
			{
				stripe->slot = metrics_stripe(m, i);
				stripe->shared = false;
				stripe->index = i;
				return true;
			}
		}
	}
	stripe->slot = metrics_stripe(m, m->nstripes);
	stripe->shared = true;
	stripe->index = m->nstripes;
	return false;
}

void
metrics_release_stripe(Metrics *m, MetricsStripe *stripe)
{
	if (stripe->slot != NULL && !stripe->shared)
		atomic_store_explicit(&metrics_owned(m)[stripe->index], 0, release);
	stripe->slot = NULL;
}

/*
 * Lets go of every stripe `owner` holds (a process that ends, once its
 * threads have stopped writing); returns how many.
 */
uint32_t
metrics_release_owner(Metrics *m, uint32_t owner)
{
	_Atomic uint32_t *owned = metrics_owned(m);
	uint32_t	released = 0;

	for (uint32_t i = 0; i < m->nstripes; i++)
	{
		uint32_t	expected = owner;

		if (atomic_compare_exchange_strong_explicit(&owned[i], &expected, 0, release, relaxed))
			released++;
	}
	return released;
}

static void
metrics_sum_add(const MetricsStripe *stripe, uint32_t slot, double value)
{
	_Atomic uint64_t *p = &stripe->slot[slot];
	uint64_t	bits = atomic_load_explicit(p, relaxed);
	double		sum;

	for (;;)
	{
		uint64_t	next;

		memcpy(&sum, &bits, sizeof(sum));
		sum += value;
		memcpy(&next, &sum, sizeof(next));
		if (!stripe->shared)
		{
			atomic_store_explicit(p, next, relaxed);
			return;
		}
		if (atomic_compare_exchange_weak_explicit(p, &bits, next, relaxed, relaxed))
			return;
	}
}

/* Counts `value` in its bucket (the first whose bound is >= it) and sum. */
void
metric_observe(const MetricsStripe *stripe, const MetricsLayout *layout, uint32_t metric,
			   uint32_t label, double value)
{
	const MetricDef *d = &layout->defs[metric];
	uint32_t	slot = metrics_series_slot(layout, metric, label);
	uint32_t	bucket = 0;

	while (bucket < d->nbounds && !(value <= d->bounds[bucket]))
		bucket++;				/* NaN lands in +Inf */
	metrics_slot_add(stripe, slot + bucket, 1);
	if (!isnan(value))
		metrics_sum_add(stripe, slot + d->nbounds + 1, value);
}

/* --------------------------------------------------------------- readers */

static uint64_t
metrics_slot_total(const Metrics *m, uint32_t slot)
{
	uint64_t	total = 0;

	for (uint32_t i = 0; i <= m->nstripes; i++)
		total += atomic_load_explicit(&metrics_stripe(m, i)[slot], relaxed);
	return total;
}

static double
metrics_slot_sum(const Metrics *m, uint32_t slot)
{
	double		total = 0;

	for (uint32_t i = 0; i <= m->nstripes; i++)
	{
		uint64_t	bits = atomic_load_explicit(&metrics_stripe(m, i)[slot], relaxed);
		double		v;

		memcpy(&v, &bits, sizeof(v));
		total += v;
	}
	return total;
}

/* Copies baseline slots [first, first + n) consistently into out. */
static void
metrics_baseline_copy(const Metrics *m, uint32_t first, uint32_t n, uint64_t *out)
{
	_Atomic uint64_t *baseline = metrics_baseline(m);
	Metrics    *mm = (Metrics *) m;

	for (;;)
	{
		uint32_t	before = atomic_load_explicit(&mm->reset_seq, acquire);

		if (before % 2 == 0)
		{
			for (uint32_t i = 0; i < n; i++)
				out[i] = atomic_load_explicit(&baseline[first + i], relaxed);
			atomic_thread_fence(acquire);
			if (atomic_load_explicit(&mm->reset_seq, relaxed) == before)
				return;
		}
		sched_yield();
	}
}

uint64_t
metrics_read_counter(const Metrics *m, const MetricsLayout *layout, uint32_t metric,
					 uint32_t label)
{
	uint32_t	slot = metrics_series_slot(layout, metric, label);
	uint64_t	base;
	uint64_t	total;

	metrics_baseline_copy(m, slot, 1, &base);
	total = metrics_slot_total(m, slot);
	return total > base ? total - base : 0;
}

int64_t
metrics_read_gauge(const Metrics *m, const MetricsLayout *layout, uint32_t metric,
				   uint32_t label)
{
	return (int64_t) metrics_slot_total(m, metrics_series_slot(layout, metric, label));
}

/*
 * A histogram series: cumulative[b] for each bound and, at nbounds, +Inf,
 * which is also the count; *sum, the sum of the observations.
 */
void
metrics_read_histogram(const Metrics *m, const MetricsLayout *layout, uint32_t metric,
					   uint32_t label, uint64_t *cumulative, double *sum)
{
	const MetricDef *d = &layout->defs[metric];
	uint32_t	slot = metrics_series_slot(layout, metric, label);
	uint64_t	base[METRICS_MAX_BOUNDS + 2];
	uint64_t	running = 0;

	metrics_baseline_copy(m, slot, d->nbounds + 2, base);
	for (uint32_t b = 0; b <= d->nbounds; b++)
	{
		uint64_t	total = metrics_slot_total(m, slot + b);

		running += total > base[b] ? total - base[b] : 0;
		cumulative[b] = running;
	}
	{
		double		base_sum;

		memcpy(&base_sum, &base[d->nbounds + 1], sizeof(base_sum));
		*sum = metrics_slot_sum(m, slot + d->nbounds + 1) - base_sum;
	}
}

/*
 * Counters and histograms read zero from now on: the baseline becomes the
 * current totals.  Gauges are kept.
 */
void
metrics_reset(Metrics *m, const MetricsLayout *layout)
{
	_Atomic uint64_t *baseline = metrics_baseline(m);
	uint32_t	expected = 0;
	uint32_t	seq;

	while (!atomic_compare_exchange_weak_explicit(&m->reset_lock, &expected, 1, acquire, relaxed))
	{
		expected = 0;
		sched_yield();
	}
	seq = atomic_load_explicit(&m->reset_seq, relaxed);
	atomic_store_explicit(&m->reset_seq, seq + 1, relaxed);
	atomic_thread_fence(release);
	for (uint32_t i = 0; i < layout->ndefs; i++)
	{
		const MetricDef *d = &layout->defs[i];
		uint32_t	first = layout->base[i];
		uint32_t	n = metric_width(d);

		if (d->kind == METRIC_GAUGE)
			continue;
		for (uint32_t s = first; s < first + n; s++)
		{
			bool		is_sum = d->kind == METRIC_HISTOGRAM &&
				(s - first) % (d->nbounds + 2) == d->nbounds + 1;
			uint64_t	v;

			if (is_sum)
			{
				double		sum = metrics_slot_sum(m, s);

				memcpy(&v, &sum, sizeof(v));
			}
			else
				v = metrics_slot_total(m, s);
			atomic_store_explicit(&baseline[s], v, relaxed);
		}
	}
	atomic_store_explicit(&m->reset_seq, seq + 2, release);
	atomic_fetch_add_explicit(&m->resets, 1, relaxed);
	atomic_store_explicit(&m->reset_lock, 0, release);
}

/* ----------------------------------------------------------- exposition */

typedef struct TextOut
{
	char	   *buf;
	size_t		cap;
	size_t		len;			/* may pass cap: the size needed */
} TextOut;

static void
out_printf(TextOut *o, const char *fmt,...) __attribute__((format(printf, 2, 3)));

static void
out_printf(TextOut *o, const char *fmt,...)
{
	va_list		ap;
	int			n;
	size_t		room = o->len < o->cap ? o->cap - o->len : 0;

	va_start(ap, fmt);
	n = vsnprintf(room ? o->buf + o->len : NULL, room, fmt, ap);
	va_end(ap);
	if (n > 0)
		o->len += (size_t) n;
}

/* a float as Prometheus writes one: +Inf, or the shortest exact form */
static void
out_double(TextOut *o, double v)
{
	if (isinf(v))
		out_printf(o, v > 0 ? "+Inf" : "-Inf");
	else if (isnan(v))
		out_printf(o, "NaN");
	else
	{
		char		text[32];

		snprintf(text, sizeof(text), "%.15g", v);
		if (strtod(text, NULL) != v)
			snprintf(text, sizeof(text), "%.17g", v);
		out_printf(o, "%s", text);
	}
}

/*
 * Reports every series of every metric to `visitor`, in table order: a
 * counter's or a gauge's value, a histogram's buckets (cumulative, le
 * last among the labels), sum and count.  Sampled values come from
 * `sampler` (none without one).  Sparse metrics skip series that are zero.
 */
void
metrics_visit(const Metrics *m, const MetricsLayout *layout, MetricsSampler sampler,
			  void *sampler_ctx, MetricsVisitor visitor, void *visitor_ctx)
{
	char		labels[512];
	char		value[48];
	char		with_le[576];

	for (uint32_t i = 0; i < layout->ndefs; i++)
	{
		const MetricDef *d = &layout->defs[i];

		for (uint32_t l = 0; l < layout->series[i]; l++)
		{
			MetricSample sample = {i, "", labels, value};
			TextOut		v = {value, sizeof(value), 0};

			metrics_series_labels(layout, i, l, labels, sizeof(labels));
			if (d->kind == METRIC_COUNTER || d->kind == METRIC_GAUGE)
			{
				if (d->kind == METRIC_COUNTER)
				{
					uint64_t	n = metrics_read_counter(m, layout, i, l);

					if (n == 0 && d->sparse)
						continue;
					out_printf(&v, "%llu", (unsigned long long) n);
				}
				else
				{
					int64_t		n = metrics_read_gauge(m, layout, i, l);

					if (n == 0 && d->sparse)
						continue;
					out_printf(&v, "%lld", (long long) n);
				}
				visitor(visitor_ctx, &sample);
			}
			else if (METRIC_IS_SAMPLED(d->kind))
			{
				double		x;

				if (sampler == NULL || !sampler(sampler_ctx, i, l, &x))
					continue;
				out_double(&v, x);
				visitor(visitor_ctx, &sample);
			}
			else
			{
				uint64_t	cumulative[METRICS_MAX_BOUNDS + 1];
				double		sum;

				metrics_read_histogram(m, layout, i, l, cumulative, &sum);
				if (cumulative[d->nbounds] == 0 && d->sparse)
					continue;
				sample.suffix = "_bucket";
				sample.labels = with_le;
				for (uint32_t b = 0; b <= d->nbounds; b++)
				{
					TextOut		le = {with_le, sizeof(with_le), 0};

					out_printf(&le, "%s%sle=\"", labels, labels[0] ? "," : "");
					out_double(&le, b < d->nbounds ? d->bounds[b] : INFINITY);
					out_printf(&le, "\"");
					v.len = 0;
					out_printf(&v, "%llu", (unsigned long long) cumulative[b]);
					visitor(visitor_ctx, &sample);
				}
				sample.labels = labels;
				sample.suffix = "_sum";
				v.len = 0;
				out_double(&v, sum);
				visitor(visitor_ctx, &sample);
				sample.suffix = "_count";
				v.len = 0;
				out_printf(&v, "%llu", (unsigned long long) cumulative[d->nbounds]);
				visitor(visitor_ctx, &sample);
			}
		}
	}
}

typedef struct PrometheusText
{
	const MetricsLayout *layout;
	TextOut		out;
	int64_t		described;		/* the last metric given HELP and TYPE */
} PrometheusText;

static void
prometheus_line(void *ctx, const MetricSample *sample)
{
	PrometheusText *p = ctx;
	const MetricDef *d = &p->layout->defs[sample->metric];

	if (p->described != (int64_t) sample->metric)
	{
		const char *type = d->kind == METRIC_COUNTER || d->kind == METRIC_SAMPLED_COUNTER ?
			"counter" : d->kind == METRIC_HISTOGRAM ? "histogram" : "gauge";

		out_printf(&p->out, "# HELP %s %s\n# TYPE %s %s\n", d->name, d->help, d->name, type);
		p->described = sample->metric;
	}
	out_printf(&p->out, "%s%s%s%s%s %s\n", d->name, sample->suffix,
			   sample->labels[0] ? "{" : "", sample->labels, sample->labels[0] ? "}" : "",
			   sample->value);
}

/*
 * Every metric in the Prometheus text exposition format (version 0.0.4)
 * into buf; returns the length of the whole text, which is more than cap
 * when it did not fit (then call again with a larger buffer).  A metric
 * with no series to show (sparse, all zero) is left out, HELP and TYPE too.
 */
size_t
metrics_format_prometheus(const Metrics *m, const MetricsLayout *layout,
						  MetricsSampler sampler, void *sampler_ctx, char *buf, size_t cap)
{
	PrometheusText p = {layout, {buf, cap, 0}, -1};

	if (cap > 0)
		buf[0] = '\0';
	metrics_visit(m, layout, sampler, sampler_ctx, prometheus_line, &p);
	return p.out.len;
}
