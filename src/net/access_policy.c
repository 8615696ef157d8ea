/*-------------------------------------------------------------------------
 *
 * access_policy.c
 *		Who may use the shape routes: the secret, loopback-only serving,
 *		the Host and Origin checks, and the CORS allow-list; and who a
 *		request comes from, behind the trusted proxies.
 *
 * This file runs on libmicrohttpd threads and must not call into
 * PostgreSQL.
 *
 * The rules, decided per request by access_decide() on the route that
 * routing chose (http_request.c), never on the raw path:
 *
 *	- A secret set (shape_sync.secret): every shape request but the CORS
 *	  preflight must carry it as secret= or api_secret=, or gets 401.  The
 *	  comparison takes a time that depends on the length of the configured
 *	  secret only, never on what the client sent.
 *	- No secret and not insecure: loopback-only.  A peer that is not a
 *	  loopback address gets 403, and so does a request whose Host header is
 *	  not a loopback name or address: a page of another site that made its
 *	  own host name resolve to 127.0.0.1 (DNS rebinding) sends its own name
 *	  as Host.
 *	- Origin: a browser page of an origin the allow-list does not name gets
 *	  403, and its responses carry no access-control-allow-origin.  "*" (the
 *	  default) allows any origin once a secret guards the data (as Electric
 *	  does), but while loopback-only it allows only loopback origins: any
 *	  page the machine's browser opens could otherwise read the database
 *	  through the user's own localhost.  A request without Origin is not a
 *	  browser's cross-origin request and is not checked, except that while
 *	  loopback-only a request a browser marks Sec-Fetch-Site: cross-site (an
 *	  <img> or a no-cors fetch of another site's page, which sends no
 *	  Origin) gets 403 too: it could not read the answer, but it could make
 *	  the server create shapes.
 *	- Trusted proxies (shape_sync.trusted_proxies): a request from one of
 *	  them that carries X-Forwarded-For is some other client's, forwarded,
 *	  so it is never a loopback client, even when the proxy runs on this
 *	  machine and even when the header names a loopback address: while
 *	  loopback-only it gets 403.  A request of the proxy's own (without the
 *	  header), and a request of any untrusted peer, is judged by its TCP
 *	  peer alone, whatever X-Forwarded-For it carries.  The client the
 *	  per-client limits count by is the one X-Forwarded-For names
 *	  (client_address.c), or the proxy itself when the header cannot be
 *	  read.
 *
 * Notes on synchronization
 * ------------------------
 * - The rules in force are one immutable AccessRules, published through
 *   `current` with a release store and read with an acquire load, so a
 *   request reads a consistent version without a lock and without writing
 *   any shared cache line.
 * - Only the main thread (SIGHUP) publishes, under `lock`.  A replaced
 *   version may still be in use by a request, so it goes on the `retired`
 *   list and is freed only by access_policy_destroy, after every HTTP
 *   thread has stopped.  A version is published only when the settings
 *   actually changed, so the list grows by one per reload that changes
 *   the secret, insecure, the origin list or the trusted proxies.
 *
 * IDENTIFICATION
 *	  src/net/access_policy.c
 *
 *-------------------------------------------------------------------------
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "access_policy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#ifdef POSTGRES_H
#error "access_policy.c runs on HTTP threads and must not include postgres.h"
#endif

#define ACCESS_NAME_MAX		255		/* a host name, as DNS allows */

struct AccessRules
{
	AccessRules *older;			/* the retired list */
	bool		insecure;
	char	   *secret;			/* NULL: none */
	size_t		secret_len;
	bool		any_origin;		/* "*" */
	int			norigins;
	char	  **origins;		/* lower case, no trailing "/" */
	size_t	   *origin_lens;
	ClientProxies proxies;		/* shape_sync.trusted_proxies */
};

/* ------------------------------------------------------------ addresses */

