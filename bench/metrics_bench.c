/*
 * metrics_bench.c
 *		What one increment of a hot metric costs when many threads write it:
 *		src/contract/metrics.c's striped slots against one shared atomic and
 *		against a mutex, measured in the same run.
 *
 * For each thread count in --threads, every thread adds 1 to one counter
 * (or observes one value into one histogram) --ops times, and the time of
 * the whole run divided by the operations of one thread is the cost of
 * an increment as each thread sees it (threads run at once, so with no
 * contention it stays flat as threads are added).  Three ways:
 *
 *	striped  each thread claims its own stripe (metrics_claim_stripe) and
 *	         writes with metric_add / metric_observe, as the server does;
 *	atomic   one shared counter with atomic_fetch_add (a histogram: one
 *	         fetch_add on the bucket, one on the count, a CAS loop on the sum);
 *	mutex    the same fields under one pthread mutex.
 *
 * Prints one JSON object per line: {"metric", "way", "threads", "ns"}.
 * After the runs, the striped totals are checked against what was written.
 *
 *	metrics_bench [--threads "1 2 4 8"] [--ops N (10,000,000)] [--runs R (3)]
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

#include "metrics.h"

static const double bounds[] = {0.0001, 0.001, 0.01, 0.1, 1, 10};
static const MetricDef defs[] = {
	{"bench_ops_total", "Operations.", METRIC_COUNTER, NULL, 0, NULL, 0, false},
	{"bench_seconds", "Durations.", METRIC_HISTOGRAM, NULL, 0, bounds, 6, false},
};

typedef enum Way { WAY_STRIPED, WAY_ATOMIC, WAY_MUTEX } Way;
static const char *const way_names[] = {"striped", "atomic", "mutex"};

static MetricsLayout layout;
static Metrics *metrics;
static long ops = 10000000;

/* the shared baselines, each on its own cache line */
static struct
{
	_Alignas(64) _Atomic uint64_t counter;
	_Alignas(64) _Atomic uint64_t buckets[7];
	_Atomic uint64_t count;
	_Atomic uint64_t sum_bits;
	_Alignas(64) pthread_mutex_t lock;
	uint64_t	locked_counter;
	uint64_t	locked_buckets[7];
	uint64_t	locked_count;
	double		locked_sum;
} shared = {.lock = PTHREAD_MUTEX_INITIALIZER};

typedef struct Job
{
	Way			way;
	bool		histogram;
	pthread_barrier_t *start;
} Job;

static double
value_of(long i)
{
	return (double) (i % 1000) * 1e-5;
}

static void
atomic_observe(double v)
{
	int			b = 0;
	uint64_t	bits = atomic_load_explicit(&shared.sum_bits, memory_order_relaxed);

	while (b < 6 && !(v <= bounds[b]))
		b++;
	atomic_fetch_add_explicit(&shared.buckets[b], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&shared.count, 1, memory_order_relaxed);
	for (;;)
	{
		double		sum;
		uint64_t	next;

		memcpy(&sum, &bits, sizeof(sum));
		sum += v;
		memcpy(&next, &sum, sizeof(next));
		if (atomic_compare_exchange_weak_explicit(&shared.sum_bits, &bits, next,
												  memory_order_relaxed, memory_order_relaxed))
			return;
	}
}

static void
mutex_observe(double v)
{
	int			b = 0;

	while (b < 6 && !(v <= bounds[b]))
		b++;
	pthread_mutex_lock(&shared.lock);
	shared.locked_buckets[b]++;
	shared.locked_count++;
	shared.locked_sum += v;
	pthread_mutex_unlock(&shared.lock);
}

