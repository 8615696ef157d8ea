/*
 * loadgen.c
 *		A lean epoll HTTP/1.1 client that holds many live long-poll clients of
 *		Electric's Shape API from one process, and measures for every client
 *		how long after a commit it has read the response carrying it.
 *
 * What it measures.  The benchmark commits rows whose column --mark-field
 * holds the commit's CLOCK_REALTIME in nanoseconds.  A client's latency for a
 * commit is CLOCK_REALTIME when it has read the whole response holding the
 * mark, less the mark (the largest mark, when a body holds several).  Every
 * client waits for --rounds distinct marks; the report pools the latencies
 * per mark ("rounds") and over all of them ("all").  With --drop it instead
 * parks every client, then, when told, closes all sockets at once (a RST each
 * with --rst), so that the server's handling of a disconnect storm shows.
 *
 * How.  Each client runs the Shape protocol: an initial request (offset=-1),
 * catch-up requests until electric-up-to-date, then live requests forever (with
 * the last electric-cursor, as Electric's clients send it); a
 * 409 restarts it, other statuses are retried after a pause, a lost
 * connection is reopened.  Marks count only once the client has been up to
 * date (rows already in the table carry old marks).  Clients are sharded over
 * --threads workers, each with its own epoll set.  A socket is registered
 * once, edge-triggered for both directions, so a request costs one send()
 * and a response a few recv()s, with no epoll_ctl between them.  Connections
 * are opened in batches of --connect-rate per millisecond, never more than
 * --max-pending unanswered at once, so that the server's listen backlog is
 * not overrun; a failed connect is retried a few times with a growing delay.
 * The main thread only watches: progress, the timeout, signals, stdin.
 *
 * Why it is lean.  A client is one fixed struct of about 500 bytes: the
 * request is rebuilt from the client's state whenever (the rest of) it is to
 * be sent, responses are read through one 16 kB buffer per worker and parsed
 * incrementally (status line, headers, content-length, chunked or
 * close-delimited body), and no body is kept: a small state machine finds the
 * marks as the bytes stream by, also when one is split across reads or
 * chunks.  50,000 clients take some 25 MB, and the generator's CPU goes to
 * system calls, not to itself.
 *
 *	loadgen --port P --clients N [--host 127.0.0.1] [--path PATH] [--shapes M]
 *		[--sources K] [--connect-rate R] [--max-pending P] [--rounds R]
 *		[--mark-field NAME] [--timeout S] [--threads T] [--drop [--rst]]
 *
 * PATH (default /v1/shape?table=items) may hold "{i}", replaced by the
 * client's index modulo M.  stdout: "ready <n>" once all n clients (less
 * those that could not connect) are parked, i.e. have sent a live request
 * whose response has not begun; then one JSON object on one line.  stderr:
 * "parked <n>" at most once a second until then.  Exit status 1 when it
 * timed out, was interrupted (SIGINT, SIGTERM) or a client gave up connecting.
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define NS_PER_MS			1000000LL
#define NS_PER_S			1000000000LL
#define READ_BUF_SIZE		16384
#define LINE_CAP			160		/* longer header lines are cut; ours are short */
#define HANDLE_CAP			80
#define OFFSET_CAP			40
#define CURSOR_CAP			24
#define MAX_EVENTS			512
#define MAX_CONNECT_ATTEMPTS 6		/* then the client gives up: connect_failed */
#define CONNECT_RETRY_NS	(50 * NS_PER_MS)	/* doubled at each attempt */
#define RETRY_DELAY_NS		(100 * NS_PER_MS)	/* after a status without retry-after */
#define RETRY_AFTER_CAP_S	5
#define MAX_STATUS			600

typedef enum ClientState
{
	C_QUEUED,					/* waits for its turn to connect */
	C_CONNECTING,				/* connect() in progress */
	C_SENDING,					/* request not all sent yet */
	C_AWAITING,					/* request sent; response awaited or being read */
	C_WAITING,					/* on a timer before a retry */
	C_FAILED					/* gave up connecting */
} ClientState;

typedef enum ParseState
{
	P_STATUS,
	P_HEADERS,
	P_BODY_LENGTH,
	P_BODY_UNTIL_CLOSE,
	P_CHUNK_SIZE,
	P_CHUNK_EXTENSION,
	P_CHUNK_SIZE_LF,
	P_CHUNK_DATA,
	P_CHUNK_DATA_CR,
	P_CHUNK_DATA_LF,
	P_TRAILER
} ParseState;

typedef enum MarkState
{
	M_MATCH,					/* looking for "NAME": */
	M_AFTER_COLON,				/* blanks, then a quote or a digit */
	M_AFTER_QUOTE,				/* a digit must follow */
	M_DIGITS					/* reading the value */
} MarkState;

typedef struct Client
{
	int			fd;				/* -1 when not connected */
	uint32_t	index;
	uint8_t		state;			/* ClientState */
	uint8_t		connect_attempts;	/* since the last answered connection */
	bool		has_handle;
	bool		live;			/* the next request is a live one */
	bool		synced;			/* was up to date once: later marks count */
	bool		parked;
	bool		pending;		/* connection opened, neither answered nor parked */
	bool		got_bytes;		/* this connection delivered something */
	uint16_t	nsamples;
	uint32_t	request_sent;	/* bytes of the current request sent */
	int64_t		max_mark_seen;

	/* the response being read */
	uint8_t		parse;			/* ParseState */
	uint8_t		mark_state;		/* MarkState */
	uint8_t		mark_matched;	/* bytes of the mark pattern matched */
	uint8_t		mark_digits;	/* UINT8_MAX: value overflowed */
	uint8_t		chunk_digits;
	bool		line_cut;
	bool		chunked;
	bool		close_after;
	bool		keep_alive;
	bool		http10;
	bool		up_to_date;
	bool		resp_has_handle;
	bool		resp_has_offset;
	bool		resp_has_cursor;
	uint16_t	status;
	uint16_t	line_len;
	uint32_t	retry_after_s;
	int64_t		content_length;	/* -1: none given */
	uint64_t	body_left;		/* of a content-length body, or of the chunk */
	int64_t		mark_value;
	int64_t		body_max_mark;
	char		line[LINE_CAP];
	char		handle[HANDLE_CAP];
	char		offset[OFFSET_CAP];
	char		resp_handle[HANDLE_CAP];
	char		resp_offset[OFFSET_CAP];
	char		cursor[CURSOR_CAP];	/* electric-cursor of the last answer, or "" */
	char		resp_cursor[CURSOR_CAP];
} Client;

