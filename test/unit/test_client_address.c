/*
 * test_client_address.c
 *		Unit tests of who a request comes from (src/net/client_address.c,
 *		and access_identify_client in access_policy.c): the trusted proxy
 *		list, X-Forwarded-For entries and the walk from the right, the
 *		client key, and the loopback rule for forwarded requests.
 */
#include "unit.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "access_policy.h"
#include "client_address.h"
#include "fnv_hash.h"

static ClientAddr
addr_of(const char *text)
{
	ClientAddr	a;

	if (!client_addr_parse_forwarded(text, strlen(text), &a))
		FAIL("bad test address %s", text);
	return a;
}

static bool
same_addr(const ClientAddr *a, const char *text)
{
	ClientAddr	b = addr_of(text);

	return memcmp(a->b, b.b, 16) == 0;
}

static ClientProxies
proxies_of(const char *list)
{
	ClientProxies p = {0};
	char		err[256];

	if (!client_proxies_parse(list, &p, err, sizeof(err)))
		FAIL("bad test list \"%s\": %s", list, err);
	return p;
}

/* The walk over one header value; *who is the address found as text. */
static ClientForward
walk1(const ClientProxies *p, const char *header, char *who, size_t who_len)
{
	ClientAddr	a;
	size_t		len = strlen(header);
	ClientForward f = client_walk_forwarded(p, &header, &len, 1, false, &a);

	who[0] = '\0';
	if (f == CLIENT_FORWARD_FOUND)
	{
		if (memcmp(a.b, "\0\0\0\0\0\0\0\0\0\0\xff\xff", 12) == 0)
			inet_ntop(AF_INET, a.b + 12, who, (socklen_t) who_len);
		else
			inet_ntop(AF_INET6, a.b, who, (socklen_t) who_len);
	}
	return f;
}

