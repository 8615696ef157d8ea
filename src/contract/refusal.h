/*-------------------------------------------------------------------------
 *
 * refusal.h
 *		Why a request is not served, and the facts its answer quotes.
 *
 * The PostgreSQL side decides that a request is refused and why; the HTTP
 * side decides what the client reads (src/net/refusal_render.c: the
 * status, the JSON body in Electric's shape, retry-after).  What crosses
 * between them is a reason and its facts: which request field was wrong,
 * PostgreSQL's own words where the answer quotes them (an error's message,
 * detail and hint), a number (a limit, a count, a timeout), and a
 * retry-after.  No sentence of the answer, no JSON and no HTTP status is
 * written on the PostgreSQL side, and decisions there test reasons; the
 * sentence of a failed shape is made by refusal_failure_sentence, which
 * the server log's line and the answer share.
 *
 * A Refusal travels in a ShapeResolution (shape_request.h), so its
 * strings are malloc'd and freed by refusal_free (shape_resolution_free
 * calls it), on either side.  In shared memory the facts are kept in
 * fixed fields instead: ShapeSlot.error_reason, .error_number and .error
 * (a failed shape, shape_table.h), and a SubsetCell's outcome with its text in
 * the cell's log (subset_results.h).
 *
 * IDENTIFICATION
 *	  src/contract/refusal.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef REFUSAL_H
#define REFUSAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * Each reason names the facts it uses; what the client is then told is
 * refusal_render's business.  Append new reasons anywhere: the values are
 * never stored across a restart.
 */
typedef enum RefusalReason
{
	REFUSAL_NONE = 0,			/* not refused */

	/* The definition, as the main thread resolves it (registry.c) */
	REFUSAL_INVALID,			/* `field` is wrong; `text` says how */
	REFUSAL_FORBIDDEN,			/* shape_sync.role may not read what `field`
								 * names (NULL: the table); `text` says what */
	REFUSAL_HANDLE_MISMATCH,	/* DELETE: definition and handle name
								 * different shapes */
	REFUSAL_NO_SUCH_SHAPE,		/* DELETE: no such shape */
	REFUSAL_NOT_RESOLVED,		/* resolving failed, not the client's fault (a
								 * lock not granted, shape_sync.role
								 * unusable): `text`, PostgreSQL's message */
	REFUSAL_SKIPPING_WAL,		/* the decoder skips the WAL written before
								 * the server started: no new shape yet */
	REFUSAL_CLIENT_NEW_SHAPES,	/* the client made `number` new shapes this
								 * minute, its limit; `retry_after_s` */
	REFUSAL_CLIENT_REFUSED,		/* `number` of the client's definitions were
								 * refused this minute, its limit;
								 * `retry_after_s` */
	REFUSAL_SHAPES_FULL,		/* `number` shapes (shape_sync.max_shapes),
								 * all in active use */
	REFUSAL_CONCURRENT_LIMIT,	/* admission of kind `field` is at its
								 * limit; the HTTP side adds `number` (the
								 * limit) and `retry_after_s` */

	/*
	 * A shape whose snapshot or stream failed (ShapeSlot's error_reason,
	 * error_number and error, and the registry's memory of them); the
	 * plain-text sentence of each is refusal_failure_sentence's
	 */
	REFUSAL_SNAPSHOT_INVALID,	/* the client may narrow the shape: `text`,
								 * PostgreSQL's message, detail and hint */
	REFUSAL_SNAPSHOT_FORBIDDEN, /* shape_sync.role may not read it: `text` */
	REFUSAL_SNAPSHOT_UNAVAILABLE,	/* it may pass (memory): `text` */
	REFUSAL_SNAPSHOT_FAILED,	/* anything else: `text` */
	REFUSAL_SNAPSHOT_TIMEOUT,	/* past shape_sync.snapshot_statement_timeout,
								 * `number` ms */
	REFUSAL_SNAPSHOT_ROW_TOO_SLOW,	/* its where clause took longer than
									 * `number` ms on a row */
	REFUSAL_SNAPSHOT_ROW_FAILED,	/* its where clause failed on a row:
									 * `text` */
	REFUSAL_SNAPSHOT_CANCELLED, /* cancelled otherwise: it may pass */
	REFUSAL_SNAPSHOT_CONFLICT,	/* a serialization failure: `text` */
	REFUSAL_SNAPSHOT_TABLE_BUSY,	/* REPLICA IDENTITY FULL not set within
									 * `number` ms */
	REFUSAL_SNAPSHOT_WORKER_STOPPED,	/* the worker exited in the middle */
	REFUSAL_STREAM_CHANGE_TOO_SLOW, /* its where clause took longer than
									 * `number` ms on a change */
	REFUSAL_MUST_REFETCH,		/* the shape is made again, not failed (its
								 * table changed, its snapshot was
								 * interrupted): the client refetches */

	/* A subset query on the main thread (subset_jobs.c) */
	REFUSAL_SUBSET_SHAPE_DROPPED,	/* its shape was dropped meanwhile */
	REFUSAL_SUBSET_BUSY,		/* no room for its inputs now */
	REFUSAL_SUBSET_SHAPE_FAILED,	/* its shape's snapshot failed */
	REFUSAL_SUBSET_WAIT_TIMEOUT,	/* not done within
									 * shape_sync.snapshot_wait_timeout */
	REFUSAL_SUBSET_SHUTDOWN,	/* the worker stops */

	/* A subset query in a snapshot worker (subset_query.c) */
	REFUSAL_SUBSET_PAGING,		/* limit, offset or order_by: `paging` */
	REFUSAL_BODY_NOT_OBJECT,	/* the POST body is JSON but no object */
	REFUSAL_BODY_INVALID,		/* the POST body is no JSON: `text` */
	REFUSAL_SUBSET_INVALID,		/* subset `field` is wrong: `text` */
	REFUSAL_SUBSET_FORBIDDEN,	/* subset `field` reads what the role may
								 * not: `text` */
	REFUSAL_SUBSET_SHAPE_FORBIDDEN, /* the role may no longer read the
									 * shape's table: `text` */
	REFUSAL_SUBSET_TIMEOUT,		/* past shape_sync.subset_statement_timeout,
								 * `number` ms */
	REFUSAL_SUBSET_CANCELLED,	/* cancelled otherwise */
	REFUSAL_SUBSET_RETRY,		/* a failure that may pass (out of memory, a
								 * serialization failure): `text` */
	REFUSAL_SUBSET_TOO_LARGE,	/* over a limit (its answer's size): `text` */
	REFUSAL_SUBSET_ROW_FAILED,	/* its where clause failed on a row: `text` */
	REFUSAL_SUBSET_ROW_TOO_SLOW,	/* its where clause took longer than
									 * `number` ms on a row */
	REFUSAL_SUBSET_WORKER_STOPPED,	/* the worker exited in the middle */
	REFUSAL_SUBSET_FAILED,		/* anything else: `text` */
	REFUSAL_SUBSET_UNANSWERED,	/* never run: nobody waited for it */

	/* The HTTP side's own */
	REFUSAL_NOT_READY			/* the main thread never took the request */
} RefusalReason;

