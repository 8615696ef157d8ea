/*-------------------------------------------------------------------------
 *
 * decoder.c
 *		In-process logical decoding of the WAL, on the worker's main thread.
 *
 * The worker owns a persistent logical replication slot, shape_sync_<db
 * oid>, created on its first start, and decodes the WAL itself with the
 * recipe of pg_logical_slot_get_changes(): a decoding context over the
 * extension's own output plugin (output_plugin.c, in this library), an
 * XLogReadRecord loop up to the flushed end of the WAL, and a confirmation
 * of the slot's position after each batch, so that WAL does not pile up.
 * Decoding runs outside any transaction; the reorder buffer opens its own
 * for catalog access.
 *
 * Reads never wait: the page reader is read_local_xlog_page_no_wait, and a
 * record not yet completely flushed ends the batch.  A batch also ends
 * after DECODER_BATCH_MS, when an invalidation asks for checks, and at a
 * transaction's end once the log memory runs short while logs on disk grew
 * (shape_stream_write_out_due): the main loop then writes them out and
 * trims them before decoding on.
 *
 * A commit is decoded only once its transaction has left the proc array.
 * A commit record is flushed before that (with synchronous replication,
 * for as long as the standby takes to confirm it), and a shape created in
 * between would take a snapshot that still sees the transaction running,
 * after the stream had passed it: neither would deliver it.  Holding the
 * commit record until the transaction is visible to every new snapshot
 * keeps the rule that stitching relies on (shape_stream_log.c): what decoding
 * has passed, a later snapshot sees.  Held, the record is read again at
 * the next step; the committing backend wakes the worker when it leaves
 * the proc array (COMMIT PREPARED does not: the main loop then looks
 * again every DECODER_HOLD_RECHECK_MS).  The main loop decodes
 * whenever its latch is set, and every backend sets it when a transaction
 * that wrote anything commits (shape_sync.c registers that callback), so
 * a commit reaches the shape logs without a polling delay.  The slot is
 * confirmed as far as decoding went, but never past what the shape logs
 * on disk hold (log_files_confirmable): after a crash, what they lack is
 * decoded again.
 *
 * The worker reads the catalog in two ways: decoding reads it as of each
 * transaction it decodes (historic snapshots), and everything else
 * (resolving shapes, checking tables) as it is now.  The relation and
 * catalog caches keep entries from either, and nothing tells one use that
 * an entry was built for the other: a table rewritten since the change
 * being decoded is cached with its new TOAST table, which the change's
 * snapshot cannot open, or with column types its tuples do not have.  So,
 * like pg_logical_slot_get_changes(), the worker empties those caches
 * whenever it goes from one way to the other (catalog_use.c): before the
 * worker reads the current catalog, and before a transaction record (the plugin has no streaming callbacks,
 * so only replaying a commit reads the catalog); only at a switch.  The
 * cache callbacks of shape_stream.c ignore these resets
 * (catalog_use_resetting_caches): nothing changed.
 *
 * A (re)started worker that restored no shape from disk (log_restore.c)
 * holds none, so the WAL written since the slot's confirmed position
 * concerns nobody: it is skipped in fast-forward mode (the recipe of pg_replication_slot_advance:
 * records are read for the snapshot builder, no transaction is assembled
 * and the plugin is not called), up to the flushed end at start, in
 * batches between which requests are served.  Skipping stops early at a
 * commit whose transaction is still in the proc array, for the reason
 * above: a shape created meanwhile may not see it.  Then decoding goes on
 * normally from there.  No shape is made while skipping (decoder_skipping),
 * so that no skipped commit is one a new snapshot lacks.  A worker that
 * restored shapes skips the same way, but only up to the position their
 * logs hold (re-reading starts at the slot's restart_lsn, before it), and
 * shapes may be made meanwhile: every commit below that position was
 * decoded in an earlier life, so it has left the proc array.  A slot that was
 * invalidated (max_slot_wal_keep_size)
 * is dropped and made again, and slots that an earlier shape_sync.database
 * left behind (shape_sync_<other oid>, our plugin, not in use) are dropped,
 * since they would hold WAL and catalog_xmin for ever.
 *
 * A transaction is replayed whole when its commit record is decoded, which
 * for a million rows takes seconds.  The plugin ticks once per change
 * (decoder_replay_tick), and every DECODER_REPLAY_TICK_MS of replay the
 * worker's hook runs: it resolves new requests (under the replay's
 * historic catalog, inside its transaction: registry.c says what it
 * answers then), starts their snapshots, wakes the clients of shapes whose
 * logs grew and obeys a shutdown request.
 *
 * PostgreSQL 15.20 only lets a slot use the output plugins listed in
 * output_plugin_libraries.  The worker trusts its own library for its own
 * process by adding it to that list with a process-local override; other
 * sessions (pg_logical_slot_get_changes() on a second slot) need the
 * operator to list shape_sync there, and get PostgreSQL's error, which
 * says so, until then.
 *
 * IDENTIFICATION
 *	  src/pg/worker/decoder.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "access/xlog_internal.h"
#include "access/xlogreader.h"
#include "access/xlogutils.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "replication/decode.h"
#include "replication/logical.h"
#include "replication/slot.h"
#include "storage/procarray.h"
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/varlena.h"

#include "catalog_use.h"
#include "decoder.h"
#include "eval_deadline.h"
#include "guc.h"
#include "log_files.h"
#include "server_metrics.h"
#include "shape_stream.h"
#include "shared_state.h"

#define DECODER_BATCH_MS	50	/* then let the main loop serve requests */
#define DECODER_REPLAY_TICK_MS	20	/* the hook's period during a replay */

