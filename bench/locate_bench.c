/*
 * locate_bench.c: the cost of one slog_locate (src/contract/shape_log.c) in a
 * shape log whose open tail holds 10 MB of rows of about 100 bytes, with
 * the position index against the scan it replaced, in the same run.
 *
 *   index  slog_locate: the chunk's binary search, then a binary search
 *          over the position index and a scan of at most one stride.
 *   scan   the slog_locate of before the index (kept below as old_locate):
 *          the same chunk search, then a walk over every record header
 *          from the chunk's start to the first record past the offset.
 *
 * Two kinds of offsets: a record's offset anywhere in the tail (uniform),
 * and one among the last 100 records (a live client, up to date but for
 * the last few changes, which is who locates after each change).  Each run
 * times a fixed list of offsets; both ways get the same list and must give
 * the same ranges.  Prints "<way> <offsets> <ns per locate>" per run, then
 * "index_bytes <bytes> data_bytes <bytes>".
 *
 * Usage: locate_bench [runs] [tail_mb]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "shape_log.h"

#define NQUERIES	4096

static double
now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static uint64_t
next_rand(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

/* ----------------------------------------- slog_locate before the index */

/* closed chunk i, as slog_locate reads it (the chunk index is a block map now) */
static SlogChunk
old_chunk_at(const ShapeLogArena *arena, const ShapeLog *log, uint32_t i)
{
	SlogChunk	chunk;

	slog_chunk_read(arena, log, i, &chunk);
	return chunk;
}

static LogOffset
old_chunk_end(SlogChunk chunk)
{
	LogOffset	o = {chunk.end_tx, chunk.end_op};

	return o;
}

