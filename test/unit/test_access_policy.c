/*
 * test_access_policy.c
 *		Unit tests of the access rules (src/net/access_policy.c): loopback
 *		peers, Host and Origin names, the secret's comparison, the origin
 *		list, every verdict, and versions published while readers decide.
 */
#include "unit.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <sys/socket.h>

#include "access_policy.h"

static bool
v4_loopback(const char *text)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};

	if (inet_pton(AF_INET, text, &sa.sin_addr) != 1)
		FAIL("bad test address %s", text);
	return access_sockaddr_is_loopback((struct sockaddr *) &sa);
}

static bool
v6_loopback(const char *text)
{
	struct sockaddr_in6 sa = {.sin6_family = AF_INET6};

	if (inet_pton(AF_INET6, text, &sa.sin6_addr) != 1)
		FAIL("bad test address %s", text);
	return access_sockaddr_is_loopback((struct sockaddr *) &sa);
}

TEST(peer_addresses)
{
	CHECK(v4_loopback("127.0.0.1"));
	CHECK(v4_loopback("127.255.3.4"));
	CHECK(!v4_loopback("10.0.0.1"));
	CHECK(!v4_loopback("0.0.0.0"));
	CHECK(!v4_loopback("128.0.0.1"));
	CHECK(!v4_loopback("198.18.0.2"));
	CHECK(v6_loopback("::1"));
	CHECK(v6_loopback("::ffff:127.0.0.1"));
	CHECK(!v6_loopback("::ffff:10.1.2.3"));
	CHECK(!v6_loopback("::"));
	CHECK(!v6_loopback("fe80::1"));
	CHECK(!v6_loopback("::2"));
	CHECK(!access_sockaddr_is_loopback(NULL));
}

static bool
host(const char *h)
{
	return access_host_is_loopback(h, strlen(h));
}

TEST(host_names)
{
	static const char *const loopback[] = {
		"localhost", "LOCALHOST", "localhost.", "localhost:3000", "app.localhost",
		"a.b.localhost:80", "127.0.0.1", "127.1.2.3:65535", "[::1]", "[::1]:3000",
		"[::ffff:127.0.0.1]:1", "[0:0:0:0:0:0:0:1]"
	};
	static const char *const other[] = {
		"", "evil.example", "evil.example:3000", "localhost.evil.example",
		"evillocalhost", ".localhost", "local host", "127.0.0.1.evil.example",
		"128.0.0.1", "10.0.0.1:3000", "[::2]", "[::1", "::1", "[::1]x",
		"localhost:", "localhost:abc", "localhost:123456", "[fe80::1]:80",
		"0.0.0.0", "127.1", "loc_alhost", "xn--localhost"
	};

	for (size_t i = 0; i < sizeof(loopback) / sizeof(loopback[0]); i++)
	{
		CHECK(host(loopback[i]));
		if (!host(loopback[i]))
			fprintf(stderr, "  \"%s\" should be loopback\n", loopback[i]);
	}
	for (size_t i = 0; i < sizeof(other) / sizeof(other[0]); i++)
	{
		CHECK(!host(other[i]));
		if (host(other[i]))
			fprintf(stderr, "  \"%s\" should not be loopback\n", other[i]);
	}
	/* a NUL inside, and an absurd length */
	CHECK(!access_host_is_loopback("localhost\0evil", 14));
	{
		char		big[2000];

		memset(big, 'a', sizeof(big));
		memcpy(big + sizeof(big) - 10, ".localhost", 10);
		CHECK(!access_host_is_loopback(big, sizeof(big)));
	}
}

static bool
origin(const char *o)
{
	return access_origin_is_loopback(o, strlen(o));
}

TEST(origin_names)
{
	CHECK(origin("http://localhost"));
	CHECK(origin("http://localhost:5173"));
	CHECK(origin("https://app.localhost"));
	CHECK(origin("HTTP://127.0.0.1:8080"));
	CHECK(origin("http://[::1]:3000"));
	CHECK(!origin("https://evil.example"));
	CHECK(!origin("http://localhost.evil.example"));
	CHECK(!origin("ftp://localhost"));
	CHECK(!origin("null"));
	CHECK(!origin("http://"));
	CHECK(!origin("localhost"));
	CHECK(!origin("://localhost"));
	CHECK(!origin("http://localhost/x"));
	CHECK(!origin("http://user@localhost"));
}

