/*-------------------------------------------------------------------------
 *
 * shape_stream_log.c
 *		A shape stream's log: stitching, appending, compaction.
 *
 * Stitching.  While a shape's snapshot is being written (by the snapshot
 * worker, the log's writer until then), its transactions are kept in
 * memory.  When the snapshot is done, the stream gets the snapshot's
 * xmin, xmax and xip list (shape_stream_snapshot_done, from the job's
 * segment: snapshot_definition.c), drops the transactions the snapshot already saw, and appends the others; from
 * then on it writes the log itself, still dropping transactions visible
 * to the snapshot until a commit at or past the WAL insert position read
 * just after the snapshot was taken (commit order is not visibility
 * order, so xmax cannot end the check).  Nothing is lost or doubled: a
 * transaction is in the snapshot exactly when it is visible to it, and
 * every transaction decoded before the stream began is visible to the
 * snapshot, because decoder.c decodes a commit only once its transaction
 * has left the proc array.  So is every transaction visible to the
 * snapshot of the main thread's transaction that made the shape
 * (shape_stream_note_creating_snapshot): visibility only grows, and the
 * shape's snapshot is taken later.  Those, and once the snapshot is done
 * those it has, are dropped as they are decoded, not kept until the
 * take-over: a shape made while decoding is behind a big transaction that
 * committed before the request that made it was resolved keeps nothing of
 * it.
 *
 * Appending: each shape's latest message of a transaction is held back
 * (without its closing braces) until the next one, or the commit, says
 * whether it is the last.  Kept transactions are bounded in memory, in
 * all, to a quarter of shape_sync.log_memory (ss_pending_limit); with
 * durable logs the committed ones past that go to a file of the stream's
 * (kept_file.c), stitched on before those in memory.  A log that
 * has grown by shape_sync.compaction_factor since its snapshot or last
 * compaction is compacted between transactions (log_compact.c).
 *
 * Publishing: a commit publishes what its transaction appended, whole
 * (ss_publish_commit), and counts the publishes to logs on disk, which
 * lets the decoder end its batch when memory runs short
 * (shape_stream_write_out_due).  In the middle of a replay, when memory
 * runs short (every 256 changes: shape_stream_make_room) or the arena is
 * full (ss_append), what the transaction appended to logs on disk goes to
 * their files ahead of its commit and leaves memory (ss_write_ahead).
 *
 * Everything here runs on the worker's main thread.
 *
 * IDENTIFICATION
 *	  src/pg/worker/shape_stream_log.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "postmaster/interrupt.h"

#include "guc.h"
#include "kept_file.h"
#include "log_compact.h"
#include "log_files.h"
#include "log_record.h"
#include "log_trim.h"
#include "reader_files.h"

#include "shape_stream_internal.h"

/* ------------------------------------------------------------ stitching */

/* The 64-bit form of an xid at most 2^32 older than `next`. */
static uint64
ss_full_xid_before(FullTransactionId next, TransactionId xid)
{
	uint32		epoch = EpochFromFullTransactionId(next);

	if (xid > XidFromFullTransactionId(next) && epoch > 0)
		epoch--;				/* from before the last wraparound */
	return ((uint64) epoch << 32) | xid;
}

/* The 64-bit form of a recent xid, as pg_current_snapshot() shows it. */
static uint64
ss_full_xid(TransactionId xid)
{
	return ss_full_xid_before(ReadNextFullTransactionId(), xid);
}

/* Whether transaction `xid` is visible to a snapshot. */
bool
ss_visible(const SnapshotVisibility *vis, TransactionId xid)
{
	uint64		full = ss_full_xid(xid);

	if (full < vis->xmin)
		return true;
	if (full >= vis->xmax)
		return false;
	for (int i = 0; i < vis->nxip; i++)
		if (vis->xip[i] == full)
			return false;
	return true;
}

/* What an MVCC snapshot sees, in `context`; `next` was read after it was taken. */
SnapshotVisibility *
ss_visibility_of(Snapshot snapshot, FullTransactionId next, MemoryContext context)
{
	SnapshotVisibility *vis;

	vis = MemoryContextAlloc(context, offsetof(SnapshotVisibility, xip) +
							 sizeof(uint64) * snapshot->xcnt);
	vis->xmin = ss_full_xid_before(next, snapshot->xmin);
	vis->xmax = ss_full_xid_before(next, snapshot->xmax);
	vis->nxip = (int32) snapshot->xcnt;
	for (uint32 i = 0; i < snapshot->xcnt; i++)
		vis->xip[i] = ss_full_xid_before(next, snapshot->xip[i]);
	return vis;
}

