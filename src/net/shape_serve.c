/*-------------------------------------------------------------------------
 *
 * shape_serve.c
 *		/v1/shape (GET, HEAD, DELETE; subsets through subset_serve.c):
 *		from query parameters to a streamed shape response.
 *
 * This file runs on libmicrohttpd threads and must not call into
 * PostgreSQL.
 *
 * A request goes through these phases (ShapeConnPhase):
 *
 *	NEW        parse and validate the parameters; take an admission slot;
 *	           hand the definition to the main thread and suspend
 *	           (RESOLVING)
 *	RESOLVING  resumed with the main thread's answer: an error, or the
 *	           shape's (slot, generation, handle); pin the shape's log
 *	RESOLVED   find the chunk to send.  If there is none yet (the snapshot
 *	           has not produced it, a live request is at the end of the
 *	           log, the offset is past the end), park on the shape's wait
 *	           list (WAITING, waiters.c) until the log grows, the deadline
 *	           passes or the client leaves
 *	RESPONDED  a response is queued; the body is copied from the shared
 *	           log, piece by piece (shape_answer.c, or, for live_sse,
 *	           sse_stream.c)
 *
 * The admission slot and the pin are released when libmicrohttpd reports
 * the request complete, however it ended (shape_conn_free).
 *
 * Every wait has a deadline, one per kind of wait, set when the request
 * first waits that way and kept across wake-ups that bring nothing for it:
 * a live request answers up-to-date after shape_sync.long_poll_timeout, one
 * past the end of the log answers 400 after half of it, and one waiting for
 * its shape's snapshot to produce what it asks for answers 503 with
 * retry-after after shape_sync.snapshot_wait_timeout (the snapshot goes on;
 * the client comes back for it).  A snapshot may be queued behind
 * shape_sync.max_snapshot_workers, or run for as long as
 * shape_sync.snapshot_statement_timeout allows, and without a deadline a
 * client or a proxy in front would give up first, without retry-after.
 *
 * The kind of admission slot a request holds follows whether the server
 * has what it asks for, as Electric decides it by whether the shape
 * exists: every request is admitted as `existing`, with or without a
 * handle (one without takes an `initial` slot when the existing kind is
 * full: it may be for a new shape), and holds an `initial` slot while it
 * waits for its shape's snapshot (a snapshot costs what it costs whoever
 * asks, and clients coming back with a handle a 409 gave them wait on a
 * running snapshot like new ones).  A request that turns out to wait is moved to
 * `initial`, within the initial limit (503 over it), and back to
 * `existing` once its shape has what it asks for (shape_admission_follow).
 * A request that would make a new shape is refused before the shape is
 * made when the initial limit is reached (registry.c asks
 * admission_would_admit), so that a full server does not start snapshots
 * nobody will wait for.  So `offset=-1` for a shape the server holds takes
 * no initial slot.
 *
 * IDENTIFICATION
 *	  src/net/shape_serve.c
 *
 *-------------------------------------------------------------------------
 */
#include "shape_serve.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "http_respond.h"
#include "shape_answer.h"
#include "sse_stream.h"
#include "subset_serve.h"

#ifdef POSTGRES_H
#error "shape_serve.c runs on HTTP threads and must not include postgres.h"
#endif

/*
 * retry-after of what a stopping server answers: a restart takes about a
 * second, after which the client goes on with its shape, restored from
 * disk (pg/worker/log_files.c), or learns (409) that it is gone.
 */
#define SHUTDOWN_RETRY_AFTER_S 1

#define CACHE_CONTROL_INITIAL \
	"public, max-age=604800, s-maxage=3600, stale-while-revalidate=2629746"

/*
 * What a shape response's headers other than electric-schema take, at
 * most, in the connection's memory (status line, Date, CORS, the rest),
 * and what libmicrohttpd's record of each request header or argument does.
 */
#define SHAPE_OTHER_HEADERS_BYTES 1024
#define SHAPE_REQUEST_FIELD_BYTES 64

/* ------------------------------------------------------------- helpers */

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

static enum MHD_Result
shape_count_field(void *cls, enum MHD_ValueKind kind, const char *key, size_t key_size,
				  const char *value, size_t value_size)
{
	/* a header's text, or an argument's (decoded inside the target) */
	*(size_t *) cls += SHAPE_REQUEST_FIELD_BYTES +
		(kind == MHD_HEADER_KIND ? 3 * (key_size + value_size + 4) / 2 : 0);
	(void) key;
	(void) value;
	return MHD_YES;
}

/*
 * What the request may hold of its connection's memory while the
 * response's headers are built there: a record for each header and
 * argument, and one and a half times the text of its target and headers
 * (libmicrohttpd reads them into a buffer that it grows; measured with
 * libmicrohttpd 0.9.75 and a 12 kB pool, a request of 0.3 kB left room for
 * 11.3 kB of schema, one of 3.9 kB for 5.5 kB).  A guess on the safe side.
 */