static LogicalDecodingContext *dec_ctx = NULL;
static DecoderReplayHook dec_replay_hook = NULL;
/* the restored shape logs hold every commit before it */
static XLogRecPtr dec_restored_up_to = InvalidXLogRecPtr;
static uint32 dec_replay_changes = 0;
static TimestampTz dec_replay_hook_at = 0;
static XLogRecPtr dec_skip_to = InvalidXLogRecPtr;	/* fast-forwarding to here */
static bool dec_skip_restored = false;	/* ... what restored logs hold */
static XLogRecPtr dec_skip_from = InvalidXLogRecPtr;
static TimestampTz dec_skip_started;
static TransactionId dec_held_xid = InvalidTransactionId;	/* see the header */
static ReadLocalXLogPageNoWaitPrivate dec_page_private;
static char dec_marker;			/* output_writer_private of the worker */
static bool dec_lag_warned = false;	/* past shape_sync.decoder_lag_warning */
static TimestampTz dec_lag_warned_at = 0;

#define DECODER_LAG_LOG_INTERVAL_MS	60000

static TransactionId dec_commit_still_running(XLogReaderState *reader);

bool
decoder_is_worker_context(struct LogicalDecodingContext *ctx)
{
	return ctx->output_writer_private == &dec_marker;
}

/*
 * The decoding context keeps itself in reader->private_data, while
 * read_local_xlog_page_no_wait keeps its end-of-WAL flag there: lend it
 * that field for the duration of the call.
 */
static int
dec_page_read(XLogReaderState *state, XLogRecPtr target_page, int req_len,
			  XLogRecPtr target_rec, char *cur_page)
{
	void	   *saved = state->private_data;
	int			n;

	state->private_data = &dec_page_private;
	n = read_local_xlog_page_no_wait(state, target_page, req_len, target_rec, cur_page);
	state->private_data = saved;
	return n;
}

/* Lets this process use its own library as an output plugin (PG 15.20+). */
static void
dec_trust_own_plugin(void)
{
	const char *list = GetConfigOption("output_plugin_libraries", true, false);
	char	   *copy;
	List	   *names;
	ListCell   *lc;

	if (list == NULL)
		return;					/* a server without the restriction */
	copy = pstrdup(list);
	if (!SplitIdentifierString(copy, ',', &names))
		names = NIL;
	foreach(lc, names)
		if (strcmp(lfirst(lc), "shape_sync") == 0)
			return;
	(void) set_config_option("output_plugin_libraries",
							 list[0] ? psprintf("%s, shape_sync", list) : "shape_sync",
							 PGC_SIGHUP, PGC_S_OVERRIDE, GUC_ACTION_SET, true,
							 ERROR, false);
}

static void
dec_slot_name(char *name)
{
	snprintf(name, NAMEDATALEN, "shape_sync_%u", MyDatabaseId);
}

