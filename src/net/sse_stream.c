/*-------------------------------------------------------------------------
 *
 * sse_stream.c
 *		live_sse=true: a shape's changes as Server-Sent Events.
 *
 * This file runs on libmicrohttpd threads and must not call into
 * PostgreSQL.
 *
 * Each message goes out as one event, "data: <json>\n\n", and a batch
 * that reaches the end of the log is followed by an up-to-date event whose
 * global_last_seen_lsn is the batch's commit LSN plus one.  The client
 * resumes from "<global_last_seen_lsn>_0", and reads are exclusive of the
 * offset: from "<commit LSN>_0", as Electric sends it, a stream that
 * reconnects (a requestSnapshot pauses it, for one) gets every op of the
 * last transaction but the first again.  No transaction commits at the LSN
 * one past another's commit record, so "<commit LSN + 1>_0" is past all of
 * that transaction and before the next.  When the request finds data waiting, the stream carries all
 * of it, chunk after chunk, to the end of the log and ends there, as
 * Electric does.  Otherwise the stream stays open for
 * SSE_TIMEOUT_MS: the content reader parks the connection on the shape's
 * wait list (waiters.c) whenever it has sent everything, and resumes
 * sending when the log grows; a ": keep-alive" comment goes out after
 * SSE_KEEPALIVE_MS without an event.  A rotated shape ends the stream, and
 * the client's next request gets the 409.
 *
 * Framing never copies a record: "data: " and "\n\n" are queued around the
 * record's bytes, which go straight from shared memory into the socket
 * buffer, whole when they fit in a piece.
 *
 * IDENTIFICATION
 *	  src/net/sse_stream.c
 *
 *-------------------------------------------------------------------------
 */
#include "sse_stream.h"

#include <stdio.h>
#include <string.h>

#include "http_respond.h"
#include "shape_answer.h"

#ifdef POSTGRES_H
#error "sse_stream.c runs on HTTP threads and must not include postgres.h"
#endif

#define SSE_TIMEOUT_MS		60000
#define SSE_KEEPALIVE_MS	21000

static void
sse_queue(SseStream *st, const char *text)
{
	size_t		len = strlen(text);

	if (st->pending_off == st->pending_len)
		st->pending_off = st->pending_len = 0;
	if (st->pending_len + len > sizeof(st->pending))
		len = sizeof(st->pending) - st->pending_len;	/* cannot happen: events are small */
	memcpy(st->pending + st->pending_len, text, len);
	st->pending_len += len;
}

/* Picks up what the log has past `after`; false when there is nothing. */
static bool
sse_next_range(ShapeConn *sc)
{
	SseStream  *st = &sc->sse;
	ShapeTable *shapes = sc->server->shapes;
	uint32_t	slot = sc->request.result.slot;
	ShapeState	state = shape_table_state(shapes, slot);
	SlogPublished pub;
	SlogRange	range;
	const ShapeLog *log;

	if (state == SHAPE_RETIRED || state == SHAPE_FAILED)
	{
		st->finished = true;
		return false;
	}
	log = shape_conn_pin_log(sc);
	st->seen_lsn = shape_table_seen_lsn(shapes);	/* before the range: see shape_table.c */
	slog_read_published(log, &pub);
	slog_locate(shapes->arena, log, &pub, st->after, &range);
	if (range.failed)
	{
		/* its file could not be read: the client comes back, and is told */
		shape_note_unreadable_log(log, range.error);
		shape_conn_unpin_log(sc);
		st->finished = true;
		return false;
	}
	if (!range.ready || range.start >= range.end)
	{
		shape_conn_unpin_log(sc);	/* a waiting stream holds no version */
		return false;
	}
	slog_cursor_init(shapes->arena, log, &st->records, range.start, range.end, st->after);
	st->in_range = true;
	st->range_end = range.chunk_end;
	/* the end of the log, and the snapshot's stitching done (ss_take_over) */
	st->range_up_to_date = (pub.flags & SLOG_SNAPSHOT_DONE) &&
		log_offset_cmp(range.chunk_end, pub.last) >= 0;
	if (st->parked)
	{
		/* a held stream waited for this: how long since it reached the log */
		int64_t		published = atomic_load_explicit(&shapes->slots[slot].published_us,
													 memory_order_relaxed);
		int64_t		now = http_monotonic_us();

		if (published > 0 && now >= published)
			sm_observe(SM_LOG_TO_CLIENT_SECONDS, 1, (double) (now - published) / 1e6);
		st->parked = false;
	}
	return true;
}

