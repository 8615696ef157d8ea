/*-------------------------------------------------------------------------
 *
 * server_metrics.h
 *		shape_sync's metrics: the table, the writers' stripes, the readers.
 *
 * See server_metrics.c for the design and the notes on synchronization.
 *
 * IDENTIFICATION
 *	  src/contract/server_metrics.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SERVER_METRICS_H
#define SERVER_METRICS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "metrics.h"
#include "shape_table.h"

/* The metrics, in the order of the table in server_metrics.c. */
typedef enum ServerMetric
{
	SM_HTTP_REQUESTS,			/* route, method, status, kind */
	SM_HTTP_RESPONSE_BYTES,		/* kind */
	SM_HTTP_SERVE_SECONDS,		/* kind */
	SM_LOG_TO_CLIENT_SECONDS,	/* kind (live, sse) */
	SM_HTTP_CONNECTIONS_OPEN,
	SM_HTTP_CONNECTIONS_REFUSED,
	SM_LIVE_WAITERS,			/* sampled: the shapes' waiters, summed */
	SM_ADMISSION_REJECTED,		/* admission kind */
	SM_REAPED,					/* reap reason */
	SM_ERRORS,					/* error kind */
	SM_DECODED_CHANGES,			/* op */
	SM_DECODED_TRANSACTIONS,
	SM_DECODER_COMMIT_LAG_SECONDS,
	SM_SHAPE_CHANGES,
	SM_ROTATIONS,				/* rotation cause */
	SM_EVICTIONS,				/* eviction cause */
	SM_COMPACTIONS,
	SM_LOG_FSYNCS,
	SM_SNAPSHOTS_STARTED,
	SM_SNAPSHOTS_FAILED,
	SM_SNAPSHOT_ROWS,
	SM_SNAPSHOT_SECONDS,
	SM_SUBQUERY_VALUE_SETS,
	SM_SUBQUERY_VALUES,
	SM_SUBQUERY_KEPT_ROWS,
	SM_METRICS_RESETS,			/* sampled from here on */
	SM_SHAPES,					/* shape state */
	SM_LOG_BYTES,
	SM_ARENA_BYTES,
	SM_ARENA_FREE_BYTES,
	SM_ADMISSION_IN_USE,		/* admission kind */
	SM_ADMISSION_LIMIT,			/* admission kind */
	SM_DECODER_LAG_BYTES,
	SM_SLOT_FLUSH_LAG_BYTES,
	SM_COUNT
} ServerMetric;

/* Dimension values, in the order of their names in server_metrics.c. */
typedef enum SmRoute
{
	SM_ROUTE_SHAPE, SM_ROUTE_HEALTH, SM_ROUTE_METRICS, SM_ROUTE_ROOT, SM_ROUTE_OTHER,
	SM_ROUTES
} SmRoute;

typedef enum SmMethod
{
	SM_METHOD_GET, SM_METHOD_HEAD, SM_METHOD_POST, SM_METHOD_DELETE, SM_METHOD_OPTIONS,
	SM_METHOD_OTHER, SM_METHODS
} SmMethod;

/* the kind of a request: what it asked the server for */
typedef enum SmKind
{
	SM_KIND_INITIAL,			/* offset=-1: the whole shape */
	SM_KIND_EXISTING,			/* a later offset, not live: catching up */
	SM_KIND_LIVE,				/* live=true, long-polling */
	SM_KIND_SSE,				/* live_sse=true */
	SM_KIND_SUBSET,				/* a subset snapshot */
	SM_KIND_DELETE,				/* DELETE /v1/shape */
	SM_KIND_NONE,				/* anything else */
	SM_KINDS
} SmKind;

typedef enum SmErrorKind
{
	SM_ERROR_BAD_REQUEST,		/* 400, 413, 414 */
	SM_ERROR_ACCESS,			/* 401, 403 */
	SM_ERROR_NOT_FOUND,			/* 404, 405 */
	SM_ERROR_MUST_REFETCH,		/* 409 */
	SM_ERROR_UNAVAILABLE,		/* 503 */
	SM_ERROR_INTERNAL,			/* 500 and the rest */
	SM_ERROR_SNAPSHOT,			/* a snapshot that failed */
	SM_ERROR_KINDS
} SmErrorKind;

typedef enum SmReapReason
{
	SM_REAP_STALLED_WRITE, SM_REAP_REQUEST_TIMEOUT, SM_REAP_REASONS
} SmReapReason;

