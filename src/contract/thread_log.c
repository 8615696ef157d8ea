/*-------------------------------------------------------------------------
 *
 * thread_log.c
 *		Log lines from threads, handed to the main thread for elog().
 *
 * This file runs on libmicrohttpd threads and must not call into
 * PostgreSQL.  elog() longjmps on the main thread's stack and uses memory
 * contexts, so threads may not call it.  They format a line into a fixed
 * ring instead, and the main loop drains the ring into the server log.  A
 * full ring drops lines (counting them) rather than blocking a thread.
 *
 * Notes on synchronization
 * ------------------------
 * - The ring is guarded by one mutex, held only to copy a line in or out.
 *   Logging is rare (reaps, errors), so the mutex is never hot.
 * - The drain copies lines out under the mutex and calls `emit` without it,
 *   so elog() never runs with the mutex held.
 *
 * IDENTIFICATION
 *	  src/contract/thread_log.c
 *
 *-------------------------------------------------------------------------
 */
#include "thread_log.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#ifdef POSTGRES_H
#error "thread_log.c runs on HTTP threads and must not include postgres.h"
#endif

typedef struct ThreadLogLine
{
	ThreadLogLevel level;
	char		text[THREAD_LOG_LINE];
} ThreadLogLine;

static pthread_mutex_t tl_lock = PTHREAD_MUTEX_INITIALIZER;
static ThreadLogLine tl_ring[THREAD_LOG_SLOTS];
static unsigned tl_head;		/* next line to drain */
static unsigned tl_count;		/* lines in the ring */
static unsigned tl_dropped;		/* since the last drain */

void
thread_log_v(ThreadLogLevel level, const char *fmt, va_list ap)
{
	char		line[THREAD_LOG_LINE];

	vsnprintf(line, sizeof(line), fmt, ap);
	pthread_mutex_lock(&tl_lock);
	if (tl_count == THREAD_LOG_SLOTS)
		tl_dropped++;
	else
	{
		ThreadLogLine *slot = &tl_ring[(tl_head + tl_count) % THREAD_LOG_SLOTS];

		slot->level = level;
		memcpy(slot->text, line, sizeof(line));
		tl_count++;
	}
	pthread_mutex_unlock(&tl_lock);
}

void
thread_log(ThreadLogLevel level, const char *fmt,...)
{
	va_list		ap;

	va_start(ap, fmt);
	thread_log_v(level, fmt, ap);
	va_end(ap);
}

void
thread_log_drain(void (*emit) (ThreadLogLevel level, const char *line))
{
	for (;;)
	{
		ThreadLogLine line;

		pthread_mutex_lock(&tl_lock);
		if (tl_count == 0)
		{
			pthread_mutex_unlock(&tl_lock);
			return;
		}
		line = tl_ring[tl_head];
		tl_head = (tl_head + 1) % THREAD_LOG_SLOTS;
		tl_count--;
		pthread_mutex_unlock(&tl_lock);
		emit(line.level, line.text);
	}
}

unsigned
thread_log_dropped(void)
{
	unsigned	n;

	pthread_mutex_lock(&tl_lock);
	n = tl_dropped;
	tl_dropped = 0;
	pthread_mutex_unlock(&tl_lock);
	return n;
}
