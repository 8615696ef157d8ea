/*
 * test_subset_results.c
 *		The cells subset queries leave their answers in
 *		(src/contract/subset_results.c): claims up to the limit, tickets, a
 *		finished answer read whole, the last of the two holders freeing the
 *		cell and its log blocks whichever lets go last, and many threads
 *		playing request and job at once (run under TSan too).
 */
#include "unit.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

#include "refusal.h"
#include "subset_results.h"

#define ARENA_BLOCKS	256

static ShapeLogArena *
new_arena(void)
{
	size_t		size = slog_arena_size((uint64_t) ARENA_BLOCKS * SLOG_BLOCK_SIZE);
	void	   *mem = aligned_alloc(4096, (size + 4095) & ~(size_t) 4095);

	return mem ? slog_arena_init(mem, size) : NULL;
}

/* What a job writes: a record or two, then the finish. */
static void
write_answer(ShapeLogArena *arena, SubsetResults *r, int cell, uint32_t ticket,
			 RefusalReason reason, int rows)
{
	ShapeLog   *log = &r->cells[cell].log;

	for (int i = 0; i <= rows; i++)
		REQUIRE(slog_append(arena, log, (LogOffset) {0, (uint64_t) i}, SLOG_RECORD_CHANGE,
							"{\"r\":1}", 7) == SLOG_OK);
	slog_publish(log, (LogOffset) {0, (uint64_t) rows}, SLOG_SNAPSHOT_DONE);
	SubsetOutcome outcome = {.reason = reason};

	subset_finish(r, cell, ticket, &outcome);
}

TEST(claims_stop_at_the_limit_and_come_back)
{
	static SubsetResults r;
	int			cells[SUBSET_RESULTS_MAX];
	bool		seen[SUBSET_RESULTS_MAX] = {0};
	uint32_t	ticket;
	ShapeLogArena *arena = new_arena();

	REQUIRE(arena != NULL);
	subset_results_init(&r);
	for (int i = 0; i < SUBSET_RESULTS_MAX; i++)
	{
		cells[i] = subset_claim(&r, 0, &ticket);
		REQUIRE(cells[i] >= 0 && cells[i] < SUBSET_RESULTS_MAX);
		CHECK(!seen[cells[i]]);
		seen[cells[i]] = true;
		CHECK(ticket != 0);
	}
	CHECK_EQ(subset_claim(&r, 0, &ticket), SUBSET_CLAIM_FULL);
	CHECK_UEQ(subset_cells_in_use(&r), SUBSET_RESULTS_MAX);
	subset_release(&r, arena, cells[5]);
	CHECK_EQ(subset_claim(&r, 0, &ticket), cells[5]);
	for (int i = 0; i < SUBSET_RESULTS_MAX; i++)
		subset_release(&r, arena, cells[i]);
	CHECK_UEQ(subset_cells_in_use(&r), 0);
	free(arena);
}

TEST(one_client_holds_at_most_its_share)
{
	static SubsetResults r;
	ShapeLogArena *arena = new_arena();
	int			cells[SUBSET_PER_CLIENT_MAX];
	uint32_t	ticket;
	int			other;

	REQUIRE(arena != NULL);
	subset_results_init(&r);
	for (int i = 0; i < SUBSET_PER_CLIENT_MAX; i++)
		REQUIRE((cells[i] = subset_claim(&r, 7, &ticket)) >= 0);
	CHECK_EQ(subset_claim(&r, 7, &ticket), SUBSET_CLAIM_CLIENT_FULL);
	other = subset_claim(&r, 8, &ticket);	/* another client still gets one */
	CHECK(other >= 0);
	CHECK(subset_claim(&r, 0, &ticket) >= 0);	/* unknown: no share */
	subset_release(&r, arena, cells[3]);
	CHECK(subset_claim(&r, 7, &ticket) >= 0);	/* a cell let go is its again */
	CHECK_EQ(subset_claim(&r, 7, &ticket), SUBSET_CLAIM_CLIENT_FULL);
	free(arena);
}

TEST(the_last_holder_frees_the_cell_and_its_blocks)
{
	static SubsetResults r;
	ShapeLogArena *arena = new_arena();
	uint32_t	free_before;
	uint32_t	ticket;
	SubsetOutcome status;
	int			cell;

	REQUIRE(arena != NULL);
	subset_results_init(&r);
	free_before = slog_arena_free_blocks(arena);

	for (int request_last = 0; request_last < 2; request_last++)
	{
		cell = subset_claim(&r, 0, &ticket);
		REQUIRE(cell >= 0);
		CHECK(!subset_finished(&r, cell, ticket, &status));
		subset_hold_for_job(&r, cell);
		write_answer(arena, &r, cell, ticket, REFUSAL_NONE, 3000);	/* several blocks */
		REQUIRE(subset_finished(&r, cell, ticket, &status));
		CHECK_UEQ(status.reason, REFUSAL_NONE);
		CHECK(!subset_finished(&r, cell, ticket + 1, &status));
		CHECK(slog_arena_free_blocks(arena) < free_before);
		if (request_last)
		{
			subset_release(&r, arena, cell);	/* the job lets go first */
			CHECK(slog_arena_free_blocks(arena) < free_before);
			subset_release(&r, arena, cell);
		}
		else
		{
			subset_release(&r, arena, cell);	/* the request gave up first */
			CHECK_UEQ(subset_cells_in_use(&r), 1);
			subset_release(&r, arena, cell);
		}
		CHECK(subset_job_gone(&r, cell, ticket));
		CHECK_UEQ(slog_arena_free_blocks(arena), free_before);
		CHECK_UEQ(subset_cells_in_use(&r), 0);
		/* the next use of the cell starts empty, with a new ticket */
		{
			uint32_t	next;
			int			again = subset_claim(&r, 0, &next);

			REQUIRE(again >= 0);
			CHECK(!subset_finished(&r, again, next, &status));
			CHECK_UEQ(r.cells[again].log.write_pos, 0);
			subset_release(&r, arena, again);
		}
	}
	free(arena);
}