void
shape_stream_note_creating_snapshot(uint32 slot, Snapshot snapshot)
{
	ShapeStream *s = &ss_streams[slot];

	Assert(s->in_use && !s->ready && snapshot->snapshot_type == SNAPSHOT_MVCC &&
		   !snapshot->takenDuringRecovery);
	s->creating_visibility = ss_visibility_of(snapshot, ReadNextFullTransactionId(),
											  s->context);
}

void
shape_stream_snapshot_done(uint32 slot, const SnapshotVisibility *visibility)
{
	ShapeStream *s;
	Size		size = offsetof(SnapshotVisibility, xip) + sizeof(uint64) * visibility->nxip;

	if (ss_streams == NULL || !ss_streams[slot].in_use || ss_streams[slot].ready)
		return;
	s = &ss_streams[slot];
	s->snap_visibility = MemoryContextAlloc(s->context, size);
	memcpy(s->snap_visibility, visibility, size);
	s->snapshot_done = true;
}

void
shape_stream_resume_after(uint32 slot, XLogRecPtr lsn)
{
	if (ss_streams != NULL && ss_streams[slot].in_use)
		ss_streams[slot].resume_lsn = lsn;
}

bool
shape_stream_durable(uint32 slot)
{
	const ShapeStream *s;

	if (ss_streams == NULL || !ss_streams[slot].in_use)
		return false;
	s = &ss_streams[slot];
	/* restored and not taken over yet: its log is what its file holds */
	return (s->ready || (s->snapshot_done && s->resume_lsn != 0)) && !s->rotate &&
		ss_subquery_kept_on_disk(s);
}

/* ------------------------------------------------------------ appending */

void
ss_rotate_later(ShapeStream *s, SmRotationCause cause, const char *why)
{
	if (!s->rotate)
	{
		MemoryContext old = MemoryContextSwitchTo(ss_context);

		ereport(LOG,
				(errmsg("shape %s will be rotated: %s", ss_table()->slots[s->slot].handle, why)));
		s->rotate_cause = cause;
		ss_rotating = lappend_int(ss_rotating, (int) s->slot);
		MemoryContextSwitchTo(old);
	}
	s->rotate = true;
}

/*
 * The shape cannot be served as defined: it fails, with a reason and its
 * facts for its clients (refusal.h), and the registry remembers the failure
 * for a while, so that the same definition is not made again at once.
 */
void
ss_fail_later(ShapeStream *s, RefusalReason reason, int64 number, const char *text)
{
	ShapeTable *table = ss_table();
	ShapeSlot  *slot = &table->slots[s->slot];
	char		sentence[REFUSAL_SENTENCE_MAX];

	refusal_failure_sentence(reason, number, text, sentence, sizeof(sentence));
	ss_rotate_later(s, SM_ROTATION_FAILED, sentence);
	if (!s->ready)
		return;					/* the snapshot worker has the slot's state */
	slot->error_reason = reason;
	slot->error_number = number;
	strlcpy(slot->error, text ? text : "", sizeof(slot->error));
	shape_table_set_state(table, s->slot, SHAPE_FAILED);
	shape_table_mark_dirty(table, s->slot);
}

/* the stream whose kept transactions are being stitched on (ss_take_over) */
static ShapeStream *ss_taking_over = NULL;

/*
 * What the transaction being replayed appended to the logs it touched
 * that are on disk goes to their files ahead of its commit, and leaves
 * memory (log_files_write_ahead, log_trim_ahead): a transaction larger
 * than the memory left is published whole only at its commit.  The
 * blocks taken; they come back once their readers moved on.
 */
static uint32
ss_write_ahead(void)
{
	ListCell   *lc;
	uint32		n = 0;

	if (!shape_sync_durable_logs)
		return 0;
	foreach(lc, ss_touched)
	{
		ShapeStream *s = lfirst(lc);

		if (s->ready && !s->rotate && log_files_write_ahead(s->slot))
			n += log_trim_ahead(s->slot);
	}
	/* a take-over: its file may still lack the end of the snapshot */
	if (ss_taking_over != NULL && !ss_taking_over->rotate &&
		log_files_catch_up(ss_taking_over->slot) && log_files_write_ahead(ss_taking_over->slot))
		n += log_trim_ahead(ss_taking_over->slot);
	return n;
}

void
shape_stream_make_room(void)
{
	if (ss_touched != NIL && log_trim_wanted())
	{
		(void) log_trim_give_back();
		(void) ss_write_ahead();
	}
}

/*
 * The arena is full in the middle of transaction `tx`: what ss_write_ahead
 * takes comes back once the HTTP threads that may read those blocks have
 * left their reader sections, which are short (a copy of a piece, or a
 * read of the page cache): waited for up to SS_ROOM_WAIT_MS, once per
 * transaction, so that a transaction whose shapes all find the arena full
 * holds the main thread that long at most.  Whether blocks came back.
 */
