/*
 * test_metrics.c: striped metrics (src/contract/metrics.c).
 *
 * Totals are exact after many threads wrote at once, more threads than
 * stripes included (the shared overflow stripe); a histogram read while
 * writers race has monotone buckets, +Inf equal to its count, and never
 * goes backwards; stripes given back keep their counts; a reset zeroes
 * counters and histograms but not gauges; the Prometheus text is exact.
 */
#include "unit.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "metrics.h"

static const char *const kind_values[] = {"initial", "live", "sse"};
static const MetricDim kinds[] = {{"kind", kind_values, 3}};
static const MetricDim two_kinds[] = {{"kind", kind_values, 2}};
static const double bounds[] = {0.001, 0.01, 0.1, 1};

enum
{
	M_REQUESTS, M_WAITERS, M_DURATION, M_PLAIN, M_COUNT
};

static const MetricDef defs[] = {
	[M_REQUESTS] = {"test_requests_total", "Requests answered.", METRIC_COUNTER, kinds, 1, NULL, 0},
	[M_WAITERS] = {"test_waiters", "Live requests parked.", METRIC_GAUGE, NULL, 0, NULL, 0},
	[M_DURATION] = {"test_serve_seconds", "Time to serve a request.", METRIC_HISTOGRAM, kinds, 1,
	bounds, 4},
	[M_PLAIN] = {"test_plain_seconds", "One series.", METRIC_HISTOGRAM, NULL, 0, bounds, 4},
};

static MetricsLayout layout;
static void *area;
static Metrics *metrics;

static void
fresh(uint32_t nstripes)
{
	if (layout.base == NULL)
		REQUIRE_EQ(metrics_layout_init(&layout, defs, M_COUNT), 0);
	free(area);
	area = calloc(1, metrics_size(&layout, nstripes));
	metrics = metrics_init(area, &layout, nstripes);
}

/*
 * The observation of thread t's i-th write: binary fractions, whose sums
 * here need fewer than 53 bits, so they are exact in any order.
 */
static double
value_of(int t, int i)
{
	static const double values[] = {1.0 / 1024, 1.0 / 256, 1.0 / 32, 0.25, 0.5, 2, 7};

	return values[(t + i) % 7];
}

TEST(layout_puts_series_side_by_side)
{
	MetricsLayout bad;
	static const double unsorted[] = {1, 0.5};
	static const MetricDef bad_defs[] = {
		{"x", "x", METRIC_HISTOGRAM, NULL, 0, unsorted, 2},
	};

	fresh(4);
	CHECK_EQ(layout.base[M_REQUESTS], 0);
	CHECK_EQ(layout.base[M_WAITERS], 3);
	CHECK_EQ(layout.base[M_DURATION], 4);
	CHECK_EQ(layout.base[M_PLAIN], 4 + 3 * 6);
	CHECK_EQ(layout.slots % 8, 0);
	CHECK(layout.slots >= 4 + 3 * 6 + 6);
	CHECK_EQ(metrics_series_slot(&layout, M_DURATION, 2), 4 + 2 * 6);
	CHECK_EQ(metrics_layout_init(&bad, bad_defs, 1), -1);
	CHECK(((uintptr_t) metrics % 64) == 0);
}

enum { WRITERS = 8, WRITES = 200000 };

typedef struct Writer
{
	int			t;
	bool		own;
} Writer;

/* every writer holds its stripe before any writes (and lets go) */
static pthread_barrier_t claimed;

static void *
writer_main(void *arg)
{
	Writer	   *w = arg;
	MetricsStripe stripe;

	w->own = metrics_claim_stripe(metrics, &stripe, (uint32_t) getpid());
	pthread_barrier_wait(&claimed);
	for (int i = 0; i < WRITES; i++)
	{
		metric_add(&stripe, &layout, M_REQUESTS, (uint32_t) (i % 3), 1);
		metric_gauge_add(&stripe, &layout, M_WAITERS, 0, i % 2 == 0 ? 1 : -1);
		metric_observe(&stripe, &layout, M_DURATION, (uint32_t) (i % 3), value_of(w->t, i));
	}
	metric_gauge_add(&stripe, &layout, M_WAITERS, 0, 5);
	metrics_release_stripe(metrics, &stripe);
	return NULL;
}

static atomic_bool writers_done;
static atomic_int reader_failures;
static atomic_long reads_made;

