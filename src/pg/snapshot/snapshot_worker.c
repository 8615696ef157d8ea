/*-------------------------------------------------------------------------
 *
 * snapshot_worker.c
 *		A worker of the snapshot pool: takes shapes' snapshots and subset
 *		queries, one job after the other.
 *
 * Snapshots run in background workers, so that a large table never stalls
 * the main worker, and in a pool of long-lived ones, so that a small shape
 * does not pay for starting a backend (milliseconds, more than its
 * snapshot): the main thread queues jobs (snapshot_jobs.c) and staffs
 * them (snapshot_pool.c); a worker takes jobs one after the other and
 * exits after SNAPSHOT_WORKER_IDLE_MS without one.  A failed job is
 * recovered from as a backend recovers from an error
 * (snapshot_worker_recover), and the worker goes on.  A subset query's job
 * is subset_query.c's.
 *
 * A shape's job: the worker maps the job's segment (snapshot_definition.c),
 * sets REPLICA IDENTITY FULL on the table when it may and must, takes the
 * snapshot (snapshot_query.c) and appends each row to the shape's log; a
 * chunk closes when the running size (message bytes plus one per row)
 * reaches shape_sync.chunk_bytes_threshold, and each closed chunk is
 * published at once, so clients read the first chunks of a large table
 * while the rest is still being read.  The last chunk ends with the
 * snapshot-end control message.  With durable logs, each closed chunk is
 * also written to the shape's data file, and leaves memory when it runs
 * low (snapshot_spill.c), so a snapshot may be larger than the log memory.
 * The worker then stores the snapshot's
 * visibility in the job's segment and moves the shape from SNAPSHOTTING
 * to READY; the main thread takes the log over from there (shape_stream_log.c).
 *
 * The worker holds a pin on the shape while it writes, so a shape dropped
 * meanwhile keeps its memory until the worker is done; the main thread
 * cancels the query of a dropped shape (SIGINT to the worker that takes
 * its job).  If the log memory runs out, or anything else fails, the
 * shape is marked FAILED with a reason and a sentence for its clients
 * (refusal.h; the HTTP side renders them), and the main worker is woken
 * to let them know.
 *
 * IDENTIFICATION
 *	  src/pg/snapshot/snapshot_worker.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <stdatomic.h>

#include "access/table.h"
#include "executor/spi.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/lock.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"

#include "eval_deadline.h"
#include "guc.h"
#include "log_record.h"
#include "server_metrics.h"
#include "shape_def.h"
#include "shape_relation.h"
#include "shared_state.h"
#include "snapshot_definition.h"
#include "snapshot_query.h"
#include "snapshot_spill.h"
#include "snapshot_worker.h"
#include "subset_query.h"

/* A worker that found no job for this long exits. */
#define SNAPSHOT_WORKER_IDLE_MS		30000

/* How long the owner's ALTER TABLE may wait for its lock. */
#define REPLICA_IDENTITY_LOCK_TIMEOUT_MS	100
#define SNAPSHOT_REPLICA_IDENTITY_TRIES	3	/* when something keeps setting it back */
#define SNAPSHOT_ROOM_WAIT_MS	3000	/* for the main thread to free log memory */

/* The writer's state while appending to the shape log. */
typedef struct SnapshotWriter
{
	ShapeTable *table;
	ShapeSlot  *slot;
	uint32		slot_index;
	ShapeLog   *log;			/* the version it writes (no compaction yet) */
	uint32		chunk;			/* the open chunk's number */
	int64		chunk_bytes;	/* message bytes + 1 per row in the open chunk */
	int32		threshold;
	uint64		rows;
} SnapshotWriter;

static uint32 snap_slot = SHAPE_NO_SLOT;	/* pinned by this worker */
static SnapshotWriter snap_writer;	/* the job's */
static int	snap_entry = -1;	/* this worker's SnapshotWorkerEntry */
static volatile sig_atomic_t snap_in_job = false;

/*
 * The shape failed: its reason and facts (refusal.h) go to its slot, for
 * its clients' answer (refusal_render.c) and the main thread's log line.
 */
