/*-------------------------------------------------------------------------
 *
 * snapshot_pool.c
 *		The snapshot pool, as the main thread runs it: shapes' snapshot
 *		jobs queued, launched, staffed, cancelled and reaped.
 *
 * A new shape's snapshot waits here (snapshot_pool_queue) until fewer than
 * shape_sync.max_snapshot_workers jobs are queued for the workers; then its
 * definition goes into a DSM segment (snapshot_definition.c) and its job
 * into the shared queue (snapshot_jobs.c), oldest first.  Each segment is
 * created only then, so at most that many wait at a time.  Queued jobs,
 * shapes' and subset queries' (subset_jobs.c), get workers
 * (snapshot_pool_staff): an idle one is woken, or one is started, up to
 * shape_sync.max_snapshot_workers; a worker exits on its own once idle
 * (snapshot_worker.c).  When a launched shape leaves SNAPSHOTTING, the
 * pool reads its snapshot's visibility from the segment, lets the segment
 * go, and tells the registry (snapshot_pool_reap): a READY shape's stream
 * takes the log over, a FAILED one is remembered or rotated.  A shape
 * dropped meanwhile is forgotten (snapshot_pool_forget) and its query
 * cancelled (snapshot_pool_cancel: SIGINT to the worker that has the job).
 *
 * Everything here runs on the main worker's main thread.
 *
 * IDENTIFICATION
 *	  src/pg/worker/snapshot_pool.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>
#include <stdatomic.h>

#include "miscadmin.h"
#include "nodes/pg_list.h"
#include "postmaster/bgworker.h"
#include "utils/memutils.h"

#include "guc.h"
#include "shared_state.h"
#include "snapshot_jobs.h"
#include "snapshot_pool.h"
#include "snapshot_worker.h"

/* A shape's snapshot, as the pool knows it. */
typedef struct PoolShape
{
	bool		waiting;		/* queued here, not yet for the workers */
	bool		launched;		/* its job was queued for the workers */
	uint32		generation;
	Oid			role;
	bool		manage_replica_identity;
	const ShapeSpec *spec;		/* the caller's, until forgotten */
	const char *fingerprint;
	dsm_segment *definition;	/* while launched */
} PoolShape;

static PoolShape *pool_shapes;
static uint32 pool_nslots;
static List *pool_waiting = NIL;	/* int list: slots waiting, oldest first */
static List *pool_launched = NIL;	/* int list: slots launched, not known to
									 * be done */

/* ------------------------------------------------------------- the queue */

void
snapshot_pool_start(uint32 nslots)
{
	pool_shapes = MemoryContextAllocZero(TopMemoryContext, sizeof(PoolShape) * nslots);
	pool_nslots = nslots;
	pool_waiting = pool_launched = NIL;
	snapshot_pool_cancel_all(); /* the snapshots of the shapes of an earlier life */
}

void
snapshot_pool_stop(void)
{
	/* the worker exits: the segments go with it */
	pool_shapes = NULL;
	pool_nslots = 0;
	pool_waiting = pool_launched = NIL;
}

void
snapshot_pool_queue(uint32 slot, uint32 generation, Oid role, bool manage_replica_identity,
					const ShapeSpec *spec, const char *fingerprint)
{
	PoolShape  *p = &pool_shapes[slot];
	MemoryContext old;

	snapshot_pool_forget(slot);
	p->waiting = true;
	p->generation = generation;
	p->role = role;
	p->manage_replica_identity = manage_replica_identity;
	p->spec = spec;
	p->fingerprint = fingerprint;
	old = MemoryContextSwitchTo(TopMemoryContext);
	pool_waiting = lappend_int(pool_waiting, (int) slot);
	MemoryContextSwitchTo(old);
}

void
snapshot_pool_forget(uint32 slot)
{
	PoolShape  *p;

	if (pool_shapes == NULL || slot >= pool_nslots)
		return;
	p = &pool_shapes[slot];
	/* its list entries are skipped, and dropped, when next met */
	if (p->definition != NULL)
		dsm_detach(p->definition);
	memset(p, 0, sizeof(*p));
}

bool
snapshot_pool_launched(uint32 slot)
{
	return pool_shapes != NULL && pool_shapes[slot].launched;
}

