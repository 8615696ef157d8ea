/*-------------------------------------------------------------------------
 *
 * client_address.c
 *		Who a request comes from: the TCP peer, or, behind a trusted proxy,
 *		the address X-Forwarded-For names; and the client key the
 *		per-client limits count by.
 *
 * This file runs on libmicrohttpd threads (and in the worker's check of
 * the setting) and must not call into PostgreSQL.
 *
 * The per-client limits (new shapes a minute, subset cells, request
 * bodies) count by the client key: a hash of an IPv4 address, or of an
 * IPv6 /64, since one host can take a whole /64.  Behind a reverse proxy
 * every request's TCP peer is the proxy, so shape_sync.trusted_proxies
 * names the proxies (addresses and CIDR ranges) whose X-Forwarded-For is
 * believed; from any other peer the header is ignored altogether.
 *
 * The walk is the usual one (nginx's real_ip_recursive, Express's "trust
 * proxy"): a proxy appends the address it got the request from, so the
 * entries are read from the right, the request's several X-Forwarded-For
 * headers as one list in the order they came, and the client is the first
 * entry that is not itself a trusted proxy; everything left of it is what
 * the client said about itself and is never read.  When every entry is a
 * trusted proxy, the left-most is the client.  Empty entries are skipped
 * (RFC 9110's list syntax).  An entry the walk reaches that is not an
 * address (a name, "unknown", garbage), or more than
 * CLIENT_FORWARD_HOPS_MAX entries before the client, make the header
 * malformed: the caller then counts the request against the proxy itself.
 * Only X-Forwarded-For is read, not Forwarded (RFC 7239).
 *
 * Only the last CLIENT_FORWARD_HEADERS_MAX headers are read (the server
 * keeps only those, http_collect_forwarded): a proxy that adds a header
 * of its own rather than appending to the client's (HAProxy's way) puts
 * the one that counts last, and the headers the client sent before it,
 * however many, are never reached.  A walk that would need a header
 * before those (every entry of the last CLIENT_FORWARD_HEADERS_MAX is a
 * trusted proxy, or empty, and there are earlier ones) is malformed: the
 * client is in a header not read.
 *
 * The work per request is bounded: at most CLIENT_FORWARD_HEADERS_MAX
 * headers and CLIENT_FORWARD_HOPS_MAX entries of at most ENTRY_MAX bytes,
 * found from the right with memrchr, each matched against at most
 * CLIENT_PROXIES_MAX ranges.
 *
 * IDENTIFICATION
 *	  src/net/client_address.c
 *
 *-------------------------------------------------------------------------
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "client_address.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "fnv_hash.h"

#ifdef POSTGRES_H
#error "client_address.c runs on HTTP threads and must not include postgres.h"
#endif

/* "[" IPv6 with an IPv4 tail "]:65535", and some room */
#define ENTRY_MAX		64

static const unsigned char v4_mapped_prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

static void
client_addr_from_v4(const struct in_addr *in, ClientAddr *out)
{
	memcpy(out->b, v4_mapped_prefix, 12);
	memcpy(out->b + 12, &in->s_addr, 4);
}

static bool
client_addr_is_v4(const ClientAddr *addr)
{
	return memcmp(addr->b, v4_mapped_prefix, 12) == 0;
}

bool
client_addr_from_sockaddr(const struct sockaddr *sa, ClientAddr *out)
{
	if (sa == NULL)
		return false;
	if (sa->sa_family == AF_INET)
	{
		client_addr_from_v4(&((const struct sockaddr_in *) sa)->sin_addr, out);
		return true;
	}
	if (sa->sa_family == AF_INET6)
	{
		memcpy(out->b, ((const struct sockaddr_in6 *) sa)->sin6_addr.s6_addr, 16);
		return true;
	}
	return false;
}

uint64_t
client_addr_key(const ClientAddr *addr)
{
	uint64_t	h = client_addr_is_v4(addr) ?
		fnv_hash_bytes(FNV_HASH_START, addr->b + 12, 4) :
		fnv_hash_bytes(FNV_HASH_START, addr->b, 8);

	return h ? h : 1;
}

/* Copies s[0, len) into buf as a C string; false when it does not fit or holds a NUL. */
static bool
client_copy(char *buf, size_t size, const char *s, size_t len)
{
	if (len == 0 || len >= size || memchr(s, '\0', len) != NULL)
		return false;
	memcpy(buf, s, len);
	buf[len] = '\0';
	return true;
}

