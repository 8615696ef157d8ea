/*-------------------------------------------------------------------------
 *
 * snapshot.h
 *		Initial snapshots of shapes, taken by dynamic background workers.
 *
 * IDENTIFICATION
 *	  src/pg/snapshot.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SHAPE_SYNC_SNAPSHOT_H
#define SHAPE_SYNC_SNAPSHOT_H

#include "postgres.h"

#include "postmaster/bgworker.h"
#include "storage/dsm.h"

#include "shape_def.h"

/* Receives each encoded snapshot message. */
typedef void (*SnapshotEmit) (void *arg, const char *message, int len);

/* Runs the shape's query in the current transaction, encoding every row. */
extern void snapshot_scan(const ShapeSpec *spec, SnapshotEmit emit, void *arg);

/*
 * Starts a snapshot worker for the shape in `slot`, to read as `role`, and
 * to set REPLICA IDENTITY FULL first when manage_replica_identity allows.
 * The definition travels in a DSM segment that the caller keeps
 * (*segment) until the worker ends.  Returns NULL when no background
 * worker slot is free.
 */
extern BackgroundWorkerHandle *snapshot_launch(uint32 slot, uint32 generation,
											   const ShapeSpec *spec,
											   const char *fingerprint, Oid role,
											   bool manage_replica_identity,
											   int chunk_threshold,
											   dsm_segment **segment);

extern PGDLLEXPORT void shape_sync_snapshot_main(Datum arg);

#endif							/* SHAPE_SYNC_SNAPSHOT_H */