static bool
sse_has_news(void *arg)
{
	ShapeConn  *sc = arg;

	return sse_next_range(sc) || sc->sse.finished;
}

static ssize_t sse_fill(ShapeConn *sc, char *buf, size_t max);

/* libmicrohttpd's content reader for an event stream. */
static ssize_t
sse_reader(void *cls, uint64_t offset, char *buf, size_t max)
{
	ShapeConn  *sc = cls;

	if (sc->waiter.client_gone)
	{
		http_closing_on_purpose = true;
		return MHD_CONTENT_READER_END_WITH_ERROR;
	}
	return http_next_piece(sc, sse_fill, buf, max);
}

static ssize_t
sse_fill(ShapeConn *sc, char *buf, size_t max)
{
	SseStream  *st = &sc->sse;
	HttpServer *server = sc->server;
	const ShapeLogArena *arena = server->shapes->arena;
	size_t		limit = max < server->write_piece_size ? max : server->write_piece_size;
	size_t		n = 0;

	for (;;)
	{
		if (st->records.failed)
		{
			shape_note_unreadable_log(shape_conn_log(sc), st->records.error);
			return MHD_CONTENT_READER_END_WITH_ERROR;	/* an event is cut */
		}
		if (st->pending_off < st->pending_len)
		{
			n += http_copy_some(buf + n, limit - n, st->pending, st->pending_len,
								&st->pending_off);
			if (n == limit)
				return (ssize_t) n;
			continue;
		}
		if (st->records.in_record)
		{
			/* the version sse_next_range pinned: it may change between ranges */
			n += slog_cursor_copy(arena, shape_conn_log(sc), &st->records, buf + n, limit - n);
			if (st->records.in_record)
				return (ssize_t) n;
			sse_queue(st, "\n\n");
			continue;
		}
		if (slog_cursor_more(&st->records))
		{
			if (n > 0 && slog_cursor_peek(arena, shape_conn_log(sc), &st->records) + 8 > limit - n)
				return (ssize_t) n;		/* whole events per piece when they fit */
			sse_queue(st, "data: ");
			slog_cursor_begin(arena, shape_conn_log(sc), &st->records);
			continue;
		}
		if (st->in_range)
		{
			/* the range is out: up-to-date if it reached the end of the log */
			st->after = st->range_end;
			st->in_range = false;
			st->keepalive_ms = waiters_now_ms() + SSE_KEEPALIVE_MS;
			if (st->range_up_to_date)
			{
				char		event[160];
				/*
				 * The client resumes from "<lsn>_0" (see the header): past
				 * the range's last transaction.  For a range that ends in
				 * the snapshot, the shape has no change up to what was seen
				 * before the range was located; that may be the end of the
				 * WAL, where the next commit may start, so one before it
				 * (records start 8-byte aligned: no commit is there), and
				 * at least 1, past every snapshot offset (0_k).
				 */
				uint64_t	lsn = st->range_end.tx > 0 ? (uint64_t) st->range_end.tx + 1 :
					st->seen_lsn > 1 ? st->seen_lsn - 1 : 1;

				snprintf(event, sizeof(event),
						 "data: {\"headers\":{\"control\":\"up-to-date\","
						 "\"global_last_seen_lsn\":\"%llu\"}}\n\n",
						 (unsigned long long) lsn);
				sse_queue(st, event);
			}
			/* a backlog longer than a chunk goes on to the end of the log */
			if (!st->hold && st->range_up_to_date)
				st->finished = true;
			continue;
		}
		if (st->finished)
			return n > 0 ? (ssize_t) n : MHD_CONTENT_READER_END_OF_STREAM;
		if (n > 0)
			return (ssize_t) n;	/* send what is ready before waiting */
		if (sse_next_range(sc) || st->finished)
			continue;

		{
			int64_t		now = waiters_now_ms();
			bool		timed_out = sc->waiter.timed_out;

			sc->waiter.timed_out = false;
			if (now >= st->end_ms)
			{
				st->finished = true;
				continue;
			}
			if (timed_out && now >= st->keepalive_ms)
			{
				sse_queue(st, ": keep-alive\n\n");
				st->keepalive_ms = now + SSE_KEEPALIVE_MS;
				continue;
			}
			sc->waiter.connection = sc->connection;
			if (waiters_park(&server->waiters, &sc->waiter, sc->request.result.slot,
							 st->keepalive_ms < st->end_ms ? st->keepalive_ms : st->end_ms,
							 sse_has_news, sc))
			{
				st->parked = true;
				return 0;		/* suspended: called again once resumed */
			}
			if (sc->waiter.client_gone)
			{
				/* the client left before it could park: close */
				http_closing_on_purpose = true;
				return MHD_CONTENT_READER_END_WITH_ERROR;
			}
			if (atomic_load(&server->waiters.stopping))
				st->finished = true;
		}
	}
}