/* Reads while writers race: invariants at every read, nothing backwards. */
static void *
reader_main(void *arg)
{
	uint64_t	last_count[3] = {0};
	uint64_t	last_requests[3] = {0};

	(void) arg;
	while (!atomic_load(&writers_done))
	{
		for (uint32_t l = 0; l < 3; l++)
		{
			uint64_t	cumulative[METRICS_MAX_BOUNDS + 1];
			double		sum;
			uint64_t	requests = metrics_read_counter(metrics, &layout, M_REQUESTS, l);

			metrics_read_histogram(metrics, &layout, M_DURATION, l, cumulative, &sum);
			for (int b = 1; b <= 4; b++)
				if (cumulative[b] < cumulative[b - 1])
					atomic_fetch_add(&reader_failures, 1);
			if (cumulative[4] < last_count[l] || requests < last_requests[l])
				atomic_fetch_add(&reader_failures, 1);
			last_count[l] = cumulative[4];
			last_requests[l] = requests;
		}
		atomic_fetch_add(&reads_made, 1);
	}
	return NULL;
}

static void
run_writers(uint32_t nstripes, int *owned_out)
{
	pthread_t	th[WRITERS],
				reader;
	Writer		w[WRITERS];
	int			owned = 0;

	fresh(nstripes);
	pthread_barrier_init(&claimed, NULL, WRITERS);
	atomic_store(&writers_done, false);
	atomic_store(&reader_failures, 0);
	atomic_store(&reads_made, 0);
	REQUIRE(pthread_create(&reader, NULL, reader_main, NULL) == 0);
	for (int t = 0; t < WRITERS; t++)
	{
		w[t].t = t;
		REQUIRE(pthread_create(&th[t], NULL, writer_main, &w[t]) == 0);
	}
	for (int t = 0; t < WRITERS; t++)
	{
		pthread_join(th[t], NULL);
		owned += w[t].own;
	}
	atomic_store(&writers_done, true);
	pthread_join(reader, NULL);
	pthread_barrier_destroy(&claimed);
	*owned_out = owned;
}

static void
check_totals(void)
{
	uint64_t	want_requests[3] = {0};
	uint64_t	want_buckets[3][5] = {{0}};
	double		want_sum[3] = {0};

	for (int t = 0; t < WRITERS; t++)
		for (int i = 0; i < WRITES; i++)
		{
			double		v = value_of(t, i);
			int			b = 0;

			while (b < 4 && !(v <= bounds[b]))
				b++;
			want_requests[i % 3]++;
			want_buckets[i % 3][b]++;
			want_sum[i % 3] += v;
		}
	for (uint32_t l = 0; l < 3; l++)
	{
		uint64_t	cumulative[METRICS_MAX_BOUNDS + 1];
		uint64_t	running = 0;
		double		sum;

		CHECK_UEQ(metrics_read_counter(metrics, &layout, M_REQUESTS, l), want_requests[l]);
		metrics_read_histogram(metrics, &layout, M_DURATION, l, cumulative, &sum);
		for (int b = 0; b <= 4; b++)
		{
			running += want_buckets[l][b];
			CHECK_UEQ(cumulative[b], running);
		}
		CHECK(sum == want_sum[l]);
	}
	CHECK_EQ(metrics_read_gauge(metrics, &layout, M_WAITERS, 0), 5 * WRITERS);
}

TEST(totals_are_exact_after_concurrent_writers)
{
	int			owned;

	run_writers(WRITERS, &owned);
	CHECK_EQ(owned, WRITERS);
	check_totals();
	CHECK_EQ(atomic_load(&reader_failures), 0);
	CHECK(atomic_load(&reads_made) > 0);
}

TEST(more_writers_than_stripes_share_the_overflow_stripe)
{
	int			owned;

	run_writers(3, &owned);
	CHECK_EQ(owned, 3);
	check_totals();
	CHECK_EQ(atomic_load(&reader_failures), 0);
}

