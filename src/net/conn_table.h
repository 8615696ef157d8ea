/*-------------------------------------------------------------------------
 *
 * conn_table.h
 *		One slot per open TCP connection: generation, socket, deadlines.
 *
 * See conn_table.c for the slot life cycle and the notes on
 * synchronization.
 *
 * IDENTIFICATION
 *	  src/net/conn_table.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef CONN_TABLE_H
#define CONN_TABLE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "conn_activity.h"

#define CONN_PEER_LEN		64
#define CONN_HANDLE_LEN		48
#define CONN_NO_SLOT		UINT32_MAX

typedef enum ConnState
{
	CONN_SLOT_FREE = 0,
	CONN_SLOT_OPEN,				/* a live connection */
	CONN_SLOT_REAPED			/* shut down by the deadline thread, not closed yet */
} ConnState;

struct Waiter;
struct ResolvedShape;

typedef struct ConnSlot
{
	/*
	 * The connection's own thread writes these, on a line of their own.
	 * Its deadlines are in its ConnActivity entry (shared memory): there,
	 * write_armed_ms is when the pending piece was handed over (0: none),
	 * request_armed_ms when it began waiting for a request (0: one is in).
	 */
	_Alignas(128) uint32_t query_strings;	/* keys and values decoded for the current
								 * request; the connection's thread only */
	uint32_t	target_len;		/* bytes of the current request's target */
	struct ResolvedShape *resolved; /* its last resolution (resolved_shapes.c) */
	bool		query_seen;		/* its target showed a "?" to the URI callback */
	bool		query_refused;	/* its arguments were cut short: answer 400 */
	/* the current request, for the metrics its end adds to (http_request.c) */
	int64_t		req_started_us; /* monotonic */
	uint64_t	req_bytes;		/* of the response body */
	uint16_t	req_status;		/* of the response queued; 0: none yet */
	uint8_t		req_route;		/* SmRoute */
	uint8_t		req_method;		/* SmMethod */
	uint8_t		req_kind;		/* SmKind */
	bool		req_head;		/* HEAD: no body goes out */

	/* Changed under `lock` only (open, close, reap, park, unpark). */
	_Alignas(128) pthread_mutex_t lock;
	_Atomic uint64_t gen_state; /* generation << 8 | ConnState */
	int			fd;
	struct Waiter *parked;		/* the waiter parked on this connection */
	bool		watched;		/* its socket is in the park thread's epoll set */
	bool		peer_gone;		/* the park thread saw the peer close it */
	char		peer[CONN_PEER_LEN];
	char		handle[CONN_HANDLE_LEN];	/* the shape being served, for logs */
	uint32_t	next_free;		/* free-list link, under the table's lock */
} ConnSlot;

typedef struct ConnTable
{
	uint32_t	nslots;
	ConnSlot   *slots;
	ConnActivity *activity;		/* nslots entries, shared memory or our own */
	bool		owns_activity;	/* allocated by conn_table_init */
	pthread_mutex_t free_lock;	/* guards free_head and next_free links */
	uint32_t	free_head;
	_Atomic int64_t write_timeout_ms;	/* 0: write deadlines disabled */
	_Atomic int64_t request_timeout_ms; /* 0: request deadlines disabled */
} ConnTable;

extern int	conn_table_init(ConnTable *table, uint32_t nslots, ConnActivity *shared);
extern void conn_table_destroy(ConnTable *table);

/* libmicrohttpd's connection callbacks: STARTED and CLOSED. */
extern uint32_t conn_table_open(ConnTable *table, int fd, const char *peer);
extern void conn_table_close(ConnTable *table, uint32_t slot);

extern void conn_table_set_handle(ConnTable *table, uint32_t slot, const char *handle);
extern uint64_t conn_table_generation(ConnTable *table, uint32_t slot);

static inline int64_t
conn_now_coarse_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/*
 * The write path: a piece was handed to the socket (arm), or the next one
 * is being asked for or the response ended (clear).  One relaxed store to
 * the connection's own cache line; no lock, no message.  The slot keeps
 * when the piece was handed over, not a deadline, so that the deadline
 * thread applies the timeout in force when it looks: a reload that lowers
 * shape_sync.stalled_serve_timeout reaches writes already pending.
 */
static inline void
conn_deadline_arm(ConnTable *table, uint32_t slot)
{
	if (slot == CONN_NO_SLOT)
		return;
	atomic_store_explicit(&table->activity[slot].write_armed_ms, conn_now_coarse_ms(),
						  memory_order_relaxed);
}

static inline void
conn_deadline_clear(ConnTable *table, uint32_t slot)
{
	if (slot == CONN_NO_SLOT)
		return;
	atomic_store_explicit(&table->activity[slot].write_armed_ms, 0, memory_order_relaxed);
}

/*
 * The request path: the connection starts waiting for a request (it was
 * accepted, which conn_table_open does, or its previous response ended:
 * arm), or a whole request has arrived (clear).  The same single relaxed
 * store on the same cache line as the write path, and, as there, the
 * deadline thread applies shape_sync.request_header_timeout as in force
 * when it looks.
 */
static inline void
conn_request_arm(ConnTable *table, uint32_t slot)
{
	if (slot == CONN_NO_SLOT)
		return;
	atomic_store_explicit(&table->activity[slot].request_armed_ms, conn_now_coarse_ms(),
						  memory_order_relaxed);
}

static inline void
conn_request_clear(ConnTable *table, uint32_t slot)
{
	if (slot == CONN_NO_SLOT)
		return;
	atomic_store_explicit(&table->activity[slot].request_armed_ms, 0, memory_order_relaxed);
}

/* What the connection does now, for shape_sync.connections. */
static inline void
conn_set_activity(ConnTable *table, uint32_t slot, ConnActivityState state)
{
	if (slot != CONN_NO_SLOT)
		conn_activity_set_state(&table->activity[slot], state);
}

/* Response bytes handed to the socket. */
static inline void
conn_note_sent(ConnTable *table, uint32_t slot, uint64_t n)
{
	if (slot != CONN_NO_SLOT)
		conn_activity_add_sent(&table->activity[slot], n);
}

#endif							/* CONN_TABLE_H */
