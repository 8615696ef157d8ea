/*-------------------------------------------------------------------------
 *
 * http_request.c
 *		A request's life on the server: limits on its target, who it is
 *		from, routing, and the connection's end.
 *
 * This file runs on libmicrohttpd threads and must not call into
 * PostgreSQL.  It holds libmicrohttpd's callbacks (http_request.h), which
 * http_server.c hands to each daemon.
 *
 * Routing is a handful of fixed paths; /v1/shape is served by
 * shape_serve.c.  Who a shape or metrics request comes from is decided
 * once, at its first call, under the access rules in force
 * (access_policy.c, client_address.c): its TCP peer, or behind a trusted
 * proxy the client X-Forwarded-For names.  The loopback-only rule and
 * every per-client limit go by that; the connection's ConnTable slot, the
 * shape_sync.connections view and the logs keep the TCP peer (one proxy
 * connection carries the requests of many clients).  Everything a request
 * owns hangs off its ShapeConn, which the completion callback frees on
 * every ending: done, client abort, error or daemon shutdown.
 *
 * Every wait has a deadline.  A connection waiting for a request (from its
 * accept, or from the end of its previous response, until the request's
 * headers and any body are in) holds its ConnTable slot's request
 * deadline, which the deadline thread enforces (deadline.c): libmicrohttpd's
 * own connection timeout is only an idle timeout, restarted by each byte,
 * so a client sending one byte a minute would hold a connection for good.
 * Only a POST to /v1/shape takes a request body (a subset query's,
 * subset_serve.c); libmicrohttpd reads one that a client sends to any
 * other route and hands it to http_access, which throws it away; so the
 * deadline ends only at the call that finds the whole request in, not at
 * the first call, when only the headers are.  A request that is answered
 * at its first call reads no body (libmicrohttpd closes the connection
 * after the answer), and its deadline ends there.
 *
 * The connection limit (shape_sync.max_connections, as the worker's file
 * descriptors allow) is the size of the ConnTable.  libmicrohttpd is let
 * accept HTTP_OVER_LIMIT_CONNECTIONS more, which get no slot: each is
 * answered 503 with retry-after and closed as soon as its request is in
 * (or after OVER_LIMIT_TIMEOUT_S without one), so that a client at the
 * limit is refused promptly instead of waiting in the listen backlog.
 * Past those, http_accept_policy (http_server.c) closes a new connection
 * at once (which needs libmicrohttpd to go on accepting: its own limit is
 * set higher, HTTP_MHD_CONNECTION_LIMIT).  The limit is logged at most once
 * a minute, with how many were turned away.
 *
 * Notes on synchronization
 * ------------------------
 * - A ShapeConn is touched by the thread that owns its connection, except
 *   while suspended: then the main thread owns `request` (RESOLVING), or
 *   the connection sits on its shape's wait list (WAITING).
 * - Parked connections and their wake-ups are waiters.c's business; see
 *   its notes.
 * - `over_limit` is a count of open connections without a slot, changed
 *   by fetch_add/sub in http_connection_event; the accept policy reads it
 *   (relaxed: a connection more or less past the reserve is harmless).
 *
 * IDENTIFICATION
 *	  src/net/http_request.c
 *
 *-------------------------------------------------------------------------
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "http_request.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "http_respond.h"
#include "server_metrics.h"
#include "shape_serve.h"
#include "status_page.h"
#include "subset_serve.h"
#include "thread_log.h"

#ifdef POSTGRES_H
#error "http_request.c runs on HTTP threads and must not include postgres.h"
#endif

/*
 * Caps what a client that stops reading can pin in the kernel: without a
 * cap, autotuning lets a socket absorb megabytes (net.ipv4.tcp_wmem)
 * before writes block.  The kernel doubles the value it is given.
 */
static void
http_bound_send_buffer(HttpServer *server, int fd)
{
	int			size = (int) server->socket_send_buffer;

	if (size > 0)
		(void) setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
}

/* con_cls of requests that own nothing */
static char http_plain_request;

/* room for the 431's body (http_headers_too_large_body) */
#define HTTP_HEADERS_TOO_LARGE_BODY_MAX 300

static const char http_target_too_long_body[] =
"{\"message\":\"The request target is too long\"}";

/* the socket context of a connection accepted past the limit */
static char http_over_limit;

/* how long a connection past the limit may take to send its request */
#define OVER_LIMIT_TIMEOUT_S	2

/* A request ends: what it was, what it got, how long it took. */
static void
http_count_request(ConnSlot *slot)
{
	SmKind		kind = (SmKind) slot->req_kind;

	if (slot->req_status == 0)
		return;					/* nothing was answered (the client left) */
	sm_add(SM_HTTP_REQUESTS, sm_request_series((SmRoute) slot->req_route,
											   (SmMethod) slot->req_method,
											   slot->req_status, kind), 1);
	sm_add(SM_HTTP_RESPONSE_BYTES, kind, slot->req_bytes);
	sm_observe(SM_HTTP_SERVE_SECONDS, kind,
			   (double) (http_monotonic_us() - slot->req_started_us) / 1e6);
	slot->req_status = 0;
}