static void
snap_fail(SnapshotWriter *w, RefusalReason reason, int64 number, const char *text)
{
	ShapeSlot  *slot = w->slot;

	if (shape_table_state(w->table, w->slot_index) != SHAPE_SNAPSHOTTING)
		return;
	slot->error_reason = reason;
	slot->error_number = number;
	strlcpy(slot->error, text ? text : "", sizeof(slot->error));
	if (!shape_table_transition(w->table, w->slot_index, SHAPE_SNAPSHOTTING, SHAPE_FAILED))
		return;					/* retired meanwhile */
	shape_table_mark_dirty(w->table, w->slot_index);
	shape_sync_wake_worker();
}

/* Publishes what was appended and tells the main worker. */
static void
snap_publish(SnapshotWriter *w, LogOffset last, uint32 flags)
{
	slog_publish(w->log, last, flags);
	shape_table_mark_dirty(w->table, w->slot_index);
	shape_sync_wake_worker();
}

/*
 * After an append that found the arena full: asks the main thread for room
 * (it evicts the least recently read shapes, see shape_eviction.c) and waits a
 * little; the caller then tries again.  Past SNAPSHOT_ROOM_WAIT_MS, or for
 * anything but a full arena, raises the error.
 */
static void
snap_wait_for_room(SnapshotWriter *w, SlogResult res, TimestampTz *since)
{
	ShapeLogArena *arena = w->table->arena;

	/* first what this snapshot wrote to its file */
	if (res == SLOG_FULL && snapshot_spill_make_room())
		return;
	if (res == SLOG_FULL && shape_table_log_blocks(w->table, w->slot_index) + 8 < arena->nblocks &&
		shape_sync_shape_eviction == SHAPE_EVICTION_LRU)
	{
		TimestampTz now = GetCurrentTimestamp();

		if (*since == 0)
			*since = now;
		if (!TimestampDifferenceExceeds(*since, now, SNAPSHOT_ROOM_WAIT_MS))
		{
			uint32		want = 16;
			uint32		cur = atomic_load(&w->table->blocks_wanted);

			while (cur < want && !atomic_compare_exchange_weak(&w->table->blocks_wanted, &cur, want))
				;
			shape_sync_wake_worker();
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 10,
							 PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
			return;
		}
	}
	if (res == SLOG_FULL && shape_table_log_blocks(w->table, w->slot_index) + 8 < arena->nblocks)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("shape log memory is full"),
				 errdetail("Other shapes hold the rest of the %d MB set by \"%s\".",
						   shape_sync_log_memory, "shape_sync.log_memory"),
				 errhint("Increase \"%s\", or drop shapes that are no longer used.",
						 "shape_sync.log_memory")));
	if (shape_sync_durable_logs)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("shape is too large for the shape log memory"),
				 errdetail("One chunk of the snapshot of relation \"%s\" and the log's indexes need more than the %d MB set by \"%s\"; only the chunk being written must fit in memory.",
						   w->slot->relation, shape_sync_log_memory, "shape_sync.log_memory"),
				 errhint("Lower \"%s\" to well under a quarter of \"%s\", or increase \"%s\".",
						 "shape_sync.chunk_bytes_threshold", "shape_sync.log_memory",
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
snap_append(SnapshotWriter *w, LogOffset offset, uint32 kind, const char *data, uint32 len)
{
	TimestampTz since = 0;
	SlogResult	res;

	while ((res = slog_append(w->table->arena, w->log, offset, kind, data, len)) != SLOG_OK)
		snap_wait_for_room(w, res, &since);
}

static void
snap_close_chunk(SnapshotWriter *w, LogOffset end)
{
	TimestampTz since = 0;
	SlogResult	res;

	while ((res = slog_close_chunk(w->table->arena, w->log, end)) != SLOG_OK)
		snap_wait_for_room(w, res, &since);
}

/*
 * shape_sync.debug_snapshot_gate, a developer option: waits, between two
 * chunks, while another session holds pg_advisory_lock(key), so that a test
 * keeps a snapshot going after its snapshot was taken, at a point where
 * the worker holds nothing another process waits for (as SIGSTOP cannot).
 */
static void
snap_debug_gate(void)
{
	LOCKTAG		tag;
	int64		key = shape_sync_debug_snapshot_gate;

	/* the tag pg_advisory_lock_shared(bigint) takes */
	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, (uint32) (key >> 32), (uint32) key, 1);
	(void) LockAcquire(&tag, ShareLock, false, false);
	LockRelease(&tag, ShareLock, false);
}