static size_t
shape_request_bytes(ShapeConn *sc)
{
	size_t		bytes = 3 * (sc->conn_slot == CONN_NO_SLOT ? sc->server->max_uri_len :
							 sc->server->conns.slots[sc->conn_slot].target_len) / 2;

	(void) MHD_get_connection_values_n(sc->connection, MHD_HEADER_KIND | MHD_GET_ARGUMENT_KIND,
									   shape_count_field, &bytes);
	return bytes;
}

/*
 * A live answer with data, of a length (`size`, measured) up to
 * SHARED_RESPONSE_MAX_BODY, is the same bytes for every waiter the change
 * woke from the same offset (shared_responses.c): its key, and its body in
 * *body (malloc'd; NULL when it could not be built), or false when it is
 * not to be shared (its body is then left to shape_body_response).
 */
static bool
shape_shared_key(ShapeConn *sc, const char *req_text, const char *resp_text, bool up_to_date,
				 const char *cursor, uint64_t size, SharedResponseKey *key, char **body,
				 size_t *body_len)
{
	const char *origin = MHD_lookup_connection_value(sc->connection, MHD_HEADER_KIND, "Origin");
	int			n;

	if (size > SHARED_RESPONSE_MAX_BODY)
		return false;
	n = snprintf(key->text, sizeof(key->text), "%s|%s|%s|%d|%s|%s", sc->request.result.handle,
				 req_text, resp_text, up_to_date ? 1 : 0, cursor, origin ? origin : "");
	if (n < 0 || (size_t) n >= sizeof(key->text))
		return false;
	key->len = (size_t) n;
	*body = shape_body_build(sc, (size_t) size);
	*body_len = (size_t) size;
	return true;
}

/* ------------------------------------------------------------ responses */

typedef enum ResponseKind
{
	RESPONSE_DATA,				/* the records of a range */
	RESPONSE_NOW,				/* offset=now: up-to-date, no data */
	RESPONSE_TIMEOUT			/* a live request that saw no change */
} ResponseKind;

/*
 * electric-cursor, as Electric computes it: the end of the current
 * long-poll interval since 2024-10-09, or, when the client already holds
 * that, its cursor plus a random 1..3600, so that each interval's live URLs
 * are shared by all clients (collapsible by a cache) yet never repeat.
 */
static long long
shape_cursor(HttpServer *server, const char *param)
{
	static _Thread_local uint64_t seed;
	long long	interval = atomic_load(&server->long_poll_timeout_ms) / 1000;
	long long	now = (long long) time(NULL);
	long long	next;
	long long	prev = 0;
	char	   *end = NULL;

	if (interval < 1)
		interval = 1;
	next = ((now - 1728432000LL + interval - 1) / interval) * interval;
	if (param != NULL && param[0] != '\0')
	{
		prev = strtoll(param, &end, 10);
		if (end == NULL || *end != '\0')
			prev = 0;
	}
	if (next > prev)
		return next;
	if (seed == 0)
		seed = (uint64_t) http_monotonic_us() ^ (uint64_t) (uintptr_t) &seed;
	seed ^= seed << 13;
	seed ^= seed >> 7;
	seed ^= seed << 17;
	return prev + 1 + (long long) (seed % 3600);
}

