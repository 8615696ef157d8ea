/*
 * floor_server.c
 *		The floor: the least a server can do for loadgen's live clients, so
 *		that a real server's numbers can be read against it.
 *
 * What it does.  It speaks just enough of Electric's Shape API over HTTP/1.1
 * keep-alive: a request without live=true is answered at once (200, "[]",
 * electric-handle floor-1, electric-offset <k>_0 of the newest commit k,
 * electric-up-to-date); a live request is parked, unless its offset is older
 * than the newest commit, which it then gets at once.  Commits come as lines
 * "commit <mark_ns>" on stdin; for each, ONE response (headers and a one-row
 * body holding the mark, offset <k>_0) is built and written to every parked
 * connection, which then goes back to reading its next request.  A line
 * "stats" prints counts on stderr.  Exits on stdin EOF, SIGTERM or SIGINT.
 *
 * How.  One epoll loop per thread (--threads T, default 1; with more, each
 * thread has its own SO_REUSEPORT listener, so the kernel spreads
 * connections).  Sockets are registered once, edge-triggered for both
 * directions.  Thread 0 also reads stdin; a commit is published under a
 * mutex and the other threads are woken by an eventfd each.
 *
 * Why it is lean.  A response is built once per commit and shared: each
 * connection holds a reference and its own write offset into it (partial
 * writes resume on EPOLLOUT), so a commit to N connections costs N send()s
 * and no copies.  Requests are parsed straight from the thread's read buffer;
 * only a request split across reads (or pipelined behind an answer not yet
 * written) is stashed, so idle and parked connections hold no buffer.  A
 * closed connection (EOF, RST) is seen on its next event and freed at once
 * (after the event batch, which may still name it).
 *
 *	floor_server --port P [--host 127.0.0.1] [--threads T]
 *
 * Prints "listening <port>" on stdout once it accepts (with --port 0, the
 * port the kernel chose).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
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
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#define READ_BUF_SIZE	16384
#define MAX_REQUEST		32768	/* more unanswered request bytes close the connection */
#define MAX_EVENTS		512
#define ACCEPTS_PER_EVENT 256
#define ACCEPT_PAUSE_MS	100		/* after EMFILE: let connections close first */

/* One response, shared by every connection that writes it. */
typedef struct Response
{
	atomic_int	refs;
	uint32_t	len;
	char		data[];
} Response;

typedef struct Conn
{
	int			fd;
	bool		dead;			/* closed; freed after the event batch */
	bool		parked;
	bool		close_after_write;
	bool		read_paused;	/* until its answer is written */
	struct Conn *prev;			/* the worker's parked list, while parked */
	struct Conn *next;
	struct Conn *next_dead;
	Response   *out;			/* being written, from out_off */
	uint32_t	out_off;
	uint32_t	stash_len;		/* a request split across reads */
	uint32_t	stash_cap;
	char	   *stash;
} Conn;

typedef struct Worker
{
	int			id;
	pthread_t	thread;
	int			epfd;
	int			listen_fd;
	int			wake_fd;		/* eventfd: a commit was published, or stop */
	Conn		parked;			/* head of the circular parked list */
	Conn	   *graveyard;
	uint64_t	k;				/* the newest commit this worker serves */
	Response   *live;			/* its response; NULL before the first */
	Response   *snapshot;		/* the answer to a request without live=true */
	bool		accept_paused;
	atomic_long open_conns;
	atomic_long parked_conns;
	atomic_long accepted;
	atomic_long requests;
	atomic_long bytes_written;
	char		read_buf[READ_BUF_SIZE];
} Worker;

/* epoll tags of the non-connection fds */
static char tag_listen,
			tag_wake,
			tag_stdin,
			tag_signal;

static const char *bind_host = "127.0.0.1";
static int	port;
static int	nthreads = 1;
static Worker *workers;
static atomic_bool stopping;

static pthread_mutex_t published_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t published_k;
static Response *published_live;
static Response *published_snapshot;

static const char bad_request[] =
	"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
static Response *bad_request_response;