bool
access_sockaddr_is_loopback(const struct sockaddr *addr)
{
	if (addr == NULL)
		return false;
	if (addr->sa_family == AF_INET)
	{
		const struct sockaddr_in *in = (const struct sockaddr_in *) addr;

		return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
	}
	if (addr->sa_family == AF_INET6)
	{
		const struct in6_addr *a = &((const struct sockaddr_in6 *) addr)->sin6_addr;

		return IN6_IS_ADDR_LOOPBACK(a) ||
			(IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
	}
	return false;
}

/* ":<1 to 5 digits>" or nothing. */
static bool
access_port_ok(const char *p, const char *end)
{
	if (p == end)
		return true;
	if (*p != ':' || end - p < 2 || end - p > 6)
		return false;
	for (p++; p < end; p++)
		if (*p < '0' || *p > '9')
			return false;
	return true;
}

/* A host name that is "localhost" or ends in ".localhost" (RFC 6761). */
static bool
access_name_is_localhost(const char *name, size_t len)
{
	static const char suffix[] = "localhost";
	size_t		n = sizeof(suffix) - 1;

	if (len > 0 && name[len - 1] == '.')
		len--;					/* the absolute form, "localhost." */
	if (len < n || strncasecmp(name + len - n, suffix, n) != 0)
		return false;
	if (len > n && name[len - n - 1] != '.')
		return false;			/* "evillocalhost" */
	for (size_t i = 0; i + n < len; i++)
	{
		char		c = name[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			  (c >= '0' && c <= '9') || c == '-' || c == '.'))
			return false;
	}
	return len == n || (len > n + 1 && name[0] != '.');
}

/*
 * A Host header value (host[:port]) that names this machine's loopback:
 * localhost and its subdomains, 127.0.0.0/8, [::1].
 */
bool
access_host_is_loopback(const char *host, size_t len)
{
	char		buf[ACCESS_NAME_MAX + 1];
	const char *end = host + len;
	const char *colon;
	size_t		name_len;

	if (host == NULL || len == 0 || len > ACCESS_NAME_MAX + 7 ||
		memchr(host, '\0', len) != NULL)
		return false;
	if (host[0] == '[')
	{
		const char *close = memchr(host, ']', len);
		struct in6_addr a6;

		if (close == NULL || (size_t) (close - host - 1) > ACCESS_NAME_MAX ||
			!access_port_ok(close + 1, end))
			return false;
		memcpy(buf, host + 1, close - host - 1);
		buf[close - host - 1] = '\0';
		if (inet_pton(AF_INET6, buf, &a6) != 1)
			return false;
		return IN6_IS_ADDR_LOOPBACK(&a6) ||
			(IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127);
	}
	colon = memrchr(host, ':', len);
	name_len = colon ? (size_t) (colon - host) : len;
	if (colon != NULL && !access_port_ok(colon, end))
		return false;
	if (name_len == 0 || name_len > ACCESS_NAME_MAX)
		return false;
	memcpy(buf, host, name_len);
	buf[name_len] = '\0';
	{
		struct in_addr a4;

		if (inet_pton(AF_INET, buf, &a4) == 1)
			return (ntohl(a4.s_addr) >> 24) == 127;
	}
	return access_name_is_localhost(buf, name_len);
}

/* Splits "scheme://rest" at "://"; false when it is not that shape. */
static bool
access_split_origin(const char *origin, size_t len, size_t *scheme_len,
					const char **rest, size_t *rest_len)
{
	const char *sep = len >= 3 ? memmem(origin, len, "://", 3) : NULL;

	if (sep == NULL || sep == origin)
		return false;
	for (const char *p = origin; p < sep; p++)
	{
		char		c = *p;

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			  (p > origin && ((c >= '0' && c <= '9') || c == '+' || c == '-' || c == '.'))))
			return false;
	}
	*scheme_len = (size_t) (sep - origin);
	*rest = sep + 3;
	*rest_len = len - *scheme_len - 3;
	return *rest_len > 0;
}