TEST(forwarded_entries)
{
	static const struct
	{
		const char *entry;
		const char *as;			/* the same address, plainly */
	}			good[] = {
		{"203.0.113.7", "203.0.113.7"},
		{"  203.0.113.7\t", "203.0.113.7"},
		{"203.0.113.7:51234", "203.0.113.7"},
		{"2001:db8::1", "2001:db8::1"},
		{"[2001:db8::1]", "2001:db8::1"},
		{"[2001:db8::1]:443", "2001:db8::1"},
		{"::ffff:203.0.113.7", "203.0.113.7"},
		{"[::ffff:203.0.113.7]:1", "203.0.113.7"},
		{"::1", "::1"},
	};
	static const char *const bad[] = {
		"", " ", "unknown", "example.com", "203.0.113", "203.0.113.7.", "203.0.113.256",
		"203.0.113.7:", "203.0.113.7:123456", "203.0.113.7:x", "203.0.113.7:80:80",
		"2001:db8::1:80:", "[2001:db8::1", "[2001:db8::1]x", "[2001:db8::1]:", "[203.0.113.7]",
		"fe80::1%eth0", "_hidden", "1.2.3.4 5.6.7.8", "\"1.2.3.4\"",
		"[ffff:ffff:ffff:ffff:ffff:ffff:255.255.255.255]:65535 and a lot more text after it",
	};
	ClientAddr	a;

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
	{
		bool		ok = client_addr_parse_forwarded(good[i].entry, strlen(good[i].entry), &a);

		CHECK(ok);
		if (!ok)
			fprintf(stderr, "  \"%s\" should parse\n", good[i].entry);
		else
			CHECK(same_addr(&a, good[i].as));
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
	{
		bool		ok = client_addr_parse_forwarded(bad[i], strlen(bad[i]), &a);

		CHECK(!ok);
		if (ok)
			fprintf(stderr, "  \"%s\" should not parse\n", bad[i]);
	}
	/* a NUL inside is not an address, whatever precedes it */
	CHECK(!client_addr_parse_forwarded("1.2.3.4\0x", 9, &a));
}

TEST(proxy_lists)
{
	static const char *const bad[] = {
		"localhost", "10.0.0.0/33", "10.0.0.1/8", "2001:db8::/129", "2001:db8::1/64",
		"10.0.0.0/", "10.0.0.0/x", "10.0.0.0/08x", "10.0.0.1:80", "[::1]", "10.0.0.1 10.0.0.2",
		"*",
	};
	char		err[256];
	ClientProxies p;
	ClientAddr	a;

	CHECK(client_proxies_parse(NULL, NULL, err, sizeof(err)));
	CHECK(client_proxies_parse("", NULL, err, sizeof(err)));
	CHECK(client_proxies_parse(" , ", NULL, err, sizeof(err)));
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
	{
		bool		ok = client_proxies_parse(bad[i], NULL, err, sizeof(err));

		CHECK(!ok);
		if (ok)
			fprintf(stderr, "  \"%s\" should be refused\n", bad[i]);
	}
	CHECK(!client_proxies_parse("10.0.0.1/8", NULL, err, sizeof(err)));
	CHECK(strstr(err, "bits set to the right") != NULL);
	CHECK(!client_proxies_parse("10.0.0.1, proxy.example", NULL, err, sizeof(err)));
	CHECK(strstr(err, "proxy.example") != NULL);

	p = proxies_of(" 127.0.0.1 , 10.0.0.0/8,2001:db8:1::/48, ::1, 192.168.0.0/16");
	CHECK_EQ(p.n, 5);
	a = addr_of("127.0.0.1");
	CHECK(client_proxies_contain(&p, &a));
	a = addr_of("127.0.0.2");
	CHECK(!client_proxies_contain(&p, &a));
	client_proxies_free(&p);

	p = proxies_of("10.0.0.0/8, 2001:db8:1::/48, ::1");
	a = addr_of("10.255.1.2");
	CHECK(client_proxies_contain(&p, &a));
	a = addr_of("::ffff:10.0.0.9");	/* an IPv4 peer of a dual-stack socket */
	CHECK(client_proxies_contain(&p, &a));
	a = addr_of("11.0.0.1");
	CHECK(!client_proxies_contain(&p, &a));
	a = addr_of("2001:db8:1:ffff::1");
	CHECK(client_proxies_contain(&p, &a));
	a = addr_of("2001:db8:2::1");
	CHECK(!client_proxies_contain(&p, &a));
	a = addr_of("::1");
	CHECK(client_proxies_contain(&p, &a));
	a = addr_of("::2");
	CHECK(!client_proxies_contain(&p, &a));
	client_proxies_free(&p);

	/* a prefix that is not a whole byte */
	p = proxies_of("192.168.4.0/22");
	a = addr_of("192.168.7.255");
	CHECK(client_proxies_contain(&p, &a));
	a = addr_of("192.168.8.0");
	CHECK(!client_proxies_contain(&p, &a));
	client_proxies_free(&p);

	/* 0.0.0.0/0 is every IPv4 address and no IPv6 one */
	p = proxies_of("0.0.0.0/0");
	a = addr_of("198.51.100.1");
	CHECK(client_proxies_contain(&p, &a));
	a = addr_of("2001:db8::1");
	CHECK(!client_proxies_contain(&p, &a));
	client_proxies_free(&p);

	/* the list's length is bounded */
	{
		char	   *big = malloc(20 * (CLIENT_PROXIES_MAX + 1));
		size_t		off = 0;

		REQUIRE(big != NULL);
		for (int i = 0; i <= CLIENT_PROXIES_MAX; i++)
			off += (size_t) sprintf(big + off, "%s10.%d.%d.1", i ? "," : "", i / 256, i % 256);
		CHECK(!client_proxies_parse(big, NULL, err, sizeof(err)));
		big[strrchr(big, ',') - big] = '\0';
		CHECK(client_proxies_parse(big, NULL, err, sizeof(err)));
		free(big);
	}
}

TEST(walk_from_the_right)
{
	ClientProxies p = proxies_of("127.0.0.1, 10.0.0.0/8, 2001:db8:ffff::/48");
	ClientProxies none = {0};
	char		who[INET6_ADDRSTRLEN];

	/* the proxy appended the client: the right-most is it */
	CHECK_EQ(walk1(&p, "203.0.113.7", who, sizeof(who)), CLIENT_FORWARD_FOUND);
	CHECK_STR_EQ(who, "203.0.113.7");
	/* what the client said of itself, left of it, is never read */
	CHECK_EQ(walk1(&p, "1.1.1.1, 203.0.113.7", who, sizeof(who)), CLIENT_FORWARD_FOUND);
	CHECK_STR_EQ(who, "203.0.113.7");
	CHECK_EQ(walk1(&p, "garbage, 203.0.113.7", who, sizeof(who)), CLIENT_FORWARD_FOUND);
	CHECK_STR_EQ(who, "203.0.113.7");
	/* trusted hops on the right are stepped over */
	CHECK_EQ(walk1(&p, "1.1.1.1,203.0.113.7, 10.1.2.3,10.9.9.9", who, sizeof(who)),
			 CLIENT_FORWARD_FOUND);
	CHECK_STR_EQ(who, "203.0.113.7");
	CHECK_EQ(walk1(&p, "198.51.100.1, [2001:db8:ffff::5]:80", who, sizeof(who)),
			 CLIENT_FORWARD_FOUND);
	CHECK_STR_EQ(who, "198.51.100.1");
	CHECK_EQ(walk1(&p, "2001:db8:1::9, 10.0.0.1:1234", who, sizeof(who)), CLIENT_FORWARD_FOUND);
	CHECK_STR_EQ(who, "2001:db8:1::9");
	/* all trusted: the left-most */
	CHECK_EQ(walk1(&p, "10.0.0.5, 10.0.0.6", who, sizeof(who)), CLIENT_FORWARD_FOUND);
	CHECK_STR_EQ(who, "10.0.0.5");
	/* empty entries are skipped; nothing at all is no entry */
	CHECK_EQ(walk1(&p, " , 203.0.113.7 , ,", who, sizeof(who)), CLIENT_FORWARD_FOUND);
	CHECK_STR_EQ(who, "203.0.113.7");
	CHECK_EQ(walk1(&p, "", who, sizeof(who)), CLIENT_FORWARD_NONE);
	CHECK_EQ(walk1(&p, " ,, ", who, sizeof(who)), CLIENT_FORWARD_NONE);
	/* garbage the walk reaches: malformed */
	CHECK_EQ(walk1(&p, "unknown", who, sizeof(who)), CLIENT_FORWARD_MALFORMED);
	CHECK_EQ(walk1(&p, "203.0.113.7, garbage", who, sizeof(who)), CLIENT_FORWARD_MALFORMED);
	CHECK_EQ(walk1(&p, "garbage, 10.0.0.1", who, sizeof(who)), CLIENT_FORWARD_MALFORMED);
	CHECK_EQ(walk1(&p, "203.0.113.7;for=x", who, sizeof(who)), CLIENT_FORWARD_MALFORMED);
	/* nothing is trusted: the right-most is the client */
	CHECK_EQ(walk1(&none, "1.1.1.1, 203.0.113.7", who, sizeof(who)), CLIENT_FORWARD_FOUND);
	CHECK_STR_EQ(who, "203.0.113.7");

	/* too many trusted hops to walk: malformed */
	{
		char		hops[64 * (CLIENT_FORWARD_HOPS_MAX + 2)];
		size_t		off = (size_t) sprintf(hops, "203.0.113.7");

		for (int i = 0; i < CLIENT_FORWARD_HOPS_MAX - 1; i++)
			off += (size_t) sprintf(hops + off, ", 10.0.0.%d", i + 1);
		CHECK_EQ(walk1(&p, hops, who, sizeof(who)), CLIENT_FORWARD_FOUND);
		CHECK_STR_EQ(who, "203.0.113.7");
		strcpy(hops + off, ", 10.0.0.99");
		CHECK_EQ(walk1(&p, hops, who, sizeof(who)), CLIENT_FORWARD_MALFORMED);
	}
	/* a very long header costs only the hops walked: the left part is never read */
	{
		size_t		n = 1024 * 1024;
		char	   *huge = malloc(n + 32);

		REQUIRE(huge != NULL);
		memset(huge, 'x', n);
		strcpy(huge + n, ", 203.0.113.7");
		CHECK_EQ(walk1(&p, huge, who, sizeof(who)), CLIENT_FORWARD_FOUND);
		CHECK_STR_EQ(who, "203.0.113.7");
		free(huge);
	}
	client_proxies_free(&p);
}

TEST(several_headers_are_one_list)
{
	ClientProxies p = proxies_of("10.0.0.0/8");
	const char *values[CLIENT_FORWARD_HEADERS_MAX + 1];
	size_t		lens[CLIENT_FORWARD_HEADERS_MAX + 1];
	ClientAddr	a;

	values[0] = "203.0.113.7";
	values[1] = "10.0.0.1, 10.0.0.2";
	for (int i = 0; i < 2; i++)
		lens[i] = strlen(values[i]);
	CHECK_EQ(client_walk_forwarded(&p, values, lens, 2, false, &a), CLIENT_FORWARD_FOUND);
	CHECK(same_addr(&a, "203.0.113.7"));
	/* the last header's right-most entry comes first */
	values[0] = "198.51.100.1";
	values[1] = "203.0.113.7, 10.0.0.2";
	lens[0] = strlen(values[0]);
	lens[1] = strlen(values[1]);
	CHECK_EQ(client_walk_forwarded(&p, values, lens, 2, false, &a), CLIENT_FORWARD_FOUND);
	CHECK(same_addr(&a, "203.0.113.7"));
	/* an empty header in between */
	values[0] = "198.51.100.1";
	values[1] = "";
	lens[1] = 0;
	CHECK_EQ(client_walk_forwarded(&p, values, lens, 2, false, &a), CLIENT_FORWARD_FOUND);
	CHECK(same_addr(&a, "198.51.100.1"));
	/* more headers than are read: the last ones name the client */
	for (int i = 0; i <= CLIENT_FORWARD_HEADERS_MAX; i++)
	{
		values[i] = "203.0.113.7";
		lens[i] = strlen(values[i]);
	}
	CHECK_EQ(client_walk_forwarded(&p, values, lens, CLIENT_FORWARD_HEADERS_MAX, false, &a),
			 CLIENT_FORWARD_FOUND);
	CHECK_EQ(client_walk_forwarded(&p, values, lens, CLIENT_FORWARD_HEADERS_MAX + 1, false, &a),
			 CLIENT_FORWARD_FOUND);
	CHECK(same_addr(&a, "203.0.113.7"));
	client_proxies_free(&p);
}

/*
 * A proxy that adds a header of its own rather than appending to the
 * client's (HAProxy's way): the headers a client sent come first, and as
 * many of them as it likes change nothing.  Only the last
 * CLIENT_FORWARD_HEADERS_MAX headers are read; a walk that would need an
 * earlier one is malformed.
 */
TEST(many_headers_only_the_last_are_read)
{
	ClientProxies p = proxies_of("10.0.0.0/8");
	const char *values[12];
	size_t		lens[12];
	ClientAddr	a;

	/* (a) 12 headers, the last names an untrusted client: that client */
	for (int i = 0; i < 11; i++)
		values[i] = "198.51.100.66";
	values[11] = "203.0.113.7";
	for (int i = 0; i < 12; i++)
		lens[i] = strlen(values[i]);
	CHECK_EQ(client_walk_forwarded(&p, values, lens, 12, false, &a), CLIENT_FORWARD_FOUND);
	CHECK(same_addr(&a, "203.0.113.7"));
	/* ... and behind two proxies, each in a header of its own */
	values[10] = "203.0.113.8";
	values[11] = "10.0.0.1";
	for (int i = 10; i < 12; i++)
		lens[i] = strlen(values[i]);
	CHECK_EQ(client_walk_forwarded(&p, values, lens, 12, false, &a), CLIENT_FORWARD_FOUND);
	CHECK(same_addr(&a, "203.0.113.8"));
	/* the same, handed over as the last 8 with earlier ones left out */
	CHECK_EQ(client_walk_forwarded(&p, values + 4, lens + 4, CLIENT_FORWARD_HEADERS_MAX, true, &a),
			 CLIENT_FORWARD_FOUND);
	CHECK(same_addr(&a, "203.0.113.8"));

	/* (b) 12 headers of trusted entries only: the client is in one not read */
	for (int i = 0; i < 12; i++)
	{
		values[i] = "10.0.0.1, 10.0.0.2";
		lens[i] = strlen(values[i]);
	}
	CHECK_EQ(client_walk_forwarded(&p, values, lens, 12, false, &a), CLIENT_FORWARD_MALFORMED);
	CHECK_EQ(client_walk_forwarded(&p, values + 4, lens + 4, CLIENT_FORWARD_HEADERS_MAX, true, &a),
			 CLIENT_FORWARD_MALFORMED);
	/* the 9th from the right would be needed: malformed, though it names a client */
	values[3] = "203.0.113.9";
	lens[3] = strlen(values[3]);
	CHECK_EQ(client_walk_forwarded(&p, values, lens, 12, false, &a), CLIENT_FORWARD_MALFORMED);
	/* ... and blank headers read as far as that too */
	for (int i = 4; i < 12; i++)
	{
		values[i] = " ";
		lens[i] = 1;
	}
	CHECK_EQ(client_walk_forwarded(&p, values, lens, 12, false, &a), CLIENT_FORWARD_MALFORMED);
	CHECK_EQ(client_walk_forwarded(&p, values + 4, lens + 4, CLIENT_FORWARD_HEADERS_MAX, true, &a),
			 CLIENT_FORWARD_MALFORMED);

	/* (c) exactly 8 of trusted entries, nothing before: the left-most, as ever */
	for (int i = 0; i < CLIENT_FORWARD_HEADERS_MAX; i++)
	{
		values[i] = i == 0 ? "10.0.0.9, 10.0.0.2" : "10.0.0.1";
		lens[i] = strlen(values[i]);
	}
	CHECK_EQ(client_walk_forwarded(&p, values, lens, CLIENT_FORWARD_HEADERS_MAX, false, &a),
			 CLIENT_FORWARD_FOUND);
	CHECK(same_addr(&a, "10.0.0.9"));
	/* ... and exactly 8 whose first names a client */
	values[0] = "203.0.113.7, 10.0.0.2";
	lens[0] = strlen(values[0]);
	CHECK_EQ(client_walk_forwarded(&p, values, lens, CLIENT_FORWARD_HEADERS_MAX, false, &a),
			 CLIENT_FORWARD_FOUND);
	CHECK(same_addr(&a, "203.0.113.7"));
	client_proxies_free(&p);
}

TEST(client_keys)
{
	static const unsigned char v4[4] = {203, 0, 113, 7};
	static const unsigned char v6[8] = {0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 2};
	ClientAddr	a = addr_of("203.0.113.7");
	ClientAddr	b;
	uint64_t	k4 = fnv_hash_bytes(FNV_HASH_START, v4, 4);
	uint64_t	k6 = fnv_hash_bytes(FNV_HASH_START, v6, 8);

	/* as the key was before trusted proxies: the IPv4 address, the IPv6 /64 */
	CHECK_EQ(client_addr_key(&a), k4 ? k4 : 1);
	b = addr_of("::ffff:203.0.113.7");
	CHECK_EQ(client_addr_key(&b), client_addr_key(&a));
	a = addr_of("2001:db8:1:2::1");
	b = addr_of("2001:db8:1:2:ffff:ffff:ffff:ffff");
	CHECK_EQ(client_addr_key(&a), k6 ? k6 : 1);
	CHECK_EQ(client_addr_key(&a), client_addr_key(&b));
	b = addr_of("2001:db8:1:3::1");
	CHECK(client_addr_key(&a) != client_addr_key(&b));
	CHECK(client_addr_key(&a) != 0);
}

/* ---------------------------------------------- access_identify_client */

static AccessPolicy policy;
static bool policy_ready;

static const AccessRules *
rules_trusting(const char *list)
{
	AccessSettings s = {.cors_allowed_origins = "*", .trusted_proxies = list};
	char		err[256];

	if (!policy_ready)
	{
		if (access_policy_init(&policy, &s, err, sizeof(err)) != 0)
			FAIL("init: %s", err);
		policy_ready = true;
	}
	else if (access_policy_update(&policy, &s, err, sizeof(err)) != 0)
		FAIL("update: %s", err);
	return access_policy_rules(&policy);
}

static struct sockaddr_in
peer4(const char *text)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(40000)};

	if (inet_pton(AF_INET, text, &sa.sin_addr) != 1)
		FAIL("bad test address %s", text);
	return sa;
}