TEST(a_stripe_given_back_keeps_its_counts)
{
	MetricsStripe a,
				b;

	fresh(1);
	REQUIRE(metrics_claim_stripe(metrics, &a, (uint32_t) getpid()));
	metric_add(&a, &layout, M_REQUESTS, 1, 7);
	CHECK(!metrics_claim_stripe(metrics, &b, (uint32_t) getpid()));	/* held: the shared one */
	CHECK(b.shared);
	metric_add(&b, &layout, M_REQUESTS, 1, 1);
	metrics_release_stripe(metrics, &a);
	REQUIRE(metrics_claim_stripe(metrics, &a, (uint32_t) getpid()));
	CHECK_EQ(a.index, 0);
	metric_add(&a, &layout, M_REQUESTS, 1, 2);
	CHECK_UEQ(metrics_read_counter(metrics, &layout, M_REQUESTS, 1), 10);
	CHECK_UEQ(metrics_read_counter(metrics, &layout, M_REQUESTS, 0), 0);
	metrics_release_stripe(metrics, &a);
}

/* a process that crashed holding stripes does not keep them from others */
TEST(a_stripe_of_a_gone_process_is_taken_over)
{
	MetricsStripe a,
				b;
	pid_t		child = fork();
	_Atomic uint32_t *owned;

	REQUIRE(child >= 0);
	if (child == 0)
		_exit(0);
	REQUIRE(waitpid(child, NULL, 0) == child);
	fresh(2);
	owned = (_Atomic uint32_t *) ((char *) metrics + metrics->owned_offset);
	REQUIRE(metrics_claim_stripe(metrics, &a, (uint32_t) child));	/* then it "crashed" */
	metric_add(&a, &layout, M_REQUESTS, 0, 5);
	REQUIRE(metrics_claim_stripe(metrics, &b, (uint32_t) getpid()));
	CHECK_EQ(b.index, 1);		/* a free one first */
	CHECK_EQ(atomic_load(&owned[0]), (uint32_t) child);
	REQUIRE(metrics_claim_stripe(metrics, &a, (uint32_t) getpid()));
	CHECK_EQ(a.index, 0);		/* the gone one's, counts kept */
	metric_add(&a, &layout, M_REQUESTS, 0, 1);
	CHECK_UEQ(metrics_read_counter(metrics, &layout, M_REQUESTS, 0), 6);
	/* a live owner's stripe is not taken */
	CHECK(!metrics_claim_stripe(metrics, &b, (uint32_t) getpid()));
	CHECK_EQ(metrics_release_owner(metrics, (uint32_t) getpid()), 2);
	CHECK_EQ(atomic_load(&owned[0]), 0);
	CHECK_EQ(atomic_load(&owned[1]), 0);
	CHECK_EQ(metrics_release_owner(metrics, (uint32_t) getpid()), 0);
}

static bool
sample_two(void *ctx, uint32_t metric, uint32_t series, double *value)
{
	(void) ctx;
	(void) metric;
	if (series == 1)
		return false;			/* not known: left out */
	*value = series == 0 ? 1.5 : 42;
	return true;
}

typedef struct Collected
{
	char		text[4096];
	size_t		len;
	int			samples;
} Collected;

static void
collect(void *ctx, const MetricSample *sample)
{
	Collected  *c = ctx;

	c->samples++;
	c->len += (size_t) snprintf(c->text + c->len, sizeof(c->text) - c->len, "%u%s|%s|%s\n",
								sample->metric, sample->suffix, sample->labels, sample->value);
}