/* ---- responses ---- */

static Response *
response_new(uint64_t k, const char *body)
{
	char		head[512];
	size_t		body_len = strlen(body);
	int			head_len = snprintf(head, sizeof head,
									"HTTP/1.1 200 OK\r\n"
									"content-type: application/json\r\n"
									"content-length: %zu\r\n"
									"electric-handle: floor-1\r\n"
									"electric-offset: %" PRIu64 "_0\r\n"
									"electric-up-to-date: true\r\n"
									"\r\n", body_len, k);
	Response   *r = malloc(sizeof *r + head_len + body_len);

	if (r == NULL)
	{
		fprintf(stderr, "floor_server: out of memory\n");
		exit(1);
	}
	atomic_init(&r->refs, 1);
	r->len = head_len + body_len;
	memcpy(r->data, head, head_len);
	memcpy(r->data + head_len, body, body_len);
	return r;
}

static void
response_ref(Response *r)
{
	atomic_fetch_add_explicit(&r->refs, 1, memory_order_relaxed);
}

static void
response_unref(Response *r)
{
	if (r != NULL && atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) == 1)
		free(r);
}

/* ---- connections ---- */

static void
list_remove(Conn *c)
{
	c->prev->next = c->next;
	c->next->prev = c->prev;
	c->prev = c->next = NULL;
}

static void
list_push(Conn *head, Conn *c)
{
	c->next = head;
	c->prev = head->prev;
	head->prev->next = c;
	head->prev = c;
}

static void
park(Worker *w, Conn *c)
{
	c->parked = true;
	list_push(&w->parked, c);
	atomic_fetch_add_explicit(&w->parked_conns, 1, memory_order_relaxed);
}

static void
unpark(Worker *w, Conn *c)
{
	if (!c->parked)
		return;
	c->parked = false;
	list_remove(c);
	atomic_fetch_sub_explicit(&w->parked_conns, 1, memory_order_relaxed);
}

/* Closes now; the memory goes after the event batch that may still name it. */
static void
conn_close(Worker *w, Conn *c)
{
	if (c->dead)
		return;
	c->dead = true;
	unpark(w, c);
	close(c->fd);
	response_unref(c->out);
	c->out = NULL;
	c->next_dead = w->graveyard;
	w->graveyard = c;
	atomic_fetch_sub_explicit(&w->open_conns, 1, memory_order_relaxed);
}

static void
sweep_graveyard(Worker *w)
{
	while (w->graveyard != NULL)
	{
		Conn	   *c = w->graveyard;

		w->graveyard = c->next_dead;
		free(c->stash);
		free(c);
	}
}

/* Writes what is left of c->out; true when all of it is written. */
static bool
conn_flush(Worker *w, Conn *c)
{
	while (c->out_off < c->out->len)
	{
		ssize_t		n = send(c->fd, c->out->data + c->out_off,
							 c->out->len - c->out_off, MSG_NOSIGNAL);

		if (n > 0)
		{
			c->out_off += n;
			atomic_fetch_add_explicit(&w->bytes_written, n, memory_order_relaxed);
		}
		else if (n < 0 && errno == EINTR)
			continue;
		else if (n < 0 && errno == EAGAIN)
			return false;		/* EPOLLOUT resumes */
		else
		{
			conn_close(w, c);
			return false;
		}
	}
	response_unref(c->out);
	c->out = NULL;
	if (c->close_after_write)
	{
		conn_close(w, c);
		return false;
	}
	return true;
}

static bool
conn_send(Worker *w, Conn *c, Response *r)
{
	response_ref(r);
	c->out = r;
	c->out_off = 0;
	return conn_flush(w, c);
}

static const char *
find_ci(const char *s, size_t len, const char *word)
{
	size_t		wlen = strlen(word);

	for (size_t i = 0; i + wlen <= len; i++)
		if (strncasecmp(s + i, word, wlen) == 0)
			return s + i;
	return NULL;
}

