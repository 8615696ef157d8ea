/*-------------------------------------------------------------------------
 *
 * waiters.h
 *		Parked connections: per-shape wait lists and long-poll deadlines.
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

/* What a parked connection embeds. */
typedef struct Waiter
{
	struct MHD_Connection *connection;
	_Atomic int parked;			/* 1 while suspended here; whoever clears it resumes */
	uint32_t	slot;			/* the wait list it is on */
	bool		in_list;		/* guarded by that list's lock */
	struct Waiter *prev;		/* ... */
	struct Waiter *next;		/* ... */
	int64_t		deadline_ms;	/* monotonic; 0: no deadline */
	int			heap_index;		/* guarded by the timer lock; -1: not in the heap */
	bool		timed_out;		/* set by the timer before it resumes */
	struct Waiter *due_next;	/* the timer thread's own chain of expired ones */
} Waiter;

typedef struct WaitList
{
	pthread_mutex_t lock;
	Waiter	   *head;
} WaitList;

typedef struct Waiters
{
	uint32_t	nslots;
	WaitList   *lists;			/* one per shape slot */
	pthread_mutex_t timer_lock;
	pthread_cond_t timer_cond;
	Waiter	  **heap;			/* min-heap on deadline_ms, guarded by timer_lock */
	int			heap_len;
	int			heap_cap;
	bool		timer_started;
	_Atomic bool stopping;
	pthread_t	timer_thread;
} Waiters;

extern int	waiters_init(Waiters *w, uint32_t nslots);
extern int	waiters_start_timer(Waiters *w);
extern void waiters_destroy(Waiters *w);

/*
 * Parks `waiter` on `slot` (suspending its connection) unless `ready(arg)`,
 * checked under the list's lock, says there is something to answer, or the
 * server is stopping.  Returns true when parked.  Call only from the
 * connection's own libmicrohttpd callback.
 */
extern bool waiters_park(Waiters *w, Waiter *waiter, uint32_t slot, int64_t deadline_ms,
						 bool (*ready) (void *arg), void *arg);

/* Resumes everything parked on `slot`. */
extern void waiters_wake(Waiters *w, uint32_t slot);

/* Stops parking and resumes everything. */
extern void waiters_wake_all_and_stop(Waiters *w);

extern int64_t waiters_now_ms(void);

#endif							/* WAITERS_H */
