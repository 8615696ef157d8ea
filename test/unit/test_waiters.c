/*
 * test_waiters.c
 *		Parked connections and the park thread (src/net/waiters.c), and the
 *		stalled-write deadline (src/net/deadline.c), end to end through the
 *		real libmicrohttpd server (src/net/) with plain socket
 *		clients: a parked client that goes away is noticed at once and
 *		releases what it held, hundreds of them at once too; a shape's
 *		notification wakes only that shape's waiters; a long-poll times out
 *		up-to-date; a client that stops reading a large response is reaped,
 *		and one that reads slowly but steadily is not.
 *
 * The tests run in order and share one server (started by the first,
 * stopped by the last), like test_http_server.c, whose fixture
 * (server_fixture.h) they share.
 */
#define _GNU_SOURCE
#include "unit.h"

#include <sys/resource.h>

#include "http_conn.h"		/* the server's Waiters, for clients_gone */
#include "http_server.h"
#include "thread_log.h"

#define NSLOTS		8
#define NBLOCKS		(10u * 1024 * 1024 / SLOG_BLOCK_SIZE)	/* 10 MB of log */
#define SNDBUF		16384		/* the kernel doubles it */
#define LONG_POLL_MS 8000		/* far longer than any client-gone check */
#define STALL_MS	300
#define HUGE_MIN	(6 * 1024 * 1024)
#define MANY		200

/* ------------------------------------------------------------ fixture */

static HttpRuntimeSettings settings = {
	.cache_max_age = 5, .cache_stale_age = 300,
	.long_poll_timeout_ms = LONG_POLL_MS, .stalled_serve_timeout_ms = STALL_MS
};

enum
{
	SH_LIVE_A, SH_LIVE_B, SH_LIVE_C, SH_HUGE, SH_COUNT
};
static const char *const shape_names[SH_COUNT] = {"live_a", "live_b", "live_c", "huge"};

#include "server_fixture.h"

/* the body of GET huge at offset -1: "[" records joined by "," "]" */
static char *huge_body;
static size_t huge_len;

#define L0 "{\"value\":{\"id\":\"l0\"}}"
#define CHANGE_A "{\"key\":\"a1\",\"value\":{\"id\":\"a\"},\"headers\":{\"operation\":\"insert\"}}"
#define CHANGE_B "{\"key\":\"b1\",\"value\":{\"id\":\"b\"},\"headers\":{\"operation\":\"insert\"}}"

