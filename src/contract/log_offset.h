/*-------------------------------------------------------------------------
 *
 * log_offset.h
 *		Positions in a shape log, as Electric's HTTP API names them.
 *
 * An offset is a pair (tx, op).  Snapshot chunk k ends at (0, k); the end
 * of the snapshot is (0, inf); a replicated change sits at (commit LSN,
 * 2 * op index).  The value before everything is (-1, 0), rendered "-1".
 * Offsets order lexicographically, with inf above every op.
 *
 * This header is plain C: both the PostgreSQL side and the HTTP threads
 * include it.
 *
 * IDENTIFICATION
 *	  src/contract/log_offset.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef LOG_OFFSET_H
#define LOG_OFFSET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LOG_OFFSET_OP_INF	UINT64_MAX
#define LOG_OFFSET_TEXT_LEN 48		/* "<int64>_<uint64>" plus NUL, rounded */

typedef struct LogOffset
{
	int64_t		tx;				/* -1: before all; 0: snapshot; else LSN */
	uint64_t	op;				/* op index, or LOG_OFFSET_OP_INF */
} LogOffset;

static const LogOffset LOG_OFFSET_BEFORE_ALL = {-1, 0};
static const LogOffset LOG_OFFSET_SNAPSHOT_END = {0, LOG_OFFSET_OP_INF};

static inline int
log_offset_cmp(LogOffset a, LogOffset b)
{
	if (a.tx != b.tx)
		return a.tx < b.tx ? -1 : 1;
	if (a.op != b.op)
		return a.op < b.op ? -1 : 1;
	return 0;
}

static inline bool
log_offset_is_before_all(LogOffset o)
{
	return o.tx < 0;
}

static inline LogOffset
log_offset_max(LogOffset a, LogOffset b)
{
	return log_offset_cmp(a, b) >= 0 ? a : b;
}

/* Formats "-1", "<tx>_inf" or "<tx>_<op>" into buf; returns its length. */
extern size_t log_offset_format(LogOffset o, char *buf, size_t buflen);

/*
 * Parses an offset in Electric's syntax: "-1" or "<digits>_<digits|inf>".
 * "now" is not an offset and is handled by the caller.  Returns false on any
 * other input, including values that overflow.
 */
extern bool log_offset_parse(const char *text, LogOffset *out);

#endif							/* LOG_OFFSET_H */