/* dimensions multiply; sparse metrics show only what is not zero */
TEST(dimensions_sparse_series_and_samples)
{
	static const char *const routes[] = {"shape", "health"};
	static const char *const codes[] = {"2xx", "4xx", "5xx"};
	static const MetricDim route_code[] = {{"route", routes, 2}, {"status", codes, 3}};
	static const MetricDim three[] = {{"n", codes, 3}};
	static const MetricDef dim_defs[] = {
		{"r_total", "R.", METRIC_COUNTER, route_code, 2, NULL, 0, true},
		{"r_seconds", "S.", METRIC_HISTOGRAM, route_code, 2, bounds, 1, true},
		{"r_level", "L.", METRIC_SAMPLED, three, 1, NULL, 0},
		{"r_dense_total", "D.", METRIC_COUNTER, three, 1, NULL, 0},
	};
	MetricsLayout dl;
	void	   *mem;
	Metrics    *m;
	MetricsStripe s;
	char		labels[128];
	Collected	c = {0};
	char		text[4096];

	REQUIRE_EQ(metrics_layout_init(&dl, dim_defs, 4), 0);
	CHECK_EQ(metrics_series_count(&dl, 0), 6);
	CHECK_EQ(dl.base[1], 6);
	CHECK_EQ(dl.base[2], 6 + 6 * 3);
	CHECK_EQ(dl.base[3], 6 + 6 * 3);	/* sampled: no slots */
	CHECK_EQ(metrics_series_labels(&dl, 0, 4, labels, sizeof(labels)),
			 strlen("route=\"health\",status=\"4xx\""));
	CHECK_STR_EQ(labels, "route=\"health\",status=\"4xx\"");
	mem = calloc(1, metrics_size(&dl, 1));
	m = metrics_init(mem, &dl, 1);
	REQUIRE(metrics_claim_stripe(m, &s, (uint32_t) getpid()));
	metric_add(&s, &dl, 0, 4, 2);
	metric_observe(&s, &dl, 1, 2, 0.5);
	metric_add(&s, &dl, 3, 2, 1);
	metrics_visit(m, &dl, sample_two, NULL, collect, &c);
	CHECK_STR_EQ(c.text,
				 "0|route=\"health\",status=\"4xx\"|2\n"
				 "1_bucket|route=\"shape\",status=\"5xx\",le=\"0.001\"|0\n"
				 "1_bucket|route=\"shape\",status=\"5xx\",le=\"+Inf\"|1\n"
				 "1_sum|route=\"shape\",status=\"5xx\"|0.5\n"
				 "1_count|route=\"shape\",status=\"5xx\"|1\n"
				 "2|n=\"2xx\"|1.5\n"
				 "2|n=\"5xx\"|42\n"
				 "3|n=\"2xx\"|0\n"
				 "3|n=\"4xx\"|0\n"
				 "3|n=\"5xx\"|1\n");
	/* no sampler: sampled series are left out, HELP and TYPE with them */
	metrics_format_prometheus(m, &dl, NULL, NULL, text, sizeof(text));
	CHECK(strstr(text, "r_level") == NULL);
	CHECK(strstr(text, "# TYPE r_seconds histogram\n") != NULL);
	metrics_format_prometheus(m, &dl, sample_two, NULL, text, sizeof(text));
	CHECK(strstr(text, "# TYPE r_level gauge\nr_level{n=\"2xx\"} 1.5\n") != NULL);
	metrics_release_stripe(m, &s);
	metrics_layout_free(&dl);
	free(mem);
}

TEST(reset_zeroes_counts_but_not_levels)
{
	MetricsStripe s;
	uint64_t	cumulative[METRICS_MAX_BOUNDS + 1];
	double		sum;

	fresh(2);
	REQUIRE(metrics_claim_stripe(metrics, &s, (uint32_t) getpid()));
	metric_add(&s, &layout, M_REQUESTS, 0, 4);
	metric_gauge_add(&s, &layout, M_WAITERS, 0, 3);
	metric_observe(&s, &layout, M_PLAIN, 0, 0.5);
	metric_observe(&s, &layout, M_PLAIN, 0, 5);
	metrics_reset(metrics, &layout);
	CHECK_UEQ(metrics_read_counter(metrics, &layout, M_REQUESTS, 0), 0);
	CHECK_EQ(metrics_read_gauge(metrics, &layout, M_WAITERS, 0), 3);
	metrics_read_histogram(metrics, &layout, M_PLAIN, 0, cumulative, &sum);
	CHECK_UEQ(cumulative[4], 0);
	CHECK(sum == 0);
	metric_add(&s, &layout, M_REQUESTS, 0, 2);
	metric_observe(&s, &layout, M_PLAIN, 0, 0.05);
	CHECK_UEQ(metrics_read_counter(metrics, &layout, M_REQUESTS, 0), 2);
	metrics_read_histogram(metrics, &layout, M_PLAIN, 0, cumulative, &sum);
	CHECK_UEQ(cumulative[1], 0);
	CHECK_UEQ(cumulative[2], 1);
	CHECK_UEQ(cumulative[4], 1);
	CHECK(sum > 0.0499 && sum < 0.0501);
	metrics_release_stripe(metrics, &s);
}

static atomic_bool resetter_started;

/* Resets until the writers are done; at least once, before they start. */
static void *
resetter_main(void *arg)
{
	(void) arg;
	do
	{
		metrics_reset(metrics, &layout);
		atomic_store(&resetter_started, true);
	} while (!atomic_load(&writers_done));
	return NULL;
}