typedef enum SmOp
{
	SM_OP_INSERT, SM_OP_UPDATE, SM_OP_DELETE, SM_OP_TRUNCATE, SM_OPS
} SmOp;

typedef enum SmRotationCause
{
	SM_ROTATION_TABLE_CHANGED,	/* DDL, privileges, replica identity */
	SM_ROTATION_TRUNCATED,
	SM_ROTATION_LOG_FULL,		/* its log could not grow */
	SM_ROTATION_FAILED,			/* it could not be served any longer */
	SM_ROTATION_EVICTED,		/* see SM_EVICTIONS for why */
	SM_ROTATION_DELETED,		/* DELETE /v1/shape */
	SM_ROTATION_SNAPSHOT_CONFLICT,	/* its table changed under its snapshot */
	SM_ROTATION_EXTENSION_DROPPED,	/* DROP EXTENSION shape_sync */
	SM_ROTATION_MOVE_IN,		/* rows may have entered it through a subquery */
	SM_ROTATION_CAUSES
} SmRotationCause;

typedef enum SmEvictionCause
{
	SM_EVICTION_IDLE, SM_EVICTION_MAX_SHAPES, SM_EVICTION_LOG_MEMORY, SM_EVICTION_LOG_DISK,
	SM_EVICTION_CAUSES
} SmEvictionCause;

/*
 * What the main worker knows about decoding, for the lag gauges: written
 * by it alone, read by anyone (relaxed; each value stands on its own).
 */
typedef struct DecoderStatus
{
	_Atomic uint64_t wal_end_lsn;	/* the WAL insert position it last saw */
	_Atomic uint64_t decoded_lsn;	/* end of the last transaction it decoded */
	_Atomic uint64_t confirmed_flush_lsn;	/* the slot's, as it confirmed it */
	_Atomic int64_t last_commit_us; /* commit time of that transaction */
	_Atomic int64_t last_commit_lag_us; /* from that commit until it was decoded */
} DecoderStatus;

/* What a process reads and writes its metrics with. */
typedef struct ServerMetrics
{
	Metrics    *area;			/* NULL: metrics are off (some unit tests) */
	MetricsLayout layout;
	ShapeTable *shapes;			/* for the sampled gauges; may be NULL */
	_Atomic uint32_t *admission_in_use; /* admission.c's levels, by kind; */
	_Atomic uint32_t *admission_limit;	/* may be NULL */
	DecoderStatus *decoder;
} ServerMetrics;

extern ServerMetrics server_metrics;
extern _Thread_local MetricsStripe sm_stripe;

extern size_t server_metrics_size(uint32_t nstripes);
extern int	server_metrics_attach(void *mem, bool create, uint32_t nstripes,
								  ShapeTable *shapes, _Atomic uint32_t *admission_in_use,
								  _Atomic uint32_t *admission_limit, DecoderStatus *decoder);
extern void server_metrics_detach_process(void);
extern void sm_claim_stripe(void);

extern uint32_t sm_request_series(SmRoute route, SmMethod method, unsigned status,
								  SmKind kind);
extern SmMethod sm_method_of(const char *method);
extern SmErrorKind sm_error_kind_of(unsigned status);

extern size_t server_metrics_format(char *buf, size_t cap);
extern void server_metrics_visit(MetricsVisitor visitor, void *ctx);
extern const char *server_metric_name(uint32_t metric);
extern void server_metrics_reset(void);
extern uint64_t server_metric_counter(ServerMetric metric, uint32_t series);

/* The writing side: one relaxed add to the thread's own stripe. */
static inline bool
sm_ready(void)
{
	if (server_metrics.area == NULL)
		return false;
	if (sm_stripe.slot == NULL)
		sm_claim_stripe();
	return true;
}

static inline void
sm_add(ServerMetric metric, uint32_t series, uint64_t n)
{
	if (sm_ready())
		metric_add(&sm_stripe, &server_metrics.layout, metric, series, n);
}

static inline void
sm_gauge_add(ServerMetric metric, uint32_t series, int64_t delta)
{
	if (sm_ready())
		metric_gauge_add(&sm_stripe, &server_metrics.layout, metric, series, delta);
}

static inline void
sm_observe(ServerMetric metric, uint32_t series, double value)
{
	if (sm_ready())
		metric_observe(&sm_stripe, &server_metrics.layout, metric, series, value);
}

#endif							/* SERVER_METRICS_H */
