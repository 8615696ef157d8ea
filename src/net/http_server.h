/*-------------------------------------------------------------------------
 *
 * http_server.h
 *		The libmicrohttpd server: start, stop, wake waiters, settings.
 *
 * The PostgreSQL side calls these from the worker's main thread only.
 *
 * IDENTIFICATION
 *	  src/net/http_server.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef HTTP_SERVER_H
#define HTTP_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "access_policy.h"
#include "admission.h"
#include "conn_activity.h"
#include "request_queue.h"
#include "shape_table.h"
#include "subset_results.h"

typedef struct HttpServer HttpServer;

/*
 * Connections accepted past connection_limit, only to be answered 503 and
 * closed; past these too, a new connection is closed at once.  The worker
 * counts them in its file descriptors.
 */
#define HTTP_OVER_LIMIT_CONNECTIONS	16

/*
 * libmicrohttpd's connection limit for `limit` of ours and `threads`
 * threads: room for those answered 503, and for the connections closed at
 * their accept (a moment each), so that no thread stops accepting.  The
 * worker counts it all in its file descriptors.
 */
#define HTTP_MHD_CONNECTION_LIMIT(limit, threads) \
	((limit) + 2 * HTTP_OVER_LIMIT_CONNECTIONS + 2 * (threads))

/* The least memory a connection may have for its request and headers. */
#define HTTP_MIN_CONNECTION_MEMORY	(8 * 1024)

typedef struct HttpServerOptions
{
	const char *listen_addresses;	/* "localhost", "*", or a comma list */
	int			port;
	int			threads;		/* worker threads in all */
	unsigned	connection_limit;
	size_t		write_piece_size;	/* bytes per socket write, at most */
	size_t		connection_memory;	/* libmicrohttpd's pool per connection */
	size_t		socket_send_buffer; /* SO_SNDBUF per connection; 0: the kernel's */
	ShapeTable *shapes;
	RequestQueue *queue;
	Admission  *admission;		/* in shared memory */
	SubsetResults *subsets;		/* in shared memory; NULL: subsets get 503 */
	ConnActivity *activity;		/* connection_limit entries in shared memory,
								 * or NULL: the server keeps its own */
} HttpServerOptions;

/* Settings the main thread may change while the server runs (SIGHUP). */
typedef struct HttpRuntimeSettings
{
	int			cache_max_age;	/* seconds */
	int			cache_stale_age;	/* seconds */
	int			long_poll_timeout_ms;
	bool		allow_shape_deletion;	/* DELETE /v1/shape */
	int			stalled_serve_timeout_ms;	/* 0: never reap */
	int			request_header_timeout_ms;	/* a whole request, from the start
											 * of the wait; 0: no limit */
	int			snapshot_wait_timeout_ms;	/* a request waiting for its
											 * shape's snapshot; 0: no limit */
	int			max_where_length;	/* bytes of a where clause */
	AccessSettings access;		/* copied; the strings may go after the call */
} HttpRuntimeSettings;

/*
 * Starts the daemons with every signal blocked in their threads.  Returns
 * NULL and a message in err on failure.
 */
extern HttpServer *http_server_start(const HttpServerOptions *options,
									 const HttpRuntimeSettings *settings,
									 char *err, size_t errlen);

/* Answers pending and parked requests, then stops and joins all threads. */
extern void http_server_stop(HttpServer *server);

/* Returns 0, or -1 with a message in err (the old access rules stay). */
extern int	http_server_apply_settings(HttpServer *server,
									   const HttpRuntimeSettings *settings,
									   char *err, size_t errlen);

/*
 * Main thread, now and then: once many connections have closed since the
 * last time, hands the memory they freed back to the kernel.
 */
extern void http_server_release_memory(HttpServer *server);
extern void http_server_note_freed(HttpServer *server, uint64_t bytes);

/* In how many ms a release is due (0: now), or -1 when none is. */
extern int	http_server_release_due_ms(HttpServer *server);

/* Resumes the connections waiting for this shape's log to grow. */
extern void http_server_wake_shape(HttpServer *server, uint32_t slot);

/* Resumes every parked connection (the shape table changed wholesale). */
extern void http_server_wake_all(HttpServer *server);

/*
 * The syntax checks of settings the server reads, for the settings' check
 * hooks: true, or false with the reason in err.
 */
extern bool http_settings_origins_valid(const char *origins, char *err, size_t errlen);
extern bool http_settings_proxies_valid(const char *proxies, char *err, size_t errlen);

/* Whether every address of a listen_addresses list is a loopback one. */
extern bool http_settings_loopback_only(const char *addresses);

#endif							/* HTTP_SERVER_H */
