/*-------------------------------------------------------------------------
 *
 * log_compact.h
 *		Compaction of a shape log: one message per key life, not per change.
 *
 * See log_compact.c for what is kept and why every offset stays valid.
 *
 * IDENTIFICATION
 *	  src/contract/log_compact.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef LOG_COMPACT_H
#define LOG_COMPACT_H

#include "shape_log.h"

/* a merged update names the newest of its updates' transactions, this many */
#define SLOG_COMPACT_MAX_TXIDS	16

/*
 * The op of a chunk end that compaction made at a transaction's end: above
 * every op a message can have, below the next transaction's offsets, and
 * one more at each compaction that keeps that chunk end (log_compact.c).
 */
#define SLOG_COMPACT_END_OP		(UINT64_C(1) << 40)

typedef enum SlogCompactResult
{
	SLOG_COMPACT_OK = 0,
	SLOG_COMPACT_FULL,			/* the arena ran out: drop the copy */
	SLOG_COMPACT_UNREADABLE,	/* a record is not a message this server wrote */
	SLOG_COMPACT_NO_MEMORY		/* malloc failed */
} SlogCompactResult;

typedef struct SlogCompactStats
{
	uint64_t	records_in;		/* in the closed chunks */
	uint64_t	records_out;
	uint64_t	bytes_in;		/* data bytes of the whole log */
	uint64_t	bytes_out;
	uint64_t	tombstones;		/* delete messages kept for clients inside a life */
} SlogCompactStats;

/*
 * Writes into `out` (an empty log) a compacted copy of the published part
 * of `in`: its closed chunks rewritten, its open chunk copied as is, and
 * publishes it.  The caller is `in`'s writer, and swaps `out` in on
 * SLOG_COMPACT_OK (else releases it).  Chunks of the result hold at least
 * `chunk_bytes` of payload where the input's allowed it.
 */
extern SlogCompactResult slog_compact(ShapeLogArena *arena, const ShapeLog *in, ShapeLog *out,
									  uint32_t chunk_bytes, SlogCompactStats *stats);

#endif							/* LOG_COMPACT_H */
