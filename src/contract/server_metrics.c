/*-------------------------------------------------------------------------
 *
 * server_metrics.c
 *		shape_sync's metrics: the table, the writers' stripes, the readers.
 *
 * The one table below names every metric the server keeps; metrics.c lays
 * it out in shared memory (shared_state.c sizes and creates the area), so
 * adding a metric is a line here and an entry in ServerMetric.  Three
 * kinds of writer add to it, each to a stripe of its own:
 *	- the threads of the main worker (HTTP, park, deadline, and the main
 *	  thread, which decodes and keeps the registry),
 *	- snapshot workers, one process each,
 * and nothing else writes.  A thread claims its stripe at its first write
 * (sm_claim_stripe) and keeps it for as long as its process lives: the
 * writing path is then one relaxed load and store to a line no other core
 * writes.  A process lets go of its stripes when it exits
 * (server_metrics_detach_process); one that crashed is taken over by the
 * next claimer (metrics.c), counts kept.
 *
 * What is a level of some state (shapes held, log bytes, admission slots
 * in use, decoding lag) is not counted at all: METRIC_SAMPLED entries are
 * read from that state when a reader asks (sm_sample), so they cannot
 * drift from it.  Gauges kept by deltas are for levels only the worker's
 * threads can see (connections open, with those past the limit that hold
 * no slot).
 *
 * Readers are GET /metrics (on an HTTP thread) and the SQL functions
 * shape_sync.metric_values() and reset_metrics() (in any backend).
 *
 * Notes on synchronization
 * ------------------------
 * - The stripes are metrics.c's business; see its notes.
 * - sm_stripe is thread-local: a thread only ever writes its own.
 * - `server_metrics` is set once per process, before any thread of it
 *   writes a metric (the worker attaches before it starts the HTTP
 *   server), and not changed while they run.
 * - The sampled values read shared state without locks, as the SQL views
 *   do: each value is a relaxed load, consistent on its own.
 *
 * IDENTIFICATION
 *	  src/contract/server_metrics.c
 *
 *-------------------------------------------------------------------------
 */
#include "server_metrics.h"

#include <string.h>
#include <unistd.h>

#ifdef POSTGRES_H
#error "server_metrics.c runs on HTTP threads and must not include postgres.h"
#endif

ServerMetrics server_metrics;
_Thread_local MetricsStripe sm_stripe;

#define COUNT_OF(a) ((uint32_t) (sizeof(a) / sizeof((a)[0])))
#define DIM(name, values) {name, values, COUNT_OF(values)}

static const char *const route_values[] = {"shape", "health", "metrics", "root", "other"};
static const char *const method_values[] = {"GET", "HEAD", "POST", "DELETE", "OPTIONS", "other"};
static const char *const status_values[] = {"1xx", "2xx", "3xx", "4xx", "5xx"};
static const char *const kind_values[] = {"initial", "existing", "live", "sse", "subset",
"delete", "none"};
static const char *const live_kind_values[] = {"live", "sse"};
static const char *const admission_values[] = {"initial", "existing"};
static const char *const reap_values[] = {"stalled_write", "request_timeout"};
static const char *const error_values[] = {"bad_request", "access", "not_found",
"must_refetch", "unavailable", "internal", "snapshot"};
static const char *const op_values[] = {"insert", "update", "delete", "truncate"};
static const char *const rotation_values[] = {"table_changed", "truncated", "log_full",
"failed", "evicted", "deleted", "snapshot_conflict", "extension_dropped", "move_in"};
static const char *const eviction_values[] = {"idle", "max_shapes", "log_memory", "log_disk"};
static const char *const state_values[] = {"snapshotting", "ready", "failed"};

static const MetricDim request_dims[] = {
	DIM("route", route_values), DIM("method", method_values),
	DIM("status", status_values), DIM("kind", kind_values)
};
static const MetricDim kind_dim[] = {DIM("kind", kind_values)};
static const MetricDim live_kind_dim[] = {DIM("kind", live_kind_values)};
static const MetricDim admission_dim[] = {DIM("kind", admission_values)};
static const MetricDim reap_dim[] = {DIM("reason", reap_values)};
static const MetricDim error_dim[] = {DIM("kind", error_values)};
static const MetricDim op_dim[] = {DIM("op", op_values)};
static const MetricDim rotation_dim[] = {DIM("cause", rotation_values)};
static const MetricDim eviction_dim[] = {DIM("cause", eviction_values)};
static const MetricDim state_dim[] = {DIM("state", state_values)};