static void
snap_emit(void *arg, const char *message, int len)
{
	SnapshotWriter *w = arg;
	LogOffset	offset = {0, w->chunk};

	snap_append(w, offset, SLOG_RECORD_CHANGE, message, (uint32) len);
	w->rows++;
	w->chunk_bytes += len + 1;
	if (w->chunk_bytes >= w->threshold)
	{
		snap_close_chunk(w, offset);
		atomic_store_explicit(&w->slot->snapshot_rows, w->rows, memory_order_relaxed);
		snap_publish(w, offset, 0);
		snapshot_spill_chunk(w->threshold);
		w->chunk++;
		w->chunk_bytes = 0;
		if (shape_sync_debug_snapshot_gate != 0)
			snap_debug_gate();
		if (shape_table_state(w->table, w->slot_index) != SHAPE_SNAPSHOTTING)
			ereport(ERROR,
					(errcode(ERRCODE_QUERY_CANCELED),
					 errmsg("shape %s was dropped during its snapshot", w->slot->handle)));
	}
}

/* The snapshot-end control message of a snapshot. */
static void
snap_end_message(StringInfo buf, const char *snapshot)
{
	appendStringInfoString(buf, LOG_RECORD_SNAPSHOT_END);
	snapshot_visibility_json(buf, snapshot);
	appendStringInfoString(buf, LOG_RECORD_END);
}

/*
 * Shapes need the old row of every update and delete, to tell rows moving
 * out of a where clause and to send old values.  When the operator lets it
 * (shape_sync.manage_replica_identity), the worker sets REPLICA IDENTITY
 * FULL on the table, in a transaction of its own that commits before the
 * snapshot is taken, so that every change the snapshot does not see is
 * logged in full.  The ALTER TABLE runs as the table's owner, in a
 * security-restricted operation, and waits at most
 * REPLICA_IDENTITY_LOCK_TIMEOUT_MS for its lock: it never queues behind a
 * long transaction, holding up every query of the table behind it.
 */
static void
snap_set_replica_identity_full(Oid relid)
{
	Relation	rel;
	char		ident;
	Oid			owner;
	char	   *name;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	rel = table_open(relid, AccessShareLock);
	ident = rel->rd_rel->relreplident;
	owner = rel->rd_rel->relowner;
	name = quote_qualified_identifier(get_namespace_name(RelationGetNamespace(rel)),
									  RelationGetRelationName(rel));
	table_close(rel, AccessShareLock);
	if (ident != REPLICA_IDENTITY_FULL)
	{
		ShapeRoleSaved saved;

		pgstat_report_activity(STATE_RUNNING, "setting REPLICA IDENTITY FULL for a shape");
		(void) set_config_option("lock_timeout",
								 psprintf("%d", REPLICA_IDENTITY_LOCK_TIMEOUT_MS),
								 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_LOCAL, true, 0, false);
		/* nor behind a synchronous standby that does not answer */
		(void) set_config_option("synchronous_commit", "local",
								 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_LOCAL, true, 0, false);
		shape_role_become(owner, &saved);
		if (SPI_connect() != SPI_OK_CONNECT)
			elog(ERROR, "SPI_connect failed");
		PushActiveSnapshot(GetTransactionSnapshot());
		if (SPI_execute(psprintf("ALTER TABLE ONLY %s REPLICA IDENTITY FULL", name),
						false, 0) != SPI_OK_UTILITY)
			elog(ERROR, "could not set REPLICA IDENTITY FULL on %s", name);
		SPI_finish();
		PopActiveSnapshot();
		shape_role_restore(&saved);
		ereport(LOG,
				(errmsg("shape_sync set REPLICA IDENTITY FULL on table %s", name),
				 errdetail("Shapes need the old values of updated and deleted rows, and \"%s\" is on.",
						   "shape_sync.manage_replica_identity")));
	}
	CommitTransactionCommand();
}

/* The same for each partition of a partitioned table. */
static void
snap_ensure_replica_identity_full(Oid relid)
{
	for (int tables = 0; tables < 100000; tables++)
	{
		Oid			not_full;

		SetCurrentStatementStartTimestamp();
		StartTransactionCommand();
		not_full = shape_table_not_logged_in_full(relid);
		CommitTransactionCommand();
		if (!OidIsValid(not_full))
			return;
		snap_set_replica_identity_full(not_full);
	}
}

