/*
 * test_conn_table.c
 *		One slot per TCP connection (src/net/conn_table.c): generations,
 *		slot reuse, a full table, the write and request deadlines' arm and
 *		clear, and open/close from several threads while another reads
 *		generations.
 */
#include "unit.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <pthread.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include "conn_table.h"

#define STATE(t, i)	((ConnState) (atomic_load(&(t)->slots[i].gen_state) & 0xFF))
#define ARMED(t, i)	atomic_load(&(t)->activity[i].write_armed_ms)
#define REQ_ARMED(t, i) atomic_load(&(t)->activity[i].request_armed_ms)

/* ------------------------------------------------------------ basics */

TEST(init_all_free)
{
	ConnTable	t;

	REQUIRE_EQ(conn_table_init(&t, 5, NULL), 0);
	CHECK_UEQ(t.nslots, 5);
	CHECK_EQ(atomic_load(&t.write_timeout_ms), 0);
	CHECK_EQ(atomic_load(&t.request_timeout_ms), 0);
	for (uint32_t i = 0; i < 5; i++)
	{
		CHECK_EQ(STATE(&t, i), CONN_SLOT_FREE);
		CHECK_UEQ(conn_table_generation(&t, i), 0);
		CHECK_EQ(t.slots[i].fd, -1);
		CHECK_EQ(ARMED(&t, i), 0);
		CHECK_EQ(REQ_ARMED(&t, i), 0);
		/* each slot's deadlines sit on a cache line of their own */
		CHECK_EQ((uintptr_t) &t.activity[i].write_armed_ms % 128, 0);
		CHECK((uintptr_t) &t.activity[i].request_armed_ms / 128 ==
			  (uintptr_t) &t.activity[i].write_armed_ms / 128);
		CHECK(i == 0 || (uintptr_t) &t.activity[i].write_armed_ms -
			  (uintptr_t) &t.activity[i - 1].bytes_sent >= 64);
	}
	conn_table_destroy(&t);
	CHECK(t.slots == NULL);
	conn_table_destroy(&t);		/* twice is harmless */
}

TEST(open_close_bumps_generation_and_reuses_slot)
{
	ConnTable	t;
	uint32_t	a;
	uint32_t	b;

	REQUIRE_EQ(conn_table_init(&t, 4, NULL), 0);
	a = conn_table_open(&t, 10, "1.2.3.4:5");
	REQUIRE(a != CONN_NO_SLOT && a < 4);
	CHECK_UEQ(conn_table_generation(&t, a), 1);
	CHECK_EQ(STATE(&t, a), CONN_SLOT_OPEN);
	CHECK_EQ(t.slots[a].fd, 10);
	CHECK_STR_EQ(t.slots[a].peer, "1.2.3.4:5");
	CHECK_STR_EQ(t.slots[a].handle, "");
	conn_table_set_handle(&t, a, "12345-678");
	CHECK_STR_EQ(t.slots[a].handle, "12345-678");

	conn_table_close(&t, a);
	CHECK_UEQ(conn_table_generation(&t, a), 2);
	CHECK_EQ(STATE(&t, a), CONN_SLOT_FREE);
	CHECK_EQ(t.slots[a].fd, -1);

	/* the slot just freed is the next one given out, with a new generation */
	b = conn_table_open(&t, 11, NULL);
	CHECK_UEQ(b, a);
	CHECK_UEQ(conn_table_generation(&t, b), 3);
	CHECK_EQ(STATE(&t, b), CONN_SLOT_OPEN);
	CHECK_EQ(t.slots[b].fd, 11);
	CHECK_STR_EQ(t.slots[b].peer, "?");	/* no peer known */
	CHECK_STR_EQ(t.slots[b].handle, "");	/* nothing left of the previous one */
	conn_table_close(&t, b);
	CHECK_UEQ(conn_table_generation(&t, b), 4);

	/* many cycles on one slot: +2 per cycle, always the same slot */
	for (int i = 0; i < 100; i++)
	{
		uint32_t	s = conn_table_open(&t, 12, "p");

		CHECK_UEQ(s, a);
		CHECK_UEQ(conn_table_generation(&t, s), 5 + 2 * (uint64_t) i);
		conn_table_close(&t, s);
	}
	CHECK_UEQ(conn_table_generation(&t, a), 204);
	/* the other slots were never touched */
	for (uint32_t i = 0; i < 4; i++)
		if (i != a)
			CHECK_UEQ(conn_table_generation(&t, i), 0);

	/* closing nothing, or out of range, is a no-op */
	conn_table_close(&t, CONN_NO_SLOT);
	conn_table_close(&t, 4);
	conn_table_close(&t, 1000);
	conn_table_set_handle(&t, CONN_NO_SLOT, "x");
	CHECK_UEQ(conn_table_generation(&t, a), 204);
	conn_table_destroy(&t);
}