/* serving: 100 us to 2 min (a live request waits up to long_poll_timeout) */
static const double serve_bounds[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
	0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};

/* lags: 100 us to 5 min */
static const double lag_bounds[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
	0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300};

/* snapshots: 1 ms to 30 min */
static const double snapshot_bounds[] = {0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30,
	60, 300, 1800};

#define DIMS(d) d, COUNT_OF(d)
#define BOUNDS(b) b, COUNT_OF(b)

static const MetricDef server_metric_defs[SM_COUNT] = {
	[SM_HTTP_REQUESTS] = {"shape_sync_http_requests_total",
		"HTTP requests answered, by route, method, status class and kind of request.",
	METRIC_COUNTER, DIMS(request_dims), NULL, 0, true},
	[SM_HTTP_RESPONSE_BYTES] = {"shape_sync_http_response_body_bytes_total",
		"Bytes of response bodies sent, by kind of request.",
	METRIC_COUNTER, DIMS(kind_dim), NULL, 0, false},
	[SM_HTTP_SERVE_SECONDS] = {"shape_sync_http_serve_duration_seconds",
		"Time from a request's arrival to the end of its response, by kind of request.",
	METRIC_HISTOGRAM, DIMS(kind_dim), BOUNDS(serve_bounds), false},
	[SM_LOG_TO_CLIENT_SECONDS] = {"shape_sync_log_to_client_seconds",
		"Time from a change reaching a shape's log to a live response carrying it.",
	METRIC_HISTOGRAM, DIMS(live_kind_dim), BOUNDS(lag_bounds), false},
	[SM_HTTP_CONNECTIONS_OPEN] = {"shape_sync_http_connections",
		"TCP connections open.",
	METRIC_GAUGE, NULL, 0, NULL, 0, false},
	[SM_HTTP_CONNECTIONS_REFUSED] = {"shape_sync_http_connections_refused_total",
		"Connections refused because shape_sync.max_connections were open.",
	METRIC_COUNTER, NULL, 0, NULL, 0, false},
	[SM_LIVE_WAITERS] = {"shape_sync_live_waiters",
		"Requests parked until their shape's log grows or their deadline comes.",
	METRIC_SAMPLED, NULL, 0, NULL, 0, false},
	[SM_ADMISSION_REJECTED] = {"shape_sync_admission_rejected_total",
		"Requests answered 503 because every admission slot of their kind was in use.",
	METRIC_COUNTER, DIMS(admission_dim), NULL, 0, false},
	[SM_REAPED] = {"shape_sync_reaped_connections_total",
		"Connections closed by the deadline thread: a write that made no progress for "
		"shape_sync.stalled_serve_timeout, or no whole request within "
		"shape_sync.request_header_timeout.",
	METRIC_COUNTER, DIMS(reap_dim), NULL, 0, false},
	[SM_ERRORS] = {"shape_sync_errors_total",
		"Error answers by kind, and snapshots that failed.",
	METRIC_COUNTER, DIMS(error_dim), NULL, 0, false},
	[SM_DECODED_CHANGES] = {"shape_sync_decoded_changes_total",
		"Row changes decoded from the WAL, of tables with shapes or not.",
	METRIC_COUNTER, DIMS(op_dim), NULL, 0, false},
	[SM_DECODED_TRANSACTIONS] = {"shape_sync_decoded_transactions_total",
		"Committed transactions decoded from the WAL.",
	METRIC_COUNTER, NULL, 0, NULL, 0, false},
	[SM_DECODER_COMMIT_LAG_SECONDS] = {"shape_sync_decoder_commit_lag_seconds",
		"Time from a transaction's commit to its changes reaching the shape logs.",
	METRIC_HISTOGRAM, NULL, 0, BOUNDS(lag_bounds), false},
	[SM_SHAPE_CHANGES] = {"shape_sync_shape_changes_total",
		"Changes appended to shape logs: one per change and shape it matched.",
	METRIC_COUNTER, NULL, 0, NULL, 0, false},
	[SM_ROTATIONS] = {"shape_sync_shape_rotations_total",
		"Shapes rotated (their clients get 409 and start over), by cause.",
	METRIC_COUNTER, DIMS(rotation_dim), NULL, 0, false},
	[SM_EVICTIONS] = {"shape_sync_shape_evictions_total",
		"Shapes evicted, by cause.",
	METRIC_COUNTER, DIMS(eviction_dim), NULL, 0, false},
	[SM_COMPACTIONS] = {"shape_sync_log_compactions_total",
		"Shape logs compacted.",
	METRIC_COUNTER, NULL, 0, NULL, 0, false},
	[SM_LOG_FSYNCS] = {"shape_sync_log_fsyncs_total",
		"fsync calls that made shape logs durable: data files, the journal, the manifest and its directory.",
	METRIC_COUNTER, NULL, 0, NULL, 0, false},
	[SM_SNAPSHOTS_STARTED] = {"shape_sync_snapshots_started_total",
		"Snapshot queries started.",
	METRIC_COUNTER, NULL, 0, NULL, 0, false},
	[SM_SNAPSHOTS_FAILED] = {"shape_sync_snapshots_failed_total",
		"Snapshot queries that failed (not those cancelled because their shape went).",
	METRIC_COUNTER, NULL, 0, NULL, 0, false},
	[SM_SNAPSHOT_ROWS] = {"shape_sync_snapshot_rows_total",
		"Rows written to shape logs by snapshots.",
	METRIC_COUNTER, NULL, 0, NULL, 0, false},
	[SM_SNAPSHOT_SECONDS] = {"shape_sync_snapshot_duration_seconds",
		"Time a snapshot that finished took, query and log writes.",
	METRIC_HISTOGRAM, NULL, 0, BOUNDS(snapshot_bounds), false},
	[SM_SUBQUERY_VALUE_SETS] = {"shape_sync_subquery_value_sets",
		"Value sets of subqueries the decoder follows: one per distinct inner select and role.",
	METRIC_GAUGE, NULL, 0, NULL, 0, false},
	[SM_SUBQUERY_VALUES] = {"shape_sync_subquery_values",
		"Distinct values the subqueries' value sets hold.",
	METRIC_GAUGE, NULL, 0, NULL, 0, false},
	[SM_SUBQUERY_KEPT_ROWS] = {"shape_sync_subquery_kept_rows",
		"Rows the value sets of nested subqueries keep of their tables, for their inner values to decide.",
	METRIC_GAUGE, NULL, 0, NULL, 0, false},
	[SM_METRICS_RESETS] = {"shape_sync_metrics_resets_total",
		"Calls of shape_sync.reset_metrics() since the server started.",
	METRIC_SAMPLED_COUNTER, NULL, 0, NULL, 0, false},
	[SM_SHAPES] = {"shape_sync_shapes",
		"Shapes held, by state.",
	METRIC_SAMPLED, DIMS(state_dim), NULL, 0, false},
	[SM_LOG_BYTES] = {"shape_sync_shape_log_bytes",
		"Bytes of messages in the shapes' logs.",
	METRIC_SAMPLED, NULL, 0, NULL, 0, false},
	[SM_ARENA_BYTES] = {"shape_sync_log_memory_bytes",
		"Size of the shape log memory (shape_sync.log_memory).",
	METRIC_SAMPLED, NULL, 0, NULL, 0, false},
	[SM_ARENA_FREE_BYTES] = {"shape_sync_log_memory_free_bytes",
		"Shape log memory not held by any log.",
	METRIC_SAMPLED, NULL, 0, NULL, 0, false},
	[SM_ADMISSION_IN_USE] = {"shape_sync_admission_in_use",
		"Admission slots in use, by kind.",
	METRIC_SAMPLED, DIMS(admission_dim), NULL, 0, false},
	[SM_ADMISSION_LIMIT] = {"shape_sync_admission_limit",
		"Admission slots, by kind (shape_sync.max_concurrent_initial and _existing).",
	METRIC_SAMPLED, DIMS(admission_dim), NULL, 0, false},
	[SM_DECODER_LAG_BYTES] = {"shape_sync_decoder_lag_bytes",
		"WAL written that the decoder has not decoded yet.",
	METRIC_SAMPLED, NULL, 0, NULL, 0, false},
	[SM_SLOT_FLUSH_LAG_BYTES] = {"shape_sync_slot_confirmed_flush_lag_bytes",
		"WAL written past the replication slot's confirmed flush position "
		"(what the slot keeps from being recycled).",
	METRIC_SAMPLED, NULL, 0, NULL, 0, false},
};