/* Runs at exit, whatever the path: fail an unfinished shape, drop the pin. */
static void
snap_on_exit(int code, Datum arg)
{
	ShapeTable *table = shape_sync_shared->table;
	SnapshotWriter *w = (SnapshotWriter *) DatumGetPointer(arg);

	server_metrics_detach_process();
	if (snap_entry >= 0)
		snapshot_worker_release(&shape_sync_shared->snapshot_jobs, snap_entry);
	snap_entry = -1;
	subset_abandon();
	if (snap_slot == SHAPE_NO_SLOT)
		return;
	snapshot_spill_abort();		/* its trimmed blocks back, before the unpin */
	snap_fail(w, REFUSAL_SNAPSHOT_WORKER_STOPPED, 0, NULL);
	shape_table_unpin(table, snap_slot);
	snap_slot = SHAPE_NO_SLOT;
	shape_sync_wake_worker();
}

/*
 * Why a snapshot failed, for the shape's clients: a reason and its facts
 * (refusal.h; the sentence is refusal_failure_sentence's).  What a client
 * can change (a narrower shape) is invalid, what it may not read
 * forbidden, what may pass (memory, a busy table, a conflict) a reason
 * answered 503; a table changed since the shape was made means the shape
 * is made again (must-refetch).  `text` gets PostgreSQL's own words where
 * the reason quotes them.
 */
static RefusalReason
snap_failure(const ErrorData *edata, int64 elapsed_ms, int64 *number, char *text, size_t len)
{
	*number = 0;
	text[0] = '\0';
	if (edata->sqlerrcode == ERRCODE_INVALID_TABLE_DEFINITION)
	{
		/* snapshot_check_shape: the table changed since the shape was made */
		/* not an error of the definition: its clients start over (409) */
		snprintf(text, len, "%s", edata->message);
		return REFUSAL_MUST_REFETCH;
	}
	switch (edata->sqlerrcode)
	{
		case ERRCODE_PROGRAM_LIMIT_EXCEEDED:
			snprintf(text, len, "%s: %s %s", edata->message,
					 edata->detail ? edata->detail : "", edata->hint ? edata->hint : "");
			return REFUSAL_SNAPSHOT_INVALID;
		case ERRCODE_OUT_OF_MEMORY:
			snprintf(text, len, "%s: %s %s", edata->message,
					 edata->detail ? edata->detail : "", edata->hint ? edata->hint : "");
			return REFUSAL_SNAPSHOT_UNAVAILABLE;
		case ERRCODE_QUERY_CANCELED:
			if (shape_sync_snapshot_statement_timeout > 0 &&
				elapsed_ms >= shape_sync_snapshot_statement_timeout)
			{
				*number = shape_sync_snapshot_statement_timeout;
				return REFUSAL_SNAPSHOT_TIMEOUT;
			}
			return REFUSAL_SNAPSHOT_CANCELLED;
		case ERRCODE_INSUFFICIENT_PRIVILEGE:
			snprintf(text, len, "%s", edata->message);
			return REFUSAL_SNAPSHOT_FORBIDDEN;
		case ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE:
			snprintf(text, len, "%s. %s", edata->message, edata->hint ? edata->hint : "");
			return REFUSAL_SNAPSHOT_INVALID;
		case ERRCODE_T_R_SERIALIZATION_FAILURE:
			snprintf(text, len, "%s", edata->message);
			return REFUSAL_SNAPSHOT_CONFLICT;
		case ERRCODE_LOCK_NOT_AVAILABLE:
			*number = REPLICA_IDENTITY_LOCK_TIMEOUT_MS;
			return REFUSAL_SNAPSHOT_TABLE_BUSY;
	}
	/* the where clause failed on a row (a division by zero, a value it cannot cast) */
	snprintf(text, len, "%s", edata->message);
	if (ERRCODE_TO_CATEGORY(edata->sqlerrcode) == ERRCODE_DATA_EXCEPTION)
		return REFUSAL_SNAPSHOT_ROW_FAILED;
	return REFUSAL_SNAPSHOT_FAILED;
}

/*
 * The snapshot itself: in a REPEATABLE READ, READ ONLY transaction, as
 * the shape's role, within shape_sync.snapshot_statement_timeout.  A table
 * whose replica identity another session set back from FULL between this
 * worker's ALTER TABLE and the snapshot gets it set again and another
 * snapshot, up to SNAPSHOT_REPLICA_IDENTITY_TRIES times; then the shape
 * fails with a 503, which clients retry.
 */