TEST(resets_racing_writers_keep_reads_sane)
{
	pthread_t	th[WRITERS],
				resetter;
	Writer		w[WRITERS];
	uint64_t	cumulative[METRICS_MAX_BOUNDS + 1];
	double		sum;

	fresh(WRITERS);
	pthread_barrier_init(&claimed, NULL, WRITERS);
	atomic_store(&writers_done, false);
	atomic_store(&resetter_started, false);
	REQUIRE(pthread_create(&resetter, NULL, resetter_main, NULL) == 0);
	/* on a loaded machine the writers could finish before it runs at all */
	while (!atomic_load(&resetter_started))
		sched_yield();
	for (int t = 0; t < WRITERS; t++)
	{
		w[t].t = t;
		REQUIRE(pthread_create(&th[t], NULL, writer_main, &w[t]) == 0);
	}
	for (int i = 0; i < 2000; i++)
	{
		metrics_read_histogram(metrics, &layout, M_DURATION, 0, cumulative, &sum);
		for (int b = 1; b <= 4; b++)
			if (cumulative[b] < cumulative[b - 1])
				FAIL("bucket %d below the one before after a reset", b);
		if (metrics_read_counter(metrics, &layout, M_REQUESTS, 0) > (uint64_t) WRITERS * WRITES)
			FAIL("a counter read above everything written (a negative read wrapped)");
	}
	for (int t = 0; t < WRITERS; t++)
		pthread_join(th[t], NULL);
	atomic_store(&writers_done, true);
	pthread_join(resetter, NULL);
	pthread_barrier_destroy(&claimed);
	CHECK(atomic_load(&metrics->resets) > 0);
	CHECK_EQ(metrics_read_gauge(metrics, &layout, M_WAITERS, 0), 5 * WRITERS);
	metrics_reset(metrics, &layout);
	CHECK_UEQ(metrics_read_counter(metrics, &layout, M_REQUESTS, 0), 0);
}

TEST(prometheus_text_is_exact)
{
	static const MetricDef small_defs[] = {
		{"t_total", "Things.", METRIC_COUNTER, two_kinds, 1, NULL, 0},
		{"t_open", "Open things.", METRIC_GAUGE, NULL, 0, NULL, 0},
		{"t_seconds", "Time.", METRIC_HISTOGRAM, NULL, 0, bounds, 2},
	};
	MetricsLayout small;
	void	   *mem;
	Metrics    *m;
	MetricsStripe s;
	char		text[2048];
	size_t		len;

	REQUIRE_EQ(metrics_layout_init(&small, small_defs, 3), 0);
	mem = calloc(1, metrics_size(&small, 1));
	m = metrics_init(mem, &small, 1);
	REQUIRE(metrics_claim_stripe(m, &s, (uint32_t) getpid()));
	metric_add(&s, &small, 0, 1, 3);
	metric_gauge_add(&s, &small, 1, 0, -2);
	metric_observe(&s, &small, 2, 0, 0.001);
	metric_observe(&s, &small, 2, 0, 0.25);
	len = metrics_format_prometheus(m, &small, NULL, NULL, text, sizeof(text));
	CHECK_EQ(len, strlen(text));
	CHECK_STR_EQ(text,
				 "# HELP t_total Things.\n"
				 "# TYPE t_total counter\n"
				 "t_total{kind=\"initial\"} 0\n"
				 "t_total{kind=\"live\"} 3\n"
				 "# HELP t_open Open things.\n"
				 "# TYPE t_open gauge\n"
				 "t_open -2\n"
				 "# HELP t_seconds Time.\n"
				 "# TYPE t_seconds histogram\n"
				 "t_seconds_bucket{le=\"0.001\"} 1\n"
				 "t_seconds_bucket{le=\"0.01\"} 1\n"
				 "t_seconds_bucket{le=\"+Inf\"} 2\n"
				 "t_seconds_sum 0.251\n"
				 "t_seconds_count 2\n");
	/* too small a buffer: the length needed, and no overrun */
	memset(text, 'x', sizeof(text));
	CHECK_EQ(metrics_format_prometheus(m, &small, NULL, NULL, text, 10), len);
	CHECK(text[10] == 'x');
	metrics_release_stripe(m, &s);
	metrics_layout_free(&small);
	free(mem);
}

UNIT_MAIN()
