/*-------------------------------------------------------------------------
 *
 * snapshot_jobs.c
 *		The snapshots to take, and the pool of workers that take them, in
 *		shared memory.
 *
 * Snapshots are taken by a pool of long-lived background workers
 * (snapshot_worker.c), not by one process per shape: starting a backend costs
 * milliseconds, more than the snapshot of a small shape.  The main thread
 * of the shape_sync worker queues jobs here, oldest shape first, and wakes
 * an idle worker or starts a new one (snapshot_pool.c); each worker takes the
 * next job, takes the snapshot, and takes the next.
 *
 * The queue is a bounded ring of cells with one producer (the main thread)
 * and many consumers (the workers), after Vyukov's bounded MPMC queue:
 * each cell's sequence number says whose turn it is.  Cell i of lap L
 * (position p = L * CAPACITY + i) is free for the producer when seq == p,
 * holds a job for consumers when seq == p + 1, and is given back by the
 * consumer that took it as seq = p + CAPACITY, the producer's position of
 * the next lap.  A consumer claims position p by moving head from p to
 * p + 1 (compare-and-swap), so each job is taken once.  The main thread
 * queues at most shape_sync.max_snapshot_workers jobs at a time (their
 * definitions live in DSM segments, which are few), far under the
 * capacity.
 *
 * The worker entries say, for each worker, its process and the job it
 * takes (slot and generation, so that the main thread can cancel the
 * snapshot of a shape it dropped, and no other) or 0 when it waits for one.
 *
 * Notes on synchronization
 * ------------------------
 * - A cell's job is written by the producer before its release store of
 *   seq = p + 1, and read by the consumer that claimed p after its acquire
 *   load of that seq; the consumer's release store of seq = p + CAPACITY
 *   comes after its read, and the producer's acquire load of it before it
 *   writes the cell again.
 * - `tail` is stored by the producer only; `head` moves by CAS.  Both are
 *   read relaxed for snapshot_jobs_queued(), which is a hint.
 * - A worker entry's pid is claimed by CAS from 0 and given back by its
 *   owner with a release store after its other fields are cleared; `job`
 *   and `wakeup` are written by the owner and read by the main thread,
 *   each on its own.  `cancel` is written by the main thread before it
 *   signals the worker, and read by the worker once the signal cancelled
 *   its query: a cancel that names another job (the signal came late, or
 *   went to the entry's next owner) is not meant for it.
 * - A worker that exits gives its entry back and then looks at the queue;
 *   the main thread queues and then looks at the entries: each side puts
 *   a seq_cst fence between its store and its load, so that one of them
 *   sees the other (the worker wakes the main thread, or the main thread
 *   starts another worker).
 *
 * IDENTIFICATION
 *	  src/contract/snapshot_jobs.c
 *
 *-------------------------------------------------------------------------
 */
#include "snapshot_jobs.h"

#include <string.h>

#ifdef POSTGRES_H
#error "snapshot_jobs.c is shared by processes and must not include postgres.h"
#endif

_Static_assert((SNAPSHOT_JOBS_CAPACITY & (SNAPSHOT_JOBS_CAPACITY - 1)) == 0,
			   "the capacity must be a power of two");
_Static_assert(SNAPSHOT_JOBS_CAPACITY >= 2 * SNAPSHOT_WORKERS_MAX,
			   "room for every job queued at once, twice");

#define CELL(q, pos)	(&(q)->cells[(pos) & (SNAPSHOT_JOBS_CAPACITY - 1)])

void
snapshot_jobs_init(SnapshotJobs *q)
{
	memset(q, 0, sizeof(*q));
	for (uint64_t i = 0; i < SNAPSHOT_JOBS_CAPACITY; i++)
		atomic_init(&q->cells[i].seq, i);
}

/* Queues a job (the one producer only); false when the ring is full. */
bool
snapshot_jobs_push(SnapshotJobs *q, const SnapshotJob *job)
{
	uint64_t	pos = atomic_load_explicit(&q->tail, memory_order_relaxed);
	SnapshotJobCell *cell = CELL(q, pos);

	if (atomic_load_explicit(&cell->seq, memory_order_acquire) != pos)
		return false;			/* a consumer still reads the last lap's job */
	cell->job = *job;
	atomic_store_explicit(&cell->seq, pos + 1, memory_order_release);
	atomic_store_explicit(&q->tail, pos + 1, memory_order_relaxed);
	return true;
}

