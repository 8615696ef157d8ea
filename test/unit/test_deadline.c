/*
 * test_deadline.c
 *		The deadline thread (src/net/deadline.c): which sockets a sweep shuts
 *		down, the re-check under the slot's lock that keeps a kill from
 *		landing on a connection that completed or on the next one to get
 *		the same slot and socket number, the write path racing the sweeper,
 *		the thread itself reaping a stalled write while sparing one that
 *		keeps making progress, and the request deadline: a connection that
 *		gets no whole request in time is closed, quietly.
 *
 * A slot holds when its pending piece was handed over (write_armed_ms, 0:
 * none); a write is due, its "deadline" passed, once now - armed reaches
 * the timeout in force at the sweep (write_timeout_ms, 0: never).  The
 * request deadline works the same way (request_armed_ms,
 * request_timeout_ms).
 *
 * Connections are real AF_UNIX socketpairs: the table holds one end, the
 * test watches the other (the "peer") for the EOF a shutdown(2) produces.
 */
#define _GNU_SOURCE
#include "unit.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include "admission.h"
#include "conn_table.h"
#include "deadline.h"
#include "thread_log.h"
#include "unit_metrics.h"

#define STATE(t, i)	((ConnState) (atomic_load(&(t)->slots[i].gen_state) & 0xFF))
/* when the slot's pending piece was handed over; 0: none */
#define ARMED(t, i) atomic_load(&(t)->activity[i].write_armed_ms)
#define SET_ARMED(t, i, v) atomic_store(&(t)->activity[i].write_armed_ms, (int64_t) (v))
/* when the slot began waiting for a request; 0: one is in hand */
#define REQ_ARMED(t, i) atomic_load(&(t)->activity[i].request_armed_ms)
#define SET_REQ_ARMED(t, i, v) atomic_store(&(t)->activity[i].request_armed_ms, (int64_t) (v))

/* ---------------------------------------------------------- helpers */

typedef struct Pair
{
	int			fd;				/* the connection's socket, in the table */
	int			peer;			/* the client's end */
} Pair;

static bool
pair_open(Pair *p)
{
	int			sv[2];

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
	{
		FAIL("socketpair: %s", strerror(errno));
		p->fd = p->peer = -1;
		return false;
	}
	p->fd = sv[0];
	p->peer = sv[1];
	return true;
}

static void
pair_close(Pair *p)
{
	if (p->fd >= 0)
		close(p->fd);
	if (p->peer >= 0)
		close(p->peer);
	p->fd = p->peer = -1;
}

/* Whether the peer reads EOF: the connection's socket was shut down. */
static bool
peer_sees_eof(const Pair *p)
{
	char		c;
	ssize_t		n = recv(p->peer, &c, 1, MSG_DONTWAIT);

	return n == 0;
}

/*
 * Whether the connection is intact both ways: the peer has nothing to read
 * (no EOF), and a byte goes from the connection to the peer and back.
 */