/* huge: one snapshot chunk of records of assorted sizes, HUGE_MIN bytes or more */
static void
new_huge_shape(void)
{
	static const char alphabet[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	uint32_t	s = new_shape(SH_HUGE, SHAPE_SNAPSHOTTING);
	uint64_t	x = 0x853c49e6748fea9bull;
	size_t		cap = HUGE_MIN + 256 * 1024;
	char	   *rec = malloc(128 * 1024);
	int			n = 0;

	huge_body = malloc(cap);
	if (rec == NULL || huge_body == NULL)
	{
		FAIL("out of memory");
		free(rec);
		return;
	}
	huge_len = 0;
	huge_body[huge_len++] = '[';
	while (huge_len < HUGE_MIN)
	{
		size_t		len;
		int			head;

		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		len = 200 + (size_t) (x % (120 * 1024));
		head = snprintf(rec, 64, "{\"value\":{\"id\":\"%d\",\"blob\":\"", n);
		for (size_t i = (size_t) head; i < len - 3; i++)
		{
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			rec[i] = alphabet[x % 64];
		}
		memcpy(rec + len - 3, "\"}}", 3);
		append(s, (LogOffset) {0, 0}, SLOG_RECORD_CHANGE, rec, len);
		if (n > 0)
			huge_body[huge_len++] = ',';
		memcpy(huge_body + huge_len, rec, len);
		huge_len += len;
		n++;
	}
	huge_body[huge_len++] = ']';
	free(rec);
	close_chunk(s, (LogOffset) {0, 0});
	shape_table_set_state(table, s, SHAPE_READY);
	slog_publish(&table->slots[s].logs[0], LOG_OFFSET_SNAPSHOT_END, SLOG_SNAPSHOT_DONE);
}

/* Resolves a request the way the registry would, from the fixed list. */
static void
resolve(ShapeRequest *req)
{
	ShapeResolution *res = &req->result;
	const char *t = req->def.table ? req->def.table : "";

	for (int i = 0; i < SH_COUNT; i++)
		if (strcmp(t, shape_names[i]) == 0)
		{
			res->status = SHAPE_RESOLVE_OK;
			res->slot = slot_of[i];
			res->generation = gen_of[i];
			strcpy(res->handle, table->slots[slot_of[i]].handle);
			res->schema_json = strdup("{\"id\":{\"type\":\"text\",\"pk_index\":0}}");
			return;
		}
	res->status = SHAPE_RESOLVE_REFUSED;
	refusal_set(&res->refusal, REFUSAL_INVALID, "table", "unknown test shape");
}

/* ------------------------------------------------------ observations */

static uint64_t
clients_gone(void)
{
	return atomic_load(&server->waiters.clients_gone);
}

/* Waiters on a shape's wait list right now. */
static int
parked(int which)
{
	WaitList   *list = &server->waiters.lists[slot_of[which]];
	int			n = 0;

	pthread_mutex_lock(&list->lock);
	for (Waiter *w = list->head; w != NULL; w = w->next)
		n++;
	pthread_mutex_unlock(&list->lock);
	return n;
}

/* Polls `cond` every millisecond until it holds or timeout_s passes. */
#define WAIT_FOR(cond, timeout_s) \
	({ \
		double unit_until_ = unit_now() + (timeout_s); \
		while (!(cond) && unit_now() < unit_until_) \
			usleep(1000); \
		(cond); \
	})

/* thread_log lines, collected by drain */
#define MAX_LINES	512
static char *log_lines[MAX_LINES];
static int	log_count;

static void
log_emit(ThreadLogLevel level, const char *line)
{
	if (level == THREAD_LOG_WARNING && log_count < MAX_LINES)
		log_lines[log_count++] = strdup(line);
}

static void
log_reset(void)
{
	thread_log_drain(log_emit);
	for (int i = 0; i < log_count; i++)
		free(log_lines[i]);
	log_count = 0;
}

/* The WARNING lines since the last reset that contain `needle`. */
static int
log_warnings_with(const char *needle)
{
	int			n = 0;

	thread_log_drain(log_emit);
	for (int i = 0; i < log_count; i++)
		if (strstr(log_lines[i], needle) != NULL)
			n++;
	return n;
}

/* ----------------------------------------------------- client helpers */

static const char *
live_target(int which)
{
	static __thread char buf[512];

	snprintf(buf, sizeof(buf), "/v1/shape?table=%s&offset=0_inf&handle=%s&live=true",
			 shape_names[which], handle_of(which));
	return buf;
}

/* ------------------------------------- the park thread, nothing parked */

#define CHANGED(w, word) atomic_load(&(w)->changed[word])

TEST(notify_marks_only_valid_slots)
{
	ConnTable	ct;
	Waiters		w;

	REQUIRE_EQ(conn_table_init(&ct, 4, NULL), 0);
	REQUIRE_EQ(waiters_init(&w, 70, &ct, NULL), 0);	/* two words of shape bits */
	CHECK(w.epoll_fd >= 0);
	CHECK(w.notify_fd >= 0);
	CHECK_EQ(CHANGED(&w, 0), 0);
	CHECK_EQ(CHANGED(&w, 1), 0);

	/* out of range: ignored */
	waiters_notify(&w, 70);
	waiters_notify(&w, 1000);
	waiters_notify(&w, UINT32_MAX);
	CHECK_UEQ(CHANGED(&w, 0), 0);
	CHECK_UEQ(CHANGED(&w, 1), 0);

	/* a slot nobody waits on: just its bit (the thread is not running) */
	waiters_notify(&w, 0);
	waiters_notify(&w, 69);
	waiters_notify(&w, 69);
	CHECK_UEQ(CHANGED(&w, 0), 1);
	CHECK_UEQ(CHANGED(&w, 1), (uint64_t) 1 << 5);

	/* stop without a thread, with nothing parked */
	waiters_stop(&w);
	CHECK(atomic_load(&w.stopping));
	CHECK_UEQ(atomic_load(&w.clients_gone), 0);
	waiters_destroy(&w);
	conn_table_destroy(&ct);
}

TEST(park_thread_starts_consumes_notifications_and_stops_promptly)
{
	ConnTable	ct;
	Waiters		w;
	double		t0;
	int64_t		a;
	int64_t		b;

	REQUIRE_EQ(conn_table_init(&ct, 4, NULL), 0);
	REQUIRE_EQ(waiters_init(&w, 130, &ct, NULL), 0);
	REQUIRE_EQ(waiters_start(&w), 0);
	CHECK(w.thread_started);

	/* the thread takes the marks of shapes nobody waits on, and carries on */
	for (int round = 0; round < 3; round++)
	{
		waiters_notify(&w, 3);
		waiters_notify(&w, 64);
		waiters_notify(&w, 129);
		if (!WAIT_FOR(CHANGED(&w, 0) == 0 && CHANGED(&w, 1) == 0 && CHANGED(&w, 2) == 0, 2))
			FAIL("round %d: the park thread did not take the marks", round);
	}

	/* its idle wait is a second long; stop wakes it */
	usleep(20000);
	t0 = unit_now();
	waiters_stop(&w);
	if (unit_now() - t0 > 0.3)
		FAIL("waiters_stop took %.2fs with nothing parked", unit_now() - t0);
	CHECK(!w.thread_started);
	CHECK_UEQ(atomic_load(&w.clients_gone), 0);
	CHECK_EQ(w.heap_len, 0);
	waiters_destroy(&w);
	conn_table_destroy(&ct);

	a = waiters_now_ms();
	usleep(5000);
	b = waiters_now_ms();
	CHECK(b >= a + 4);
}

/* ------------------------------------------------------------- setup */

TEST(server_starts)
{
	HttpServerOptions opts;
	struct rlimit rl;

	/* MANY clients and their server ends, at once */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 4 * MANY + 64)
	{
		rl.rlim_cur = rl.rlim_max < 4 * MANY + 64 ? rl.rlim_max : 4 * MANY + 64;
		setrlimit(RLIMIT_NOFILE, &rl);
	}

	REQUIRE(fixture_init(NSLOTS, NBLOCKS, 2000));
	new_live_shape(SH_LIVE_A, L0);
	new_live_shape(SH_LIVE_B, L0);
	new_live_shape(SH_LIVE_C, L0);
	new_huge_shape();
	shape_table_note_lsn(table, 5000);
	REQUIRE_EQ(UNIT_FAILURES(), 0);

	fixture_options(&opts, 2 * MANY + 64, SNDBUF);
	fixture_start(&opts, &settings, resolve);
	REQUIRE(server != NULL);
	log_reset();
}