typedef struct Sample
{
	int64_t		mark;
	int64_t		latency_ns;
} Sample;

typedef struct Timer
{
	int64_t		due_ns;
	uint32_t	client;
} Timer;

typedef struct Counters
{
	uint64_t	status[MAX_STATUS];
	uint64_t	responses;
	uint64_t	reconnects;
	uint64_t	connect_failed;
	uint64_t	connect_retries;
	uint64_t	parse_errors;
} Counters;

typedef struct Worker
{
	pthread_t	thread;
	int			epfd;
	uint32_t	first;			/* its clients: [first, first + count) */
	uint32_t	count;
	uint32_t   *queue;			/* ring of clients waiting to connect */
	uint32_t	queue_head;
	uint32_t	queue_len;
	Timer	   *heap;			/* min-heap; a client is in it at most once */
	uint32_t	heap_len;
	uint32_t	pending;
	uint32_t	max_pending;
	uint32_t	rate;			/* connections opened per millisecond */
	int64_t		next_batch_ns;
	Counters	counters;
	char	   *request_buf;
	char		read_buf[READ_BUF_SIZE];
} Worker;

static struct
{
	const char *host;
	int			port;
	const char *path;
	uint32_t	shapes;
	uint32_t	clients;
	uint32_t	sources;
	uint32_t	connect_rate;
	uint32_t	max_pending;
	uint32_t	rounds;
	uint32_t	threads;
	const char *mark_field;
	double		timeout_s;
	bool		drop;
	bool		rst;
} opt = {
	.host = "127.0.0.1",
	.path = "/v1/shape?table=items",
	.shapes = 1,
	.sources = 1,
	.connect_rate = 500,
	.max_pending = 1000,
	.rounds = 1,
	.threads = 1,
	.mark_field = "mark",
	.timeout_s = 120,
};

static struct sockaddr_in server_addr;
static char host_header[300];
static char path_separator;		/* '&' when the path has a query, else '?' */
static char mark_pattern[72];	/* "NAME": */
static uint8_t mark_pattern_len;
static uint8_t mark_fail[72];	/* KMP failure function of mark_pattern */

static Client *clients;
static Sample *samples;			/* opt.rounds per client */
static Worker *workers;

static atomic_uint parked_now;
static atomic_uint failed_clients;
static atomic_uint completed_clients;
static atomic_bool ready_printed;
static atomic_bool stop_workers;
static _Atomic int64_t ready_ns;
static int64_t start_ns;

static void send_request(Worker *w, Client *c);

static int64_t
clock_ns(clockid_t clock)
{
	struct timespec ts;

	clock_gettime(clock, &ts);
	return (int64_t) ts.tv_sec * NS_PER_S + ts.tv_nsec;
}

/* ---- timers, connect queue, parking ---- */