static void *
job_main(void *arg)
{
	Job		   *job = arg;
	MetricsStripe stripe = {0};

	if (job->way == WAY_STRIPED && !metrics_claim_stripe(metrics, &stripe, (uint32_t) getpid()))
	{
		fprintf(stderr, "no stripe of its own\n");
		exit(1);
	}
	pthread_barrier_wait(job->start);
	for (long i = 0; i < ops; i++)
	{
		switch (job->way)
		{
			case WAY_STRIPED:
				if (job->histogram)
					metric_observe(&stripe, &layout, 1, 0, value_of(i));
				else
					metric_add(&stripe, &layout, 0, 0, 1);
				break;
			case WAY_ATOMIC:
				if (job->histogram)
					atomic_observe(value_of(i));
				else
					atomic_fetch_add_explicit(&shared.counter, 1, memory_order_relaxed);
				break;
			case WAY_MUTEX:
				if (job->histogram)
					mutex_observe(value_of(i));
				else
				{
					pthread_mutex_lock(&shared.lock);
					shared.locked_counter++;
					pthread_mutex_unlock(&shared.lock);
				}
				break;
		}
	}
	pthread_barrier_wait(job->start);
	if (job->way == WAY_STRIPED)
		metrics_release_stripe(metrics, &stripe);
	return NULL;
}

static double
now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

/* ns per operation of one thread, `threads` threads at once */
static double
measure(Way way, bool histogram, int threads)
{
	pthread_t  *th = calloc((size_t) threads, sizeof(pthread_t));
	pthread_barrier_t start;
	Job			job = {way, histogram, &start};
	double		t0,
				t1;

	pthread_barrier_init(&start, NULL, (unsigned) threads + 1);
	for (int t = 0; t < threads; t++)
		pthread_create(&th[t], NULL, job_main, &job);
	pthread_barrier_wait(&start);
	t0 = now_ns();
	pthread_barrier_wait(&start);
	t1 = now_ns();
	for (int t = 0; t < threads; t++)
		pthread_join(th[t], NULL);
	pthread_barrier_destroy(&start);
	free(th);
	return (t1 - t0) / (double) ops;
}

int
main(int argc, char **argv)
{
	char		threads_arg[256] = "1 2 4 8";
	int			runs = 3;
	int			max_threads = 0;
	uint64_t	striped_counter_ops = 0,
				striped_histogram_ops = 0;
	void	   *mem;

	for (int i = 1; i + 1 < argc; i += 2)
	{
		if (strcmp(argv[i], "--threads") == 0)
			snprintf(threads_arg, sizeof(threads_arg), "%s", argv[i + 1]);
		else if (strcmp(argv[i], "--ops") == 0)
			ops = atol(argv[i + 1]);
		else if (strcmp(argv[i], "--runs") == 0)
			runs = atoi(argv[i + 1]);
	}
	for (char *p = threads_arg; *p;)
	{
		long		n = strtol(p, &p, 10);

		if (n > max_threads)
			max_threads = (int) n;
		while (*p == ' ')
			p++;
	}
	if (metrics_layout_init(&layout, defs, 2) != 0)
		return 1;
	mem = calloc(1, metrics_size(&layout, (uint32_t) max_threads));
	metrics = metrics_init(mem, &layout, (uint32_t) max_threads);

	for (int run = 0; run < runs; run++)
		for (int h = 0; h <= 1; h++)
			for (char *p = threads_arg; *p;)
			{
				int			threads = (int) strtol(p, &p, 10);

				while (*p == ' ')
					p++;
				if (threads <= 0)
					continue;
				for (int w = 0; w < 3; w++)
				{
					double		ns = measure((Way) w, h, threads);

					if (w == WAY_STRIPED)
						*(h ? &striped_histogram_ops : &striped_counter_ops) +=
							(uint64_t) threads * (uint64_t) ops;
					printf("{\"metric\":\"%s\",\"way\":\"%s\",\"threads\":%d,\"run\":%d,\"ns\":%.3f}\n",
						   h ? "histogram" : "counter", way_names[w], threads, run, ns);
					fflush(stdout);
				}
			}
	{
		uint64_t	cumulative[METRICS_MAX_BOUNDS + 1];
		double		sum;

		metrics_read_histogram(metrics, &layout, 1, 0, cumulative, &sum);
		if (metrics_read_counter(metrics, &layout, 0, 0) != striped_counter_ops ||
			cumulative[6] != striped_histogram_ops)
		{
			fprintf(stderr, "striped totals are wrong\n");
			return 1;
		}
	}
	return 0;
}