/* ---------------------------------------------- requests and jobs at once */

#define RACE_THREADS	4
#define RACE_ROUNDS		3000

typedef struct Race
{
	SubsetResults *r;
	ShapeLogArena *arena;
	_Atomic int full;			/* claims that found no cell */
	_Atomic int bad;			/* answers read wrong */
} Race;

typedef struct JobArg
{
	Race	   *race;
	int			cell;
	uint32_t	ticket;
	bool		request_waits;
} JobArg;

static void *
race_job(void *arg)
{
	JobArg	   *j = arg;

	write_answer(j->race->arena, j->race->r, j->cell, j->ticket, REFUSAL_NONE, 1);
	subset_release(j->race->r, j->race->arena, j->cell);
	return NULL;
}

static void *
race_requests(void *arg)
{
	Race	   *race = arg;

	for (int i = 0; i < RACE_ROUNDS; i++)
	{
		JobArg		j = {.race = race, .request_waits = (i & 1) == 0};
		pthread_t	job;
		SubsetOutcome status;

		j.cell = subset_claim(race->r, 0, &j.ticket);
		if (j.cell < 0)
		{
			atomic_fetch_add(&race->full, 1);
			continue;
		}
		subset_hold_for_job(race->r, j.cell);
		if (pthread_create(&job, NULL, race_job, &j) != 0)
		{
			subset_release(race->r, race->arena, j.cell);
			subset_release(race->r, race->arena, j.cell);
			continue;
		}
		if (j.request_waits)
		{
			/* the request reads the answer once it is there */
			while (!subset_finished(race->r, j.cell, j.ticket, &status))
				sched_yield();
			{
				SlogPublished pub;

				slog_read_published(&race->r->cells[j.cell].log, &pub);
				if (status.reason != REFUSAL_NONE || pub.data_end != 2 * slog_record_span(7))
					atomic_fetch_add(&race->bad, 1);
			}
		}
		/* a request that gives up lets go while the job may still write */
		subset_release(race->r, race->arena, j.cell);
		pthread_join(job, NULL);
	}
	return NULL;
}

/* The main thread's view of a job whose request gave up: done once the job let go. */
TEST(a_job_whose_request_gave_up_is_seen_gone)
{
	static SubsetResults r;
	ShapeLogArena *arena = new_arena();
	uint32_t	ticket;
	uint32_t	next;
	int			cell;

	REQUIRE(arena != NULL);
	subset_results_init(&r);
	cell = subset_claim(&r, 0, &ticket);
	REQUIRE(cell >= 0);
	subset_hold_for_job(&r, cell);
	subset_release(&r, arena, cell);	/* the request's deadline passed */
	CHECK(!subset_job_gone(&r, cell, ticket));	/* the job still writes */
	write_answer(arena, &r, cell, ticket, REFUSAL_SUBSET_SHUTDOWN, 0);
	CHECK(subset_job_gone(&r, cell, ticket));
	subset_release(&r, arena, cell);
	CHECK(subset_job_gone(&r, cell, ticket));
	/* claimed again before the main thread looked: still gone for the old use */
	for (int i = 0; i < SUBSET_RESULTS_MAX; i++)
	{
		int			c = subset_claim(&r, 0, &next);

		if (c == cell)
			break;
	}
	CHECK_UEQ(r.cells[cell].ticket, next);
	CHECK(subset_job_gone(&r, cell, ticket));
	CHECK(!subset_job_gone(&r, cell, next));	/* the new use is not done */
	free(arena);
}

TEST(requests_and_jobs_letting_go_in_any_order)
{
	static SubsetResults r;
	Race		race = {.r = &r};
	pthread_t	threads[RACE_THREADS];
	uint32_t	free_before;

	race.arena = new_arena();
	REQUIRE(race.arena != NULL);
	subset_results_init(&r);
	free_before = slog_arena_free_blocks(race.arena);
	for (int t = 0; t < RACE_THREADS; t++)
		REQUIRE(pthread_create(&threads[t], NULL, race_requests, &race) == 0);
	for (int t = 0; t < RACE_THREADS; t++)
		pthread_join(threads[t], NULL);
	CHECK_EQ(atomic_load(&race.bad), 0);
	CHECK_EQ(atomic_load(&race.full), 0);	/* 4 threads never fill 64 cells */
	CHECK_UEQ(subset_cells_in_use(&r), 0);
	CHECK_UEQ(slog_arena_free_blocks(race.arena), free_before);
	free(race.arena);
}

UNIT_MAIN()