/*
 * Starts an SSE response.  With `hold`, the stream stays open for new
 * changes; otherwise it carries `range` and ends.
 */
enum MHD_Result
sse_respond(ShapeConn *sc, const SlogPublished *pub, const SlogRange *range, bool hold,
			const char *cursor)
{
	SseStream  *st = &sc->sse;
	struct MHD_Response *response;
	enum MHD_Result ret;
	char		offset_text[LOG_OFFSET_TEXT_LEN];
	int64_t		now = waiters_now_ms();

	memset(st, 0, sizeof(*st));
	st->seen_lsn = sc->seen_lsn;	/* the caller's range was located after it */
	st->hold = hold;
	st->after = sc->query.offset;
	st->end_ms = now + SSE_TIMEOUT_MS;
	st->keepalive_ms = now + SSE_KEEPALIVE_MS;
	if (range->ready && range->start < range->end)
	{
		slog_cursor_init(sc->server->shapes->arena, shape_conn_log(sc), &st->records, range->start,
						 range->end, st->after);
		if (st->records.failed)
			return shape_respond_unreadable(sc, shape_conn_log(sc), st->records.error);
		st->in_range = true;
		st->range_end = range->chunk_end;
		st->range_up_to_date = (pub->flags & SLOG_SNAPSHOT_DONE) &&
			log_offset_cmp(range->chunk_end, pub->last) >= 0;
	}
	/*
	 * The stream's own up-to-date events move the client on; the header
	 * names where it started, so that a stream cut short resumes from there.
	 */
	log_offset_format(sc->query.offset, offset_text, sizeof(offset_text));

	shape_conn_responded(sc);
	if (sc->head_only)
		response = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
	else
		response = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 32 * 1024,
													 sse_reader, sc, NULL);
	if (response == NULL)
		return MHD_NO;
	MHD_add_response_header(response, "content-type", "text/event-stream");
	MHD_add_response_header(response, "cache-control", "public, max-age=59");
	/* a proxy in front passes each event on at once (nginx honours it) */
	MHD_add_response_header(response, "x-accel-buffering", "no");
	MHD_add_response_header(response, "electric-server", SERVER_NAME);
	MHD_add_response_header(response, "electric-handle", sc->request.result.handle);
	MHD_add_response_header(response, "electric-offset", offset_text);
	MHD_add_response_header(response, "electric-cursor", cursor);
	MHD_add_response_header(response, "electric-has-data", st->in_range ? "true" : "false");
	http_add_cors_headers(response, sc->connection);
	ret = http_queue(sc->connection, MHD_HTTP_OK, response, 0);
	conn_set_activity(&sc->server->conns, sc->conn_slot, CONN_ACTIVITY_SSE);
	MHD_destroy_response(response);
	return ret;
}
