/*
 * fuzz_access.c
 *		The access rules (src/net/access_policy.c) on hostile input: Host and
 *		Origin headers, the secret a client sends, and origin allow-lists.
 *
 * The input holds up to seven fields separated by '\n': a Host header, an
 * Origin header, the secret the client sends, the configured secret, the
 * configured origin list, the configured trusted proxies (those three as
 * an operator would write them) and X-Forwarded-For headers (split at
 * '\r' into several).  Oracles: nothing crashes or leaks (ASan); the
 * secret is accepted exactly when it is byte for byte the configured one;
 * a Host or Origin taken for loopback holds only characters a host name,
 * an address or a port may hold; while loopback-only, a non-loopback peer
 * is never allowed; every origin a valid list names is allowed, with a
 * secret set; an X-Forwarded-For entry taken for an address holds only
 * characters an address and a port may hold; X-Forwarded-For changes the
 * client only from a trusted peer, and a forwarded request is never a
 * loopback client; with nothing trusted, the walk finds the right-most
 * entry.
 */
#define _GNU_SOURCE
#include "fuzz_common.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "access_policy.h"
#include "client_address.h"

/* Splits data at '\n' into at most n fields (pointers into a copy). */
static int
fields(char *buf, size_t size, const char **f, size_t *len, int n)
{
	int			k = 0;
	size_t		start = 0;

	for (size_t i = 0; i <= size && k < n; i++)
		if (i == size || buf[i] == '\n')
		{
			f[k] = buf + start;
			len[k] = i - start;
			k++;
			start = i + 1;
		}
	return k;
}

static bool
host_chars_only(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++)
	{
		char		c = s[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
			  c == '.' || c == '-' || c == ':' || c == '[' || c == ']'))
			return false;
	}
	return true;
}

static bool
forwarded_chars_only(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++)
	{
		char		c = s[i];

		if (!((c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || (c >= '0' && c <= '9') ||
			  c == '.' || c == ':' || c == '[' || c == ']' || c == ' ' || c == '\t'))
			return false;
	}
	return true;
}

/*
 * X-Forwarded-For: each entry, the walk with nothing trusted, and who the
 * request comes from under `r` from a loopback and a remote peer.
 */