/* ------------------------------------------------- clients that leave */

TEST(parked_client_that_closes_is_released_at_once)
{
	Client		cl;
	uint64_t	gone0;
	double		t0;
	double		took;

	REQUIRE(server != NULL);
	gone0 = clients_gone();
	REQUIRE(client_get(&cl, live_target(SH_LIVE_C)));
	if (!WAIT_FOR(parked(SH_LIVE_C) == 1, 10))
	{
		FAIL("the live request did not park (parked %d)", parked(SH_LIVE_C));
		client_close(&cl);
		return;
	}
	CHECK_EQ(in_use(), 1);
	CHECK_EQ(atomic_load(&admission.in_use[ADMISSION_EXISTING]), 1);
	CHECK_EQ(pins(SH_LIVE_C), 1);
	CHECK(!hc_readable(&cl.c, 50));

	/* the client goes away; the long-poll has seconds to run */
	t0 = unit_now();
	client_close(&cl);
	WAIT_FOR(in_use() == 0 && clients_gone() == gone0 + 1 && pins(SH_LIVE_C) == 0, 5);
	took = unit_now() - t0;
	fprintf(stderr, "  # a parked client that closed was released in %.0f ms "
			"(long-poll timeout %d ms)\n", took * 1000, LONG_POLL_MS);
	CHECK_EQ(in_use(), 0);
	CHECK_UEQ(clients_gone(), gone0 + 1);
	CHECK_EQ(pins(SH_LIVE_C), 0);
	CHECK_EQ(parked(SH_LIVE_C), 0);
	if (took > 0.5)
		FAIL("the server took %.0f ms to notice a parked client that closed", took * 1000);
}