/* An address, IPv4 or IPv6, as the whole of `text`. */
static bool
client_addr_parse_plain(const char *text, ClientAddr *out)
{
	struct in_addr a4;
	struct in6_addr a6;

	if (inet_pton(AF_INET, text, &a4) == 1)
	{
		client_addr_from_v4(&a4, out);
		return true;
	}
	if (inet_pton(AF_INET6, text, &a6) == 1)
	{
		memcpy(out->b, a6.s6_addr, 16);
		return true;
	}
	return false;
}

/* ":<1 to 5 digits>" */
static bool
client_port_ok(const char *p, const char *end)
{
	if (end - p < 2 || end - p > 6 || *p != ':')
		return false;
	for (p++; p < end; p++)
		if (*p < '0' || *p > '9')
			return false;
	return true;
}

bool
client_addr_parse_forwarded(const char *s, size_t len, ClientAddr *out)
{
	char		buf[ENTRY_MAX + 1];
	const char *end;
	const char *colon;

	while (len > 0 && (*s == ' ' || *s == '\t'))
		s++, len--;
	while (len > 0 && (s[len - 1] == ' ' || s[len - 1] == '\t'))
		len--;
	if (!client_copy(buf, sizeof(buf), s, len))
		return false;
	end = buf + len;
	if (buf[0] == '[')
	{
		char	   *close = memchr(buf, ']', len);
		struct in6_addr a6;

		if (close == NULL || (close + 1 != end && !client_port_ok(close + 1, end)))
			return false;
		*close = '\0';
		if (inet_pton(AF_INET6, buf + 1, &a6) != 1)
			return false;
		memcpy(out->b, a6.s6_addr, 16);
		return true;
	}
	if (client_addr_parse_plain(buf, out))
		return true;
	/* IPv4 with a port: exactly one colon (more is IPv6, which needs brackets) */
	colon = memchr(buf, ':', len);
	if (colon == NULL || memchr(colon + 1, ':', (size_t) (end - colon - 1)) != NULL ||
		!client_port_ok(colon, end))
		return false;
	buf[colon - buf] = '\0';
	{
		struct in_addr a4;

		if (inet_pton(AF_INET, buf, &a4) != 1)
			return false;
		client_addr_from_v4(&a4, out);
	}
	return true;
}

/* ---------------------------------------------------------------- the list */

/* Whether the first `bits` bits of a and b agree. */
static bool
client_prefix_equal(const ClientAddr *a, const ClientAddr *b, unsigned bits)
{
	unsigned	whole = bits / 8;
	unsigned	rest = bits % 8;

	if (memcmp(a->b, b->b, whole) != 0)
		return false;
	if (rest == 0)
		return true;
	return ((a->b[whole] ^ b->b[whole]) & (0xff00 >> rest) & 0xff) == 0;
}

/* Parses "addr" or "addr/bits" into net. */
static bool
client_parse_net(const char *s, size_t len, ClientNet *net, char *err, size_t errlen)
{
	char		buf[ENTRY_MAX + 1];
	char	   *slash;
	bool		v4;
	unsigned	max_bits;
	ClientAddr	masked;

	if (!client_copy(buf, sizeof(buf), s, len))
	{
		snprintf(err, errlen, "\"%.*s\" is not an address or a CIDR range",
				 (int) (len > 100 ? 100 : len), s);
		return false;
	}
	slash = strchr(buf, '/');
	if (slash != NULL)
		*slash = '\0';
	if (!client_addr_parse_plain(buf, &net->addr))
	{
		snprintf(err, errlen, "\"%s\" is not an IPv4 or IPv6 address (names are not accepted)",
				 buf);
		return false;
	}
	v4 = strchr(buf, ':') == NULL;
	max_bits = v4 ? 32 : 128;
	net->bits = max_bits;
	if (slash != NULL)
	{
		char	   *p = slash + 1;
		unsigned	bits = 0;

		if (*p == '\0' || strlen(p) > 3)
			p = NULL;
		for (; p && *p; p++)
		{
			if (*p < '0' || *p > '9')
			{
				p = NULL;
				break;
			}
			bits = bits * 10 + (unsigned) (*p - '0');
		}
		if (p == NULL || bits > max_bits)
		{
			snprintf(err, errlen, "\"%s/%s\" has no valid prefix length (0 to %u)",
					 buf, slash + 1, max_bits);
			return false;
		}
		net->bits = bits;
	}
	if (v4)
		net->bits += 96;
	masked = net->addr;
	for (unsigned i = net->bits; i < 128; i++)
		masked.b[i / 8] &= (unsigned char) ~(0x80 >> (i % 8));
	if (memcmp(masked.b, net->addr.b, 16) != 0)
	{
		snprintf(err, errlen, "\"%s/%u\" has bits set to the right of its prefix",
				 buf, v4 ? net->bits - 96 : net->bits);
		return false;
	}
	return true;
}