TEST(long_peer_and_handle_are_truncated)
{
	ConnTable	t;
	char		longtext[300];
	uint32_t	s;

	memset(longtext, 'x', sizeof(longtext) - 1);
	longtext[sizeof(longtext) - 1] = '\0';
	REQUIRE_EQ(conn_table_init(&t, 1, NULL), 0);
	s = conn_table_open(&t, 3, longtext);
	REQUIRE(s == 0);
	CHECK_EQ(strlen(t.slots[s].peer), CONN_PEER_LEN - 1);
	conn_table_set_handle(&t, s, longtext);
	CHECK_EQ(strlen(t.slots[s].handle), CONN_HANDLE_LEN - 1);
	conn_table_close(&t, s);
	conn_table_destroy(&t);
}

TEST(full_table_gives_no_slot)
{
	ConnTable	t;
	uint32_t	got[3];
	bool		seen[3] = {false, false, false};
	uint32_t	again;

	REQUIRE_EQ(conn_table_init(&t, 3, NULL), 0);
	for (int i = 0; i < 3; i++)
	{
		got[i] = conn_table_open(&t, 20 + i, "p");
		REQUIRE(got[i] < 3);
		CHECK(!seen[got[i]]);
		seen[got[i]] = true;
	}
	CHECK_UEQ(conn_table_open(&t, 30, "p"), CONN_NO_SLOT);
	CHECK_UEQ(conn_table_open(&t, 31, "p"), CONN_NO_SLOT);
	/* a failed open touched nobody */
	for (int i = 0; i < 3; i++)
	{
		CHECK_UEQ(conn_table_generation(&t, got[i]), 1);
		CHECK_EQ(t.slots[got[i]].fd, 20 + i);
	}

	/* one closes: exactly one more fits, in its slot */
	conn_table_close(&t, got[1]);
	again = conn_table_open(&t, 32, "p");
	CHECK_UEQ(again, got[1]);
	CHECK_UEQ(conn_table_generation(&t, again), 3);
	CHECK_UEQ(conn_table_open(&t, 33, "p"), CONN_NO_SLOT);
	for (int i = 0; i < 3; i++)
		conn_table_close(&t, got[i]);
	for (int i = 0; i < 3; i++)
		CHECK(conn_table_open(&t, 40 + i, "p") != CONN_NO_SLOT);
	CHECK_UEQ(conn_table_open(&t, 43, "p"), CONN_NO_SLOT);
	conn_table_destroy(&t);

	/* a table of no slots admits no connection */
	REQUIRE_EQ(conn_table_init(&t, 0, NULL), 0);
	CHECK_UEQ(conn_table_open(&t, 5, "p"), CONN_NO_SLOT);
	conn_table_destroy(&t);
}

/* -------------------------------------------------------- deadlines */

/*
 * A connection waits for a request from its open: the request deadline is
 * armed there, cleared once a request is in, armed again when its response
 * ends, and gone at close.
 */