TEST(many_parked_clients_that_close_at_once)
{
	static Client cl[MANY];
	uint64_t	gone0;
	double		t0;
	double		took;
	int			opened = 0;

	REQUIRE(server != NULL);
	gone0 = clients_gone();
	for (int i = 0; i < MANY; i++)
	{
		if (!client_get(&cl[i], live_target(SH_LIVE_C)))
		{
			FAIL("client %d could not connect: %s", i, strerror(errno));
			break;
		}
		opened++;
	}
	if (!WAIT_FOR(parked(SH_LIVE_C) == opened, 15))
		FAIL("%d of %d live requests parked", parked(SH_LIVE_C), opened);
	CHECK_EQ(in_use(), opened);
	CHECK_EQ(pins(SH_LIVE_C), (uint64_t) opened);
	CHECK(!hc_readable(&cl[0].c, 0));

	t0 = unit_now();
	for (int i = 0; i < opened; i++)
		client_close(&cl[i]);
	WAIT_FOR(in_use() == 0 && clients_gone() == gone0 + (uint64_t) opened &&
			 pins(SH_LIVE_C) == 0 && parked(SH_LIVE_C) == 0, 10);
	took = unit_now() - t0;
	fprintf(stderr, "  # %d parked clients that closed at once were released in %.0f ms\n",
			opened, took * 1000);
	CHECK_EQ(in_use(), 0);
	CHECK_UEQ(clients_gone(), gone0 + (uint64_t) opened);
	CHECK_EQ(pins(SH_LIVE_C), 0);
	CHECK_EQ(parked(SH_LIVE_C), 0);
	if (took > 1.0)
		FAIL("releasing %d parked clients that closed took %.0f ms", opened, took * 1000);
}

/* ------------------------------------------------------ notifications */

