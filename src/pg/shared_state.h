/*-------------------------------------------------------------------------
 *
 * shared_state.h
 *		shape_sync's shared memory, as PostgreSQL processes see it.
 *
 * IDENTIFICATION
 *	  src/pg/shared_state.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SHARED_STATE_H
#define SHARED_STATE_H

#include "postgres.h"

#include <stdatomic.h>

#include "storage/latch.h"

#include "admission.h"
#include "conn_activity.h"
#include "reader_epochs.h"
#include "server_metrics.h"
#include "shape_table.h"
#include "snapshot_jobs.h"
#include "subset_results.h"

typedef struct ShapeSyncShared
{
	_Atomic uintptr_t worker_latch;	/* Latch * of the main worker, or 0 */
	ShapeTable *table;			/* shapes and their logs */
	Admission	admission;		/* request slots per kind */
	DecoderStatus decoder;		/* how far decoding is, for the lag gauges */
	ConnActivity *connections;	/* one per HTTP connection slot */
	uint32		nconnections;	/* shape_sync.max_connections */
	uint32		metric_stripes; /* writers' stripes in the metrics area */
	SnapshotJobs snapshot_jobs; /* snapshots to take, and who takes them */
	SubsetResults subsets;		/* answers of subset queries in flight */
	ReaderEpochs epochs;		/* sections of the main worker's threads reading logs */
	_Atomic uint64_t extension_drops;	/* DROP EXTENSION shape_sync committed */
	_Atomic uint64_t extension_drops_handled;	/* of those, followed by the worker */
	/*
	 * Bumped by the main worker after each reload of the configuration: a
	 * snapshot worker that sees it move reads the configuration again
	 * before its next job, since the SIGHUP may never reach it (one that
	 * comes between its fork and its start is lost), and a job the main
	 * thread made under a new shape_sync.role must be read as that role.
	 */
	_Atomic uint64_t config_reloads;
} ShapeSyncShared;

extern ShapeSyncShared *shape_sync_shared;

extern void shape_sync_shmem_install_hooks(void);

/* Wakes the main worker, if it runs; any process may call it. */
extern void shape_sync_wake_worker(void);

#endif							/* SHARED_STATE_H */