static void
heap_push(Worker *w, int64_t due_ns, uint32_t client)
{
	uint32_t	i = w->heap_len++;

	while (i > 0 && w->heap[(i - 1) / 2].due_ns > due_ns)
	{
		w->heap[i] = w->heap[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	w->heap[i] = (Timer) {due_ns, client};
}

static uint32_t
heap_pop(Worker *w)
{
	uint32_t	top = w->heap[0].client;
	Timer		last = w->heap[--w->heap_len];
	uint32_t	i = 0;

	for (;;)
	{
		uint32_t	child = 2 * i + 1;

		if (child >= w->heap_len)
			break;
		if (child + 1 < w->heap_len && w->heap[child + 1].due_ns < w->heap[child].due_ns)
			child++;
		if (w->heap[child].due_ns >= last.due_ns)
			break;
		w->heap[i] = w->heap[child];
		i = child;
	}
	if (w->heap_len > 0)
		w->heap[i] = last;
	return top;
}

static void
wait_then_retry(Worker *w, Client *c, int64_t delay_ns)
{
	c->state = C_WAITING;
	heap_push(w, clock_ns(CLOCK_MONOTONIC) + delay_ns, c->index);
}

static void
enqueue_connect(Worker *w, Client *c)
{
	c->state = C_QUEUED;
	w->queue[(w->queue_head + w->queue_len++) % w->count] = c->index - w->first;
}

/* Prints "ready" the first time every client that could connect is parked. */
static void
check_ready(void)
{
	unsigned	target = opt.clients - atomic_load(&failed_clients);

	if (target == 0 || atomic_load(&parked_now) < target || atomic_load(&ready_printed))
		return;
	if (atomic_exchange(&ready_printed, true))
		return;
	atomic_store(&ready_ns, clock_ns(CLOCK_MONOTONIC));
	printf("ready %u\n", target);
	fflush(stdout);
}

static void
park(Worker *w, Client *c)
{
	if (c->pending)
	{
		c->pending = false;
		w->pending--;
	}
	if (!c->parked)
	{
		c->parked = true;
		atomic_fetch_add(&parked_now, 1);
		check_ready();
	}
}

static void
unpark(Worker *w, Client *c)
{
	if (c->pending)
	{
		c->pending = false;
		w->pending--;
	}
	if (c->parked)
	{
		c->parked = false;
		atomic_fetch_sub(&parked_now, 1);
	}
}

/* ---- connections ---- */

static void
reset_response(Client *c)
{
	c->parse = P_STATUS;
	c->line_len = 0;
	c->line_cut = false;
	c->status = 0;
	c->chunked = c->close_after = c->keep_alive = c->http10 = false;
	c->up_to_date = c->resp_has_handle = c->resp_has_offset = c->resp_has_cursor = false;
	c->retry_after_s = 0;
	c->content_length = -1;
	c->body_left = 0;
	c->mark_state = M_MATCH;
	c->mark_matched = 0;
	c->mark_digits = 0;
	c->mark_value = 0;
	c->body_max_mark = 0;
}

static void
close_connection(Worker *w, Client *c)
{
	unpark(w, c);
	if (c->fd >= 0)
		close(c->fd);			/* also leaves the epoll set */
	c->fd = -1;
	c->request_sent = 0;
	reset_response(c);
}

/* connect() failed, or the connection died before it was of any use. */
static void
connect_failed(Worker *w, Client *c)
{
	close_connection(w, c);
	if (++c->connect_attempts >= MAX_CONNECT_ATTEMPTS)
	{
		c->state = C_FAILED;
		w->counters.connect_failed++;
		atomic_fetch_add(&failed_clients, 1);
		check_ready();
		return;
	}
	w->counters.connect_retries++;
	wait_then_retry(w, c, CONNECT_RETRY_NS << (c->connect_attempts - 1));
}

/* The connection broke (EOF, reset, send error): reopen it. */
static void
connection_lost(Worker *w, Client *c)
{
	bool		was_useful = c->got_bytes || c->parked;
	bool		waiting = c->state == C_WAITING;

	if (!was_useful && !waiting)
	{
		connect_failed(w, c);
		return;
	}
	close_connection(w, c);
	w->counters.reconnects++;
	if (!waiting)				/* a waiting client reconnects on its timer */
		enqueue_connect(w, c);
}

static void
open_connection(Worker *w, Client *c)
{
	int			one = 1;
	int			fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	if (fd < 0)
	{
		connect_failed(w, c);
		return;
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	c->fd = fd;
	c->got_bytes = false;
	c->pending = true;
	w->pending++;
	if (opt.sources > 1)
	{
		struct sockaddr_in source = {
			.sin_family = AF_INET,
			.sin_addr.s_addr = htonl(0x7f000001u + c->index % opt.sources),
		};

		/* the port is picked at connect(), per destination: no port shortage */
		setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof one);
		if (bind(fd, (struct sockaddr *) &source, sizeof source) < 0)
		{
			connect_failed(w, c);
			return;
		}
	}
	c->state = C_CONNECTING;
	if (connect(fd, (struct sockaddr *) &server_addr, sizeof server_addr) < 0 &&
		errno != EINPROGRESS)
	{
		connect_failed(w, c);
		return;
	}

	/* registered once: edge-triggered for both directions */
	struct epoll_event ev = {
		.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET,
		.data.ptr = c,
	};

	if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
		connect_failed(w, c);
}

/* Opens up to the per-millisecond batch, while few enough are unanswered. */
static void
open_batch(Worker *w, int64_t now)
{
	if (w->queue_len == 0 || now < w->next_batch_ns)
		return;
	w->next_batch_ns = now + NS_PER_MS;
	for (uint32_t opened = 0;
		 opened < w->rate && w->queue_len > 0 && w->pending < w->max_pending;
		 opened++)
	{
		Client	   *c = &clients[w->first + w->queue[w->queue_head]];

		w->queue_head = (w->queue_head + 1) % w->count;
		w->queue_len--;
		open_connection(w, c);
	}
}

static void
run_timers(Worker *w, int64_t now)
{
	while (w->heap_len > 0 && w->heap[0].due_ns <= now)
	{
		Client	   *c = &clients[heap_pop(w)];

		if (c->state != C_WAITING)
			continue;
		if (c->fd < 0)
			enqueue_connect(w, c);
		else
		{
			c->state = C_SENDING;
			send_request(w, c);
		}
	}
}

/* ---- requests ---- */

static char *
append(char *p, const char *s, size_t n)
{
	memcpy(p, s, n);
	return p + n;
}

/* The client's request, from its state: the same bytes until that changes. */
static size_t
build_request(Worker *w, const Client *c)
{
	char	   *p = w->request_buf;
	char		shape[16];
	int			shape_len = snprintf(shape, sizeof shape, "%u", c->index % opt.shapes);

	p = append(p, "GET ", 4);
	for (const char *s = opt.path; *s;)
	{
		if (strncmp(s, "{i}", 3) == 0)
		{
			p = append(p, shape, shape_len);
			s += 3;
		}
		else
			*p++ = *s++;
	}
	*p++ = path_separator;
	if (c->has_handle)
	{
		p = append(p, "handle=", 7);
		p = append(p, c->handle, strlen(c->handle));
		*p++ = '&';
	}
	p = append(p, "offset=", 7);
	p = append(p, c->offset, strlen(c->offset));
	if (c->live)
		p = append(p, "&live=true", 10);
	if (c->live && c->cursor[0] != '\0')
	{
		/* as Electric's clients: a live request names the last cursor, so that a cache in
		 * front never answers it with the previous live answer */
		p = append(p, "&cursor=", 8);
		p = append(p, c->cursor, strlen(c->cursor));
	}
	p = append(p, " HTTP/1.1\r\n", 11);
	p = append(p, host_header, strlen(host_header));
	p = append(p, "Connection: keep-alive\r\n\r\n", 26);
	return p - w->request_buf;
}

static void
send_request(Worker *w, Client *c)
{
	size_t		len = build_request(w, c);

	while (c->request_sent < len)
	{
		ssize_t		n = send(c->fd, w->request_buf + c->request_sent,
							 len - c->request_sent, MSG_NOSIGNAL);

		if (n > 0)
			c->request_sent += n;
		else if (n < 0 && errno == EINTR)
			continue;
		else if (n < 0 && errno == EAGAIN)
			return;				/* EPOLLOUT sends the rest */
		else
		{
			connection_lost(w, c);
			return;
		}
	}
	c->request_sent = 0;
	c->state = C_AWAITING;
	if (c->live)
		park(w, c);
}

/* ---- marks ---- */

static void
build_mark_pattern(void)
{
	int			len = snprintf(mark_pattern, sizeof mark_pattern, "\"%s\":", opt.mark_field);

	if (len < 0 || len >= (int) sizeof mark_pattern)
	{
		fprintf(stderr, "loadgen: --mark-field too long\n");
		exit(2);
	}
	mark_pattern_len = len;
	mark_fail[0] = 0;
	for (int i = 1, k = 0; i < len; i++)
	{
		while (k > 0 && mark_pattern[i] != mark_pattern[k])
			k = mark_fail[k - 1];
		if (mark_pattern[i] == mark_pattern[k])
			k++;
		mark_fail[i] = k;
	}
}

static void
end_mark(Client *c)
{
	if (c->mark_state == M_DIGITS && c->mark_digits != UINT8_MAX &&
		c->mark_value > c->body_max_mark)
		c->body_max_mark = c->mark_value;
	c->mark_state = M_MATCH;
	c->mark_matched = 0;
}

/* Finds "NAME":"digits" (blanks and quotes optional) in body bytes as they come. */
static void
scan_marks(Client *c, const char *p, size_t n)
{
	const char *end = p + n;

	while (p < end)
	{
		unsigned char ch = *p;

		switch (c->mark_state)
		{
			case M_DIGITS:
				if (isdigit(ch))
				{
					if (c->mark_digits != UINT8_MAX)
					{
						if (c->mark_value > (INT64_MAX - 9) / 10)
							c->mark_digits = UINT8_MAX;
						else
						{
							c->mark_value = c->mark_value * 10 + (ch - '0');
							c->mark_digits++;
						}
					}
					p++;
				}
				else
					end_mark(c);	/* this byte is looked at again */
				break;
			case M_AFTER_COLON:
			case M_AFTER_QUOTE:
				if (isdigit(ch))
				{
					c->mark_state = M_DIGITS;
					c->mark_value = 0;
					c->mark_digits = 0;
				}
				else if (c->mark_state == M_AFTER_COLON && (ch == ' ' || ch == '\t'))
					p++;
				else if (c->mark_state == M_AFTER_COLON && ch == '"')
				{
					c->mark_state = M_AFTER_QUOTE;
					p++;
				}
				else
					end_mark(c);
				break;
			case M_MATCH:
				{
					uint8_t		m = c->mark_matched;

					if (m == 0)
					{
						p = memchr(p, mark_pattern[0], end - p);
						if (p == NULL)
							return;
						ch = *p;
					}
					p++;
					while (m > 0 && ch != (unsigned char) mark_pattern[m])
						m = mark_fail[m - 1];
					if (ch == (unsigned char) mark_pattern[m])
						m++;
					if (m == mark_pattern_len)
					{
						c->mark_state = M_AFTER_COLON;
						m = 0;
					}
					c->mark_matched = m;
				}
				break;
		}
	}
}

static void
record_mark(Client *c, int64_t mark, int64_t now)
{
	if (mark <= c->max_mark_seen)
		return;
	if (c->synced && c->nsamples < opt.rounds)
	{
		Sample	   *s = &samples[(size_t) c->index * opt.rounds + c->nsamples++];

		s->mark = mark;
		s->latency_ns = now - mark;
		if (c->nsamples == opt.rounds)
			atomic_fetch_add(&completed_clients, 1);
	}
	c->max_mark_seen = mark;
}

/* ---- responses ---- */

static void
protocol_error(Worker *w, Client *c)
{
	w->counters.parse_errors++;
	w->counters.reconnects++;
	close_connection(w, c);
	wait_then_retry(w, c, RETRY_DELAY_NS);
}

static void
complete_response(Worker *w, Client *c)
{
	int64_t		now = clock_ns(CLOCK_REALTIME);
	int64_t		delay = 0;

	/* an answer before the whole request went out: the connection is spoiled */
	bool		close_after = c->close_after || c->state == C_SENDING;

	end_mark(c);
	w->counters.responses++;
	w->counters.status[c->status]++;
	if (c->status == 200 || c->status == 204)
	{
		if (c->resp_has_handle)
		{
			memcpy(c->handle, c->resp_handle, HANDLE_CAP);
			c->has_handle = true;
		}
		if (c->resp_has_offset)
			memcpy(c->offset, c->resp_offset, OFFSET_CAP);
		if (c->resp_has_cursor)
			memcpy(c->cursor, c->resp_cursor, CURSOR_CAP);
		record_mark(c, c->body_max_mark, now);
		c->live = c->up_to_date;
		if (c->up_to_date)
			c->synced = true;
	}
	else if (c->status == 409)
	{
		/* must refetch: from the start, with the new handle if one came */
		c->has_handle = c->resp_has_handle;
		if (c->has_handle)
			memcpy(c->handle, c->resp_handle, HANDLE_CAP);
		strcpy(c->offset, "-1");
		c->live = false;
	}
	else
		delay = c->retry_after_s > 0
			? (int64_t) (c->retry_after_s < RETRY_AFTER_CAP_S ? c->retry_after_s : RETRY_AFTER_CAP_S) * NS_PER_S
			: RETRY_DELAY_NS;
	reset_response(c);

	if (close_after)
	{
		close_connection(w, c);
		w->counters.reconnects++;
		if (delay > 0)
			wait_then_retry(w, c, delay);
		else
			enqueue_connect(w, c);
	}
	else if (delay > 0)
		wait_then_retry(w, c, delay);
	else
	{
		c->state = C_SENDING;
		send_request(w, c);
	}
}

static bool
name_is(const char *name, size_t len, const char *want)
{
	return strlen(want) == len && strncasecmp(name, want, len) == 0;
}

static bool
contains_word(const char *s, size_t len, const char *word)
{
	size_t		wlen = strlen(word);

	for (size_t i = 0; i + wlen <= len; i++)
		if (strncasecmp(s + i, word, wlen) == 0)
			return true;
	return false;
}

static bool
parse_decimal(const char *s, size_t len, uint64_t *out)
{
	uint64_t	v = 0;

	if (len == 0 || len > 18)
		return false;
	for (size_t i = 0; i < len; i++)
	{
		if (!isdigit((unsigned char) s[i]))
			return false;
		v = v * 10 + (s[i] - '0');
	}
	*out = v;
	return true;
}

/* Stores a header value the client keeps; false if it does not fit. */
static bool
keep_value(char *dest, size_t cap, const char *v, size_t vlen, bool cut)
{
	if (cut || vlen >= cap)
		return false;
	memcpy(dest, v, vlen);
	dest[vlen] = '\0';
	return true;
}

static void
header_line(Worker *w, Client *c, const char *line, size_t len, bool cut)
{
	const char *colon = memchr(line, ':', len);
	const char *v;
	size_t		nlen,
				vlen;
	uint64_t	number;

	if (colon == NULL)
		return;
	nlen = colon - line;
	v = colon + 1;
	vlen = line + len - v;
	while (vlen > 0 && (*v == ' ' || *v == '\t'))
		v++, vlen--;
	while (vlen > 0 && (v[vlen - 1] == ' ' || v[vlen - 1] == '\t'))
		vlen--;

	if (name_is(line, nlen, "content-length"))
	{
		if (!parse_decimal(v, vlen, &number))
		{
			protocol_error(w, c);
			return;
		}
		c->content_length = number;
	}
	else if (name_is(line, nlen, "transfer-encoding"))
		c->chunked = contains_word(v, vlen, "chunked");
	else if (name_is(line, nlen, "connection"))
	{
		if (contains_word(v, vlen, "close"))
			c->close_after = true;
		if (contains_word(v, vlen, "keep-alive"))
			c->keep_alive = true;
	}
	else if (name_is(line, nlen, "electric-handle"))
	{
		if (!keep_value(c->resp_handle, HANDLE_CAP, v, vlen, cut))
		{
			protocol_error(w, c);
			return;
		}
		c->resp_has_handle = true;
	}
	else if (name_is(line, nlen, "electric-offset"))
	{
		if (!keep_value(c->resp_offset, OFFSET_CAP, v, vlen, cut))
		{
			protocol_error(w, c);
			return;
		}
		c->resp_has_offset = true;
	}
	else if (name_is(line, nlen, "electric-cursor"))
	{
		if (!keep_value(c->resp_cursor, CURSOR_CAP, v, vlen, cut))
		{
			protocol_error(w, c);
			return;
		}
		c->resp_has_cursor = true;
	}
	else if (name_is(line, nlen, "electric-up-to-date"))
		c->up_to_date = true;
	else if (name_is(line, nlen, "retry-after"))
	{
		if (parse_decimal(v, vlen, &number))
			c->retry_after_s = number > 3600 ? 3600 : (uint32_t) number;
	}
}

static void
headers_done(Worker *w, Client *c)
{
	if (c->status < 200)
	{
		reset_response(c);		/* interim response: the real one follows */
		return;
	}
	if (c->http10 && !c->keep_alive)
		c->close_after = true;
	if (c->status == 204 || c->status == 304)
		complete_response(w, c);
	else if (c->chunked)
	{
		c->parse = P_CHUNK_SIZE;
		c->body_left = 0;
		c->chunk_digits = 0;
	}
	else if (c->content_length == 0)
		complete_response(w, c);
	else if (c->content_length > 0)
	{
		c->parse = P_BODY_LENGTH;
		c->body_left = c->content_length;
	}
	else
	{
		c->parse = P_BODY_UNTIL_CLOSE;
		c->close_after = true;
	}
}

/* A whole line of the status, headers or trailer has been read. */
static void
line_done(Worker *w, Client *c)
{
	const char *line = c->line;
	size_t		len = c->line_len;
	bool		cut = c->line_cut;

	if (!cut && len > 0 && line[len - 1] == '\r')
		len--;
	c->line_len = 0;
	c->line_cut = false;

	switch (c->parse)
	{
		case P_STATUS:
			if (len == 0)
				return;			/* a stray CRLF between responses */
			if (len < 12 || memcmp(line, "HTTP/1.", 7) != 0 || line[8] != ' ' ||
				!isdigit((unsigned char) line[9]) || !isdigit((unsigned char) line[10]) ||
				!isdigit((unsigned char) line[11]) || (len > 12 && line[12] != ' '))
			{
				protocol_error(w, c);
				return;
			}
			c->http10 = line[7] == '0';
			c->status = (line[9] - '0') * 100 + (line[10] - '0') * 10 + (line[11] - '0');
			if (c->status < 100 || c->status >= MAX_STATUS)
			{
				protocol_error(w, c);
				return;
			}
			c->parse = P_HEADERS;
			return;
		case P_HEADERS:
			if (len == 0)
				headers_done(w, c);
			else
				header_line(w, c, line, len, cut);
			return;
		case P_TRAILER:
			if (len == 0)
				complete_response(w, c);
			return;
		default:
			return;
	}
}

static void
line_append(Client *c, const char *p, size_t n)
{
	size_t		room = LINE_CAP - c->line_len;

	if (n > room)
	{
		c->line_cut = true;
		n = room;
	}
	memcpy(c->line + c->line_len, p, n);
	c->line_len += n;
}

static void
chunk_size_done(Worker *w, Client *c)
{
	if (c->chunk_digits == 0)
		protocol_error(w, c);
	else if (c->body_left == 0)
		c->parse = P_TRAILER;	/* the last chunk; trailer lines, then CRLF */
	else
		c->parse = P_CHUNK_DATA;
}

static int
hex_value(unsigned char ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	ch |= 0x20;
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	return -1;
}

/* Feeds bytes of the connection to the response parser. */
static void
parse_response(Worker *w, Client *c, const char *p, size_t n)
{
	const char *end = p + n;
	int			fd = c->fd;

	/* stop at once when the client left this connection or stopped reading */
	while (p < end && c->fd == fd && (c->state == C_AWAITING || c->state == C_SENDING))
	{
		switch (c->parse)
		{
			case P_STATUS:
			case P_HEADERS:
			case P_TRAILER:
				{
					const char *nl = memchr(p, '\n', end - p);

					line_append(c, p, (nl ? nl : end) - p);
					p = nl ? nl + 1 : end;
					if (nl)
						line_done(w, c);
				}
				break;
			case P_BODY_LENGTH:
			case P_CHUNK_DATA:
				{
					size_t		take = (size_t) (end - p) < c->body_left ? (size_t) (end - p) : c->body_left;

					scan_marks(c, p, take);
					p += take;
					c->body_left -= take;
					if (c->body_left == 0)
					{
						if (c->parse == P_CHUNK_DATA)
							c->parse = P_CHUNK_DATA_CR;
						else
							complete_response(w, c);
					}
				}
				break;
			case P_BODY_UNTIL_CLOSE:
				scan_marks(c, p, end - p);
				p = end;
				break;
			case P_CHUNK_SIZE:
				{
					unsigned char ch = *p++;
					int			digit = hex_value(ch);

					if (digit >= 0)
					{
						if (++c->chunk_digits > 15)
							protocol_error(w, c);
						else
							c->body_left = c->body_left * 16 + digit;
					}
					else if (ch == ';' || ch == ' ' || ch == '\t')
						c->parse = P_CHUNK_EXTENSION;
					else if (ch == '\r')
						c->parse = P_CHUNK_SIZE_LF;
					else if (ch == '\n')
						chunk_size_done(w, c);
					else
						protocol_error(w, c);
				}
				break;
			case P_CHUNK_EXTENSION:
				{
					const char *nl = memchr(p, '\n', end - p);

					p = nl ? nl + 1 : end;
					if (nl)
						chunk_size_done(w, c);
				}
				break;
			case P_CHUNK_SIZE_LF:
				if (*p++ == '\n')
					chunk_size_done(w, c);
				else
					protocol_error(w, c);
				break;
			case P_CHUNK_DATA_CR:
				{
					char		ch = *p++;

					if (ch == '\r')
						c->parse = P_CHUNK_DATA_LF;
					else if (ch == '\n')
					{
						c->parse = P_CHUNK_SIZE;
						c->chunk_digits = 0;
					}
					else
						protocol_error(w, c);
				}
				break;
			case P_CHUNK_DATA_LF:
				if (*p++ == '\n')
				{
					c->parse = P_CHUNK_SIZE;
					c->chunk_digits = 0;
				}
				else
					protocol_error(w, c);
				break;
		}
	}
}

static void
read_available(Worker *w, Client *c)
{
	for (;;)
	{
		ssize_t		n = recv(c->fd, w->read_buf, READ_BUF_SIZE, 0);

		if (n > 0)
		{
			if (c->state == C_WAITING)
				continue;		/* nothing was asked: drop it */
			if (!c->got_bytes)
			{
				c->got_bytes = true;
				c->connect_attempts = 0;
			}
			unpark(w, c);
			parse_response(w, c, w->read_buf, n);
			if (c->fd < 0)
				return;
		}
		else if (n == 0)
		{
			if (c->state != C_WAITING && c->parse == P_BODY_UNTIL_CLOSE)
				complete_response(w, c);	/* closes and reconnects */
			else
				connection_lost(w, c);
			return;
		}
		else if (errno == EINTR)
			continue;
		else if (errno == EAGAIN)
			return;
		else
		{
			connection_lost(w, c);
			return;
		}
	}
}

static void
handle_event(Worker *w, Client *c, uint32_t events)
{
	if (c->fd < 0)
		return;					/* a stale event of a closed connection */
	if (c->state == C_CONNECTING)
	{
		int			err = 0;
		socklen_t	len = sizeof err;

		if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0 || err != 0)
		{
			connect_failed(w, c);
			return;
		}
		if (!(events & EPOLLOUT))
			return;
		c->state = C_SENDING;
		send_request(w, c);
	}
	else if (c->state == C_SENDING && (events & EPOLLOUT))
		send_request(w, c);
	if (c->fd >= 0 && (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)))
		read_available(w, c);
}