/* The commit number k of an "offset=<k>_0" parameter; 0 if none. */
static uint64_t
offset_commit(const char *target, size_t len)
{
	for (const char *p = target; (p = memmem(p, target + len - p, "offset=", 7)) != NULL; p += 7)
	{
		uint64_t	k = 0;

		if (p == target || (p[-1] != '?' && p[-1] != '&'))
			continue;
		for (p += 7; p < target + len && *p >= '0' && *p <= '9'; p++)
			k = k * 10 + (*p - '0');
		return k;
	}
	return 0;
}

/* One request head: answer it, or park it. */
static void
handle_request(Worker *w, Conn *c, const char *head, size_t len)
{
	const char *line_end = memchr(head, '\r', len);
	const char *target = memchr(head, ' ', len);
	const char *target_end;
	size_t		target_len;

	atomic_fetch_add_explicit(&w->requests, 1, memory_order_relaxed);
	target_end = target && line_end && target < line_end
		? memchr(target + 1, ' ', line_end - target - 1) : NULL;
	if (target_end == NULL)
	{
		c->close_after_write = true;
		conn_send(w, c, bad_request_response);
		return;
	}
	target++;
	target_len = target_end - target;
	if (find_ci(line_end, head + len - line_end, "\nconnection: close"))
		c->close_after_write = true;

	if (memmem(target, target_len, "live=true", 9) == NULL)
		conn_send(w, c, w->snapshot);
	else if (w->live != NULL && offset_commit(target, target_len) < w->k)
		conn_send(w, c, w->live);	/* it missed the newest commit */
	else
		park(w, c);
}

/* Handles the complete requests in buf while c is free; returns bytes used. */
static size_t
process_requests(Worker *w, Conn *c, const char *buf, size_t len)
{
	size_t		used = 0;

	while (!c->dead && c->out == NULL && !c->parked)
	{
		const char *end = memmem(buf + used, len - used, "\r\n\r\n", 4);
		size_t		head_len;

		if (end == NULL)
			break;
		head_len = end + 4 - (buf + used);
		handle_request(w, c, buf + used, head_len);
		used += head_len;
	}
	return used;
}

/* Goes on with stashed requests once the connection is free again. */
static void
conn_resume(Worker *w, Conn *c)
{
	size_t		used;

	if (c->stash_len == 0 || c->dead || c->out != NULL || c->parked)
		return;
	used = process_requests(w, c, c->stash, c->stash_len);
	if (c->dead)
		return;
	c->stash_len -= used;
	memmove(c->stash, c->stash + used, c->stash_len);
	if (c->stash_len == 0)
	{
		free(c->stash);
		c->stash = NULL;
		c->stash_cap = 0;
	}
}

static bool
stash_append(Conn *c, const char *data, size_t len)
{
	if (c->stash_len + len > MAX_REQUEST)
		return false;
	if (c->stash_len + len > c->stash_cap)
	{
		uint32_t	cap = c->stash_cap ? c->stash_cap : 1024;
		char	   *grown;

		while (cap < c->stash_len + len)
			cap *= 2;
		grown = realloc(c->stash, cap);
		if (grown == NULL)
			return false;
		c->stash = grown;
		c->stash_cap = cap;
	}
	memcpy(c->stash + c->stash_len, data, len);
	c->stash_len += len;
	return true;
}

static void
conn_feed(Worker *w, Conn *c, const char *data, size_t len)
{
	if (c->stash_len == 0)
	{
		size_t		used = process_requests(w, c, data, len);

		data += used;
		len -= used;
	}
	if (len == 0 || c->dead)
		return;
	if (!stash_append(c, data, len))
	{
		conn_close(w, c);
		return;
	}
	conn_resume(w, c);
}

