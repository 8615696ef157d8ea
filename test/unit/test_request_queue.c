/*
 * test_request_queue.c
 *		The FIFO + eventfd that hands shape requests to the main thread
 *		(src/contract/request_queue.c).
 */
#include "unit.h"

#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include "request_queue.h"

static bool
readable(int fd, int timeout_ms)
{
	struct pollfd p = {fd, POLLIN, 0};

	return poll(&p, 1, timeout_ms) == 1 && (p.revents & POLLIN);
}

static int
list_length(ShapeRequest *r)
{
	int			n = 0;

	for (; r; r = r->next)
		n++;
	return n;
}

TEST(fifo_order_and_take_all)
{
	RequestQueue q;
	ShapeRequest r[5];
	ShapeRequest *list;

	memset(r, 0, sizeof(r));
	REQUIRE_EQ(request_queue_init(&q), 0);
	CHECK(q.wake_fd >= 0);
	CHECK(!readable(q.wake_fd, 0));
	CHECK(request_queue_take_all(&q) == NULL);	/* empty: returns, no block */

	for (int i = 0; i < 5; i++)
	{
		r[i].next = &r[(i + 1) % 5];	/* garbage the push must reset */
		CHECK(request_queue_push(&q, &r[i]));
	}
	CHECK(readable(q.wake_fd, 0));
	list = request_queue_take_all(&q);
	CHECK_EQ(list_length(list), 5);
	for (int i = 0; i < 5 && list; i++, list = list->next)
		CHECK(list == &r[i]);
	CHECK(list == NULL);

	/* drained: no wakeup pending, nothing queued */
	CHECK(!readable(q.wake_fd, 0));
	CHECK(request_queue_take_all(&q) == NULL);

	/* the queue works again after being emptied */
	CHECK(request_queue_push(&q, &r[3]));
	CHECK(request_queue_push(&q, &r[1]));
	CHECK(readable(q.wake_fd, 0));
	list = request_queue_take_all(&q);
	CHECK(list == &r[3]);
	CHECK(list && list->next == &r[1]);
	CHECK(list && list->next && list->next->next == NULL);
	CHECK(!readable(q.wake_fd, 0));

	request_queue_destroy(&q);
	CHECK_EQ(q.wake_fd, -1);
}

TEST(eventfd_counts_pushes)
{
	RequestQueue q;
	ShapeRequest r[3];
	uint64_t	count = 0;

	memset(r, 0, sizeof(r));
	REQUIRE_EQ(request_queue_init(&q), 0);
	for (int i = 0; i < 3; i++)
		request_queue_push(&q, &r[i]);
	/* one write per push */
	CHECK_EQ(read(q.wake_fd, &count, sizeof(count)), sizeof(count));
	CHECK_UEQ(count, 3);
	CHECK(!readable(q.wake_fd, 0));
	/* the requests are still queued: the eventfd is only the doorbell */
	CHECK_EQ(list_length(request_queue_take_all(&q)), 3);
	request_queue_destroy(&q);
}

TEST(close_returns_pending_and_refuses)
{
	RequestQueue q;
	ShapeRequest r[3];
	ShapeRequest *list;

	memset(r, 0, sizeof(r));
	REQUIRE_EQ(request_queue_init(&q), 0);
	CHECK(request_queue_push(&q, &r[0]));
	CHECK(request_queue_push(&q, &r[1]));
	list = request_queue_close(&q);
	CHECK(list == &r[0]);
	CHECK(list && list->next == &r[1]);
	CHECK(list && list->next && list->next->next == NULL);
	CHECK(q.closed);

	CHECK(!request_queue_push(&q, &r[2]));
	CHECK(request_queue_take_all(&q) == NULL);
	CHECK(request_queue_close(&q) == NULL);	/* twice is harmless */
	request_queue_destroy(&q);
}

