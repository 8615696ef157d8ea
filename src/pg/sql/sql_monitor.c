/*-------------------------------------------------------------------------
 *
 * sql_monitor.c
 *		SQL views of the server's state: shapes, connections, decoder,
 *		metrics.
 *
 * What pg_stat_activity and pg_stat_statements are for backends and
 * queries, these are for shape_sync: shape_sync.shapes (every shape held,
 * its log and its readers), shape_sync.connections (every HTTP connection
 * and what it does), shape_sync.metrics (every series of GET /metrics, as
 * rows), shape_sync.decoder (how far decoding is), admission, log memory
 * and stalled serves reaped, and reset_metrics().  They run in any
 * backend and read shared memory without locks, as the HTTP threads do:
 * each value is consistent on its own, and a row may mix values of a
 * moment apart.
 *
 * IDENTIFICATION
 *	  src/pg/sql/sql_monitor.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <stdatomic.h>

#include "fmgr.h"
#include "funcapi.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/pg_lsn.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"

#include "conn_activity.h"
#include "log_offset.h"
#include "refusal.h"
#include "server_metrics.h"
#include "shared_state.h"

PG_FUNCTION_INFO_V1(shape_sync_list_shapes);
PG_FUNCTION_INFO_V1(shape_sync_log_memory_usage);
PG_FUNCTION_INFO_V1(shape_sync_admission_slots);
PG_FUNCTION_INFO_V1(shape_sync_stalled_serves_reaped);
PG_FUNCTION_INFO_V1(shape_sync_list_connections);
PG_FUNCTION_INFO_V1(shape_sync_metric_values);
PG_FUNCTION_INFO_V1(shape_sync_reset_metrics);
PG_FUNCTION_INFO_V1(shape_sync_decoder_status);

static const char *
sql_state_name(ShapeState state)
{
	switch (state)
	{
		case SHAPE_FREE:
			return "free";
		case SHAPE_SNAPSHOTTING:
			return "snapshotting";
		case SHAPE_READY:
			return "ready";
		case SHAPE_FAILED:
			return "failed";
		case SHAPE_RETIRED:
			return "retired";
	}
	return "unknown";
}

static void
sql_require_shared(void)
{
	if (shape_sync_shared == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("shape_sync's shared memory is not available"),
				 errhint("Add shape_sync to \"shared_preload_libraries\" and restart the server.")));
}

/*
 * The result columns that the catalog declares for the SQL function being
 * called are the ones this library writes.  They are not after the library
 * was upgraded and before ALTER EXTENSION shape_sync UPDATE ran: writing a
 * row of the new width into the old one would read past it, and a crash
 * restarts every session.
 */
static void
sql_require_columns(TupleDesc desc, int natts, const char *function)
{
	if (desc == NULL || desc->natts != natts)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("shape_sync.%s() returns %d columns in this database, but the loaded library writes %d",
						function, desc == NULL ? 0 : desc->natts, natts),
				 errdetail("The extension's SQL objects in this database are of another version than the installed library."),
				 errhint("Run ALTER EXTENSION shape_sync UPDATE.")));
}

static Datum
sql_unix_us_timestamptz(int64 us)
{
	return TimestampTzGetDatum(time_t_to_timestamptz(us / 1000000) + us % 1000000);
}

