/*-------------------------------------------------------------------------
 *
 * snapshot_pool.h
 *		The snapshot pool, as the main thread runs it: shapes' snapshot
 *		jobs queued, launched, staffed, cancelled and reaped.
 *
 * IDENTIFICATION
 *	  src/pg/worker/snapshot_pool.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SHAPE_SYNC_SNAPSHOT_POOL_H
#define SHAPE_SYNC_SNAPSHOT_POOL_H

#include "postgres.h"

#include "shape_def.h"
#include "shape_table.h"
#include "snapshot_definition.h"

/* The main worker starts: nothing queued; earlier snapshots are cancelled. */
extern void snapshot_pool_start(uint32 nslots);
extern void snapshot_pool_stop(void);

/*
 * A new shape's snapshot waits for its turn.  spec and fingerprint stay
 * the caller's and must live until snapshot_pool_forget(slot).
 */
extern void snapshot_pool_queue(uint32 slot, uint32 generation, Oid role,
								bool manage_replica_identity, const ShapeSpec *spec,
								const char *fingerprint);

/* The shape is dropped: its snapshot, queued or launched, is not the pool's any more. */
extern void snapshot_pool_forget(uint32 slot);

/* Whether the shape's snapshot job was queued for the workers. */
extern bool snapshot_pool_launched(uint32 slot);

/*
 * Queues the waiting snapshots for the workers, oldest first, and staffs
 * them.
 */
extern void snapshot_pool_launch(void);

/*
 * For each launched snapshot that ended since: `ended` with its shape's
 * state (READY, FAILED, or RETIRED) and, when READY, its visibility.
 */
typedef void (*SnapshotPoolEnded) (uint32 slot, ShapeState state,
								   const SnapshotVisibility *visibility);
extern void snapshot_pool_reap(SnapshotPoolEnded ended);

/* Wakes or starts workers for the queued jobs (shapes' and subsets'). */
extern void snapshot_pool_staff(void);

/* Cancels the snapshot of a shape that was dropped. */
extern void snapshot_pool_cancel(uint32 slot, uint32 generation);
extern void snapshot_pool_cancel_all(void);

#endif							/* SHAPE_SYNC_SNAPSHOT_POOL_H */
