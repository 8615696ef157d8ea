/*-------------------------------------------------------------------------
 *
 * http_conn.h
 *		The server's state and a request's state, shared by the files of the
 *		HTTP server.
 *
 * struct HttpServer is the running server: its daemons, the tables it
 * shares with the main thread (shapes, request queue, admission, subset
 * results), its own tables (connections, waiters, resolved schemas, shared
 * responses, access rules) and the runtime settings the main thread
 * updates.  struct ShapeConn is one /v1/shape request, from its first call
 * to its completion: its parsed query, the hand-off to the main thread, the
 * pins it holds and the cursor of its body.  Who may touch which field
 * when: see the notes on synchronization in http_server.c, http_request.c
 * and waiters.c.
 *
 * This header declares no functions: each file of the server has its own
 * header (http_respond.h, shape_answer.h, shape_serve.h, sse_stream.h,
 * subset_serve.h, http_request.h), so the include graph shows who calls
 * whom.
 *
 * IDENTIFICATION
 *	  src/net/http_conn.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef HTTP_CONN_H
#define HTTP_CONN_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "access_policy.h"
#include "admission.h"
#include "deadline.h"
#include "request_parse.h"
#include "request_queue.h"
#include "resolved_shapes.h"
#include "server_metrics.h"
#include "shape_log.h"
#include "shape_table.h"
#include "shared_responses.h"
#include "subset_results.h"
#include "waiters.h"

#define HTTP_MAX_DAEMONS	8
#define HTTP_MAX_QUERY_ARGS 1024	/* query arguments a request may carry */
/* the build passes the version of shape_sync.control */
#ifndef SHAPE_SYNC_VERSION
#error "SHAPE_SYNC_VERSION is not defined: build with the Makefile"
#endif
#define SERVER_NAME			"shape_sync/" SHAPE_SYNC_VERSION

typedef struct HttpServer HttpServer;
typedef struct ShapeConn ShapeConn;

/* subset_serve.c: subset queries (GET subset__*, POST) */
#define SUBSET_BODY_MAX		(256 * 1024)	/* bytes of a POST body */
#define SUBSET_BODIES_MAX	(16 * 1024 * 1024)	/* ... of all held at once */
#define SUBSET_CLIENT_BODIES_MAX (SUBSET_BODIES_MAX / 8)	/* ... of one client's */
#define SUBSET_CLIENT_BUCKETS 1024	/* clients' shares, counted by hash */

struct HttpServer
{
	struct MHD_Daemon *daemons[HTTP_MAX_DAEMONS];
	int			ndaemons;
	ShapeTable *shapes;
	RequestQueue *queue;
	size_t		write_piece_size;
	size_t		connection_memory;	/* libmicrohttpd's pool per connection */
	size_t		socket_send_buffer;	/* SO_SNDBUF of each connection; 0: kernel's */
	ConnTable	conns;			/* one slot per open TCP connection */
	DeadlineWatch deadlines;	/* reaps stalled serves */
	Admission  *admission;		/* in shared memory */
	SubsetResults *subsets;		/* in shared memory, or NULL */
	_Atomic size_t post_bytes;	/* POST bodies held, all connections: at most
								 * SUBSET_BODIES_MAX */
	/* ... by client key, hashed: at most SUBSET_CLIENT_BODIES_MAX each */
	_Atomic size_t post_client_bytes[SUBSET_CLIENT_BUCKETS];
	uint64_t	post_client_seed;	/* random, set at start: keys the buckets
									 * (subset_client_bucket) */
	Waiters		waiters;		/* parked connections, by shape slot */
	ResolvedSchemas schemas;	/* electric-schema per shape slot */
	ResolvedShared resolutions; /* the last resolution of each definition */
	SharedResponses shared;		/* a live response per shape slot */
	AccessPolicy access;		/* secret, loopback-only, Host, Origin */
	bool		access_ready;	/* `access` was initialised */
	size_t		max_uri_len;	/* longer request targets get 414 */
	unsigned	max_query_args; /* more arguments get 400 */
	_Atomic int cache_max_age;
	_Atomic int cache_stale_age;
	_Atomic int long_poll_timeout_ms;
	_Atomic int snapshot_wait_timeout_ms;	/* 0: none */
	_Atomic bool allow_shape_deletion;
	_Atomic int max_where_length;	/* bytes */
	_Atomic bool stopping;		/* set once, by http_server_stop */
	_Atomic int unanswered;		/* shape requests not completed yet (a queued
								 * answer is not sent until they are) */
	unsigned	connection_limit;	/* shape_sync.max_connections, as it fits */
	_Atomic unsigned over_limit;	/* open connections past it (HTTP_OVER_LIMIT_CONNECTIONS) */
	_Atomic uint64_t over_limit_turned_away;	/* 503s and closes, all told */
	_Atomic int64_t over_limit_logged_ms;	/* when it was last logged */
	_Atomic uint64_t freed_bytes;	/* about what connections and response
									 * buffers gave back to malloc, all told */
	uint64_t	freed_at_release;	/* freed_bytes at the last release (main thread) */
	int64_t		released_ms;	/* and when it was */
};

