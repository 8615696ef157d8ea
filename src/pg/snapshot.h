/*-------------------------------------------------------------------------
 *
 * snapshot.h
 *		Initial snapshots of shapes, taken by a pool of background workers.
 *
 * IDENTIFICATION
 *	  src/pg/snapshot.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SHAPE_SYNC_SNAPSHOT_H
#define SHAPE_SYNC_SNAPSHOT_H

#include "postgres.h"

#include "lib/stringinfo.h"
#include "postmaster/bgworker.h"
#include "storage/dsm.h"

#include "shape_def.h"
#include "shape_role.h"

/* Receives each encoded snapshot message. */
typedef void (*SnapshotEmit) (void *arg, const char *message, int len);

/* One sort key of a subset query. */
typedef struct SnapshotOrder
{
	AttrNumber	attnum;
	bool		descending;
	bool		nulls_first;
} SnapshotOrder;

/* What a subset query adds to its shape's query (subset_query.c). */
typedef struct SnapshotSubset
{
	Node	   *where;			/* ANDed with the shape's; NULL: none */
	int			norder;
	SnapshotOrder *order;
	int64		limit;			/* -1: none */
	int64		offset;			/* 0: none */
	uint32		snapshot_mark;	/* in every row's headers */
} SnapshotSubset;

/*
 * Runs the shape's query in the current transaction, encoding every row;
 * with `subset`, the subset's query instead.
 */
extern void snapshot_scan(const ShapeSpec *spec, const SnapshotSubset *subset,
						  SnapshotEmit emit, void *arg);

/* pg_current_snapshot()::text of the active snapshot, and as JSON members. */
extern char *snapshot_current_text(void);
extern void snapshot_visibility_json(StringInfo buf, const char *snapshot);

/* A snapshot's transaction, and what it checks of its shape (snapshot.c). */
extern char *snapshot_begin(Oid role, const char *activity, int timeout_ms,
							ShapeRoleSaved *saved, uint64 *insert_lsn);
extern void snapshot_end(const ShapeRoleSaved *saved);

/*
 * First thing in a job's PG_CATCH: whether the per-row deadline on the
 * where clause (shape_sync.where_evaluation_timeout) ended the scan.
 */
extern bool snapshot_deadline_caught(void);
extern void snapshot_check_shape(const ShapeSpec *spec, const char *fingerprint, Oid role,
								 const char *relation);

/* After an error in a job: what a backend's error recovery does. */
extern void snapshot_worker_recover(void);

/*
 * The shape's definition in a new DSM segment, for the worker that takes
 * its snapshot: the caller keeps the segment until the shape is no longer
 * SNAPSHOTTING, and puts its handle in the job it queues
 * (snapshot_jobs.c).
 */
extern dsm_segment *snapshot_definition_create(const ShapeSpec *spec, const char *fingerprint,
											   int chunk_threshold);

/* Main thread: wakes or starts workers for the queued jobs. */
extern void snapshot_pool_staff(void);

/* Main thread: cancels the snapshot of a shape that was dropped. */
extern void snapshot_pool_cancel(uint32 slot, uint32 generation);
extern void snapshot_pool_cancel_all(void);

extern PGDLLEXPORT void shape_sync_snapshot_main(Datum arg);

#endif							/* SHAPE_SYNC_SNAPSHOT_H */
