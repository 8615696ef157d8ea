/*-------------------------------------------------------------------------
 *
 * thread_log.h
 *		Log lines from threads, handed to the main thread for elog().
 *
 * IDENTIFICATION
 *	  src/contract/thread_log.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef THREAD_LOG_H
#define THREAD_LOG_H

#include <stdarg.h>

typedef enum ThreadLogLevel
{
	THREAD_LOG_DEBUG,
	THREAD_LOG_LOG,
	THREAD_LOG_WARNING
} ThreadLogLevel;

#define THREAD_LOG_LINE		512
#define THREAD_LOG_SLOTS	256

extern void thread_log(ThreadLogLevel level, const char *fmt,...)
			__attribute__((format(printf, 2, 3)));
extern void thread_log_v(ThreadLogLevel level, const char *fmt, va_list ap);

/* Main thread: hands each pending line to `emit`, oldest first. */
extern void thread_log_drain(void (*emit) (ThreadLogLevel level, const char *line));

/* Lines dropped because the ring was full since the last drain. */
extern unsigned thread_log_dropped(void);

#endif							/* THREAD_LOG_H */