/* Creates the worker's slot, the first time. */
static void
dec_create_slot(const char *name)
{
	LogicalDecodingContext *ctx;

	ereport(LOG,
			(errmsg("shape_sync is creating replication slot \"%s\"", name),
			 errdetail("This waits for transactions running now to finish.")));
	StartTransactionCommand();
	CheckSlotPermissions();
	CheckLogicalDecodingRequirements();
	ReplicationSlotCreate(name, true, RS_EPHEMERAL, false);
	ctx = CreateInitDecodingContext("shape_sync", NIL, false, InvalidXLogRecPtr,
									XL_ROUTINE(.page_read = read_local_xlog_page,
											   .segment_open = wal_segment_open,
											   .segment_close = wal_segment_close),
									NULL, NULL, NULL);
	DecodingContextFindStartpoint(ctx);
	FreeDecodingContext(ctx);
	ReplicationSlotPersist();
	ReplicationSlotRelease();
	CommitTransactionCommand();
}

/*
 * Drops the slots an earlier shape_sync.database left: named like ours,
 * with our plugin, for another database, and not in use.
 */
static void
dec_drop_stale_slots(const char *own)
{
	List	   *volatile stale = NIL;
	ListCell   *lc;

	LWLockAcquire(ReplicationSlotControlLock, LW_SHARED);
	for (int i = 0; i < max_replication_slots; i++)
	{
		ReplicationSlot *s = &ReplicationSlotCtl->replication_slots[i];
		const char *slot_name = NameStr(s->data.name);

		if (s->in_use && s->active_pid == 0 && strcmp(slot_name, own) != 0 &&
			strncmp(slot_name, "shape_sync_", 11) == 0 &&
			strspn(slot_name + 11, "0123456789") == strlen(slot_name + 11) &&
			strcmp(NameStr(s->data.plugin), "shape_sync") == 0 &&
			s->data.database != MyDatabaseId)
			stale = lappend(stale, pstrdup(slot_name));
	}
	LWLockRelease(ReplicationSlotControlLock);

	foreach(lc, stale)
	{
		const char *slot_name = lfirst(lc);
		MemoryContext cxt = CurrentMemoryContext;

		PG_TRY();
		{
			ReplicationSlotDrop(slot_name, true);
			ereport(LOG,
					(errmsg("shape_sync dropped replication slot \"%s\" of another database", slot_name),
					 errdetail("An earlier \"shape_sync.database\" left it; it kept WAL and catalog rows from being removed.")));
		}
		PG_CATCH();
		{
			ErrorData  *edata;

			MemoryContextSwitchTo(cxt);
			edata = CopyErrorData();
			FlushErrorState();
			LWLockReleaseAll();	/* dropping may fail holding the allocation lock */
			if (MyReplicationSlot != NULL)
				ReplicationSlotRelease();
			ereport(WARNING,
					(errmsg("shape_sync could not drop replication slot \"%s\" of another database: %s",
							slot_name, edata->message),
					 errdetail("An earlier \"shape_sync.database\" left it; it keeps WAL and catalog rows from being removed."),
					 errhint("Drop it with pg_drop_replication_slot('%s') if nothing else uses it.",
							 slot_name)));
			FreeErrorData(edata);
		}
		PG_END_TRY();
	}
	list_free_deep(stale);
}

/* The decoding context that calls the plugin, from the slot's position. */
static void
dec_begin_decoding(void)
{
	dec_ctx = CreateDecodingContext(InvalidXLogRecPtr, NIL, false,
									XL_ROUTINE(.page_read = dec_page_read,
											   .segment_open = wal_segment_open,
											   .segment_close = wal_segment_close),
									NULL, NULL, NULL);
	dec_ctx->output_writer_private = &dec_marker;
	XLogBeginRead(dec_ctx->reader, MyReplicationSlot->data.restart_lsn);
}

void
decoder_open_slot(DecoderReplayHook hook, bool *made_now, XLogRecPtr *confirmed)
{
	char		name[NAMEDATALEN];

	dec_replay_hook = hook;
	*made_now = false;
	if (wal_level < WAL_LEVEL_LOGICAL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("shape_sync requires \"wal_level\" to be \"logical\""),
				 errhint("Set \"wal_level\" to \"logical\" and restart the server.")));
	dec_trust_own_plugin();
	dec_slot_name(name);
	dec_drop_stale_slots(name);
	if (SearchNamedReplicationSlot(name, true) == NULL)
	{
		dec_create_slot(name);
		*made_now = true;
	}

	ReplicationSlotAcquire(name, true);
	if (MyReplicationSlot->data.invalidated_at != InvalidXLogRecPtr &&
		MyReplicationSlot->data.restart_lsn == InvalidXLogRecPtr)
	{
		ereport(LOG,
				(errmsg("shape_sync replaces its replication slot \"%s\", which was invalidated", name),
				 errdetail("The WAL it needed was removed (\"max_slot_wal_keep_size\"); every shape starts over.")));
		ReplicationSlotRelease();
		ReplicationSlotDrop(name, true);
		dec_create_slot(name);
		*made_now = true;
		ReplicationSlotAcquire(name, true);
	}
	*confirmed = MyReplicationSlot->data.confirmed_flush;
}