bool
setting_list_next(const char **cursor, const char **start, const char **end)
{
	const char *p = *cursor;

	while (*p == ' ' || *p == '\t' || *p == ',')
		p++;
	if (*p == '\0')
	{
		*cursor = p;
		return false;
	}
	*start = p;
	while (*p && *p != ',')
		p++;
	*end = p;
	while (*end > *start && ((*end)[-1] == ' ' || (*end)[-1] == '\t'))
		(*end)--;
	*cursor = p;
	return true;
}

bool
client_proxies_parse(const char *list, ClientProxies *out, char *err, size_t errlen)
{
	const char *p = list ? list : "";
	ClientNet  *nets = NULL;
	int			n = 0;
	const char *start;
	const char *end;

	if (out != NULL)
	{
		out->n = 0;
		out->nets = NULL;
	}
	while (setting_list_next(&p, &start, &end))
	{
		ClientNet	net;

		if (!client_parse_net(start, (size_t) (end - start), &net, err, errlen))
		{
			free(nets);
			return false;
		}
		if (n == CLIENT_PROXIES_MAX)
		{
			snprintf(err, errlen, "the list names more than %d addresses and ranges",
					 CLIENT_PROXIES_MAX);
			free(nets);
			return false;
		}
		if (out != NULL)
		{
			ClientNet  *grown = realloc(nets, sizeof(ClientNet) * (size_t) (n + 1));

			if (grown == NULL)
			{
				snprintf(err, errlen, "out of memory");
				free(nets);
				return false;
			}
			nets = grown;
			nets[n] = net;
		}
		n++;
	}
	if (out != NULL)
	{
		out->n = n;
		out->nets = nets;
	}
	return true;
}

void
client_proxies_free(ClientProxies *proxies)
{
	free(proxies->nets);
	proxies->nets = NULL;
	proxies->n = 0;
}

bool
client_proxies_equal(const ClientProxies *a, const ClientProxies *b)
{
	return a->n == b->n &&
		(a->n == 0 || memcmp(a->nets, b->nets, sizeof(ClientNet) * (size_t) a->n) == 0);
}

bool
client_proxies_contain(const ClientProxies *proxies, const ClientAddr *addr)
{
	for (int i = 0; i < proxies->n; i++)
		if (client_prefix_equal(&proxies->nets[i].addr, addr, proxies->nets[i].bits))
			return true;
	return false;
}

/* ------------------------------------------------------------- the walk */

ClientForward
client_walk_forwarded(const ClientProxies *proxies, const char *const *values,
					  const size_t *lens, int nvalues, bool earlier, ClientAddr *client)
{
	int			hops = 0;
	bool		any = false;
	int			first = 0;		/* the left-most header the walk may read */

	if (nvalues > CLIENT_FORWARD_HEADERS_MAX)
	{
		first = nvalues - CLIENT_FORWARD_HEADERS_MAX;
		earlier = true;
	}
	for (int v = nvalues - 1; v >= first; v--)
	{
		const char *start = values[v];
		const char *end = start + lens[v];

		while (end > start)
		{
			const char *comma = memrchr(start, ',', (size_t) (end - start));
			const char *entry = comma ? comma + 1 : start;
			const char *s = entry;
			const char *e = end;
			ClientAddr	addr;

			end = comma ? comma : start;
			while (s < e && (*s == ' ' || *s == '\t'))
				s++;
			if (s == e)
				continue;		/* an empty entry */
			if (++hops > CLIENT_FORWARD_HOPS_MAX ||
				!client_addr_parse_forwarded(s, (size_t) (e - s), &addr))
				return CLIENT_FORWARD_MALFORMED;
			*client = addr;
			any = true;
			if (!client_proxies_contain(proxies, &addr))
				return CLIENT_FORWARD_FOUND;
		}
	}
	/* the client is further left, in a header not read */
	if (earlier)
		return CLIENT_FORWARD_MALFORMED;
	return any ? CLIENT_FORWARD_FOUND : CLIENT_FORWARD_NONE;
}