static bool
pair_intact(const Pair *p)
{
	char		c = 'x';
	ssize_t		n = recv(p->peer, &c, 1, MSG_DONTWAIT);

	if (n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
		return false;
	if (send(p->fd, "a", 1, MSG_NOSIGNAL | MSG_DONTWAIT) != 1)
		return false;
	if (recv(p->peer, &c, 1, MSG_DONTWAIT) != 1 || c != 'a')
		return false;
	if (send(p->peer, "b", 1, MSG_NOSIGNAL | MSG_DONTWAIT) != 1)
		return false;
	return recv(p->fd, &c, 1, MSG_DONTWAIT) == 1 && c == 'b';
}

/* Whether the connection's own end was shut down: sending fails with EPIPE. */
static bool
conn_end_shut(const Pair *p)
{
	return send(p->fd, "z", 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 && errno == EPIPE;
}

/* thread_log lines, collected by drain */
#define MAX_LINES	64
static char log_lines[MAX_LINES][THREAD_LOG_LINE];
static ThreadLogLevel log_levels[MAX_LINES];
static int	log_count;

static void
log_emit(ThreadLogLevel level, const char *line)
{
	if (log_count < MAX_LINES)
	{
		log_levels[log_count] = level;
		snprintf(log_lines[log_count], THREAD_LOG_LINE, "%s", line);
	}
	log_count++;
}

/* Drains the ring; returns how many lines it held. */
static int
log_collect(void)
{
	log_count = 0;
	thread_log_drain(log_emit);
	return log_count;
}

typedef struct Fixture
{
	ConnTable	t;
	Admission	adm;
	DeadlineWatch w;
} Fixture;

static bool
fixture_init(Fixture *f, uint32_t nslots, int64_t timeout_ms)
{
	memset(f, 0, sizeof(*f));
	if (conn_table_init(&f->t, nslots, NULL) != 0)
		return false;
	admission_init(&f->adm, 100, 100);
	unit_metrics_fresh();
	atomic_store(&f->t.write_timeout_ms, timeout_ms);
	f->w.conns = &f->t;
	log_collect();				/* nothing left over from elsewhere */
	return true;
}

#define REAPED(f) ((void) (f), UNIT_REAPED())
#define REQUEST_TIMEOUTS(f) ((void) (f), UNIT_REQUEST_TIMEOUTS())

/* ---------------------------------------------------- single sweeps */

TEST(expired_deadline_on_open_slot_is_reaped)
{
	Fixture		f;
	Pair		p;
	uint32_t	s;
	uint64_t	gen;

	REQUIRE(fixture_init(&f, 4, 300));
	REQUIRE(pair_open(&p));
	s = conn_table_open(&f.t, p.fd, "10.1.2.3:4567");
	REQUIRE(s != CONN_NO_SLOT);
	conn_table_set_handle(&f.t, s, "h-123");
	gen = conn_table_generation(&f.t, s);
	SET_ARMED(&f.t, s, 700);		/* due at 700 + 300 */

	/* a millisecond early: nothing */
	CHECK_EQ(deadline_sweep(&f.w, 999), 0);
	CHECK_EQ(STATE(&f.t, s), CONN_SLOT_OPEN);
	CHECK(pair_intact(&p));
	CHECK_EQ(log_collect(), 0);

	/* past it by 250 ms: shut down, marked, counted, logged */
	CHECK_EQ(deadline_sweep(&f.w, 1250), 1);
	CHECK_EQ(STATE(&f.t, s), CONN_SLOT_REAPED);
	CHECK_UEQ(conn_table_generation(&f.t, s), gen);	/* still the same connection */
	CHECK_EQ(ARMED(&f.t, s), 0);
	CHECK_UEQ(REAPED(&f), 1);
	CHECK(peer_sees_eof(&p));
	CHECK(conn_end_shut(&p));
	CHECK_EQ(f.t.slots[s].fd, p.fd);	/* shut down, not closed: the fd stays */
	REQUIRE_EQ(log_collect(), 1);
	CHECK_EQ(log_levels[0], THREAD_LOG_WARNING);
	CHECK_STR_EQ(log_lines[0], "closed a stalled serve of shape h-123 to 10.1.2.3:4567: "
				 "a write made no progress for 550 ms");

	/* once reaped, never again, even if the write path arms once more */
	CHECK_EQ(deadline_sweep(&f.w, 5000), 0);
	SET_ARMED(&f.t, s, 700);
	CHECK_EQ(deadline_sweep(&f.w, 5000), 0);
	CHECK_UEQ(REAPED(&f), 1);
	CHECK_EQ(log_collect(), 0);

	/* libmicrohttpd then closes it: the slot is free, with a new generation */
	conn_table_close(&f.t, s);
	CHECK_EQ(STATE(&f.t, s), CONN_SLOT_FREE);
	CHECK_UEQ(conn_table_generation(&f.t, s), gen + 1);
	pair_close(&p);
	conn_table_destroy(&f.t);
}

TEST(reap_without_handle_logs_none)
{
	Fixture		f;
	Pair		p;
	uint32_t	s;

	REQUIRE(fixture_init(&f, 1, 40));
	REQUIRE(pair_open(&p));
	s = conn_table_open(&f.t, p.fd, "[::1]:99");
	SET_ARMED(&f.t, s, 37);
	CHECK_EQ(deadline_sweep(&f.w, 76), 0);
	CHECK_EQ(deadline_sweep(&f.w, 77), 1);	/* exactly at the deadline */
	CHECK(peer_sees_eof(&p));
	REQUIRE_EQ(log_collect(), 1);
	CHECK_STR_EQ(log_lines[0], "closed a stalled serve of shape (none) to [::1]:99: "
				 "a write made no progress for 40 ms");
	conn_table_close(&f.t, s);
	pair_close(&p);
	conn_table_destroy(&f.t);
}

TEST(future_and_zero_deadlines_are_untouched)
{
	Fixture		f;
	Pair		p[4];
	uint32_t	s[4];
	/* with a 300 ms timeout: never, due at 1001, never, due at 1000 */
	int64_t		armed[4] = {0, 701, INT64_MAX - 300, 700};

	REQUIRE(fixture_init(&f, 8, 300));
	for (int i = 0; i < 4; i++)
	{
		REQUIRE(pair_open(&p[i]));
		s[i] = conn_table_open(&f.t, p[i].fd, "peer");
		REQUIRE(s[i] != CONN_NO_SLOT);
		SET_ARMED(&f.t, s[i], armed[i]);
	}

	/* with the timeout off, nothing is ever due */
	atomic_store(&f.t.write_timeout_ms, 0);
	CHECK_EQ(deadline_sweep(&f.w, INT64_MAX - 1), 0);
	atomic_store(&f.t.write_timeout_ms, -1);
	CHECK_EQ(deadline_sweep(&f.w, INT64_MAX - 1), 0);
	atomic_store(&f.t.write_timeout_ms, 300);

	/* at 999 nobody is due */
	CHECK_EQ(deadline_sweep(&f.w, 999), 0);
	for (int i = 0; i < 4; i++)
	{
		CHECK_EQ(STATE(&f.t, s[i]), CONN_SLOT_OPEN);
		CHECK_EQ(ARMED(&f.t, s[i]), armed[i]);
		CHECK(pair_intact(&p[i]));
	}

	/* at 1000 only the one due at 1000 goes; its neighbours are untouched */
	CHECK_EQ(deadline_sweep(&f.w, 1000), 1);
	CHECK_EQ(STATE(&f.t, s[3]), CONN_SLOT_REAPED);
	CHECK(peer_sees_eof(&p[3]));
	for (int i = 0; i < 3; i++)
	{
		CHECK_EQ(STATE(&f.t, s[i]), CONN_SLOT_OPEN);
		CHECK_EQ(ARMED(&f.t, s[i]), armed[i]);
		CHECK(pair_intact(&p[i]));
	}

	/* much later: the 1001 one goes too; 0 and "never" stay */
	CHECK_EQ(deadline_sweep(&f.w, INT64_MAX - 1), 1);
	CHECK_EQ(STATE(&f.t, s[1]), CONN_SLOT_REAPED);
	CHECK(peer_sees_eof(&p[1]));
	CHECK_EQ(STATE(&f.t, s[0]), CONN_SLOT_OPEN);
	CHECK_EQ(STATE(&f.t, s[2]), CONN_SLOT_OPEN);
	CHECK(pair_intact(&p[0]));
	CHECK(pair_intact(&p[2]));
	CHECK_UEQ(REAPED(&f), 2);
	CHECK_EQ(log_collect(), 2);

	for (int i = 0; i < 4; i++)
	{
		conn_table_close(&f.t, s[i]);
		pair_close(&p[i]);
	}
	conn_table_destroy(&f.t);
}

/*
 * The slot keeps when the piece was handed over; the timeout is the one in
 * force at the sweep, so a reload that changes it reaches pending writes.
 */
TEST(timeout_in_force_at_the_sweep_applies)
{
	Fixture		f;
	Pair		p;
	uint32_t	s;

	REQUIRE(fixture_init(&f, 1, 0));
	REQUIRE(pair_open(&p));
	s = conn_table_open(&f.t, p.fd, "peer");

	/* deadlines off: the write path still notes the time, nothing is reaped */
	conn_deadline_arm(&f.t, s);
	CHECK(ARMED(&f.t, s) != 0);
	SET_ARMED(&f.t, s, 1000);
	CHECK_EQ(deadline_sweep(&f.w, 1000000), 0);

	/* a long timeout: 200 ms stalled is fine */
	atomic_store(&f.t.write_timeout_ms, 60000);
	CHECK_EQ(deadline_sweep(&f.w, 1200), 0);
	CHECK(pair_intact(&p));

	/* lowered to 100 ms: the same pending write is now overdue */
	atomic_store(&f.t.write_timeout_ms, 100);
	CHECK_EQ(deadline_sweep(&f.w, 1200), 1);
	CHECK(peer_sees_eof(&p));
	REQUIRE_EQ(log_collect(), 1);
	CHECK_STR_EQ(log_lines[0], "closed a stalled serve of shape (none) to peer: "
				 "a write made no progress for 200 ms");
	conn_table_close(&f.t, s);
	pair_close(&p);
	conn_table_destroy(&f.t);
}

TEST(closed_slot_with_stale_deadline_is_untouched)
{
	Fixture		f;
	Pair		p;
	uint32_t	s;

	REQUIRE(fixture_init(&f, 2, 300));
	REQUIRE(pair_open(&p));
	s = conn_table_open(&f.t, p.fd, "peer");
	SET_ARMED(&f.t, s, 700);
	conn_table_close(&f.t, s);
	CHECK_EQ(ARMED(&f.t, s), 0);		/* close dropped it */

	/* a late store from a write path that raced the close */
	SET_ARMED(&f.t, s, 700);
	CHECK_EQ(deadline_sweep(&f.w, 100000), 0);
	CHECK_EQ(STATE(&f.t, s), CONN_SLOT_FREE);
	/* the socket (still open: libmicrohttpd closes it after notifying) is whole */
	CHECK(pair_intact(&p));
	CHECK_UEQ(REAPED(&f), 0);
	CHECK_EQ(log_collect(), 0);
	pair_close(&p);
	conn_table_destroy(&f.t);
}

/*
 * Connection A on socket X arms a deadline and closes; connection B gets
 * the same slot and, through dup2, the very same socket number X.  A sweep
 * long past A's deadline must leave B alone.
 */
TEST(generation_guard_same_slot_same_fd)
{
	Fixture		f;
	Pair		a;
	Pair		b;
	int			x;
	uint32_t	sa;
	uint32_t	sb;

	REQUIRE(fixture_init(&f, 4, 300));
	REQUIRE(pair_open(&a));
	x = a.fd;
	sa = conn_table_open(&f.t, x, "peer-a");
	REQUIRE(sa != CONN_NO_SLOT);
	conn_deadline_arm(&f.t, sa);		/* due in 300 ms */
	REQUIRE(ARMED(&f.t, sa) != 0);
	conn_table_close(&f.t, sa);

	/* the kernel hands socket number X to B's connection */
	REQUIRE(pair_open(&b));
	close(x);
	a.fd = -1;
	REQUIRE(dup2(b.fd, x) == x);
	close(b.fd);
	b.fd = x;
	sb = conn_table_open(&f.t, x, "peer-b");
	REQUIRE_EQ(sb, sa);
	CHECK_EQ(f.t.slots[sb].fd, x);

	CHECK_EQ(deadline_sweep(&f.w, conn_now_coarse_ms() + 100000), 0);
	CHECK_EQ(STATE(&f.t, sb), CONN_SLOT_OPEN);
	CHECK(pair_intact(&b));

	/* B arms its own: not due until its own deadline */
	conn_deadline_arm(&f.t, sb);
	CHECK_EQ(deadline_sweep(&f.w, conn_now_coarse_ms() + 100), 0);
	CHECK(pair_intact(&b));

	/* control: once B's own deadline is past, B is reaped */
	CHECK_EQ(deadline_sweep(&f.w, conn_now_coarse_ms() + 100000), 1);
	CHECK(peer_sees_eof(&b));
	REQUIRE_EQ(log_collect(), 1);
	CHECK(strstr(log_lines[0], "to peer-b:") != NULL);
	conn_table_close(&f.t, sb);
	pair_close(&a);
	pair_close(&b);
	conn_table_destroy(&f.t);
}

/* ------------------------------------- the re-check under the lock */

/*
 * The sweeper reads a deadline without the lock, then takes the slot's lock
 * and looks again.  To act in between, the test holds the slot's lock (made
 * recursive, so that conn_table_close/open still work from this thread)
 * while a sweeper thread that saw an expired deadline waits for it.
 */

typedef struct Sweeper
{
	DeadlineWatch *w;
	int64_t		now;
	int			reaped;
	pthread_t	th;
} Sweeper;

static void *
sweeper_main(void *arg)
{
	Sweeper    *sw = arg;

	sw->reaped = deadline_sweep(sw->w, sw->now);
	return NULL;
}

static void
make_recursive(ConnSlot *s)
{
	pthread_mutexattr_t attr;

	pthread_mutex_destroy(&s->lock);
	pthread_mutexattr_init(&attr);
	pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
	pthread_mutex_init(&s->lock, &attr);
	pthread_mutexattr_destroy(&attr);
}

/* Waits until another thread blocks on `s`'s lock (glibc: lock word 2). */
static bool
wait_contended(ConnSlot *s)
{
	double		until = unit_now() + 5;

	while (unit_now() < until)
	{
		if (__atomic_load_n(&s->lock.__data.__lock, __ATOMIC_ACQUIRE) == 2)
			return true;
		usleep(200);
	}
	return false;
}

typedef enum LockedAction
{
	ACT_NOTHING,				/* control: still due, so reaped */
	ACT_CLEAR,					/* the piece completed: deadline cleared */
	ACT_REARM_FUTURE,			/* the next piece armed a later deadline */
	ACT_CLOSE,					/* the connection closed (stale deadline left) */
	ACT_CLOSE_REOPEN_SAME_FD	/* ... and a new one got the slot and socket */
} LockedAction;

static void
run_locked_race(LockedAction act)
{
	Fixture		f;
	Pair		a;
	Pair		b = {-1, -1};
	uint32_t	s;
	Sweeper		sw;
	bool		blocked;
	int64_t		now = 50000;

	REQUIRE(fixture_init(&f, 2, 300));
	make_recursive(&f.t.slots[0]);
	make_recursive(&f.t.slots[1]);
	REQUIRE(pair_open(&a));
	s = conn_table_open(&f.t, a.fd, "peer-a");
	REQUIRE(s != CONN_NO_SLOT);
	SET_ARMED(&f.t, s, 1000);		/* due at 1300, long before `now` */

	pthread_mutex_lock(&f.t.slots[s].lock);
	sw = (Sweeper) {.w = &f.w, .now = now, .reaped = -1};
	pthread_create(&sw.th, NULL, sweeper_main, &sw);
	blocked = wait_contended(&f.t.slots[s]);
	if (!blocked)
		FAIL("the sweeper never waited for the lock of a slot past its deadline");

	switch (act)
	{
		case ACT_NOTHING:
			break;
		case ACT_CLEAR:
			conn_deadline_clear(&f.t, s);
			break;
		case ACT_REARM_FUTURE:
			SET_ARMED(&f.t, s, now - 299);	/* due a millisecond after `now` */
			break;
		case ACT_CLOSE:
			conn_table_close(&f.t, s);
			SET_ARMED(&f.t, s, 1000);	/* a late arm after the close */
			break;
		case ACT_CLOSE_REOPEN_SAME_FD:
			{
				int			x = a.fd;
				uint32_t	s2;

				conn_table_close(&f.t, s);
				if (!pair_open(&b))
					break;
				close(x);
				a.fd = -1;
				if (dup2(b.fd, x) == x)
				{
					close(b.fd);
					b.fd = x;
				}
				else
					FAIL("could not put B on A's socket number");
				s2 = conn_table_open(&f.t, b.fd, "peer-b");
				CHECK_UEQ(s2, s);
				break;
			}
	}
	pthread_mutex_unlock(&f.t.slots[s].lock);
	pthread_join(sw.th, NULL);

	if (act == ACT_NOTHING)
	{
		CHECK_EQ(sw.reaped, 1);
		CHECK_EQ(STATE(&f.t, s), CONN_SLOT_REAPED);
		CHECK(peer_sees_eof(&a));
		CHECK_UEQ(REAPED(&f), 1);
		CHECK_EQ(log_collect(), 1);
	}
	else
	{
		CHECK_EQ(sw.reaped, 0);
		CHECK_UEQ(REAPED(&f), 0);
		CHECK_EQ(log_collect(), 0);
		if (act == ACT_CLOSE_REOPEN_SAME_FD)
		{
			CHECK_EQ(STATE(&f.t, s), CONN_SLOT_OPEN);
			CHECK_EQ(b.fd, f.t.slots[s].fd);
			CHECK(pair_intact(&b));
		}
		else if (act == ACT_CLOSE)
		{
			CHECK_EQ(STATE(&f.t, s), CONN_SLOT_FREE);
			CHECK(pair_intact(&a));
		}
		else
		{
			CHECK_EQ(STATE(&f.t, s), CONN_SLOT_OPEN);
			CHECK(pair_intact(&a));
		}
	}
	if (STATE(&f.t, s) != CONN_SLOT_FREE)
		conn_table_close(&f.t, s);
	pair_close(&a);
	pair_close(&b);
	conn_table_destroy(&f.t);
}

TEST(locked_recheck_control_still_due_is_reaped)
{
	run_locked_race(ACT_NOTHING);
}

TEST(locked_recheck_cleared_meanwhile_is_spared)
{
	run_locked_race(ACT_CLEAR);
}

TEST(locked_recheck_rearmed_meanwhile_is_spared)
{
	run_locked_race(ACT_REARM_FUTURE);
}

TEST(locked_recheck_closed_meanwhile_is_spared)
{
	run_locked_race(ACT_CLOSE);
}

TEST(locked_recheck_reused_slot_and_fd_is_spared)
{
	run_locked_race(ACT_CLOSE_REOPEN_SAME_FD);
}

/* ------------------------------------------ the write path vs sweeps */

/*
 * A writer thread arms and clears one slot's deadline as the write path
 * does, while a sweeper thread sweeps with `now` just around the moment the
 * write it sees armed becomes due (a 1 ms timeout: armed + 0, 1 or 2).  Each round ends when the writer sees
 * its connection reaped; it then goes on arming and clearing a while, as
 * libmicrohttpd's thread would until its next send fails.  Neighbouring
 * slots, one idle and one with a far deadline, must never be touched, and
 * each round reaps exactly once.
 */

#define RACE_ROUNDS		25
#define RACE_AFTERMATH	200

typedef struct Race
{
	Fixture		f;
	_Atomic uint32_t slot;		/* the writer's */
	_Atomic bool stop;
	_Atomic bool round_open;	/* the writer's connection is in the table */
	_Atomic uint64_t sweeps;
} Race;

typedef struct Writer
{
	Race	   *r;
	uint64_t	arms;
	bool		saw_reap;
} Writer;

static void *
race_writer(void *arg)
{
	Writer	   *wr = arg;
	Race	   *r = wr->r;
	uint32_t	s = atomic_load(&r->slot);
	double		until = unit_now() + 20;
	int			after = -1;

	while (unit_now() < until)
	{
		conn_deadline_arm(&r->f.t, s);
		wr->arms++;
		/* a write in flight: usually short, now and then blocked a while */
		if (wr->arms % 64 == 0)
			usleep(1500);
		else if (wr->arms % 4 == 0)
			sched_yield();
		conn_deadline_clear(&r->f.t, s);
		if (after < 0 && STATE(&r->f.t, s) == CONN_SLOT_REAPED)
		{
			wr->saw_reap = true;
			after = RACE_AFTERMATH;
		}
		if (after >= 0 && after-- == 0)
			break;
	}
	return NULL;
}

static void *
race_sweeper(void *arg)
{
	Race	   *r = arg;
	uint64_t	x = 0x2545F4914F6CDD1Dull;

	while (!atomic_load(&r->stop))
	{
		int64_t		d = ARMED(&r->f.t, atomic_load(&r->slot));
		int64_t		now;

		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		/* due from d + 1 (a 1 ms timeout): try d, d + 1 and d + 2 */
		now = d != 0 ? d + (int64_t) (x % 3) : conn_now_coarse_ms();
		deadline_sweep(&r->f.w, now);
		atomic_fetch_add_explicit(&r->sweeps, 1, memory_order_relaxed);
		if (x % 16 == 0)
			sched_yield();
	}
	return NULL;
}

TEST(race_write_path_vs_sweeper)
{
	static Race r;
	Pair		idle;
	Pair		far;
	uint32_t	s_idle;
	uint32_t	s_far;
	int64_t		far_armed = conn_now_coarse_ms() + 3600 * 1000;
	pthread_t	sweeper;
	int			rounds_reaped = 0;

	memset(&r, 0, sizeof(r));
	REQUIRE(fixture_init(&r.f, 4, 1));		/* a 1 ms write timeout */
	REQUIRE(pair_open(&idle));
	REQUIRE(pair_open(&far));
	s_idle = conn_table_open(&r.f.t, idle.fd, "idle");
	s_far = conn_table_open(&r.f.t, far.fd, "far");
	SET_ARMED(&r.f.t, s_far, far_armed);

	pthread_create(&sweeper, NULL, race_sweeper, &r);
	for (int round = 0; round < RACE_ROUNDS; round++)
	{
		Pair		p;
		Writer		wr = {.r = &r};
		pthread_t	writer;
		uint64_t	gen;

		REQUIRE(pair_open(&p));
		r.slot = conn_table_open(&r.f.t, p.fd, "writer");
		REQUIRE(r.slot != CONN_NO_SLOT);
		gen = conn_table_generation(&r.f.t, r.slot);
		pthread_create(&writer, NULL, race_writer, &wr);
		pthread_join(writer, NULL);

		if (!wr.saw_reap)
		{
			FAIL("round %d: a write timing out every millisecond was never reaped "
				 "(%llu arms)", round, (unsigned long long) wr.arms);
			conn_table_close(&r.f.t, r.slot);
			pair_close(&p);
			break;
		}
		rounds_reaped++;
		/* reaped once: the shutdown reached the socket and nothing else */
		CHECK_EQ(STATE(&r.f.t, r.slot), CONN_SLOT_REAPED);
		CHECK_UEQ(conn_table_generation(&r.f.t, r.slot), gen);
		CHECK_EQ(ARMED(&r.f.t, r.slot), 0);	/* the writer cleared last */
		CHECK(peer_sees_eof(&p));
		CHECK(conn_end_shut(&p));
		CHECK_UEQ(REAPED(&r.f), (uint64_t) rounds_reaped);
		CHECK_EQ(STATE(&r.f.t, s_idle), CONN_SLOT_OPEN);
		CHECK_EQ(STATE(&r.f.t, s_far), CONN_SLOT_OPEN);
		CHECK_EQ(ARMED(&r.f.t, s_idle), 0);
		CHECK_EQ(ARMED(&r.f.t, s_far), far_armed);
		CHECK(pair_intact(&idle));
		CHECK(pair_intact(&far));
		/* libmicrohttpd closes it; the next round's connection takes the slot */
		conn_table_close(&r.f.t, r.slot);
		pair_close(&p);
	}
	atomic_store(&r.stop, true);
	pthread_join(sweeper, NULL);

	CHECK_EQ(rounds_reaped, RACE_ROUNDS);
	CHECK_UEQ(REAPED(&r.f), (uint64_t) rounds_reaped);
	{
		int			n = log_collect();

		CHECK_EQ(n, rounds_reaped);
		for (int i = 0; i < n && i < MAX_LINES; i++)
			CHECK(strstr(log_lines[i], " to writer: ") != NULL);
	}
	CHECK(atomic_load(&r.sweeps) > 0);
	conn_table_close(&r.f.t, s_idle);
	conn_table_close(&r.f.t, s_far);
	pair_close(&idle);
	pair_close(&far);
	conn_table_destroy(&r.f.t);
}

/* ------------------------------------------------------ the thread */

typedef struct Rearmer
{
	ConnTable  *t;
	uint32_t	slot;
	double		seconds;
	double		max_gap;		/* the longest time between two arms */
} Rearmer;

static void *
rearmer_main(void *arg)
{
	Rearmer    *ra = arg;
	double		start = unit_now();
	double		last = start;

	for (;;)
	{
		double		now = unit_now();

		if (now - last > ra->max_gap)
			ra->max_gap = now - last;
		last = now;
		/* one piece completes, the next is handed over */
		conn_deadline_clear(ra->t, ra->slot);
		conn_deadline_arm(ra->t, ra->slot);
		if (now - start >= ra->seconds)
			break;
		usleep(10000);
	}
	conn_deadline_clear(ra->t, ra->slot);
	return NULL;
}

/* Milliseconds until the peer reads EOF, or -1 after timeout_ms. */
static double
wait_eof_ms(const Pair *p, int timeout_ms)
{
	double		start = unit_now();
	struct pollfd pfd = {.fd = p->peer, .events = POLLIN | POLLRDHUP};

	while ((unit_now() - start) * 1000 < timeout_ms)
	{
		int			left = timeout_ms - (int) ((unit_now() - start) * 1000);

		if (poll(&pfd, 1, left > 0 ? left : 0) > 0 && peer_sees_eof(p))
			return (unit_now() - start) * 1000;
	}
	return -1;
}

TEST(thread_reaps_stalled_and_spares_progressing)
{
	Fixture		f;
	Pair		stalled;
	Pair		busy;
	Pair		idle;
	uint32_t	s_stalled;
	uint32_t	s_busy;
	uint32_t	s_idle;
	Rearmer		ra;
	pthread_t	rearmer;
	double		armed_at;
	double		took;
	double		stop_start;

	REQUIRE(fixture_init(&f, 8, 50));
	REQUIRE(pair_open(&stalled));
	REQUIRE(pair_open(&busy));
	REQUIRE(pair_open(&idle));
	s_stalled = conn_table_open(&f.t, stalled.fd, "stalled");
	s_busy = conn_table_open(&f.t, busy.fd, "busy");
	s_idle = conn_table_open(&f.t, idle.fd, "idle");
	conn_table_set_handle(&f.t, s_stalled, "h-stalled");

	REQUIRE_EQ(deadline_start(&f.w, &f.t), 0);
	ra = (Rearmer) {.t = &f.t, .slot = s_busy, .seconds = 1.0};
	pthread_create(&rearmer, NULL, rearmer_main, &ra);

	/* one piece handed over, never completed */
	armed_at = unit_now();
	conn_deadline_arm(&f.t, s_stalled);
	took = wait_eof_ms(&stalled, 2000);
	if (took < 0)
		FAIL("the stalled connection was not reaped within 2 s");
	else
	{
		double		since_arm = (unit_now() - armed_at) * 1000;

		fprintf(stderr, "  # stalled write reaped %.0f ms after it was armed (timeout 50 ms)\n",
				since_arm);
		/* not before its deadline (coarse clock: a tick of slack), soon after it */
		if (since_arm < 40 || since_arm > 200)
			FAIL("reaped %.0f ms after arming, expected 50..200 ms", since_arm);
	}
	/* the reap shuts the socket down, then marks the slot, under its lock */
	pthread_mutex_lock(&f.t.slots[s_stalled].lock);
	CHECK_EQ(STATE(&f.t, s_stalled), CONN_SLOT_REAPED);
	pthread_mutex_unlock(&f.t.slots[s_stalled].lock);

	pthread_join(rearmer, NULL);
	/* the one re-armed every 10 ms for a second was never reaped */
	if (STATE(&f.t, s_busy) != CONN_SLOT_OPEN)
	{
		if (ra.max_gap * 1000 < 40)
			FAIL("a write re-armed every 10 ms (longest gap %.0f ms) was reaped with "
				 "a 50 ms timeout", ra.max_gap * 1000);
		else
			fprintf(stderr, "  # the re-arming thread was descheduled %.0f ms: its reap "
					"is legitimate, not counted\n", ra.max_gap * 1000);
	}
	else
		CHECK(pair_intact(&busy));
	CHECK_EQ(STATE(&f.t, s_idle), CONN_SLOT_OPEN);
	CHECK(pair_intact(&idle));

	stop_start = unit_now();
	deadline_stop(&f.w);
	if (unit_now() - stop_start > 0.5)
		FAIL("deadline_stop took %.2fs", unit_now() - stop_start);
	CHECK(!f.w.started);
	if (STATE(&f.t, s_busy) == CONN_SLOT_OPEN)
		CHECK_UEQ(REAPED(&f), 1);
	{
		int			n = log_collect();
		bool		found = false;

		for (int i = 0; i < n && i < MAX_LINES; i++)
			if (strstr(log_lines[i], "shape h-stalled to stalled:") != NULL)
				found = true;
		CHECK(found);
	}
	for (uint32_t i = 0; i < 3; i++)
		conn_table_close(&f.t, i == 0 ? s_stalled : i == 1 ? s_busy : s_idle);
	pair_close(&stalled);
	pair_close(&busy);
	pair_close(&idle);
	conn_table_destroy(&f.t);
}

/* ------------------------------------------------ request deadline */

/*
 * A connection that got no whole request in time is shut down like a
 * stalled write, but quietly: no log line, its own counter, and the
 * ordinary close of an idle connection (no reset: nothing is unsent).
 */
TEST(request_deadline_reaps_quietly)
{
	Fixture		f;
	Pair		p;
	uint32_t	s;
	struct linger lg = {1, 1};
	socklen_t	lglen = sizeof(lg);

	REQUIRE(fixture_init(&f, 4, 0));	/* write deadlines off */
	atomic_store(&f.t.request_timeout_ms, 300);
	REQUIRE(pair_open(&p));
	s = conn_table_open(&f.t, p.fd, "10.9.8.7:65");
	REQUIRE(s != CONN_NO_SLOT);
	CHECK(REQ_ARMED(&f.t, s) > 0);	/* open arms it: it waits for a request */
	SET_REQ_ARMED(&f.t, s, 700);	/* due at 700 + 300 */

	CHECK_EQ(deadline_sweep(&f.w, 999), 0);
	CHECK_EQ(STATE(&f.t, s), CONN_SLOT_OPEN);
	CHECK(pair_intact(&p));

	CHECK_EQ(deadline_sweep(&f.w, 1000), 1);
	CHECK_EQ(STATE(&f.t, s), CONN_SLOT_REAPED);
	CHECK_EQ(REQ_ARMED(&f.t, s), 0);
	CHECK(peer_sees_eof(&p));
	CHECK(conn_end_shut(&p));
	CHECK_UEQ(REQUEST_TIMEOUTS(&f), 1);
	CHECK_UEQ(REAPED(&f), 0);	/* not a stalled serve */
	CHECK_EQ(log_collect(), 0);
	CHECK_EQ(getsockopt(p.fd, SOL_SOCKET, SO_LINGER, &lg, &lglen), 0);
	CHECK_EQ(lg.l_onoff, 0);

	/* once reaped, never again */
	SET_REQ_ARMED(&f.t, s, 700);
	CHECK_EQ(deadline_sweep(&f.w, 5000), 0);
	CHECK_UEQ(REQUEST_TIMEOUTS(&f), 1);

	conn_table_close(&f.t, s);
	pair_close(&p);
	conn_table_destroy(&f.t);
}

/*
 * Each deadline goes with its own timeout, the one in force at the sweep;
 * either may be off while the other is on.
 */
TEST(request_and_write_deadlines_have_their_own_timeouts)
{
	Fixture		f;
	Pair		p[3];
	uint32_t	s[3];

	REQUIRE(fixture_init(&f, 4, 1000));
	atomic_store(&f.t.request_timeout_ms, 300);
	for (int i = 0; i < 3; i++)
	{
		REQUIRE(pair_open(&p[i]));
		s[i] = conn_table_open(&f.t, p[i].fd, "peer");
		REQUIRE(s[i] != CONN_NO_SLOT);
	}
	/* 0: a write in flight; 1: waiting for a request; 2: serving, nothing in flight */
	SET_REQ_ARMED(&f.t, s[0], 0);
	SET_ARMED(&f.t, s[0], 700);
	SET_REQ_ARMED(&f.t, s[1], 700);
	SET_REQ_ARMED(&f.t, s[2], 0);

	/* request deadlines off: only writes can be due, and this one is not yet */
	atomic_store(&f.t.request_timeout_ms, 0);
	CHECK_EQ(deadline_sweep(&f.w, 1000), 0);
	/* a reload that turns them on reaches connections already waiting */
	atomic_store(&f.t.request_timeout_ms, 60000);
	CHECK_EQ(deadline_sweep(&f.w, 1000), 0);
	atomic_store(&f.t.request_timeout_ms, 300);
	CHECK_EQ(deadline_sweep(&f.w, 1000), 1);
	CHECK_EQ(STATE(&f.t, s[1]), CONN_SLOT_REAPED);
	CHECK_EQ(STATE(&f.t, s[0]), CONN_SLOT_OPEN);
	CHECK(pair_intact(&p[0]));

	/* write deadlines off, request deadlines on: the write is never due */
	atomic_store(&f.t.write_timeout_ms, 0);
	CHECK_EQ(deadline_sweep(&f.w, 100000), 0);
	atomic_store(&f.t.write_timeout_ms, 1000);
	CHECK_EQ(deadline_sweep(&f.w, 1700), 1);
	CHECK_EQ(STATE(&f.t, s[0]), CONN_SLOT_REAPED);
	CHECK_EQ(STATE(&f.t, s[2]), CONN_SLOT_OPEN);
	CHECK(pair_intact(&p[2]));
	CHECK_UEQ(REAPED(&f), 1);
	CHECK_UEQ(REQUEST_TIMEOUTS(&f), 1);
	CHECK_EQ(log_collect(), 1);	/* the stalled write only */

	for (int i = 0; i < 3; i++)
	{
		conn_table_close(&f.t, s[i]);
		pair_close(&p[i]);
	}
	conn_table_destroy(&f.t);
}

/*
 * The thread sweeps often enough for the shortest timeout in force, here
 * the request deadline's, whether write deadlines are off or much longer:
 * a connection that never sends a request is closed soon after its
 * deadline, and not before; one whose request is in is left alone.
 */
static void
check_thread_reaps_a_connection_that_sends_no_request(int64_t write_timeout_ms)
{
	Fixture		f;
	Pair		waiting;
	Pair		served;
	uint32_t	s_waiting;
	uint32_t	s_served;
	double		opened;
	double		took;

	REQUIRE(fixture_init(&f, 4, write_timeout_ms));
	atomic_store(&f.t.request_timeout_ms, 200);
	REQUIRE(pair_open(&waiting));
	REQUIRE(pair_open(&served));
	REQUIRE_EQ(deadline_start(&f.w, &f.t), 0);
	opened = unit_now();
	s_waiting = conn_table_open(&f.t, waiting.fd, "waiting");
	s_served = conn_table_open(&f.t, served.fd, "served");
	conn_request_clear(&f.t, s_served);

	took = wait_eof_ms(&waiting, 3000);
	if (took < 0)
		FAIL("a connection with no request was not closed within 3 s");
	else
	{
		double		since_open = (unit_now() - opened) * 1000;

		fprintf(stderr, "  # closed %.0f ms after it opened (request timeout 200 ms, "
				"write timeout %lld ms)\n", since_open, (long long) write_timeout_ms);
		/* coarse clock: a tick of slack before; a few sweeps after */
		if (since_open < 190 || since_open > 800)
			FAIL("closed %.0f ms after opening, expected 200..800 ms", since_open);
	}
	CHECK_EQ(STATE(&f.t, s_served), CONN_SLOT_OPEN);
	CHECK(pair_intact(&served));
	deadline_stop(&f.w);
	CHECK_UEQ(REQUEST_TIMEOUTS(&f), 1);
	CHECK_EQ(log_collect(), 0);
	conn_table_close(&f.t, s_waiting);
	conn_table_close(&f.t, s_served);
	pair_close(&waiting);
	pair_close(&served);
	conn_table_destroy(&f.t);
}

TEST(thread_reaps_a_connection_that_sends_no_request)
{
	check_thread_reaps_a_connection_that_sends_no_request(0);
}

TEST(thread_reaps_it_while_write_deadlines_are_longer)
{
	check_thread_reaps_a_connection_that_sends_no_request(60000);
}

TEST(thread_with_timeout_zero_reaps_nothing_and_stops_promptly)
{
	Fixture		f;
	Pair		p;
	uint32_t	s;
	double		t0;

	REQUIRE(fixture_init(&f, 2, 0));
	deadline_stop(&f.w);		/* never started: a no-op */
	REQUIRE(pair_open(&p));
	s = conn_table_open(&f.t, p.fd, "peer");
	SET_ARMED(&f.t, s, 1);		/* long stalled, but deadlines are off */
	REQUIRE_EQ(deadline_start(&f.w, &f.t), 0);
	usleep(60000);
	t0 = unit_now();
	deadline_stop(&f.w);		/* the thread sleeps a whole second: stop wakes it */
	if (unit_now() - t0 > 0.3)
		FAIL("deadline_stop took %.2fs", unit_now() - t0);
	CHECK_EQ(STATE(&f.t, s), CONN_SLOT_OPEN);
	CHECK(pair_intact(&p));
	CHECK_UEQ(REAPED(&f), 0);
	conn_table_close(&f.t, s);
	pair_close(&p);
	conn_table_destroy(&f.t);
}

UNIT_MAIN()
