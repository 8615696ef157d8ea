/*-------------------------------------------------------------------------
 *
 * snapshot.c
 *		Initial snapshots of shapes, taken by dynamic background workers.
 *
 * Each new shape gets one snapshot worker, so that a large table never
 * stalls the main worker.  The worker opens a REPEATABLE READ, READ ONLY
 * transaction, records pg_current_snapshot() (the xmin, xmax and xip list
 * that will stitch the snapshot to the replication stream) and runs the
 * shape's query through a cursor, built from the shape's analysed
 * definition, never from client text.  Each row is encoded once
 * (row_encoder.c) and appended to the shape's log; a chunk closes when the
 * running size (message bytes plus one per row) reaches
 * shape_sync.chunk_bytes_threshold, and each closed chunk is published at
 * once, so clients read the first chunks of a large table while the rest
 * is still being read.  The last chunk ends with the snapshot-end control
 * message.
 *
 * The worker holds a pin on the shape while it writes, so a shape dropped
 * meanwhile keeps its memory until the worker is done.  If the log memory
 * runs out, or anything else fails, the shape is marked FAILED with a
 * message the HTTP side returns to its clients, and the main worker is
 * woken to let them know.
 *
 * IDENTIFICATION
 *	  src/pg/snapshot.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/table.h"
#include "access/xact.h"
#include "catalog/pg_class.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "storage/ipc.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/json.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "guc.h"
#include "row_encoder.h"
#include "shared_state.h"
#include "snapshot.h"

/* What bgw_extra carries. */
typedef struct SnapshotTask
{
	uint32		slot;
	uint32		generation;
	Oid			dboid;
	dsm_handle	handle;
} SnapshotTask;

/* The definition, flattened into the DSM segment. */
typedef struct SnapshotDefinition
{
	Oid			relid;
	uint32		flags;
	int32		chunk_threshold;
	int32		ncolumns;
	int32		where_len;		/* -1: no where clause */
	/* AttrNumber columns[ncolumns], then the where text */
} SnapshotDefinition;

/* The writer's state while appending to the shape log. */
typedef struct SnapshotWriter
{
	ShapeTable *table;
	ShapeSlot  *slot;
	uint32		slot_index;
	uint32		chunk;			/* the open chunk's number */
	int64		chunk_bytes;	/* message bytes + 1 per row in the open chunk */
	int32		threshold;
	uint64		rows;
} SnapshotWriter;

static uint32 snap_slot = SHAPE_NO_SLOT;	/* pinned by this worker */

/* ----------------------------------------------------------------- scan */

void
snapshot_scan(const ShapeSpec *spec, SnapshotEmit emit, void *arg)
{
	ShapeRelation *rel = shape_relation_load(spec->relid, spec->ncolumns, spec->columns);
	RowEncoder	enc;
	StringInfoData sql;
	StringInfoData message;
	AttrNumber *fetched;		/* attnum of each select-list entry */
	int			nfetched = 0;
	Datum	   *values;
	bool	   *nulls;
	SPIPlanPtr	plan;
	Portal		portal;

	row_encoder_init(&enc, rel);

	/* select the shape's columns and the key columns, each once */
	fetched = palloc(sizeof(AttrNumber) * (rel->ncolumns + rel->nkeys));
	initStringInfo(&sql);
	appendStringInfoString(&sql, "SELECT ");
	for (int i = 0; i < rel->ncolumns + rel->nkeys; i++)
	{
		AttrNumber	attnum = i < rel->ncolumns ? rel->columns[i].attnum :
			rel->keys[i - rel->ncolumns];
		bool		dup = false;

		for (int j = 0; j < nfetched; j++)
			dup = dup || fetched[j] == attnum;
		if (dup)
			continue;
		appendStringInfo(&sql, "%s%s", nfetched > 0 ? ", " : "",
						 quote_identifier(get_attname(rel->relid, attnum, false)));
		fetched[nfetched++] = attnum;
	}
	if (nfetched == 0)
		appendStringInfoString(&sql, "NULL");
	appendStringInfo(&sql, " FROM ONLY %s",
					 quote_qualified_identifier(rel->schema, rel->table));
	if (spec->where_sql != NULL)
		appendStringInfo(&sql, " WHERE %s", spec->where_sql);

	values = palloc0(sizeof(Datum) * Max(rel->natts, 1));
	nulls = palloc(sizeof(bool) * Max(rel->natts, 1));
	memset(nulls, true, sizeof(bool) * Max(rel->natts, 1));
	initStringInfo(&message);

	plan = SPI_prepare(sql.data, 0, NULL);
	if (plan == NULL)
		elog(ERROR, "could not prepare snapshot query \"%s\": %s",
			 sql.data, SPI_result_code_string(SPI_result));
	portal = SPI_cursor_open(NULL, plan, NULL, NULL, true);
	for (;;)
	{
		SPI_cursor_fetch(portal, true, 1000);
		if (SPI_processed == 0)
			break;
		for (uint64 r = 0; r < SPI_processed; r++)
		{
			HeapTuple	tuple = SPI_tuptable->vals[r];

			for (int c = 0; c < nfetched; c++)
			{
				int			idx = fetched[c] - 1;

				values[idx] = SPI_getbinval(tuple, SPI_tuptable->tupdesc, c + 1, &nulls[idx]);
			}
			resetStringInfo(&message);
			row_encoder_snapshot_row(&enc, values, nulls, &message);
			emit(arg, message.data, message.len);
		}
		SPI_freetuptable(SPI_tuptable);
		CHECK_FOR_INTERRUPTS();
	}
	SPI_cursor_close(portal);
	SPI_freeplan(plan);
}

