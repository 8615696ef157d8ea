/*-------------------------------------------------------------------------
 *
 * shape_serve.c
 *		GET /v1/shape: from query parameters to a streamed shape response.
 *
 * This file runs on libmicrohttpd threads and must not call into
 * PostgreSQL.
 *
 * A request goes through these phases (ShapeConnPhase):
 *
 *	NEW        parse and validate the parameters; hand the definition to
 *	           the main thread and suspend (RESOLVING)
 *	RESOLVING  resumed with the main thread's answer: an error, or the
 *	           shape's (slot, generation, handle); pin the shape's log
 *	RESOLVED   find the chunk to send; if the snapshot has not produced it
 *	           yet, park on the shape's wait list (WAITING) until the
 *	           main thread says the log grew
 *	RESPONDED  a response is queued; the body is copied from the shared
 *	           log, piece by piece, by shape_body_reader
 *
 * The body of a 200 is "[" + the chunk's records joined by "," + an
 * optional up-to-date control message + "]".  Records are copied straight
 * from shared memory into libmicrohttpd's write buffer; a piece holds whole
 * messages, never more than shape_sync.write_piece_size bytes, and only a
 * single message larger than a piece is split across pieces.
 *
 * IDENTIFICATION
 *	  src/net/shape_serve.c
 *
 *-------------------------------------------------------------------------
 */
#ifdef POSTGRES_H
#error "shape_serve.c runs on HTTP threads and must not include postgres.h"
#endif

#include "http_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "json_text.h"

#define CACHE_CONTROL_INITIAL \
	"public, max-age=604800, s-maxage=3600, stale-while-revalidate=2629746"

static const char must_refetch_body[] = "[{\"headers\":{\"control\":\"must-refetch\"}}]";

/* ------------------------------------------------------------- helpers */

static enum MHD_Result
shape_respond_error(ShapeConn *sc, unsigned status, const char *body, int retry_after)
{
	struct MHD_Response *response;
	enum MHD_Result ret;
	char		retry[16];

	sc->phase = CONN_RESPONDED;
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
	ret = MHD_queue_response(sc->connection, status, response);
	MHD_destroy_response(response);
	return ret;
}

static enum MHD_Result
shape_respond_unavailable(ShapeConn *sc, const char *message, int retry_after)
{
	char	   *body = json_message_body("message", message);
	enum MHD_Result ret = shape_respond_error(sc, MHD_HTTP_SERVICE_UNAVAILABLE,
											  body, retry_after);

	free(body);
	return ret;
}

/* 409: the handle the client holds is gone; `handle` is its replacement. */
static enum MHD_Result
shape_respond_must_refetch(ShapeConn *sc, const char *handle)
{
	struct MHD_Response *response;
	enum MHD_Result ret;

	sc->phase = CONN_RESPONDED;
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
	ret = MHD_queue_response(sc->connection, MHD_HTTP_CONFLICT, response);
	MHD_destroy_response(response);
	return ret;
}

/* Whether an If-None-Match list names `etag` (quotes optional). */
static bool
etag_matches(const char *if_none_match, const char *etag)
{
	size_t		etag_len = strlen(etag) - 2;	/* without its quotes */
	const char *p = if_none_match;

	while (*p)
	{
		const char *start;
		const char *end;

		while (*p == ' ' || *p == ',')
			p++;
		start = p;
		while (*p && *p != ',')
			p++;
		end = p;
		while (end > start && end[-1] == ' ')
			end--;
		if (end - start >= 2 && *start == '"' && end[-1] == '"')
		{
			start++;
			end--;
		}
		if ((size_t) (end - start) == etag_len && memcmp(start, etag + 1, etag_len) == 0)
			return true;
	}
	return false;
}

static int64_t
monotonic_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* ---------------------------------------------------------- body reader */

/*
 * libmicrohttpd's content reader: fills `buf` with the next piece of the
 * body.  It is called again only once the previous piece reached the
 * kernel, so the pieces are the socket writes.
 */