static void *
worker_main(void *arg)
{
	Worker	   *w = arg;
	struct epoll_event events[MAX_EVENTS];

	while (!atomic_load_explicit(&stop_workers, memory_order_relaxed))
	{
		int64_t		now = clock_ns(CLOCK_MONOTONIC);
		int64_t		wait_ns = 50 * NS_PER_MS;
		int			n;

		if (w->heap_len > 0 && w->heap[0].due_ns - now < wait_ns)
			wait_ns = w->heap[0].due_ns - now;
		if (w->queue_len > 0 && w->pending < w->max_pending && w->next_batch_ns - now < wait_ns)
			wait_ns = w->next_batch_ns - now;
		n = epoll_wait(w->epfd, events, MAX_EVENTS,
					   wait_ns <= 0 ? 0 : (int) ((wait_ns + NS_PER_MS - 1) / NS_PER_MS));
		for (int i = 0; i < n; i++)
			handle_event(w, events[i].data.ptr, events[i].events);
		now = clock_ns(CLOCK_MONOTONIC);
		run_timers(w, now);
		open_batch(w, now);
	}
	return NULL;
}

/* ---- report ---- */

static int
compare_samples(const void *a, const void *b)
{
	const Sample *x = a,
			   *y = b;

	if (x->mark != y->mark)
		return x->mark < y->mark ? -1 : 1;
	return (x->latency_ns > y->latency_ns) - (x->latency_ns < y->latency_ns);
}