void
decoder_start(XLogRecPtr restored_up_to)
{
	bool		shapes_restored = restored_up_to != InvalidXLogRecPtr;
	const char *name = NameStr(MyReplicationSlot->data.name);
	XLogRecPtr	flushed;
	XLogRecPtr	skip_to;

	dec_restored_up_to = restored_up_to;
	flushed = GetFlushRecPtr(NULL);
	/* the lag gauges start from the slot, not from an earlier worker's numbers */
	atomic_store_explicit(&shape_sync_shared->decoder.wal_end_lsn, (uint64) flushed,
						  memory_order_relaxed);
	atomic_store_explicit(&shape_sync_shared->decoder.decoded_lsn,
						  (uint64) MyReplicationSlot->data.confirmed_flush, memory_order_relaxed);
	atomic_store_explicit(&shape_sync_shared->decoder.confirmed_flush_lsn,
						  (uint64) MyReplicationSlot->data.confirmed_flush, memory_order_relaxed);
	/*
	 * Nothing of it concerns a shape: skip it (see the header); or, with
	 * shapes restored, what their logs hold already.
	 */
	skip_to = shapes_restored ? restored_up_to : flushed;
	if (MyReplicationSlot->data.confirmed_flush < skip_to)
	{
		dec_skip_from = MyReplicationSlot->data.confirmed_flush;
		dec_skip_to = skip_to;
		dec_skip_restored = shapes_restored;
		dec_skip_started = GetCurrentTimestamp();
		dec_ctx = CreateDecodingContext(InvalidXLogRecPtr, NIL, true,
										XL_ROUTINE(.page_read = dec_page_read,
												   .segment_open = wal_segment_open,
												   .segment_close = wal_segment_close),
										NULL, NULL, NULL);
		XLogBeginRead(dec_ctx->reader, MyReplicationSlot->data.restart_lsn);
		ereport(LOG,
				(errmsg("shape_sync skips the WAL from %X/%X to %X/%X in slot \"%s\"",
						LSN_FORMAT_ARGS(dec_skip_from), LSN_FORMAT_ARGS(dec_skip_to), name),
				 shapes_restored ?
				 errdetail("The restored shape logs hold every change written before it.") :
				 errdetail("No shape was restored, so no change written before it is needed.")));
		return;
	}
	dec_begin_decoding();
	ereport(LOG,
			(errmsg("shape_sync decoding from slot \"%s\" at %X/%X", name,
					LSN_FORMAT_ARGS(MyReplicationSlot->data.confirmed_flush))));
}

/*
 * Where decoding is: every commit before it has been decoded into the
 * shape logs (a batch ends between records; a held commit is read again).
 * After a start, reading resumes at the slot's restart_lsn, before the
 * position it confirmed: the commits in between were decoded in an
 * earlier life (PostgreSQL skips them), so the position is never less.
 */
XLogRecPtr
decoder_position(void)
{
	if (dec_ctx == NULL)
		return InvalidXLogRecPtr;
	return Max(dec_ctx->reader->EndRecPtr, MyReplicationSlot->data.confirmed_flush);
}

/*
 * Confirms decoding up to `lsn`, never backwards: reading starts at the
 * slot's restart_lsn, which may be well before what was confirmed, and
 * confirming less would decode transactions again after a restart (or end
 * a skip before what was skipped already).
 */
static void
dec_confirm(XLogRecPtr lsn)
{
	lsn = log_files_confirmable(lsn);	/* never past the durable logs */
	if (lsn > MyReplicationSlot->data.confirmed_flush)
		LogicalConfirmReceivedLocation(lsn);
	atomic_store_explicit(&shape_sync_shared->decoder.confirmed_flush_lsn,
						  (uint64) MyReplicationSlot->data.confirmed_flush,
						  memory_order_relaxed);
}

