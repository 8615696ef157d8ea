/*
 * test_admission.c
 *		Admission slots per request kind (src/contract/admission.c): limits,
 *		rejections, promotion, limit changes, and exact counts under
 *		concurrent acquire/release.
 */
#include "unit.h"

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include "admission.h"
#include "unit_metrics.h"

#define IN_USE(a, k)	atomic_load(&(a)->in_use[k])
#define REJECTED(a, k)	((void) (a), UNIT_REJECTED(k))

/* An admission, and refusal counts from zero (they are metrics now). */
static void
fresh_admission(Admission *a, uint32_t initial, uint32_t existing)
{
	unit_metrics_fresh();
	admission_init(a, initial, existing);
}

/* ------------------------------------------------------- sequential */

TEST(init_sets_limits_and_zero_counts)
{
	Admission	a;

	memset(&a, 0xab, sizeof(a));
	fresh_admission(&a, 3, 7);
	CHECK_UEQ(atomic_load(&a.limit[ADMISSION_INITIAL]), 3);
	CHECK_UEQ(atomic_load(&a.limit[ADMISSION_EXISTING]), 7);
	for (int k = 0; k < ADMISSION_KINDS; k++)
	{
		CHECK_UEQ(IN_USE(&a, k), 0);
		CHECK_UEQ(REJECTED(&a, k), 0);
	}
	CHECK_STR_EQ(admission_kind_name(ADMISSION_INITIAL), "initial");
	CHECK_STR_EQ(admission_kind_name(ADMISSION_EXISTING), "existing");
	CHECK_STR_EQ(admission_kind_name(ADMISSION_NONE), "none");
}

TEST(limit_is_enforced_exactly_per_kind)
{
	Admission	a;

	fresh_admission(&a, 2, 3);
	CHECK(admission_acquire(&a, ADMISSION_INITIAL));
	CHECK(admission_acquire(&a, ADMISSION_INITIAL));
	CHECK(!admission_acquire(&a, ADMISSION_INITIAL));
	CHECK(!admission_acquire(&a, ADMISSION_INITIAL));
	CHECK_UEQ(IN_USE(&a, ADMISSION_INITIAL), 2);
	CHECK_UEQ(REJECTED(&a, ADMISSION_INITIAL), 2);

	/* the other kind has its own count and limit */
	for (int i = 0; i < 3; i++)
		CHECK(admission_acquire(&a, ADMISSION_EXISTING));
	CHECK(!admission_acquire(&a, ADMISSION_EXISTING));
	CHECK_UEQ(IN_USE(&a, ADMISSION_EXISTING), 3);
	CHECK_UEQ(REJECTED(&a, ADMISSION_EXISTING), 1);
	CHECK_UEQ(REJECTED(&a, ADMISSION_INITIAL), 2);

	/* a release makes room for exactly one more */
	admission_release(&a, ADMISSION_INITIAL);
	CHECK_UEQ(IN_USE(&a, ADMISSION_INITIAL), 1);
	CHECK(admission_acquire(&a, ADMISSION_INITIAL));
	CHECK(!admission_acquire(&a, ADMISSION_INITIAL));
	CHECK_UEQ(REJECTED(&a, ADMISSION_INITIAL), 3);

	/* releasing NONE (a request that was never admitted) changes nothing */
	admission_release(&a, ADMISSION_NONE);
	CHECK_UEQ(IN_USE(&a, ADMISSION_INITIAL), 2);
	CHECK_UEQ(IN_USE(&a, ADMISSION_EXISTING), 3);

	for (int i = 0; i < 2; i++)
		admission_release(&a, ADMISSION_INITIAL);
	for (int i = 0; i < 3; i++)
		admission_release(&a, ADMISSION_EXISTING);
	CHECK_UEQ(IN_USE(&a, ADMISSION_INITIAL), 0);
	CHECK_UEQ(IN_USE(&a, ADMISSION_EXISTING), 0);
}