TEST(request_deadline_life_cycle)
{
	ConnTable	t;
	uint32_t	s;
	uint32_t	other;
	int64_t		before;
	int64_t		after;

	REQUIRE_EQ(conn_table_init(&t, 2, NULL), 0);
	before = conn_now_coarse_ms();
	s = conn_table_open(&t, 7, "p");
	after = conn_now_coarse_ms();
	REQUIRE(s != CONN_NO_SLOT);
	CHECK(REQ_ARMED(&t, s) >= before && REQ_ARMED(&t, s) <= after && REQ_ARMED(&t, s) > 0);
	CHECK_EQ(ARMED(&t, s), 0);	/* no write in flight */
	other = conn_table_open(&t, 8, "q");
	REQUIRE(other != CONN_NO_SLOT);

	conn_request_clear(&t, s);
	CHECK_EQ(REQ_ARMED(&t, s), 0);
	CHECK(REQ_ARMED(&t, other) > 0);	/* only its own slot */
	usleep(30000);
	before = conn_now_coarse_ms();
	conn_request_arm(&t, s);
	after = conn_now_coarse_ms();
	CHECK(REQ_ARMED(&t, s) >= before && REQ_ARMED(&t, s) <= after);
	CHECK(REQ_ARMED(&t, s) > REQ_ARMED(&t, other));

	/* the write deadline is a separate matter */
	conn_deadline_arm(&t, s);
	conn_deadline_clear(&t, s);
	CHECK(REQ_ARMED(&t, s) >= before);

	/* no slot: a no-op */
	conn_request_arm(&t, CONN_NO_SLOT);
	conn_request_clear(&t, CONN_NO_SLOT);

	conn_table_close(&t, s);
	CHECK_EQ(REQ_ARMED(&t, s), 0);
	conn_table_close(&t, other);
	conn_table_destroy(&t);
}

TEST(deadline_arm_and_clear)
{
	ConnTable	t;
	uint32_t	s;
	uint32_t	other;
	int64_t		before;
	int64_t		after;

	REQUIRE_EQ(conn_table_init(&t, 2, NULL), 0);
	s = conn_table_open(&t, 7, "p");
	other = conn_table_open(&t, 8, "q");
	REQUIRE(s != CONN_NO_SLOT && other != CONN_NO_SLOT);
	CHECK_EQ(ARMED(&t, s), 0);

	/*
	 * arm notes when the piece was handed over (coarse monotonic clock),
	 * whatever the timeout: the deadline thread applies the timeout in
	 * force when it looks, 0 meaning never
	 */
	CHECK_EQ(atomic_load(&t.write_timeout_ms), 0);
	before = conn_now_coarse_ms();
	conn_deadline_arm(&t, s);
	after = conn_now_coarse_ms();
	CHECK(ARMED(&t, s) >= before);
	CHECK(ARMED(&t, s) <= after);
	CHECK(ARMED(&t, s) > 0);
	CHECK_EQ(ARMED(&t, other), 0);	/* only its own slot */

	/* the timeout does not enter the stored value */
	atomic_store(&t.write_timeout_ms, 1500);
	before = conn_now_coarse_ms();
	conn_deadline_arm(&t, s);
	after = conn_now_coarse_ms();
	CHECK(ARMED(&t, s) >= before && ARMED(&t, s) <= after);

	/* re-arming moves it forward */
	usleep(30000);
	{
		int64_t		first = ARMED(&t, s);

		conn_deadline_arm(&t, s);
		CHECK(ARMED(&t, s) > first);
	}

	conn_deadline_clear(&t, s);
	CHECK_EQ(ARMED(&t, s), 0);
	conn_deadline_clear(&t, s);
	CHECK_EQ(ARMED(&t, s), 0);

	/* a request with no slot: nothing anywhere */
	conn_deadline_arm(&t, CONN_NO_SLOT);
	conn_deadline_clear(&t, CONN_NO_SLOT);
	CHECK_EQ(ARMED(&t, s), 0);
	CHECK_EQ(ARMED(&t, other), 0);

	/* close drops a pending one, and a new open starts with none */
	conn_deadline_arm(&t, s);
	CHECK(ARMED(&t, s) != 0);
	conn_table_close(&t, s);
	CHECK_EQ(ARMED(&t, s), 0);
	atomic_store(&t.activity[s].write_armed_ms, 12345);	/* a stale store */
	CHECK_UEQ(conn_table_open(&t, 9, "r"), s);
	CHECK_EQ(ARMED(&t, s), 0);

	conn_table_close(&t, s);
	conn_table_close(&t, other);
	conn_table_destroy(&t);
}

/* ----------------------------------------------------------- stress */

#define STRESS_SLOTS	3
#define STRESS_THREADS	4
#define STRESS_CYCLES	4000