TEST(definition_and_resolution_free)
{
	ShapeDefinition def = {0};
	ShapeResolution res = {0};

	/* an empty definition */
	shape_definition_free(&def);

	def.schema = strdup("s");
	def.table = strdup("t");
	def.where = strdup("id = $2");
	def.nparams = 2;
	def.params = calloc(2, sizeof(char *));
	def.params[1] = strdup("7");	/* params[0] stays NULL: a gap */
	def.ncolumns = 2;
	def.columns = calloc(2, sizeof(char *));
	def.columns[0] = strdup("id");
	def.columns[1] = strdup("title");
	shape_definition_free(&def);	/* ASan's leak check verifies it */
	CHECK(def.schema == NULL && def.table == NULL && def.where == NULL);
	CHECK(def.params == NULL && def.columns == NULL);
	CHECK_EQ(def.nparams, 0);
	CHECK_EQ(def.ncolumns, 0);
	shape_definition_free(&def);	/* twice is harmless */

	refusal_set(&res.refusal, REFUSAL_INVALID, "table", "no");
	res.schema_json = strdup("{}");
	shape_resolution_free(&res);
	CHECK(res.refusal.field == NULL && res.refusal.text == NULL && res.schema_json == NULL);
	shape_resolution_free(&res);
}

/* --------------------------------------------------------- threaded */

#define PRODUCERS 4
#define PUSHES 10000

typedef struct Prod
{
	RequestQueue *q;
	ShapeRequest *reqs;
	int			id;
} Prod;

static void *
producer(void *arg)
{
	Prod	   *p = arg;

	for (int i = 0; i < PUSHES; i++)
	{
		if (!request_queue_push(p->q, &p->reqs[p->id * PUSHES + i]))
		{
			FAIL("push refused");
			break;
		}
		if (i % 1000 == 0)
			usleep(100);
	}
	return NULL;
}

TEST(producers_and_consumer)
{
	RequestQueue q;
	ShapeRequest *reqs = calloc(PRODUCERS * PUSHES, sizeof(ShapeRequest));
	int		   *seen = calloc(PRODUCERS * PUSHES, sizeof(int));
	int			last[PRODUCERS];
	pthread_t	th[PRODUCERS];
	Prod		args[PRODUCERS];
	int			received = 0;
	int			wakeups = 0;
	int			timeouts = 0;
	double		deadline;

	REQUIRE(reqs != NULL && seen != NULL);
	REQUIRE_EQ(request_queue_init(&q), 0);
	for (int i = 0; i < PRODUCERS * PUSHES; i++)
		reqs[i].owner = &seen[i];
	for (int i = 0; i < PRODUCERS; i++)
	{
		last[i] = -1;
		args[i].q = &q;
		args[i].reqs = reqs;
		args[i].id = i;
		pthread_create(&th[i], NULL, producer, &args[i]);
	}

	/*
	 * The consumer sleeps on the eventfd only, as the main loop does: a lost
	 * wakeup would show up as a poll timeout with requests still queued.
	 */
	deadline = unit_now() + 20;
	while (received < PRODUCERS * PUSHES && unit_now() < deadline)
	{
		ShapeRequest *list;

		if (!readable(q.wake_fd, 2000))
		{
			timeouts++;
			/* nothing should be queued when there is no wakeup */
			list = request_queue_take_all(&q);
			if (list != NULL)
				FAIL("lost wakeup: %d requests queued, eventfd not readable",
					 list_length(list));
		}
		else
		{
			wakeups++;
			list = request_queue_take_all(&q);
		}
		for (; list; list = list->next)
		{
			int			idx = (int) (list - reqs);
			int			producer_id = idx / PUSHES;

			if (idx < 0 || idx >= PRODUCERS * PUSHES)
			{
				FAIL("foreign request %p", (void *) list);
				break;
			}
			if (seen[idx]++)
				FAIL("request %d received twice", idx);
			/* one producer's requests arrive in its order */
			if (idx % PUSHES != last[producer_id] + 1)
				FAIL("producer %d: request %d after %d", producer_id, idx % PUSHES,
					 last[producer_id]);
			last[producer_id] = idx % PUSHES;
			received++;
		}
	}
	for (int i = 0; i < PRODUCERS; i++)
		pthread_join(th[i], NULL);
	CHECK_EQ(received, PRODUCERS * PUSHES);
	CHECK_EQ(timeouts, 0);
	CHECK(wakeups > 0);
	for (int i = 0; i < PRODUCERS * PUSHES; i++)
		if (seen[i] != 1)
		{
			FAIL("request %d seen %d times", i, seen[i]);
			break;
		}
	CHECK(request_queue_take_all(&q) == NULL);
	CHECK(!readable(q.wake_fd, 0));
	request_queue_destroy(&q);
	free(reqs);
	free(seen);
}

