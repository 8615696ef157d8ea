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
	SLOG_COMPACT_NO_MEMORY,		/* malloc failed */
	SLOG_COMPACT_TOO_LARGE,		/* past max_work_bytes */
	SLOG_COMPACT_READ_FAILED,	/* the input's file could not be read (read_error) */
	SLOG_COMPACT_STOPPED		/* chunk_closed said so */
} SlogCompactResult;

/*
 * What one compaction may take, and where its copy goes as it is built.  A
 * log whose closed chunks left memory for its file is read from there
 * (shape_log_read.c); what it costs in memory is then its bookkeeping
 * (about max_work_bytes of malloc: 64 bytes per record of the closed
 * chunks and 100 per key, beside the key texts, are counted; a merging
 * update's columns and the moment a grown array is copied are not) and
 * the copy in the arena, which chunk_closed, called after each chunk of
 * it closes, may write out and take out of memory (the copy is not
 * published yet: no reader); false from it stops compaction.
 */
typedef struct SlogCompactOptions
{
	uint32_t	chunk_bytes;	/* each output chunk holds at least this, where it can */
	uint64_t	max_work_bytes; /* SLOG_COMPACT_TOO_LARGE past it */
	bool		(*chunk_closed) (void *arg, ShapeLog *out);	/* or NULL */
	void	   *arg;
} SlogCompactOptions;

typedef struct SlogCompactStats
{
	uint64_t	records_in;		/* in the closed chunks */
	uint64_t	records_out;
	uint64_t	bytes_in;		/* data bytes of the whole log */
	uint64_t	bytes_out;
	uint64_t	tombstones;		/* delete messages kept for clients inside a life */
	uint64_t	work_bytes;		/* the bookkeeping's memory at its largest */
	int			read_error;		/* SLOG_COMPACT_READ_FAILED: the errno */
} SlogCompactStats;

/* No limit but the arena's and malloc's; the copy stays in memory. */
static inline SlogCompactOptions
slog_compact_defaults(uint32_t chunk_bytes)
{
	SlogCompactOptions options = {chunk_bytes, UINT64_MAX, NULL, NULL};

	return options;
}

/*
 * Writes into `out` (an empty log) a compacted copy of the published part
 * of `in`: its closed chunks rewritten, its open chunk copied as is, and
 * publishes it.  The caller is `in`'s writer, and swaps `out` in on
 * SLOG_COMPACT_OK (else releases it).
 */
extern SlogCompactResult slog_compact(ShapeLogArena *arena, const ShapeLog *in, ShapeLog *out,
									  const SlogCompactOptions *options,
									  SlogCompactStats *stats);

#endif							/* LOG_COMPACT_H */
