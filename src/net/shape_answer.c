/*-------------------------------------------------------------------------
 *
 * shape_answer.c
 *		The answers of a shape request: errors, refusals, 409s, and the
 *		body of a 200 copied from the shape's log.
 *
 * This file runs on libmicrohttpd threads and must not call into
 * PostgreSQL.  shape_serve.c, sse_stream.c and subset_serve.c answer
 * through it.
 *
 * Every answer marks the request RESPONDED (shape_conn_responded).  A
 * refusal from the PostgreSQL side (a reason and its facts, refusal.h) is
 * rendered by refusal_render.c; the answers the threads decide themselves
 * (503 while stopping or after a snapshot wait, 409 must-refetch, the
 * answer to a deleted shape) are composed here.
 *
 * A request reads one version of its shape's log (a compaction swaps in a
 * new one): it pins that version before it locates a range and unpins it
 * when it completes (shape_conn_pin_log, shape_table_log_pin).
 *
 * The body of a 200 is "[" + the chunk's records joined by "," + an
 * optional up-to-date control message + "]", of a length measured before
 * it is sent (shape_body_response).  Records are copied straight from
 * shared memory into the response's buffer, never into libmicrohttpd's
 * per-connection pool; a piece holds whole messages, never more than
 * shape_sync.write_piece_size bytes, and only a single message larger than
 * a piece is split across pieces.  A small body is built whole instead,
 * into a buffer of its own (shape_body_build).
 *
 * IDENTIFICATION
 *	  src/net/shape_answer.c
 *
 *-------------------------------------------------------------------------
 */
#include "shape_answer.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http_respond.h"
#include "json_text.h"
#include "refusal_render.h"
#include "thread_log.h"

#ifdef POSTGRES_H
#error "shape_answer.c runs on HTTP threads and must not include postgres.h"
#endif

static const char must_refetch_body[] = "[{\"headers\":{\"control\":\"must-refetch\"}}]";

/* ------------------------------------------------------------- answers */

/* The request has its answer queued. */
void
shape_conn_responded(ShapeConn *sc)
{
	sc->phase = CONN_RESPONDED;
}

enum MHD_Result
shape_respond_error(ShapeConn *sc, unsigned status, const char *body, int retry_after)
{
	struct MHD_Response *response;
	enum MHD_Result ret;
	char		retry[16];

	shape_conn_responded(sc);
	if (status != MHD_HTTP_SERVICE_UNAVAILABLE)
		return http_respond_json(sc->connection, status, body, true);

	response = MHD_create_response_from_buffer(strlen(body), (void *) body,
											   MHD_RESPMEM_MUST_COPY);
	if (response == NULL)
		return MHD_NO;
	snprintf(retry, sizeof(retry), "%d", retry_after);
	MHD_add_response_header(response, "content-type", "application/json; charset=utf-8");
	MHD_add_response_header(response, "retry-after", retry);
	MHD_add_response_header(response, "cache-control", "no-store");
	MHD_add_response_header(response, "surrogate-control", "no-store");
	MHD_add_response_header(response, "electric-internal-known-error", "true");
	MHD_add_response_header(response, "electric-server", SERVER_NAME);
	http_add_cors_headers(response, sc->connection);
	ret = http_queue(sc->connection, status, response, strlen(body));
	MHD_destroy_response(response);
	return ret;
}

/*
 * A refusal, as refusal_render.c renders it; the refusal stays the
 * caller's.
 */
enum MHD_Result
shape_respond_refusal(ShapeConn *sc, const Refusal *refusal)
{
	RefusalAnswer answer;
	enum MHD_Result ret;

	if (!refusal_render(refusal, &answer))
		return MHD_NO;			/* out of memory: close */
	if (answer.must_refetch)
		return shape_respond_must_refetch(sc, NULL);
	ret = shape_respond_error(sc, answer.status, answer.body, (int) answer.retry_after_s);
	free(answer.body);
	return ret;
}

enum MHD_Result
shape_respond_unavailable(ShapeConn *sc, const char *message, int retry_after)
{
	char	   *body = json_message_body("message", message);
	enum MHD_Result ret = shape_respond_error(sc, MHD_HTTP_SERVICE_UNAVAILABLE,
											  body, retry_after);

	free(body);
	return ret;
}

/*
 * A shape log's bytes that left memory could not be read back from its
 * file (an I/O error, a file removed by hand): said once a minute at most,
 * since every reader of the shape meets it.
 */