static enum MHD_Result
shape_respond(ShapeConn *sc, const SlogPublished *pub, const SlogRange *range,
			  ResponseKind kind)
{
	HttpServer *server = sc->server;
	ShapeResolution *res = &sc->request.result;
	LogOffset	requested = sc->query.offset;
	bool		live = sc->query.live;
	bool		data = kind == RESPONSE_DATA;
	LogOffset	response_offset = data ? range->chunk_end : pub->last;
	bool		up_to_date;

	/*
	 * Nothing after an offset past the last record (shape_resumes_at_end):
	 * the client stays where it is, at the end, rather than going back.
	 */
	if (data && range->start == range->end && log_offset_cmp(requested, response_offset) > 0)
		response_offset = requested;
	if (data && range->failed)
		return shape_respond_unreadable(sc, shape_conn_log(sc), range->error);
	uint64_t	lsn;
	char		req_text[LOG_OFFSET_TEXT_LEN];
	char		resp_text[LOG_OFFSET_TEXT_LEN];
	char		etag[SHAPE_HANDLE_LEN + 2 * LOG_OFFSET_TEXT_LEN + 32];
	char		cache[128];
	char		cursor[32];
	const char *inm;
	struct MHD_Response *response;
	enum MHD_Result ret;
	bool		not_modified;
	bool		shared;
	SharedResponseKey key;
	char	   *shared_body = NULL;
	size_t		shared_len = 0;
	uint64_t	body_size;

	/*
	 * libmicrohttpd builds the headers in the connection's memory
	 * (shape_sync.connection_memory) and closes the connection without a
	 * word when they do not fit: a table too wide for it gets an answer.
	 */
	if (!live && res->schema_json != NULL &&
		strlen(res->schema_json) + SHAPE_OTHER_HEADERS_BYTES + shape_request_bytes(sc) >
		server->connection_memory)
	{
		char		body[400];

		snprintf(body, sizeof(body),
				 "{\"message\":\"The electric-schema header of this shape takes %zu bytes, more than "
				 "shape_sync.connection_memory (%zu kB) leaves beside this request for a "
				 "response's headers; the database operator can raise it\"}",
				 strlen(res->schema_json), server->connection_memory / 1024);
		return shape_respond_error(sc, MHD_HTTP_INTERNAL_SERVER_ERROR, body, 0);
	}

	up_to_date = !data ||
		(!log_offset_is_before_all(requested) &&
		 (pub->flags & SLOG_SNAPSHOT_DONE) &&
		 log_offset_cmp(response_offset, log_offset_max(pub->last, requested)) >= 0);

	if (sc->query.offset_now)
		strcpy(req_text, "now");
	else
		log_offset_format(requested, req_text, sizeof(req_text));
	log_offset_format(response_offset, resp_text, sizeof(resp_text));
	if (!data)
		snprintf(etag, sizeof(etag), "\"%s:%s:%s:%lld\"", res->handle, req_text,
				 resp_text, (long long) http_monotonic_us());
	else
		snprintf(etag, sizeof(etag), "\"%s:%s:%s\"", res->handle, req_text, resp_text);

	if (live)
		snprintf(cache, sizeof(cache), "public, max-age=5, stale-while-revalidate=5");
	else if (log_offset_is_before_all(requested) && !sc->query.offset_now)
		snprintf(cache, sizeof(cache), CACHE_CONTROL_INITIAL);
	else
		snprintf(cache, sizeof(cache), "public, max-age=%d, stale-while-revalidate=%d",
				 atomic_load(&server->cache_max_age), atomic_load(&server->cache_stale_age));

	inm = MHD_lookup_connection_value(sc->connection, MHD_HEADER_KIND, "If-None-Match");
	not_modified = inm != NULL && etag_matches(inm, etag);

	/* body: the records of the range, then up-to-date, then "]" */
	slog_cursor_init(sc->server->shapes->arena, data ? shape_conn_log(sc) : NULL,
					 &sc->body.records, data ? range->start : 0, data ? range->end : 0,
					 sc->query.offset);
	if (sc->body.records.failed)
		return shape_respond_unreadable(sc, shape_conn_log(sc), sc->body.records.error);
	if (data)
		slog_cursor_size(&sc->body.records, range);
	lsn = sc->seen_lsn;
	if (live && data && response_offset.tx > 0)
		lsn = (uint64_t) response_offset.tx;
	else if (response_offset.tx > 0 && (uint64_t) response_offset.tx > lsn)
		lsn = (uint64_t) response_offset.tx;
	if (up_to_date)
		sc->body.tail_len = (size_t) snprintf(sc->body.tail, sizeof(sc->body.tail),
											  "%s{\"headers\":{\"control\":\"up-to-date\","
											  "\"global_last_seen_lsn\":\"%llu\"}}]",
											  slog_cursor_more(&sc->body.records) ? "," : "",
											  (unsigned long long) lsn);
	else
		sc->body.tail_len = (size_t) snprintf(sc->body.tail, sizeof(sc->body.tail), "]");

	shape_conn_responded(sc);
	conn_set_activity(&server->conns, sc->conn_slot, CONN_ACTIVITY_STREAMING);
	if (live && data && sc->parked_live)
	{
		/* it waited for this change: how long since it reached the log */
		int64_t		published = atomic_load_explicit(&server->shapes->slots[res->slot].published_us,
													 memory_order_relaxed);
		int64_t		now = http_monotonic_us();

		if (published > 0 && now >= published)
			sm_observe(SM_LOG_TO_CLIENT_SECONDS, 0, (double) (now - published) / 1e6);
	}
	if (live)
		snprintf(cursor, sizeof(cursor), "%lld", shape_cursor(server, sc->query.cursor));
	body_size = not_modified || sc->head_only ? 0 : shape_body_measure(sc);
	if (body_size == SHAPE_BODY_UNREADABLE)
		return shape_respond_unreadable(sc, shape_conn_log(sc), sc->body.records.error);
	shared = live && data && !not_modified && !sc->head_only && response_offset.tx > 0 &&
		shape_shared_key(sc, req_text, resp_text, up_to_date, cursor, body_size, &key,
						 &shared_body, &shared_len);
	if (shared && shared_body == NULL)
		return MHD_NO;
	if (shared)
	{
		sc->body_buffer = shared_len;
		conn_deadline_arm(&server->conns, sc->conn_slot);
		if (shared_responses_queue(&server->shared, sc->request.result.slot, &key,
								   shared_body, shared_len, sc->connection, &ret))
		{
			if (ret == MHD_YES)
				http_note_response(MHD_HTTP_OK, shared_len);
			free(shared_body);
			return ret;
		}
		response = MHD_create_response_from_buffer(shared_len, shared_body,
												   MHD_RESPMEM_MUST_FREE);
	}
	else if (not_modified || sc->head_only)
		response = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
	else
		response = shape_body_response(sc, body_size);
	if (response == NULL)
		return MHD_NO;
	MHD_add_response_header(response, "content-type", "application/json; charset=utf-8");
	MHD_add_response_header(response, "electric-server", SERVER_NAME);
	MHD_add_response_header(response, "electric-handle", res->handle);
	MHD_add_response_header(response, "electric-offset", resp_text);
	MHD_add_response_header(response, "electric-has-data", data ? "true" : "false");
	if (live)
		MHD_add_response_header(response, "electric-cursor", cursor);
	else if (res->schema_json != NULL)
		MHD_add_response_header(response, "electric-schema", res->schema_json);
	if (up_to_date)
		MHD_add_response_header(response, "electric-up-to-date", "true");
	MHD_add_response_header(response, "etag", etag);
	MHD_add_response_header(response, "cache-control", cache);
	http_add_cors_headers(response, sc->connection);
	/* a body built whole counts here; one sent in pieces, piece by piece */
	ret = http_queue(sc->connection, not_modified ? MHD_HTTP_NOT_MODIFIED : MHD_HTTP_OK,
					 response, shared ? shared_len :
					 body_size <= server->write_piece_size ? body_size : 0);
	if (shared && ret == MHD_YES)
		shared_responses_keep(&server->shared, sc->request.result.slot, &key, shared_body,
							  shared_len, response);	/* takes our reference */
	else
		MHD_destroy_response(response);
	return ret;
}