static int
compare_int64(const void *a, const void *b)
{
	int64_t		x = *(const int64_t *) a,
				y = *(const int64_t *) b;

	return (x > y) - (x < y);
}

/* Nearest rank of sorted values. */
static double
percentile_ms(const int64_t *sorted, size_t n, int p)
{
	size_t		rank = (p * n + 99) / 100;

	return sorted[rank > 0 ? rank - 1 : 0] / 1e6;
}

static void
print_latencies(const int64_t *sorted, size_t n)
{
	if (n == 0)
		printf("\"p50_ms\":null,\"p99_ms\":null,\"max_ms\":null");
	else
		printf("\"p50_ms\":%.3f,\"p99_ms\":%.3f,\"max_ms\":%.3f",
			   percentile_ms(sorted, n, 50), percentile_ms(sorted, n, 99),
			   sorted[n - 1] / 1e6);
}

static void
print_report(const Counters *total, bool timed_out, bool interrupted,
			 int64_t end_ns, long dropped, double drop_close_ms)
{
	size_t		nsamples = 0;
	Sample	   *all;
	int64_t    *latencies;
	int64_t		ready_at = atomic_load(&ready_ns);

	for (uint32_t i = 0; i < opt.clients; i++)
		nsamples += clients[i].nsamples;
	all = malloc((nsamples + 1) * sizeof *all);
	latencies = malloc((nsamples + 1) * sizeof *latencies);
	if (all == NULL || latencies == NULL)
	{
		fprintf(stderr, "loadgen: out of memory for the report\n");
		exit(1);
	}
	nsamples = 0;
	for (uint32_t i = 0; i < opt.clients; i++)
		for (uint16_t k = 0; k < clients[i].nsamples; k++)
			all[nsamples++] = samples[(size_t) i * opt.rounds + k];
	qsort(all, nsamples, sizeof *all, compare_samples);

	printf("{\"clients\":%u,\"shapes\":%u,\"threads\":%u,\"sources\":%u,\"rounds_wanted\":%u,"
		   "\"completed\":%u,\"failed\":%u,\"timed_out\":%s,\"interrupted\":%s,",
		   opt.clients, opt.shapes, opt.threads, opt.sources, opt.rounds,
		   atomic_load(&completed_clients), atomic_load(&failed_clients),
		   timed_out ? "true" : "false", interrupted ? "true" : "false");
	if (ready_at > 0)
		printf("\"connect_s\":%.3f,", (ready_at - start_ns) / 1e9);
	else
		printf("\"connect_s\":null,");
	printf("\"elapsed_s\":%.3f,\"rounds\":[", (end_ns - start_ns) / 1e9);
	for (size_t i = 0; i < nsamples;)
	{
		size_t		j = i;

		while (j < nsamples && all[j].mark == all[i].mark)
		{
			latencies[j - i] = all[j].latency_ns;
			j++;
		}
		printf("%s{\"mark\":\"%" PRId64 "\",\"received\":%zu,", i > 0 ? "," : "",
			   all[i].mark, j - i);
		print_latencies(latencies, j - i);
		printf("}");
		i = j;
	}
	for (size_t i = 0; i < nsamples; i++)
		latencies[i] = all[i].latency_ns;
	qsort(latencies, nsamples, sizeof *latencies, compare_int64);
	printf("],\"all\":{\"samples\":%zu,", nsamples);
	print_latencies(latencies, nsamples);
	printf("},\"responses\":%" PRIu64 ",\"errors\":{\"409\":%" PRIu64 ",\"503\":%" PRIu64,
		   total->responses, total->status[409], total->status[503]);
	for (int s = 100; s < MAX_STATUS; s++)
		if (total->status[s] > 0 && s != 200 && s != 204 && s != 409 && s != 503)
			printf(",\"%d\":%" PRIu64, s, total->status[s]);
	printf(",\"reconnects\":%" PRIu64 ",\"connect_failed\":%" PRIu64
		   ",\"connect_retries\":%" PRIu64 ",\"parse_errors\":%" PRIu64 "}",
		   total->reconnects, total->connect_failed, total->connect_retries,
		   total->parse_errors);
	if (opt.drop)
	{
		if (dropped >= 0)
			printf(",\"drop\":{\"closed\":%ld,\"rst\":%s,\"close_ms\":%.3f}",
				   dropped, opt.rst ? "true" : "false", drop_close_ms);
		else
			printf(",\"drop\":null");
	}
	printf("}\n");
	fflush(stdout);
	free(all);
	free(latencies);
}