/* OPTIONS /v1/shape: the CORS preflight. */
static enum MHD_Result
http_respond_preflight(struct MHD_Connection *connection)
{
	struct MHD_Response *response;
	const char *requested;
	char		allowed[64] = "";
	enum MHD_Result ret;

	response = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
	if (response == NULL)
		return MHD_NO;
	http_add_cors_headers(response, connection);
	MHD_add_response_header(response, "access-control-max-age", "86400");
	requested = MHD_lookup_connection_value(connection, MHD_HEADER_KIND,
											"Access-Control-Request-Headers");
	if (requested != NULL)
	{
		if (strcasestr(requested, "if-none-match"))
			strcat(allowed, "if-none-match");
		if (strcasestr(requested, "traceparent"))
			strcat(allowed, allowed[0] ? ",traceparent" : "traceparent");
		/* a subset's POST from a browser sends its JSON body with it */
		if (strcasestr(requested, "content-type"))
			strcat(allowed, allowed[0] ? ",content-type" : "content-type");
		if (allowed[0])
			MHD_add_response_header(response, "access-control-allow-headers", allowed);
	}
	MHD_add_response_header(response, "electric-server", SERVER_NAME);
	ret = http_queue(connection, MHD_HTTP_NO_CONTENT, response, 0);
	MHD_destroy_response(response);
	return ret;
}

/* ------------------------------------------------------------- routing */

typedef enum HttpRoute
{
	ROUTE_NONE,
	ROUTE_ROOT,					/* / */
	ROUTE_HEALTH,				/* /v1/health */
	ROUTE_METRICS,				/* /metrics */
	ROUTE_SHAPE					/* /v1/shape */
} HttpRoute;

/*
 * The one place a path becomes a route.  `url` is the path libmicrohttpd
 * percent-decoded, so /v1/%73hape is /v1/shape (and is authenticated as
 * such); every other spelling (/v1/shape/, /v1//shape, /V1/shape) is no
 * route at all, and a path with an encoded NUL never gets here.
 */
static HttpRoute
http_route(const char *url)
{
	if (strcmp(url, "/v1/shape") == 0)
		return ROUTE_SHAPE;
	if (strcmp(url, "/v1/health") == 0)
		return ROUTE_HEALTH;
	if (strcmp(url, "/metrics") == 0)
		return ROUTE_METRICS;
	if (strcmp(url, "/") == 0)
		return ROUTE_ROOT;
	return ROUTE_NONE;
}

static SmRoute
http_metrics_route(HttpRoute route)
{
	switch (route)
	{
		case ROUTE_SHAPE:
			return SM_ROUTE_SHAPE;
		case ROUTE_HEALTH:
			return SM_ROUTE_HEALTH;
		case ROUTE_METRICS:
			return SM_ROUTE_METRICS;
		case ROUTE_ROOT:
			return SM_ROUTE_ROOT;
		default:
			return SM_ROUTE_OTHER;
	}
}

/*
 * GET /metrics: every metric in the Prometheus text format.  The text is
 * built in one buffer, sized by a first try (about 20 kB with the default
 * metrics), so a scrape costs one allocation.
 */
static enum MHD_Result
http_respond_metrics(struct MHD_Connection *connection)
{
	size_t		cap = 64 * 1024;
	char	   *text = NULL;
	size_t		len = 0;
	struct MHD_Response *response;
	enum MHD_Result ret;

	for (int tries = 0; tries < 4; tries++)
	{
		char	   *bigger = realloc(text, cap);

		if (bigger == NULL)
			break;
		text = bigger;
		len = server_metrics_format(text, cap);
		if (len < cap)
		{
			response = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
			if (response == NULL)
				break;
			MHD_add_response_header(response, "content-type",
									"text/plain; version=0.0.4; charset=utf-8");
			MHD_add_response_header(response, "cache-control", "no-store");
			MHD_add_response_header(response, "electric-server", SERVER_NAME);
			ret = http_queue(connection, MHD_HTTP_OK, response, len);
			MHD_destroy_response(response);
			return ret;
		}
		cap = len + 4096;
	}
	free(text);
	return http_respond_json(connection, MHD_HTTP_INTERNAL_SERVER_ERROR,
							 "{\"message\":\"out of memory\"}", false);
}

/*
 * Markers that http_request_begins leaves as a request's first con_cls,
 * before libmicrohttpd parses the query: the request target was refused.
 */
static char http_target_too_long;
static char http_too_many_args;
static char http_path_has_nul;

/* con_cls of a request answered at its first call (refused, bad target) */
static char http_answered;