#define SS_ROOM_WAIT_MS		100
static bool
ss_make_room_now(int64 tx)
{
	static int64 gave_up_tx = -1;

	if (ss_touched == NIL && ss_taking_over == NULL)
		return false;			/* neither a replay nor a take-over */
	if (ss_write_ahead() == 0 && log_trim_pending_blocks() == 0)
		return false;
	if (log_trim_give_back() > 0)
		return true;
	if (tx == gave_up_tx)
		return false;
	for (int waited = 0; waited < SS_ROOM_WAIT_MS; waited++)
	{
		pg_usleep(1000L);
		if (log_trim_give_back() > 0)
			return true;
	}
	gave_up_tx = tx;
	return false;
}

/* Appends one finished message to the log, closing a chunk when full. */
static void
ss_append(ShapeStream *s, LogOffset offset, const char *data, uint32 len)
{
	ShapeTable *table = ss_table();
	ShapeLog   *log = shape_table_log(table, s->slot);
	SlogResult	res;

	if (s->rotate)
		return;
	res = slog_append(table->arena, log, offset, SLOG_RECORD_CHANGE, data, len);
	while (res == SLOG_FULL && ss_make_room_now(offset.tx))	/* a failed append changed nothing */
		res = slog_append(table->arena, log, offset, SLOG_RECORD_CHANGE, data, len);
	if (res == SLOG_OK && log->open_chunk_bytes >= (uint64) s->threshold)
	{
		res = slog_close_chunk(table->arena, log, offset);
		while (res == SLOG_FULL && ss_make_room_now(offset.tx))
			res = slog_close_chunk(table->arena, log, offset);
	}
	if (res != SLOG_OK)
	{
		ss_rotate_later(s, SM_ROTATION_LOG_FULL, res == SLOG_FULL ? "the shape log memory (\"shape_sync.log_memory\") is full"
						: "the shape's log reached its size limit");
		return;
	}
	s->last = offset;
	s->appended = true;
	atomic_store_explicit(&table->slots[s->slot].changes,
						  atomic_load_explicit(&table->slots[s->slot].changes,
											   memory_order_relaxed) + 1,
						  memory_order_relaxed);
	sm_add(SM_SHAPE_CHANGES, 0, 1);
}

/*
 * The most the snapshotting shapes keep in memory, together, of the
 * transactions decoded meanwhile (ss_pending_total): a quarter of the log
 * memory, which they would go to.  With durable logs, committed ones past
 * it go to kept files (ss_spill_kept); the transaction being decoded, or
 * a file that cannot take them, still rotates the shape past it.
 */
static uint64
ss_pending_limit(void)
{
	/* and under what one allocation may hold: one transaction's buffer */
	return Min((uint64) shape_sync_log_memory * 1024 * 1024 / 4, (uint64) MaxAllocSize / 2);
}

/* A stream's kept changes are gone (used, freed, or not to be kept). */
void
ss_pending_forget(ShapeStream *s)
{
	Assert(ss_pending_total >= s->pending_bytes);
	ss_pending_total -= s->pending_bytes;
	s->pending_bytes = 0;
}

/*
 * An entry of a kept file (kept_file.c): one committed kept transaction,
 * then its problem's text and its records.
 */
typedef struct KeptEntry
{
	TransactionId xid;
	int32		problem_cause;	/* an SmRotationCause, with a problem */
	uint32		problem_len;	/* 0: none */
	uint32		records_len;
} KeptEntry;

/* a kept file is written in pieces of about this much */
#define SS_KEPT_WRITE_BYTES		(1024 * 1024)

/*
 * The committed transactions the stream keeps go to its kept file, in
 * order, a piece of several at a time, and leave memory: each piece's
 * entries leave the list and the counts together once it is written, so
 * that an error while the next is built (memory) leaves nothing counted
 * twice.  When a piece cannot be written (the disk, no descriptor left,
 * or the file would pass the disk budget of the shape logs), the WARNING
 * says why and this shape is rotated: what it keeps is forgotten.
 */
