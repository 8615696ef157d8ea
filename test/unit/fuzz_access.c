/*
 * fuzz_access.c
 *		The access rules (src/net/access_policy.c) on hostile input: Host and
 *		Origin headers, the secret a client sends, and origin allow-lists.
 *
 * The input holds up to five fields separated by '\n': a Host header, an
 * Origin header, the secret the client sends, the configured secret and
 * the configured origin list (the last two as an operator would write
 * them).  Oracles: nothing crashes or leaks (ASan); the secret is accepted
 * exactly when it is byte for byte the configured one; a Host or Origin
 * taken for loopback holds only characters a host name, an address or a
 * port may hold; while loopback-only, a non-loopback peer is never
 * allowed; every origin a valid list names is allowed, with a secret set.
 */
#define _GNU_SOURCE
#include "fuzz_common.h"

#include "access_policy.h"

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

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char	   *buf;
	const char *f[5] = {"", "", "", "", ""};
	size_t		len[5] = {0};
	char	   *secret;
	char	   *origins;
	char		err[256];
	AccessPolicy policy;
	AccessSettings settings = {0};

	if (size > 8192)
		return 0;
	buf = malloc(size + 1);
	FUZZ_ASSERT(buf != NULL);
	memcpy(buf, data, size);
	buf[size] = '\0';
	fields(buf, size, f, len, 5);

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
	FUZZ_ASSERT(secret != NULL && origins != NULL);
	settings.secret = secret;
	settings.cors_allowed_origins = origins;
	if (strlen(secret) > 0)
		FUZZ_ASSERT(access_secret_equal(secret, strlen(secret), f[2], len[2]) ==
					(len[2] == strlen(secret) && memcmp(f[2], secret, len[2]) == 0));

	for (int insecure = 0; insecure <= 1; insecure++)
	{
		settings.insecure = insecure;
		if (access_policy_init(&policy, &settings, err, sizeof(err)) != 0)
		{
			FUZZ_ASSERT(!access_origins_valid(origins, err, sizeof(err)));
			continue;
		}
		{
			const AccessRules *r = access_policy_rules(&policy);

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
	free(buf);
	return 0;
}