/*
 * Confirms what decoding passed, as far as the durable logs allow: after a
 * round of log_rounds.c moved that limit while no WAL came.
 */
void
decoder_confirm_durable(void)
{
	if (dec_ctx == NULL || dec_skip_to != InvalidXLogRecPtr)
		return;
	if (log_files_confirmable(dec_ctx->reader->EndRecPtr) > MyReplicationSlot->data.confirmed_flush)
	{
		dec_confirm(dec_ctx->reader->EndRecPtr);
		ReplicationSlotMarkDirty();
	}
}

/*
 * A transaction's changes are in the shape logs (the plugin calls this
 * after shape_stream_commit): counted, its lag from commit observed, and
 * how far decoding is published for the lag gauges.
 */
/*
 * Logs, at most every DECODER_LAG_LOG_INTERVAL_MS, that decoding is past
 * shape_sync.decoder_lag_warning behind the commits, and once that it
 * caught up (under half of it again).
 */
static void
dec_check_lag(XLogRecPtr end_lsn, TimestampTz now, int64 lag_us)
{
	int64		threshold_us = (int64) shape_sync_decoder_lag_warning * 1000;

	if (threshold_us <= 0)
	{
		dec_lag_warned = false;
		return;
	}
	if (lag_us >= threshold_us)
	{
		XLogRecPtr	flushed = GetFlushRecPtr(NULL);

		if (dec_lag_warned &&
			!TimestampDifferenceExceeds(dec_lag_warned_at, now, DECODER_LAG_LOG_INTERVAL_MS))
			return;
		dec_lag_warned = true;
		dec_lag_warned_at = now;
		ereport(WARNING,
				(errcode(ERRCODE_WARNING),
				 errmsg("shape_sync's decoding is %.1f s behind the commits", (double) lag_us / 1e6),
				 errdetail("The transaction decoded last committed %.1f s ago, and %llu kB of WAL after it are still to be decoded.",
						   (double) lag_us / 1e6,
						   (unsigned long long) (flushed > end_lsn ? (flushed - end_lsn) / 1024 : 0)),
				 errhint("Clients get changes that much later. While writes outpace decoding, the lag grows and the replication slot keeps the WAL not yet decoded; \"%s\" sets when this is logged.",
						 "shape_sync.decoder_lag_warning")));
	}
	else if (dec_lag_warned && lag_us < threshold_us / 2)
	{
		dec_lag_warned = false;
		ereport(LOG,
				(errmsg("shape_sync's decoding caught up: the transaction decoded last reached the shape logs %.1f s after its commit",
						(double) lag_us / 1e6)));
	}
}

void
decoder_note_commit(XLogRecPtr end_lsn, TimestampTz commit_time)
{
	TimestampTz now = GetCurrentTimestamp();
	DecoderStatus *status = &shape_sync_shared->decoder;
	int64		lag_us = commit_time != 0 && now >= commit_time ? now - commit_time : 0;

	sm_add(SM_DECODED_TRANSACTIONS, 0, 1);
	if (commit_time != 0)
		sm_observe(SM_DECODER_COMMIT_LAG_SECONDS, 0, (double) lag_us / 1e6);
	atomic_store_explicit(&status->decoded_lsn, (uint64) end_lsn, memory_order_relaxed);
	atomic_store_explicit(&status->last_commit_us, (int64) commit_time, memory_order_relaxed);
	atomic_store_explicit(&status->last_commit_lag_us, lag_us, memory_order_relaxed);
	/* commits the restored logs hold, decoded again: old, but not late */
	if (end_lsn > dec_restored_up_to)
		dec_check_lag(end_lsn, now, lag_us);
}

/* Reads the next record; false when the rest of the WAL is not flushed yet. */
static bool
dec_read_record(void)
{
	char	   *errm = NULL;
	XLogRecord *record;

	dec_page_private.end_of_wal = false;
	record = XLogReadRecord(dec_ctx->reader, &errm);
	if (errm)
		elog(ERROR, "could not read WAL for logical decoding: %s", errm);
	return record != NULL;
}

/*
 * Where the WAL ends and where decoding is, for the lag gauges.  Records
 * past the last commit that concern no transaction (checkpoints, other
 * databases' changes) move decoding on too: with nothing left to read, it
 * is at the end.
 */