void
snapshot_pool_launch(void)
{
	ShapeTable *table = shape_sync_shared->table;
	SnapshotJobs *jobs = &shape_sync_shared->snapshot_jobs;

	while (pool_waiting != NIL &&
		   snapshot_jobs_queued(jobs) < (uint32) shape_sync_max_snapshot_workers)
	{
		uint32		slot = (uint32) linitial_int(pool_waiting);
		PoolShape  *p = &pool_shapes[slot];
		SnapshotJob job;
		MemoryContext old;

		if (!p->waiting || shape_table_state(table, slot) != SHAPE_SNAPSHOTTING)
		{
			pool_waiting = list_delete_first(pool_waiting);
			continue;			/* gone, or queued under an earlier entry */
		}
		old = MemoryContextSwitchTo(TopMemoryContext);
		p->definition = snapshot_definition_create(p->spec, p->fingerprint,
												   shape_sync_chunk_bytes_threshold);
		MemoryContextSwitchTo(old);
		job.slot = slot;
		job.generation = p->generation;
		job.role = (uint32) p->role;
		job.definition = (uint32) dsm_segment_handle(p->definition);
		job.flags = p->manage_replica_identity ? SNAPSHOT_JOB_MANAGE_REPLICA_IDENTITY : 0;
		if (!snapshot_jobs_push(jobs, &job))
		{
			dsm_detach(p->definition);
			p->definition = NULL;
			break;				/* full: a worker is still reading a cell */
		}
		p->waiting = false;
		p->launched = true;
		pool_waiting = list_delete_first(pool_waiting);
		old = MemoryContextSwitchTo(TopMemoryContext);
		pool_launched = lappend_int(pool_launched, (int) slot);
		MemoryContextSwitchTo(old);
	}
	snapshot_pool_staff();
}

void
snapshot_pool_reap(SnapshotPoolEnded ended)
{
	ShapeTable *table = shape_sync_shared->table;
	List	   *launched = pool_launched;
	ListCell   *lc;

	pool_launched = NIL;
	foreach(lc, launched)
	{
		uint32		slot = (uint32) lfirst_int(lc);
		PoolShape  *p = &pool_shapes[slot];
		ShapeState	state;
		SnapshotVisibility *visibility = NULL;

		if (!p->launched)
			continue;			/* forgotten (a slot taken again is listed again) */
		state = shape_table_state(table, slot);
		if (state == SHAPE_SNAPSHOTTING)
		{
			MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

			pool_launched = lappend_int(pool_launched, (int) slot);
			MemoryContextSwitchTo(old);
			continue;
		}
		/* the worker stored it before READY, see snapshot_definition.c */
		if (state == SHAPE_READY)
			visibility = snapshot_definition_visibility(p->definition);
		dsm_detach(p->definition);
		p->definition = NULL;
		p->launched = false;
		ended(slot, state, visibility);
		if (visibility != NULL)
			pfree(visibility);
	}
	list_free(launched);
}

/* -------------------------------------------------------------- workers */

static BackgroundWorkerHandle *pool_handles[SNAPSHOT_WORKERS_MAX];	/* started by
																	 * this process */
static bool pool_warned_no_worker = false;

static bool
snap_pool_has_pid(SnapshotJobs *q, int32 pid)
{
	for (int i = 0; i < SNAPSHOT_WORKERS_MAX; i++)
		if (atomic_load_explicit(&q->workers[i].pid, memory_order_acquire) == pid)
			return true;
	return false;
}

static BackgroundWorkerHandle *
pool_start_worker(void)
{
	BackgroundWorker worker;
	BackgroundWorkerHandle *handle;
	SnapshotWorkerArgs args = {MyDatabaseId,
	atomic_load(&shape_sync_shared->config_reloads)};

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	strlcpy(worker.bgw_library_name, "shape_sync", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "shape_sync_snapshot_main", BGW_MAXLEN);
	strlcpy(worker.bgw_name, "shape_sync snapshot worker", BGW_MAXLEN);
	strlcpy(worker.bgw_type, "shape_sync snapshot", BGW_MAXLEN);
	worker.bgw_notify_pid = MyProcPid;
	StaticAssertStmt(sizeof(SnapshotWorkerArgs) <= BGW_EXTRALEN, "worker arguments too large");
	memcpy(worker.bgw_extra, &args, sizeof(args));
	if (!RegisterDynamicBackgroundWorker(&worker, &handle))
		return NULL;
	return handle;
}

/*
 * Sees that the queued snapshot jobs have workers: wakes an idle worker
 * for each, and starts more, up to shape_sync.max_snapshot_workers, for
 * the rest.  Main thread; cheap when nothing is queued.
 */