TEST(secret_comparison)
{
	static const char s[] = "correct horse";
	size_t		n = sizeof(s) - 1;

	CHECK(access_secret_equal(s, n, "correct horse", n));
	CHECK(!access_secret_equal(s, n, "correct horsf", n));
	CHECK(!access_secret_equal(s, n, "Correct horse", n));
	CHECK(!access_secret_equal(s, n, "correct hors", n - 1));
	CHECK(!access_secret_equal(s, n, "correct horse!", n + 1));
	CHECK(!access_secret_equal(s, n, "", 0));
	CHECK(!access_secret_equal(s, n, NULL, 0));
	CHECK(!access_secret_equal(s, n, "correct\0horse", n));
	/* a given value whose first bytes are the secret, and longer */
	CHECK(!access_secret_equal(s, n, "correct horsecorrect horse", 2 * n));
	/* the comparison is over the configured length: a one-byte secret */
	CHECK(access_secret_equal("x", 1, "x", 1));
	CHECK(!access_secret_equal("x", 1, "xx", 2));
}

static bool
origins_ok(const char *list)
{
	char		err[256];

	return access_origins_valid(list, err, sizeof(err));
}

TEST(origin_lists)
{
	CHECK(origins_ok("*"));
	CHECK(origins_ok(" * "));
	CHECK(origins_ok(""));
	CHECK(origins_ok(NULL));
	CHECK(origins_ok("https://app.example.com"));
	CHECK(origins_ok("https://app.example.com/, http://localhost:5173"));
	CHECK(origins_ok("HTTPS://APP.example.com:8443"));
	CHECK(!origins_ok("*, https://app.example.com"));
	CHECK(!origins_ok("app.example.com"));
	CHECK(!origins_ok("https://app.example.com/path"));
	CHECK(!origins_ok("https://app.example.com?x"));
	CHECK(!origins_ok("https://"));
	CHECK(!origins_ok("https://a b.example"));
	CHECK(!origins_ok("https://user@app.example.com"));
	CHECK(!origins_ok("https://caf\xc3\xa9.example"));
}

/* ---------------------------------------------------------- verdicts */

static AccessPolicy policy;

static const AccessRules *
rules_of(const char *secret, bool insecure, const char *origins)
{
	AccessSettings s = {.secret = secret, .insecure = insecure,
	.cors_allowed_origins = origins};
	char		err[256];

	access_policy_destroy(&policy);
	if (access_policy_init(&policy, &s, err, sizeof(err)) != 0)
		FAIL("init: %s", err);
	return access_policy_rules(&policy);
}

static AccessVerdict
decide(const AccessRules *r, bool loopback, const char *host_header, const char *origin_header,
	   const char *secret, bool needs_secret)
{
	AccessRequest req = {.peer_loopback = loopback, .host = host_header,
		.host_len = host_header ? strlen(host_header) : 0,
		.origin = origin_header, .origin_len = origin_header ? strlen(origin_header) : 0,
		.secret = secret, .secret_len = secret ? strlen(secret) : 0,
	.needs_secret = needs_secret};

	return access_decide(r, &req);
}