static ssize_t
shape_body_reader(void *cls, uint64_t offset, char *buf, size_t max)
{
	ShapeConn  *sc = cls;
	BodyCursor *b = &sc->body;
	const ShapeLogArena *arena = sc->server->shapes->arena;
	const ShapeLog *log = &sc->server->shapes->slots[sc->request.result.slot].log;
	size_t		limit = max < sc->server->write_piece_size ? max : sc->server->write_piece_size;
	size_t		n = 0;

	if (!b->opened && limit > 0)
	{
		buf[n++] = '[';
		b->opened = true;
	}
	while (n < limit)
	{
		if (b->in_record)
		{
			size_t		step = b->rec_len - b->rec_sent;

			if (step > limit - n)
				step = limit - n;
			slog_copy_out(arena, log, b->pos + sizeof(SlogRecordHeader) + b->rec_sent,
						  buf + n, step);
			n += step;
			b->rec_sent += (uint32_t) step;
			if (b->rec_sent == b->rec_len)
			{
				b->pos += slog_record_span(b->rec_len);
				b->in_record = false;
			}
		}
		else if (b->pos < b->end)
		{
			SlogRecordHeader hdr;
			size_t		need;

			slog_read_header(arena, log, b->pos, &hdr);
			need = hdr.len + (b->any ? 1 : 0);
			if (need > limit - n && n > 0)
				break;			/* whole messages per piece when they fit */
			if (b->any)
				buf[n++] = ',';
			b->any = true;
			b->in_record = true;
			b->rec_len = hdr.len;
			b->rec_sent = 0;
		}
		else if (b->tail_off < b->tail_len)
		{
			size_t		step = b->tail_len - b->tail_off;

			if (step > limit - n)
				step = limit - n;
			memcpy(buf + n, b->tail + b->tail_off, step);
			n += step;
			b->tail_off += step;
		}
		else
			break;
	}
	if (n == 0)
		return MHD_CONTENT_READER_END_OF_STREAM;
	return (ssize_t) n;
}

/* ------------------------------------------------------------ responses */

static enum MHD_Result
shape_respond(ShapeConn *sc, const SlogPublished *pub, const SlogRange *range)
{
	HttpServer *server = sc->server;
	ShapeResolution *res = &sc->request.result;
	LogOffset	requested = sc->query.offset;
	bool		now = sc->query.offset_now;
	LogOffset	response_offset = now ? pub->last : range->chunk_end;
	bool		up_to_date;
	uint64_t	lsn;
	char		req_text[LOG_OFFSET_TEXT_LEN];
	char		resp_text[LOG_OFFSET_TEXT_LEN];
	char		etag[SHAPE_HANDLE_LEN + 2 * LOG_OFFSET_TEXT_LEN + 32];
	char		cache[128];
	const char *inm;
	struct MHD_Response *response;
	enum MHD_Result ret;
	bool		not_modified;

	up_to_date = now ||
		(!log_offset_is_before_all(requested) &&
		 (pub->flags & SLOG_SNAPSHOT_DONE) &&
		 log_offset_cmp(response_offset, log_offset_max(pub->last, requested)) >= 0);

	if (now)
		strcpy(req_text, "now");
	else
		log_offset_format(requested, req_text, sizeof(req_text));
	log_offset_format(response_offset, resp_text, sizeof(resp_text));
	if (now)
		snprintf(etag, sizeof(etag), "\"%s:%s:%s:%lld\"", res->handle, req_text,
				 resp_text, (long long) monotonic_us());
	else
		snprintf(etag, sizeof(etag), "\"%s:%s:%s\"", res->handle, req_text, resp_text);

	if (log_offset_is_before_all(requested) && !now)
		snprintf(cache, sizeof(cache), CACHE_CONTROL_INITIAL);
	else
		snprintf(cache, sizeof(cache), "public, max-age=%d, stale-while-revalidate=%d",
				 atomic_load(&server->cache_max_age), atomic_load(&server->cache_stale_age));

	inm = MHD_lookup_connection_value(sc->connection, MHD_HEADER_KIND, "If-None-Match");
	not_modified = inm != NULL && etag_matches(inm, etag);

	/* body: the records of the range, then up-to-date, then "]" */
	sc->body.pos = now ? 0 : range->start;
	sc->body.end = now ? 0 : range->end;
	lsn = atomic_load_explicit(&server->shapes->last_seen_lsn, memory_order_relaxed);
	if (response_offset.tx > 0 && (uint64_t) response_offset.tx > lsn)
		lsn = (uint64_t) response_offset.tx;
	if (up_to_date)
		sc->body.tail_len = (size_t) snprintf(sc->body.tail, sizeof(sc->body.tail),
											  "%s{\"headers\":{\"control\":\"up-to-date\","
											  "\"global_last_seen_lsn\":\"%llu\"}}]",
											  sc->body.pos < sc->body.end ? "," : "",
											  (unsigned long long) lsn);
	else
		sc->body.tail_len = (size_t) snprintf(sc->body.tail, sizeof(sc->body.tail), "]");

	sc->phase = CONN_RESPONDED;
	if (not_modified || sc->head_only)
		response = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
	else
		response = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 32 * 1024,
													 shape_body_reader, sc, NULL);
	if (response == NULL)
		return MHD_NO;
	MHD_add_response_header(response, "content-type", "application/json; charset=utf-8");
	MHD_add_response_header(response, "electric-server", SERVER_NAME);
	MHD_add_response_header(response, "electric-handle", res->handle);
	MHD_add_response_header(response, "electric-offset", resp_text);
	MHD_add_response_header(response, "electric-has-data", now ? "false" : "true");
	if (res->schema_json != NULL)
		MHD_add_response_header(response, "electric-schema", res->schema_json);
	if (up_to_date)
		MHD_add_response_header(response, "electric-up-to-date", "");
	MHD_add_response_header(response, "etag", etag);
	MHD_add_response_header(response, "cache-control", cache);
	http_add_cors_headers(response, sc->connection);
	ret = MHD_queue_response(sc->connection,
							 not_modified ? MHD_HTTP_NOT_MODIFIED : MHD_HTTP_OK,
							 response);
	MHD_destroy_response(response);
	return ret;
}