static void
ss_spill_kept(ShapeStream *s)
{
	StringInfoData piece;
	uint64		budget = log_files_data_budget();

	initStringInfo(&piece);
	while (s->pending != NIL)
	{
		int			in_piece = 0;
		uint64		piece_records = 0;
		const char *failed = NULL;
		int			failed_errno = 0;
		ListCell   *lc;

		resetStringInfo(&piece);
		foreach(lc, s->pending)
		{
			PendingTxn *txn = lfirst(lc);
			KeptEntry	entry = {txn->xid, (int32) txn->problem_cause,
								 txn->problem ? (uint32) strlen(txn->problem) : 0,
								 (uint32) txn->records.len};

			appendBinaryStringInfo(&piece, (const char *) &entry, sizeof(entry));
			if (entry.problem_len > 0)
				appendBinaryStringInfo(&piece, txn->problem, entry.problem_len);
			appendBinaryStringInfo(&piece, txn->records.data, txn->records.len);
			in_piece++;
			piece_records += txn->records.len;
			if (piece.len >= SS_KEPT_WRITE_BYTES)
				break;
		}
		if (budget > 0 && s->kept.size + piece.len > budget)
			failed = "it would pass the disk budget of the shape logs (\"shape_sync.log_disk_budget\")";
		else
		{
			const void *parts[1] = {piece.data};
			size_t		lens[1] = {(size_t) piece.len};

			if (!kept_file_append(&s->kept, parts, lens, 1))
			{
				failed = "%m";
				failed_errno = errno;
			}
		}
		if (failed != NULL)
		{
			char	   *why;

			errno = failed_errno;
			why = strcmp(failed, "%m") == 0 ?
				psprintf("could not keep on disk what its snapshot may not have, in \"%s\": %m", LOG_FILES_DIR) :
				psprintf("could not keep on disk what its snapshot may not have: %s", failed);
			errno = failed_errno;
			ereport(WARNING,
					(failed_errno != 0 ? errcode_for_file_access() : errcode(ERRCODE_DISK_FULL),
					 errmsg("shape %s will be rotated: %s", ss_table()->slots[s->slot].handle, why)));
			ss_rotate_later(s, SM_ROTATION_LOG_FULL, why);
			ss_pending_forget(s);
			break;
		}
		/* nothing below raises an error */
		Assert(s->pending_bytes >= piece_records);
		s->pending_bytes -= piece_records;
		ss_pending_total -= piece_records;
		for (int i = 0; i < in_piece; i++)
			ss_free_pending(list_nth(s->pending, i));
		s->pending = list_delete_first_n(s->pending, in_piece);
	}
	pfree(piece.data);
}

/*
 * Memory's bound on kept transactions is reached: with durable logs, the
 * committed ones of every snapshotting stream go to their kept files.
 * Those of the transaction being decoded stay: one transaction alone past
 * the bound still rotates its shapes, whose next snapshot has it (the
 * snapshot of the making of a shape does: ss_touch).
 */
static void
ss_spill_kept_all(void)
{
	ListCell   *lc;

	foreach(lc, ss_snapshotting)
	{
		ShapeStream *s = &ss_streams[lfirst_int(lc)];

		/* a rotating one is dropped at the next maintain: not worth a file */
		if (s->in_use && !s->ready && !s->rotate && s->pending != NIL)
			ss_spill_kept(s);
	}
}

/* A finished message goes to the log, or to the pending transaction. */
void
ss_emit(ShapeStream *s, LogOffset offset, const char *data, uint32 len)
{
	if (s->ready && !ss_holding(s))
	{
		ss_append(s, offset, data, len);
		return;
	}
	if (s->rotate)
		return;
	if (ss_pending_total + sizeof(offset) + sizeof(len) + len > ss_pending_limit() &&
		shape_sync_durable_logs)
	{
		ss_spill_kept_all();
		if (s->rotate)
			return;				/* its own file failed it */
	}
	if (ss_pending_total + sizeof(offset) + sizeof(len) + len > ss_pending_limit())
	{
		/* bounded: the shape starts over once the changes have committed */
		ss_rotate_later(s, SM_ROTATION_LOG_FULL, psprintf("the changes kept while snapshots are taken exceed %llu MB (a quarter of \"shape_sync.log_memory\")",
									(unsigned long long) (ss_pending_limit() >> 20)));
		ss_pending_forget(s);
		return;
	}
	s->pending_bytes += sizeof(offset) + sizeof(len) + len;
	ss_pending_total += sizeof(offset) + sizeof(len) + len;
	appendBinaryStringInfo(&s->txn_pending->records, (const char *) &offset, sizeof(offset));
	appendBinaryStringInfo(&s->txn_pending->records, (const char *) &len, sizeof(len));
	appendBinaryStringInfo(&s->txn_pending->records, data, len);
}

/* Finishes the held message, as the transaction's last or not. */
void
ss_release_held(ShapeStream *s, bool last)
{
	if (!s->has_held)
		return;
	appendStringInfoString(&s->held, log_record_end(last));
	ss_emit(s, s->held_offset, s->held.data, (uint32) s->held.len);
	resetStringInfo(&s->held);
	s->has_held = false;
}

void
ss_free_pending(PendingTxn *txn)
{
	ListCell   *lc;

	pfree(txn->records.data);
	if (txn->records_before.data != NULL)
		pfree(txn->records_before.data);
	foreach(lc, txn->moved_out)
	{
		StringInfo	key = lfirst(lc);

		pfree(key->data);
		pfree(key);
	}
	list_free(txn->moved_out);
	if (txn->problem != NULL)
		pfree(txn->problem);
	pfree(txn);
}

