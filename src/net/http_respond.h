/*-------------------------------------------------------------------------
 *
 * http_respond.h
 *		Queueing, counting and heading the responses of every route.
 *
 * IDENTIFICATION
 *	  src/net/http_respond.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef HTTP_RESPOND_H
#define HTTP_RESPOND_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include <microhttpd.h>

#include "http_conn.h"

/* A handler begins: its responses on this thread are for conn_slot. */
extern void http_serving_begin(HttpServer *server, uint32_t conn_slot);

/* Every response is queued, and noted, through this. */
extern enum MHD_Result http_queue(struct MHD_Connection *connection, unsigned status,
								  struct MHD_Response *response, uint64_t buffer_bytes);
extern void http_note_response(unsigned status, uint64_t buffer_bytes);
extern void http_note_kind(HttpServer *server, uint32_t conn_slot, SmKind kind);
extern void http_note_sent(HttpServer *server, uint32_t conn_slot, size_t n);

/* Responses common to every route. */
extern void http_add_cors_headers(struct MHD_Response *response,
								  struct MHD_Connection *connection);
extern enum MHD_Result http_respond_json(struct MHD_Connection *connection,
										 unsigned status, const char *body,
										 bool cors);
extern enum MHD_Result http_respond_lean_json(struct MHD_Connection *connection,
											  unsigned status, const char *body);
extern enum MHD_Result http_respond_text(struct MHD_Connection *connection,
										 unsigned status, const char *text);

/*
 * Every response body goes through this: libmicrohttpd asks for the next
 * piece only once the previous one reached the kernel, so the write
 * deadline (deadline.c) is cleared on entry and armed when a piece is
 * handed over.
 */
static inline ssize_t
http_next_piece(ShapeConn *sc, ssize_t (*fill) (ShapeConn *sc, char *buf, size_t max),
				char *buf, size_t max)
{
	ssize_t		n;

	conn_deadline_clear(&sc->server->conns, sc->conn_slot);
	n = fill(sc, buf, max);
	if (n > 0)
	{
		conn_deadline_arm(&sc->server->conns, sc->conn_slot);
		http_note_sent(sc->server, sc->conn_slot, (size_t) n);
	}
	return n;
}

/* Copies what fits of src[*off, len) into dst (room bytes); returns the count. */
static inline size_t
http_copy_some(char *dst, size_t room, const char *src, size_t len, size_t *off)
{
	size_t		step = len - *off;

	if (step > room)
		step = room;
	memcpy(dst, src + *off, step);
	*off += step;
	return step;
}

/*
 * Set by a handler that ends a connection on purpose (its client left while
 * parked) just before it tells libmicrohttpd to close: libmicrohttpd then
 * logs the close as an application error, on the same thread, and
 * http_mhd_log drops that one line.  A client leaving is not an error.
 */
extern _Thread_local bool http_closing_on_purpose;

#endif							/* HTTP_RESPOND_H */
