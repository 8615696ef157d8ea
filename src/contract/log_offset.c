/*-------------------------------------------------------------------------
 *
 * log_offset.c
 *		Parsing and formatting of shape log offsets.
 *
 * Offsets arrive from clients in the `offset` query parameter, so the parser
 * is strict and total: every input either yields an offset or false, with no
 * reliance on strtoll's lenient whitespace and sign handling.
 *
 * Plain C; used by the HTTP threads and the PostgreSQL side alike.
 *
 * IDENTIFICATION
 *	  src/contract/log_offset.c
 *
 *-------------------------------------------------------------------------
 */
#include "log_offset.h"

#include <stdio.h>
#include <string.h>

#ifdef POSTGRES_H
#error "log_offset.c is shared by threads and must not include postgres.h"
#endif

size_t
log_offset_format(LogOffset o, char *buf, size_t buflen)
{
	int			n;

	if (log_offset_is_before_all(o))
		n = snprintf(buf, buflen, "-1");
	else if (o.op == LOG_OFFSET_OP_INF)
		n = snprintf(buf, buflen, "%lld_inf", (long long) o.tx);
	else
		n = snprintf(buf, buflen, "%lld_%llu", (long long) o.tx,
					 (unsigned long long) o.op);
	return n < 0 ? 0 : (size_t) n;
}

/* Parses [0-9]+ from *p up to a stop character; false on overflow or none. */
static bool
lo_parse_digits(const char **p, uint64_t limit, uint64_t *out)
{
	const char *s = *p;
	uint64_t	v = 0;

	if (*s < '0' || *s > '9')
		return false;
	for (; *s >= '0' && *s <= '9'; s++)
	{
		uint64_t	d = (uint64_t) (*s - '0');

		if (v > (limit - d) / 10)
			return false;
		v = v * 10 + d;
	}
	*p = s;
	*out = v;
	return true;
}

bool
log_offset_parse(const char *text, LogOffset *out)
{
	const char *p = text;
	uint64_t	tx;
	uint64_t	op;

	if (text == NULL)
		return false;
	if (strcmp(text, "-1") == 0)
	{
		*out = LOG_OFFSET_BEFORE_ALL;
		return true;
	}
	if (!lo_parse_digits(&p, (uint64_t) INT64_MAX, &tx) || *p != '_')
		return false;
	p++;
	if (strcmp(p, "inf") == 0)
		op = LOG_OFFSET_OP_INF;
	else if (!lo_parse_digits(&p, UINT64_MAX - 1, &op) || *p != '\0')
		return false;
	out->tx = (int64_t) tx;
	out->op = op;
	return true;
}