TEST(limit_zero_rejects_all)
{
	Admission	a;

	fresh_admission(&a, 0, 0);
	for (int i = 0; i < 5; i++)
	{
		CHECK(!admission_acquire(&a, ADMISSION_INITIAL));
		CHECK(!admission_acquire(&a, ADMISSION_EXISTING));
	}
	CHECK_UEQ(IN_USE(&a, ADMISSION_INITIAL), 0);
	CHECK_UEQ(IN_USE(&a, ADMISSION_EXISTING), 0);
	CHECK_UEQ(REJECTED(&a, ADMISSION_INITIAL), 5);
	CHECK_UEQ(REJECTED(&a, ADMISSION_EXISTING), 5);

	/* one kind at 0, the other open */
	admission_set_limits(&a, 0, 1);
	CHECK(!admission_acquire(&a, ADMISSION_INITIAL));
	CHECK(admission_acquire(&a, ADMISSION_EXISTING));
	CHECK_UEQ(REJECTED(&a, ADMISSION_INITIAL), 6);
	CHECK_UEQ(REJECTED(&a, ADMISSION_EXISTING), 5);
	admission_release(&a, ADMISSION_EXISTING);
}

TEST(has_room_takes_and_counts_nothing)
{
	Admission	a;

	fresh_admission(&a, 1, 0);
	CHECK(admission_has_room(&a, ADMISSION_INITIAL));
	CHECK(!admission_has_room(&a, ADMISSION_EXISTING));
	CHECK_UEQ(IN_USE(&a, ADMISSION_INITIAL), 0);
	CHECK(admission_acquire(&a, ADMISSION_INITIAL));
	CHECK(!admission_has_room(&a, ADMISSION_INITIAL));
	/* a no is not a refusal: nobody was refused */
	CHECK_UEQ(REJECTED(&a, ADMISSION_INITIAL), 0);
	CHECK_UEQ(REJECTED(&a, ADMISSION_EXISTING), 0);
	/* admission_would_admit says the same, and counts its no */
	CHECK(!admission_would_admit(&a, ADMISSION_INITIAL));
	CHECK_UEQ(REJECTED(&a, ADMISSION_INITIAL), 1);
	admission_release(&a, ADMISSION_INITIAL);
	CHECK(admission_has_room(&a, ADMISSION_INITIAL));
}

TEST(promote_moves_one_from_initial_to_existing)
{
	Admission	a;

	fresh_admission(&a, 2, 2);
	CHECK(admission_acquire(&a, ADMISSION_INITIAL));
	CHECK(admission_acquire(&a, ADMISSION_INITIAL));
	admission_promote(&a);
	CHECK_UEQ(IN_USE(&a, ADMISSION_INITIAL), 1);
	CHECK_UEQ(IN_USE(&a, ADMISSION_EXISTING), 1);

	/* the freed initial slot is available again */
	CHECK(admission_acquire(&a, ADMISSION_INITIAL));
	CHECK(!admission_acquire(&a, ADMISSION_INITIAL));

	/* promotion does not check the existing limit: an admitted request stays */
	CHECK(admission_acquire(&a, ADMISSION_EXISTING));
	CHECK_UEQ(IN_USE(&a, ADMISSION_EXISTING), 2);
	admission_promote(&a);
	CHECK_UEQ(IN_USE(&a, ADMISSION_EXISTING), 3);
	CHECK_UEQ(IN_USE(&a, ADMISSION_INITIAL), 1);
	CHECK_UEQ(REJECTED(&a, ADMISSION_EXISTING), 0);
	/* ... but new existing requests wait until it is back under the limit */
	CHECK(!admission_acquire(&a, ADMISSION_EXISTING));
	admission_release(&a, ADMISSION_EXISTING);
	CHECK(!admission_acquire(&a, ADMISSION_EXISTING));
	admission_release(&a, ADMISSION_EXISTING);
	CHECK(admission_acquire(&a, ADMISSION_EXISTING));

	admission_release(&a, ADMISSION_INITIAL);
	for (int i = 0; i < 2; i++)
		admission_release(&a, ADMISSION_EXISTING);
	CHECK_UEQ(IN_USE(&a, ADMISSION_INITIAL), 0);
	CHECK_UEQ(IN_USE(&a, ADMISSION_EXISTING), 0);
}

/*
 * A request admitted as existing that turns out to wait for a snapshot
 * moves to initial, within the initial limit.
 */