static void
fuzz_forwarded(const AccessRules *r, const char *xff, size_t xff_len)
{
	const char *values[CLIENT_FORWARD_HEADERS_MAX + 2];
	size_t		lens[CLIENT_FORWARD_HEADERS_MAX + 2];
	int			n = 0;
	size_t		start = 0;
	ClientProxies none = {0};
	ClientAddr	a;
	ClientAddr	last;
	bool		have_last = false;
	bool		last_ok = false;
	ClientForward f;

	for (size_t i = 0; i <= xff_len && n < CLIENT_FORWARD_HEADERS_MAX + 2; i++)
		if (i == xff_len || xff[i] == '\r')
		{
			values[n] = xff + start;
			lens[n] = i - start;
			n++;
			start = i + 1;
		}
	/*
	 * every entry alone, and the right-most one that is not empty among the
	 * headers the walk reads (the last CLIENT_FORWARD_HEADERS_MAX)
	 */
	for (int v = 0; v < n; v++)
	{
		size_t		s = 0;

		for (size_t i = 0; i <= lens[v]; i++)
			if (i == lens[v] || values[v][i] == ',')
			{
				const char *e = values[v] + s;
				size_t		elen = i - s;
				bool		blank = true;

				for (size_t k = 0; k < elen; k++)
					blank &= e[k] == ' ' || e[k] == '\t';
				if (client_addr_parse_forwarded(e, elen, &a))
					FUZZ_ASSERT(forwarded_chars_only(e, elen));
				if (!blank && v >= n - CLIENT_FORWARD_HEADERS_MAX)
				{
					have_last = true;
					last_ok = client_addr_parse_forwarded(e, elen, &last);
				}
				s = i + 1;
			}
	}
	f = client_walk_forwarded(&none, values, lens, n, false, &a);
	if (!have_last)
		FUZZ_ASSERT(f == (n > CLIENT_FORWARD_HEADERS_MAX ? CLIENT_FORWARD_MALFORMED :
						  CLIENT_FORWARD_NONE));
	else if (last_ok)
		FUZZ_ASSERT(f == CLIENT_FORWARD_FOUND && memcmp(a.b, last.b, 16) == 0);
	else
		FUZZ_ASSERT(f == CLIENT_FORWARD_MALFORMED);
	/* the last ones alone, the earlier left out (as the server hands them over) */
	if (n > CLIENT_FORWARD_HEADERS_MAX)
	{
		int			skip = n - CLIENT_FORWARD_HEADERS_MAX;
		ClientAddr	b;

		FUZZ_ASSERT(client_walk_forwarded(&none, values + skip, lens + skip,
										  CLIENT_FORWARD_HEADERS_MAX, true, &b) == f);
		if (f == CLIENT_FORWARD_FOUND)
			FUZZ_ASSERT(memcmp(a.b, b.b, 16) == 0);
	}

	for (int p = 0; p <= 1; p++)
	{
		struct sockaddr_in sa = {.sin_family = AF_INET};
		ClientAddr	peer;
		AccessClient c;

		inet_pton(AF_INET, p ? "127.0.0.1" : "198.51.100.1", &sa.sin_addr);
		client_addr_from_sockaddr((struct sockaddr *) &sa, &peer);
		access_identify_client(r, (struct sockaddr *) &sa, values, lens, n, false, &c);
		FUZZ_ASSERT(c.key != 0);
		if (!access_peer_is_trusted(r, (struct sockaddr *) &sa))
		{
			FUZZ_ASSERT(!c.forwarded && c.key == client_addr_key(&peer));
			FUZZ_ASSERT(c.loopback == (p == 1));
		}
		else
		{
			FUZZ_ASSERT(c.forwarded == (n > 0));
			if (c.forwarded)
				FUZZ_ASSERT(!c.loopback);
			if (c.malformed)
				FUZZ_ASSERT(c.key == client_addr_key(&peer));
		}
	}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char	   *buf;
	const char *f[7] = {"", "", "", "", "", "", ""};
	size_t		len[7] = {0};
	char	   *secret;
	char	   *origins;
	char	   *proxies;
	char		err[256];
	AccessPolicy policy;
	AccessSettings settings = {0};

	if (size > 8192)
		return 0;
	buf = malloc(size + 1);
	FUZZ_ASSERT(buf != NULL);
	memcpy(buf, data, size);
	buf[size] = '\0';
	fields(buf, size, f, len, 7);

	if (access_host_is_loopback(f[0], len[0]))
		FUZZ_ASSERT(len[0] > 0 && host_chars_only(f[0], len[0]));
	if (access_origin_is_loopback(f[1], len[1]))
	{
		const char *sep = memmem(f[1], len[1], "://", 3);

		FUZZ_ASSERT(sep != NULL);
		FUZZ_ASSERT(host_chars_only(sep + 3, len[1] - (size_t) (sep + 3 - f[1])));
	}

	/* the configured values are C strings, as PostgreSQL hands them over */
	secret = strndup(f[3], len[3]);
	origins = strndup(f[4], len[4]);
	proxies = strndup(f[5], len[5]);
	FUZZ_ASSERT(secret != NULL && origins != NULL && proxies != NULL);
	settings.secret = secret;
	settings.cors_allowed_origins = origins;
	settings.trusted_proxies = proxies;
	if (strlen(secret) > 0)
		FUZZ_ASSERT(access_secret_equal(secret, strlen(secret), f[2], len[2]) ==
					(len[2] == strlen(secret) && memcmp(f[2], secret, len[2]) == 0));

	for (int insecure = 0; insecure <= 1; insecure++)
	{
		settings.insecure = insecure;
		if (access_policy_init(&policy, &settings, err, sizeof(err)) != 0)
		{
			FUZZ_ASSERT(!access_origins_valid(origins, err, sizeof(err)) ||
						!client_proxies_parse(proxies, NULL, err, sizeof(err)));
			continue;
		}
		FUZZ_ASSERT(client_proxies_parse(proxies, NULL, err, sizeof(err)));
		{
			const AccessRules *r = access_policy_rules(&policy);

			if (insecure)
				fuzz_forwarded(r, f[6], len[6]);

			for (int peer = 0; peer <= 1; peer++)
			{
				AccessRequest req = {.peer_loopback = peer, .host = f[0], .host_len = len[0],
					.origin = len[1] ? f[1] : NULL, .origin_len = len[1],
				.secret = f[2], .secret_len = len[2], .needs_secret = true};
				AccessVerdict v = access_decide(r, &req);

				if (access_loopback_only(r) && !peer)
					FUZZ_ASSERT(v == ACCESS_PEER_NOT_LOOPBACK);
				if (v == ACCESS_ALLOWED && access_has_secret(r))
					FUZZ_ASSERT(len[2] == strlen(secret) && memcmp(f[2], secret, len[2]) == 0);
			}
			/* with a secret, each origin the list names is allowed */
			if (access_has_secret(r))
			{
				char	   *copy = strdup(origins);

				for (char *tok = strtok(copy, ","); tok; tok = strtok(NULL, ","))
				{
					while (*tok == ' ' || *tok == '\t')
						tok++;
					for (char *e = tok + strlen(tok); e > tok && (e[-1] == ' ' || e[-1] == '\t');)
						*--e = '\0';
					if (*tok && strcmp(tok, "*") != 0)
						FUZZ_ASSERT(access_origin_allowed(r, tok, strlen(tok)));
				}
				free(copy);
			}
		}
		access_policy_destroy(&policy);
	}
	free(secret);
	free(origins);
	free(proxies);
	free(buf);
	return 0;
}