typedef struct Stress
{
	ConnTable	t;
	_Atomic int owner[STRESS_SLOTS];	/* thread id + 1 holding the slot */
	_Atomic int opens;
	_Atomic int full;			/* opens that found no slot */
	_Atomic bool go;
	_Atomic bool done;
	_Atomic uint64_t reads;
} Stress;

typedef struct StressArg
{
	Stress	   *st;
	int			id;
} StressArg;

static void *
stress_opener(void *arg)
{
	StressArg  *a = arg;
	Stress	   *st = a->st;
	int			sv[2];
	char		peer[32];

	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
	{
		FAIL("socketpair: %s", strerror(errno));
		return NULL;
	}
	snprintf(peer, sizeof(peer), "thread-%d", a->id);
	while (!atomic_load(&st->go))
		sched_yield();
	for (int i = 0; i < STRESS_CYCLES; i++)
	{
		uint32_t	s = conn_table_open(&st->t, sv[0], peer);
		int			expected = 0;
		uint64_t	gen;

		if (s == CONN_NO_SLOT)
		{
			atomic_fetch_add(&st->full, 1);
			sched_yield();
			continue;
		}
		atomic_fetch_add(&st->opens, 1);
		if (s >= STRESS_SLOTS)
		{
			FAIL("slot %u out of range", s);
			continue;
		}
		/* nobody else holds it */
		if (!atomic_compare_exchange_strong(&st->owner[s], &expected, a->id + 1))
			FAIL("slot %u given to thread %d while thread %d holds it", s, a->id,
				 expected - 1);
		gen = conn_table_generation(&st->t, s);
		if (gen % 2 != 1)
			FAIL("open slot %u has even generation %llu", s, (unsigned long long) gen);
		pthread_mutex_lock(&st->t.slots[s].lock);
		if (st->t.slots[s].fd != sv[0] || strcmp(st->t.slots[s].peer, peer) != 0)
			FAIL("slot %u holds fd %d peer %s, not ours (%d %s)", s, st->t.slots[s].fd,
				 st->t.slots[s].peer, sv[0], peer);
		pthread_mutex_unlock(&st->t.slots[s].lock);
		conn_table_set_handle(&st->t, s, peer);
		conn_deadline_arm(&st->t, s);
		if (i % 7 == 0)
			sched_yield();
		conn_deadline_clear(&st->t, s);
		if (conn_table_generation(&st->t, s) != gen)
			FAIL("slot %u changed generation while held", s);
		atomic_store(&st->owner[s], 0);
		conn_table_close(&st->t, s);
	}
	close(sv[0]);
	close(sv[1]);
	return NULL;
}

static void *
stress_reader(void *arg)
{
	Stress	   *st = arg;
	uint64_t	last[STRESS_SLOTS] = {0};

	while (!atomic_load(&st->done))
	{
		for (uint32_t s = 0; s < STRESS_SLOTS; s++)
		{
			uint64_t	gen = conn_table_generation(&st->t, s);
			uint64_t	gs = atomic_load(&st->t.slots[s].gen_state);
			ConnState	state = (ConnState) (gs & 0xFF);

			/* generations only grow */
			if (gen < last[s])
				FAIL("slot %u generation went back from %llu to %llu", s,
					 (unsigned long long) last[s], (unsigned long long) gen);
			if ((gs >> 8) < gen)
				FAIL("slot %u gen_state %llu behind generation %llu", s,
					 (unsigned long long) (gs >> 8), (unsigned long long) gen);
			last[s] = gs >> 8;
			/* odd generations are open, even ones free: nothing else here */
			if (state != ((gs >> 8) % 2 ? CONN_SLOT_OPEN : CONN_SLOT_FREE))
				FAIL("slot %u: state %d with generation %llu", s, (int) state,
					 (unsigned long long) (gs >> 8));
			atomic_fetch_add_explicit(&st->reads, 1, memory_order_relaxed);
		}
	}
	return NULL;
}