/* Bytes of shared memory for the metrics with `nstripes` writers' stripes. */
size_t
server_metrics_size(uint32_t nstripes)
{
	MetricsLayout layout;
	size_t		size;

	if (metrics_layout_init(&layout, server_metric_defs, SM_COUNT) != 0)
		return 0;
	size = metrics_size(&layout, nstripes);
	metrics_layout_free(&layout);
	return size;
}

/*
 * Sets up this process's view of the metrics in `mem` (laid out first when
 * `create`).  Returns 0, or -1 when out of memory.
 */
int
server_metrics_attach(void *mem, bool create, uint32_t nstripes, ShapeTable *shapes,
					  _Atomic uint32_t *admission_in_use, _Atomic uint32_t *admission_limit,
					  DecoderStatus *decoder)
{
	if (server_metrics.layout.base == NULL &&
		metrics_layout_init(&server_metrics.layout, server_metric_defs, SM_COUNT) != 0)
		return -1;
	server_metrics.area = create ? metrics_init(mem, &server_metrics.layout, nstripes)
		: metrics_attach(mem);
	server_metrics.shapes = shapes;
	server_metrics.admission_in_use = admission_in_use;
	server_metrics.admission_limit = admission_limit;
	server_metrics.decoder = decoder;
	return 0;
}