typedef struct ServeCheck
{
	ShapeConn  *sc;
	ServeDecision decision;
	ServeDecision parking_for;	/* the wait whose deadline is being used */
	ShapeState	state;
	SlogPublished pub;
	SlogRange	range;
} ServeCheck;

/*
 * An offset past the log's last record that is where an SSE client
 * resumes (sse_stream.c): "<last commit LSN + 1>_0" after a batch, or one
 * below the LSN seen before the range was located after a snapshot.  The
 * log holds every transaction of the shape up to that LSN, and none commits
 * at either offset (records start 8-byte aligned), so the client is at the
 * log's end, not out of bounds.  Any other offset past the end is out of
 * bounds, as in Electric: the request waits for the log to reach it.
 */
static bool
shape_resumes_at_end(const ShapeConn *sc, const SlogPublished *pub)
{
	LogOffset	o = sc->query.offset;

	return o.op == 0 && o.tx > pub->last.tx && (pub->flags & SLOG_SNAPSHOT_DONE) &&
		((uint64_t) o.tx < sc->seen_lsn || o.tx == pub->last.tx + 1);
}

static ServeDecision
shape_decide(ServeCheck *c)
{
	ShapeConn  *sc = c->sc;
	ShapeTable *shapes = sc->server->shapes;
	uint32_t	slot = sc->request.result.slot;

	const ShapeLog *log;
	ServeDecision decision = SERVE_RESPOND;

	memset(&c->range, 0, sizeof(c->range));
	c->state = shape_table_state(shapes, slot);
	if (c->state == SHAPE_FAILED || c->state == SHAPE_RETIRED)
		return SERVE_RESPOND;
	log = shape_conn_pin_log(sc);
	sc->seen_lsn = shape_table_seen_lsn(shapes);	/* before the range: see shape_table.c */
	slog_read_published(log, &c->pub);
	if (sc->query.offset_now)
		decision = (c->pub.flags & SLOG_SNAPSHOT_DONE) ? SERVE_RESPOND : SERVE_WAIT;
	else
	{
		slog_locate(shapes->arena, log, &c->pub, sc->query.offset, &c->range);
		if (c->range.failed)
			decision = SERVE_RESPOND;	/* with a 503: it cannot wait that away */
		else if (!c->range.ready)
			decision = SERVE_WAIT;
		else if (c->range.beyond_end && !shape_resumes_at_end(sc, &c->pub))
			decision = SERVE_WAIT_BOUNDS;
		else if (sc->query.live && c->range.start == c->range.end)
			decision = SERVE_WAIT_LIVE;
	}
	if (decision != SERVE_RESPOND)
		shape_conn_unpin_log(sc);	/* a parked request holds no version */
	return decision;
}

/*
 * waiters_park's check, under the wait list's lock: park unless there is
 * an answer now, or the request must wait otherwise than it is about to
 * (its deadline would be the wrong one).
 */
static bool
shape_ready_to_answer(void *arg)
{
	ServeCheck *c = arg;

	c->decision = shape_decide(c);
	return c->decision == SERVE_RESPOND || c->decision != c->parking_for;
}