static void
conn_event(Worker *w, Conn *c, uint32_t events)
{
	bool		readable = events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR);

	if (c->dead)
		return;
	if ((events & EPOLLOUT) && c->out != NULL && conn_flush(w, c))
	{
		conn_resume(w, c);
		if (c->read_paused)
		{
			c->read_paused = false;
			readable = true;	/* edge-triggered: what waited is still there */
		}
	}
	if (c->dead || !readable || c->read_paused)
		return;
	for (;;)
	{
		ssize_t		n;

		/* a pipelining client that does not read its answers: stop reading it */
		if (c->out != NULL && c->stash_len + READ_BUF_SIZE > MAX_REQUEST)
		{
			c->read_paused = true;
			return;
		}
		n = recv(c->fd, w->read_buf, READ_BUF_SIZE, 0);
		if (n > 0)
		{
			conn_feed(w, c, w->read_buf, n);
			if (c->dead)
				return;
		}
		else if (n < 0 && errno == EINTR)
			continue;
		else if (n < 0 && errno == EAGAIN)
			return;
		else
		{
			conn_close(w, c);	/* EOF or reset: gone, parked or not */
			return;
		}
	}
}

static void
accept_connections(Worker *w)
{
	for (int i = 0; i < ACCEPTS_PER_EVENT; i++)
	{
		int			one = 1;
		int			fd = accept4(w->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		Conn	   *c;
		struct epoll_event ev;

		if (fd < 0)
		{
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
			{
				struct epoll_event off = {.events = 0, .data.ptr = &tag_listen};

				fprintf(stderr, "floor_server: accept: %s; pausing\n", strerror(errno));
				epoll_ctl(w->epfd, EPOLL_CTL_MOD, w->listen_fd, &off);
				w->accept_paused = true;
			}
			return;
		}
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
		c = calloc(1, sizeof *c);
		if (c == NULL)
		{
			close(fd);
			return;
		}
		c->fd = fd;
		ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
		ev.data.ptr = c;
		if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
		{
			close(fd);
			free(c);
			continue;
		}
		atomic_fetch_add_explicit(&w->open_conns, 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&w->accepted, 1, memory_order_relaxed);
	}
}

/* ---- commits ---- */

/* Takes the newest published commit and sends it to every parked connection. */
static void
adopt_published(Worker *w)
{
	Conn		waiting;
	Response   *live,
			   *snapshot;
	uint64_t	k;

	pthread_mutex_lock(&published_lock);
	k = published_k;
	live = published_live;
	snapshot = published_snapshot;
	if (k != w->k)
	{
		response_ref(live);
		response_ref(snapshot);
	}
	pthread_mutex_unlock(&published_lock);
	if (k == w->k)
		return;
	response_unref(w->live);
	response_unref(w->snapshot);
	w->live = live;
	w->snapshot = snapshot;
	w->k = k;

	/* take the whole list first: a connection that parks again joins a new one */
	if (w->parked.next == &w->parked)
		return;
	waiting.next = w->parked.next;
	waiting.prev = w->parked.prev;
	waiting.next->prev = &waiting;
	waiting.prev->next = &waiting;
	w->parked.next = w->parked.prev = &w->parked;
	while (waiting.next != &waiting)
	{
		Conn	   *c = waiting.next;

		list_remove(c);
		c->parked = false;
		atomic_fetch_sub_explicit(&w->parked_conns, 1, memory_order_relaxed);
		if (conn_send(w, c, live))
			conn_resume(w, c);
	}
}

static void
publish_commit(const char *mark)
{
	char		body[512];
	Response   *live,
			   *snapshot;
	Response   *old_live,
			   *old_snapshot;
	uint64_t	k = published_k + 1;	/* only thread 0 writes it */

	snprintf(body, sizeof body,
			 "[{\"key\":\"\\\"public\\\".\\\"items\\\"/\\\"1\\\"\","
			 "\"value\":{\"id\":\"1\",\"mark\":\"%s\"},"
			 "\"headers\":{\"operation\":\"insert\"}},"
			 "{\"headers\":{\"control\":\"up-to-date\"}}]", mark);
	live = response_new(k, body);
	snapshot = response_new(k, "[]");

	pthread_mutex_lock(&published_lock);
	old_live = published_live;
	old_snapshot = published_snapshot;
	published_live = live;
	published_snapshot = snapshot;
	published_k = k;
	pthread_mutex_unlock(&published_lock);
	response_unref(old_live);
	response_unref(old_snapshot);

	for (int t = 1; t < nthreads; t++)
	{
		uint64_t	one = 1;

		if (write(workers[t].wake_fd, &one, sizeof one) < 0)
			perror("floor_server: eventfd");
	}
	adopt_published(&workers[0]);
}

static void
print_stats(void)
{
	long		open = 0,
				parked = 0,
				accepted = 0,
				requests = 0,
				bytes = 0;

	for (int t = 0; t < nthreads; t++)
	{
		open += atomic_load(&workers[t].open_conns);
		parked += atomic_load(&workers[t].parked_conns);
		accepted += atomic_load(&workers[t].accepted);
		requests += atomic_load(&workers[t].requests);
		bytes += atomic_load(&workers[t].bytes_written);
	}
	fprintf(stderr, "stats open %ld parked %ld accepted %ld requests %ld commits %" PRIu64
			" bytes_written %ld\n", open, parked, accepted, requests, published_k, bytes);
}

static void
control_line(char *line)
{
	size_t		len = strlen(line);

	while (len > 0 && (line[len - 1] == '\r' || line[len - 1] == ' '))
		line[--len] = '\0';
	if (len == 0)
		return;
	if (strncmp(line, "commit ", 7) == 0)
	{
		const char *mark = line + 7;

		if (*mark != '\0' && strspn(mark, "0123456789") == strlen(mark) && strlen(mark) <= 20)
			publish_commit(mark);
		else
			fprintf(stderr, "floor_server: bad mark: %s\n", mark);
	}
	else if (strcmp(line, "stats") == 0)
		print_stats();
	else
		fprintf(stderr, "floor_server: unknown command: %s\n", line);
}

/* Reads what stdin has (one read: it is level-triggered); false at EOF. */
static bool
read_control(void)
{
	static char buf[4096];
	static size_t len;
	ssize_t		n = read(STDIN_FILENO, buf + len, sizeof buf - 1 - len);
	char	   *start = buf;
	char	   *nl;

	if (n < 0 && errno == EINTR)
		return true;
	if (n <= 0)
		return false;
	len += n;
	buf[len] = '\0';
	while ((nl = memchr(start, '\n', buf + len - start)) != NULL)
	{
		*nl = '\0';
		control_line(start);
		start = nl + 1;
	}
	len -= start - buf;
	memmove(buf, start, len);
	if (len == sizeof buf - 1)
		len = 0;				/* an overlong line: not a command */
	return true;
}

/* ---- threads ---- */

static void
stop_all(void)
{
	atomic_store(&stopping, true);
	for (int t = 1; t < nthreads; t++)
	{
		uint64_t	one = 1;

		if (write(workers[t].wake_fd, &one, sizeof one) < 0)
			perror("floor_server: eventfd");
	}
}

static void *
worker_main(void *arg)
{
	Worker	   *w = arg;
	struct epoll_event events[MAX_EVENTS];

	while (!atomic_load(&stopping))
	{
		int			n = epoll_wait(w->epfd, events, MAX_EVENTS,
								   w->accept_paused ? ACCEPT_PAUSE_MS : -1);

		if (n < 0 && errno != EINTR)
		{
			perror("floor_server: epoll_wait");
			exit(1);
		}
		if (w->accept_paused)
		{
			struct epoll_event on = {.events = EPOLLIN, .data.ptr = &tag_listen};

			epoll_ctl(w->epfd, EPOLL_CTL_MOD, w->listen_fd, &on);
			w->accept_paused = false;
		}
		for (int i = 0; i < n; i++)
		{
			void	   *tag = events[i].data.ptr;

			if (tag == &tag_listen)
				accept_connections(w);
			else if (tag == &tag_wake)
			{
				uint64_t	count;

				if (read(w->wake_fd, &count, sizeof count) < 0 && errno != EAGAIN)
					perror("floor_server: eventfd");
				if (!atomic_load(&stopping))
					adopt_published(w);
			}
			else if (tag == &tag_stdin)
			{
				if (!read_control())
					stop_all();
			}
			else if (tag == &tag_signal)
				stop_all();
			else
				conn_event(w, tag, events[i].events);
		}
		sweep_graveyard(w);
	}
	return NULL;
}

static void
epoll_add(Worker *w, int fd, void *tag)
{
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = tag};

	if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, fd, &ev) < 0)
	{
		perror("floor_server: epoll_ctl (stdin carries the commits: it must be a pipe or a terminal)");
		exit(1);
	}
}

