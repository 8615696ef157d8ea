/*
 * test_snapshot_jobs.c
 *		The snapshot job queue and the pool's worker entries
 *		(src/contract/snapshot_jobs.c): order, full and empty rings, laps, every
 *		job taken exactly once by racing consumers while the producer
 *		refills, and worker entries claimed, found by job and released.
 */
#include "unit.h"

#include <pthread.h>
#include <sched.h>

#include "snapshot_jobs.h"

static SnapshotJob
job_of(uint32_t n)
{
	SnapshotJob j = {.slot = n, .generation = n * 7 + 1, .role = 10 + n,
	.definition = 1000 + n, .flags = n & 1};

	return j;
}

TEST(jobs_come_out_in_order_and_whole)
{
	static SnapshotJobs q;
	SnapshotJob out;

	snapshot_jobs_init(&q);
	CHECK(!snapshot_jobs_pop(&q, &out));
	CHECK_UEQ(snapshot_jobs_queued(&q), 0);
	for (uint32_t i = 0; i < 5; i++)
	{
		SnapshotJob j = job_of(i);

		REQUIRE(snapshot_jobs_push(&q, &j));
	}
	CHECK_UEQ(snapshot_jobs_queued(&q), 5);
	for (uint32_t i = 0; i < 5; i++)
	{
		SnapshotJob want = job_of(i);

		REQUIRE(snapshot_jobs_pop(&q, &out));
		CHECK_MEM_EQ(&out, &want, sizeof(out));
	}
	CHECK(!snapshot_jobs_pop(&q, &out));
	CHECK_UEQ(snapshot_jobs_queued(&q), 0);
}

TEST(a_full_ring_refuses_and_laps_reuse_cells)
{
	static SnapshotJobs q;
	SnapshotJob out;

	snapshot_jobs_init(&q);
	for (uint32_t i = 0; i < SNAPSHOT_JOBS_CAPACITY; i++)
	{
		SnapshotJob j = job_of(i);

		REQUIRE(snapshot_jobs_push(&q, &j));
	}
	{
		SnapshotJob extra = job_of(999);

		CHECK(!snapshot_jobs_push(&q, &extra));
	}
	CHECK_UEQ(snapshot_jobs_queued(&q), SNAPSHOT_JOBS_CAPACITY);
	/* ten laps of one job each through every cell */
	for (uint32_t i = 0; i < 10 * SNAPSHOT_JOBS_CAPACITY; i++)
	{
		SnapshotJob want = job_of(i);
		SnapshotJob next = job_of(i + SNAPSHOT_JOBS_CAPACITY);

		REQUIRE(snapshot_jobs_pop(&q, &out));
		CHECK_MEM_EQ(&out, &want, sizeof(out));
		REQUIRE(snapshot_jobs_push(&q, &next));
	}
}

/* ------------------------------------------------ concurrent consumers */

#define RACE_JOBS		200000
#define RACE_CONSUMERS	4

typedef struct Race
{
	SnapshotJobs *q;
	_Atomic uint32_t *taken;	/* per job */
	_Atomic int done;
	_Atomic uint64_t popped;
} Race;

static void *
race_consumer(void *arg)
{
	Race	   *r = arg;
	SnapshotJob j;

	for (;;)
	{
		if (snapshot_jobs_pop(r->q, &j))
		{
			/* the job's fields are those its producer wrote, together */
			if (j.generation != j.slot * 7 + 1 || j.definition != 1000 + j.slot)
				FAIL("torn job %u", j.slot);
			atomic_fetch_add(&r->taken[j.slot], 1);
			atomic_fetch_add(&r->popped, 1);
		}
		else if (atomic_load(&r->done))
		{
			if (!snapshot_jobs_pop(r->q, &j))
				return NULL;
			atomic_fetch_add(&r->taken[j.slot], 1);
			atomic_fetch_add(&r->popped, 1);
		}
		else
			sched_yield();
	}
}

