/*-------------------------------------------------------------------------
 *
 * subset_serve.c
 *		Subset queries over HTTP: GET with subset__* parameters, and POST.
 *
 * This file runs on libmicrohttpd threads and must not call into
 * PostgreSQL.
 *
 * A request is a subset query when it carries any subset__* parameter
 * (subset__where_expr and subset__order_by_expr, the client's echoes, do
 * not count) or is a POST, whose JSON body holds the subset's fields.  The
 * body is kept as it comes, up to SUBSET_BODY_MAX bytes (413 past that),
 * within SUBSET_BODIES_MAX for all bodies held and SUBSET_CLIENT_BODIES_MAX
 * for one client's (503 past those; see subset_take_body), and checked by
 * the worker that runs the query, under PostgreSQL's JSON
 * parser, like every other subset input (subset_query.c): nothing of the
 * subset is parsed on this thread.
 *
 * The request goes the way of every shape request (shape_serve.c): it is
 * admitted, then resolved by the main thread, which checks its handle (409)
 * and keeps it until a snapshot worker has run the query (subset_jobs.c).
 * Before that it claims a cell for the answer (subset_results.c): when all
 * SUBSET_RESULTS_MAX are in use, or its client (ShapeConn.client_key: its
 * address, or the one a trusted proxy forwards for) holds
 * SUBSET_PER_CLIENT_MAX of them, it gets 503 with retry-after, so that any
 * number of subset requests costs a bounded number of queries at a time,
 * and one client cannot take them all.
 * The answer is sent from the cell's log like a shape's chunk, piece by
 * piece (shape_body_response): `{"metadata":` record 0 `,"data":[` rows
 * `]}`.  A query that failed leaves a refusal in the cell instead (its
 * reason and facts, its text as record 0), which refusal_render.c turns
 * into the answer.  The cell is let go of when the connection is done with
 * the request, however it ended.
 *
 * electric-offset is the offset the request was sent at (for offset=now,
 * the log's end before the query ran): a client that moves its stream to
 * it skips no change, and changes that the subset already holds are told
 * apart by the snapshot's visibility (the client's snapshot tracker).
 *
 * Notes on synchronization: the body budgets (HttpServer.post_bytes, and
 * post_client_bytes, a bucket per client key) are added to and taken from
 * by every HTTP thread with relaxed atomics.  A connection's own charge,
 * post_len, belongs to the thread that runs it: it adds a piece to both
 * counters, then reads them, and refuses past either bound, so threads
 * that charge at once may both be refused but never both admitted by more
 * than a piece each; subset_drop_body takes exactly post_len back, once,
 * from the same bucket (the key and the seed do not change).  No order
 * with other memory is needed: the counters guard nothing but themselves.
 *
 * IDENTIFICATION
 *	  src/net/subset_serve.c
 *
 *-------------------------------------------------------------------------
 */
#include "subset_serve.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http_respond.h"
#include "json_text.h"
#include "shape_answer.h"

#ifdef POSTGRES_H
#error "subset_serve.c runs on HTTP threads and must not include postgres.h"
#endif

static const char subset_metadata_open[] = "{\"metadata\":";
static const char subset_data_open[] = ",\"data\":[";

bool
subset_is_requested(const ShapeConn *sc)
{
	return sc->post || sc->query.subset;
}

/* splitmix64's finalizer: every bit of x moves about half the bits out */
static uint64_t
subset_mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= UINT64_C(0xbf58476d1ce4e5b9);
	x ^= x >> 27;
	x *= UINT64_C(0x94d049bb133111eb);
	x ^= x >> 31;
	return x;
}

/*
 * The bucket of a client key under a server's seed.  The key is a plain
 * hash of the client's address (client_addr_key), which anyone can
 * compute; with the bucket keyed by a seed the client does not know, one
 * who holds many /64s cannot pick those that land in another client's
 * bucket.  Not a cryptographic keyed hash, only one whose buckets cannot
 * be told without the seed.
 */
unsigned
subset_client_bucket(uint64_t seed, uint64_t key)
{
	return (unsigned) (subset_mix64(subset_mix64(key ^ seed) + seed) % SUBSET_CLIENT_BUCKETS);
}