void
shape_note_unreadable_log(const ShapeLog *log, int error)
{
	static _Atomic int64_t said_us;
	int64_t		now = http_monotonic_us();
	int64_t		last = atomic_load_explicit(&said_us, memory_order_relaxed);

	if (last != 0 && now - last < 60 * 1000000LL)
		return;
	if (!atomic_compare_exchange_strong(&said_us, &last, now))
		return;
	thread_log(THREAD_LOG_WARNING, "could not read file \"%s\": %s", log->file_path,
			   strerror(error));
}

/* 503: the part of the log a request needs could not be read from disk. */
enum MHD_Result
shape_respond_unreadable(ShapeConn *sc, const ShapeLog *log, int error)
{
	shape_note_unreadable_log(log, error);
	return shape_respond_unavailable(sc, "The shape's log could not be read from disk, "
									 "please retry", 1);
}

/* 409: the handle the client holds is gone; `handle` is its replacement. */
enum MHD_Result
shape_respond_must_refetch(ShapeConn *sc, const char *handle)
{
	struct MHD_Response *response;
	enum MHD_Result ret;

	shape_conn_responded(sc);
	response = MHD_create_response_from_buffer(sizeof(must_refetch_body) - 1,
											   (void *) must_refetch_body,
											   MHD_RESPMEM_PERSISTENT);
	if (response == NULL)
		return MHD_NO;
	MHD_add_response_header(response, "content-type", "application/json; charset=utf-8");
	MHD_add_response_header(response, "electric-server", SERVER_NAME);
	if (handle != NULL)
	{
		MHD_add_response_header(response, "electric-handle", handle);
		MHD_add_response_header(response, "cache-control",
								"public, max-age=60, must-revalidate");
	}
	else
		MHD_add_response_header(response, "cache-control",
								"public, max-age=1, must-revalidate");
	http_add_cors_headers(response, sc->connection);
	ret = http_queue(sc->connection, MHD_HTTP_CONFLICT, response, sizeof(must_refetch_body) - 1);
	MHD_destroy_response(response);
	return ret;
}

/* DELETE /v1/shape succeeded: 202, empty body. */
enum MHD_Result
shape_respond_deleted(ShapeConn *sc)
{
	struct MHD_Response *response;
	enum MHD_Result ret;

	shape_conn_responded(sc);
	response = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
	if (response == NULL)
		return MHD_NO;
	MHD_add_response_header(response, "cache-control", "no-cache");
	MHD_add_response_header(response, "electric-server", SERVER_NAME);
	http_add_cors_headers(response, sc->connection);
	ret = http_queue(sc->connection, MHD_HTTP_ACCEPTED, response, 0);
	MHD_destroy_response(response);
	return ret;
}

/* ------------------------------------------------------------ log pins */

/*
 * Pins the version of the shape's log served now, letting go of one that
 * compaction swapped out since; a range located in it stays valid until
 * the next call.  The request holds the slot.
 */
const ShapeLog *
shape_conn_pin_log(ShapeConn *sc)
{
	ShapeTable *shapes = sc->server->shapes;
	uint32_t	slot = sc->request.result.slot;

	if (sc->log_pinned)
	{
		if (atomic_load_explicit(&shapes->slots[slot].log_current, memory_order_acquire) ==
			sc->log_version)
			return &shapes->slots[slot].logs[sc->log_version];
		shape_conn_unpin_log(sc);
	}
	sc->log_pinned = true;
	return shape_table_log_pin(shapes, slot, &sc->log_version);
}

const ShapeLog *
shape_conn_log(const ShapeConn *sc)
{
	if (sc->request.subset != NULL)
		return &sc->server->subsets->cells[sc->request.subset->cell].log;
	return &sc->server->shapes->slots[sc->request.result.slot].logs[sc->log_version];
}

void
shape_conn_unpin_log(ShapeConn *sc)
{
	if (!sc->log_pinned)
		return;
	shape_table_log_unpin(sc->server->shapes, sc->request.result.slot, sc->log_version);
	sc->log_pinned = false;
}

/* ---------------------------------------------------------- body reader */

static ssize_t shape_body_fill(ShapeConn *sc, char *buf, size_t max);

/* libmicrohttpd's content reader for a JSON response. */
static ssize_t
shape_body_reader(void *cls, uint64_t offset, char *buf, size_t max)
{
	return http_next_piece(cls, shape_body_fill, buf, max);
}