/* First change of the transaction for this shape. */
bool
ss_touch(ShapeStream *s)
{
	MemoryContext old;

	if (s->touched)
		return !s->skip_txn;
	s->touched = true;
	s->skip_txn = false;
	s->appended = false;
	old = MemoryContextSwitchTo(ss_context);
	ss_touched = lappend(ss_touched, s);
	MemoryContextSwitchTo(old);
	if (s->ready && ss_lsn < s->resume_lsn)
		s->skip_txn = true;		/* restored with it (log_restore.c) */
	else if (s->ready && s->filtering)
	{
		/*
		 * Commit order is not visibility order (a commit record is written
		 * before its transaction becomes visible): every commit before
		 * the snapshot's insert position is checked, none after it.
		 */
		if (ss_lsn >= s->snap_lsn)
			s->filtering = false;
		else if (ss_visible(s->snap_visibility, ss_xid))
			s->skip_txn = true;
	}
	else if (!s->ready)
	{
		/* what the snapshot is known to have is not kept */
		const SnapshotVisibility *known = s->snapshot_done ? s->snap_visibility :
			s->creating_visibility;

		if (known != NULL && ss_visible(known, ss_xid))
			s->skip_txn = true;
	}
	if ((!s->ready || ss_holding(s)) && !s->skip_txn)
	{
		old = MemoryContextSwitchTo(s->context);
		s->txn_pending = palloc0(sizeof(PendingTxn));
		s->txn_pending->xid = ss_xid;
		initStringInfo(&s->txn_pending->records);
		MemoryContextSwitchTo(old);
	}
	return !s->skip_txn;
}

/* Queues a message (without its closing braces) at op position `op`. */
bool		ss_old_view = false;


/* The held message of the view as if the move-in had not happened. */
void
ss_release_held_before(ShapeStream *s, bool last)
{
	if (!s->has_held_before)
		return;
	s->has_held_before = false;
	appendStringInfoString(&s->held_before, log_record_end(last));
	ss_emit_before(s, s->held_before_offset, s->held_before.data, (uint32) s->held_before.len);
	resetStringInfo(&s->held_before);
}

/* A finished record of the view as if the move-in had not happened. */
void
ss_emit_before(ShapeStream *s, LogOffset offset, const char *data, uint32 len)
{
	PendingTxn *txn = s->txn_pending;
	MemoryContext old;

	if (txn == NULL || s->rotate)
		return;
	old = MemoryContextSwitchTo(s->context);
	if (txn->records_before.data == NULL)
		initStringInfo(&txn->records_before);
	MemoryContextSwitchTo(old);
	s->pending_bytes += sizeof(offset) + sizeof(len) + len;
	ss_pending_total += sizeof(offset) + sizeof(len) + len;
	appendBinaryStringInfo(&txn->records_before, (const char *) &offset, sizeof(offset));
	appendBinaryStringInfo(&txn->records_before, (const char *) &len, sizeof(len));
	appendBinaryStringInfo(&txn->records_before, data, len);
}

void
ss_message(ShapeStream *s, uint64 op, StringInfo msg)
{
	LogOffset	offset = {(int64_t) ss_lsn, op};
	MemoryContext old = MemoryContextSwitchTo(s->context);

	if (ss_old_view)
	{
		if (s->held_before.data == NULL)
			initStringInfo(&s->held_before);
		ss_release_held_before(s, false);
		appendBinaryStringInfo(&s->held_before, msg->data, msg->len);
		s->held_before_offset = offset;
		s->has_held_before = true;
		MemoryContextSwitchTo(old);
		return;
	}

	ss_release_held(s, false);
	appendBinaryStringInfo(&s->held, msg->data, msg->len);
	s->held_offset = offset;
	s->has_held = true;
	MemoryContextSwitchTo(old);
}

/* ---------------------------------------------------------- maintenance */

/* Appends a kept transaction's records: (LogOffset, uint32 len, bytes)*. */
static void
ss_append_records(ShapeStream *s, const char *p, uint64 len)
{
	const char *end = p + len;

	while (p < end)
	{
		LogOffset	offset;
		uint32		n;

		memcpy(&offset, p, sizeof(offset));
		memcpy(&n, p + sizeof(offset), sizeof(n));
		ss_append(s, offset, p + sizeof(offset) + sizeof(n), n);
		p += sizeof(offset) + sizeof(n) + n;
		if (log_trim_wanted())
		{
			/* as in a replay (shape_stream_make_room): the log leaves memory for its file */
			(void) log_trim_give_back();
			(void) ss_write_ahead();
		}
	}
}

/*
 * The kept transactions on disk (ss_spill_kept) are appended, in order,
 * those the snapshot has left out.  As memory runs short, what the log
 * holds goes to its file and leaves memory (ss_append_records; the file
 * first takes what it lacks of the snapshot), as in the middle of a
 * transaction's replay: a take-over is published only at its end, no
 * round lists the shape before, and a crash before drops the shape.  The
 * main thread does it at once, so decoding waits meanwhile, as for a
 * compaction.  Then the file goes.
 */