Datum
shape_sync_list_shapes(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	ShapeTable *table;

	sql_require_shared();
	table = shape_sync_shared->table;
	InitMaterializedSRF(fcinfo, 0);
	sql_require_columns(rsinfo->setDesc, 19, "list_shapes");
	for (uint32 i = 0; i < table->nslots; i++)
	{
		ShapeSlot  *s = &table->slots[i];
		ShapeState	state = shape_table_state(table, i);
		SlogPublished pub;
		Datum		values[19];
		bool		nulls[19] = {0};
		AttrNumber	routed_by;
		char	   *attname;
		char		offset[LOG_OFFSET_TEXT_LEN];
		uint64		pins;

		if (state == SHAPE_FREE || state == SHAPE_RETIRED)
			continue;
		slog_read_published(shape_table_log(table, i), &pub);
		pins = atomic_load(&s->pins) & ~SHAPE_PIN_RETIRED;
		values[0] = CStringGetTextDatum(s->handle);
		values[1] = CStringGetTextDatum(s->relation);
		if (s->where_preview[0])
			values[2] = CStringGetTextDatum(s->where_preview);
		else
			nulls[2] = true;
		values[3] = CStringGetTextDatum(s->columns);
		values[4] = CStringGetTextDatum((s->flags & SHAPE_FLAG_REPLICA_FULL) ? "full" : "default");
		values[5] = CStringGetTextDatum(sql_state_name(state));
		values[6] = Int64GetDatum((int64) atomic_load(&s->snapshot_rows));
		values[7] = Int64GetDatum((int64) atomic_load(&s->snapshot_ms));
		values[8] = Int64GetDatum((int64) pub.data_end);
		log_offset_format(pub.last, offset, sizeof(offset));
		values[9] = CStringGetTextDatum(offset);
		values[10] = Int32GetDatum((int32) pub.chunk_count);
		values[11] = Int64GetDatum((int64) atomic_load_explicit(&s->changes, memory_order_relaxed));
		routed_by = (AttrNumber) atomic_load_explicit(&s->route_attnum, memory_order_relaxed);
		attname = routed_by > 0 ? get_attname(s->relid, routed_by, true) : NULL;
		if (attname != NULL)
			values[12] = CStringGetTextDatum(attname);
		else
			nulls[12] = true;
		values[13] = Int64GetDatum((int64) atomic_load(&s->compactions));
		values[14] = Int32GetDatum((int32) pins);
		values[15] = Int32GetDatum((int32) atomic_load_explicit(&s->waiters, memory_order_relaxed));
		values[16] = sql_unix_us_timestamptz(s->created_at_us);
		values[17] = sql_unix_us_timestamptz(atomic_load_explicit(&s->last_read_us,
																  memory_order_relaxed));
		if (state == SHAPE_FAILED)
		{
			char		sentence[REFUSAL_SENTENCE_MAX];

			refusal_failure_sentence((RefusalReason) s->error_reason, s->error_number, s->error,
									 sentence, sizeof(sentence));
			values[18] = CStringGetTextDatum(sentence);
		}
		else
			nulls[18] = true;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

Datum
shape_sync_log_memory_usage(PG_FUNCTION_ARGS)
{
	TupleDesc	desc;
	Datum		values[3];
	bool		nulls[3] = {0};
	ShapeLogArena *arena;

	sql_require_shared();
	arena = shape_sync_shared->table->arena;
	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	sql_require_columns(desc, 3, "log_memory_usage");
	values[0] = Int64GetDatum((int64) arena->nblocks * SLOG_BLOCK_SIZE);
	values[1] = Int64GetDatum((int64) slog_arena_free_blocks(arena) * SLOG_BLOCK_SIZE);
	values[2] = Int32GetDatum(SLOG_BLOCK_SIZE);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc), values, nulls)));
}

Datum
shape_sync_decoder_status(PG_FUNCTION_ARGS)
{
	TupleDesc	desc;
	Datum		values[6];
	bool		nulls[6] = {0};
	DecoderStatus *d;
	uint64		wal_end;
	uint64		decoded;
	int64		commit_us;

	sql_require_shared();
	d = &shape_sync_shared->decoder;
	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	sql_require_columns(desc, 6, "decoder_status");
	wal_end = atomic_load_explicit(&d->wal_end_lsn, memory_order_relaxed);
	decoded = atomic_load_explicit(&d->decoded_lsn, memory_order_relaxed);
	commit_us = atomic_load_explicit(&d->last_commit_us, memory_order_relaxed);
	values[0] = LSNGetDatum((XLogRecPtr) wal_end);
	values[1] = LSNGetDatum((XLogRecPtr) decoded);
	values[2] = LSNGetDatum((XLogRecPtr) atomic_load_explicit(&d->confirmed_flush_lsn,
															   memory_order_relaxed));
	values[3] = Int64GetDatum(wal_end > decoded ? (int64) (wal_end - decoded) : 0);
	if (commit_us != 0)
	{
		Interval   *lag = palloc0(sizeof(Interval));

		lag->time = atomic_load_explicit(&d->last_commit_lag_us, memory_order_relaxed);
		values[4] = TimestampTzGetDatum((TimestampTz) commit_us);
		values[5] = IntervalPGetDatum(lag);
	}
	else
		nulls[4] = nulls[5] = true;
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc), values, nulls)));
}