/*
 * The doorbell invariant: whenever a request is queued, the eventfd is
 * readable.  Each round, one push races with one take_all (both released
 * by a spin barrier so that they overlap), then the invariant is checked
 * at rest.  A take_all that read the eventfd after taking the list could
 * swallow the wakeup of a push that landed in between.
 */
typedef struct Race
{
	RequestQueue *q;
	ShapeRequest req;
	_Atomic int go;
	_Atomic int done;
	int			rounds;
} Race;

static void *
race_pusher(void *arg)
{
	Race	   *r = arg;

	for (int round = 1; round <= r->rounds; round++)
	{
		for (int spin = 0; atomic_load(&r->go) != round; spin++)
			if (spin % 256 == 255)
				sched_yield();	/* two cores may be shared */
		request_queue_push(r->q, &r->req);
		atomic_store(&r->done, round);
	}
	return NULL;
}

TEST(no_lost_wakeup_when_push_races_take)
{
	RequestQueue q;
	Race		r;
	pthread_t	th;
	int			lost = 0;
	int			raced = 0;

	REQUIRE_EQ(request_queue_init(&q), 0);
	memset(&r, 0, sizeof(r));
	r.q = &q;
	r.rounds = 20000;
	pthread_create(&th, NULL, race_pusher, &r);
	for (int round = 1; round <= r.rounds; round++)
	{
		ShapeRequest *got;

		atomic_store(&r.go, round);
		got = request_queue_take_all(&q);
		for (int spin = 0; atomic_load(&r.done) != round; spin++)
			if (spin % 256 == 255)
				sched_yield();
		if (got == NULL)
			raced++;			/* the push came after the take */
		/* at rest: queued implies readable */
		if (q.head != NULL && !readable(q.wake_fd, 0))
			lost++;
		(void) request_queue_take_all(&q);
	}
	pthread_join(th, NULL);
	CHECK_EQ(lost, 0);
	CHECK(raced > 0);			/* the race did happen */
	request_queue_destroy(&q);
}

/* a push racing with close either lands in close's list or is refused */
typedef struct CloseRace
{
	RequestQueue *q;
	ShapeRequest *reqs;
	int			n;
	_Atomic int accepted;
} CloseRace;

static void *
close_race_pusher(void *arg)
{
	CloseRace  *cr = arg;

	for (int i = 0; i < cr->n; i++)
	{
		if (!request_queue_push(cr->q, &cr->reqs[i]))
			break;
		atomic_fetch_add(&cr->accepted, 1);
	}
	return NULL;
}

TEST(close_races_with_push)
{
	for (int round = 0; round < 20; round++)
	{
		RequestQueue q;
		CloseRace	cr;
		pthread_t	th;
		int			got = 0;
		ShapeRequest *list;

		REQUIRE_EQ(request_queue_init(&q), 0);
		cr.q = &q;
		cr.n = 2000;
		cr.reqs = calloc((size_t) cr.n, sizeof(ShapeRequest));
		atomic_init(&cr.accepted, 0);
		pthread_create(&th, NULL, close_race_pusher, &cr);
		for (int i = 0; i < 3; i++)
			got += list_length(request_queue_take_all(&q));
		list = request_queue_close(&q);
		got += list_length(list);
		pthread_join(th, NULL);
		got += list_length(request_queue_take_all(&q));
		CHECK_EQ(got, atomic_load(&cr.accepted));
		request_queue_destroy(&q);
		free(cr.reqs);
	}
}

UNIT_MAIN()