TEST(stress_open_close_with_generation_reader)
{
	static Stress st;
	StressArg	args[STRESS_THREADS];
	pthread_t	th[STRESS_THREADS];
	pthread_t	reader;
	uint64_t	gens = 0;

	memset(&st, 0, sizeof(st));
	REQUIRE_EQ(conn_table_init(&st.t, STRESS_SLOTS, NULL), 0);
	atomic_store(&st.t.write_timeout_ms, 1000);
	pthread_create(&reader, NULL, stress_reader, &st);
	for (int i = 0; i < STRESS_THREADS; i++)
	{
		args[i] = (StressArg) {.st = &st, .id = i};
		pthread_create(&th[i], NULL, stress_opener, &args[i]);
	}
	atomic_store(&st.go, true);
	for (int i = 0; i < STRESS_THREADS; i++)
		pthread_join(th[i], NULL);
	atomic_store(&st.done, true);
	pthread_join(reader, NULL);

	fprintf(stderr, "  # %d opens, %d found the table full, %llu generation reads\n",
			atomic_load(&st.opens), atomic_load(&st.full),
			(unsigned long long) atomic_load(&st.reads));
	CHECK_EQ(atomic_load(&st.opens) + atomic_load(&st.full), STRESS_THREADS * STRESS_CYCLES);
	CHECK(atomic_load(&st.reads) > 0);
	/* every open and every close bumped one generation: 2 per cycle */
	for (uint32_t s = 0; s < STRESS_SLOTS; s++)
	{
		gens += conn_table_generation(&st.t, s);
		CHECK_EQ(STATE(&st.t, s), CONN_SLOT_FREE);
		CHECK_EQ(st.t.slots[s].fd, -1);
		CHECK_EQ(ARMED(&st.t, s), 0);
	}
	CHECK_UEQ(gens, 2 * (uint64_t) atomic_load(&st.opens));
	/* and the free list holds every slot exactly once */
	{
		bool		seen[STRESS_SLOTS] = {false};

		for (int i = 0; i < STRESS_SLOTS; i++)
		{
			uint32_t	s = conn_table_open(&st.t, 99, "end");

			REQUIRE(s < STRESS_SLOTS);
			CHECK(!seen[s]);
			seen[s] = true;
		}
		CHECK_UEQ(conn_table_open(&st.t, 99, "end"), CONN_NO_SLOT);
	}
	conn_table_destroy(&st.t);
}

/*
 * A reader of a connection's activity never sees a row that mixes two
 * connections that held the slot one after the other: the peer and the
 * handle it copies are of the same connection, and a row it returns is
 * of an open one.
 */
typedef struct ActivityRace
{
	ConnActivity *a;
	_Atomic bool stop;
	long		rows;
	long		mixed;
} ActivityRace;

static void *
activity_writer(void *arg)
{
	ActivityRace *race = arg;
	char		text[32];

	for (int k = 0; !atomic_load(&race->stop); k = (k + 1) % 1000)
	{
		snprintf(text, sizeof(text), "peer-%d", k);
		conn_activity_open(race->a, text, 1);
		snprintf(text, sizeof(text), "h-%d", k);
		conn_activity_set_handle(race->a, text);
		conn_activity_set_state(race->a, CONN_ACTIVITY_STREAMING);
		conn_activity_add_sent(race->a, 10);
		conn_activity_close(race->a);
	}
	return NULL;
}

TEST(activity_rows_are_of_one_connection)
{
	ConnActivity *a = aligned_alloc(128, conn_activity_size(1));
	ActivityRace race = {.a = a};
	pthread_t	writer;
	double		until;

	REQUIRE(a != NULL);
	conn_activity_init(a, 1);
	REQUIRE_EQ(pthread_create(&writer, NULL, activity_writer, &race), 0);
	until = unit_now() + 0.5;
	while (unit_now() < until)
	{
		ConnActivityView v;
		int			peer_k,
					handle_k;

		if (!conn_activity_read(a, &v, 2))
			continue;
		race.rows++;
		if (sscanf(v.peer, "peer-%d", &peer_k) != 1 ||
			(v.handle[0] && (sscanf(v.handle, "h-%d", &handle_k) != 1 || handle_k != peer_k)) ||
			v.state == CONN_ACTIVITY_CLOSED || v.bytes_sent > 10)
			race.mixed++;
	}
	atomic_store(&race.stop, true);
	pthread_join(writer, NULL);
	CHECK_EQ(race.mixed, 0);
	CHECK(race.rows > 0);
	free(a);
}

UNIT_MAIN()