/* ---- setup ---- */

static void
usage(void)
{
	fprintf(stderr,
			"usage: loadgen --port P --clients N [--host 127.0.0.1] [--path PATH]\n"
			"               [--shapes M] [--sources K] [--connect-rate R] [--max-pending P]\n"
			"               [--rounds R] [--mark-field NAME] [--timeout S] [--threads T]\n"
			"               [--drop [--rst]]\n");
	exit(2);
}

static uint32_t
parse_count(const char *arg, const char *name, uint32_t min, uint32_t max)
{
	char	   *end;
	unsigned long v = strtoul(arg, &end, 10);

	if (*arg == '\0' || *end != '\0' || v < min || v > max)
	{
		fprintf(stderr, "loadgen: --%s must be an integer in [%u, %u]\n", name, min, max);
		exit(2);
	}
	return v;
}

static void
parse_options(int argc, char **argv)
{
	static const struct option options[] = {
		{"host", required_argument, NULL, 'h'},
		{"port", required_argument, NULL, 'p'},
		{"path", required_argument, NULL, 'P'},
		{"shapes", required_argument, NULL, 'm'},
		{"clients", required_argument, NULL, 'n'},
		{"sources", required_argument, NULL, 's'},
		{"connect-rate", required_argument, NULL, 'c'},
		{"max-pending", required_argument, NULL, 'q'},
		{"rounds", required_argument, NULL, 'r'},
		{"mark-field", required_argument, NULL, 'f'},
		{"timeout", required_argument, NULL, 't'},
		{"threads", required_argument, NULL, 'T'},
		{"drop", no_argument, NULL, 'd'},
		{"rst", no_argument, NULL, 'R'},
		{NULL, 0, NULL, 0}
	};
	int			o;

	while ((o = getopt_long(argc, argv, "", options, NULL)) != -1)
	{
		switch (o)
		{
			case 'h': opt.host = optarg; break;
			case 'p': opt.port = parse_count(optarg, "port", 1, 65535); break;
			case 'P': opt.path = optarg; break;
			case 'm': opt.shapes = parse_count(optarg, "shapes", 1, UINT32_MAX); break;
			case 'n': opt.clients = parse_count(optarg, "clients", 1, 10000000); break;
			case 's': opt.sources = parse_count(optarg, "sources", 1, 254); break;
			case 'c': opt.connect_rate = parse_count(optarg, "connect-rate", 1, 1000000); break;
			case 'q': opt.max_pending = parse_count(optarg, "max-pending", 1, 10000000); break;
			case 'r': opt.rounds = parse_count(optarg, "rounds", 0, 10000); break;
			case 'f': opt.mark_field = optarg; break;
			case 't': opt.timeout_s = atof(optarg); break;
			case 'T': opt.threads = parse_count(optarg, "threads", 1, 256); break;
			case 'd': opt.drop = true; break;
			case 'R': opt.rst = true; break;
			default: usage();
		}
	}
	if (optind != argc || opt.port == 0 || opt.clients == 0 || opt.timeout_s <= 0)
		usage();
	if (opt.threads > opt.clients)
		opt.threads = opt.clients;
}