static void
ss_take_over_kept_file(ShapeStream *s)
{
	uint64		pos = 0;
	char	   *buf = NULL;
	size_t		cap = 0;

	while (pos < s->kept.size && !s->rotate)
	{
		KeptEntry	entry;
		size_t		need;

		if (!kept_file_read(&s->kept, pos, &entry, sizeof(entry)))
			break;
		pos += sizeof(entry);
		need = (size_t) entry.problem_len + entry.records_len;
		if (need > cap)
		{
			if (buf != NULL)
				pfree(buf);
			buf = palloc(need);
			cap = need;
		}
		if (!kept_file_read(&s->kept, pos, buf, need))
			break;
		pos += need;
		if (ss_visible(s->snap_visibility, entry.xid))
			continue;
		if (entry.problem_len > 0)
		{
			ss_rotate_later(s, (SmRotationCause) entry.problem_cause,
							pnstrdup(buf, entry.problem_len));
			break;
		}
		ss_append_records(s, buf + entry.problem_len, entry.records_len);
	}
	if (pos < s->kept.size && !s->rotate)
		ss_rotate_later(s, SM_ROTATION_FAILED,
						psprintf("could not read back what was kept on disk while its snapshot was taken: %m"));
	if (buf != NULL)
		pfree(buf);
	kept_file_close(&s->kept);
}

/*
 * Appends the kept transactions a snapshot did not see, in order; one kept
 * with a problem rotates the stream instead, and ends the appending.
 */
static void
ss_append_unseen(ShapeStream *s, const SnapshotVisibility *seen)
{
	ListCell   *lc;

	foreach(lc, s->pending)
	{
		PendingTxn *txn = lfirst(lc);

		if (s->rotate)
			break;
		if (ss_visible(seen, txn->xid))
			continue;
		if (txn->problem != NULL)
		{
			ss_rotate_later(s, txn->problem_cause, txn->problem);
			break;
		}
		ss_append_records(s, txn->records.data, txn->records.len);
	}
}

/* The kept transactions go, and their bytes from the bound's count. */
static void
ss_drop_pending(ShapeStream *s)
{
	ListCell   *lc;

	foreach(lc, s->pending)
		ss_free_pending(lfirst(lc));
	list_free(s->pending);
	s->pending = NIL;
	ss_pending_forget(s);
}

/* The snapshot is done: stitch the kept transactions on, take the pen. */
void
ss_take_over(ShapeStream *s)
{
	ShapeTable *table = ss_table();
	ShapeLog   *log = shape_table_log(table, s->slot);
	SlogPublished pub;

	slog_read_published(log, &pub);
	s->snap_lsn = table->slots[s->slot].snapshot_lsn;
	if (s->creating_visibility != NULL)
	{
		pfree(s->creating_visibility);
		s->creating_visibility = NULL;
	}

	s->ready = true;
	s->filtering = true;
	s->last = pub.last;
	s->appended = false;
	{
		/*
		 * Now its table must log old rows in full: look once, at this
		 * stream alone (checking every stream of the table for each new
		 * one made creating N shapes cost N^2 checks).
		 */
		MemoryContext old = MemoryContextSwitchTo(ss_context);

		ss_check_slots = lappend_int(ss_check_slots, (int) s->slot);
		MemoryContextSwitchTo(old);
	}
	/* the kept transactions on disk came first, then those in memory */
	ss_taking_over = s;
	if (s->kept.fd >= 0)
		ss_take_over_kept_file(s);
	ss_append_unseen(s, s->snap_visibility);
	ss_taking_over = NULL;
	ss_drop_pending(s);
	if (s->appended)
		shape_table_note_published(table, s->slot);	/* covered by the publish */
	/*
	 * Readers past the snapshot waited for this (snapshot_worker.c): wake them.  A
	 * stream that could not take its kept transactions is rotated instead
	 * (its readers then get 409), never published as complete.
	 */
	if (!s->rotate)
		slog_publish(log, s->last, SLOG_SNAPSHOT_DONE);
	shape_table_mark_dirty(table, s->slot);
	s->appended = false;
	s->compacted_bytes = Max(shape_table_log(table, s->slot)->write_pos, 1);
}

/*
 * chunk_closed of a compaction of a log that left memory: what the copy
 * gained, to the shape's next generation, then out of memory when memory
 * is short (the copy is not published: no reader).
 */
static bool
ss_compaction_chunk_closed(void *arg, ShapeLog *out)
{
	const char *path;

	if (ShutdownRequestPending)
		return false;			/* the worker stops: not for this */
	path = log_files_compaction_write(out);
	if (path == NULL)
		return false;
	log_trim_loading(out, path, out->write_pos);
	return true;
}