TEST(racing_consumers_take_each_job_exactly_once)
{
	static SnapshotJobs q;
	static _Atomic uint32_t taken[RACE_JOBS];
	Race		r = {.q = &q, .taken = taken};
	pthread_t	threads[RACE_CONSUMERS];

	snapshot_jobs_init(&q);
	for (int i = 0; i < RACE_JOBS; i++)
		atomic_init(&taken[i], 0);
	for (int t = 0; t < RACE_CONSUMERS; t++)
		REQUIRE(pthread_create(&threads[t], NULL, race_consumer, &r) == 0);
	for (uint32_t i = 0; i < RACE_JOBS;)
	{
		SnapshotJob j = job_of(i);

		/* as the main thread does: a few queued at a time */
		if (snapshot_jobs_queued(&q) < 8 && snapshot_jobs_push(&q, &j))
			i++;
		else
			sched_yield();
	}
	atomic_store(&r.done, 1);
	for (int t = 0; t < RACE_CONSUMERS; t++)
		pthread_join(threads[t], NULL);
	CHECK_UEQ(atomic_load(&r.popped), RACE_JOBS);
	for (int i = 0; i < RACE_JOBS; i++)
		if (atomic_load(&taken[i]) != 1)
		{
			FAIL("job %d taken %u times", i, atomic_load(&taken[i]));
			break;
		}
}

/* ----------------------------------------------------- worker entries */

TEST(worker_entries_are_claimed_found_and_released)
{
	static SnapshotJobs q;
	int			latches[SNAPSHOT_WORKERS_MAX + 1];
	int			entries[SNAPSHOT_WORKERS_MAX];

	snapshot_jobs_init(&q);
	for (int i = 0; i < SNAPSHOT_WORKERS_MAX; i++)
	{
		entries[i] = snapshot_worker_claim(&q, 100 + i, &latches[i]);
		REQUIRE(entries[i] >= 0);
	}
	CHECK_EQ(snapshot_worker_claim(&q, 999, &latches[SNAPSHOT_WORKERS_MAX]), -1);
	CHECK_EQ(snapshot_worker_taking(&q, snapshot_job_key(3, 4)), 0);
	snapshot_worker_set_job(&q, entries[5], snapshot_job_key(3, 4));
	CHECK_EQ(snapshot_worker_taking(&q, snapshot_job_key(3, 4)), 105);
	/* another generation of the same slot is another job */
	CHECK_EQ(snapshot_worker_taking(&q, snapshot_job_key(3, 5)), 0);
	CHECK(snapshot_job_key(0, 0) != 0);
	snapshot_worker_release(&q, entries[5]);
	CHECK_EQ(snapshot_worker_taking(&q, snapshot_job_key(3, 4)), 0);
	CHECK_EQ(snapshot_worker_claim(&q, 777, &latches[5]), entries[5]);
	CHECK(atomic_load(&q.workers[entries[5]].wakeup) == &latches[5]);
	CHECK_UEQ(atomic_load(&q.workers[entries[5]].job), 0);
}

TEST(a_cancel_names_its_job)
{
	static SnapshotJobs q;
	int			latch;
	int			e;

	snapshot_jobs_init(&q);
	e = snapshot_worker_claim(&q, 42, &latch);
	REQUIRE(e >= 0);
	/* nobody takes job (1, 1): nothing to signal, nothing marked */
	CHECK_EQ(snapshot_worker_cancel(&q, snapshot_job_key(1, 1)), 0);
	snapshot_worker_set_job(&q, e, snapshot_job_key(1, 1));
	CHECK_EQ(snapshot_worker_cancel(&q, snapshot_job_key(1, 1)), 42);
	CHECK(snapshot_worker_cancelled(&q, e, snapshot_job_key(1, 1)));
	/* the worker's next job was not cancelled by that signal */
	snapshot_worker_set_job(&q, e, snapshot_job_key(2, 1));
	CHECK(!snapshot_worker_cancelled(&q, e, snapshot_job_key(2, 1)));
	/* a new owner of the entry starts with no cancel */
	snapshot_worker_release(&q, e);
	REQUIRE(snapshot_worker_claim(&q, 43, &latch) == e);
	CHECK(!snapshot_worker_cancelled(&q, e, snapshot_job_key(1, 1)));
}

UNIT_MAIN()
