/*
 * test_thread_log.c
 *		The ring of log lines threads hand to the main thread
 *		(src/contract/thread_log.c).
 */
#define _GNU_SOURCE
#include "unit.h"

#include <pthread.h>

#include "thread_log.h"

#define MAX_LINES 8192

static char *lines[MAX_LINES];
static ThreadLogLevel levels[MAX_LINES];
static int nlines;

static void
collect(ThreadLogLevel level, const char *line)
{
	if (nlines < MAX_LINES)
	{
		levels[nlines] = level;
		lines[nlines++] = strdup(line);
	}
}

static void
reset(void)
{
	for (int i = 0; i < nlines; i++)
		free(lines[i]);
	nlines = 0;
}

/* Empties the ring and the drop counter left by an earlier test. */
static void
start_clean(void)
{
	thread_log_drain(collect);
	(void) thread_log_dropped();
	reset();
}

TEST(lines_drain_in_order)
{
	start_clean();
	thread_log(THREAD_LOG_LOG, "first %d", 1);
	thread_log(THREAD_LOG_WARNING, "second %s", "two");
	thread_log(THREAD_LOG_DEBUG, "%s", "");
	thread_log_drain(collect);
	REQUIRE_EQ(nlines, 3);
	CHECK_STR_EQ(lines[0], "first 1");
	CHECK_EQ(levels[0], THREAD_LOG_LOG);
	CHECK_STR_EQ(lines[1], "second two");
	CHECK_EQ(levels[1], THREAD_LOG_WARNING);
	CHECK_STR_EQ(lines[2], "");
	CHECK_EQ(levels[2], THREAD_LOG_DEBUG);
	CHECK_EQ(thread_log_dropped(), 0);

	/* drained: nothing more */
	reset();
	thread_log_drain(collect);
	CHECK_EQ(nlines, 0);
	reset();
}

TEST(long_lines_truncate)
{
	char		big[2000];

	start_clean();
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	thread_log(THREAD_LOG_LOG, "%s", big);
	thread_log_drain(collect);
	REQUIRE_EQ(nlines, 1);
	CHECK_EQ(strlen(lines[0]), THREAD_LOG_LINE - 1);
	reset();
}

TEST(ring_overflow_drops_and_counts)
{
	start_clean();
	for (int i = 0; i < THREAD_LOG_SLOTS + 10; i++)
		thread_log(THREAD_LOG_LOG, "line %d", i);
	CHECK_EQ(thread_log_dropped(), 10);
	CHECK_EQ(thread_log_dropped(), 0);	/* reading the count resets it */
	thread_log_drain(collect);
	REQUIRE_EQ(nlines, THREAD_LOG_SLOTS);
	/* the oldest lines are kept, the newest dropped */
	CHECK_STR_EQ(lines[0], "line 0");
	CHECK_STR_EQ(lines[THREAD_LOG_SLOTS - 1], "line 255");
	for (int i = 0; i < nlines; i++)
	{
		char		want[32];

		snprintf(want, sizeof(want), "line %d", i);
		if (strcmp(lines[i], want) != 0)
		{
			FAIL("line %d is \"%s\"", i, lines[i]);
			break;
		}
	}
	reset();

	/* room again after the drain; the ring wraps around correctly */
	for (int round = 0; round < 3; round++)
	{
		for (int i = 0; i < 200; i++)
			thread_log(THREAD_LOG_LOG, "r%d-%d", round, i);
		thread_log_drain(collect);
		REQUIRE_EQ(nlines, 200);
		CHECK_STR_EQ(lines[0], round == 0 ? "r0-0" : round == 1 ? "r1-0" : "r2-0");
		CHECK_STR_EQ(lines[199], round == 0 ? "r0-199" : round == 1 ? "r1-199" : "r2-199");
		reset();
	}
	CHECK_EQ(thread_log_dropped(), 0);
}

/* emit runs without the ring's mutex held: it may log itself */
static int reentrant_calls;

static void
reentrant_emit(ThreadLogLevel level, const char *line)
{
	reentrant_calls++;
	if (strcmp(line, "outer") == 0)
		thread_log(THREAD_LOG_LOG, "inner");	/* deadlocks if the lock is held */
	collect(level, line);
}

static void *
reentrant_drain(void *arg)
{
	thread_log_drain(reentrant_emit);
	return NULL;
}

TEST(emit_runs_unlocked)
{
	pthread_t	th;
	struct timespec ts;

	start_clean();
	reentrant_calls = 0;
	thread_log(THREAD_LOG_LOG, "outer");
	pthread_create(&th, NULL, reentrant_drain, NULL);
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 10;
	if (pthread_timedjoin_np(th, NULL, &ts) != 0)
	{
		FAIL("thread_log_drain deadlocked when emit logged a line");
		return;					/* leave the thread stuck; the binary fails */
	}
	CHECK_EQ(reentrant_calls, 2);
	REQUIRE_EQ(nlines, 2);
	CHECK_STR_EQ(lines[0], "outer");
	CHECK_STR_EQ(lines[1], "inner");
	reset();
}

#define LOGGERS 4
#define LINES_EACH 2000

static void *
logger(void *arg)
{
	int			id = (int) (intptr_t) arg;

	for (int i = 0; i < LINES_EACH; i++)
		thread_log(THREAD_LOG_LOG, "t%d %d", id, i);
	return NULL;
}

TEST(concurrent_loggers)
{
	pthread_t	th[LOGGERS];
	int			next[LOGGERS] = {0};
	unsigned	dropped = 0;
	int			got = 0;

	start_clean();
	for (int i = 0; i < LOGGERS; i++)
		pthread_create(&th[i], NULL, logger, (void *) (intptr_t) i);
	for (int spin = 0; spin < 100000 && got + (int) dropped < LOGGERS * LINES_EACH; spin++)
	{
		thread_log_drain(collect);
		dropped += thread_log_dropped();
		for (int k = 0; k < nlines; k++)
		{
			int			id;
			int			n;

			if (sscanf(lines[k], "t%d %d", &id, &n) != 2 || id < 0 || id >= LOGGERS)
			{
				FAIL("garbled line \"%s\"", lines[k]);
				continue;
			}
			/* per thread, lines come in order (some may be dropped) */
			if (n < next[id])
				FAIL("thread %d: line %d after %d", id, n, next[id] - 1);
			next[id] = n + 1;
			got++;
		}
		reset();
	}
	for (int i = 0; i < LOGGERS; i++)
		pthread_join(th[i], NULL);
	thread_log_drain(collect);
	dropped += thread_log_dropped();
	got += nlines;
	reset();
	CHECK_EQ(got + (int) dropped, LOGGERS * LINES_EACH);
	CHECK(got >= THREAD_LOG_SLOTS);
}

UNIT_MAIN()