/* Takes the oldest job; false when there is none. */
bool
snapshot_jobs_pop(SnapshotJobs *q, SnapshotJob *job)
{
	uint64_t	pos = atomic_load_explicit(&q->head, memory_order_relaxed);

	for (;;)
	{
		SnapshotJobCell *cell = CELL(q, pos);
		uint64_t	seq = atomic_load_explicit(&cell->seq, memory_order_acquire);
		int64_t		diff = (int64_t) (seq - (pos + 1));

		if (diff == 0)
		{
			if (atomic_compare_exchange_weak_explicit(&q->head, &pos, pos + 1,
													  memory_order_relaxed,
													  memory_order_relaxed))
			{
				*job = cell->job;
				atomic_store_explicit(&cell->seq, pos + SNAPSHOT_JOBS_CAPACITY,
									  memory_order_release);
				return true;
			}
			/* another consumer took it: pos now holds the new head */
		}
		else if (diff < 0)
			return false;		/* not filled yet: empty */
		else
			pos = atomic_load_explicit(&q->head, memory_order_relaxed);
	}
}

/* How many jobs wait (a hint: both ends move meanwhile). */
uint32_t
snapshot_jobs_queued(SnapshotJobs *q)
{
	uint64_t	head = atomic_load_explicit(&q->head, memory_order_relaxed);
	uint64_t	tail = atomic_load_explicit(&q->tail, memory_order_relaxed);

	return tail > head ? (uint32_t) (tail - head) : 0;
}

/* A free entry for worker `pid`, or -1 when every entry is taken. */
int
snapshot_worker_claim(SnapshotJobs *q, int32_t pid, void *wakeup)
{
	for (int i = 0; i < SNAPSHOT_WORKERS_MAX; i++)
	{
		int32_t		free_pid = 0;
		SnapshotWorkerEntry *w = &q->workers[i];

		if (atomic_compare_exchange_strong_explicit(&w->pid, &free_pid, pid,
													memory_order_acquire,
													memory_order_relaxed))
		{
			atomic_store_explicit(&w->job, 0, memory_order_relaxed);
			atomic_store_explicit(&w->cancel, 0, memory_order_relaxed);
			atomic_store_explicit(&w->wakeup, wakeup, memory_order_release);
			return i;
		}
	}
	return -1;
}

void
snapshot_worker_set_job(SnapshotJobs *q, int entry, uint64_t key)
{
	atomic_store_explicit(&q->workers[entry].job, key, memory_order_release);
}

void
snapshot_worker_release(SnapshotJobs *q, int entry)
{
	SnapshotWorkerEntry *w = &q->workers[entry];

	atomic_store_explicit(&w->job, 0, memory_order_relaxed);
	atomic_store_explicit(&w->wakeup, NULL, memory_order_relaxed);
	atomic_store_explicit(&w->pid, 0, memory_order_release);
}

/*
 * Marks job `key` cancelled on the entry of the worker that takes it, and
 * returns that worker's process (0: none takes it) for the caller to
 * signal.
 */
int32_t
snapshot_worker_cancel(SnapshotJobs *q, uint64_t key)
{
	for (int i = 0; i < SNAPSHOT_WORKERS_MAX; i++)
	{
		SnapshotWorkerEntry *w = &q->workers[i];
		int32_t		pid = atomic_load_explicit(&w->pid, memory_order_acquire);

		if (pid != 0 && atomic_load_explicit(&w->job, memory_order_acquire) == key)
		{
			atomic_store_explicit(&w->cancel, key, memory_order_release);
			return pid;
		}
	}
	return 0;
}

/* Whether the main thread cancelled job `key` of the worker in `entry`. */
bool
snapshot_worker_cancelled(SnapshotJobs *q, int entry, uint64_t key)
{
	return atomic_load_explicit(&q->workers[entry].cancel, memory_order_acquire) == key;
}

/* The process taking job `key`, or 0 when none does. */
int32_t
snapshot_worker_taking(SnapshotJobs *q, uint64_t key)
{
	for (int i = 0; i < SNAPSHOT_WORKERS_MAX; i++)
	{
		SnapshotWorkerEntry *w = &q->workers[i];
		int32_t		pid = atomic_load_explicit(&w->pid, memory_order_acquire);

		if (pid != 0 && atomic_load_explicit(&w->job, memory_order_acquire) == key)
			return pid;
	}
	return 0;
}