/* REFUSAL_SUBSET_PAGING: what is wrong, any of */
#define REFUSAL_PAGING_LIMIT_INVALID	0x01	/* limit is no whole number */
#define REFUSAL_PAGING_LIMIT_NOT_POSITIVE 0x02	/* ... or not over 0 */
#define REFUSAL_PAGING_OFFSET_INVALID	0x04	/* offset is no whole number */
#define REFUSAL_PAGING_OFFSET_NEGATIVE	0x08	/* ... or under 0 */
#define REFUSAL_PAGING_NO_ORDER_BY		0x10	/* limit or offset without
												 * order_by */

typedef struct Refusal
{
	RefusalReason reason;
	char	   *field;			/* malloc'd: the request field, or NULL */
	char	   *text;			/* malloc'd plain text, or NULL */
	int64_t		number;			/* a limit, a count, milliseconds */
	uint32_t	paging;			/* REFUSAL_PAGING_* */
	uint32_t	retry_after_s;	/* for an answer to retry: 0 takes the
								 * reason's own */
} Refusal;

/*
 * Sets the reason and copies the strings (either may be NULL); the other
 * facts are zeroed.  Whatever r held is freed first.  False when out of
 * memory, with r holding the reason and no strings.
 */
extern bool refusal_set(Refusal *r, RefusalReason reason, const char *field,
						const char *text);

/* Frees the strings and clears r to REFUSAL_NONE. */
extern void refusal_free(Refusal *r);

/* Room for a failed shape's sentence: its text (SHAPE_ERROR_LEN, 512) and the words around it */
#define REFUSAL_SENTENCE_MAX	1024

/*
 * The plain-text sentence of a failed shape's reason and facts (the
 * REFUSAL_SNAPSHOT_* and REFUSAL_STREAM_* reasons, and REFUSAL_MUST_REFETCH),
 * into buf (len bytes, NUL-terminated, cut if it must be): what its clients
 * read in the answer's message (refusal_render.c) and what the server log
 * says of it.  Other reasons get `text`, or "".
 */
extern void refusal_failure_sentence(RefusalReason reason, int64_t number, const char *text,
									 char *buf, size_t len);

/* Whether the reason is a failed snapshot's (a ShapeSlot's error_reason). */
static inline bool
refusal_is_snapshot_failure(RefusalReason reason)
{
	return reason >= REFUSAL_SNAPSHOT_INVALID && reason <= REFUSAL_MUST_REFETCH;
}

#endif							/* REFUSAL_H */
