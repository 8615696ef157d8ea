/*-------------------------------------------------------------------------
 *
 * http_respond.c
 *		How every response of the server is queued, counted and headed.
 *
 * This file runs on libmicrohttpd threads and must not call into
 * PostgreSQL.
 *
 * Every route answers through http_queue, so each response's status and
 * size reach the request's metrics and the connection's ConnTable slot
 * (its activity for shape_sync.connections and the write deadline).  The
 * handler that runs on a thread names its connection once
 * (http_serving_begin); libmicrohttpd lets a response be queued only from
 * inside its handler, so every queue on that thread is for that
 * connection.  The JSON and text answers common to every route, and the
 * CORS headers, live here too; the shape route's own answers are in
 * shape_answer.c.
 *
 * Notes on synchronization
 * ------------------------
 * The state here is thread-local (the connection being served, and
 * http_closing_on_purpose); a ConnTable slot's request fields are written
 * only by the thread that serves its connection.
 *
 * IDENTIFICATION
 *	  src/net/http_respond.c
 *
 *-------------------------------------------------------------------------
 */
#include "http_respond.h"

#include <stdlib.h>
#include <string.h>

#include "server_metrics.h"

#ifdef POSTGRES_H
#error "http_respond.c runs on HTTP threads and must not include postgres.h"
#endif

_Thread_local bool http_closing_on_purpose = false;

static const char *const http_expose_headers =
"electric-cursor,electric-handle,electric-has-data,electric-offset,"
"electric-schema,electric-up-to-date,electric-internal-known-error,"
"retry-after";

/*
 * The connection whose handler runs on this thread now: libmicrohttpd
 * lets a response be queued only from inside its handler, so every queue
 * is for this connection (NULL: one without a ConnTable slot).
 */
static _Thread_local struct
{
	HttpServer *server;
	uint32_t	slot;			/* CONN_NO_SLOT: none */
}			http_serving = {NULL, CONN_NO_SLOT};

/* A handler begins on this thread: its responses are for this connection. */
void
http_serving_begin(HttpServer *server, uint32_t conn_slot)
{
	http_closing_on_purpose = false;
	http_serving.server = server;
	http_serving.slot = conn_slot;
}

/*
 * Every response goes through this: the status, and the body's size when
 * it is a buffer (a body produced piece by piece counts its pieces), are
 * noted for the request's metrics, counted when it ends (http_completed).
 */
void
http_note_response(unsigned status, uint64_t buffer_bytes)
{
	if (http_serving.slot != CONN_NO_SLOT)
	{
		ConnSlot   *slot = &http_serving.server->conns.slots[http_serving.slot];

		slot->req_status = (uint16_t) status;
		if (!slot->req_head)
			http_note_sent(http_serving.server, http_serving.slot, buffer_bytes);
	}
	if (status >= 400)
		sm_add(SM_ERRORS, sm_error_kind_of(status), 1);
}

enum MHD_Result
http_queue(struct MHD_Connection *connection, unsigned status,
		   struct MHD_Response *response, uint64_t buffer_bytes)
{
	enum MHD_Result ret = MHD_queue_response(connection, status, response);

	if (ret == MHD_YES)
		http_note_response(status, buffer_bytes);
	return ret;
}

/* A shape request says what kind it is, once it knows (shape_serve.c). */
void
http_note_kind(HttpServer *server, uint32_t conn_slot, SmKind kind)
{
	if (conn_slot != CONN_NO_SLOT)
		server->conns.slots[conn_slot].req_kind = (uint8_t) kind;
}

/* Response bytes handed over, piece by piece (http_next_piece). */
void
http_note_sent(HttpServer *server, uint32_t conn_slot, size_t n)
{
	if (conn_slot == CONN_NO_SLOT)
		return;
	server->conns.slots[conn_slot].req_bytes += n;
	conn_note_sent(&server->conns, conn_slot, n);
}

void
http_add_cors_headers(struct MHD_Response *response, struct MHD_Connection *connection)
{
	const char *origin = MHD_lookup_connection_value(connection, MHD_HEADER_KIND,
													 "Origin");

	MHD_add_response_header(response, "access-control-allow-origin",
							origin && origin[0] ? origin : "*");
	MHD_add_response_header(response, "access-control-expose-headers",
							http_expose_headers);
	MHD_add_response_header(response, "access-control-allow-methods",
							"GET, POST, HEAD, DELETE, OPTIONS");
	if (origin && origin[0])
		MHD_add_response_header(response, "vary", "origin");
}

/* Queues a JSON response; errors (>= 400) are never cached. */
enum MHD_Result
http_respond_json(struct MHD_Connection *connection, unsigned status,
				  const char *body, bool cors)
{
	struct MHD_Response *response;
	enum MHD_Result ret;

	if (body == NULL)
		body = "{\"error\":\"Internal server error\"}";
	response = MHD_create_response_from_buffer(strlen(body), (void *) body,
											   MHD_RESPMEM_MUST_COPY);
	if (response == NULL)
		return MHD_NO;
	MHD_add_response_header(response, "content-type", "application/json; charset=utf-8");
	MHD_add_response_header(response, "electric-server", SERVER_NAME);
	if (status >= 400)
	{
		MHD_add_response_header(response, "cache-control", "no-store");
		MHD_add_response_header(response, "surrogate-control", "no-store");
	}
	if (cors)
		http_add_cors_headers(response, connection);
	ret = http_queue(connection, status, response, strlen(body));
	MHD_destroy_response(response);
	return ret;
}

/*
 * A JSON answer with no header but its type, for a request that left
 * little of the connection's memory for the response's headers.
 */
enum MHD_Result
http_respond_lean_json(struct MHD_Connection *connection, unsigned status, const char *body)
{
	struct MHD_Response *response;
	enum MHD_Result ret;

	response = MHD_create_response_from_buffer(strlen(body), (void *) body,
											   MHD_RESPMEM_MUST_COPY);
	if (response == NULL)
		return MHD_NO;
	MHD_add_response_header(response, "content-type", "application/json");
	ret = http_queue(connection, status, response, strlen(body));
	MHD_destroy_response(response);
	return ret;
}

enum MHD_Result
http_respond_text(struct MHD_Connection *connection, unsigned status, const char *text)
{
	struct MHD_Response *response;
	enum MHD_Result ret;

	response = MHD_create_response_from_buffer(strlen(text), (void *) text,
											   MHD_RESPMEM_PERSISTENT);
	if (response == NULL)
		return MHD_NO;
	MHD_add_response_header(response, "content-type", "text/plain; charset=utf-8");
	MHD_add_response_header(response, "electric-server", SERVER_NAME);
	ret = http_queue(connection, status, response, strlen(text));
	MHD_destroy_response(response);
	return ret;
}