Datum
shape_sync_admission_slots(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Admission  *a;

	sql_require_shared();
	a = &shape_sync_shared->admission;
	InitMaterializedSRF(fcinfo, 0);
	sql_require_columns(rsinfo->setDesc, 4, "admission_slots");
	for (int k = 0; k < ADMISSION_KINDS; k++)
	{
		Datum		values[4];
		bool		nulls[4] = {0};

		values[0] = CStringGetTextDatum(admission_kind_name((AdmissionKind) k));
		values[1] = Int32GetDatum((int32) atomic_load(&a->in_use[k]));
		values[2] = Int32GetDatum((int32) atomic_load(&a->limit[k]));
		values[3] = Int64GetDatum((int64) server_metric_counter(SM_ADMISSION_REJECTED,
																(uint32) k));
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

Datum
shape_sync_stalled_serves_reaped(PG_FUNCTION_ARGS)
{
	sql_require_shared();
	PG_RETURN_INT64((int64) server_metric_counter(SM_REAPED, SM_REAP_STALLED_WRITE));
}

Datum
shape_sync_list_connections(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	struct timespec ts;
	int64		now_ms;

	sql_require_shared();
	InitMaterializedSRF(fcinfo, 0);
	sql_require_columns(rsinfo->setDesc, 7, "list_connections");
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	now_ms = (int64) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
	for (uint32 i = 0; i < shape_sync_shared->nconnections; i++)
	{
		ConnActivityView v;
		Datum		values[7];
		bool		nulls[7] = {0};

		if (!conn_activity_read(&shape_sync_shared->connections[i], &v, now_ms))
			continue;
		values[0] = CStringGetTextDatum(v.peer);
		if (v.handle[0])
			values[1] = CStringGetTextDatum(v.handle);
		else
			nulls[1] = true;
		values[2] = CStringGetTextDatum(conn_activity_state_name(v.state));
		values[3] = Int64GetDatum((int64) v.bytes_sent);
		values[4] = sql_unix_us_timestamptz(v.opened_us);
		values[5] = sql_unix_us_timestamptz(v.state_since_us);
		if (v.write_age_ms >= 0)
		{
			Interval   *age = palloc0(sizeof(Interval));

			age->time = v.write_age_ms * 1000;
			values[6] = IntervalPGetDatum(age);
		}
		else
			nulls[6] = true;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

typedef struct MetricRows
{
	ReturnSetInfo *rsinfo;
	StringInfoData labels;
} MetricRows;

/*
 * One series as a row: its name (with _bucket, _sum or _count), its labels
 * as a JSON object, its value.  Label values are the server's own words
 * (no quotes or backslashes), so the text format's list becomes JSON by
 * replacing its separators.
 */
static void
sql_metric_row(void *ctx, const MetricSample *sample)
{
	MetricRows *rows = ctx;
	Datum		values[3];
	bool		nulls[3] = {0};
	char		name[128];

	resetStringInfo(&rows->labels);
	appendStringInfoChar(&rows->labels, '{');
	for (const char *p = sample->labels; *p; p++)
	{
		if (p == sample->labels)
			appendStringInfoChar(&rows->labels, '"');
		if (p[0] == '=' && p[1] == '"')
		{
			appendStringInfoString(&rows->labels, "\":\"");
			p++;
		}
		else if (p[0] == '"' && p[1] == ',')
		{
			appendStringInfoString(&rows->labels, "\",\"");
			p++;
		}
		else
			appendStringInfoChar(&rows->labels, *p);
	}
	appendStringInfoChar(&rows->labels, '}');
	snprintf(name, sizeof(name), "%s%s", server_metric_name(sample->metric), sample->suffix);
	values[0] = CStringGetTextDatum(name);
	values[1] = DirectFunctionCall1(jsonb_in, CStringGetDatum(rows->labels.data));
	values[2] = Float8GetDatum(strtod(sample->value, NULL));
	tuplestore_putvalues(rows->rsinfo->setResult, rows->rsinfo->setDesc, values, nulls);
}

Datum
shape_sync_metric_values(PG_FUNCTION_ARGS)
{
	MetricRows	rows;

	sql_require_shared();
	InitMaterializedSRF(fcinfo, 0);
	rows.rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	sql_require_columns(rows.rsinfo->setDesc, 3, "metric_values");
	initStringInfo(&rows.labels);
	server_metrics_visit(sql_metric_row, &rows);
	return (Datum) 0;
}

Datum
shape_sync_reset_metrics(PG_FUNCTION_ARGS)
{
	sql_require_shared();
	server_metrics_reset();
	PG_RETURN_VOID();
}