/* The calling thread's first write: it takes a stripe for good. */
void
sm_claim_stripe(void)
{
	metrics_claim_stripe(server_metrics.area, &sm_stripe, (uint32_t) getpid());
}

/* A process that ends, its threads stopped: its stripes are free again. */
void
server_metrics_detach_process(void)
{
	if (server_metrics.area == NULL)
		return;
	metrics_release_owner(server_metrics.area, (uint32_t) getpid());
	sm_stripe.slot = NULL;
}

uint32_t
sm_request_series(SmRoute route, SmMethod method, unsigned status, SmKind kind)
{
	uint32_t	class = status >= 100 && status < 600 ? status / 100 - 1 : 4;

	return (((uint32_t) route * SM_METHODS + (uint32_t) method) * COUNT_OF(status_values) +
			class) * SM_KINDS + (uint32_t) kind;
}

SmMethod
sm_method_of(const char *method)
{
	static const char *const names[] = {"GET", "HEAD", "POST", "DELETE", "OPTIONS"};

	for (uint32_t i = 0; i < COUNT_OF(names); i++)
		if (strcmp(method, names[i]) == 0)
			return (SmMethod) i;
	return SM_METHOD_OTHER;
}

SmErrorKind
sm_error_kind_of(unsigned status)
{
	switch (status)
	{
		case 400:
		case 413:
		case 414:
			return SM_ERROR_BAD_REQUEST;
		case 401:
		case 403:
			return SM_ERROR_ACCESS;
		case 404:
		case 405:
			return SM_ERROR_NOT_FOUND;
		case 409:
			return SM_ERROR_MUST_REFETCH;
		case 503:
			return SM_ERROR_UNAVAILABLE;
		default:
			return SM_ERROR_INTERNAL;
	}
}

/* ------------------------------------------------------------- sampling */