TEST(notify_wakes_only_that_shapes_waiters)
{
	Client		a[3];
	Client		b[3];
	HcResponse	r;

	REQUIRE(server != NULL);
	for (int i = 0; i < 3; i++)
	{
		REQUIRE(client_get(&a[i], live_target(SH_LIVE_A)));
		REQUIRE(client_get(&b[i], live_target(SH_LIVE_B)));
	}
	if (!WAIT_FOR(parked(SH_LIVE_A) == 3 && parked(SH_LIVE_B) == 3, 10))
		FAIL("parked: %d on A, %d on B", parked(SH_LIVE_A), parked(SH_LIVE_B));

	/* a wakeup with nothing new: they look, and park again */
	http_server_wake_shape(server, slot_of[SH_LIVE_B]);
	usleep(50000);
	CHECK(WAIT_FOR(parked(SH_LIVE_B) == 3, 2));
	for (int i = 0; i < 3; i++)
		CHECK(!hc_readable(&b[i].c, 0));

	/* both logs grow, but only A is notified */
	live_change(SH_LIVE_A, 1000, CHANGE_A);
	live_change(SH_LIVE_B, 1000, CHANGE_B);
	http_server_wake_shape(server, slot_of[SH_LIVE_A]);
	for (int i = 0; i < 3; i++)
	{
		if (!hc_read_response(&a[i].c, false, &r))
			FAIL("A's waiter %d: %s", i, r.error);
		else
		{
			CHECK_EQ(r.status, 200);
			CHECK(strncmp(r.body, "[" CHANGE_A, strlen("[" CHANGE_A)) == 0);
			CHECK_STR_EQ(hc_header(&r, "electric-offset"), "1000_0");
			CHECK_STR_EQ(hc_header(&r, "electric-has-data"), "true");
		}
		hc_response_free(&r);
		client_close(&a[i]);
	}
	/* B's waiters, with data waiting for them, still sleep */
	CHECK(!hc_readable(&b[0].c, 300));
	for (int i = 0; i < 3; i++)
		CHECK(!hc_readable(&b[i].c, 0));
	CHECK_EQ(parked(SH_LIVE_B), 3);
	CHECK_EQ(pins(SH_LIVE_B), 3);

	/* until B is notified */
	http_server_wake_shape(server, slot_of[SH_LIVE_B]);
	for (int i = 0; i < 3; i++)
	{
		if (!hc_read_response(&b[i].c, false, &r))
			FAIL("B's waiter %d: %s", i, r.error);
		else
		{
			CHECK_EQ(r.status, 200);
			CHECK(strncmp(r.body, "[" CHANGE_B, strlen("[" CHANGE_B)) == 0);
		}
		hc_response_free(&r);
		client_close(&b[i]);
	}
	CHECK(WAIT_FOR(in_use() == 0 && pins(SH_LIVE_A) == 0 && pins(SH_LIVE_B) == 0, 5));
	CHECK_EQ(parked(SH_LIVE_A), 0);
	CHECK_EQ(parked(SH_LIVE_B), 0);
}

TEST(notify_of_an_unwatched_or_unknown_slot_is_harmless)
{
	Client		cl;
	HcResponse	r;
	char		target[512];

	REQUIRE(server != NULL);
	/* a shape slot nobody waits on, and slot numbers out of range */
	http_server_wake_shape(server, slot_of[SH_HUGE]);
	http_server_wake_shape(server, NSLOTS);
	http_server_wake_shape(server, UINT32_MAX);
	http_server_wake_all(server);

	/* the park thread still works: a waiter on A wakes for A's next change */
	snprintf(target, sizeof(target), "/v1/shape?table=live_a&offset=1000_0&handle=%s&live=true",
			 handle_of(SH_LIVE_A));
	REQUIRE(client_get(&cl, target));
	CHECK(WAIT_FOR(parked(SH_LIVE_A) == 1, 10));
	live_change(SH_LIVE_A, 2000, CHANGE_A);
	http_server_wake_shape(server, slot_of[SH_LIVE_A]);
	if (hc_read_response(&cl.c, false, &r))
		CHECK_STR_EQ(hc_header(&r, "electric-offset"), "2000_0");
	else
		FAIL("waiter on A: %s", r.error);
	hc_response_free(&r);
	client_close(&cl);
	CHECK(WAIT_FOR(in_use() == 0, 5));
}

/* ----------------------------------------------------- long-poll timeout */