/* When a wait of this kind ends (monotonic ms; 0: never). */
static int64_t
shape_wait_deadline(ShapeConn *sc, ServeDecision decision)
{
	HttpServer *server = sc->server;

	if (decision == SERVE_WAIT)
	{
		int			timeout = atomic_load(&server->snapshot_wait_timeout_ms);

		if (sc->snapshot_deadline_ms == 0 && timeout > 0)
			sc->snapshot_deadline_ms = waiters_now_ms() + timeout;
		return sc->snapshot_deadline_ms;
	}
	if (sc->deadline_ms == 0)
	{
		int64_t		timeout = atomic_load(&server->long_poll_timeout_ms);

		sc->deadline_ms = waiters_now_ms() +
			(decision == SERVE_WAIT_BOUNDS ? timeout / 2 : timeout);
	}
	return sc->deadline_ms;
}

/*
 * Makes the request hold the admission slot of what it does now (see the
 * file header): `initial` while it waits for its shape's snapshot,
 * `existing` otherwise.  Returns false when it must move to `initial` and
 * that kind is full: the caller answers 503.
 */
static bool
shape_admission_follow(ShapeConn *sc, bool snapshot_wait)
{
	Admission  *admission = sc->server->admission;

	if (snapshot_wait && sc->admitted == ADMISSION_EXISTING)
	{
		if (!admission_demote(admission))
		{
			sc->rejected_kind = ADMISSION_INITIAL;
			return false;
		}
		sc->admitted = ADMISSION_INITIAL;
	}
	else if (!snapshot_wait && sc->admitted == ADMISSION_INITIAL)
	{
		admission_promote(admission);
		sc->admitted = ADMISSION_EXISTING;
	}
	return true;
}

static enum MHD_Result shape_respond_over_limit(ShapeConn *sc);
static enum MHD_Result shape_send_to_main_thread(ShapeConn *sc);

/*
 * The shape the request resolved to went (rotated, evicted, deleted): the
 * answer is 409 must-refetch.  So that the 409 names the shape that
 * replaces it, as Electric's does (the official client warns of a proxy
 * that strips headers when one names none), the definition is resolved
 * once more: from the entry another request of it left (resolved_shapes.c),
 * or by the main thread, which makes the new shape if nobody has yet and
 * never waits for the end of a replay to answer (successor_only).  Whatever
 * else the main thread says (the table is gone, the role lost a privilege,
 * the server is full) the client still gets its 409 first, without a
 * handle, and meets that answer on its next request: it is told to drop
 * what it holds before anything else.
 */
static enum MHD_Result
shape_find_successor(ShapeConn *sc)
{
	ShapeTable *shapes = sc->server->shapes;
	ResolvedShape next;

	if (sc->finding_successor || sc->request.subset != NULL || !sc->request.has_definition)
		return shape_respond_must_refetch(sc, NULL);
	memcpy(sc->gone_handle, sc->request.result.handle, sizeof(sc->gone_handle));
	shape_conn_unpin_log(sc);	/* before the slot: see shape_table.c */
	if (sc->pinned)
		shape_table_unpin(shapes, sc->request.result.slot);
	sc->pinned = false;
	shape_resolution_free(&sc->request.result);
	sc->finding_successor = true;
	if (sc->def_key == NULL)
		sc->def_key = resolved_shape_key(&sc->request.def, &sc->def_key_len);

	/* another request of the definition found the new shape already */
	if (resolved_shared_find(&sc->server->resolutions, sc->def_key, sc->def_key_len, NULL,
							 atomic_load(&shapes->catalog_epoch), &next) &&
		strcmp(next.handle, sc->gone_handle) != 0 &&
		shape_table_pin(shapes, next.slot, next.generation))
	{
		shape_table_unpin(shapes, next.slot);
		return shape_respond_must_refetch(sc, next.handle);
	}
	sc->request.first_try_ms = 0;
	sc->request.successor_only = true;
	return shape_send_to_main_thread(sc);
}