static void
resolve_server(void)
{
	struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM};
	struct addrinfo *found;
	int			rc = getaddrinfo(opt.host, NULL, &hints, &found);

	if (rc != 0)
	{
		fprintf(stderr, "loadgen: %s: %s\n", opt.host, gai_strerror(rc));
		exit(2);
	}
	memcpy(&server_addr, found->ai_addr, sizeof server_addr);
	server_addr.sin_port = htons(opt.port);
	freeaddrinfo(found);
	snprintf(host_header, sizeof host_header, "Host: %s:%d\r\n", opt.host, opt.port);
	path_separator = strchr(opt.path, '?') ? '&' : '?';
}

static void
raise_file_limit(void)
{
	struct rlimit lim;

	if (getrlimit(RLIMIT_NOFILE, &lim) == 0)
	{
		lim.rlim_cur = lim.rlim_max;
		setrlimit(RLIMIT_NOFILE, &lim);
		if (lim.rlim_cur < (rlim_t) opt.clients + 64)
			fprintf(stderr, "loadgen: warning: RLIMIT_NOFILE %llu is below %u clients\n",
					(unsigned long long) lim.rlim_cur, opt.clients);
	}
}

static void *
checked_calloc(size_t n, size_t size)
{
	void	   *p = calloc(n ? n : 1, size);

	if (p == NULL)
	{
		fprintf(stderr, "loadgen: out of memory\n");
		exit(1);
	}
	return p;
}