TEST(demote_moves_one_from_existing_to_initial_within_the_limit)
{
	Admission	a;

	fresh_admission(&a, 1, 5);
	CHECK(admission_acquire(&a, ADMISSION_EXISTING));
	CHECK(admission_acquire(&a, ADMISSION_EXISTING));
	CHECK(admission_demote(&a));
	CHECK_UEQ(IN_USE(&a, ADMISSION_INITIAL), 1);
	CHECK_UEQ(IN_USE(&a, ADMISSION_EXISTING), 1);

	/* the initial kind is full: refused, counted, nothing moved */
	CHECK(!admission_demote(&a));
	CHECK_UEQ(IN_USE(&a, ADMISSION_INITIAL), 1);
	CHECK_UEQ(IN_USE(&a, ADMISSION_EXISTING), 1);
	CHECK_UEQ(REJECTED(&a, ADMISSION_INITIAL), 1);
	CHECK_UEQ(REJECTED(&a, ADMISSION_EXISTING), 0);

	/* and back, as a waiter whose snapshot arrived */
	admission_promote(&a);
	CHECK_UEQ(IN_USE(&a, ADMISSION_INITIAL), 0);
	CHECK_UEQ(IN_USE(&a, ADMISSION_EXISTING), 2);
	admission_set_limits(&a, 0, 5);
	CHECK(!admission_demote(&a));
	CHECK_UEQ(REJECTED(&a, ADMISSION_INITIAL), 2);
	for (int i = 0; i < 2; i++)
		admission_release(&a, ADMISSION_EXISTING);
	CHECK_UEQ(IN_USE(&a, ADMISSION_INITIAL), 0);
	CHECK_UEQ(IN_USE(&a, ADMISSION_EXISTING), 0);
}

TEST(set_limits_applies_to_new_acquisitions)
{
	Admission	a;

	fresh_admission(&a, 4, 4);
	for (int i = 0; i < 4; i++)
		CHECK(admission_acquire(&a, ADMISSION_INITIAL));

	/* lowered below what is in use: nobody is evicted, nobody new gets in */
	admission_set_limits(&a, 2, 1);
	CHECK_UEQ(atomic_load(&a.limit[ADMISSION_INITIAL]), 2);
	CHECK_UEQ(atomic_load(&a.limit[ADMISSION_EXISTING]), 1);
	CHECK_UEQ(IN_USE(&a, ADMISSION_INITIAL), 4);
	CHECK(!admission_acquire(&a, ADMISSION_INITIAL));
	admission_release(&a, ADMISSION_INITIAL);
	admission_release(&a, ADMISSION_INITIAL);
	CHECK(!admission_acquire(&a, ADMISSION_INITIAL));	/* 2 in use, limit 2 */
	admission_release(&a, ADMISSION_INITIAL);
	CHECK(admission_acquire(&a, ADMISSION_INITIAL));	/* 1 in use: room for one */
	CHECK(!admission_acquire(&a, ADMISSION_INITIAL));
	CHECK(admission_acquire(&a, ADMISSION_EXISTING));
	CHECK(!admission_acquire(&a, ADMISSION_EXISTING));

	/* raised: the new room is there at once */
	admission_set_limits(&a, 5, 3);
	CHECK(admission_acquire(&a, ADMISSION_INITIAL));
	CHECK(admission_acquire(&a, ADMISSION_INITIAL));
	CHECK(admission_acquire(&a, ADMISSION_INITIAL));
	CHECK(!admission_acquire(&a, ADMISSION_INITIAL));
	CHECK(admission_acquire(&a, ADMISSION_EXISTING));
	CHECK(admission_acquire(&a, ADMISSION_EXISTING));
	CHECK(!admission_acquire(&a, ADMISSION_EXISTING));
	CHECK_UEQ(IN_USE(&a, ADMISSION_INITIAL), 5);
	CHECK_UEQ(IN_USE(&a, ADMISSION_EXISTING), 3);
	CHECK_UEQ(REJECTED(&a, ADMISSION_INITIAL), 4);
	CHECK_UEQ(REJECTED(&a, ADMISSION_EXISTING), 2);

	/* to zero: everything new is rejected */
	admission_set_limits(&a, 0, 0);
	CHECK(!admission_acquire(&a, ADMISSION_INITIAL));
	CHECK(!admission_acquire(&a, ADMISSION_EXISTING));
	for (int i = 0; i < 5; i++)
		admission_release(&a, ADMISSION_INITIAL);
	for (int i = 0; i < 3; i++)
		admission_release(&a, ADMISSION_EXISTING);
	CHECK_UEQ(IN_USE(&a, ADMISSION_INITIAL), 0);
	CHECK_UEQ(IN_USE(&a, ADMISSION_EXISTING), 0);
}