/*
 * Looks at the pinned shape.  Returns true when the request can be answered
 * now (with data, an error or a rotation), false when it must wait for the
 * log to grow.
 */
static bool
shape_ready(ShapeConn *sc, ShapeState *state, SlogPublished *pub, SlogRange *range)
{
	ShapeTable *shapes = sc->server->shapes;
	uint32_t	slot = sc->request.result.slot;

	*state = shape_table_state(shapes, slot);
	if (*state == SHAPE_FAILED || *state == SHAPE_RETIRED)
		return true;
	slog_read_published(&shapes->slots[slot].log, pub);
	if (sc->query.offset_now)
	{
		range->ready = (pub->flags & SLOG_SNAPSHOT_DONE) != 0;
		return range->ready;
	}
	slog_locate(shapes->arena, &shapes->slots[slot].log, pub, sc->query.offset, range);
	return range->ready;
}

static enum MHD_Result
shape_respond_or_wait(ShapeConn *sc)
{
	HttpServer *server = sc->server;
	ShapeSlot  *slot = &server->shapes->slots[sc->request.result.slot];
	ShapeWaitList *wl = &server->waits[sc->request.result.slot];
	ShapeState	state;
	SlogPublished pub;
	SlogRange	range;

	if (!shape_ready(sc, &state, &pub, &range))
	{
		pthread_mutex_lock(&wl->lock);
		/* re-check under the lock: a wakeup after this point finds us listed */
		if (!atomic_load(&server->stopping) && !shape_ready(sc, &state, &pub, &range))
		{
			sc->phase = CONN_WAITING;
			sc->wait_next = wl->head;
			wl->head = sc;
			MHD_suspend_connection(sc->connection);
			pthread_mutex_unlock(&wl->lock);
			return MHD_YES;
		}
		pthread_mutex_unlock(&wl->lock);
		if (atomic_load(&server->stopping))
			return shape_respond_unavailable(sc, "the server is shutting down", 5);
	}

	if (state == SHAPE_RETIRED)
		return shape_respond_must_refetch(sc, NULL);
	if (state == SHAPE_FAILED)
	{
		char	   *body = json_message_body("message", slot->error);
		unsigned	status = slot->error_status ? slot->error_status : 500;
		enum MHD_Result ret;

		ret = shape_respond_error(sc, status, body, 10);
		free(body);
		return ret;
	}
	if (range.beyond_end)
	{
		/* XXX: live replication will wait for the log to reach the offset */
		return shape_respond_error(sc, MHD_HTTP_BAD_REQUEST,
								   "{\"message\":\"Invalid request\",\"errors\":"
								   "{\"offset\":[\"out of bounds for this shape\"]}}", 0);
	}
	return shape_respond(sc, &pub, &range);
}

/* ------------------------------------------------------------ the phases */