static int
open_listener(void)
{
	int			one = 1;
	int			fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(port)};
	socklen_t	addr_len = sizeof addr;

	if (fd < 0 || inet_pton(AF_INET, bind_host, &addr.sin_addr) != 1)
	{
		fprintf(stderr, "floor_server: bad --host or no socket\n");
		exit(1);
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (nthreads > 1)
		setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
	if (bind(fd, (struct sockaddr *) &addr, sizeof addr) < 0 || listen(fd, 65535) < 0)
	{
		perror("floor_server: bind/listen");
		exit(1);
	}
	getsockname(fd, (struct sockaddr *) &addr, &addr_len);
	port = ntohs(addr.sin_port);	/* the next threads' listeners share it */
	return fd;
}

int
main(int argc, char **argv)
{
	static const struct option options[] = {
		{"port", required_argument, NULL, 'p'},
		{"host", required_argument, NULL, 'h'},
		{"threads", required_argument, NULL, 'T'},
		{NULL, 0, NULL, 0}
	};
	int			o;
	bool		have_port = false;
	sigset_t	signals;
	struct rlimit lim;

	while ((o = getopt_long(argc, argv, "", options, NULL)) != -1)
	{
		switch (o)
		{
			case 'p': port = atoi(optarg); have_port = true; break;
			case 'h': bind_host = optarg; break;
			case 'T': nthreads = atoi(optarg); break;
			default: goto usage;
		}
	}
	if (optind != argc || !have_port || port < 0 || port > 65535 || nthreads < 1 || nthreads > 256)
		goto usage;

	if (getrlimit(RLIMIT_NOFILE, &lim) == 0)
	{
		lim.rlim_cur = lim.rlim_max;
		setrlimit(RLIMIT_NOFILE, &lim);
	}
	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&signals);
	sigaddset(&signals, SIGTERM);
	sigaddset(&signals, SIGINT);
	pthread_sigmask(SIG_BLOCK, &signals, NULL);

	bad_request_response = malloc(sizeof *bad_request_response + sizeof bad_request - 1);
	atomic_init(&bad_request_response->refs, 1);	/* held forever */
	bad_request_response->len = sizeof bad_request - 1;
	memcpy(bad_request_response->data, bad_request, sizeof bad_request - 1);
	published_snapshot = response_new(0, "[]");

	workers = calloc(nthreads, sizeof *workers);
	for (int t = 0; t < nthreads; t++)
	{
		Worker	   *w = &workers[t];

		w->id = t;
		w->parked.next = w->parked.prev = &w->parked;
		w->epfd = epoll_create1(EPOLL_CLOEXEC);
		w->listen_fd = open_listener();
		w->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		w->snapshot = published_snapshot;
		response_ref(w->snapshot);
		epoll_add(w, w->listen_fd, &tag_listen);
		epoll_add(w, w->wake_fd, &tag_wake);
	}
	epoll_add(&workers[0], STDIN_FILENO, &tag_stdin);
	epoll_add(&workers[0], signalfd(-1, &signals, SFD_CLOEXEC), &tag_signal);

	printf("listening %d\n", port);
	fflush(stdout);
	for (int t = 1; t < nthreads; t++)
		pthread_create(&workers[t].thread, NULL, worker_main, &workers[t]);
	worker_main(&workers[0]);
	for (int t = 1; t < nthreads; t++)
		pthread_join(workers[t].thread, NULL);
	print_stats();
	return 0;

usage:
	fprintf(stderr, "usage: floor_server --port P [--host 127.0.0.1] [--threads T]\n");
	return 2;
}
