/*-------------------------------------------------------------------------
 *
 * http_server.c
 *		The libmicrohttpd server's life: daemons, settings, wake-ups, stop.
 *
 * This file runs on the worker's main thread (its entry points,
 * http_server.h) and, for libmicrohttpd's log and accept callbacks, on
 * libmicrohttpd threads; it must not call into PostgreSQL.  A request's
 * own life is http_request.c's.
 *
 * One daemon listens on each configured address, each with an internal pool
 * of epoll threads and suspend/resume enabled; a request that must wait
 * (for the main thread to resolve its shape, or for a log to grow) is
 * suspended, so a parked client holds a socket but no thread.  The daemons
 * are started with every signal blocked, so that PostgreSQL's handlers only
 * ever run on the main thread.  A new connection past the connection limit
 * and its reserve is closed at its accept (http_accept_policy; see
 * http_request.c for the limit).
 *
 * Notes on synchronization
 * ------------------------
 * - `stopping` is set once by the main thread before it drains the request
 *   queue and wakes every parked connection; a connection that sees it
 *   answers 503 instead of parking, so nothing is left suspended when the
 *   daemons stop.
 * - cache_max_age, cache_stale_age and the other runtime settings are
 *   atomics the main thread updates on SIGHUP (http_server_apply_settings);
 *   shape_sync.request_header_timeout lives in the ConnTable, where the
 *   deadline thread reads it.
 *
 * IDENTIFICATION
 *	  src/net/http_server.c
 *
 *-------------------------------------------------------------------------
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "http_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <malloc.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <fcntl.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "http_conn.h"
#include "http_request.h"
#include "http_respond.h"
#include "server_metrics.h"
#include "thread_log.h"

#ifdef POSTGRES_H
#error "http_server.c runs on HTTP threads and must not include postgres.h"
#endif

static void
http_mhd_log(void *cls, const char *fmt, va_list ap)
{
	char		line[THREAD_LOG_LINE];
	bool		on_purpose = http_closing_on_purpose;

	http_closing_on_purpose = false;	/* it stands for the next line only */
	vsnprintf(line, sizeof(line), fmt, ap);
	/* an access handler's MHD_NO, a content reader's error (chunked or not) */
	if (on_purpose &&
		(strncmp(line, "Application reported internal error", 35) == 0 ||
		 strncmp(line, "Closing connection (application", 31) == 0))
		return;
	thread_log(THREAD_LOG_LOG, "%s", line);
}

/*
 * libmicrohttpd calls this on an internal inconsistency it cannot recover
 * from; returning would corrupt its state.  Log where PostgreSQL's log
 * collector will see it, then abort.
 */
static void
http_mhd_panic(void *cls, const char *file, unsigned int line, const char *reason)
{
	fprintf(stderr, "shape_sync: libmicrohttpd panic at %s:%u: %s\n",
			file ? file : "?", line, reason ? reason : "?");
	abort();
}