static enum MHD_Result
shape_respond_or_wait(ShapeConn *sc)
{
	HttpServer *server = sc->server;
	ShapeSlot  *slot = &server->shapes->slots[sc->request.result.slot];
	ServeCheck	c = {.sc = sc};
	bool		timed_out;

	c.decision = shape_decide(&c);
	/* a deadline that passed ends the kind of wait it was set for only */
	timed_out = sc->waiter.timed_out && c.decision == sc->parked_for;
	sc->waiter.timed_out = false;
	for (;;)
	{
		if (!shape_admission_follow(sc, c.decision == SERVE_WAIT))
			return shape_respond_over_limit(sc);
		if (sc->query.live_sse && c.state != SHAPE_RETIRED && c.state != SHAPE_FAILED &&
			!c.range.failed && (c.decision == SERVE_RESPOND || c.decision == SERVE_WAIT_LIVE))
		{
			char		cursor[32];

			snprintf(cursor, sizeof(cursor), "%lld", shape_cursor(server, sc->query.cursor));
			return sse_respond(sc, &c.pub, &c.range, c.decision == SERVE_WAIT_LIVE, cursor);
		}
		if (c.decision == SERVE_RESPOND || timed_out)
			break;
		sc->parked_for = c.parking_for = c.decision;
		sc->waiter.connection = sc->connection;
		if (waiters_park(&server->waiters, &sc->waiter, sc->request.result.slot,
						 shape_wait_deadline(sc, c.decision), shape_ready_to_answer, &c))
		{
			sc->phase = CONN_WAITING;
			sc->parked_live = c.decision == SERVE_WAIT_LIVE;
			conn_set_activity(&server->conns, sc->conn_slot,
							  c.decision == SERVE_WAIT ? CONN_ACTIVITY_SNAPSHOT
							  : CONN_ACTIVITY_WAITING);
			return MHD_YES;
		}
		if (sc->waiter.client_gone)
		{
			/* the client left before it could park: close */
			http_closing_on_purpose = true;
			return MHD_NO;
		}
		if (atomic_load(&server->waiters.stopping))
			return shape_respond_unavailable(sc, "the server is shutting down", SHUTDOWN_RETRY_AFTER_S);
		/* the check under the list's lock saw something else: go on with it */
	}

	if (c.state == SHAPE_RETIRED)
		return shape_find_successor(sc);	/* 409: rotated, see snapshot_worker.c */
	if (c.state == SHAPE_FAILED)
	{
		/* the slot is pinned: its error fields stay as the failure left them */
		Refusal		failed = {0};

		failed.reason = slot->error_reason ? (RefusalReason) slot->error_reason :
			REFUSAL_SNAPSHOT_FAILED;
		failed.number = slot->error_number;
		failed.text = slot->error; /* borrowed: never freed */
		return shape_respond_refusal(sc, &failed);	/* REFUSAL_MUST_REFETCH: 409 */
	}
	switch (c.decision)
	{
		case SERVE_RESPOND:
			return shape_respond(sc, &c.pub, &c.range,
								 sc->query.offset_now ? RESPONSE_NOW : RESPONSE_DATA);
		case SERVE_WAIT_LIVE:
			return shape_respond(sc, &c.pub, &c.range, RESPONSE_TIMEOUT);
		case SERVE_WAIT_BOUNDS:
			return shape_respond_error(sc, MHD_HTTP_BAD_REQUEST,
									   "{\"message\":\"Invalid request\",\"errors\":"
									   "{\"offset\":[\"out of bounds for this shape\"]}}", 0);
		case SERVE_WAIT:
			break;
	}
	/* shape_sync.snapshot_wait_timeout passed; the snapshot goes on */
	return shape_respond_unavailable(sc, "Timed out waiting for the shape's snapshot "
									 "(shape_sync.snapshot_wait_timeout), please retry", 5);
}

/* ------------------------------------------------------------ admission */

/*
 * Takes an admission slot for the request's whole life: `existing` at
 * first, whatever it names, or `initial` for a request without a handle
 * when the existing kind is full (it may be for a new shape, which is
 * initial's business); once the shape is resolved, the kind follows what
 * the request does (shape_admission_follow), and a request that would make
 * a new shape without holding an `initial` slot is refused before the
 * shape is made when none is free (registry.c).
 */
static bool
shape_admit(ShapeConn *sc)
{
	Admission  *admission = sc->server->admission;

	if (admission_acquire(admission, ADMISSION_EXISTING))
		sc->admitted = ADMISSION_EXISTING;
	else if (sc->query.handle == NULL && admission_acquire(admission, ADMISSION_INITIAL))
	{
		/* the kinds are separate: a full existing kind leaves new shapes their own */
		sc->admitted = ADMISSION_INITIAL;
	}
	else
	{
		sc->admitted = ADMISSION_NONE;
		sc->rejected_kind = ADMISSION_EXISTING;
		return false;
	}
	return true;
}

/*
 * 503 concurrent_request_limit_exceeded for sc->rejected_kind, with its
 * limit as it stands and a retry-after of 5 to 10 s, drawn so that refused
 * clients do not all come back at once.
 */