static AccessClient
identify(const AccessRules *r, const char *peer, const char *xff)
{
	struct sockaddr_in sa = peer4(peer);
	size_t		len = xff ? strlen(xff) : 0;
	AccessClient c;

	access_identify_client(r, (struct sockaddr *) &sa, &xff, &len, xff ? 1 : 0, false, &c);
	return c;
}

static uint64_t
key_of(const char *text)
{
	ClientAddr	a = addr_of(text);

	return client_addr_key(&a);
}

TEST(forwarded_clients_behind_trusted_proxies)
{
	const AccessRules *r = rules_trusting("127.0.0.1, 10.0.0.0/8");
	AccessClient c;
	struct sockaddr_in sa;

	/* a trusted proxy forwards: the client is the one it names, and not loopback */
	c = identify(r, "127.0.0.1", "203.0.113.7");
	CHECK(c.forwarded);
	CHECK(!c.malformed);
	CHECK(!c.loopback);
	CHECK_EQ(c.key, key_of("203.0.113.7"));
	/* two users behind one proxy are two clients */
	CHECK(identify(r, "127.0.0.1", "203.0.113.8").key != c.key);
	/* even a forwarded loopback address is not a loopback client */
	c = identify(r, "127.0.0.1", "127.0.0.1");
	CHECK(c.forwarded);
	CHECK(!c.loopback);
	/* the proxy's own request, without the header: loopback, itself */
	c = identify(r, "127.0.0.1", NULL);
	CHECK(!c.forwarded);
	CHECK(c.loopback);
	CHECK_EQ(c.key, key_of("127.0.0.1"));
	/* a malformed header: the proxy is the client, and it is still forwarded */
	c = identify(r, "127.0.0.1", "unknown");
	CHECK(c.forwarded);
	CHECK(c.malformed);
	CHECK(!c.loopback);
	CHECK_EQ(c.key, key_of("127.0.0.1"));
	/* an empty one too */
	c = identify(r, "10.1.1.1", " ");
	CHECK(c.forwarded);
	CHECK(!c.malformed);
	CHECK_EQ(c.key, key_of("10.1.1.1"));

	/* an untrusted peer: the header is ignored entirely */
	c = identify(r, "127.0.0.2", "203.0.113.7");
	CHECK(!c.forwarded);
	CHECK(c.loopback);
	CHECK_EQ(c.key, key_of("127.0.0.2"));
	c = identify(r, "198.51.100.1", "203.0.113.7");
	CHECK(!c.forwarded);
	CHECK(!c.loopback);
	CHECK_EQ(c.key, key_of("198.51.100.1"));
	CHECK(!access_peer_is_trusted(r, (struct sockaddr *) &(struct sockaddr_in) {.sin_family = AF_INET}));
	sa = peer4("10.200.0.1");
	CHECK(access_peer_is_trusted(r, (struct sockaddr *) &sa));

	/* none trusted (the default): every header is ignored */
	r = rules_trusting("");
	c = identify(r, "127.0.0.1", "203.0.113.7");
	CHECK(!c.forwarded);
	CHECK(c.loopback);
	CHECK_EQ(c.key, key_of("127.0.0.1"));
	r = rules_trusting(NULL);
	CHECK_EQ(identify(r, "127.0.0.1", "203.0.113.7").key, key_of("127.0.0.1"));

	/* an IPv6 peer, trusted by its range; the client folded to its /64 */
	{
		struct sockaddr_in6 sa6 = {.sin6_family = AF_INET6};
		const char *xff = "2001:db8:5:6::77";
		size_t		len = strlen(xff);

		r = rules_trusting("2001:db8:ffff::/48");
		inet_pton(AF_INET6, "2001:db8:ffff::1", &sa6.sin6_addr);
		access_identify_client(r, (struct sockaddr *) &sa6, &xff, &len, 1, false, &c);
		CHECK(c.forwarded);
		CHECK_EQ(c.key, key_of("2001:db8:5:6::1"));
		/* a v4-mapped peer of a dual-stack socket matches its IPv4 range */
		r = rules_trusting("192.0.2.0/24");
		inet_pton(AF_INET6, "::ffff:192.0.2.10", &sa6.sin6_addr);
		access_identify_client(r, (struct sockaddr *) &sa6, &xff, &len, 1, false, &c);
		CHECK(c.forwarded);
		CHECK_EQ(c.key, key_of("2001:db8:5:6::1"));
	}

	/* the rules compare the list: an update that changes it is published */
	{
		const AccessRules *before = rules_trusting("127.0.0.1");

		CHECK(rules_trusting("127.0.0.1") == before);
		CHECK(rules_trusting("127.0.0.2") != before);
	}
	/* a bad list is refused, and the rules in force stay */
	{
		AccessSettings s = {.cors_allowed_origins = "*", .trusted_proxies = "proxy.example"};
		char		err[256];
		const AccessRules *before = access_policy_rules(&policy);

		CHECK(access_policy_update(&policy, &s, err, sizeof(err)) != 0);
		CHECK(access_policy_rules(&policy) == before);
	}
	access_policy_destroy(&policy);
	policy_ready = false;
}

TEST(forwarded_clients_are_not_loopback_clients)
{
	const AccessRules *r = rules_trusting("127.0.0.1");
	AccessClient c = identify(r, "127.0.0.1", "127.0.0.1");
	AccessRequest req = {.host = "localhost", .host_len = 9, .needs_secret = true};

	/* no secret: loopback-only; the forwarded request is refused */
	CHECK(access_loopback_only(r));
	req.peer_loopback = c.loopback;
	CHECK_EQ(access_decide(r, &req), ACCESS_PEER_NOT_LOOPBACK);
	c = identify(r, "127.0.0.1", NULL);
	req.peer_loopback = c.loopback;
	CHECK_EQ(access_decide(r, &req), ACCESS_ALLOWED);
	access_policy_destroy(&policy);
	policy_ready = false;
}

UNIT_MAIN()