/* Resolves the listen address list into socket addresses (at most `max`). */
static int
http_resolve_addresses(const char *list, int port, struct sockaddr_storage *out,
					   socklen_t *lens, bool *dual_stack, int max,
					   char *err, size_t errlen)
{
	char	   *copy = strdup(list);
	char	   *save = NULL;
	int			n = 0;

	*dual_stack = false;
	if (copy == NULL)
	{
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
	{
		struct addrinfo hints = {0};
		struct addrinfo *res = NULL;
		char		portstr[16];
		int			rc;

		while (*tok == ' ')
			tok++;
		for (char *e = tok + strlen(tok); e > tok && e[-1] == ' ';)
			*--e = '\0';
		if (*tok == '\0')
			continue;
		if (strcmp(tok, "*") == 0)
		{
			*dual_stack = true;
			continue;
		}
		hints.ai_family = AF_UNSPEC;
		hints.ai_socktype = SOCK_STREAM;
		hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
		snprintf(portstr, sizeof(portstr), "%d", port);
		rc = getaddrinfo(tok, portstr, &hints, &res);
		if (rc != 0)
		{
			snprintf(err, errlen, "could not resolve listen address \"%s\": %s",
					 tok, gai_strerror(rc));
			free(copy);
			return -1;
		}
		for (struct addrinfo *ai = res; ai; ai = ai->ai_next)
		{
			bool		dup = false;

			for (int i = 0; i < n; i++)
				if (lens[i] == ai->ai_addrlen &&
					memcmp(&out[i], ai->ai_addr, ai->ai_addrlen) == 0)
					dup = true;
			if (dup)
				continue;
			if (n == max)
			{
				snprintf(err, errlen, "too many listen addresses (at most %d)", max);
				freeaddrinfo(res);
				free(copy);
				return -1;
			}
			memcpy(&out[n], ai->ai_addr, ai->ai_addrlen);
			lens[n] = ai->ai_addrlen;
			n++;
		}
		freeaddrinfo(res);
	}
	free(copy);
	if (n == 0 && !*dual_stack)
	{
		snprintf(err, errlen, "no listen address configured");
		return -1;
	}
	return n;
}

/*
 * New connections are closed at once while the server stops, and past the
 * connections accepted over the limit (see the header).  (Not with
 * MHD_quiesce_daemon: in thread-pool epoll mode it takes the listen socket
 * out of each worker's epoll set from this thread while the worker may be
 * doing the same at its connection limit, and libmicrohttpd panics when
 * the second removal fails.)
 */
static enum MHD_Result
http_accept_policy(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
	HttpServer *server = cls;

	(void) addr;
	(void) addrlen;
	if (atomic_load(&server->stopping))
		return MHD_NO;
	if (atomic_load_explicit(&server->over_limit, memory_order_relaxed) >=
		HTTP_OVER_LIMIT_CONNECTIONS)
	{
		/* no answer can be afforded: a prompt close, never the backlog */
		http_note_over_limit(server);
		sm_add(SM_HTTP_CONNECTIONS_REFUSED, 0, 1);
		return MHD_NO;
	}
	return MHD_YES;
}

static struct MHD_Daemon *
http_start_daemon(HttpServer *server, const HttpServerOptions *options,
				  const struct sockaddr *addr, bool ipv6, bool dual_stack,
				  unsigned threads, unsigned limit)
{
	unsigned	flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME |
		MHD_USE_ERROR_LOG;
	struct MHD_OptionItem opts[16];
	int			i = 0;

	if (ipv6)
		flags |= MHD_USE_IPv6;
	if (dual_stack)
		flags |= MHD_USE_DUAL_STACK;
	opts[i++] = (struct MHD_OptionItem) {MHD_OPTION_EXTERNAL_LOGGER,
	(intptr_t) http_mhd_log, server};
	opts[i++] = (struct MHD_OptionItem) {MHD_OPTION_THREAD_POOL_SIZE, threads, NULL};
	opts[i++] = (struct MHD_OptionItem) {MHD_OPTION_CONNECTION_LIMIT, limit, NULL};
	/*
	 * The request's line and headers and the response's headers only:
	 * libmicrohttpd clears the whole pool between requests, so each
	 * keep-alive connection keeps all of it resident, and shape bodies have
	 * buffers of their own (shape_answer.c).
	 */
	opts[i++] = (struct MHD_OptionItem) {MHD_OPTION_CONNECTION_MEMORY_LIMIT,
	(intptr_t) options->connection_memory, NULL};
	opts[i++] = (struct MHD_OptionItem) {MHD_OPTION_URI_LOG_CALLBACK,
	(intptr_t) http_request_begins, server};
	opts[i++] = (struct MHD_OptionItem) {MHD_OPTION_UNESCAPE_CALLBACK,
	(intptr_t) http_unescape, server};
	/* an idle backstop only: each byte received restarts it (see the header) */
	opts[i++] = (struct MHD_OptionItem) {MHD_OPTION_CONNECTION_TIMEOUT, 120, NULL};
	opts[i++] = (struct MHD_OptionItem) {MHD_OPTION_NOTIFY_COMPLETED,
	(intptr_t) http_completed, server};
	opts[i++] = (struct MHD_OptionItem) {MHD_OPTION_NOTIFY_CONNECTION,
	(intptr_t) http_connection_event, server};
	if (addr != NULL)
		opts[i++] = (struct MHD_OptionItem) {MHD_OPTION_SOCK_ADDR, 0, (void *) addr};
	opts[i++] = (struct MHD_OptionItem) {MHD_OPTION_END, 0, NULL};

	return MHD_start_daemon(flags, (uint16_t) options->port, http_accept_policy, server,
							http_access, server,
							MHD_OPTION_ARRAY, opts, MHD_OPTION_END);
}

static void http_server_free(HttpServer *server);

/*
 * Response buffers of 128 kB and more (write pieces, whole bodies) come
 * from mmap and go back to the kernel when freed.  glibc raises its mmap
 * threshold to the size of each mmapped block that is freed, so after the
 * first 256 kB piece buffer went, the next ones came from the HTTP
 * threads' arenas, whose tops malloc_trim() does not shrink: after each
 * round of 50 stalled 256 kB serves reaped, the worker kept 3 to 6 MB more
 * (stalled_memory.sh).  Setting the threshold fixes it at glibc's default
 * and turns the adjustment off, for the whole worker process.  With the
 * default 64 kB pieces no response buffer reaches it.
 */
static void
http_fix_mmap_threshold(void)
{
	(void) mallopt(M_MMAP_THRESHOLD, 128 * 1024);
}

/*
 * Undoes a start that failed half-way: no request was served, so there is
 * nothing to answer, and the caller's request queue stays open.
 */
static void
http_server_abort_start(HttpServer *server)
{
	deadline_stop(&server->deadlines);
	waiters_stop(&server->waiters);
	for (int i = 0; i < server->ndaemons; i++)
		MHD_stop_daemon(server->daemons[i]);
	http_server_free(server);
}

/*
 * 64 random bits, drawn once per server (the seed of the bodies' client
 * buckets, subset_client_bucket): from getrandom(2), or /dev/urandom, or
 * at worst the clock, the process id and an address.
 */
static uint64_t
http_random_seed(const void *salt)
{
	uint64_t	seed = 0;
	struct timespec ts;
	int			fd;

	if (getrandom(&seed, sizeof(seed), GRND_NONBLOCK) == (ssize_t) sizeof(seed))
		return seed;
	fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
	if (fd >= 0)
	{
		ssize_t		got = read(fd, &seed, sizeof(seed));

		close(fd);
		if (got == (ssize_t) sizeof(seed))
			return seed;
	}
	clock_gettime(CLOCK_REALTIME, &ts);
	seed = ((uint64_t) ts.tv_sec * UINT64_C(1000000000) + (uint64_t) ts.tv_nsec) ^
		((uint64_t) getpid() << 32) ^ (uint64_t) (uintptr_t) salt;
	return seed;
}

HttpServer *
http_server_start(const HttpServerOptions *options, const HttpRuntimeSettings *settings,
				  char *err, size_t errlen)
{
	HttpServer *server;
	struct sockaddr_storage addrs[HTTP_MAX_DAEMONS];
	socklen_t	lens[HTTP_MAX_DAEMONS];
	bool		dual_stack;
	int			naddrs;
	int			ndaemons;
	unsigned	threads;
	sigset_t	all;
	sigset_t	old;

	naddrs = http_resolve_addresses(options->listen_addresses, options->port,
									addrs, lens, &dual_stack, HTTP_MAX_DAEMONS - 1,
									err, errlen);
	if (naddrs < 0)
		return NULL;
	ndaemons = dual_stack ? 1 : naddrs;
	threads = (unsigned) (options->threads / ndaemons);
	if (threads < 1)
		threads = 1;

	server = calloc(1, sizeof(HttpServer));
	if (server == NULL)
	{
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	server->shapes = options->shapes;
	server->queue = options->queue;
	server->write_piece_size = options->write_piece_size;
	server->waiters.epoll_fd = server->waiters.notify_fd = -1;	/* nothing to close yet */
	server->socket_send_buffer = options->socket_send_buffer;
	server->admission = options->admission;
	server->subsets = options->subsets;
	server->post_client_seed = http_random_seed(server);
	/* see http_request_begins: what a connection's memory pool can parse */
	if (options->connection_memory < HTTP_MIN_CONNECTION_MEMORY)
	{
		snprintf(err, errlen, "connection memory of %zu bytes is under the %d bytes a request needs",
				 options->connection_memory, HTTP_MIN_CONNECTION_MEMORY);
		free(server);
		return NULL;
	}
	server->connection_memory = options->connection_memory;
	server->max_uri_len = options->connection_memory / 4;
	server->max_query_args = (unsigned) (options->connection_memory / 256);
	if (server->max_query_args > HTTP_MAX_QUERY_ARGS)
		server->max_query_args = HTTP_MAX_QUERY_ARGS;
	if (access_policy_init(&server->access, &settings->access, err, errlen) != 0)
	{
		free(server);
		return NULL;
	}
	server->access_ready = true;
	server->connection_limit = options->connection_limit;
	if (conn_table_init(&server->conns, options->connection_limit, options->activity) != 0 ||
		waiters_init(&server->waiters, options->shapes->nslots, &server->conns,
					 options->shapes) != 0 ||
		resolved_schemas_init(&server->schemas, options->shapes->nslots) != 0 ||
		resolved_shared_init(&server->resolutions, 2 * options->shapes->nslots) != 0 ||
		shared_responses_init(&server->shared, options->shapes->nslots) != 0)
	{
		http_server_free(server);
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	atomic_init(&server->stopping, false);
	http_fix_mmap_threshold();
	(void) http_server_apply_settings(server, settings, err, errlen);
	MHD_set_panic_func(http_mhd_panic, NULL);

	/* threads inherit the creator's mask: keep every signal off them */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	if (waiters_start(&server->waiters) != 0 ||
		deadline_start(&server->deadlines, &server->conns) != 0)
	{
		snprintf(err, errlen, "could not start the server's threads");
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		http_server_abort_start(server);
		return NULL;
	}
	for (int i = 0; i < ndaemons; i++)
	{
		const struct sockaddr *addr = dual_stack ? NULL : (struct sockaddr *) &addrs[i];
		bool		ipv6 = dual_stack || addrs[i].ss_family == AF_INET6;
		struct MHD_Daemon *d;

		/*
		 * libmicrohttpd's own limit, which it splits among its threads, is
		 * set past what http_accept_policy lets in, by more than a
		 * connection per thread: a thread at its share stops accepting,
		 * and if every one did, new clients would wait in the backlog.
		 */
		d = http_start_daemon(server, options, addr, ipv6, dual_stack, threads,
							  HTTP_MHD_CONNECTION_LIMIT(options->connection_limit, threads) /
							  (unsigned) ndaemons);
		if (d == NULL && dual_stack)
			d = http_start_daemon(server, options, NULL, false, false, threads,
								  HTTP_MHD_CONNECTION_LIMIT(options->connection_limit, threads));
		if (d == NULL)
		{
			char		host[INET6_ADDRSTRLEN] = "*";

			if (!dual_stack)
			{
				if (addrs[i].ss_family == AF_INET6)
					inet_ntop(AF_INET6, &((struct sockaddr_in6 *) &addrs[i])->sin6_addr,
							  host, sizeof(host));
				else
					inet_ntop(AF_INET, &((struct sockaddr_in *) &addrs[i])->sin_addr,
							  host, sizeof(host));
			}
			snprintf(err, errlen, "could not listen on %s port %d: %s",
					 host, options->port, strerror(errno));
			pthread_sigmask(SIG_SETMASK, &old, NULL);
			http_server_abort_start(server);
			return NULL;
		}
		server->daemons[server->ndaemons++] = d;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return server;
}

int
http_server_apply_settings(HttpServer *server, const HttpRuntimeSettings *settings,
						   char *err, size_t errlen)
{
	atomic_store(&server->cache_max_age, settings->cache_max_age);
	atomic_store(&server->cache_stale_age, settings->cache_stale_age);
	atomic_store(&server->long_poll_timeout_ms, settings->long_poll_timeout_ms);
	atomic_store(&server->allow_shape_deletion, settings->allow_shape_deletion);
	atomic_store(&server->conns.write_timeout_ms, settings->stalled_serve_timeout_ms);
	atomic_store(&server->conns.request_timeout_ms, settings->request_header_timeout_ms);
	atomic_store(&server->snapshot_wait_timeout_ms, settings->snapshot_wait_timeout_ms);
	atomic_store(&server->max_where_length, settings->max_where_length);
	return access_policy_update(&server->access, &settings->access, err, errlen);
}

void
http_server_wake_shape(HttpServer *server, uint32_t slot)
{
	waiters_notify(&server->waiters, slot);
}

/*
 * What connections and responses had (libmicrohttpd's pools, requests,
 * response buffers of up to a write piece), and what the main thread had
 * for shapes that were dropped, goes back to malloc's arenas, which keep
 * it: after a disconnect storm, stalled serves of big chunks reaped, or
 * thousands of shapes dropped, the worker would hold that memory for good.
 * Once about HTTP_RELEASE_AFTER_BYTES were given back since the last time,
 * and at most once a second, malloc_trim() hands the free pages of every
 * arena to the kernel (not an arena's unused top: the big buffers that
 * would end there are mmapped instead, see http_fix_mmap_threshold).  Its cost grows with the heap, not with requests or
 * writes.
 */
#define HTTP_RELEASE_AFTER_BYTES	(4 * 1024 * 1024)
#define HTTP_RELEASE_MIN_GAP_MS		1000

int
http_server_release_due_ms(HttpServer *server)
{
	uint64_t	freed = atomic_load_explicit(&server->freed_bytes, memory_order_relaxed);
	int64_t		wait;

	if (freed - server->freed_at_release < HTTP_RELEASE_AFTER_BYTES)
		return -1;
	wait = server->released_ms + HTTP_RELEASE_MIN_GAP_MS - conn_now_coarse_ms();
	return wait < 0 ? 0 : (int) wait;
}

/* Memory the main thread gave back (dropped shapes), for the release above. */
void
http_server_note_freed(HttpServer *server, uint64_t bytes)
{
	if (bytes > 0)
		atomic_fetch_add_explicit(&server->freed_bytes, bytes, memory_order_relaxed);
}

void
http_server_release_memory(HttpServer *server)
{
	uint64_t	freed = atomic_load_explicit(&server->freed_bytes, memory_order_relaxed);
	int64_t		now = conn_now_coarse_ms();

	if (freed - server->freed_at_release < HTTP_RELEASE_AFTER_BYTES ||
		now - server->released_ms < HTTP_RELEASE_MIN_GAP_MS)
		return;
	server->freed_at_release = freed;
	server->released_ms = now;
	(void) malloc_trim(0);
}

void
http_server_wake_all(HttpServer *server)
{
	for (uint32_t i = 0; i < server->shapes->nslots; i++)
		waiters_notify(&server->waiters, i);
}

/* Frees what http_server_start allocated; the daemons are stopped. */
static void
http_server_free(HttpServer *server)
{
	waiters_destroy(&server->waiters);
	resolved_schemas_destroy(&server->schemas);
	resolved_shared_destroy(&server->resolutions);
	shared_responses_destroy(&server->shared);
	conn_table_destroy(&server->conns);
	if (server->access_ready)
		access_policy_destroy(&server->access);
	free(server);
}

void
http_server_stop(HttpServer *server)
{
	ShapeRequest *pending;
	int64_t		give_up;

	if (server == NULL)
		return;
	atomic_store(&server->stopping, true);

	/* requests the main thread will never resolve now */
	pending = request_queue_close(server->queue);
	while (pending != NULL)
	{
		ShapeRequest *next = pending->next;

		pending->result.status = SHAPE_RESOLVE_UNAVAILABLE;
		pending->done(pending);
		pending = next;
	}
	deadline_stop(&server->deadlines);
	waiters_stop(&server->waiters);

	/*
	 * Resuming only flags a connection: give the daemons a moment to run
	 * the handlers, which answer 503, and to send what they queued (a
	 * request counts until libmicrohttpd reports it complete: stopping a
	 * daemon closes connections whose queued answer is not out yet),
	 * before stopping them closes what is left.  New connections are
	 * closed meanwhile (http_accept_policy).
	 */
	give_up = waiters_now_ms() + 2000;
	while (atomic_load(&server->unanswered) > 0 && waiters_now_ms() < give_up)
	{
		struct timespec pause = {0, 5 * 1000 * 1000};

		nanosleep(&pause, NULL);
	}
	for (int i = 0; i < server->ndaemons; i++)
		MHD_stop_daemon(server->daemons[i]);
	http_server_free(server);
}

bool
http_settings_origins_valid(const char *origins, char *err, size_t errlen)
{
	return access_origins_valid(origins, err, errlen);
}

bool
http_settings_proxies_valid(const char *proxies, char *err, size_t errlen)
{
	return client_proxies_parse(proxies, NULL, err, errlen);
}

bool
http_settings_loopback_only(const char *addresses)
{
	char	   *copy = strdup(addresses ? addresses : "");
	char	   *save = NULL;
	bool		loopback = true;

	if (copy == NULL)
		return false;			/* out of memory: say it is exposed */
	for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
	{
		while (*tok == ' ')
			tok++;
		for (char *e = tok + strlen(tok); e > tok && e[-1] == ' ';)
			*--e = '\0';
		if (*tok != '\0' && strcmp(tok, "::1") != 0 &&
			!access_host_is_loopback(tok, strlen(tok)))
			loopback = false;
	}
	free(copy);
	return loopback;
}