/* Runs on the main thread: the answer is in, let the connection go on. */
static void
shape_request_done(ShapeRequest *req)
{
	ShapeConn  *sc = req->owner;

	MHD_resume_connection(sc->connection);
}

static enum MHD_Result
shape_collect_arg(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
	void	  **args = cls;

	shape_query_add(args[0], args[1], key, value);
	return MHD_YES;
}

static enum MHD_Result
shape_start(ShapeConn *sc)
{
	RequestErrors errs = {0};
	void	   *args[2] = {&sc->query, &errs};

	MHD_get_connection_values(sc->connection, MHD_GET_ARGUMENT_KIND, shape_collect_arg, args);
	shape_query_finish(&sc->query, &errs);
	if (errs.count > 0)
	{
		char	   *body = request_errors_json(&errs);
		enum MHD_Result ret = shape_respond_error(sc, MHD_HTTP_BAD_REQUEST, body, 0);

		free(body);
		return ret;
	}
	if (sc->query.subset)
		return shape_respond_error(sc, MHD_HTTP_BAD_REQUEST,
								   "{\"message\":\"Invalid request\",\"errors\":{\"subset\":"
								   "[\"subset snapshots are not supported by this server\"]}}", 0);
	if (sc->query.live)
		return shape_respond_error(sc, MHD_HTTP_BAD_REQUEST,
								   "{\"message\":\"Invalid request\",\"errors\":{\"live\":"
								   "[\"live mode is not available in this version of shape_sync; "
								   "only the initial snapshot can be fetched\"]}}", 0);
	if (atomic_load(&sc->server->stopping))
		return shape_respond_unavailable(sc, "the server is shutting down", 5);

	/* the definition moves to the request; the main thread resolves it */
	sc->request.def = sc->query.def;
	memset(&sc->query.def, 0, sizeof(sc->query.def));
	sc->request.done = shape_request_done;
	sc->phase = CONN_RESOLVING;
	MHD_suspend_connection(sc->connection);
	if (!request_queue_push(sc->server->queue, &sc->request))
	{
		sc->request.result.status = SHAPE_RESOLVE_UNAVAILABLE;
		MHD_resume_connection(sc->connection);
	}
	return MHD_YES;
}

static enum MHD_Result
shape_after_resolve(ShapeConn *sc)
{
	ShapeResolution *res = &sc->request.result;

	switch (res->status)
	{
		case SHAPE_RESOLVE_INVALID:
			return shape_respond_error(sc, MHD_HTTP_BAD_REQUEST, res->error_json, 0);
		case SHAPE_RESOLVE_UNAVAILABLE:
			if (res->error_json != NULL)
				return shape_respond_error(sc, MHD_HTTP_SERVICE_UNAVAILABLE,
										   res->error_json, 5);
			return shape_respond_unavailable(sc, "the server is not ready, please retry", 5);
		case SHAPE_RESOLVE_FAILED:
			return shape_respond_error(sc, res->error_status, res->error_json, 10);
		case SHAPE_RESOLVE_OK:
			break;
	}
	if (sc->query.handle != NULL && strcmp(sc->query.handle, res->handle) != 0)
		return shape_respond_must_refetch(sc, res->handle);
	if (!shape_table_pin(sc->server->shapes, res->slot, res->generation))
		return shape_respond_unavailable(sc, "Failed to create shape, please retry", 1);
	sc->pinned = true;
	sc->phase = CONN_RESOLVED;
	return shape_respond_or_wait(sc);
}

enum MHD_Result
shape_serve(HttpServer *server, struct MHD_Connection *connection, ShapeConn *sc)
{
	switch (sc->phase)
	{
		case CONN_NEW:
			return shape_start(sc);
		case CONN_RESOLVING:
			return shape_after_resolve(sc);
		case CONN_RESOLVED:
		case CONN_WAITING:
			return shape_respond_or_wait(sc);
		case CONN_RESPONDED:
			break;
	}
	return MHD_YES;
}

/* Releases everything the request holds; runs once, at completion. */
void
shape_conn_free(ShapeConn *sc)
{
	if (sc->pinned)
		shape_table_unpin(sc->server->shapes, sc->request.result.slot);
	shape_query_free(&sc->query);
	shape_definition_free(&sc->request.def);
	shape_resolution_free(&sc->request.result);
	free(sc);
}