static void
old_locate(const ShapeLogArena *arena, const ShapeLog *log,
		   const SlogPublished *pub, LogOffset after, SlogRange *range)
{
	uint32_t	lo = 0;
	uint32_t	hi = pub->chunk_count;
	uint64_t	pos;

	memset(range, 0, sizeof(*range));
	while (lo < hi)
	{
		uint32_t	mid = lo + (hi - lo) / 2;

		if (log_offset_cmp(old_chunk_end(old_chunk_at(arena, log, mid)), after) > 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	if (lo < pub->chunk_count)
	{
		SlogChunk	chunk = old_chunk_at(arena, log, lo);

		range->start = chunk.start_pos;
		range->end = chunk.end_pos;
		range->chunk_end = old_chunk_end(chunk);
	}
	else if (pub->flags & SLOG_SNAPSHOT_DONE)
	{
		range->start = pub->chunk_count == 0 ? 0 :
			old_chunk_at(arena, log, pub->chunk_count - 1).end_pos;
		range->end = pub->data_end;
		range->chunk_end = pub->last;
		range->beyond_end = log_offset_cmp(after, pub->last) > 0;
	}
	else
		return;
	range->ready = true;
	if (log_offset_is_before_all(after))
		return;
	for (pos = range->start; pos < range->end;)
	{
		SlogRecordHeader hdr;
		LogOffset	o;

		slog_read_header(arena, log, pos, &hdr);
		o.tx = hdr.tx;
		o.op = hdr.op;
		if (log_offset_cmp(o, after) > 0)
			break;
		pos += slog_record_span(hdr.len);
	}
	range->start = pos;
}

/* ------------------------------------------------------------------ */

typedef void (*LocateFn) (const ShapeLogArena *, const ShapeLog *, const SlogPublished *,
						  LogOffset, SlogRange *);

static ShapeLogArena *arena;
static ShapeLog log_;
static SlogPublished pub;
static LogOffset *offsets;		/* of every record */
static long nrecords;
static volatile uint64_t sink;

/*
 * Bytes of the position index: its inline entries and block map in the log,
 * its index blocks, and the directory blocks that name them past the direct
 * ones (shape_log.h: entry k >= 1 for log byte k * SLOG_POS_STRIDE, those
 * past SLOG_POS_INLINE in block k / SLOG_POS_PER_BLOCK).
 */
static uint64_t
position_index_bytes(const ShapeLog *log)
{
	uint64_t	last = log->write_pos / SLOG_POS_STRIDE;
	uint64_t	blocks = 0;
	uint64_t	dirs = 0;

	if (last > SLOG_POS_INLINE)
		blocks = last / SLOG_POS_PER_BLOCK + 1;
	if (blocks > SLOG_MAP_DIRECT)
		dirs = (blocks - SLOG_MAP_DIRECT + SLOG_DIR_FANOUT - 1) / SLOG_DIR_FANOUT;
	return sizeof(log->pos_inline) + sizeof(log->pos_blocks) + (blocks + dirs) * SLOG_BLOCK_SIZE;
}

/* ns per locate over `n` of the queries (cycling), repeated to >= 0.2 s */
static double
time_locates(LocateFn fn, const LogOffset *q, long n)
{
	double		t0 = now_ns();
	long		done = 0;
	uint64_t	sum = 0;

	do
	{
		for (long i = 0; i < n; i++)
		{
			SlogRange	r;

			fn(arena, &log_, &pub, q[i], &r);
			sum += r.start;
		}
		done += n;
	} while (now_ns() - t0 < 2e8);
	sink += sum;
	return (now_ns() - t0) / done;
}

int
main(int argc, char **argv)
{
	int			runs = argc > 1 ? atoi(argv[1]) : 5;
	uint64_t	tail_bytes = (uint64_t) (argc > 2 ? atoi(argv[2]) : 10) << 20;
	size_t		size = slog_arena_size(tail_bytes + (tail_bytes >> 3) + (1u << 20));
	void	   *mem = aligned_alloc(SLOG_BLOCK_SIZE, size);
	char		payload[256];
	uint64_t	x = 88172645463325252ull;
	int64_t		tx = 1000;
	long		cap;
	LogOffset	uniform[NQUERIES];
	LogOffset	live[NQUERIES];

	if (mem == NULL || runs < 1)
		return 1;
	memset(payload, 'x', sizeof(payload));
	arena = slog_arena_init(mem, size);
	slog_init(&log_);

	/* a snapshot chunk, then the tail: transactions of 1 to 8 rows */
	for (int i = 0; i < 100; i++)
		slog_append(arena, &log_, (LogOffset) {0, 0}, SLOG_RECORD_CHANGE, payload, 100);
	slog_close_chunk(arena, &log_, (LogOffset) {0, 0});
	cap = (long) (tail_bytes / 88) + 16;
	offsets = malloc(sizeof(LogOffset) * (size_t) cap);
	while (log_.write_pos - log_.chunk_start < tail_bytes && nrecords < cap)
	{
		int			rows = 1 + (int) (next_rand(&x) % 8);

		tx += 1 + (int64_t) (next_rand(&x) % 64);
		for (int i = 0; i < rows && nrecords < cap; i++)
		{
			LogOffset	o = {tx, 2 * (uint64_t) i};

			if (slog_append(arena, &log_, o, SLOG_RECORD_CHANGE, payload,
							60 + (uint32_t) (next_rand(&x) % 81)) != SLOG_OK)
			{
				fprintf(stderr, "the arena is full\n");
				return 1;
			}
			offsets[nrecords++] = o;
		}
	}
	slog_publish(&log_, offsets[nrecords - 1], SLOG_SNAPSHOT_DONE);
	slog_read_published(&log_, &pub);

	for (int i = 0; i < NQUERIES; i++)
	{
		uniform[i] = offsets[next_rand(&x) % (uint64_t) nrecords];
		live[i] = offsets[nrecords - 1 - (long) (next_rand(&x) % 100)];
	}
	/* both ways give the same range for every query */
	for (int i = 0; i < NQUERIES; i++)
	{
		SlogRange	a;
		SlogRange	b;
		SlogRange	c;
		SlogRange	d;

		slog_locate(arena, &log_, &pub, uniform[i], &a);
		old_locate(arena, &log_, &pub, uniform[i], &b);
		slog_locate(arena, &log_, &pub, live[i], &c);
		old_locate(arena, &log_, &pub, live[i], &d);
		if (a.start != b.start || a.end != b.end || c.start != d.start || c.end != d.end)
		{
			fprintf(stderr, "the two ways disagree at query %d\n", i);
			return 1;
		}
	}

	for (int run = 0; run < runs; run++)
	{
		printf("index uniform %.1f\n", time_locates(slog_locate, uniform, NQUERIES));
		printf("index live %.1f\n", time_locates(slog_locate, live, NQUERIES));
		printf("scan uniform %.1f\n", time_locates(old_locate, uniform, 256));
		printf("scan live %.1f\n", time_locates(old_locate, live, 64));
	}
	printf("index_bytes %llu data_bytes %llu records %ld\n",
		   (unsigned long long) position_index_bytes(&log_),
		   (unsigned long long) log_.write_pos, nrecords);
	slog_release(arena, &log_);
	free(offsets);
	free(mem);
	return 0;
}
