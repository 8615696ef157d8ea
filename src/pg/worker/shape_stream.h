/*-------------------------------------------------------------------------
 *
 * shape_stream.h
 *		Decoded changes into shape logs: matching, stitching, appending.
 *
 * IDENTIFICATION
 *	  src/pg/worker/shape_stream.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SHAPE_STREAM_H
#define SHAPE_STREAM_H

#include "postgres.h"

#include "replication/reorderbuffer.h"
#include "utils/rel.h"
#include "utils/snapshot.h"

#include "server_metrics.h"
#include "shape_def.h"
#include "snapshot_definition.h"
#include "subset_results.h"

/* Registry hooks: a shape's stream lives as long as the shape. */
extern void shape_stream_add(uint32 slot, uint32 generation, const ShapeSpec *spec,
							 int chunk_threshold);
extern void shape_stream_check_when_replayed(uint32 slot);
extern void shape_stream_catalog_changed(void);
extern void shape_stream_remove(uint32 slot);

/*
 * A new shape (not a restored one: its log lacks what came after its
 * durable point) was made in a transaction whose MVCC snapshot is
 * `snapshot`: its own snapshot, taken later, sees all that one sees.
 */
extern void shape_stream_note_creating_snapshot(uint32 slot, Snapshot snapshot);

/*
 * The shape's snapshot is READY, and saw what `visibility` says: the
 * stream takes the log over at the next maintain (shape_stream_log.c).
 */
extern void shape_stream_snapshot_done(uint32 slot, const SnapshotVisibility *visibility);

/* A move-in's query ended (subset_jobs.c): its answer, or why not. */
extern void shape_stream_move_in_answered(uint32 slot, uint32 generation, const ShapeLog *answer,
										  const SubsetOutcome *outcome);
extern void shape_stream_move_in_failed(uint32 slot, uint32 generation);
extern bool shape_stream_moves_waiting(void);

/*
 * A shape restored from disk (log_restore.c): commits before `lsn` are in
 * its log already, and are skipped when the WAL is decoded again.
 */
extern void shape_stream_resume_after(uint32 slot, XLogRecPtr lsn);

/*
 * Whether the stream writes the shape's log and will go on doing so, and
 * a restart could restore it now (with subqueries: no move-in in flight,
 * its value sets on disk as of the log's end).
 */
extern bool shape_stream_durable(uint32 slot);

/*
 * The value sets of subqueries on disk (shape_stream_sets_disk.c): at each
 * round of the shape logs' files (log_rounds.c), first the sets read since
 * the last one that decoding has caught up with are kept on disk too
 * (_settle); then what the round is to write of the value sets file
 * (_round), which the manifest names; then whether it did (_round_done:
 * `manifest_untouched` when it failed before its manifest was written),
 * or that it was not handed to the flusher after all (_round_cancel).
 * _take_obsolete returns, one by one, the generations no manifest names
 * now, or 0.
 */
typedef struct ShapeStreamSetsRound
{
	char	   *bytes;			/* malloc'd, or NULL: nothing to write */
	size_t		len;
	uint64		at;				/* where they go in the file */
	bool		create;			/* a new generation, from its start */
	uint32		generation;		/* the file's, for the manifest (0: none) */
	uint64		length;			/* its length once written, for the manifest */
} ShapeStreamSetsRound;

extern void shape_stream_sets_settle(XLogRecPtr decoded);
extern void shape_stream_sets_round(ShapeStreamSetsRound *round);
extern void shape_stream_sets_round_done(bool ok, bool manifest_untouched);
extern void shape_stream_sets_round_cancel(ShapeStreamSetsRound *round);
extern uint32 shape_stream_sets_take_obsolete(void);
/* The next round writes the file whole, as a new generation (one written unsynced). */
extern void shape_stream_sets_write_whole(void);

/*
 * At start: the value sets file as the manifest names it (bytes from
 * log_restore.c, or NULL), read so that restored shapes with subqueries
 * get their sets from it, as of `durable`; _end frees what was not used.
 */
extern void shape_stream_sets_restore_begin(const char *bytes, size_t len, uint32 generation,
											XLogRecPtr durable);
extern void shape_stream_sets_restore_end(void);
/* Why a restored shape's subqueries can no longer be followed, or NULL. */
extern const char *shape_stream_restored_problem(uint32 slot);

/* Decoding callbacks; main thread, inside the decoding transaction. */
extern bool shape_stream_wants(Oid relid);
extern uint64 shape_stream_take_freed_bytes(void);
extern void shape_stream_begin(TransactionId xid, XLogRecPtr commit_lsn);
extern void shape_stream_change(Relation rel, ReorderBufferChange *change);
extern void shape_stream_truncate(int nrelations, Relation *relations);
extern void shape_stream_commit(void);

/* How the stream has a shape rotated: the registry's registry_rotate. */
typedef void (*ShapeStreamRotate) (uint32 slot, SmRotationCause cause);

/*
 * Main loop, outside transactions: the streams of finished snapshots take
 * their logs over, and shapes are rotated whose table was truncated, dropped or
 * altered.
 */
extern void shape_stream_maintain(ShapeStreamRotate rotate);
extern void shape_stream_maintain_during_replay(void);

/* Check every shape's table and privileges at the next maintain. */
extern void shape_stream_recheck_all(void);

/*
 * Whether an invalidation asked for checks since the last maintain: the
 * decoder ends its batch there, so the checks run before what follows.
 */
extern bool shape_stream_recheck_pending(void);

/*
 * Whether the decoder ends its batch at this transaction's end: the log
 * memory runs short (a trim is due) and logs on disk grew since
 * `batch_mark`, shape_stream_batch_mark() at the batch's start, so the main
 * loop writes what they gained to their files and takes it out of memory
 * before decoding on (shape_stream_log.c).
 */
extern uint64 shape_stream_batch_mark(void);
extern bool shape_stream_write_out_due(uint64 batch_mark);

/*
 * In the middle of a transaction's replay (the decoder calls it every 256
 * changes): when memory runs short, what the transaction appended to logs
 * on disk goes to their files ahead of its commit and leaves memory.
 */
extern void shape_stream_make_room(void);

#endif							/* SHAPE_STREAM_H */