/*
 * Compacts the shape's log once it has grown to shape_sync.compaction_factor
 * times its size after the snapshot or the last compaction (log_compact.c):
 * each byte appended is rewritten a bounded number of times.  Between
 * transactions, on the main thread, the log's writer.
 *
 * A log that left memory for its file is read from there, and its copy is
 * written to the shape's next generation as it is built, its chunks taken
 * out of memory when memory is short, as a snapshot's are
 * (log_files_compaction_begin); a shape whose files failed is not
 * compacted once its log left memory.  The bookkeeping (malloc) may take
 * about maintenance_work_mem or shape_sync.log_memory, whichever is larger
 * (for logs in memory too).  Past that, or when a file
 * cannot be read or written, or when the worker is asked to stop, it is
 * tried again after as much growth.  The previous generation's file then
 * stays while responses still read the previous log (log_files_replaced).
 * The worker's main thread does all of it, so decoding waits meanwhile:
 * the time is linear in the log (docs/storage.md).  A stop is obeyed as
 * the copy's chunks close, after the passes that read the whole log.
 */
static void
ss_maybe_compact(ShapeStream *s)
{
	ShapeTable *table = ss_table();
	ShapeLog   *log = shape_table_log(table, s->slot);
	ShapeLog   *spare;
	SlogCompactOptions options;
	SlogCompactStats stats;
	SlogCompactResult res;
	TimestampTz started;
	bool		on_disk;

	/* a shape with subqueries is not compacted: its events name no key */
	if (shape_sync_compaction_factor <= 0 || s->compacted_bytes == 0 || s->subquery != NULL ||
		log->write_pos < COMPACTION_MIN_BYTES ||
		(double) log->write_pos < shape_sync_compaction_factor * (double) s->compacted_bytes)
		return;
	spare = shape_table_spare_log(table, s->slot);
	if (spare == NULL)
		return;					/* responses still read the previous one */
	on_disk = slog_mem_start(log) > 0;
	options = slog_compact_defaults((uint32) s->threshold);
	options.max_work_bytes = Max((uint64) maintenance_work_mem << 10,
								 (uint64) shape_sync_log_memory << 20);
	if (on_disk)
	{
		/* only into a file of its own (a failed shape's file is all its log has) */
		if (!log_files_compaction_begin(s->slot))
		{
			shape_table_drop_spare_log(table, s->slot);
			s->compacted_bytes = log->write_pos;	/* try again after as much growth */
			return;
		}
		options.chunk_closed = ss_compaction_chunk_closed;
	}
	started = GetCurrentTimestamp();
	res = slog_compact(table->arena, log, spare, &options, &stats);
	if (on_disk)
		reader_files_let_go_mine(); /* read from its file: not kept open */
	if (res != SLOG_COMPACT_OK)
	{
		log_files_compaction_abandon();
		shape_table_drop_spare_log(table, s->slot);
		if (res == SLOG_COMPACT_UNREADABLE)
		{
			ereport(WARNING,
					(errmsg("shape %s cannot be compacted: its log holds a record it did not expect",
							table->slots[s->slot].handle)));
			s->compacted_bytes = 0;
			return;
		}
		if (res == SLOG_COMPACT_READ_FAILED)
		{
			errno = stats.read_error;
			ereport(WARNING,
					(errcode_for_file_access(),
					 errmsg("shape %s was not compacted: could not read file \"%s\": %m",
							table->slots[s->slot].handle, log->file_path),
					 errdetail("It is tried again once its log has grown as much again.")));
		}
		else if (res == SLOG_COMPACT_TOO_LARGE && !s->compaction_refused)
		{
			s->compaction_refused = true;
			ereport(LOG,
					(errmsg("shape %s is not compacted: its log has more records than compaction may keep track of",
							table->slots[s->slot].handle),
					 errdetail("Compaction keeps about 64 bytes per record in memory, at most \"%s\" or \"%s\", whichever is larger (%llu MB); this log of %llu bytes needs more.",
							   "maintenance_work_mem", "shape_sync.log_memory",
							   (unsigned long long) (options.max_work_bytes >> 20),
							   (unsigned long long) log->write_pos),
					 errhint("Raise \"%s\" for the server above %llu MB, or set \"%s\" lower so that logs are compacted before they grow this large.",
							 "maintenance_work_mem",
							 (unsigned long long) (options.max_work_bytes >> 20),
							 "shape_sync.compaction_factor")));
		}
		s->compacted_bytes = log->write_pos;	/* try again after as much growth */
		return;
	}
	shape_table_swap_log(table, s->slot);
	atomic_fetch_add_explicit(&table->slots[s->slot].compactions, 1, memory_order_relaxed);
	log_files_replaced(s->slot, on_disk);	/* after the count: it waits for the next */
	sm_add(SM_COMPACTIONS, 0, 1);
	s->compacted_bytes = Max(stats.bytes_out, 1);
	ereport(DEBUG1,
			(errmsg_internal("shape %s compacted from %llu to %llu bytes (%llu of %llu records, %llu tombstones, %s, %llu bytes of bookkeeping) in %lld ms",
							 table->slots[s->slot].handle,
							 (unsigned long long) stats.bytes_in,
							 (unsigned long long) stats.bytes_out,
							 (unsigned long long) stats.records_out,
							 (unsigned long long) stats.records_in,
							 (unsigned long long) stats.tombstones,
							 on_disk ? "read from its file" : "in memory",
							 (unsigned long long) stats.work_bytes,
							 (long long) ((GetCurrentTimestamp() - started) / 1000))));
}