static enum MHD_Result
shape_respond_over_limit(ShapeConn *sc)
{
	static _Thread_local unsigned seed;
	Refusal		over = {0};

	if (seed == 0)
		seed = (unsigned) http_monotonic_us() | 1;
	seed = seed * 1103515245u + 12345u;
	over.reason = REFUSAL_CONCURRENT_LIMIT;
	over.field = (char *) admission_kind_name(sc->rejected_kind);	/* borrowed */
	over.number = atomic_load(&sc->server->admission->limit[sc->rejected_kind]);
	over.retry_after_s = 5 + (seed >> 16) % 6;
	return shape_respond_refusal(sc, &over);
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
shape_collect_arg(void *cls, enum MHD_ValueKind kind, const char *key, size_t key_size,
				  const char *value, size_t value_size)
{
	void	  **args = cls;

	shape_query_add(args[0], args[1], key, key_size, value, value_size);
	return MHD_YES;
}

/*
 * A request for the shape its connection's last request resolved to, or
 * that any connection's request last resolved its definition to, with that
 * shape's handle (at offset -1 or now, the handle sent is not checked, but
 * it is looked for: the one a 409 named), is served on this thread
 * (resolved_shapes.c): true when the shape is pinned and the request
 * resolved.  False sends it to the main thread: another definition or
 * handle, a schema not at hand, or a shape that is gone (its generation
 * moved on).
 */
static bool
shape_reuse_resolution(ShapeConn *sc)
{
	HttpServer *server = sc->server;
	ShapeResolution *res = &sc->request.result;
	ResolvedShape **cached;
	ResolvedShape reuse;
	bool		shared;
	uint64_t	epoch;
	char	   *schema = NULL;
	const char *handle = sc->query.handle != NULL ? sc->query.handle : sc->query.reuse_handle;

	if (sc->conn_slot == CONN_NO_SLOT || handle == NULL || sc->head_only)
		return false;
	cached = &server->conns.slots[sc->conn_slot].resolved;
	epoch = atomic_load(&server->shapes->catalog_epoch);
	shared = !resolved_shape_matches(*cached, sc->def_key, sc->def_key_len, handle, epoch);
	if (!shared)
		reuse = **cached;
	else if (!resolved_shared_find(&server->resolutions, sc->def_key, sc->def_key_len,
								   handle, epoch, &reuse))
		return false;
	if (!sc->query.live)
	{
		schema = resolved_schemas_copy(&server->schemas, reuse.slot, reuse.generation);
		if (schema == NULL)
			return false;
	}
	if (!shape_table_pin(server->shapes, reuse.slot, reuse.generation))
	{
		free(schema);
		if (shared)
			resolved_shared_forget(&server->resolutions, sc->def_key, sc->def_key_len, &reuse);
		else
			resolved_shape_free(cached);
		return false;
	}
	res->status = SHAPE_RESOLVE_OK;
	res->slot = reuse.slot;
	res->generation = reuse.generation;
	memcpy(res->handle, reuse.handle, sizeof(res->handle));
	res->schema_json = schema;
	res->catalog_epoch = reuse.catalog_epoch;
	shape_table_note_read(server->shapes, res->slot);
	if (strcmp(server->conns.slots[sc->conn_slot].handle, res->handle) != 0)
		conn_table_set_handle(&server->conns, sc->conn_slot, res->handle);	/* for logs */
	if (shared)
	{
		/* the connection's next request finds it at hand */
		resolved_shape_store(cached, sc->def_key, sc->def_key_len, res);
		sc->def_key = NULL;
	}
	sc->pinned = true;
	sc->phase = CONN_RESOLVED;
	return true;
}

static enum MHD_Result
shape_start(ShapeConn *sc)
{
	enum MHD_Result ret;
	RequestErrors errs = {0};
	void	   *args[2] = {&sc->query, &errs};

	MHD_get_connection_values_n(sc->connection, MHD_GET_ARGUMENT_KIND, shape_collect_arg, args);
	if (sc->delete_shape)
		shape_query_finish_delete(&sc->query, &errs);
	else
		shape_query_finish(&sc->query, &errs, atomic_load(&sc->server->max_where_length));
	http_note_kind(sc->server, sc->conn_slot,
				   sc->delete_shape ? SM_KIND_DELETE :
				   subset_is_requested(sc) ? SM_KIND_SUBSET :
				   sc->query.live_sse ? SM_KIND_SSE :
				   sc->query.live ? SM_KIND_LIVE :
				   log_offset_is_before_all(sc->query.offset) ? SM_KIND_INITIAL :
				   SM_KIND_EXISTING);
	if (errs.count > 0)
	{
		char	   *body = request_errors_json(&errs);
		enum MHD_Result ret = shape_respond_error(sc, MHD_HTTP_BAD_REQUEST, body, 0);

		free(body);
		return ret;
	}
	if (atomic_load(&sc->server->stopping))
		return shape_respond_unavailable(sc, "the server is shutting down", SHUTDOWN_RETRY_AFTER_S);
	if (!shape_admit(sc))
		return shape_respond_over_limit(sc);
	if (!sc->delete_shape && subset_is_requested(sc) && !subset_start(sc, &ret))
		return ret;

	/* the definition moves to the request; the main thread resolves it */
	sc->request.def = sc->query.def;
	sc->request.has_definition = sc->query.has_table;
	sc->request.delete_shape = sc->delete_shape;
	sc->request.handle = sc->delete_shape ? sc->query.handle : NULL;
	sc->request.client_key = sc->client_key;
	sc->request.holds_initial = sc->admitted == ADMISSION_INITIAL;
	memset(&sc->query.def, 0, sizeof(sc->query.def));
	if (!sc->delete_shape && sc->request.subset == NULL)
	{
		sc->def_key = resolved_shape_key(&sc->request.def, &sc->def_key_len);
		if (shape_reuse_resolution(sc))
			return shape_respond_or_wait(sc);
	}
	return shape_send_to_main_thread(sc);
}

/* Suspends the connection until the main thread has resolved its request. */
static enum MHD_Result
shape_send_to_main_thread(ShapeConn *sc)
{
	sc->request.done = shape_request_done;
	sc->phase = CONN_RESOLVING;
	conn_set_activity(&sc->server->conns, sc->conn_slot, CONN_ACTIVITY_RESOLVING);
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

	/* the main thread says otherwise now: what the connection kept goes */
	if (res->status != SHAPE_RESOLVE_OK && sc->conn_slot != CONN_NO_SLOT)
		resolved_shape_free(&sc->server->conns.slots[sc->conn_slot].resolved);
	if (sc->finding_successor)
	{
		bool		named = res->status == SHAPE_RESOLVE_OK &&
			strcmp(res->handle, sc->gone_handle) != 0;

		/*
		 * Kept, for the requests parked on the shape that went which were
		 * not woken with this one, and for the clients that come back for
		 * it (at offset -1, with the handle named: shape_reuse_resolution).
		 */
		if (named && res->reusable)
		{
			resolved_schemas_put(&sc->server->schemas, res->slot, res->generation,
								 res->schema_json);
			resolved_shared_put(&sc->server->resolutions, sc->def_key, sc->def_key_len, res,
								atomic_load(&sc->server->shapes->catalog_epoch));
		}
		return shape_respond_must_refetch(sc, named ? res->handle : NULL);
	}
	switch (res->status)
	{
		case SHAPE_RESOLVE_REFUSED:
			if (res->refusal.reason == REFUSAL_CONCURRENT_LIMIT)
			{
				/* a new shape's snapshot would wait over the initial limit */
				sc->rejected_kind = ADMISSION_INITIAL;
				return shape_respond_over_limit(sc);
			}
			return shape_respond_refusal(sc, &res->refusal);
		case SHAPE_RESOLVE_UNAVAILABLE:
			{
				Refusal		not_ready = {.reason = REFUSAL_NOT_READY};

				return shape_respond_refusal(sc, &not_ready);
			}
		case SHAPE_RESOLVE_DELETED:
			return shape_respond_deleted(sc);
		case SHAPE_RESOLVE_OK:
			break;
	}
	conn_table_set_handle(&sc->server->conns, sc->conn_slot, res->handle);
	if (sc->query.handle != NULL && strcmp(sc->query.handle, res->handle) != 0)
		return shape_respond_must_refetch(sc, res->handle);
	if (sc->request.subset != NULL)
		return subset_respond(sc);
	if (!shape_table_pin(sc->server->shapes, res->slot, res->generation))
		return shape_respond_unavailable(sc, "Failed to create shape, please retry", 1);
	sc->pinned = true;
	sc->phase = CONN_RESOLVED;
	/* the connection's next request for this shape needs no main thread */
	if (sc->def_key != NULL && sc->conn_slot != CONN_NO_SLOT && res->reusable)
	{
		resolved_schemas_put(&sc->server->schemas, res->slot, res->generation, res->schema_json);
		resolved_shared_put(&sc->server->resolutions, sc->def_key, sc->def_key_len, res,
							atomic_load(&sc->server->shapes->catalog_epoch));
		resolved_shape_store(&sc->server->conns.slots[sc->conn_slot].resolved,
							 sc->def_key, sc->def_key_len, res);
		sc->def_key = NULL;
	}
	return shape_respond_or_wait(sc);
}

enum MHD_Result
shape_serve(HttpServer *server, struct MHD_Connection *connection, ShapeConn *sc)
{
	if (sc->waiter.client_gone)
	{
		http_closing_on_purpose = true;
		return MHD_NO;			/* the client went away while parked: close */
	}
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
	conn_deadline_clear(&sc->server->conns, sc->conn_slot);
	admission_release(sc->server->admission, sc->admitted);
	atomic_fetch_sub(&sc->server->unanswered, 1);	/* its answer is out, or never will be */
	shape_conn_unpin_log(sc);	/* before the slot: see shape_table.c */
	if (sc->pinned)
		shape_table_unpin(sc->server->shapes, sc->request.result.slot);
	/* big buffers only: small ones are reused, and this line is shared */
	if (sc->body_buffer >= 64 * 1024)
		atomic_fetch_add_explicit(&sc->server->freed_bytes, sc->body_buffer,
								  memory_order_relaxed);
	subset_conn_free(sc);
	shape_query_free(&sc->query);
	free(sc->def_key);
	free(sc->body.head);
	shape_definition_free(&sc->request.def);
	shape_resolution_free(&sc->request.result);
	free(sc);
}