void
snapshot_pool_staff(void)
{
	SnapshotJobs *q = &shape_sync_shared->snapshot_jobs;
	uint32		queued;
	int			live = 0;		/* workers in the pool's entries */
	int			idle = 0;		/* ... waiting for a job */
	int			starting = 0;	/* started here, not in the entries yet */
	int			woken = 0;

	/* the jobs queued before, the entries after: see snapshot_jobs.c */
	atomic_thread_fence(memory_order_seq_cst);
	queued = snapshot_jobs_queued(q);
	for (int i = 0; i < SNAPSHOT_WORKERS_MAX; i++)
	{
		SnapshotWorkerEntry *w = &q->workers[i];

		if (atomic_load_explicit(&w->pid, memory_order_acquire) == 0)
			continue;
		live++;
		if (atomic_load_explicit(&w->job, memory_order_acquire) == 0)
			idle++;
	}
	for (int i = 0; i < SNAPSHOT_WORKERS_MAX; i++)
	{
		pid_t		pid;
		BgwHandleStatus status;

		if (pool_handles[i] == NULL)
			continue;
		status = GetBackgroundWorkerPid(pool_handles[i], &pid);
		if (status == BGWH_STOPPED)
		{
			pfree(pool_handles[i]);
			pool_handles[i] = NULL;
		}
		else if (status == BGWH_NOT_YET_STARTED ||
				 (status == BGWH_STARTED && !snap_pool_has_pid(q, (int32) pid)))
			starting++;
	}
	if (queued == 0)
		return;
	/* one idle worker woken per job (a woken one may still look idle) */
	for (int i = 0; i < SNAPSHOT_WORKERS_MAX && woken < (int) queued; i++)
	{
		SnapshotWorkerEntry *w = &q->workers[i];
		void	   *wakeup;

		if (atomic_load_explicit(&w->pid, memory_order_acquire) == 0 ||
			atomic_load_explicit(&w->job, memory_order_acquire) != 0)
			continue;
		wakeup = atomic_load_explicit(&w->wakeup, memory_order_acquire);
		if (wakeup != NULL)
		{
			SetLatch((Latch *) wakeup);
			woken++;
		}
	}
	/* and more workers for jobs that neither an idle nor a starting one covers */
	while (idle + starting < (int) queued &&
		   live + starting < shape_sync_max_snapshot_workers)
	{
		int			free_handle;
		MemoryContext old;

		for (free_handle = 0; free_handle < SNAPSHOT_WORKERS_MAX; free_handle++)
			if (pool_handles[free_handle] == NULL)
				break;
		if (free_handle == SNAPSHOT_WORKERS_MAX)
			break;
		old = MemoryContextSwitchTo(TopMemoryContext);
		pool_handles[free_handle] = pool_start_worker();
		MemoryContextSwitchTo(old);
		if (pool_handles[free_handle] == NULL)
		{
			if (!pool_warned_no_worker && live == 0)
				ereport(WARNING,
						(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
						 errmsg("no background worker slot is free for a shape snapshot"),
						 errhint("Consider increasing the configuration parameter \"%s\".",
								 "max_worker_processes")));
			pool_warned_no_worker = true;
			break;
		}
		pool_warned_no_worker = false;
		starting++;
	}
}

/* Cancels the snapshot of a shape that was dropped, if a worker takes it. */
void
snapshot_pool_cancel(uint32 slot, uint32 generation)
{
	int32		pid = snapshot_worker_cancel(&shape_sync_shared->snapshot_jobs,
											 snapshot_job_key(slot, generation));

	/*
	 * The worker may have moved on to another job meanwhile: the cancel
	 * names this one, so that one is not taken for cancelled (snap_run_job).
	 */
	if (pid != 0)
		kill(pid, SIGINT);
}

/*
 * A restarted main worker retires every shape of its previous life: the
 * snapshots still being taken for them are cancelled.
 */
void
snapshot_pool_cancel_all(void)
{
	SnapshotJobs *q = &shape_sync_shared->snapshot_jobs;

	for (int i = 0; i < SNAPSHOT_WORKERS_MAX; i++)
	{
		uint64		job = atomic_load_explicit(&q->workers[i].job, memory_order_acquire);
		int32		pid;

		if (job != 0 && (pid = snapshot_worker_cancel(q, job)) != 0)
			kill(pid, SIGINT);
	}
}
