/*-------------------------------------------------------------------------
 *
 * deadline.h
 *		The deadline thread: closes connections whose writes stall, or whose
 *		requests do not arrive in time.
 *
 * IDENTIFICATION
 *	  src/net/deadline.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef DEADLINE_H
#define DEADLINE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "admission.h"
#include "conn_table.h"

typedef struct DeadlineWatch
{
	ConnTable  *conns;
	_Atomic bool stopping;
	bool		started;
	pthread_t	thread;
	pthread_mutex_t lock;		/* only for the sleep */
	pthread_cond_t wake;
} DeadlineWatch;

extern int	deadline_start(DeadlineWatch *watch, ConnTable *conns);
extern void deadline_stop(DeadlineWatch *watch);

/* One sweep at `now_ms`; returns how many connections it reaped. */
extern int	deadline_sweep(DeadlineWatch *watch, int64_t now_ms);

#endif							/* DEADLINE_H */