/* An Origin (scheme://host[:port]) of a page served by this machine's loopback. */
bool
access_origin_is_loopback(const char *origin, size_t len)
{
	size_t		scheme_len;
	const char *rest;
	size_t		rest_len;

	if (origin == NULL || !access_split_origin(origin, len, &scheme_len, &rest, &rest_len))
		return false;
	if (!((scheme_len == 4 && strncasecmp(origin, "http", 4) == 0) ||
		  (scheme_len == 5 && strncasecmp(origin, "https", 5) == 0)))
		return false;
	return access_host_is_loopback(rest, rest_len);
}

/* --------------------------------------------------------------- secret */

/*
 * Whether `given` is the secret.  The loop runs over the configured
 * secret's bytes whatever the client sent, and folds every difference,
 * the length's included, into one accumulator: the time depends on the
 * configured secret's length only.
 */
bool
access_secret_equal(const char *expected, size_t expected_len,
					const char *given, size_t given_len)
{
	volatile unsigned char diff = (unsigned char) (given_len != expected_len);
	static const char none = '\0';

	if (given == NULL || given_len == 0)
	{
		given = &none;
		given_len = 1;
		diff |= 1;
	}
	for (size_t i = 0; i < expected_len; i++)
	{
		size_t		j = i < given_len ? i : 0;

		diff |= (unsigned char) expected[i] ^ (unsigned char) given[j];
	}
	return diff == 0;
}

/* --------------------------------------------------------------- origins */

/*
 * Checks one allow-list entry, "scheme://host[:port]" with an optional
 * trailing "/", and stores it normalised (lower case, no "/").
 */
static bool
access_parse_origin(const char *start, size_t len, char **out, size_t *out_len,
					char *err, size_t errlen)
{
	size_t		scheme_len;
	const char *rest;
	size_t		rest_len;

	if (len > 0 && start[len - 1] == '/')
		len--;
	if (!access_split_origin(start, len, &scheme_len, &rest, &rest_len) ||
		memchr(rest, '/', rest_len) != NULL || memchr(rest, '?', rest_len) != NULL ||
		memchr(rest, '#', rest_len) != NULL || memchr(rest, '@', rest_len) != NULL ||
		rest_len > ACCESS_NAME_MAX + 7)
	{
		snprintf(err, errlen,
				 "\"%.*s\" is not an origin; write each as scheme://host[:port], for example https://app.example.com",
				 (int) (len > 200 ? 200 : len), start);
		return false;
	}
	for (size_t i = 0; i < len; i++)
		if ((unsigned char) start[i] <= ' ' || (unsigned char) start[i] >= 0x7f)
		{
			snprintf(err, errlen, "origin \"%.*s\" contains a space or a character that is not ASCII",
					 (int) (len > 200 ? 200 : len), start);
			return false;
		}
	if (out == NULL)
		return true;
	*out = malloc(len + 1);
	if (*out == NULL)
	{
		snprintf(err, errlen, "out of memory");
		return false;
	}
	for (size_t i = 0; i < len; i++)
		(*out)[i] = (start[i] >= 'A' && start[i] <= 'Z') ? (char) (start[i] - 'A' + 'a') : start[i];
	(*out)[len] = '\0';
	*out_len = len;
	return true;
}

/*
 * Walks the comma-separated list; with `rules`, fills its origins.  "*"
 * must stand alone; an empty list allows no origin at all.
 */
static bool
access_parse_origins(const char *list, AccessRules *rules, char *err, size_t errlen)
{
	const char *p = list ? list : "*";	/* unset: the default */
	int			n = 0;
	int			cap = 0;
	bool		star = false;
	const char *start;
	const char *end;

	while (setting_list_next(&p, &start, &end))
	{
		if (end - start == 1 && *start == '*')
		{
			star = true;
			continue;
		}
		if (rules != NULL && n == cap)
		{
			int			grown = cap ? cap * 2 : 4;
			char	  **o = realloc(rules->origins, sizeof(char *) * grown);
			size_t	   *l = o ? realloc(rules->origin_lens, sizeof(size_t) * grown) : NULL;

			if (o)
				rules->origins = o;
			if (l)
				rules->origin_lens = l;
			if (o == NULL || l == NULL)
			{
				snprintf(err, errlen, "out of memory");
				return false;
			}
			cap = grown;
		}
		if (!access_parse_origin(start, (size_t) (end - start),
								 rules ? &rules->origins[n] : NULL,
								 rules ? &rules->origin_lens[n] : NULL, err, errlen))
			return false;
		n++;
		if (rules)
			rules->norigins = n;
	}
	if (star && n > 0)
	{
		snprintf(err, errlen, "\"*\" allows every origin and cannot be combined with a list of origins");
		return false;
	}
	if (rules)
		rules->any_origin = star;
	return true;
}