/* ------------------------------------------------------------ publishing */

/*
 * Publishes to logs on disk, counted: the decoder's batch mark.  A batch
 * of small transactions can append more than the log memory has free
 * before the main loop writes what the logs gained to their files and
 * trims it (log_trim.c), and a log that finds the arena full is rotated.
 * So decoding ends its batch at a transaction's end once a trim is due and
 * such a log grew in the batch, and the main loop writes and trims before
 * it decodes on.
 */
static uint64 ss_disk_publishes;

/*
 * The commit of a transaction that appended to the stream's log: published
 * whole, marked for its clients and its file, and compacted when it grew
 * enough.
 */
void
ss_publish_commit(ShapeStream *s)
{
	ShapeTable *table = ss_table();

	shape_table_note_published(table, s->slot);	/* covered by the publish */
	slog_publish(shape_table_log(table, s->slot), s->last, SLOG_SNAPSHOT_DONE);
	shape_table_mark_dirty(table, s->slot);
	if (shape_sync_durable_logs && shape_stream_durable(s->slot))
		ss_disk_publishes++;
	ss_maybe_compact(s);
}

uint64
shape_stream_batch_mark(void)
{
	return ss_disk_publishes;
}

bool
shape_stream_write_out_due(uint64 batch_mark)
{
	return ss_disk_publishes != batch_mark && log_trim_due();
}

/* ------------------------------------------------------------- move-ins */

/*
 * The move-in's rows are in and decoding is past every commit their
 * snapshot saw.  The kept transactions were encoded twice: as if the rows
 * had come, and as if the move-in had not happened.  Those the snapshot
 * saw go first, the second way (the rows hold their effects), then the
 * event, the rows and their snapshot-end, then the others, the first way.
 * Should one the snapshot saw come after one it did not see (commit order
 * is not visibility order), the shape rotates.
 */
void
ss_move_in_splice(ShapeStream *s)
{
	SsMoveIn   *m = s->moving;
	ListCell   *lc;
	LogOffset	at;
	const char *p;
	const char *end;
	StringInfoData event;
	bool		unseen = false;
	List	   *gone = NIL;

	foreach(lc, s->pending)
	{
		PendingTxn *txn = lfirst(lc);
		bool		seen = ss_visible(m->visibility, txn->xid);

		if (seen && unseen)
		{
			ss_rotate_later(s, SM_ROTATION_MOVE_IN,
							"its move-in's snapshot saw a transaction that committed after one it did not see");
			break;
		}
		unseen = unseen || !seen;
	}
	/* those the snapshot saw; the values they moved out again are not in the event */
	foreach(lc, s->pending)
	{
		PendingTxn *txn = lfirst(lc);

		if (s->rotate || !ss_visible(m->visibility, txn->xid))
			break;
		gone = list_concat(gone, txn->moved_out);
		if (txn->problem != NULL)
		{
			ss_rotate_later(s, txn->problem_cause, txn->problem);
			break;
		}
		if (txn->records_before.data != NULL)
			ss_append_records(s, txn->records_before.data, txn->records_before.len);
	}
	/*
	 * The event, the rows, their end: after what the log has (a log with
	 * nothing since its snapshot ends at the snapshot's end, past every op
	 * of offset 0) and after the moving transaction's records.
	 */
	at = log_offset_max(s->last, m->after);
	initStringInfo(&event);
	ss_move_in_event(s, gone, &event);
	at.op++;
	if (!s->rotate)
		ss_append(s, at, event.data, (uint32) event.len);
	pfree(event.data);
	p = m->answer.data;
	end = p + m->answer.len;
	while (p < end && !s->rotate)
	{
		uint32		n;

		memcpy(&n, p, sizeof(n));
		p += sizeof(n);
		at.op++;
		ss_append(s, at, p, n);
		p += n;
	}
	/* those it did not see */
	ss_append_unseen(s, m->visibility);
	list_free(gone);
	ss_drop_pending(s);
	ss_move_in_forget(s);
	if (!s->rotate && s->appended)
		ss_publish_commit(s);
	s->appended = false;
}
