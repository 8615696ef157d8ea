/*-------------------------------------------------------------------------
 *
 * waiters.h
 *		Parked connections and the park thread that resumes them.
 *
 * See waiters.c for the protocol and the notes on synchronization.
 *
 * IDENTIFICATION
 *	  src/net/waiters.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef WAITERS_H
#define WAITERS_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "conn_table.h"
#include "shape_table.h"

/* What a parked request embeds. */
typedef struct Waiter
{
	struct MHD_Connection *connection;
	uint32_t	conn_slot;		/* its ConnTable slot, or CONN_NO_SLOT */
	_Atomic int parked;			/* 1 while suspended here */
	uint32_t	slot;			/* the shape slot it waits on */
	bool		in_list;		/* guarded by that shape's list lock */
	struct Waiter *prev;		/* ... */
	struct Waiter *next;		/* ... */
	int64_t		deadline_ms;	/* monotonic; 0: none */
	int			heap_index;		/* guarded by timer_lock; -1: not in the heap */
	bool		watched;		/* its socket was added to the epoll set for
								 * this park only (its slot's lock) */
	/* set by the park thread before it resumes the connection */
	bool		timed_out;
	bool		client_gone;
} Waiter;

typedef struct WaitList
{
	pthread_mutex_t lock;
	Waiter	   *head;
	_Atomic uint32_t *parked;	/* how many are on it, for SQL: in the shape's
								 * slot (shared memory), or NULL */
} WaitList;

typedef struct Waiters
{
	uint32_t	nslots;
	WaitList   *lists;			/* one per shape slot */
	ConnTable  *conns;
	pthread_mutex_t timer_lock;
	Waiter	  **heap;			/* min-heap on deadline_ms, guarded by timer_lock */
	int			heap_len;
	int			heap_cap;
	int			epoll_fd;		/* parked sockets, and notify_fd */
	int			notify_fd;		/* eventfd: shapes changed, deadline, stop */
	_Atomic uint64_t *changed;	/* one bit per shape slot */
	_Atomic bool stopping;
	bool		thread_started;
	pthread_t	thread;
	_Atomic uint64_t clients_gone;	/* parked clients that went away */
} Waiters;

extern int	waiters_init(Waiters *w, uint32_t nslots, ConnTable *conns,
						 ShapeTable *shapes);
extern int	waiters_start(Waiters *w);
extern void waiters_stop(Waiters *w);
extern void waiters_destroy(Waiters *w);

/*
 * A new connection's socket joins the park thread's epoll set for as long
 * as it is open (libmicrohttpd's connection-started callback).
 */
extern void waiters_watch(Waiters *w, uint32_t conn_slot);

/*
 * Parks `waiter` on shape `slot` (suspending its connection) unless
 * `ready(arg)`, checked under the list's lock, says there is something to
 * answer, the server is stopping, or the client is gone already (then
 * waiter->client_gone is set).  Returns true when parked.  Call only from
 * the connection's own libmicrohttpd callback.
 */
extern bool waiters_park(Waiters *w, Waiter *waiter, uint32_t slot, int64_t deadline_ms,
						 bool (*ready) (void *arg), void *arg);

/* Shape `slot` changed: the park thread resumes its waiters.  O(1). */
extern void waiters_notify(Waiters *w, uint32_t slot);

extern int64_t waiters_now_ms(void);

#endif							/* WAITERS_H */
