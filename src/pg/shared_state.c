/*-------------------------------------------------------------------------
 *
 * shared_state.c
 *		shape_sync's shared memory: sizing, creation, attaching.
 *
 * One ShmemInitStruct region holds, in order: ShapeSyncShared (which
 * embeds admission, the snapshot jobs and the subset results), the
 * metrics (src/contract/server_metrics.c), the connections' activity
 * (src/contract/conn_activity.c), the shape table (src/contract/shape_table.c) and
 * the log arena (src/contract/shape_log.c), sized by shape_sync.http_threads,
 * max_worker_processes, shape_sync.max_connections, shape_sync.max_shapes
 * and shape_sync.log_memory.  The region is
 * mapped at the same address in every process of the cluster (they all
 * fork from the postmaster), so the pointers stored inside it are valid
 * everywhere, and the HTTP threads of the main worker read it directly.
 *
 * Notes on synchronization
 * ------------------------
 * - The region is laid out once, in the postmaster's shmem_startup_hook,
 *   under AddinShmemInitLock, before any other process exists.
 * - worker_latch is written by the main worker (at start and exit) and
 *   read by snapshot workers to wake it; an atomic, since they race.
 * - `decoder` is written by the main worker only (relaxed stores, each
 *   value standing on its own) and read by anyone.
 * - `epochs` holds the reader sections of the main worker's threads, so
 *   that a snapshot worker that takes blocks of its log back from memory
 *   sees them (reader_epochs.c); the main worker lays it out again when it
 *   starts, since no reader of an earlier life can still be in a section.
 * - extension_drops and extension_drops_handled: see extension_drop.c.
 * - Everything else has its own notes: shape_table.c, shape_log.c,
 *   admission.c, snapshot_jobs.c, subset_results.c, metrics.c,
 *   server_metrics.c and conn_activity.c.
 *
 * IDENTIFICATION
 *	  src/pg/shared_state.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"

#include "guc.h"
#include "shared_state.h"

ShapeSyncShared *shape_sync_shared = NULL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

/*
 * A stripe for each thread of the main worker (HTTP threads, park,
 * deadline, main) and for each background worker there may be (snapshot
 * workers), and a few to spare for a worker restarted while the old one's
 * are not given back yet; past them, writers share the overflow stripe.
 */
static uint32
sstate_metric_stripes(void)
{
	return (uint32) (shape_sync_http_threads + 3 + max_worker_processes + 4);
}

static Size
sstate_size(void)
{
	Size		size = MAXALIGN(sizeof(ShapeSyncShared));

	size = add_size(size, MAXALIGN(server_metrics_size(sstate_metric_stripes())));
	size = add_size(size, MAXALIGN(conn_activity_size((uint32) shape_sync_max_connections)) + 128);

	size = add_size(size, MAXALIGN(shape_table_size((uint32) shape_sync_max_shapes)));
	size = add_size(size, slog_arena_size((uint64) shape_sync_log_memory * 1024 * 1024));
	return size;
}

static void
sstate_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(sstate_size());
}

static void
sstate_shmem_startup(void)
{
	bool		found;
	Size		size = sstate_size();
	char	   *base;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	base = ShmemInitStruct("shape_sync", size, &found);
	shape_sync_shared = (ShapeSyncShared *) base;
	if (!found)
	{
		Size		table_size = MAXALIGN(shape_table_size((uint32) shape_sync_max_shapes));
		uint32		stripes = sstate_metric_stripes();
		char	   *metrics_mem = base + MAXALIGN(sizeof(ShapeSyncShared));
		char	   *activity_mem = metrics_mem + MAXALIGN(server_metrics_size(stripes));
		char	   *table_mem = activity_mem +
			MAXALIGN(conn_activity_size((uint32) shape_sync_max_connections)) + 128;
		char	   *arena_mem = table_mem + table_size;
		ShapeLogArena *arena;

		atomic_init(&shape_sync_shared->worker_latch, 0);
		atomic_init(&shape_sync_shared->extension_drops, 0);
		atomic_init(&shape_sync_shared->extension_drops_handled, 0);
		memset(&shape_sync_shared->decoder, 0, sizeof(shape_sync_shared->decoder));
		snapshot_jobs_init(&shape_sync_shared->snapshot_jobs);
		subset_results_init(&shape_sync_shared->subsets);
		reader_epochs_init(&shape_sync_shared->epochs);
		shape_sync_shared->metric_stripes = stripes;
		shape_sync_shared->nconnections = (uint32) shape_sync_max_connections;
		shape_sync_shared->connections = (ConnActivity *) TYPEALIGN(128, activity_mem);
		conn_activity_init(shape_sync_shared->connections, shape_sync_shared->nconnections);
		admission_init(&shape_sync_shared->admission,
					   (uint32) shape_sync_max_concurrent_initial,
					   (uint32) shape_sync_max_concurrent_existing);
		arena = slog_arena_init(arena_mem, size - (arena_mem - base));
		shape_sync_shared->table = shape_table_init(table_mem,
													(uint32) shape_sync_max_shapes,
													arena);
		if (server_metrics_attach(metrics_mem, true, stripes, shape_sync_shared->table,
								  shape_sync_shared->admission.in_use,
								  shape_sync_shared->admission.limit,
								  &shape_sync_shared->decoder) != 0)
			ereport(FATAL,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("out of memory")));
	}
	LWLockRelease(AddinShmemInitLock);
	/* inherited by every process forked from here: they see each other's readers */
	reader_epochs_use(&shape_sync_shared->epochs);
}

void
shape_sync_shmem_install_hooks(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = sstate_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = sstate_shmem_startup;
}

void
shape_sync_wake_worker(void)
{
	Latch	   *latch;

	if (shape_sync_shared == NULL)
		return;
	latch = (Latch *) atomic_load(&shape_sync_shared->worker_latch);
	if (latch != NULL)
		SetLatch(latch);
}