/*
 * The counter of the request's client's share of the bodies, or NULL for a
 * client not known (no share then, only the server's budget).  Clients are
 * counted in SUBSET_CLIENT_BUCKETS buckets by their key, mixed with a seed
 * the server draws at random when it starts (subset_client_bucket): two
 * clients that fall in one bucket share one share, which takes no more
 * than a fixed table and one step per piece of body, however many clients
 * there are, and which clients share one cannot be chosen from outside.
 */
static _Atomic size_t *
subset_client_bytes(ShapeConn *sc)
{
	uint64_t	key = sc->client_key;

	if (key == 0)
		return NULL;
	return &sc->server->post_client_bytes[subset_client_bucket(sc->server->post_client_seed,
																key)];
}

/* Gives `n` bytes back to the server's budget and to the client's share. */
static void
subset_uncharge(ShapeConn *sc, size_t n)
{
	_Atomic size_t *mine = subset_client_bytes(sc);

	atomic_fetch_sub_explicit(&sc->server->post_bytes, n, memory_order_relaxed);
	if (mine != NULL)
		atomic_fetch_sub_explicit(mine, n, memory_order_relaxed);
}

/*
 * Lets go of the body held so far, and of what it was charged; post_len is
 * what is charged, so this gives it back once however often it runs.
 */
static void
subset_drop_body(ShapeConn *sc)
{
	subset_uncharge(sc, sc->post_len);
	free(sc->post_body);
	sc->post_body = NULL;
	sc->post_len = 0;
}

/*
 * POST: the body, piece by piece, up to SUBSET_BODY_MAX bytes, while the
 * bodies of all connections stay within SUBSET_BODIES_MAX and those of the
 * request's client (its address, or the one a trusted proxy forwards for)
 * within SUBSET_CLIENT_BODIES_MAX, so that one client's unfinished bodies
 * leave the rest of the budget to others.  Requests are admitted only once
 * their body is in, so this bounds what bodies held before admission take.
 * Past any of them, the rest is read and dropped, and the request answers
 * 413 or 503.  What a body is charged is given back at the end of its
 * request, however it ended (subset_conn_free).
 */
void
subset_take_body(ShapeConn *sc, const char *data, size_t size)
{
	_Atomic size_t *mine = subset_client_bytes(sc);
	char	   *grown;

	if (!sc->post || sc->post_too_large || sc->post_over_budget || sc->post_over_share)
		return;
	if (sc->post_len + size > SUBSET_BODY_MAX)
	{
		sc->post_too_large = true;
		subset_drop_body(sc);
		return;
	}
	/* charged to both first, so that racing pieces never pass either bound */
	atomic_fetch_add_explicit(&sc->server->post_bytes, size, memory_order_relaxed);
	if (mine != NULL)
		atomic_fetch_add_explicit(mine, size, memory_order_relaxed);
	if (mine != NULL &&
		atomic_load_explicit(mine, memory_order_relaxed) > SUBSET_CLIENT_BODIES_MAX)
	{
		subset_uncharge(sc, size);
		sc->post_over_share = true;
		subset_drop_body(sc);
		return;
	}
	if (atomic_load_explicit(&sc->server->post_bytes, memory_order_relaxed) > SUBSET_BODIES_MAX)
	{
		subset_uncharge(sc, size);
		sc->post_over_budget = true;
		subset_drop_body(sc);
		return;
	}
	grown = realloc(sc->post_body, sc->post_len + size + 1);
	if (grown == NULL)
	{
		subset_uncharge(sc, size);
		sc->post_over_budget = true;	/* cannot hold it now */
		subset_drop_body(sc);
		return;
	}
	memcpy(grown + sc->post_len, data, size);
	sc->post_body = grown;
	sc->post_len += size;
	sc->post_body[sc->post_len] = '\0';
}

/*
 * An admitted subset request: checks its body and claims a cell, then the
 * inputs go with the request to the main thread.  False when it was
 * answered here (*answered).
 */
