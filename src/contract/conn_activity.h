/*-------------------------------------------------------------------------
 *
 * conn_activity.h
 *		What each HTTP connection is doing, in shared memory.
 *
 * See conn_activity.c for the design and the notes on synchronization.
 *
 * IDENTIFICATION
 *	  src/contract/conn_activity.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef CONN_ACTIVITY_H
#define CONN_ACTIVITY_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#define CONN_ACTIVITY_PEER_LEN		64
#define CONN_ACTIVITY_HANDLE_LEN	48

typedef enum ConnActivityState
{
	CONN_ACTIVITY_CLOSED = 0,	/* no connection in this slot */
	CONN_ACTIVITY_IDLE,			/* waiting for a request */
	CONN_ACTIVITY_RESOLVING,	/* the main thread resolves its shape */
	CONN_ACTIVITY_SNAPSHOT,		/* waiting for its shape's snapshot */
	CONN_ACTIVITY_WAITING,		/* live, parked until the log grows */
	CONN_ACTIVITY_STREAMING,	/* sending a response */
	CONN_ACTIVITY_SSE,			/* holding an SSE stream open */
	CONN_ACTIVITY_STATES
} ConnActivityState;

/*
 * One connection.  Every field is written by the thread that serves the
 * connection (open and close by libmicrohttpd's callbacks on that thread),
 * on lines of its own; any process reads.
 */
typedef struct ConnActivity
{
	/* the deadlines, as deadline.c reads them (see conn_table.h) */
	_Alignas(128) _Atomic int64_t write_armed_ms;	/* monotonic; 0: none */
	_Atomic int64_t request_armed_ms;	/* monotonic; 0: a request is in */
	_Atomic uint64_t bytes_sent;	/* response bytes, all requests */
	_Atomic uint32_t state;		/* ConnActivityState */
	_Atomic uint32_t text_seq;	/* seqlock over peer and handle: odd while written */
	_Atomic int64_t opened_us;	/* Unix epoch, microseconds */
	_Atomic int64_t state_since_us;	/* same clock */
	_Atomic uint64_t peer[CONN_ACTIVITY_PEER_LEN / 8];
	_Atomic uint64_t handle[CONN_ACTIVITY_HANDLE_LEN / 8];
} ConnActivity;

/* A consistent copy, for readers. */
typedef struct ConnActivityView
{
	ConnActivityState state;
	uint64_t	bytes_sent;
	int64_t		opened_us;
	int64_t		state_since_us;
	int64_t		write_age_ms;	/* -1: no write pending */
	char		peer[CONN_ACTIVITY_PEER_LEN];
	char		handle[CONN_ACTIVITY_HANDLE_LEN];
} ConnActivityView;

extern size_t conn_activity_size(uint32_t nslots);
extern void conn_activity_init(ConnActivity *a, uint32_t nslots);
extern void conn_activity_open(ConnActivity *a, const char *peer, int64_t now_ms);
extern void conn_activity_close(ConnActivity *a);
extern void conn_activity_set_handle(ConnActivity *a, const char *handle);
extern bool conn_activity_read(const ConnActivity *a, ConnActivityView *out, int64_t now_ms);
extern const char *conn_activity_state_name(ConnActivityState state);

static inline int64_t
conn_activity_unix_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static inline void
conn_activity_set_state(ConnActivity *a, ConnActivityState state)
{
	if (a == NULL || atomic_load_explicit(&a->state, memory_order_relaxed) == (uint32_t) state)
		return;
	atomic_store_explicit(&a->state_since_us, conn_activity_unix_us(), memory_order_relaxed);
	atomic_store_explicit(&a->state, (uint32_t) state, memory_order_relaxed);
}

static inline void
conn_activity_add_sent(ConnActivity *a, uint64_t n)
{
	if (a != NULL)
		atomic_store_explicit(&a->bytes_sent,
							  atomic_load_explicit(&a->bytes_sent, memory_order_relaxed) + n,
							  memory_order_relaxed);
}

#endif							/* CONN_ACTIVITY_H */