TEST(loopback_only_without_a_secret)
{
	AccessSettings s = {.cors_allowed_origins = "*"};
	char		err[256];
	const AccessRules *r;

	REQUIRE_EQ(access_policy_init(&policy, &s, err, sizeof(err)), 0);
	r = access_policy_rules(&policy);
	CHECK(access_loopback_only(r));
	CHECK(!access_has_secret(r));
	CHECK_EQ(decide(r, true, "localhost:3000", NULL, NULL, true), ACCESS_ALLOWED);
	CHECK_EQ(decide(r, true, NULL, NULL, NULL, true), ACCESS_ALLOWED);
	CHECK_EQ(decide(r, false, "localhost:3000", NULL, NULL, true), ACCESS_PEER_NOT_LOOPBACK);
	CHECK_EQ(decide(r, false, "localhost:3000", NULL, NULL, false), ACCESS_PEER_NOT_LOOPBACK);
	/* DNS rebinding: the page's own name as Host */
	CHECK_EQ(decide(r, true, "rebind.evil.example:3000", NULL, NULL, true),
			 ACCESS_HOST_NOT_LOOPBACK);
	/* "*" means loopback origins only while no secret guards the data */
	CHECK_EQ(decide(r, true, "localhost:3000", "http://localhost:5173", NULL, true),
			 ACCESS_ALLOWED);
	CHECK_EQ(decide(r, true, "localhost:3000", "https://evil.example", NULL, true),
			 ACCESS_ORIGIN_NOT_ALLOWED);
	CHECK_EQ(decide(r, true, "localhost:3000", "https://evil.example", NULL, false),
			 ACCESS_ORIGIN_NOT_ALLOWED);
	CHECK(access_origin_allowed(r, NULL, 0));
	CHECK(!access_origin_allowed(r, "null", 4));
	/* a secret sent anyway changes nothing */
	CHECK_EQ(decide(r, true, "localhost", NULL, "whatever", true), ACCESS_ALLOWED);
	/* a page of another site that sends no Origin (an <img>, a no-cors fetch) */
	{
		AccessRequest req = {.peer_loopback = true, .host = "localhost", .host_len = 9,
		.fetch_site = "cross-site", .fetch_site_len = 10, .needs_secret = true};

		CHECK_EQ(access_decide(r, &req), ACCESS_ORIGIN_NOT_ALLOWED);
		req.fetch_site = "same-site";
		req.fetch_site_len = 9;
		CHECK_EQ(access_decide(r, &req), ACCESS_ALLOWED);
		req.fetch_site = "none";
		req.fetch_site_len = 4;
		CHECK_EQ(access_decide(r, &req), ACCESS_ALLOWED);
		/* with a secret, such a page cannot know it: no need to look */
		req.fetch_site = "cross-site";
		req.fetch_site_len = 10;
		req.secret = "k";
		req.secret_len = 1;
		CHECK_EQ(access_decide(rules_of("k", false, "*"), &req), ACCESS_ALLOWED);
	}
}

TEST(with_a_secret)
{
	const AccessRules *r = rules_of("s3cr3t", false, "*");

	CHECK(!access_loopback_only(r));
	CHECK(access_has_secret(r));
	CHECK_EQ(decide(r, true, "localhost", NULL, NULL, true), ACCESS_SECRET_REQUIRED);
	CHECK_EQ(decide(r, true, "localhost", NULL, "s3cr3", true), ACCESS_SECRET_REQUIRED);
	CHECK_EQ(decide(r, true, "localhost", NULL, "s3cr3t", true), ACCESS_ALLOWED);
	/* any peer, any Host, any origin once the secret is right */
	CHECK_EQ(decide(r, false, "app.example.com", "https://app.example.com", "s3cr3t", true),
			 ACCESS_ALLOWED);
	CHECK_EQ(decide(r, false, "app.example.com", "https://app.example.com", "nope", true),
			 ACCESS_SECRET_REQUIRED);
	/* the preflight carries no secret */
	CHECK_EQ(decide(r, false, "app.example.com", "https://app.example.com", NULL, false),
			 ACCESS_ALLOWED);

	r = rules_of("s3cr3t", false, "https://app.example.com, http://localhost:5173/");
	CHECK_EQ(decide(r, false, "x", "https://app.example.com", "s3cr3t", true), ACCESS_ALLOWED);
	CHECK_EQ(decide(r, false, "x", "HTTPS://App.Example.com", "s3cr3t", true), ACCESS_ALLOWED);
	CHECK_EQ(decide(r, false, "x", "http://localhost:5173", "s3cr3t", true), ACCESS_ALLOWED);
	CHECK_EQ(decide(r, false, "x", "http://localhost:5174", "s3cr3t", true),
			 ACCESS_ORIGIN_NOT_ALLOWED);
	CHECK_EQ(decide(r, false, "x", "https://app.example.com.evil", "s3cr3t", true),
			 ACCESS_ORIGIN_NOT_ALLOWED);
	CHECK_EQ(decide(r, false, "x", NULL, "s3cr3t", true), ACCESS_ALLOWED);

	r = rules_of("s3cr3t", false, "");
	CHECK_EQ(decide(r, true, "localhost", "http://localhost:5173", "s3cr3t", true),
			 ACCESS_ORIGIN_NOT_ALLOWED);
	CHECK_EQ(decide(r, true, "localhost", NULL, "s3cr3t", true), ACCESS_ALLOWED);
}