TEST(long_poll_timeout_answers_up_to_date)
{
	Client		cl;
	HcResponse	r;
	double		t0;
	double		took;
	HttpRuntimeSettings s = settings;

	REQUIRE(server != NULL);
	s.long_poll_timeout_ms = 300;
	http_server_apply_settings(server, &s, NULL, 0);
	t0 = unit_now();
	REQUIRE(client_get(&cl, live_target(SH_LIVE_C)));
	if (hc_read_response(&cl.c, false, &r))
	{
		took = unit_now() - t0;
		fprintf(stderr, "  # a 300 ms long-poll answered after %.0f ms\n", took * 1000);
		CHECK_EQ(r.status, 200);
		CHECK_STR_EQ(hc_header(&r, "electric-has-data"), "false");
		CHECK_STR_EQ(hc_header(&r, "electric-up-to-date"), "true");
		CHECK_STR_EQ(hc_header(&r, "electric-offset"), "0_inf");
		CHECK_STR_EQ(r.body, "[{\"headers\":{\"control\":\"up-to-date\","
					 "\"global_last_seen_lsn\":\"5000\"}}]");
		if (took < 0.25 || took > 1.5)
			FAIL("a 300 ms long-poll took %.0f ms", took * 1000);
	}
	else
		FAIL("long-poll: %s", r.error);
	hc_response_free(&r);
	client_close(&cl);
	CHECK(WAIT_FOR(in_use() == 0 && pins(SH_LIVE_C) == 0, 5));
	http_server_apply_settings(server, &settings, NULL, 0);
}

/* ---------------------------------------------------- stalled writes */

static int
local_port(int fd)
{
	struct sockaddr_in sa;
	socklen_t	len = sizeof(sa);

	if (getsockname(fd, (struct sockaddr *) &sa, &len) != 0)
		return -1;
	return ntohs(sa.sin_port);
}

/* A connection with a receive buffer of `rcvbuf` bytes (0: the kernel's). */
static int
connect_with_rcvbuf(int rcvbuf)
{
	struct sockaddr_in sa;
	struct timeval tv = {TIMEOUT_S, 0};
	int			fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -1;
	if (rcvbuf > 0)
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t) port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *) &sa, sizeof(sa)) != 0)
	{
		close(fd);
		return -1;
	}
	return fd;
}

static bool
send_get(int fd, const char *target)
{
	char		req[1024];
	size_t		n;

	snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
			 target);
	n = strlen(req);
	return send(fd, req, n, MSG_NOSIGNAL) == (ssize_t) n;
}

TEST(client_that_never_reads_is_reaped)
{
	uint64_t	reaped0 = UNIT_REAPED();
	int			fd;
	int			lport;
	double		t0;
	double		took;
	char		needle[128];

	REQUIRE(server != NULL);
	log_reset();
	fd = connect_with_rcvbuf(4096);
	REQUIRE(fd >= 0);
	lport = local_port(fd);
	t0 = unit_now();
	REQUIRE(send_get(fd, "/v1/shape?table=huge&offset=-1"));
	CHECK(WAIT_FOR(pins(SH_HUGE) == 1 || UNIT_REAPED() != reaped0, 5));

	/* a piece is stuck in the full socket: the deadline thread shuts it down */
	WAIT_FOR(UNIT_REAPED() != reaped0 && in_use() == 0 &&
			 pins(SH_HUGE) == 0, 10);
	took = unit_now() - t0;
	fprintf(stderr, "  # a client that never read was reaped and released in %.0f ms "
			"(timeout %d ms)\n", took * 1000, STALL_MS);
	CHECK_UEQ(UNIT_REAPED(), reaped0 + 1);
	CHECK_EQ(in_use(), 0);
	CHECK_EQ(pins(SH_HUGE), 0);
	if (took < STALL_MS / 1000.0 * 0.9 || took > 1.0)
		FAIL("reaped after %.0f ms, expected %d..1000 ms", took * 1000, STALL_MS);

	/* the client's socket ends */
	{
		char		buf[65536];
		ssize_t		n;
		size_t		got = 0;

		while ((n = recv(fd, buf, sizeof(buf), 0)) > 0)
			got += (size_t) n;
		CHECK(n == 0 || (n < 0 && errno == ECONNRESET));
		CHECK(got < huge_len);
	}
	close(fd);

	/* one WARNING, naming the shape and the client */
	snprintf(needle, sizeof(needle), "closed a stalled serve of shape %s to 127.0.0.1:%d: ",
			 handle_of(SH_HUGE), lport);
	CHECK_EQ(log_warnings_with(needle), 1);
	CHECK_EQ(log_warnings_with("closed a stalled serve"), 1);
}