static bool
sm_sample(void *ctx, uint32_t metric, uint32_t series, double *value)
{
	const ServerMetrics *sm = ctx;
	const ShapeTable *table = sm->shapes;
	const DecoderStatus *d = sm->decoder;

	switch ((ServerMetric) metric)
	{
		case SM_METRICS_RESETS:
			*value = (double) atomic_load_explicit(&sm->area->resets, memory_order_relaxed);
			return true;
		case SM_LIVE_WAITERS:
			{
				double		n = 0;

				if (table == NULL)
					return false;
				for (uint32_t i = 0; i < table->nslots; i++)
					n += atomic_load_explicit(&table->slots[i].waiters, memory_order_relaxed);
				*value = n;
				return true;
			}
		case SM_SHAPES:
		case SM_LOG_BYTES:
			{
				static const ShapeState states[] = {SHAPE_SNAPSHOTTING, SHAPE_READY,
				SHAPE_FAILED};
				double		n = 0;

				if (table == NULL)
					return false;
				for (uint32_t i = 0; i < table->nslots; i++)
				{
					ShapeState	state = shape_table_state(table, i);

					if (metric == SM_SHAPES)
						n += state == states[series];
					else if (state == SHAPE_SNAPSHOTTING || state == SHAPE_READY)
					{
						SlogPublished pub;

						slog_read_published(shape_table_log((ShapeTable *) table, i), &pub);
						n += (double) pub.data_end;
					}
				}
				*value = n;
				return true;
			}
		case SM_ARENA_BYTES:
			if (table == NULL)
				return false;
			*value = (double) table->arena->nblocks * SLOG_BLOCK_SIZE;
			return true;
		case SM_ARENA_FREE_BYTES:
			if (table == NULL)
				return false;
			*value = (double) slog_arena_free_blocks(table->arena) * SLOG_BLOCK_SIZE;
			return true;
		case SM_ADMISSION_IN_USE:
		case SM_ADMISSION_LIMIT:
			if (sm->admission_in_use == NULL)
				return false;
			*value = (double) atomic_load_explicit(metric == SM_ADMISSION_IN_USE ?
												   &sm->admission_in_use[series] :
												   &sm->admission_limit[series],
												   memory_order_relaxed);
			return true;
		case SM_DECODER_LAG_BYTES:
		case SM_SLOT_FLUSH_LAG_BYTES:
			{
				uint64_t	end;
				uint64_t	at;

				if (d == NULL)
					return false;
				end = atomic_load_explicit(&d->wal_end_lsn, memory_order_relaxed);
				at = atomic_load_explicit(metric == SM_DECODER_LAG_BYTES ? &d->decoded_lsn :
										  &d->confirmed_flush_lsn, memory_order_relaxed);
				if (end == 0)
					return false;	/* the worker has not started decoding */
				*value = end > at ? (double) (end - at) : 0;
				return true;
			}
		default:
			return false;
	}
}

/* ------------------------------------------------------------- readers */

/* The Prometheus text of every metric; see metrics_format_prometheus. */
size_t
server_metrics_format(char *buf, size_t cap)
{
	if (server_metrics.area == NULL)
	{
		if (cap > 0)
			buf[0] = '\0';
		return 0;
	}
	return metrics_format_prometheus(server_metrics.area, &server_metrics.layout, sm_sample,
									 &server_metrics, buf, cap);
}

/* Every series, as metrics_visit reports them (the SQL view's rows). */
void
server_metrics_visit(MetricsVisitor visitor, void *ctx)
{
	if (server_metrics.area != NULL)
		metrics_visit(server_metrics.area, &server_metrics.layout, sm_sample, &server_metrics,
					  visitor, ctx);
}

/* The name of a metric, for a visitor. */
const char *
server_metric_name(uint32_t metric)
{
	return metric < SM_COUNT ? server_metric_defs[metric].name : NULL;
}

void
server_metrics_reset(void)
{
	if (server_metrics.area != NULL)
		metrics_reset(server_metrics.area, &server_metrics.layout);
}

/* One series of a counter now (0 with metrics off). */
uint64_t
server_metric_counter(ServerMetric metric, uint32_t series)
{
	if (server_metrics.area == NULL)
		return 0;
	return metrics_read_counter(server_metrics.area, &server_metrics.layout, metric, series);
}
