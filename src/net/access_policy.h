/*-------------------------------------------------------------------------
 *
 * access_policy.h
 *		Who may use the shape routes: the secret, loopback-only serving,
 *		the Host and Origin checks, and the CORS allow-list; and who a
 *		request comes from, behind the trusted proxies.
 *
 * See access_policy.c for the rules and the notes on synchronization.
 *
 * IDENTIFICATION
 *	  src/net/access_policy.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef ACCESS_POLICY_H
#define ACCESS_POLICY_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "client_address.h"

struct sockaddr;

/* The settings, as the main thread hands them over (copied). */
typedef struct AccessSettings
{
	const char *secret;			/* NULL or "": no secret */
	bool		insecure;		/* serve every address without a secret */
	const char *cors_allowed_origins;	/* "*" (also NULL), or a comma-separated
										 * list; "" allows no origin */
	const char *trusted_proxies;	/* NULL or "": none; else a comma-separated
									 * list of addresses and CIDR ranges */
} AccessSettings;

/* One immutable version of the rules; see access_policy.c. */
typedef struct AccessRules AccessRules;

typedef struct AccessPolicy
{
	_Atomic(const AccessRules *) current;
	pthread_mutex_t lock;		/* guards `retired` */
	AccessRules *retired;		/* older versions, freed at destroy */
} AccessPolicy;

/* Main thread.  Both return 0, or -1 with a message in err. */
extern int	access_policy_init(AccessPolicy *policy, const AccessSettings *settings,
							   char *err, size_t errlen);
extern int	access_policy_update(AccessPolicy *policy, const AccessSettings *settings,
								 char *err, size_t errlen);
extern void access_policy_destroy(AccessPolicy *policy);

/* Any thread: the rules in force, valid until access_policy_destroy. */
extern const AccessRules *access_policy_rules(AccessPolicy *policy);

typedef enum AccessVerdict
{
	ACCESS_ALLOWED = 0,
	ACCESS_SECRET_REQUIRED,		/* 401: no secret, or the wrong one */
	ACCESS_PEER_NOT_LOOPBACK,	/* 403: loopback-only, and the peer is not */
	ACCESS_HOST_NOT_LOOPBACK,	/* 403: loopback-only, and Host is not (DNS
								 * rebinding) */
	ACCESS_ORIGIN_NOT_ALLOWED	/* 403: a browser page of another origin */
} AccessVerdict;

/* What a request shows of itself; strings are NULL when absent. */
typedef struct AccessRequest
{
	bool		peer_loopback;
	const char *host;			/* the Host header */
	size_t		host_len;
	const char *origin;			/* the Origin header */
	size_t		origin_len;
	const char *secret;			/* secret= or api_secret= */
	size_t		secret_len;
	const char *fetch_site;		/* the Sec-Fetch-Site header */
	size_t		fetch_site_len;
	bool		needs_secret;	/* false for the CORS preflight */
} AccessRequest;

extern AccessVerdict access_decide(const AccessRules *rules, const AccessRequest *req);

/* Who a request comes from (access_identify_client). */
typedef struct AccessClient
{
	bool		loopback;		/* AccessRequest.peer_loopback: the peer is
								 * loopback, and not a trusted proxy that
								 * forwards someone */
	bool		forwarded;		/* a trusted proxy sent X-Forwarded-For */
	bool		malformed;		/* ... which could not be read: the proxy is
								 * the client */
	uint64_t	key;			/* what the per-client limits count by (see
								 * client_addr_key); 0: unknown */
} AccessClient;

/* Whether X-Forwarded-For from this peer is read at all. */
extern bool access_peer_is_trusted(const AccessRules *rules, const struct sockaddr *peer);

/*
 * The client of a request from `peer`, with its X-Forwarded-For headers in
 * the order they came, or the last of them with `earlier_forwarded` true
 * when the ones before were left out (read only when the peer is a
 * trusted proxy; see client_walk_forwarded).
 */
extern void access_identify_client(const AccessRules *rules, const struct sockaddr *peer,
								   const char *const *forwarded, const size_t *forwarded_lens,
								   int nforwarded, bool earlier_forwarded,
								   AccessClient *client);

/* Whether responses may carry access-control-allow-origin for `origin`. */
extern bool access_origin_allowed(const AccessRules *rules, const char *origin,
								  size_t origin_len);

/* No secret and not insecure: only loopback clients are served. */
extern bool access_loopback_only(const AccessRules *rules);
extern bool access_has_secret(const AccessRules *rules);

/* Building blocks, exposed for the tests and the configuration check. */
extern bool access_sockaddr_is_loopback(const struct sockaddr *addr);
extern bool access_host_is_loopback(const char *host, size_t len);
extern bool access_origin_is_loopback(const char *origin, size_t len);
extern bool access_secret_equal(const char *expected, size_t expected_len,
								const char *given, size_t given_len);
extern bool access_origins_valid(const char *list, char *err, size_t errlen);

#endif							/* ACCESS_POLICY_H */