typedef struct SlowRead
{
	double		rate;			/* bytes per second */
	char	   *raw;
	size_t		len;
	size_t		cap;
	int			lport;
	int			err;			/* errno of a failed recv, or 0 */
	double		took;
} SlowRead;

static void *
slow_reader(void *arg)
{
	SlowRead   *sr = arg;
	int			fd = connect_with_rcvbuf(65536);
	double		t0;

	if (fd < 0)
	{
		sr->err = errno;
		return NULL;
	}
	sr->lport = local_port(fd);
	sr->cap = huge_len + 64 * 1024;
	sr->raw = malloc(sr->cap + 1);
	if (sr->raw == NULL || !send_get(fd, "/v1/shape?table=huge&offset=-1"))
	{
		sr->err = ENOMEM;
		close(fd);
		return NULL;
	}
	t0 = unit_now();
	for (;;)
	{
		size_t		want = 32768;
		ssize_t		n;
		double		ahead;

		if (sr->cap - sr->len < want)
		{
			char	   *grown = realloc(sr->raw, 2 * sr->cap + 1);

			if (grown == NULL)
			{
				sr->err = ENOMEM;
				break;
			}
			sr->raw = grown;
			sr->cap *= 2;
		}
		n = recv(fd, sr->raw + sr->len, want, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			sr->err = errno;
		if (n <= 0)
			break;
		sr->len += (size_t) n;
		/* steady: never ahead of `rate` */
		ahead = (double) sr->len / sr->rate - (unit_now() - t0);
		if (ahead > 0)
			usleep((useconds_t) (ahead * 1e6));
	}
	sr->took = unit_now() - t0;
	close(fd);
	return NULL;
}

TEST(slow_steady_reader_gets_everything_and_is_not_reaped)
{
	uint64_t	reaped0 = UNIT_REAPED();
	SlowRead	sr = {.rate = 2.0 * 1024 * 1024};
	pthread_t	th;
	HcConn		c;
	HcResponse	r;
	char		needle[64];

	REQUIRE(server != NULL);
	REQUIRE(huge_body != NULL);
	log_reset();
	pthread_create(&th, NULL, slow_reader, &sr);
	pthread_join(th, NULL);
	fprintf(stderr, "  # read %zu bytes in %.2f s (%.2f MB/s) with a %d ms write timeout\n",
			sr.len, sr.took, sr.len / sr.took / 1024 / 1024, STALL_MS);
	CHECK_EQ(sr.err, 0);

	/* parse what arrived as one response */
	memset(&c, 0, sizeof(c));
	c.fd = -1;
	c.buf = sr.raw;
	c.len = sr.len;
	c.cap = sr.cap;
	if (hc_read_response(&c, false, &r))
	{
		CHECK_EQ(r.status, 200);
		CHECK_EQ(r.body_len, huge_len);
		if (r.body_len == huge_len)
			CHECK_MEM_EQ(r.body, huge_body, huge_len);
	}
	else
		FAIL("the slow reader's response: %s (%zu bytes arrived)", r.error, sr.len);
	hc_response_free(&r);
	free(c.buf);

	/* not reaped, and everything released */
	CHECK_UEQ(UNIT_REAPED(), reaped0);
	snprintf(needle, sizeof(needle), "127.0.0.1:%d:", sr.lport);
	CHECK_EQ(log_warnings_with(needle), 0);
	CHECK(WAIT_FOR(in_use() == 0 && pins(SH_HUGE) == 0, 5));
}

/* -------------------------------------------------------------- end */

TEST(cleanup)
{
	fixture_cleanup();
	log_reset();
	free(huge_body);
}

UNIT_MAIN()