/* ---------------------------------------------------------------- launch */

BackgroundWorkerHandle *
snapshot_launch(uint32 slot, uint32 generation, const ShapeSpec *spec,
				int chunk_threshold, dsm_segment **segment)
{
	BackgroundWorker worker;
	BackgroundWorkerHandle *handle;
	SnapshotTask task;
	SnapshotDefinition *def;
	int			where_len = spec->where_sql ? (int) strlen(spec->where_sql) : -1;
	Size		size;
	dsm_segment *seg;
	char	   *p;

	size = sizeof(SnapshotDefinition) + sizeof(AttrNumber) * spec->ncolumns +
		Max(where_len, 0) + 1;
	seg = dsm_create(size, 0);
	dsm_pin_mapping(seg);
	def = dsm_segment_address(seg);
	def->relid = spec->relid;
	def->flags = spec->flags;
	def->chunk_threshold = chunk_threshold;
	def->ncolumns = spec->ncolumns;
	def->where_len = where_len;
	p = (char *) (def + 1);
	memcpy(p, spec->columns, sizeof(AttrNumber) * spec->ncolumns);
	p += sizeof(AttrNumber) * spec->ncolumns;
	if (where_len >= 0)
		memcpy(p, spec->where_sql, where_len + 1);

	task.slot = slot;
	task.generation = generation;
	task.dboid = MyDatabaseId;
	task.handle = dsm_segment_handle(seg);

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	strlcpy(worker.bgw_library_name, "shape_sync", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "shape_sync_snapshot_main", BGW_MAXLEN);
	snprintf(worker.bgw_name, BGW_MAXLEN, "shape_sync snapshot %u", slot);
	strlcpy(worker.bgw_type, "shape_sync snapshot", BGW_MAXLEN);
	worker.bgw_notify_pid = MyProcPid;
	StaticAssertStmt(sizeof(SnapshotTask) <= BGW_EXTRALEN, "snapshot task too large");
	memcpy(worker.bgw_extra, &task, sizeof(task));

	if (!RegisterDynamicBackgroundWorker(&worker, &handle))
	{
		dsm_detach(seg);
		return NULL;
	}
	*segment = seg;
	return handle;
}

/* ---------------------------------------------------------------- worker */

static void
snap_fail(SnapshotWriter *w, uint32 status, const char *message)
{
	ShapeSlot  *slot = w->slot;

	if (shape_table_state(w->table, w->slot_index) != SHAPE_SNAPSHOTTING)
		return;
	slot->error_status = status;
	strlcpy(slot->error, message, sizeof(slot->error));
	shape_table_set_state(w->table, w->slot_index, SHAPE_FAILED);
	shape_table_mark_dirty(w->table, w->slot_index);
	shape_sync_wake_worker();
}

/* Publishes what was appended and tells the main worker. */
static void
snap_publish(SnapshotWriter *w, LogOffset last, uint32 flags)
{
	slog_publish(&w->slot->log, last, flags);
	shape_table_mark_dirty(w->table, w->slot_index);
	shape_sync_wake_worker();
}

static void
snap_check(SnapshotWriter *w, SlogResult res)
{
	ShapeLogArena *arena = w->table->arena;

	if (res == SLOG_OK)
		return;
	if (res == SLOG_FULL && w->slot->log.blocks_held + 8 < arena->nblocks)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("shape log memory is full"),
				 errdetail("Other shapes hold the rest of the %d MB set by \"%s\".",
						   shape_sync_log_memory, "shape_sync.log_memory"),
				 errhint("Increase \"%s\", or drop shapes that are no longer used.",
						 "shape_sync.log_memory")));
	ereport(ERROR,
			(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
			 errmsg("shape is too large for the shape log memory"),
			 errdetail("The snapshot of relation \"%s\" needs more than the %d MB set by \"%s\".",
					   w->slot->relation, shape_sync_log_memory, "shape_sync.log_memory"),
			 errhint("Increase \"%s\", or narrow the shape with a where clause or a column list.",
					 "shape_sync.log_memory")));
}