/* Fills `buf` with the next piece of the body: "[", records, tail. */
static ssize_t
shape_body_fill(ShapeConn *sc, char *buf, size_t max)
{
	BodyCursor *b = &sc->body;
	const ShapeLogArena *arena = sc->server->shapes->arena;
	const ShapeLog *log = shape_conn_log(sc);
	size_t		limit = max < sc->server->write_piece_size ? max : sc->server->write_piece_size;
	size_t		n = 0;

	if (!b->opened && b->head == NULL && limit > 0)
	{
		buf[n++] = '[';
		b->opened = true;
	}
	else if (!b->opened && b->head != NULL)
	{
		n += http_copy_some(buf, limit, b->head, b->head_len, &b->head_off);
		b->opened = b->head_off == b->head_len;
		if (!b->opened)
			return (ssize_t) n;
	}
	while (n < limit)
	{
		if (b->records.in_record)
			n += slog_cursor_copy(arena, log, &b->records, buf + n, limit - n);
		else if (slog_cursor_more(&b->records))
		{
			n += slog_cursor_copy_messages(arena, log, &b->records, buf + n, limit - n, &b->any);
			if (!slog_cursor_more(&b->records))
				continue;
			if (n > 0)
				break;			/* whole messages per piece when they fit */
			/* a message larger than a piece: split */
			if (b->any)
				buf[n++] = ',';
			b->any = true;
			slog_cursor_begin(arena, log, &b->records);
		}
		else if (b->tail_off < b->tail_len)
			n += http_copy_some(buf + n, limit - n, b->tail, b->tail_len, &b->tail_off);
		else
			break;
	}
	if (b->records.failed)
	{
		shape_note_unreadable_log(log, b->records.error);
		return MHD_CONTENT_READER_END_WITH_ERROR;	/* the length cannot be kept */
	}
	if (n == 0)
		return MHD_CONTENT_READER_END_OF_STREAM;
	return (ssize_t) n;
}

/*
 * The body of a 200 as a response of known length, with a buffer of its
 * own: libmicrohttpd writes a body of unknown length (chunked) into the
 * connection's memory pool, which would then have to be a piece large, and
 * which it clears, so keeps resident, between requests.  The length is
 * measured first from the record headers of the range (the range is
 * fixed, and the pinned log version does not change under it).  A body of
 * up to a piece is copied whole here and goes out with the headers in one
 * write; its write deadline runs from now until the request completes.  A
 * longer one is copied a piece at a time by shape_body_reader into the
 * response's buffer of one piece.
 */
uint64_t
shape_body_measure(ShapeConn *sc)
{
	BodyCursor *b = &sc->body;
	uint64_t	messages = 0;
	uint64_t	bytes = 0;
	uint64_t	size = (b->head ? b->head_len : 1) + b->tail_len;

	if (!slog_cursor_more(&b->records))
		return size;
	if (!slog_cursor_measure(sc->server->shapes->arena, shape_conn_log(sc), &b->records,
							 &bytes, &messages))
		return SHAPE_BODY_UNREADABLE;	/* b->records says why */
	return size + bytes + messages - 1;
}

/* The whole body, malloc'd, of the length measured; NULL on failure. */
char *
shape_body_build(ShapeConn *sc, size_t size)
{
	BodyCursor *b = &sc->body;
	char	   *buf = malloc(size);
	size_t		n = 0;

	if (buf == NULL)
		return NULL;
	while (n < size)
	{
		ssize_t		step = shape_body_fill(sc, buf + n, size - n);

		if (step <= 0)
			break;
		n += (size_t) step;
	}
	if (b->records.failed)
	{
		free(buf);
		return NULL;			/* said by shape_body_fill */
	}
	if (n != size || slog_cursor_more(&b->records) || b->tail_off < b->tail_len)
	{
		thread_log(THREAD_LOG_WARNING, "a shape response measured %zu bytes and had %zu",
				   size, n);
		free(buf);
		return NULL;
	}
	return buf;
}

/* The response for a body of `size` bytes (shape_body_measure). */
struct MHD_Response *
shape_body_response(ShapeConn *sc, uint64_t size)
{
	char	   *buf;

	if (size > sc->server->write_piece_size)
	{
		sc->body_buffer = sc->server->write_piece_size;
		return MHD_create_response_from_callback(size, sc->server->write_piece_size,
												 shape_body_reader, sc, NULL);
	}
	sc->body_buffer = size;
	buf = shape_body_build(sc, (size_t) size);
	if (buf == NULL)
		return NULL;
	conn_deadline_arm(&sc->server->conns, sc->conn_slot);
	return MHD_create_response_from_buffer(size, buf, MHD_RESPMEM_MUST_FREE);
}
