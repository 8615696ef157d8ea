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

/* Whether the stream writes the shape's log and will go on doing so. */
extern bool shape_stream_durable(uint32 slot);
/* Whether the shape is of a kind whose log is kept on disk (none with subqueries yet). */
extern bool shape_stream_kept_on_disk(uint32 slot);

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