static void
snap_emit(void *arg, const char *message, int len)
{
	SnapshotWriter *w = arg;
	LogOffset	offset = {0, w->chunk};

	snap_check(w, slog_append(w->table->arena, &w->slot->log, offset,
							  SLOG_RECORD_CHANGE, message, (uint32) len));
	w->rows++;
	w->chunk_bytes += len + 1;
	if (w->chunk_bytes >= w->threshold)
	{
		snap_check(w, slog_close_chunk(w->table->arena, &w->slot->log, offset));
		atomic_store_explicit(&w->slot->snapshot_rows, w->rows, memory_order_relaxed);
		snap_publish(w, offset, 0);
		w->chunk++;
		w->chunk_bytes = 0;
	}
}

/* Turns pg_current_snapshot()'s text, "xmin:xmax:xip,...", into JSON. */
static void
snap_end_message(StringInfo buf, const char *snapshot)
{
	char	   *copy = pstrdup(snapshot);
	char	   *xmax = strchr(copy, ':');
	char	   *xip;

	if (xmax == NULL || (xip = strchr(xmax + 1, ':')) == NULL)
		elog(ERROR, "unexpected snapshot text \"%s\"", snapshot);
	*xmax++ = '\0';
	*xip++ = '\0';
	appendStringInfoString(buf, "{\"headers\":{\"control\":\"snapshot-end\",\"xmin\":");
	escape_json(buf, copy);
	appendStringInfoString(buf, ",\"xmax\":");
	escape_json(buf, xmax);
	appendStringInfoString(buf, ",\"xip_list\":[");
	for (char *tok = strtok(xip, ","), *first = tok; tok; tok = strtok(NULL, ","))
	{
		if (tok != first)
			appendStringInfoChar(buf, ',');
		escape_json(buf, tok);
	}
	appendStringInfoString(buf, "]}}");
}

/*
 * Shapes need the old row of every update and delete, to tell rows moving
 * out of a where clause and to send old values: set REPLICA IDENTITY FULL
 * on the table, as Electric does, in a transaction of its own that commits
 * before the snapshot is taken, so that every change the snapshot does not
 * see is logged in full.
 */
static void
snap_ensure_replica_identity_full(Oid relid)
{
	Relation	rel;
	char		ident;
	char	   *name;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	rel = table_open(relid, AccessShareLock);
	ident = rel->rd_rel->relreplident;
	name = quote_qualified_identifier(get_namespace_name(RelationGetNamespace(rel)),
									  RelationGetRelationName(rel));
	table_close(rel, AccessShareLock);
	if (ident != REPLICA_IDENTITY_FULL)
	{
		pgstat_report_activity(STATE_RUNNING, "setting REPLICA IDENTITY FULL for a shape");
		if (SPI_connect() != SPI_OK_CONNECT)
			elog(ERROR, "SPI_connect failed");
		PushActiveSnapshot(GetTransactionSnapshot());
		if (SPI_execute(psprintf("ALTER TABLE ONLY %s REPLICA IDENTITY FULL", name),
						false, 0) != SPI_OK_UTILITY)
			elog(ERROR, "could not set REPLICA IDENTITY FULL on %s", name);
		ereport(LOG,
				(errmsg("shape_sync set REPLICA IDENTITY FULL on table %s", name),
				 errdetail("Shapes need the old values of updated and deleted rows.")));
		SPI_finish();
		PopActiveSnapshot();
	}
	CommitTransactionCommand();
}

/* Runs at exit, whatever the path: fail an unfinished shape, drop the pin. */
static void
snap_on_exit(int code, Datum arg)
{
	ShapeTable *table = shape_sync_shared->table;
	SnapshotWriter *w = (SnapshotWriter *) DatumGetPointer(arg);

	if (snap_slot == SHAPE_NO_SLOT)
		return;
	snap_fail(w, 500, "The snapshot worker stopped before the snapshot was complete, please retry");
	shape_table_unpin(table, snap_slot);
	snap_slot = SHAPE_NO_SLOT;
	shape_sync_wake_worker();
}

