/*
 * access_bench.c
 *		The cost of one access decision (src/net/access_policy.c), as each
 *		shape request pays it, in three configurations, with 1 and 2 threads
 *		deciding at once (the rules are shared and read-only: no thread writes
 *		a line another reads).
 *
 *		./access_bench DECISIONS
 *
 * Prints lines "<config> <threads> <ns per decision, per thread>".
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "access_policy.h"

typedef struct Config
{
	const char *name;
	AccessSettings settings;
	AccessRequest request;
} Config;

static AccessPolicy policy;
static const AccessRequest *current;
static long decisions;
static _Atomic long sink;

static double
now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static void *
decide_loop(void *arg)
{
	double	   *ns = arg;
	double		t0 = now_ns();
	long		allowed = 0;

	for (long i = 0; i < decisions; i++)
		allowed += access_decide(access_policy_rules(&policy), current) == ACCESS_ALLOWED;
	*ns = (now_ns() - t0) / decisions;
	atomic_fetch_add(&sink, allowed);
	return NULL;
}

#define S(x) (x), sizeof(x) - 1

int
main(int argc, char **argv)
{
	static char origins[2048];
	char		err[256];
	Config		configs[3];

	decisions = argc > 1 ? atol(argv[1]) : 2000000;
	for (int i = 0; i < 15; i++)
		snprintf(origins + strlen(origins), sizeof(origins) - strlen(origins),
				 "https://app%d.example.com, ", i);
	strcat(origins, "https://app.example.com");

	configs[0] = (Config) {"loopback_only",
		{.cors_allowed_origins = "*"},
		{.peer_loopback = true, .host = S("localhost:3000"), .origin = S("http://localhost:5173"),
	.needs_secret = true}};
	configs[1] = (Config) {"secret_any_origin",
		{.secret = "0123456789abcdef0123456789abcdef", .cors_allowed_origins = "*"},
		{.host = S("sync.example.com"), .origin = S("https://app.example.com"),
	.secret = S("0123456789abcdef0123456789abcdef"), .needs_secret = true}};
	configs[2] = (Config) {"secret_16_origins",
		{.secret = "0123456789abcdef0123456789abcdef", .cors_allowed_origins = origins},
		{.host = S("sync.example.com"), .origin = S("https://app.example.com"),
	.secret = S("0123456789abcdef0123456789abcdef"), .needs_secret = true}};

	for (int c = 0; c < 3; c++)
	{
		if (access_policy_init(&policy, &configs[c].settings, err, sizeof(err)) != 0)
		{
			fprintf(stderr, "%s\n", err);
			return 1;
		}
		current = &configs[c].request;
		if (access_decide(access_policy_rules(&policy), current) != ACCESS_ALLOWED)
		{
			fprintf(stderr, "%s: the request is not allowed\n", configs[c].name);
			return 1;
		}
		for (int threads = 1; threads <= 2; threads++)
		{
			pthread_t	t[2];
			double		ns[2];

			for (int i = 0; i < threads; i++)
				pthread_create(&t[i], NULL, decide_loop, &ns[i]);
			for (int i = 0; i < threads; i++)
				pthread_join(t[i], NULL);
			printf("%s %d %.2f\n", configs[c].name, threads,
				   threads == 1 ? ns[0] : (ns[0] + ns[1]) / 2);
		}
		access_policy_destroy(&policy);
	}
	return atomic_load(&sink) > 0 ? 0 : 1;
}