static void
snap_take(SnapshotWriter *writer, const SnapshotJob *job, dsm_segment *definition,
		  const ShapeSpec *spec, const char *fingerprint, TimestampTz started)
{
	ShapeTable *table = writer->table;
	ShapeRoleSaved saved;
	char	   *snapshot_text;
	StringInfoData end;
	LogOffset	offset;
	Relation	rel;
	Oid			not_full;

	for (int attempt = 1;; attempt++)
	{
		if (job->flags & SNAPSHOT_JOB_MANAGE_REPLICA_IDENTITY)
			snap_ensure_replica_identity_full(spec->relid);

		snapshot_text = snapshot_begin(spec->relid, (Oid) job->role, "taking a shape snapshot",
									   shape_sync_snapshot_statement_timeout, &saved,
									   &writer->slot->snapshot_lsn);

		/*
		 * What the stream needs must still hold, now that the snapshot is
		 * taken: the table as the shape was made from it, read by the role
		 * (snapshot_check_shape), and old rows logged in full.
		 */
		rel = table_open(spec->relid, AccessShareLock);
		snapshot_check_shape(spec, fingerprint, (Oid) job->role, writer->slot->relation);
		not_full = shape_table_not_logged_in_full(spec->relid);
		if (!OidIsValid(not_full))
			break;
		if (!(job->flags & SNAPSHOT_JOB_MANAGE_REPLICA_IDENTITY))
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("table \"%s\" does not have REPLICA IDENTITY FULL any more",
							get_rel_name(not_full)),
					 errhint("The database operator can run ALTER TABLE ... REPLICA IDENTITY FULL.")));
		if (attempt == SNAPSHOT_REPLICA_IDENTITY_TRIES)
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("the replica identity of table \"%s\" was changed from FULL while the snapshot was taken",
							get_rel_name(not_full))));

		/* set back meanwhile by someone else: set it again, take another snapshot */
		table_close(rel, NoLock);
		shape_role_restore(&saved);
		if (get_timeout_active(STATEMENT_TIMEOUT))
			disable_timeout(STATEMENT_TIMEOUT, false);
		PopActiveSnapshot();
		AbortCurrentTransaction();
	}
	table_close(rel, NoLock);

	/* log=changes_only: the snapshot is its end message alone */
	if (spec->flags & SHAPE_FLAG_CHANGES_ONLY)
		snapshot_refuse_row_security(shape_relation_load(spec->relid, spec->ncolumns,
													 spec->columns), false);
	else
		snapshot_scan(spec, NULL, writer->slot->handle, snap_emit, writer);

	initStringInfo(&end);
	snap_end_message(&end, snapshot_text);
	/* for the stream's stitching: read by the main thread once READY */
	snapshot_definition_set_visibility(definition, snapshot_text);
	offset.tx = 0;
	offset.op = writer->chunk;
	snap_append(writer, offset, SLOG_RECORD_CONTROL, end.data, (uint32) end.len);
	snap_close_chunk(writer, offset);
	atomic_store_explicit(&writer->slot->snapshot_rows, writer->rows, memory_order_relaxed);
	writer->slot->snapshot_ms = (GetCurrentTimestamp() - started) / 1000;

	snapshot_end(&saved);
	snapshot_spill_finish();

	/*
	 * Publish, then hand over: the main thread takes the pen when it sees
	 * READY, and must find the whole snapshot published by then.  Every
	 * chunk is closed, so clients read them all now; what comes after the
	 * snapshot is the main thread's to publish (SLOG_SNAPSHOT_DONE, in
	 * ss_take_over), once it has stitched on the transactions it kept
	 * meanwhile: until then a reader at the end of the snapshot waits,
	 * instead of being told it is up to date past commits its log does not
	 * hold yet.
	 */
	slog_publish(writer->log, LOG_OFFSET_SNAPSHOT_END, 0);
	if (!shape_table_transition(table, job->slot, SHAPE_SNAPSHOTTING, SHAPE_READY))
	{
		snapshot_spill_abort();
		return;					/* retired while we finished: it stays retired */
	}
	snapshot_spill_handed_over();
	shape_table_mark_dirty(table, job->slot);
	shape_sync_wake_worker();
	pgstat_report_activity(STATE_IDLE, NULL);
}

/*
 * One job: the snapshot of one shape.  A shape dropped before or while it
 * is taken ends it quietly; a failure fails the shape with what its
 * clients are told (snap_failure), and the worker goes on.
 */