bool
access_origins_valid(const char *list, char *err, size_t errlen)
{
	return access_parse_origins(list, NULL, err, errlen);
}

/* ---------------------------------------------------------------- rules */

static void
access_rules_free(AccessRules *rules)
{
	if (rules == NULL)
		return;
	if (rules->secret)
	{
		explicit_bzero(rules->secret, rules->secret_len);
		free(rules->secret);
	}
	for (int i = 0; i < rules->norigins; i++)
		free(rules->origins[i]);
	free(rules->origins);
	free(rules->origin_lens);
	client_proxies_free(&rules->proxies);
	free(rules);
}

static AccessRules *
access_rules_build(const AccessSettings *settings, char *err, size_t errlen)
{
	AccessRules *rules = calloc(1, sizeof(AccessRules));

	if (rules == NULL)
	{
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	rules->insecure = settings->insecure;
	if (settings->secret != NULL && settings->secret[0] != '\0')
	{
		rules->secret_len = strlen(settings->secret);
		rules->secret = malloc(rules->secret_len + 1);
		if (rules->secret == NULL)
		{
			snprintf(err, errlen, "out of memory");
			access_rules_free(rules);
			return NULL;
		}
		memcpy(rules->secret, settings->secret, rules->secret_len + 1);
	}
	if (!access_parse_origins(settings->cors_allowed_origins, rules, err, errlen) ||
		!client_proxies_parse(settings->trusted_proxies, &rules->proxies, err, errlen))
	{
		access_rules_free(rules);
		return NULL;
	}
	return rules;
}

static bool
access_rules_equal(const AccessRules *a, const AccessRules *b)
{
	if (a->insecure != b->insecure || a->any_origin != b->any_origin ||
		a->secret_len != b->secret_len || a->norigins != b->norigins ||
		(a->secret_len > 0 && memcmp(a->secret, b->secret, a->secret_len) != 0) ||
		!client_proxies_equal(&a->proxies, &b->proxies))
		return false;
	for (int i = 0; i < a->norigins; i++)
		if (strcmp(a->origins[i], b->origins[i]) != 0)
			return false;
	return true;
}

int
access_policy_init(AccessPolicy *policy, const AccessSettings *settings,
				   char *err, size_t errlen)
{
	AccessRules *rules = access_rules_build(settings, err, errlen);

	if (rules == NULL)
		return -1;
	pthread_mutex_init(&policy->lock, NULL);
	policy->retired = NULL;
	atomic_init(&policy->current, rules);
	return 0;
}

int
access_policy_update(AccessPolicy *policy, const AccessSettings *settings,
					 char *err, size_t errlen)
{
	AccessRules *rules = access_rules_build(settings, err, errlen);
	AccessRules *old;

	if (rules == NULL)
		return -1;
	pthread_mutex_lock(&policy->lock);
	old = (AccessRules *) atomic_load_explicit(&policy->current, memory_order_relaxed);
	if (access_rules_equal(old, rules))
	{
		pthread_mutex_unlock(&policy->lock);
		access_rules_free(rules);
		return 0;
	}
	old->older = policy->retired;
	policy->retired = old;
	atomic_store_explicit(&policy->current, rules, memory_order_release);
	pthread_mutex_unlock(&policy->lock);
	return 0;
}

void
access_policy_destroy(AccessPolicy *policy)
{
	AccessRules *r = policy->retired;

	while (r != NULL)
	{
		AccessRules *next = r->older;

		access_rules_free(r);
		r = next;
	}
	access_rules_free((AccessRules *) atomic_load(&policy->current));
	policy->retired = NULL;
	atomic_store(&policy->current, NULL);
	pthread_mutex_destroy(&policy->lock);
}

const AccessRules *
access_policy_rules(AccessPolicy *policy)
{
	return atomic_load_explicit(&policy->current, memory_order_acquire);
}

/* -------------------------------------------------------------- verdicts */

bool
access_loopback_only(const AccessRules *rules)
{
	return rules->secret == NULL && !rules->insecure;
}

bool
access_has_secret(const AccessRules *rules)
{
	return rules->secret != NULL;
}

bool
access_origin_allowed(const AccessRules *rules, const char *origin, size_t origin_len)
{
	if (origin == NULL)
		return true;
	if (memchr(origin, '\0', origin_len) != NULL)
		return false;
	if (rules->any_origin)
		return !access_loopback_only(rules) || access_origin_is_loopback(origin, origin_len);
	if (origin_len > 0 && origin[origin_len - 1] == '/')
		origin_len--;
	for (int i = 0; i < rules->norigins; i++)
		if (rules->origin_lens[i] == origin_len &&
			strncasecmp(rules->origins[i], origin, origin_len) == 0)
			return true;
	return false;
}

AccessVerdict
access_decide(const AccessRules *rules, const AccessRequest *req)
{
	if (access_loopback_only(rules))
	{
		if (!req->peer_loopback)
			return ACCESS_PEER_NOT_LOOPBACK;
		if (req->host != NULL && !access_host_is_loopback(req->host, req->host_len))
			return ACCESS_HOST_NOT_LOOPBACK;
		if (req->origin == NULL && req->fetch_site != NULL &&
			req->fetch_site_len == 10 && strncasecmp(req->fetch_site, "cross-site", 10) == 0)
			return ACCESS_ORIGIN_NOT_ALLOWED;
	}
	if (rules->secret != NULL && req->needs_secret &&
		!access_secret_equal(rules->secret, rules->secret_len, req->secret, req->secret_len))
		return ACCESS_SECRET_REQUIRED;
	if (!access_origin_allowed(rules, req->origin, req->origin_len))
		return ACCESS_ORIGIN_NOT_ALLOWED;
	return ACCESS_ALLOWED;
}

/* --------------------------------------------------------------- clients */

bool
access_peer_is_trusted(const AccessRules *rules, const struct sockaddr *peer)
{
	ClientAddr	addr;

	return rules->proxies.n > 0 && client_addr_from_sockaddr(peer, &addr) &&
		client_proxies_contain(&rules->proxies, &addr);
}

void
access_identify_client(const AccessRules *rules, const struct sockaddr *peer,
					   const char *const *forwarded, const size_t *forwarded_lens,
					   int nforwarded, bool earlier_forwarded, AccessClient *client)
{
	ClientAddr	addr;
	ClientAddr	named;

	memset(client, 0, sizeof(*client));
	if (!client_addr_from_sockaddr(peer, &addr))
		return;					/* unknown: no per-client limit, not loopback */
	client->key = client_addr_key(&addr);
	client->loopback = access_sockaddr_is_loopback(peer);
	if ((nforwarded == 0 && !earlier_forwarded) ||
		!client_proxies_contain(&rules->proxies, &addr))
		return;
	client->forwarded = true;
	client->loopback = false;
	switch (client_walk_forwarded(&rules->proxies, forwarded, forwarded_lens, nforwarded,
								  earlier_forwarded, &named))
	{
		case CLIENT_FORWARD_FOUND:
			client->key = client_addr_key(&named);
			break;
		case CLIENT_FORWARD_MALFORMED:
			client->malformed = true;
			break;
		case CLIENT_FORWARD_NONE:
			break;
	}
}
