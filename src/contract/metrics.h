/*-------------------------------------------------------------------------
 *
 * metrics.h
 *		Striped counters, gauges and histograms in shared memory.
 *
 * See metrics.c for the layout and the notes on synchronization.
 *
 * IDENTIFICATION
 *	  src/contract/metrics.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef METRICS_H
#define METRICS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum MetricKind
{
	METRIC_COUNTER,				/* only grows; summed over stripes */
	METRIC_GAUGE,				/* +/- deltas; summed over stripes, never reset */
	METRIC_HISTOGRAM,			/* bucket counts and a sum of observations */
	METRIC_SAMPLED,				/* a gauge read from elsewhere when read: no slots */
	METRIC_SAMPLED_COUNTER		/* a count kept elsewhere, read when read */
} MetricKind;

#define METRIC_IS_SAMPLED(kind) ((kind) == METRIC_SAMPLED || (kind) == METRIC_SAMPLED_COUNTER)

#define METRICS_MAX_BOUNDS	24

/* A label and the values it takes: one dimension of a metric's series. */
typedef struct MetricDim
{
	const char *name;
	const char *const *values;
	uint32_t	nvalues;
} MetricDim;

#define METRICS_MAX_DIMS	4

/*
 * One metric of a table: a name, its help text, its kind, the dimensions
 * of its series (none: one series; several: every combination, the last
 * dimension varying fastest) and, for a histogram, the upper bounds of its
 * buckets, ascending (+Inf is implied).  A sparse metric shows only the
 * series that are not zero (one with many combinations, most never seen).
 */
typedef struct MetricDef
{
	const char *name;
	const char *help;
	MetricKind	kind;
	const MetricDim *dims;
	uint32_t	ndims;
	const double *bounds;
	uint32_t	nbounds;
	bool		sparse;
} MetricDef;

/*
 * The value of series `series` of sampled metric `metric`, read from
 * the state it reports (a table's size, a limit); false: not known now,
 * and the series is left out.
 */
typedef bool (*MetricsSampler) (void *ctx, uint32_t metric, uint32_t series, double *value);

/*
 * One line of what metrics_visit reports: a series of a counter or a
 * gauge, or a bucket, the sum or the count of a histogram's series.
 */
typedef struct MetricSample
{
	uint32_t	metric;			/* index in the table */
	const char *suffix;			/* "", "_bucket", "_sum" or "_count" */
	const char *labels;			/* without braces; "" for none; le included */
	const char *value;			/* as the text format writes it */
} MetricSample;

typedef void (*MetricsVisitor) (void *ctx, const MetricSample *sample);

/* Where each metric's series live in a stripe: computed from a table. */
typedef struct MetricsLayout
{
	const MetricDef *defs;
	uint32_t	ndefs;
	uint32_t	slots;			/* per stripe, a multiple of a cache line */
	uint32_t   *base;			/* first slot of each metric (ndefs entries) */
	uint32_t   *series;			/* series of each metric (ndefs entries) */
} MetricsLayout;

/*
 * The shared area: a header, then the owner flags, the baseline and the
 * stripes, each at an offset from the header (the area may be mapped at
 * different addresses in different processes).
 */
typedef struct Metrics
{
	uint32_t	nstripes;		/* owned stripes; stripe nstripes is shared */
	uint32_t	slots;			/* per stripe */
	uint64_t	owned_offset;	/* nstripes _Atomic uint32_t: the owner's pid */
	uint64_t	baseline_offset;	/* slots _Atomic uint64_t, subtracted */
	uint64_t	data_offset;	/* (nstripes + 1) stripes of slots */
	_Atomic uint32_t reset_seq; /* seqlock over the baseline: odd in a reset */
	_Atomic uint32_t reset_lock;	/* one reset at a time */
	_Atomic uint64_t resets;
} Metrics;

/* A writer's stripe: its slots, and whether others write them too. */
typedef struct MetricsStripe
{
	_Atomic uint64_t *slot;
	bool		shared;			/* the overflow stripe: atomic adds */
	uint32_t	index;
} MetricsStripe;

extern int	metrics_layout_init(MetricsLayout *layout, const MetricDef *defs, uint32_t ndefs);
extern void metrics_layout_free(MetricsLayout *layout);
extern size_t metrics_size(const MetricsLayout *layout, uint32_t nstripes);
extern Metrics *metrics_init(void *mem, const MetricsLayout *layout, uint32_t nstripes);
extern Metrics *metrics_attach(void *mem);

extern bool metrics_claim_stripe(Metrics *m, MetricsStripe *stripe, uint32_t owner);
extern void metrics_release_stripe(Metrics *m, MetricsStripe *stripe);
extern uint32_t metrics_release_owner(Metrics *m, uint32_t owner);

extern uint32_t metrics_series_count(const MetricsLayout *layout, uint32_t metric);
extern size_t metrics_series_labels(const MetricsLayout *layout, uint32_t metric,
									uint32_t series, char *buf, size_t cap);

extern void metrics_reset(Metrics *m, const MetricsLayout *layout);

extern uint64_t metrics_read_counter(const Metrics *m, const MetricsLayout *layout,
									 uint32_t metric, uint32_t label);
extern int64_t metrics_read_gauge(const Metrics *m, const MetricsLayout *layout,
								  uint32_t metric, uint32_t label);
extern void metrics_read_histogram(const Metrics *m, const MetricsLayout *layout,
								   uint32_t metric, uint32_t label, uint64_t *cumulative,
								   double *sum);
extern void metrics_visit(const Metrics *m, const MetricsLayout *layout,
						  MetricsSampler sampler, void *sampler_ctx,
						  MetricsVisitor visitor, void *visitor_ctx);
extern size_t metrics_format_prometheus(const Metrics *m, const MetricsLayout *layout,
										MetricsSampler sampler, void *sampler_ctx,
										char *buf, size_t cap);

/* the slot of series `label` of `metric` */
static inline uint32_t
metrics_series_slot(const MetricsLayout *layout, uint32_t metric, uint32_t label)
{
	const MetricDef *d = &layout->defs[metric];
	uint32_t	width = d->kind == METRIC_HISTOGRAM ? d->nbounds + 2 : 1;

	return layout->base[metric] + label * width;
}

/* Adds n to a slot: a plain load and store on an owned stripe. */
static inline void
metrics_slot_add(const MetricsStripe *stripe, uint32_t slot, uint64_t n)
{
	_Atomic uint64_t *p = &stripe->slot[slot];

	if (stripe->shared)
		atomic_fetch_add_explicit(p, n, memory_order_relaxed);
	else
		atomic_store_explicit(p, atomic_load_explicit(p, memory_order_relaxed) + n,
							  memory_order_relaxed);
}

static inline void
metric_add(const MetricsStripe *stripe, const MetricsLayout *layout, uint32_t metric,
		   uint32_t label, uint64_t n)
{
	metrics_slot_add(stripe, metrics_series_slot(layout, metric, label), n);
}

/* A gauge's delta: stored as its two's complement, summed back as signed. */
static inline void
metric_gauge_add(const MetricsStripe *stripe, const MetricsLayout *layout, uint32_t metric,
				 uint32_t label, int64_t delta)
{
	metrics_slot_add(stripe, metrics_series_slot(layout, metric, label), (uint64_t) delta);
}

extern void metric_observe(const MetricsStripe *stripe, const MetricsLayout *layout,
						   uint32_t metric, uint32_t label, double value);

#endif							/* METRICS_H */