TEST(insecure_without_a_secret)
{
	const AccessRules *r = rules_of(NULL, true, "*");

	CHECK(!access_loopback_only(r));
	CHECK_EQ(decide(r, false, "app.example.com", NULL, NULL, true), ACCESS_ALLOWED);
	CHECK_EQ(decide(r, false, "app.example.com", "https://app.example.com", NULL, true),
			 ACCESS_ALLOWED);
	r = rules_of("", true, "https://app.example.com");
	CHECK_EQ(decide(r, false, "x", "https://other.example", NULL, true),
			 ACCESS_ORIGIN_NOT_ALLOWED);
	/* an explicit list is honoured while loopback-only too */
	r = rules_of(NULL, false, "https://app.example.com");
	CHECK_EQ(decide(r, true, "localhost", "https://app.example.com", NULL, true), ACCESS_ALLOWED);
	CHECK_EQ(decide(r, true, "localhost", "http://localhost:5173", NULL, true),
			 ACCESS_ORIGIN_NOT_ALLOWED);
}

TEST(updates_publish_only_changes)
{
	AccessSettings a = {.secret = "a", .cors_allowed_origins = "*"};
	AccessSettings b = {.secret = "b", .cors_allowed_origins = "*"};
	AccessSettings bad = {.secret = "c", .cors_allowed_origins = "no-scheme.example"};
	char		err[256];
	const AccessRules *first;
	const AccessRules *second;

	rules_of("a", false, "*");
	first = access_policy_rules(&policy);
	CHECK_EQ(access_policy_update(&policy, &a, err, sizeof(err)), 0);
	CHECK(access_policy_rules(&policy) == first);
	CHECK_EQ(access_policy_update(&policy, &b, err, sizeof(err)), 0);
	second = access_policy_rules(&policy);
	CHECK(second != first);
	/* the replaced version stays readable until destroy */
	CHECK_EQ(decide(first, true, "localhost", NULL, "a", true), ACCESS_ALLOWED);
	CHECK_EQ(decide(second, true, "localhost", NULL, "a", true), ACCESS_SECRET_REQUIRED);
	/* a list that does not parse keeps the rules in force */
	CHECK_EQ(access_policy_update(&policy, &bad, err, sizeof(err)), -1);
	CHECK(strstr(err, "no-scheme.example") != NULL);
	CHECK(access_policy_rules(&policy) == second);
	access_policy_destroy(&policy);
}

/* ----------------------------------------------------------- threads */

static _Atomic bool readers_stop;
static _Atomic long decisions;

/* Each version's secret is "k<n>"; a reader sees one version or the next, never a mix. */
static void *
reader_thread(void *arg)
{
	while (!atomic_load(&readers_stop))
	{
		const AccessRules *r = access_policy_rules(&policy);
		int			hits = 0;

		for (int k = 0; k < 8; k++)
		{
			char		secret[16];

			snprintf(secret, sizeof(secret), "k%d", k);
			hits += decide(r, false, "x", "https://app.example.com", secret, true) ==
				ACCESS_ALLOWED;
		}
		CHECK_EQ(hits, 1);
		atomic_fetch_add(&decisions, 1);
	}
	return NULL;
}

TEST(readers_race_with_updates)
{
	pthread_t	readers[4];
	AccessSettings s = {.secret = "k0", .cors_allowed_origins = "*"};
	char		err[256];
	char		secret[16];

	REQUIRE_EQ(access_policy_init(&policy, &s, err, sizeof(err)), 0);
	atomic_store(&readers_stop, false);
	atomic_store(&decisions, 0);
	for (int i = 0; i < 4; i++)
		pthread_create(&readers[i], NULL, reader_thread, NULL);
	for (int v = 1; v <= 2000 || atomic_load(&decisions) < 100; v++)
	{
		/* until the readers made decisions during updates, not only after */
		snprintf(secret, sizeof(secret), "k%d", v % 8);
		s.secret = secret;
		CHECK_EQ(access_policy_update(&policy, &s, err, sizeof(err)), 0);
		if (v > 2000)
			sched_yield();
	}
	atomic_store(&readers_stop, true);
	for (int i = 0; i < 4; i++)
		pthread_join(readers[i], NULL);
	CHECK(atomic_load(&decisions) > 0);
	access_policy_destroy(&policy);
}

UNIT_MAIN()
