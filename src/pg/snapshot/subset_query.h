/*-------------------------------------------------------------------------
 *
 * subset_query.h
 *		Subset snapshots: a client's subset of a shape, read by a snapshot
 *		worker.
 *
 * IDENTIFICATION
 *	  src/pg/snapshot/subset_query.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SUBSET_QUERY_H
#define SUBSET_QUERY_H

#include "postgres.h"

#include "storage/dsm.h"

#include "shape_request.h"
#include "shape_def.h"
#include "snapshot_jobs.h"

/* The most $n a subset's params may bind. */
#define SUBSET_MAX_PARAMS	256

/*
 * Main thread: the shape's definition and the client's subset inputs in a
 * new DSM segment, for the worker that runs the query; the caller keeps it
 * until the job is done.  `handle` is the shape's: a shape with subqueries
 * tags its rows with it (a move-in's request names it itself).
 */
extern dsm_segment *subset_definition_create(const ShapeSpec *spec, const char *fingerprint,
											 const SubsetRequest *in, const char *handle);

/* Snapshot worker: runs one subset job, leaving the answer in its cell. */
extern void subset_run_job(const SnapshotJob *job, MemoryContext job_context);

/* Snapshot worker exiting: finishes the cell of a job it leaves undone. */
extern void subset_abandon(void);

#endif							/* SUBSET_QUERY_H */