static void
snap_run_job(const SnapshotJob *job, MemoryContext job_context)
{
	ShapeTable *table = shape_sync_shared->table;
	TimestampTz started = GetCurrentTimestamp();
	dsm_segment *volatile seg = NULL;
	ShapeSpec	spec;
	char	   *fingerprint;

	MemoryContextSwitchTo(job_context);
	if (!shape_table_pin(table, job->slot, job->generation))
		return;					/* the shape was dropped before we started */
	snap_slot = job->slot;
	memset(&snap_writer, 0, sizeof(snap_writer));
	snap_writer.table = table;
	snap_writer.slot = &table->slots[job->slot];
	snap_writer.slot_index = job->slot;
	snap_writer.log = shape_table_log(table, job->slot);
	sm_add(SM_SNAPSHOTS_STARTED, 0, 1);
	snapshot_spill_begin(table, job->slot, snap_writer.log);

	PG_TRY();
	{
		seg = dsm_attach((dsm_handle) job->definition);
		if (seg == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("could not map the definition of shape %s", snap_writer.slot->handle)));
		snapshot_definition_read(seg, &spec, &fingerprint, &snap_writer.threshold);
		snap_take(&snap_writer, job, seg, &spec, fingerprint, started);
		dsm_detach(seg);
		seg = NULL;
	}
	PG_CATCH();
	{
		ErrorData  *edata;
		char		text[SHAPE_ERROR_LEN];
		int64		number = 0;
		RefusalReason reason;
		bool		too_slow;

		MemoryContextSwitchTo(job_context);
		edata = CopyErrorData();
		too_slow = snapshot_deadline_caught();
		snapshot_worker_recover();
		snapshot_spill_abort();
		if (seg != NULL)
			dsm_detach(seg);
		if (shape_table_state(table, job->slot) != SHAPE_SNAPSHOTTING)
		{
			/* dropped (rotated, evicted, deleted): nobody waits for it */
			ereport(DEBUG1,
					(errmsg_internal("shape %s: snapshot stopped, the shape was dropped: %s",
									 snap_writer.slot->handle, edata->message)));
		}
		else
		{
			int64		elapsed_ms = (GetCurrentTimestamp() - started) / 1000;

			text[0] = '\0';
			if (too_slow)
			{
				reason = REFUSAL_SNAPSHOT_ROW_TOO_SLOW;
				number = shape_sync_where_evaluation_timeout;
			}
			else if (edata->sqlerrcode == ERRCODE_QUERY_CANCELED &&
				!snapshot_worker_cancelled(&shape_sync_shared->snapshot_jobs, snap_entry,
										   snapshot_job_key(job->slot, job->generation)) &&
				!(shape_sync_snapshot_statement_timeout > 0 &&
				  elapsed_ms >= shape_sync_snapshot_statement_timeout))
			{
				/*
				 * A cancel meant for this worker's previous job: the
				 * shape is made again at once, by its clients (409),
				 * not remembered as failed.
				 */
				reason = REFUSAL_MUST_REFETCH;
				snprintf(text, sizeof(text), "The shape's snapshot was interrupted, please retry");
			}
			else
				reason = snap_failure(edata, elapsed_ms, &number, text, sizeof(text));
			snap_fail(&snap_writer, reason, number, text);
			sm_add(SM_SNAPSHOTS_FAILED, 0, 1);
			sm_add(SM_ERRORS, SM_ERROR_SNAPSHOT, 1);
			/* the main thread logs the shape's failure; the cause, here */
			ereport(LOG,
					(errmsg("snapshot of shape %s failed: %s", snap_writer.slot->handle,
							edata->message),
					 edata->detail ? errdetail_internal("%s", edata->detail) : 0));
		}
		shape_table_unpin(table, job->slot);
		snap_slot = SHAPE_NO_SLOT;
		shape_sync_wake_worker();
		pgstat_report_activity(STATE_IDLE, NULL);
		return;
	}
	PG_END_TRY();

	sm_add(SM_SNAPSHOT_ROWS, 0, snap_writer.rows);
	sm_observe(SM_SNAPSHOT_SECONDS, 0, (double) (GetCurrentTimestamp() - started) / 1e6);
	ereport(DEBUG1,
			(errmsg_internal("shape %s: snapshot of %llu rows in %lld ms",
							 snap_writer.slot->handle, (unsigned long long) snap_writer.rows,
							 (long long) snap_writer.slot->snapshot_ms)));
	shape_table_unpin(table, job->slot);
	snap_slot = SHAPE_NO_SLOT;
}