static void
dec_note_position(XLogRecPtr flushed)
{
	DecoderStatus *status = &shape_sync_shared->decoder;
	XLogRecPtr	at = dec_ctx->reader->EndRecPtr;

	atomic_store_explicit(&status->wal_end_lsn, (uint64) Max(flushed, at), memory_order_relaxed);
	if (at >= flushed && !TransactionIdIsValid(dec_held_xid))
	{
		atomic_store_explicit(&status->decoded_lsn, (uint64) at, memory_order_relaxed);
		/*
		 * Every commit before `at` is decoded and, for shapes past their
		 * snapshot, published: the server has seen up to here (see
		 * shape_table.c), although no commit is there.
		 */
		shape_table_note_lsn(shape_sync_shared->table, (uint64) at);
	}
}

/*
 * One batch of fast-forwarding; once it reaches dec_skip_to (or a commit
 * not visible to every snapshot yet), decoding proper starts there.
 */
static bool
dec_skip_step(void)
{
	TimestampTz start = GetCurrentTimestamp();
	XLogRecPtr	stop_at = InvalidXLogRecPtr;
	int			n = 0;

	while (dec_ctx->reader->EndRecPtr < dec_skip_to)
	{
		if (!dec_read_record())
			break;
		if (TransactionIdIsValid(dec_commit_still_running(dec_ctx->reader)))
		{
			stop_at = dec_ctx->reader->ReadRecPtr;	/* decode it, when visible */
			break;
		}
		LogicalDecodingProcessRecord(dec_ctx, dec_ctx->reader);
		if (++n % 1024 == 0)
		{
			CHECK_FOR_INTERRUPTS();
			if (TimestampDifferenceExceeds(start, GetCurrentTimestamp(), DECODER_BATCH_MS))
				break;
		}
	}
	/* skipping is decoding too, for the lag gauges */
	atomic_store_explicit(&shape_sync_shared->decoder.decoded_lsn,
						  (uint64) dec_ctx->reader->EndRecPtr, memory_order_relaxed);
	atomic_store_explicit(&shape_sync_shared->decoder.wal_end_lsn,
						  (uint64) GetFlushRecPtr(NULL), memory_order_relaxed);
	if (stop_at == InvalidXLogRecPtr && dec_ctx->reader->EndRecPtr < dec_skip_to)
	{
		dec_confirm(dec_ctx->reader->EndRecPtr);
		return true;			/* more to skip */
	}
	if (stop_at == InvalidXLogRecPtr)
		stop_at = dec_ctx->reader->EndRecPtr;
	dec_confirm(stop_at);
	stop_at = Max(stop_at, MyReplicationSlot->data.confirmed_flush);
	ReplicationSlotMarkDirty();
	ReplicationSlotSave();
	FreeDecodingContext(dec_ctx);
	dec_ctx = NULL;
	ereport(LOG,
			(errmsg("shape_sync skipped %llu kB of WAL in %lld ms and decodes from %X/%X",
					(unsigned long long) ((stop_at - dec_skip_from) / 1024),
					(long long) ((GetCurrentTimestamp() - dec_skip_started) / 1000),
					LSN_FORMAT_ARGS(stop_at))));
	dec_skip_to = InvalidXLogRecPtr;
	dec_begin_decoding();
	return true;
}

/*
 * Whether the worker is still skipping the WAL written before it started:
 * no shape is made meanwhile (registry.c answers 503), since a commit the
 * skip passes later could be one a new snapshot does not see.
 */
bool
decoder_skipping(void)
{
	/*
	 * Skipping what restored logs hold is no reason to wait: every commit
	 * skipped then was decoded in an earlier life, so it has left the proc
	 * array, and a new snapshot sees it.
	 */
	return dec_skip_to != InvalidXLogRecPtr && !dec_skip_restored;
}

/*
 * The transaction of the commit record just read, when it is still in the
 * proc array: not every snapshot taken now would see it yet.
 */