static void
start_workers(void)
{
	size_t		request_cap = strlen(opt.path) * 4 + HANDLE_CAP + OFFSET_CAP + CURSOR_CAP +
		strlen(host_header) + 128;

	workers = checked_calloc(opt.threads, sizeof *workers);
	for (uint32_t t = 0; t < opt.threads; t++)
	{
		Worker	   *w = &workers[t];

		w->first = (uint64_t) opt.clients * t / opt.threads;
		w->count = (uint64_t) opt.clients * (t + 1) / opt.threads - w->first;
		w->queue = checked_calloc(w->count, sizeof *w->queue);
		w->heap = checked_calloc(w->count, sizeof *w->heap);
		w->request_buf = checked_calloc(request_cap, 1);
		w->rate = opt.connect_rate / opt.threads ? opt.connect_rate / opt.threads : 1;
		w->max_pending = opt.max_pending / opt.threads ? opt.max_pending / opt.threads : 1;
		w->epfd = epoll_create1(EPOLL_CLOEXEC);
		if (w->epfd < 0)
		{
			perror("loadgen: epoll_create1");
			exit(1);
		}
		for (uint32_t i = w->first; i < w->first + w->count; i++)
			enqueue_connect(w, &clients[i]);
	}
	for (uint32_t t = 0; t < opt.threads; t++)
		if (pthread_create(&workers[t].thread, NULL, worker_main, &workers[t]) != 0)
		{
			fprintf(stderr, "loadgen: cannot start a thread\n");
			exit(1);
		}
}

/* Reads stdin; true once a line "drop" came. */
static bool
read_drop_line(bool *stdin_open)
{
	static char buf[256];
	static size_t len;
	ssize_t		n = read(STDIN_FILENO, buf + len, sizeof buf - len);
	bool		drop = false;

	if (n <= 0)
	{
		*stdin_open = false;
		return false;
	}
	len += n;
	for (char *nl; (nl = memchr(buf, '\n', len)) != NULL;)
	{
		size_t		line_len = nl - buf;

		if (line_len > 0 && buf[line_len - 1] == '\r')
			line_len--;
		if (line_len == 4 && memcmp(buf, "drop", 4) == 0)
			drop = true;
		len -= nl + 1 - buf;
		memmove(buf, nl + 1, len);
	}
	if (len == sizeof buf)
		len = 0;				/* an overlong line: not a command */
	return drop;
}

int
main(int argc, char **argv)
{
	sigset_t	signals;
	int			signal_fd;
	bool		stdin_open,
				drop_requested = false,
				interrupted = false,
				timed_out = false;
	int64_t		last_progress_ns = 0;
	int64_t		end_ns;
	long		dropped = -1;
	double		drop_close_ms = 0;
	Counters	total = {0};

	parse_options(argc, argv);
	raise_file_limit();
	resolve_server();
	build_mark_pattern();
	signal(SIGPIPE, SIG_IGN);

	/* the workers inherit the mask: signals reach only the signalfd */
	sigemptyset(&signals);
	sigaddset(&signals, SIGUSR1);
	sigaddset(&signals, SIGINT);
	sigaddset(&signals, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &signals, NULL);
	signal_fd = signalfd(-1, &signals, SFD_CLOEXEC);

	clients = checked_calloc(opt.clients, sizeof *clients);
	samples = checked_calloc((size_t) opt.clients * opt.rounds, sizeof *samples);
	for (uint32_t i = 0; i < opt.clients; i++)
	{
		clients[i].fd = -1;
		clients[i].index = i;
		strcpy(clients[i].offset, "-1");
		reset_response(&clients[i]);
	}

	start_ns = clock_ns(CLOCK_MONOTONIC);
	start_workers();

	stdin_open = opt.drop;
	for (;;)
	{
		struct pollfd fds[2] = {
			{.fd = signal_fd, .events = POLLIN},
			{.fd = stdin_open ? STDIN_FILENO : -1, .events = POLLIN},
		};
		int64_t		now;
		bool		ready;

		if (poll(fds, 2, 100) > 0)
		{
			if (fds[0].revents & POLLIN)
			{
				struct signalfd_siginfo info;

				if (read(signal_fd, &info, sizeof info) == sizeof info)
				{
					if (info.ssi_signo == SIGUSR1)
						drop_requested = true;
					else
						interrupted = true;
				}
			}
			if (fds[1].revents & (POLLIN | POLLHUP | POLLERR) && read_drop_line(&stdin_open))
				drop_requested = true;
		}
		now = clock_ns(CLOCK_MONOTONIC);
		ready = atomic_load(&ready_printed);
		if (!ready && now - last_progress_ns >= NS_PER_S)
		{
			fprintf(stderr, "parked %u\n", atomic_load(&parked_now));
			last_progress_ns = now;
		}
		if (interrupted)
			break;
		if (opt.drop
			? (drop_requested && ready)
			: ((opt.rounds == 0 && ready) ||
			   atomic_load(&completed_clients) + atomic_load(&failed_clients) >= opt.clients))
			break;
		if (now - start_ns >= (int64_t) (opt.timeout_s * NS_PER_S))
		{
			timed_out = true;
			break;
		}
	}

	atomic_store(&stop_workers, true);
	for (uint32_t t = 0; t < opt.threads; t++)
		pthread_join(workers[t].thread, NULL);
	end_ns = clock_ns(CLOCK_MONOTONIC);

	if (opt.drop && !timed_out && !interrupted)
	{
		struct linger hard_close = {.l_onoff = 1, .l_linger = 0};
		int64_t		t0;

		if (opt.rst)
			for (uint32_t i = 0; i < opt.clients; i++)
				if (clients[i].fd >= 0)
					setsockopt(clients[i].fd, SOL_SOCKET, SO_LINGER, &hard_close, sizeof hard_close);
		dropped = 0;
		t0 = clock_ns(CLOCK_MONOTONIC);
		for (uint32_t i = 0; i < opt.clients; i++)
			if (clients[i].fd >= 0)
			{
				close(clients[i].fd);
				clients[i].fd = -1;
				dropped++;
			}
		drop_close_ms = (clock_ns(CLOCK_MONOTONIC) - t0) / 1e6;
		fprintf(stderr, "dropped %ld connections in %.3f ms%s\n",
				dropped, drop_close_ms, opt.rst ? " (RST)" : "");
	}

	for (uint32_t t = 0; t < opt.threads; t++)
	{
		const Counters *c = &workers[t].counters;

		for (int s = 0; s < MAX_STATUS; s++)
			total.status[s] += c->status[s];
		total.responses += c->responses;
		total.reconnects += c->reconnects;
		total.connect_failed += c->connect_failed;
		total.connect_retries += c->connect_retries;
		total.parse_errors += c->parse_errors;
	}
	print_report(&total, timed_out, interrupted, end_ns, dropped, drop_close_ms);
	return timed_out || interrupted || atomic_load(&failed_clients) > 0 ? 1 : 0;
}
