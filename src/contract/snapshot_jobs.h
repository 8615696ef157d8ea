/*-------------------------------------------------------------------------
 *
 * snapshot_jobs.h
 *		The snapshots to take, and the pool of workers that take them, in
 *		shared memory.
 *
 * IDENTIFICATION
 *	  src/contract/snapshot_jobs.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SNAPSHOT_JOBS_H
#define SNAPSHOT_JOBS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define SNAPSHOT_JOBS_CAPACITY	128 /* a power of two; at least twice the
									 * jobs ever queued at once */
#define SNAPSHOT_WORKERS_MAX	64	/* shape_sync.max_snapshot_workers' maximum */

#define SNAPSHOT_JOB_MANAGE_REPLICA_IDENTITY	0x1

/* One shape's snapshot to take. */
typedef struct SnapshotJob
{
	uint32_t	slot;
	uint32_t	generation;
	uint32_t	role;			/* read as this role (an Oid) */
	uint32_t	definition;		/* the dsm_handle of its definition */
	uint32_t	flags;			/* SNAPSHOT_JOB_* */
} SnapshotJob;

typedef struct SnapshotJobCell
{
	_Atomic uint64_t seq;		/* whose turn: see snapshot_jobs.c */
	SnapshotJob job;
} SnapshotJobCell;

/* A worker of the pool, as the others see it. */
typedef struct SnapshotWorkerEntry
{
	_Atomic int32_t pid;		/* 0: the entry is free */
	_Atomic uint64_t job;		/* snapshot_job_key() of the job it takes; 0: idle */
	_Atomic uint64_t cancel;	/* the job the main thread cancelled last */
	void	   *_Atomic wakeup;	/* what to set to wake it (its latch) */
} SnapshotWorkerEntry;

typedef struct SnapshotJobs
{
	_Atomic uint64_t head;		/* the next cell to take */
	_Atomic uint64_t tail;		/* the next cell to fill (one producer) */
	SnapshotJobCell cells[SNAPSHOT_JOBS_CAPACITY];
	SnapshotWorkerEntry workers[SNAPSHOT_WORKERS_MAX];
} SnapshotJobs;

extern void snapshot_jobs_init(SnapshotJobs *q);
extern bool snapshot_jobs_push(SnapshotJobs *q, const SnapshotJob *job);
extern bool snapshot_jobs_pop(SnapshotJobs *q, SnapshotJob *job);
extern uint32_t snapshot_jobs_queued(SnapshotJobs *q);

/* Which job (shape slot and generation) a worker takes: never 0. */
static inline uint64_t
snapshot_job_key(uint32_t slot, uint32_t generation)
{
	return ((uint64_t) slot << 32 | generation) + 1;
}

extern int	snapshot_worker_claim(SnapshotJobs *q, int32_t pid, void *wakeup);
extern void snapshot_worker_set_job(SnapshotJobs *q, int entry, uint64_t key);
extern void snapshot_worker_release(SnapshotJobs *q, int entry);
extern int32_t snapshot_worker_taking(SnapshotJobs *q, uint64_t key);
extern int32_t snapshot_worker_cancel(SnapshotJobs *q, uint64_t key);
extern bool snapshot_worker_cancelled(SnapshotJobs *q, int entry, uint64_t key);

#endif							/* SNAPSHOT_JOBS_H */
