/*-------------------------------------------------------------------------
 *
 * client_address.h
 *		Who a request comes from: the TCP peer, or, behind a trusted proxy,
 *		the address X-Forwarded-For names; and the client key the
 *		per-client limits count by.
 *
 * See client_address.c for the rules.
 *
 * IDENTIFICATION
 *	  src/net/client_address.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef CLIENT_ADDRESS_H
#define CLIENT_ADDRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sockaddr;

/* Entries of shape_sync.trusted_proxies, at most. */
#define CLIENT_PROXIES_MAX		256

/* X-Forwarded-For entries a walk looks at, at most (from the right). */
#define CLIENT_FORWARD_HOPS_MAX	32

/*
 * X-Forwarded-For headers a walk reads, at most: the last ones of the
 * request (a walk that needs an earlier one is malformed).
 */
#define CLIENT_FORWARD_HEADERS_MAX 8

/* An address: IPv6, or IPv4 as ::ffff:a.b.c.d. */
typedef struct ClientAddr
{
	unsigned char b[16];
} ClientAddr;

/* One entry of the list: an address and the bits of its prefix that count. */
typedef struct ClientNet
{
	ClientAddr	addr;			/* bits past `bits` are 0 */
	unsigned	bits;			/* 0..128, IPv4's counted from ::ffff:0:0/96 */
} ClientNet;

/* shape_sync.trusted_proxies, parsed; immutable once built. */
typedef struct ClientProxies
{
	int			n;
	ClientNet  *nets;			/* malloc'd; NULL when n is 0 */
} ClientProxies;

/*
 * Parses a comma-separated list of addresses and CIDR ranges, IPv4 and
 * IPv6.  With `out` NULL, only checks.  Returns false with a message in
 * err (and nothing to free).
 */
/*
 * The next item of a comma-separated setting, between *start and *end
 * with blanks trimmed; false past the last.  *cursor moves on.
 */
extern bool setting_list_next(const char **cursor, const char **start, const char **end);

extern bool client_proxies_parse(const char *list, ClientProxies *out,
								 char *err, size_t errlen);
extern void client_proxies_free(ClientProxies *proxies);
extern bool client_proxies_equal(const ClientProxies *a, const ClientProxies *b);
extern bool client_proxies_contain(const ClientProxies *proxies, const ClientAddr *addr);

/* The peer's address; false for a family other than IPv4 and IPv6. */
extern bool client_addr_from_sockaddr(const struct sockaddr *sa, ClientAddr *out);

/*
 * One X-Forwarded-For entry, spaces trimmed: an IPv4 address with or
 * without ":port", an IPv6 address, or "[IPv6]" with or without ":port".
 */
extern bool client_addr_parse_forwarded(const char *s, size_t len, ClientAddr *out);

/*
 * The client key of an address: a hash of an IPv4 address, or of an IPv6
 * /64 (one host can take a whole /64); never 0, which means "unknown".
 */
extern uint64_t client_addr_key(const ClientAddr *addr);

typedef enum ClientForward
{
	CLIENT_FORWARD_NONE,		/* no entry at all */
	CLIENT_FORWARD_FOUND,		/* *client is the address the walk found */
	CLIENT_FORWARD_MALFORMED	/* an entry it reached is not an address, or
								 * too many entries, or the client is in a
								 * header it does not read */
} ClientForward;

/*
 * Walks X-Forwarded-For from the right: `values` are the request's
 * headers in the order they came (their entries read as one list), or
 * the last of them with `earlier` true when the ones before were left
 * out; `proxies` the trusted ones.  The client is the right-most entry
 * that is not a trusted proxy, or the left-most when all are.  Only the
 * last CLIENT_FORWARD_HEADERS_MAX of `values` are read: when every entry
 * of those is a trusted proxy (or empty) and there are headers before
 * them, in `values` or left out, the answer is MALFORMED.
 */
extern ClientForward client_walk_forwarded(const ClientProxies *proxies,
										   const char *const *values, const size_t *lens,
										   int nvalues, bool earlier, ClientAddr *client);

#endif							/* CLIENT_ADDRESS_H */