/*
 * SIGTERM: a worker in the middle of a snapshot stops at once, as any
 * backend does (die); an idle one leaves its loop and exits quietly.
 */
static void
snap_handle_sigterm(SIGNAL_ARGS)
{
	if (snap_in_job)
		die(postgres_signal_arg);
	else
	{
		int			save_errno = errno;

		ShutdownRequestPending = true;
		SetLatch(MyLatch);
		errno = save_errno;
	}
}

/*
 * A worker of the pool: takes queued jobs, one after the other, and
 * exits once it found none for SNAPSHOT_WORKER_IDLE_MS.  A job queued
 * just as it exits is staffed by the main thread's next turn.
 */
void
shape_sync_snapshot_main(Datum arg)
{
	SnapshotWorkerArgs args;
	SnapshotJobs *q = &shape_sync_shared->snapshot_jobs;
	MemoryContext job_context;
	TimestampTz idle_since;
	uint64		reloads_seen;

	memcpy(&args, MyBgworkerEntry->bgw_extra, sizeof(args));
	/* its settings are the postmaster's, as of a reload the main worker had read or not yet */
	reloads_seen = args.config_reloads;
	pqsignal(SIGTERM, snap_handle_sigterm);
	pqsignal(SIGINT, StatementCancelHandler);	/* its shape was dropped */
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnectionByOid(args.dboid, InvalidOid, 0);
	/* folding a subset's where clause, and each row's filter, within the deadline */
	eval_deadline_enable();

	snap_entry = snapshot_worker_claim(q, (int32) MyProcPid, MyLatch);
	if (snap_entry < 0)
		proc_exit(0);			/* more workers than entries: not needed */
	before_shmem_exit(snap_on_exit, PointerGetDatum(&snap_writer));
	job_context = AllocSetContextCreate(TopMemoryContext, "shape_sync snapshot job",
										ALLOCSET_DEFAULT_SIZES);
	idle_since = GetCurrentTimestamp();

	/*
	 * A cancel counts only during a job: one that comes late (after the
	 * job's last look at interrupts, or for a job already done) must not
	 * end the worker with an ERROR while it waits.
	 */
	HOLD_CANCEL_INTERRUPTS();
	for (;;)
	{
		SnapshotJob job;
		long		idle_ms;
		uint64		reloads;

		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		if (ShutdownRequestPending)
			break;
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		snap_in_job = true;
		if (ShutdownRequestPending)
			break;				/* came just now */
		if (snapshot_jobs_pop(q, &job))
		{
			/*
			 * The main worker counts a reload before it queues a job made
			 * under it: read it here too, SIGHUP or not (config_reloads).
			 */
			reloads = atomic_load(&shape_sync_shared->config_reloads);
			if (reloads != reloads_seen)
			{
				ProcessConfigFile(PGC_SIGHUP);
				reloads_seen = reloads;
			}
			snapshot_worker_set_job(q, snap_entry, snapshot_job_key(job.slot, job.generation));
			QueryCancelPending = false; /* a cancel meant for an earlier job */
			RESUME_CANCEL_INTERRUPTS();
			if (job.slot & SUBSET_JOB_SLOT_BIT)
				subset_run_job(&job, job_context);
			else
				snap_run_job(&job, job_context);
			HOLD_CANCEL_INTERRUPTS();
			QueryCancelPending = false;
			snapshot_worker_set_job(q, snap_entry, 0);
			snap_in_job = false;
			pgstat_report_activity(STATE_IDLE, NULL);
			pgstat_report_stat(false);
			MemoryContextSwitchTo(TopMemoryContext);
			MemoryContextReset(job_context);
			shape_sync_wake_worker();	/* the next job may be queued */
			idle_since = GetCurrentTimestamp();
			continue;
		}
		snap_in_job = false;
		idle_ms = SNAPSHOT_WORKER_IDLE_MS -
			(long) ((GetCurrentTimestamp() - idle_since) / 1000);
		if (idle_ms <= 0)
			break;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 idle_ms, PG_WAIT_EXTENSION);
	}
	snapshot_worker_release(q, snap_entry);
	snap_entry = -1;
	/* the entry given back before, the queue after: see snapshot_jobs.c */
	atomic_thread_fence(memory_order_seq_cst);
	if (snapshot_jobs_queued(q) > 0)
		shape_sync_wake_worker();
	proc_exit(0);
}
