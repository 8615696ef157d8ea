/*-------------------------------------------------------------------------
 *
 * snapshot_worker.h
 *		A worker of the snapshot pool: takes shapes' snapshots and subset
 *		queries, one job after the other.
 *
 * IDENTIFICATION
 *	  src/pg/snapshot/snapshot_worker.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SHAPE_SYNC_SNAPSHOT_WORKER_H
#define SHAPE_SYNC_SNAPSHOT_WORKER_H

#include "postgres.h"

/* What bgw_extra carries (snapshot_pool.c starts the worker with it). */
typedef struct SnapshotWorkerArgs
{
	Oid			dboid;
	uint64		config_reloads; /* the main worker's, when it asked for this one */
} SnapshotWorkerArgs;

extern PGDLLEXPORT void shape_sync_snapshot_main(Datum arg);

#endif							/* SHAPE_SYNC_SNAPSHOT_WORKER_H */