typedef enum ShapeConnPhase
{
	CONN_NEW,					/* first call: nothing done yet */
	CONN_RESOLVING,				/* suspended; the main thread has the request */
	CONN_RESOLVED,				/* the shape is known (and pinned) */
	CONN_WAITING,				/* suspended on the shape's wait list */
	CONN_RESPONDED				/* a response is queued */
} ShapeConnPhase;

/* What a request should do, given the state of its shape's log. */
typedef enum ServeDecision
{
	SERVE_RESPOND,				/* data, an error, or a rotation: answer now */
	SERVE_WAIT,					/* the snapshot has not reached the offset */
	SERVE_WAIT_LIVE,			/* live, at the end of the log */
	SERVE_WAIT_BOUNDS			/* the offset is past the end of the log */
} ServeDecision;

/* The body of a shape response, produced piece by piece. */
typedef struct BodyCursor
{
	SlogCursor	records;		/* the range's records */
	char	   *head;			/* malloc'd opening, or NULL for "[" */
	size_t		head_len;
	size_t		head_off;
	bool		opened;			/* the opening sent */
	bool		any;			/* a message was sent (commas) */
	char		tail[192];		/* ",{up-to-date...}]" or "]" */
	size_t		tail_len;
	size_t		tail_off;
} BodyCursor;

/* A Server-Sent Events response (live_sse=true), produced piece by piece. */
typedef struct SseStream
{
	bool		hold;			/* keep the stream open for new changes */
	bool		parked;			/* it waited for news since its last range */
	bool		finished;
	LogOffset	after;			/* everything up to here has been sent */
	SlogCursor	records;		/* the current range's records */
	bool		in_range;		/* a range is being sent */
	LogOffset	range_end;		/* the current range's chunk end */
	bool		range_up_to_date;	/* the range reaches the end of the log */
	char		pending[256];	/* framing and control events waiting to go */
	size_t		pending_len;
	size_t		pending_off;
	int64_t		end_ms;			/* the stream closes then (monotonic) */
	int64_t		keepalive_ms;	/* next keep-alive comment, if nothing else */
	uint64_t	seen_lsn;		/* last_seen_lsn before the range was located */
} SseStream;

/* Per-request state for /v1/shape, owned by the connection. */
struct ShapeConn
{
	HttpServer *server;
	struct MHD_Connection *connection;
	ShapeConnPhase phase;
	bool		head_only;		/* HEAD request */
	bool		delete_shape;	/* DELETE request */
	bool		post;			/* POST request: a subset query in its body */
	char	   *post_body;		/* malloc'd, NUL-terminated */
	size_t		post_len;
	bool		post_too_large; /* over SUBSET_BODY_MAX: 413 */
	bool		post_over_budget;	/* SUBSET_BODIES_MAX reached: 503 */
	bool		post_over_share;	/* SUBSET_CLIENT_BODIES_MAX reached: 503 */
	uint64_t	client_key;		/* who the request is from (AccessClient.key) */
	ShapeQuery	query;
	ShapeRequest request;		/* hand-off to the main thread */
	char	   *def_key;		/* resolved_shape_key of the definition */
	size_t		def_key_len;
	uint32_t	conn_slot;		/* the connection's ConnTable slot */
	AdmissionKind admitted;		/* the admission slot held, released at the end */
	AdmissionKind rejected_kind;	/* the kind that was full, for the 503 */
	bool		pinned;			/* holds request.result.slot's log */
	bool		finding_successor;	/* resolving again for a 409's handle */
	char		gone_handle[SHAPE_HANDLE_LEN];	/* ... of the shape that went */
	bool		log_pinned;		/* holds a version of that log ... */
	uint32_t	log_version;	/* ... this one (shape_table_log_pin) */
	Waiter		waiter;			/* while parked (CONN_WAITING) */
	ServeDecision parked_for;	/* the kind of wait it parked for last */
	bool		parked_live;	/* it parked at the end of the log (metrics) */
	int64_t		deadline_ms;	/* of a live or out-of-bounds wait, once set */
	int64_t		snapshot_deadline_ms;	/* of a snapshot wait, once set */
	uint64_t	seen_lsn;		/* last_seen_lsn before the range was located */
	size_t		body_buffer;	/* bytes of the response's own body buffer */
	BodyCursor	body;
	SseStream	sse;			/* when live_sse */
};

/* The monotonic clock in microseconds (shape_table's published_us too). */
static inline int64_t
http_monotonic_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

#endif							/* HTTP_CONN_H */