/* ------------------------------------------------------- concurrent */

#define NTHREADS	8
#define ITERATIONS	20000

typedef struct Shared
{
	Admission	a;
	uint32_t	limit;
	bool		promote;		/* acquire initial, promote, release existing */
	_Atomic uint32_t holders;	/* threads holding an initial slot right now */
	_Atomic uint32_t max_holders;
	_Atomic uint32_t max_seen;	/* the largest in_use[INITIAL] a holder saw */
	_Atomic bool go;
} Shared;

typedef struct Worker
{
	Shared	   *sh;
	int			id;
	uint64_t	admitted;
	uint64_t	refused;
} Worker;

static void
atomic_max(_Atomic uint32_t *p, uint32_t v)
{
	uint32_t	cur = atomic_load(p);

	while (cur < v && !atomic_compare_exchange_weak(p, &cur, v))
		;
}

static void *
acquirer(void *arg)
{
	Worker	   *w = arg;
	Shared	   *sh = w->sh;
	uint64_t	x = 0x9e3779b97f4a7c15ull * (uint64_t) (w->id + 1);

	while (!atomic_load(&sh->go))
		sched_yield();
	for (int i = 0; i < ITERATIONS; i++)
	{
		if (!admission_acquire(&sh->a, ADMISSION_INITIAL))
		{
			w->refused++;
			continue;
		}
		w->admitted++;
		{
			uint32_t	h = atomic_fetch_add(&sh->holders, 1) + 1;

			atomic_max(&sh->max_holders, h);
			atomic_max(&sh->max_seen, IN_USE(&sh->a, ADMISSION_INITIAL));
		}
		/* hold it a little, sometimes yielding to the others */
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		if (x % 8 == 0)
			sched_yield();
		atomic_fetch_sub(&sh->holders, 1);
		if (sh->promote)
		{
			admission_promote(&sh->a);
			if (x % 3 == 0)
				sched_yield();
			admission_release(&sh->a, ADMISSION_EXISTING);
		}
		else
			admission_release(&sh->a, ADMISSION_INITIAL);
	}
	return NULL;
}

static void
run_concurrent(uint32_t limit, bool promote)
{
	static Shared sh;
	Worker		w[NTHREADS];
	pthread_t	th[NTHREADS];
	uint64_t	admitted = 0;
	uint64_t	refused = 0;

	memset(&sh, 0, sizeof(sh));
	fresh_admission(&sh.a, limit, 1000000);
	sh.limit = limit;
	sh.promote = promote;
	for (int i = 0; i < NTHREADS; i++)
	{
		w[i] = (Worker) {.sh = &sh, .id = i};
		if (pthread_create(&th[i], NULL, acquirer, &w[i]) != 0)
		{
			FAIL("pthread_create failed");
			atomic_store(&sh.go, true);
			for (int j = 0; j < i; j++)
				pthread_join(th[j], NULL);
			return;
		}
	}
	atomic_store(&sh.go, true);
	for (int i = 0; i < NTHREADS; i++)
	{
		pthread_join(th[i], NULL);
		admitted += w[i].admitted;
		refused += w[i].refused;
	}

	CHECK_UEQ(admitted + refused, (uint64_t) NTHREADS * ITERATIONS);
	/* never more than the limit at once, seen by the holders or by the count */
	if (atomic_load(&sh.max_holders) > limit || atomic_load(&sh.max_seen) > limit)
		FAIL("limit %u exceeded: %u holders at once, in_use seen at %u", limit,
			 atomic_load(&sh.max_holders), atomic_load(&sh.max_seen));
	/* every refusal counted, and only refusals */
	CHECK_UEQ(REJECTED(&sh.a, ADMISSION_INITIAL), refused);
	CHECK_UEQ(REJECTED(&sh.a, ADMISSION_EXISTING), 0);
	/* back to zero */
	CHECK_UEQ(IN_USE(&sh.a, ADMISSION_INITIAL), 0);
	CHECK_UEQ(IN_USE(&sh.a, ADMISSION_EXISTING), 0);
	/* with 8 threads and a small limit, both outcomes must have happened */
	if (limit > 0)
		CHECK(admitted > 0);
	else
		CHECK_UEQ(admitted, 0);
}