static TransactionId
dec_commit_still_running(XLogReaderState *reader)
{
	uint8		info = XLogRecGetInfo(reader) & XLOG_XACT_OPMASK;
	xl_xact_parsed_commit parsed;
	TransactionId xid;

	if (XLogRecGetRmid(reader) != RM_XACT_ID ||
		(info != XLOG_XACT_COMMIT && info != XLOG_XACT_COMMIT_PREPARED))
		return InvalidTransactionId;
	ParseCommitRecord(XLogRecGetInfo(reader), (xl_xact_commit *) XLogRecGetData(reader), &parsed);
	xid = TransactionIdIsValid(parsed.twophase_xid) ? parsed.twophase_xid : XLogRecGetXid(reader);
	return TransactionIdIsInProgress(xid) ? xid : InvalidTransactionId;
}

/*
 * Decodes what has been flushed, for at most DECODER_BATCH_MS.  Returns
 * true when it stopped before the flushed end (there is more to read).
 */
bool
decoder_step(void)
{
	XLogRecPtr	flushed = GetFlushRecPtr(NULL);
	TimestampTz start = GetCurrentTimestamp();
	bool		progress = false;
	int			n = 0;
	uint64		batch_mark = shape_stream_batch_mark();
	bool		is_xact;

	if (dec_ctx == NULL)
		return false;
	if (dec_skip_to != InvalidXLogRecPtr)
		return dec_skip_step();
	dec_replay_hook_at = start;	/* the main loop ran just now */
	/* where clauses matched in the batch are held to their deadline */
	eval_deadline_watch();
	while (dec_ctx->reader->EndRecPtr < flushed)
	{
		if (!dec_read_record())
			break;				/* the rest is not flushed yet */
		dec_held_xid = dec_commit_still_running(dec_ctx->reader);
		if (TransactionIdIsValid(dec_held_xid))
		{
			/* read it again next time, when it may have become visible */
			XLogBeginRead(dec_ctx->reader, dec_ctx->reader->ReadRecPtr);
			break;
		}
		is_xact = XLogRecGetRmid(dec_ctx->reader) == RM_XACT_ID;
		if (is_xact)
			catalog_use_historic();
		LogicalDecodingProcessRecord(dec_ctx, dec_ctx->reader);
		progress = true;
		if (shape_stream_recheck_pending())
			break;				/* checks first: see shape_stream.c */
		if (is_xact && shape_stream_write_out_due(batch_mark))
			break;				/* memory first: see shape_stream_log.c */
		if (++n % 256 == 0)
		{
			CHECK_FOR_INTERRUPTS();
			if (TimestampDifferenceExceeds(start, GetCurrentTimestamp(), DECODER_BATCH_MS))
				break;
		}
	}
	eval_deadline_unwatch();
	if (progress)
	{
		dec_confirm(dec_ctx->reader->EndRecPtr);
		ReplicationSlotMarkDirty();
	}
	dec_note_position(flushed);
	return dec_ctx->reader->EndRecPtr < flushed && progress &&
		!TransactionIdIsValid(dec_held_xid);
}

/*
 * One change replayed (the plugin calls this): runs the hook every
 * DECODER_REPLAY_TICK_MS of a long replay.  The clock is read once per 256
 * changes.
 */
void
decoder_replay_tick(void)
{
	TimestampTz now;

	if (dec_replay_hook == NULL || ++dec_replay_changes % 256 != 0)
		return;
	shape_stream_make_room();
	now = GetCurrentTimestamp();
	if (dec_replay_hook_at == 0)
		dec_replay_hook_at = now;
	if (!TimestampDifferenceExceeds(dec_replay_hook_at, now, DECODER_REPLAY_TICK_MS))
		return;
	dec_replay_hook_at = now;
	dec_replay_hook();
}

/* Whether decoding waits for a committed transaction to become visible. */
bool
decoder_holds_commit(void)
{
	return dec_ctx != NULL && TransactionIdIsValid(dec_held_xid);
}

/* Whether WAL has been written that is not flushed yet (async commits). */
bool
decoder_wal_pending(void)
{
	return dec_ctx != NULL && GetXLogInsertRecPtr() > dec_ctx->reader->EndRecPtr;
}

/*
 * The worker exits from inside a replay (decoder_replay_tick): the decoding
 * context is on the stack below, so it is left to process exit (PostgreSQL
 * releases the slot) rather than freed under the reorder buffer.
 */
void
decoder_abandon(void)
{
	dec_ctx = NULL;
}

void
decoder_stop(void)
{
	if (dec_ctx == NULL)
		return;
	FreeDecodingContext(dec_ctx);
	dec_ctx = NULL;
	if (MyReplicationSlot != NULL)
		ReplicationSlotRelease();
}