void
shape_sync_snapshot_main(Datum arg)
{
	SnapshotTask task;
	static SnapshotWriter writer;
	ShapeTable *table;
	dsm_segment *seg;
	SnapshotDefinition *def;
	ShapeSpec	spec;
	char	   *snapshot_text;
	char	   *lsn_text;
	StringInfoData end;
	TimestampTz started = GetCurrentTimestamp();
	LogOffset	offset;

	memcpy(&task, MyBgworkerEntry->bgw_extra, sizeof(task));
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnectionByOid(task.dboid, InvalidOid, 0);

	table = shape_sync_shared->table;
	if (!shape_table_pin(table, task.slot, task.generation))
		proc_exit(0);			/* the shape was dropped before we started */
	snap_slot = task.slot;
	writer.table = table;
	writer.slot = &table->slots[task.slot];
	writer.slot_index = task.slot;
	before_shmem_exit(snap_on_exit, PointerGetDatum(&writer));

	seg = dsm_attach(task.handle);
	if (seg == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("could not map the definition of shape %s", writer.slot->handle)));
	def = dsm_segment_address(seg);
	spec.relid = def->relid;
	spec.flags = def->flags;
	spec.ncolumns = def->ncolumns;
	spec.columns = palloc(sizeof(AttrNumber) * Max(def->ncolumns, 1));
	memcpy(spec.columns, def + 1, sizeof(AttrNumber) * def->ncolumns);
	spec.where_sql = def->where_len < 0 ? NULL :
		pstrdup((char *) (def + 1) + sizeof(AttrNumber) * def->ncolumns);
	writer.threshold = def->chunk_threshold;
	dsm_detach(seg);

	snap_ensure_replica_identity_full(spec.relid);

	pgstat_report_activity(STATE_RUNNING, "taking a shape snapshot");
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	XactIsoLevel = XACT_REPEATABLE_READ;
	XactReadOnly = true;
	row_encoder_set_display_settings(PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SET);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	PushActiveSnapshot(GetTransactionSnapshot());

	PG_TRY();
	{
		if (SPI_execute("SELECT pg_catalog.pg_current_snapshot()::text, "
						"(pg_catalog.pg_current_wal_lsn() - '0/0'::pg_catalog.pg_lsn)::text",
						true, 1) != SPI_OK_SELECT || SPI_processed != 1)
			elog(ERROR, "could not read the snapshot's visibility");
		snapshot_text = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
		lsn_text = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2);

		snapshot_scan(&spec, snap_emit, &writer);

		initStringInfo(&end);
		snap_end_message(&end, snapshot_text);
		offset.tx = 0;
		offset.op = writer.chunk;
		snap_check(&writer, slog_append(table->arena, &writer.slot->log, offset,
										SLOG_RECORD_CONTROL, end.data, (uint32) end.len));
		snap_check(&writer, slog_close_chunk(table->arena, &writer.slot->log, offset));
		atomic_store_explicit(&writer.slot->snapshot_rows, writer.rows, memory_order_relaxed);
		writer.slot->snapshot_ms = (GetCurrentTimestamp() - started) / 1000;
		shape_table_note_lsn(table, strtou64(lsn_text, NULL, 10));
		/*
		 * Publish, then hand over: the main thread takes the pen when it
		 * sees READY, and must find the whole snapshot published by then.
		 */
		slog_publish(&writer.slot->log, LOG_OFFSET_SNAPSHOT_END, SLOG_SNAPSHOT_DONE);
		shape_table_set_state(table, task.slot, SHAPE_READY);
		shape_table_mark_dirty(table, task.slot);
		shape_sync_wake_worker();
	}
	PG_CATCH();
	{
		ErrorData  *edata;
		MemoryContext ecxt = MemoryContextSwitchTo(TopMemoryContext);
		char		message[SHAPE_ERROR_LEN];

		edata = CopyErrorData();
		MemoryContextSwitchTo(ecxt);
		if (edata->sqlerrcode == ERRCODE_PROGRAM_LIMIT_EXCEEDED ||
			edata->sqlerrcode == ERRCODE_OUT_OF_MEMORY)
			snprintf(message, sizeof(message), "%s: %s %s", edata->message,
					 edata->detail ? edata->detail : "", edata->hint ? edata->hint : "");
		else
			snprintf(message, sizeof(message), "The shape's snapshot failed: %s",
					 edata->message);
		snap_fail(&writer,
				  edata->sqlerrcode == ERRCODE_PROGRAM_LIMIT_EXCEEDED ? 400 :
				  edata->sqlerrcode == ERRCODE_OUT_OF_MEMORY ? 503 : 500,
				  message);
		PG_RE_THROW();
	}
	PG_END_TRY();

	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_activity(STATE_IDLE, NULL);
	ereport(DEBUG1,
			(errmsg_internal("shape %s: snapshot of %llu rows in %lld ms",
							 writer.slot->handle, (unsigned long long) writer.rows,
							 (long long) writer.slot->snapshot_ms)));
	proc_exit(0);
}