TEST(concurrent_limit_3)
{
	run_concurrent(3, false);
}

TEST(concurrent_limit_1)
{
	run_concurrent(1, false);
}

TEST(concurrent_limit_0)
{
	run_concurrent(0, false);
}

TEST(concurrent_with_promotion)
{
	run_concurrent(4, true);
}

/* Threads acquire while the main thread moves the limit up and down. */
typedef struct Flipper
{
	Admission	a;
	_Atomic bool stop;
	_Atomic uint32_t over;		/* times in_use exceeded the highest limit */
	_Atomic uint64_t admitted;
	_Atomic uint64_t refused;
	_Atomic uint64_t rounds[NTHREADS];	/* loop iterations of each worker */
	_Atomic int next_worker;
} Flipper;

static void *
flip_worker(void *arg)
{
	Flipper    *f = arg;
	int			me = atomic_fetch_add(&f->next_worker, 1);

	while (!atomic_load(&f->stop))
	{
		atomic_fetch_add(&f->rounds[me], 1);
		if (admission_acquire(&f->a, ADMISSION_EXISTING))
		{
			atomic_fetch_add(&f->admitted, 1);
			if (IN_USE(&f->a, ADMISSION_EXISTING) > 5)
				atomic_fetch_add(&f->over, 1);
			sched_yield();
			admission_release(&f->a, ADMISSION_EXISTING);
		}
		else
			atomic_fetch_add(&f->refused, 1);
	}
	return NULL;
}

TEST(concurrent_limit_changes)
{
	static Flipper f;
	pthread_t	th[NTHREADS];
	uint32_t	limits[] = {5, 0, 2, 1, 5, 0, 3};

	memset(&f, 0, sizeof(f));
	fresh_admission(&f.a, 0, 5);
	for (int i = 0; i < NTHREADS; i++)
		pthread_create(&th[i], NULL, flip_worker, &f);
	for (int round = 0; round < 28; round++)
	{
		admission_set_limits(&f.a, 0, limits[round % 7]);
		usleep(2000);
	}
	/*
	 * Limit 0 at the end: once the holders are out, nobody gets in.  An
	 * acquire that read the old limit before the store may still succeed
	 * (a lowered limit applies to requests that come after it), so wait
	 * until every worker has gone round its loop twice since: any acquire
	 * begun before the store has then ended.
	 */
	admission_set_limits(&f.a, 0, 0);
	{
		double		until = unit_now() + 5;
		uint64_t	seen[NTHREADS];

		for (int i = 0; i < NTHREADS; i++)
			seen[i] = atomic_load(&f.rounds[i]);
		for (int i = 0; i < NTHREADS; i++)
			while (atomic_load(&f.rounds[i]) < seen[i] + 2 && unit_now() < until)
				sched_yield();
		while (IN_USE(&f.a, ADMISSION_EXISTING) != 0 && unit_now() < until)
			sched_yield();
	}
	{
		uint64_t	admitted = atomic_load(&f.admitted);

		usleep(20000);
		CHECK_UEQ(atomic_load(&f.admitted), admitted);
	}
	atomic_store(&f.stop, true);
	for (int i = 0; i < NTHREADS; i++)
		pthread_join(th[i], NULL);
	CHECK_UEQ(atomic_load(&f.over), 0);
	CHECK_UEQ(IN_USE(&f.a, ADMISSION_EXISTING), 0);
	CHECK_UEQ(REJECTED(&f.a, ADMISSION_EXISTING), atomic_load(&f.refused));
	CHECK(atomic_load(&f.admitted) > 0);
}

UNIT_MAIN()