bool
subset_start(ShapeConn *sc, enum MHD_Result *answered)
{
	SubsetRequest *in = sc->query.subset_in;
	uint32_t	ticket;
	int			cell;

	if (sc->post_too_large)
	{
		*answered = shape_respond_error(sc, MHD_HTTP_CONTENT_TOO_LARGE,
										"{\"error\":\"Request body too large\"}", 0);
		return false;
	}
	if (sc->post_over_share)
	{
		char		body[224];

		snprintf(body, sizeof(body),
				 "{\"message\":\"This client is sending as many request bodies as one client may at once "
				 "(%d bytes of the server's %d), please retry\"}",
				 SUBSET_CLIENT_BODIES_MAX, SUBSET_BODIES_MAX);
		*answered = shape_respond_error(sc, MHD_HTTP_SERVICE_UNAVAILABLE, body, 1);
		return false;
	}
	if (sc->post_over_budget)
	{
		*answered = shape_respond_error(sc, MHD_HTTP_SERVICE_UNAVAILABLE,
										"{\"message\":\"The server holds as many request bodies as it takes at once, please retry\"}",
										1);
		return false;
	}
	/* the worker's parsers take text of the database's encoding, UTF-8 */
	if (sc->post && sc->post_body != NULL && strlen(sc->post_body) != sc->post_len)
	{
		*answered = shape_respond_error(sc, MHD_HTTP_BAD_REQUEST,
										"{\"error\":\"Invalid JSON in request body\","
										"\"details\":\"The body contains a NUL byte\"}", 0);
		return false;
	}
	if (sc->post && sc->post_body != NULL && !utf8_is_valid(sc->post_body, sc->post_len))
	{
		*answered = shape_respond_error(sc, MHD_HTTP_BAD_REQUEST,
										"{\"error\":\"Invalid JSON in request body\","
										"\"details\":\"The body is not valid UTF-8\"}", 0);
		return false;
	}
	if (in == NULL && (in = calloc(1, sizeof(SubsetRequest))) == NULL)
	{
		*answered = MHD_NO;
		return false;
	}
	sc->query.subset_in = NULL;
	sc->request.subset = in;
	in->cell = -1;
	cell = sc->server->subsets ?
		subset_claim(sc->server->subsets, sc->client_key, &ticket) :
		SUBSET_CLAIM_FULL;
	if (cell < 0)
	{
		char		body[160];

		if (cell == SUBSET_CLAIM_CLIENT_FULL)
			snprintf(body, sizeof(body),
					 "{\"message\":\"This client has %d subset queries running, as many as one client may, please retry\"}",
					 SUBSET_PER_CLIENT_MAX);
		else
			snprintf(body, sizeof(body),
					 "{\"message\":\"%d subset queries are running, as many as the server takes at once, please retry\"}",
					 SUBSET_RESULTS_MAX);
		*answered = shape_respond_error(sc, MHD_HTTP_SERVICE_UNAVAILABLE, body, 1);
		return false;
	}
	in->cell = cell;
	in->ticket = ticket;
	in->offset_now = sc->query.offset_now;
	if (sc->query.handle != NULL && (in->handle = strdup(sc->query.handle)) == NULL)
	{
		*answered = MHD_NO;
		return false;
	}
	if (sc->post)
	{
		/* only the body counts: subset__* parameters of a POST are ignored */
		free(in->where);
		free(in->params);
		free(in->limit);
		free(in->offset);
		free(in->order_by);
		in->where = in->params = in->limit = in->offset = in->order_by = NULL;
		/* the body moves to the inputs; its share of the budget stays with the connection */
		in->body = sc->post_body ? sc->post_body : strdup("{}");
		sc->post_body = NULL;
		if (in->body == NULL)
		{
			*answered = MHD_NO;
			return false;
		}
	}
	return true;
}

/*
 * The main thread handed the request back with the cell's answer in:
 * sends it.
 */