static bool
http_is_target_marker(const void *con_cls)
{
	return con_cls == &http_target_too_long || con_cls == &http_too_many_args ||
		con_cls == &http_path_has_nul;
}

/* Whether con_cls is a ShapeConn this file allocated. */
static bool
http_owns_shape_conn(const void *con_cls)
{
	return con_cls != NULL && con_cls != &http_plain_request &&
		con_cls != &http_answered && !http_is_target_marker(con_cls);
}

/* The connection's ConnTable slot, or NULL when it has none. */
static ConnSlot *
http_conn_slot(HttpServer *server, struct MHD_Connection *connection)
{
	const union MHD_ConnectionInfo *info =
		MHD_get_connection_info(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

	if (info == NULL || info->socket_context == NULL ||
		info->socket_context == &http_over_limit)
		return NULL;
	return &server->conns.slots[(uintptr_t) info->socket_context - 1];
}

/* Whether the connection was accepted past the limit, to be refused. */
static bool
http_conn_over_limit(struct MHD_Connection *connection)
{
	const union MHD_ConnectionInfo *info =
		MHD_get_connection_info(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

	return info != NULL && info->socket_context == &http_over_limit;
}

/* The connection's ConnTable slot number, or CONN_NO_SLOT. */
static uint32_t
http_conn_slot_no(HttpServer *server, struct MHD_Connection *connection)
{
	ConnSlot   *slot = http_conn_slot(server, connection);

	return slot != NULL ? (uint32_t) (slot - server->conns.slots) : CONN_NO_SLOT;
}

/*
 * libmicrohttpd's URI log callback: it runs on the raw request target
 * (path?query, still percent-encoded), before libmicrohttpd splits the
 * query into arguments.  Each argument takes a record from the
 * connection's memory pool, and libmicrohttpd 0.9.75 stalls the connection
 * for good when the pool runs out while it parses them (the client waits
 * until it gives up), so a target longer than a quarter of the pool, or
 * with more arguments than a quarter of the pool holds, is refused here:
 * its query is cut off at the "?" (the buffer is the connection's own
 * writable read buffer, and libmicrohttpd parses the query only after this
 * returns), and the handler answers 414 or 400.  An encoded NUL in the
 * path is refused too: the decoded path would end at it, and
 * /v1/shape%00x must not route like /v1/shape.
 */
void *
http_request_begins(void *cls, const char *uri, struct MHD_Connection *connection)
{
	HttpServer *server = cls;
	ConnSlot   *slot = http_conn_slot(server, connection);
	char	   *query = strchr(uri, '?');
	size_t		path_len = query ? (size_t) (query - uri) : strlen(uri);
	size_t		len = path_len + (query ? strlen(query) : 0);
	void	   *marker = NULL;

	for (size_t i = 0; i + 2 < path_len && marker == NULL; i++)
		if (uri[i] == '%' && uri[i + 1] == '0' && uri[i + 2] == '0')
			marker = &http_path_has_nul;
	if (marker == NULL && len > server->max_uri_len)
		marker = &http_target_too_long;
	if (marker == NULL && query != NULL)
	{
		unsigned	args = 1;

		for (const char *p = query; *p; p++)
			if (*p == '&' && ++args > server->max_query_args)
			{
				marker = &http_too_many_args;
				break;
			}
	}
	if (marker != NULL && query != NULL)
		query[1] = '\0';		/* nothing left for libmicrohttpd to parse */
	if (slot != NULL)
	{
		slot->query_strings = 0;
		slot->target_len = (uint32_t) len;
		slot->query_seen = query != NULL;
		slot->query_refused = false;
	}
	return marker;
}

/*
 * libmicrohttpd's unescape callback: decodes each key and value of the
 * query, then the path, as libmicrohttpd itself would.  It also backs up
 * http_request_begins, which reads the target as a C string: a request
 * line with a literal NUL byte before its "?" hides the query from it,
 * while libmicrohttpd still parses all of it, and may fill the pool.
 * libmicrohttpd decodes the arguments first and the path last, so a hidden
 * query shows here as a second string to decode although the target showed
 * no "?": the connection is shut down at once, so libmicrohttpd fails its
 * next read and closes it instead of stalling, and the request, should it
 * get that far, is answered 400.  A visible query has at most twice the
 * arguments http_request_begins let through; the second bound only guards
 * against counting them differently from libmicrohttpd.
 */
size_t
http_unescape(void *cls, struct MHD_Connection *connection, char *s)
{
	HttpServer *server = cls;
	ConnSlot   *slot = http_conn_slot(server, connection);

	if (slot != NULL && !slot->query_refused)
	{
		slot->query_strings++;
		if ((!slot->query_seen && slot->query_strings > 1) ||
			slot->query_strings > 2 * server->max_query_args + 2)
		{
			slot->query_refused = true;
			(void) shutdown(slot->fd, SHUT_RDWR);
		}
	}
	return MHD_http_unescape(s);
}

/* ------------------------------------------------------- access control */

static const char *
http_header_n(struct MHD_Connection *connection, enum MHD_ValueKind kind,
			  const char *key, size_t *len)
{
	const char *value = NULL;

	*len = 0;
	if (MHD_lookup_connection_value_n(connection, kind, key, strlen(key),
									  &value, len) != MHD_YES)
		return NULL;
	return value;
}

/*
 * The last CLIENT_FORWARD_HEADERS_MAX X-Forwarded-For headers of a request,
 * in a ring: header i (counted from 0, in the order they came) is at
 * i % CLIENT_FORWARD_HEADERS_MAX.  The walk reads no more than those, from
 * the right, so the headers a client sends before its proxy's cost nothing.
 */
typedef struct HttpForwarded
{
	int			n;				/* headers seen, less a multiple of
								 * CLIENT_FORWARD_HEADERS_MAX once past it */
	const char *values[CLIENT_FORWARD_HEADERS_MAX];
	size_t		lens[CLIENT_FORWARD_HEADERS_MAX];
} HttpForwarded;

static enum MHD_Result
http_count_header(void *cls, enum MHD_ValueKind kind, const char *key, size_t key_size,
				  const char *value, size_t value_size)
{
	*(size_t *) cls += key_size + value_size + 4;	/* "key: value\r\n" */
	/* libmicrohttpd parses cookies from a copy it makes in the same memory */
	if (key_size == 6 && strncasecmp(key, "Cookie", 6) == 0)
		*(size_t *) cls += value_size + 1;
	(void) kind;
	(void) value;
	return MHD_YES;
}

/*
 * What a request's target and headers take of the connection's memory:
 * their text, and a Cookie header twice (libmicrohttpd 0.9.75 parses it
 * from a copy).  libmicrohttpd builds the response's headers in what is
 * left, and closes the connection without a word when they do not fit:
 * past a third of shape_sync.connection_memory a request, on any route, is
 * answered 431 (a lean 414 when its target is too long), with no header
 * but its type, instead.  Even the 431 does not fit in one band: a Cookie
 * header whose copy libmicrohttpd still makes but which leaves room for
 * nothing (where depends on the number of headers and on how the request
 * arrived).  There libmicrohttpd ends the request with an error before a
 * byte of the answer went out, and http_completed writes the same answer
 * straight onto the socket.  Past that band libmicrohttpd answers 431
 * itself, or, once the request alone fills the memory, closes the
 * connection (docs/configuration.md, shape_sync.connection_memory).
 */
static size_t
http_request_text_bytes(struct MHD_Connection *connection, const ConnSlot *slot)
{
	size_t		bytes = slot != NULL ? slot->target_len : 0;

	(void) MHD_get_connection_values_n(connection, MHD_HEADER_KIND, http_count_header, &bytes);
	return bytes;
}

/* The body of that 431. */
static void
http_headers_too_large_body(const HttpServer *server, char *body, size_t size)
{
	snprintf(body, size,
			 "{\"message\":\"The request's target and headers take more than %zu bytes, "
			 "which leaves too little of shape_sync.connection_memory (%zu kB) for the "
			 "response's headers; send fewer headers, or the database operator can raise it\"}",
			 server->connection_memory / 3, server->connection_memory / 1024);
}

/*
 * The 431 of a request whose answer libmicrohttpd had no room to head (see
 * above), written by hand: the connection is a fresh request's, nothing of
 * the answer went out, and libmicrohttpd closes the socket once this
 * returns, so a short nonblocking send is all there is to it; when the
 * kernel takes less (the client is gone), the close says the rest.
 */
static void
http_send_431_by_hand(const HttpServer *server, struct MHD_Connection *connection)
{
	const union MHD_ConnectionInfo *fd_info =
		MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
	char		body[HTTP_HEADERS_TOO_LARGE_BODY_MAX];
	char		answer[HTTP_HEADERS_TOO_LARGE_BODY_MAX + 200];
	int			len;

	if (fd_info == NULL)
		return;
	http_headers_too_large_body(server, body, sizeof(body));
	len = snprintf(answer, sizeof(answer),
				   "HTTP/1.1 431 Request Header Fields Too Large\r\n"
				   "Connection: close\r\n"
				   "Content-Type: application/json\r\n"
				   "Content-Length: %zu\r\n\r\n%s", strlen(body), body);
	if (len > 0 && (size_t) len < sizeof(answer))
		(void) send(fd_info->connect_fd, answer, (size_t) len, MSG_DONTWAIT | MSG_NOSIGNAL);
}

static enum MHD_Result
http_collect_forwarded(void *cls, enum MHD_ValueKind kind, const char *key, size_t key_size,
					   const char *value, size_t value_size)
{
	HttpForwarded *f = cls;

	if (key_size != 15 || strncasecmp(key, "X-Forwarded-For", 15) != 0)
		return MHD_YES;
	f->values[f->n % CLIENT_FORWARD_HEADERS_MAX] = value ? value : "";
	f->lens[f->n % CLIENT_FORWARD_HEADERS_MAX] = value ? value_size : 0;
	f->n++;
	if (f->n == 2 * CLIENT_FORWARD_HEADERS_MAX)
		f->n -= CLIENT_FORWARD_HEADERS_MAX; /* the same slots, and still "more" */
	return MHD_YES;
}

/*
 * Who the request comes from (access_identify_client): its TCP peer, or
 * the client X-Forwarded-For names when the peer is a trusted proxy.  The
 * headers are looked at only then.
 */
static void
http_identify_client(struct MHD_Connection *connection, const AccessRules *rules,
					 AccessClient *client)
{
	const union MHD_ConnectionInfo *addr =
		MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	const struct sockaddr *peer = addr != NULL ? addr->client_addr : NULL;
	HttpForwarded f = {0};
	const char *values[CLIENT_FORWARD_HEADERS_MAX];
	size_t		lens[CLIENT_FORWARD_HEADERS_MAX];
	int			kept;

	if (access_peer_is_trusted(rules, peer))
		MHD_get_connection_values_n(connection, MHD_HEADER_KIND, http_collect_forwarded, &f);
	/* the ring in order: the oldest kept is the next one it would overwrite */
	kept = f.n < CLIENT_FORWARD_HEADERS_MAX ? f.n : CLIENT_FORWARD_HEADERS_MAX;
	for (int i = 0; i < kept; i++)
	{
		int			at = (f.n - kept + i) % CLIENT_FORWARD_HEADERS_MAX;

		values[i] = f.values[at];
		lens[i] = f.lens[at];
	}
	access_identify_client(rules, peer, values, lens, kept, f.n > kept, client);
}

/* Gathers what access_decide looks at and asks it. */
static AccessVerdict
http_check_access(HttpServer *server, struct MHD_Connection *connection,
				  const AccessRules *rules, const AccessClient *client, bool needs_secret)
{
	AccessRequest req = {0};

	req.peer_loopback = client->loopback;
	req.host = http_header_n(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST, &req.host_len);
	req.origin = http_header_n(connection, MHD_HEADER_KIND, "Origin", &req.origin_len);
	req.fetch_site = http_header_n(connection, MHD_HEADER_KIND, "Sec-Fetch-Site",
								   &req.fetch_site_len);
	req.needs_secret = needs_secret;
	if (needs_secret && access_has_secret(rules))
	{
		req.secret = http_header_n(connection, MHD_GET_ARGUMENT_KIND, "secret",
								   &req.secret_len);
		if (req.secret == NULL)
			req.secret = http_header_n(connection, MHD_GET_ARGUMENT_KIND, "api_secret",
									   &req.secret_len);
	}
	return access_decide(rules, &req);
}

/*
 * Answers a refused request: 401 as Electric words it, 403 saying which
 * rule refused it.  Nothing of the request is echoed, and a page of a
 * refused origin gets no CORS headers.
 */
static enum MHD_Result
http_respond_refused(HttpServer *server, struct MHD_Connection *connection,
					 const AccessRules *rules, AccessVerdict verdict)
{
	size_t		origin_len;
	const char *origin = http_header_n(connection, MHD_HEADER_KIND, "Origin", &origin_len);
	bool		cors = verdict == ACCESS_SECRET_REQUIRED &&
		access_origin_allowed(rules, origin, origin_len);
	const char *body;

	switch (verdict)
	{
		case ACCESS_SECRET_REQUIRED:
			return http_respond_json(connection, MHD_HTTP_UNAUTHORIZED,
									 "{\"message\":\"Unauthorized - Invalid API secret\"}", cors);
		case ACCESS_PEER_NOT_LOOPBACK:
			body = "{\"message\":\"Forbidden: while no secret is set "
				"(shape_sync.secret), this server serves loopback clients only\"}";
			break;
		case ACCESS_HOST_NOT_LOOPBACK:
			body = "{\"message\":\"Forbidden: while no secret is set "
				"(shape_sync.secret), the Host header must name a loopback address\"}";
			break;
		case ACCESS_ORIGIN_NOT_ALLOWED:
		default:
			body = "{\"message\":\"Forbidden: requests from this origin are not allowed "
				"(shape_sync.cors_allowed_origins)\"}";
			break;
	}
	return http_respond_json(connection, MHD_HTTP_FORBIDDEN, body, false);
}

/* A connection past the limit: 503, to retry once others have closed. */
static enum MHD_Result
http_respond_over_connection_limit(HttpServer *server, struct MHD_Connection *connection)
{
	char		body[192];
	struct MHD_Response *response;
	enum MHD_Result ret;

	snprintf(body, sizeof(body),
			 "{\"message\":\"The server holds as many connections as \\\"shape_sync.max_connections\\\" "
			 "(%u) allows, please retry\"}", server->connection_limit);
	response = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_COPY);
	if (response == NULL)
		return MHD_NO;
	MHD_add_response_header(response, "content-type", "application/json; charset=utf-8");
	MHD_add_response_header(response, "electric-server", SERVER_NAME);
	MHD_add_response_header(response, "cache-control", "no-store");
	MHD_add_response_header(response, "retry-after", "1");
	MHD_add_response_header(response, MHD_HTTP_HEADER_CONNECTION, "close");
	ret = http_queue(connection, MHD_HTTP_SERVICE_UNAVAILABLE, response, strlen(body));
	MHD_destroy_response(response);
	return ret;
}

/*
 * Counts a connection turned away past the limit, and says so at most once
 * a minute.
 */
void
http_note_over_limit(HttpServer *server)
{
	uint64_t	turned = atomic_fetch_add(&server->over_limit_turned_away, 1) + 1;
	int64_t		now = conn_now_coarse_ms();
	int64_t		last = atomic_load(&server->over_limit_logged_ms);

	if ((last == 0 || now - last >= 60000) &&
		atomic_compare_exchange_strong(&server->over_limit_logged_ms, &last, now))
		thread_log(THREAD_LOG_WARNING,
				   "\"shape_sync.max_connections\" (%u) was reached: new connections get 503 "
				   "(%llu turned away since the server started)",
				   server->connection_limit, (unsigned long long) turned);
}

/* The first call for a request: route it, decide access, set up its state. */
static enum MHD_Result
http_begin_request(HttpServer *server, struct MHD_Connection *connection,
				   const char *url, const char *method, void **con_cls)
{
	HttpRoute	route = http_route(url);
	bool		is_get = strcmp(method, MHD_HTTP_METHOD_GET) == 0;
	bool		is_head = strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
	bool		is_delete = strcmp(method, MHD_HTTP_METHOD_DELETE) == 0;
	bool		is_options = strcmp(method, MHD_HTTP_METHOD_OPTIONS) == 0;
	bool		is_post = strcmp(method, MHD_HTTP_METHOD_POST) == 0;
	const AccessRules *rules;
	AccessClient client;
	AccessVerdict verdict;
	ShapeConn  *sc;

	void	   *marker = *con_cls;
	ConnSlot   *slot = http_conn_slot(server, connection);

	if (slot == NULL && http_conn_over_limit(connection))
	{
		enum MHD_Result ret;

		*con_cls = &http_answered;
		http_note_over_limit(server);
		ret = http_respond_over_connection_limit(server, connection);
		sm_add(SM_HTTP_REQUESTS, sm_request_series(http_metrics_route(route),
												   sm_method_of(method), 503,
												   SM_KIND_NONE), 1);
		return ret;
	}
	if (slot != NULL)
	{
		slot->req_started_us = http_monotonic_us();
		slot->req_route = (uint8_t) http_metrics_route(route);
		slot->req_method = (uint8_t) sm_method_of(method);
		slot->req_kind = (uint8_t) (route == ROUTE_SHAPE && is_delete ? SM_KIND_DELETE
									: SM_KIND_NONE);
		slot->req_status = 0;
		slot->req_bytes = 0;
		slot->req_head = is_head;
	}
	if (slot != NULL && slot->query_refused)
		marker = &http_too_many_args;
	*con_cls = &http_answered;	/* unless it goes on below */
	if (marker == &http_path_has_nul)
		return http_respond_text(connection, MHD_HTTP_NOT_FOUND, "Not found");
	if (marker == &http_target_too_long)
		return http_respond_lean_json(connection, MHD_HTTP_URI_TOO_LONG, http_target_too_long_body);
	if (http_request_text_bytes(connection, slot) > server->connection_memory / 3)
	{
		char		body[HTTP_HEADERS_TOO_LARGE_BODY_MAX];

		/* its answer's headers might not fit beside it: said now, not a silent close */
		http_headers_too_large_body(server, body, sizeof(body));
		return http_respond_lean_json(connection, MHD_HTTP_REQUEST_HEADER_FIELDS_TOO_LARGE, body);
	}
	if (marker == &http_too_many_args)
		return http_respond_json(connection, MHD_HTTP_BAD_REQUEST,
								 "{\"message\":\"Invalid request\",\"errors\":{\"query\":"
								 "[\"The request has too many query parameters\"]}}", false);
	rules = access_policy_rules(&server->access);
	if (route != ROUTE_METRICS && route != ROUTE_ROOT && route != ROUTE_SHAPE)
	{
		*con_cls = &http_plain_request;
		return MHD_YES;
	}
	http_identify_client(connection, rules, &client);
	if (route == ROUTE_METRICS || route == ROUTE_ROOT)
	{
		/* the same rules as shapes: the secret when one is set (/ shows what /metrics does) */
		verdict = http_check_access(server, connection, rules, &client, true);
		if (verdict != ACCESS_ALLOWED)
			return http_respond_refused(server, connection, rules, verdict);
	}
	if (route != ROUTE_SHAPE)
	{
		*con_cls = &http_plain_request;
		return MHD_YES;
	}

	/* every method on the shape route, the preflight without the secret */
	verdict = http_check_access(server, connection, rules, &client, !is_options);
	if (verdict != ACCESS_ALLOWED)
		return http_respond_refused(server, connection, rules, verdict);

	if (!(is_get || is_head || is_post ||
		  (is_delete && atomic_load(&server->allow_shape_deletion))))
	{
		*con_cls = &http_plain_request;
		return MHD_YES;
	}
	sc = calloc(1, sizeof(ShapeConn));
	if (sc == NULL)
		return MHD_NO;
	sc->server = server;
	sc->connection = connection;
	sc->conn_slot = slot != NULL ? (uint32_t) (slot - server->conns.slots) : CONN_NO_SLOT;
	sc->waiter.conn_slot = sc->conn_slot;
	sc->admitted = ADMISSION_NONE;
	atomic_fetch_add(&server->unanswered, 1);
	sc->waiter.connection = connection;
	sc->head_only = is_head;
	sc->delete_shape = is_delete;
	sc->post = is_post;
	sc->client_key = client.key;
	sc->request.owner = sc;
	sc->request.result.slot = SHAPE_NO_SLOT;
	*con_cls = sc;
	return MHD_YES;
}

enum MHD_Result
http_access(void *cls, struct MHD_Connection *connection, const char *url,
			const char *method, const char *version, const char *upload_data,
			size_t *upload_data_size, void **con_cls)
{
	HttpServer *server = cls;
	HttpRoute	route;

	http_serving_begin(server, http_conn_slot_no(server, connection));
	if (*con_cls == NULL || http_is_target_marker(*con_cls))
	{
		enum MHD_Result ret = http_begin_request(server, connection, url, method,
												 con_cls);

		/* answered at once: nothing more of this request will be read */
		if (*con_cls == &http_answered)
			conn_request_clear(&server->conns, http_conn_slot_no(server, connection));
		return ret;
	}

	/* a POST's body is a subset query's; other routes' bodies are discarded */
	if (*upload_data_size != 0 || *con_cls == &http_answered)
	{
		if (*con_cls != &http_answered && *con_cls != &http_plain_request)
			subset_take_body((ShapeConn *) *con_cls, upload_data, *upload_data_size);
		*upload_data_size = 0;
		return MHD_YES;
	}

	/* the whole request is in: its deadline ends (again, when resumed) */
	conn_request_clear(&server->conns, http_conn_slot_no(server, connection));

	if (*con_cls != &http_plain_request)
		return shape_serve(server, connection, (ShapeConn *) *con_cls);

	route = http_route(url);
	if (route == ROUTE_SHAPE)
	{
		if (strcmp(method, MHD_HTTP_METHOD_OPTIONS) == 0)
			return http_respond_preflight(connection);
		if (strcmp(method, MHD_HTTP_METHOD_DELETE) == 0)
			return http_respond_json(connection, MHD_HTTP_METHOD_NOT_ALLOWED,
									 "{\"message\":\"DELETE not allowed\"}", true);
		return http_respond_json(connection, MHD_HTTP_METHOD_NOT_ALLOWED,
								 "{\"message\":\"method not allowed\"}", true);
	}
	if (route == ROUTE_HEALTH &&
		(strcmp(method, MHD_HTTP_METHOD_GET) == 0 || strcmp(method, MHD_HTTP_METHOD_HEAD) == 0))
	{
		struct MHD_Response *response;
		static const char body[] = "{\"status\":\"active\"}";
		enum MHD_Result ret;

		response = MHD_create_response_from_buffer(sizeof(body) - 1, (void *) body,
												   MHD_RESPMEM_PERSISTENT);
		if (response == NULL)
			return MHD_NO;
		MHD_add_response_header(response, "content-type", "application/json; charset=utf-8");
		MHD_add_response_header(response, "cache-control",
								"no-cache, no-store, must-revalidate");
		MHD_add_response_header(response, "electric-server", SERVER_NAME);
		ret = http_queue(connection, MHD_HTTP_OK, response, sizeof(body) - 1);
		MHD_destroy_response(response);
		return ret;
	}
	/* HEAD: the same response, whose body libmicrohttpd leaves out */
	if (route == ROUTE_METRICS &&
		(strcmp(method, MHD_HTTP_METHOD_GET) == 0 || strcmp(method, MHD_HTTP_METHOD_HEAD) == 0))
		return http_respond_metrics(connection);
	if (route == ROUTE_ROOT &&
		(strcmp(method, MHD_HTTP_METHOD_GET) == 0 || strcmp(method, MHD_HTTP_METHOD_HEAD) == 0))
		return http_respond_status_page(connection);
	return http_respond_text(connection, MHD_HTTP_NOT_FOUND, "Not found");
}

/*
 * A request ended, however it ended.  A connection kept alive now waits for
 * its next request: its request deadline starts again.  (One that closes
 * instead frees its slot just after, on this same thread.)
 */
void
http_completed(void *cls, struct MHD_Connection *connection, void **con_cls,
			   enum MHD_RequestTerminationCode toe)
{
	HttpServer *server = cls;
	ConnSlot   *slot = http_conn_slot(server, connection);

	/* a 431 that libmicrohttpd had no room to head (http_request_text_bytes) */
	if (toe == MHD_REQUEST_TERMINATED_WITH_ERROR && slot != NULL &&
		slot->req_status == MHD_HTTP_REQUEST_HEADER_FIELDS_TOO_LARGE)
		http_send_431_by_hand(server, connection);
	if (http_owns_shape_conn(*con_cls))
		shape_conn_free((ShapeConn *) *con_cls);
	*con_cls = NULL;
	if (slot != NULL)
	{
		uint32_t	slot_no = (uint32_t) (slot - server->conns.slots);

		http_count_request(slot);
		conn_set_activity(&server->conns, slot_no, CONN_ACTIVITY_IDLE);
		conn_request_arm(&server->conns, slot_no);
	}
}

/*
 * A TCP connection starts or closes: it holds a ConnTable slot in between,
 * kept in its socket context (index + 1).  CLOSED runs before the socket
 * is closed, so no other thread can act on a reused socket number.
 */
void
http_connection_event(void *cls, struct MHD_Connection *connection,
					  void **socket_context, enum MHD_ConnectionNotificationCode toe)
{
	HttpServer *server = cls;

	if (toe == MHD_CONNECTION_NOTIFY_STARTED)
		sm_gauge_add(SM_HTTP_CONNECTIONS_OPEN, 0, 1);
	else
		sm_gauge_add(SM_HTTP_CONNECTIONS_OPEN, 0, -1);
	if (toe == MHD_CONNECTION_NOTIFY_STARTED)
	{
		const union MHD_ConnectionInfo *fd_info =
			MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
		const union MHD_ConnectionInfo *addr_info =
			MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
		char		peer[CONN_PEER_LEN] = "?";
		uint32_t	slot;

		if (addr_info && addr_info->client_addr)
		{
			const struct sockaddr *sa = addr_info->client_addr;
			char		host[INET6_ADDRSTRLEN] = "?";

			if (sa->sa_family == AF_INET6)
			{
				inet_ntop(AF_INET6, &((const struct sockaddr_in6 *) sa)->sin6_addr, host, sizeof(host));
				snprintf(peer, sizeof(peer), "[%s]:%u", host,
						 ntohs(((const struct sockaddr_in6 *) sa)->sin6_port));
			}
			else if (sa->sa_family == AF_INET)
			{
				inet_ntop(AF_INET, &((const struct sockaddr_in *) sa)->sin_addr, host, sizeof(host));
				snprintf(peer, sizeof(peer), "%s:%u", host,
						 ntohs(((const struct sockaddr_in *) sa)->sin_port));
			}
		}
		if (fd_info == NULL)
			return;
		http_bound_send_buffer(server, fd_info->connect_fd);
		slot = conn_table_open(&server->conns, fd_info->connect_fd, peer);
		if (slot != CONN_NO_SLOT)
		{
			*socket_context = (void *) (uintptr_t) (slot + 1);
			waiters_watch(&server->waiters, slot);
		}
		else
		{
			/* past the limit: answered 503 once its request is in (http_access) */
			atomic_fetch_add(&server->over_limit, 1);
			sm_add(SM_HTTP_CONNECTIONS_REFUSED, 0, 1);
			*socket_context = &http_over_limit;
			MHD_set_connection_option(connection, MHD_CONNECTION_OPTION_TIMEOUT,
									  (unsigned int) OVER_LIMIT_TIMEOUT_S);
		}
	}
	else if (*socket_context == &http_over_limit)
	{
		atomic_fetch_sub(&server->over_limit, 1);
		*socket_context = NULL;
	}
	else if (*socket_context != NULL)
	{
		uint32_t	slot = (uint32_t) ((uintptr_t) *socket_context - 1);

		resolved_shape_free(&server->conns.slots[slot].resolved);
		conn_table_close(&server->conns, slot);
		atomic_fetch_add_explicit(&server->freed_bytes, server->connection_memory,
								  memory_order_relaxed);
		*socket_context = NULL;
	}
}