enum MHD_Result
subset_respond(ShapeConn *sc)
{
	HttpServer *server = sc->server;
	SubsetRequest *in = sc->request.subset;
	const ShapeLog *log = shape_conn_log(sc);
	const ShapeLogArena *arena = server->shapes->arena;
	SlogPublished pub;
	SlogRecordHeader first;
	char	   *head = NULL;
	char		offset_text[LOG_OFFSET_TEXT_LEN];
	SubsetOutcome outcome;
	uint64_t	size;
	struct MHD_Response *response;
	enum MHD_Result ret;

	if (!subset_finished(server->subsets, in->cell, in->ticket, &outcome))
		return shape_respond_error(sc, MHD_HTTP_SERVICE_UNAVAILABLE,
								   "{\"message\":\"The subset query did not finish, please retry\"}", 5);
	slog_read_published(log, &pub);
	memset(&first, 0, sizeof(first));
	if (pub.data_end > 0)
	{
		slog_read_header(arena, log, 0, &first);
		head = malloc(sizeof(subset_metadata_open) + first.len + sizeof(subset_data_open));
		if (head == NULL)
			return MHD_NO;
		memcpy(head, subset_metadata_open, sizeof(subset_metadata_open) - 1);
		slog_copy_out(arena, log, sizeof(SlogRecordHeader),
					  head + sizeof(subset_metadata_open) - 1, first.len);
		head[sizeof(subset_metadata_open) - 1 + first.len] = '\0';
	}
	if (outcome.reason != REFUSAL_NONE)
	{
		/* record 0, when there is one, is the refusal's text */
		Refusal		refused = {0};

		refused.reason = (RefusalReason) outcome.reason;
		refused.field = outcome.field[0] ? outcome.field : NULL;	/* borrowed */
		refused.text = head ? head + sizeof(subset_metadata_open) - 1 : NULL;	/* borrowed */
		refused.number = outcome.number;
		refused.paging = outcome.paging;
		ret = shape_respond_refusal(sc, &refused);
		free(head);
		return ret;
	}
	if (head == NULL)
		return MHD_NO;			/* a finished answer always has its metadata */

	memcpy(head + sizeof(subset_metadata_open) - 1 + first.len, subset_data_open,
		   sizeof(subset_data_open));
	sc->body.head = head;
	sc->body.head_len = strlen(head);
	sc->body.tail_len = (size_t) snprintf(sc->body.tail, sizeof(sc->body.tail), "]}");
	slog_cursor_init(arena, log, &sc->body.records, slog_record_span(first.len),
					 pub.data_end, LOG_OFFSET_BEFORE_ALL);
	shape_conn_responded(sc);
	conn_set_activity(&server->conns, sc->conn_slot, CONN_ACTIVITY_STREAMING);

	if (in->offset_now && in->log_end[0] != '\0')
		snprintf(offset_text, sizeof(offset_text), "%s", in->log_end);
	else
		log_offset_format(sc->query.offset, offset_text, sizeof(offset_text));
	size = sc->head_only ? 0 : shape_body_measure(sc);
	if (size == SHAPE_BODY_UNREADABLE)
		return MHD_NO;			/* a subset's log is never on disk */
	response = sc->head_only ? MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT) :
		shape_body_response(sc, size);
	if (response == NULL)
		return MHD_NO;
	MHD_add_response_header(response, "content-type", "application/json; charset=utf-8");
	MHD_add_response_header(response, "electric-server", SERVER_NAME);
	MHD_add_response_header(response, "electric-handle", sc->request.result.handle);
	MHD_add_response_header(response, "electric-offset", offset_text);
	if (sc->request.result.schema_json != NULL)
		MHD_add_response_header(response, "electric-schema", sc->request.result.schema_json);
	MHD_add_response_header(response, "electric-snapshot", "true");
	MHD_add_response_header(response, "cache-control", "no-cache");
	http_add_cors_headers(response, sc->connection);
	ret = http_queue(sc->connection, MHD_HTTP_OK, response,
					 size <= server->write_piece_size ? size : 0);
	MHD_destroy_response(response);
	return ret;
}

/* At the end of the request: the cell and the inputs go. */
void
subset_conn_free(ShapeConn *sc)
{
	SubsetRequest *in = sc->request.subset;

	subset_drop_body(sc);		/* the budget; and the body, if it did not move */
	if (in == NULL)
		return;
	if (in->cell >= 0)
		subset_release(sc->server->subsets, sc->server->shapes->arena, in->cell);
	subset_request_free(in);
	sc->request.subset = NULL;
}
