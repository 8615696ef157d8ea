/*
 * test_shape_log.c
 *		The per-shape log in a block arena (src/contract/shape_log.c): appends,
 *		chunks, publication, lookups, arena exhaustion and release, and a
 *		concurrent writer with lock-free readers (the case TSan checks).
 */
#include "unit.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "log_file_fixture.h"
#include "reader_epochs.h"
#include "shape_log.h"

/* ---------------------------------------------------------- helpers */

static ShapeLogArena *
arena_new(size_t bytes, void **mem_out)
{
	size_t		size = (bytes + SLOG_BLOCK_SIZE - 1) / SLOG_BLOCK_SIZE * SLOG_BLOCK_SIZE;
	void	   *mem = aligned_alloc(SLOG_BLOCK_SIZE, size);

	if (mem == NULL)
		return NULL;
	memset(mem, 0xa5, size);	/* garbage, as shared memory may hold */
	*mem_out = mem;
	return slog_arena_init(mem, size);
}

/* Deterministic payload bytes for record `id`. */
static void
fill_payload(char *buf, uint32_t len, uint64_t id)
{
	uint64_t	x = id * 0x9e3779b97f4a7c15ull + 1;

	for (uint32_t i = 0; i < len; i++)
	{
		if (i % 8 == 0)
		{
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
		}
		buf[i] = (char) (x >> (8 * (i % 8)));
	}
}

/* Checks the record at pos: header fields and payload. */
static bool
check_record(const char *file, int line, const ShapeLogArena *arena, const ShapeLog *log,
			 uint64_t pos, uint64_t id, uint32_t len, uint32_t kind, LogOffset o)
{
	SlogRecordHeader hdr;
	char	   *want;
	char	   *got;
	bool		ok = true;

	memset(&hdr, 0, sizeof(hdr));
	slog_read_header(arena, log, pos, &hdr);
	if (hdr.len != len || hdr.kind != kind || hdr.tx != o.tx || hdr.op != o.op)
	{
		unit_fail(file, line, "record %llu at %llu: header (len %u kind %u %lld_%llu), "
				  "expected (len %u kind %u %lld_%llu)",
				  (unsigned long long) id, (unsigned long long) pos, hdr.len, hdr.kind,
				  (long long) hdr.tx, (unsigned long long) hdr.op,
				  len, kind, (long long) o.tx, (unsigned long long) o.op);
		return false;
	}
	want = malloc(len + 1);
	got = malloc(len + 1);
	fill_payload(want, len, id);
	memset(got, 0, len + 1);
	slog_copy_out(arena, log, pos + sizeof(SlogRecordHeader), got, len);
	if (memcmp(want, got, len) != 0)
	{
		unit_fail(file, line, "record %llu at %llu: payload of %u bytes differs",
				  (unsigned long long) id, (unsigned long long) pos, len);
		ok = false;
	}
	free(want);
	free(got);
	return ok;
}

#define CHECK_RECORD(arena, log, pos, id, len, kind, o) \
	check_record(__FILE__, __LINE__, arena, log, pos, id, len, kind, o)

static SlogResult
append_id(ShapeLogArena *arena, ShapeLog *log, uint64_t id, uint32_t len,
		  uint32_t kind, LogOffset o)
{
	char	   *buf = malloc(len ? len : 1);
	SlogResult	res;

	fill_payload(buf, len, id);
	res = slog_append(arena, log, o, kind, buf, len);
	free(buf);
	return res;
}

static LogOffset
off(int64_t tx, uint64_t op)
{
	LogOffset	o = {tx, op};

	return o;
}

/*
 * The blocks a block map of n blocks holds: the n blocks, plus one
 * directory per SLOG_DIR_FANOUT of those past the direct ones, plus, past
 * the indirect directories, the block of directories.
 */
static uint64_t
map_blocks(uint64_t n)
{
	const uint64_t indirect = (uint64_t) SLOG_MAP_INDIRECT * SLOG_DIR_FANOUT;
	uint64_t	m;

	if (n <= SLOG_MAP_DIRECT)
		return n;
	m = n - SLOG_MAP_DIRECT;
	if (m <= indirect)
		return n + (m + SLOG_DIR_FANOUT - 1) / SLOG_DIR_FANOUT;
	m -= indirect;
	return n + SLOG_MAP_INDIRECT + 1 + (m + SLOG_DIR_FANOUT - 1) / SLOG_DIR_FANOUT;
}

/*
 * The blocks a log of `bytes` bytes of records and `chunks` closed chunks
 * holds when no append failed, from the layout alone (shape_log.h): its
 * data blocks, its chunk blocks (those past the inline chunks, 170 a
 * block), its position index blocks (entry k for each byte k * 4096 below
 * `bytes`; those past the inline entries, entry k in block k / 1024), and
 * each map's directories.
 */
static uint32_t
expected_blocks(uint64_t bytes, uint32_t chunks)
{
	uint64_t	data = (bytes + SLOG_BLOCK_SIZE - 1) / SLOG_BLOCK_SIZE;
	uint64_t	chunk_blocks = chunks <= SLOG_CHUNKS_INLINE ? 0 :
		(chunks - SLOG_CHUNKS_INLINE + SLOG_CHUNKS_PER_BLOCK - 1) / SLOG_CHUNKS_PER_BLOCK;
	uint64_t	last_entry = bytes == 0 ? 0 : (bytes - 1) / SLOG_POS_STRIDE;
	uint64_t	pos_blocks = last_entry <= SLOG_POS_INLINE ? 0 :
		last_entry / SLOG_POS_PER_BLOCK + 1;

	return (uint32_t) (map_blocks(data) + map_blocks(chunk_blocks) + map_blocks(pos_blocks));
}

/* ---------------------------------------------------------- arena */

TEST(arena_sizes)
{
	void	   *mem;
	ShapeLogArena *arena;
	size_t		size;

	CHECK_EQ(slog_record_span(0), 24);
	CHECK_EQ(slog_record_span(1), 32);
	CHECK_EQ(slog_record_span(8), 32);
	CHECK_EQ(slog_record_span(9), 40);
	CHECK_EQ(sizeof(SlogRecordHeader), 24);

	/* one header block plus eight blocks: exactly eight blocks */
	size = 9 * (size_t) SLOG_BLOCK_SIZE;
	mem = aligned_alloc(SLOG_BLOCK_SIZE, size);
	REQUIRE(mem != NULL);
	arena = slog_arena_init(mem, size);
	CHECK_EQ(arena->nblocks, 8);
	CHECK_EQ(arena->blocks_offset, SLOG_BLOCK_SIZE);
	CHECK_EQ(slog_arena_free_blocks(arena), 8);
	free(mem);

	/* slog_arena_size gives room for exactly the blocks asked for */
	size = slog_arena_size(8 * (uint64_t) SLOG_BLOCK_SIZE);
	CHECK_EQ(size % SLOG_BLOCK_SIZE, 0);
	mem = aligned_alloc(SLOG_BLOCK_SIZE, size);
	REQUIRE(mem != NULL);
	arena = slog_arena_init(mem, size);
	CHECK_EQ(arena->nblocks, 8);
	CHECK_EQ(slog_arena_free_blocks(arena), arena->nblocks);
	CHECK(arena->blocks_offset + (size_t) arena->nblocks * SLOG_BLOCK_SIZE <= size);
	free(mem);

	/* too small for any block */
	mem = aligned_alloc(SLOG_BLOCK_SIZE, SLOG_BLOCK_SIZE);
	REQUIRE(mem != NULL);
	arena = slog_arena_init(mem, 1024);
	CHECK_EQ(arena->nblocks, 0);
	CHECK_EQ(slog_arena_free_blocks(arena), 0);
	{
		ShapeLog	log;

		slog_init(&log);
		CHECK_EQ(append_id(arena, &log, 1, 10, SLOG_RECORD_CHANGE, off(0, 0)), SLOG_FULL);
		/* the first chunks are kept in the log: closing one takes no block */
		CHECK_EQ(slog_close_chunk(arena, &log, off(0, 0)), SLOG_OK);
		CHECK_EQ(log.blocks_held, 0);
		slog_release(arena, &log);
	}
	free(mem);
}

/*
 * slog_arena_prefault makes an arena's blocks resident (mincore says so of
 * a fresh shared mapping afterwards) without changing a byte of them,
 * blocks a log holds included, and clips to the arena.
 */
TEST(arena_prefault)
{
	size_t		page = (size_t) sysconf(_SC_PAGESIZE);
	size_t		size = slog_arena_size(64 * (uint64_t) SLOG_BLOCK_SIZE);
	char	   *mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ShapeLogArena *arena;
	ShapeLog	log;
	unsigned char *resident;
	char	   *before;
	size_t		blocks_at;
	size_t		npages;
	size_t		count = 0;

	REQUIRE(mem != MAP_FAILED);
	arena = slog_arena_init(mem, size);
	REQUIRE(arena->nblocks == 64);
	blocks_at = arena->blocks_offset;
	npages = (size - blocks_at) / page;
	resident = calloc(npages, 1);
	REQUIRE(resident != NULL);
	REQUIRE(mincore(mem + blocks_at, npages * page, resident) == 0);
	for (size_t i = 0; i < npages; i++)
		count += resident[i] & 1;
	CHECK_EQ(count, 0);

	/* a log holding a few blocks, written before and checked after */
	slog_init(&log);
	for (int id = 1; id <= 20; id++)
		REQUIRE(append_id(arena, &log, id, 1000, SLOG_RECORD_CHANGE, off(0, 0)) == SLOG_OK);
	CHECK(log.blocks_held >= 3);
	before = malloc(size);
	REQUIRE(before != NULL);
	memcpy(before, mem, size);

	/* in slices of three blocks, as the worker does in slices */
	for (uint32_t first = 0; first < arena->nblocks; first += 3)
		CHECK_EQ(slog_arena_prefault(arena, first, 3), first + 3 <= 64 ? 3 : 64 - first);
	CHECK_EQ(slog_arena_prefault(arena, 64, 1), 0);
	CHECK_EQ(slog_arena_prefault(arena, 60, 100), 4);
	CHECK(memcmp(before, mem, size) == 0);

	REQUIRE(mincore(mem + blocks_at, npages * page, resident) == 0);
	count = 0;
	for (size_t i = 0; i < npages; i++)
		count += resident[i] & 1;
	CHECK_EQ(count, npages);

	slog_release(arena, &log);
	free(before);
	free(resident);
	munmap(mem, size);
}

/*
 * The layout's numbers, as the design states them, and what
 * expected_blocks makes of a few logs, counted by hand.
 */
TEST(layout_geometry)
{
	CHECK_EQ(SLOG_BLOCK_SIZE, 8192);
	CHECK_EQ(SLOG_DIR_FANOUT, 2048);
	CHECK_EQ(sizeof(SlogChunk), 48);
	CHECK_EQ(SLOG_CHUNKS_PER_BLOCK, 170);
	CHECK_EQ(SLOG_POS_STRIDE, 4096);
	CHECK_EQ(SLOG_POS_PER_BLOCK, 1024);
	CHECK_EQ(SLOG_POS_INLINE, 7);	/* bytes 4 kB .. 28 kB of the 32 kB direct */
	CHECK_UEQ(SLOG_MAX_DATA_BYTES, (uint64_t) 8 << 30);
	CHECK_UEQ(SLOG_MAP_CAPACITY, 4 + 4 * 2048 + 2048 * 2048);

	/* nothing, and the two inline chunks */
	CHECK_EQ(expected_blocks(0, 0), 0);
	CHECK_EQ(expected_blocks(0, 2), 0);
	/* a one-row shape: one data block */
	CHECK_EQ(expected_blocks(slog_record_span(280), 1), 1);
	/* the third chunk takes a chunk block, the 173rd a second one */
	CHECK_EQ(expected_blocks(slog_record_span(280), 3), 2);
	CHECK_EQ(expected_blocks(slog_record_span(280), 172), 2);
	CHECK_EQ(expected_blocks(slog_record_span(280), 173), 3);
	/* 32 kB: the four direct blocks; one byte more: a directory, a data block, a position block */
	CHECK_EQ(expected_blocks(32768, 0), 4);
	CHECK_EQ(expected_blocks(32769, 0), 7);
	/* 16 MB: 2048 data blocks, 1 directory, 4 position blocks */
	CHECK_EQ(expected_blocks(16u << 20, 0), 2048 + 1 + 4);
	/* and 1 MB more: 128 data blocks, a second directory, a position directory and block */
	CHECK_EQ(expected_blocks(17u << 20, 0), 2176 + 2 + 5 + 1);
	/* 64 MB + 32 kB: 8196 data blocks, 4 directories, 17 position blocks and a directory */
	CHECK_EQ(expected_blocks(67141632, 0), 8196 + 4 + 17 + 1);
	/* one byte more: the block of directories and one directory under it */
	CHECK_EQ(expected_blocks(67141633, 0), 8197 + 4 + 2 + 17 + 1);
	/* the largest log: 2^20 data blocks, 2^21 position entries, 2^20 chunks */
	CHECK_EQ(expected_blocks(SLOG_MAX_DATA_BYTES, SLOG_MAX_CHUNKS),
			 (1048576 + 4 + 1 + (1048576 - 4 - 8192 + 2047) / 2048) +
			 (6169 + (6169 - 4 + 2047) / 2048) +
			 (2048 + (2048 - 4 + 2047) / 2048));
}

/* ------------------------------------------------- append and locate */

/*
 * The log of this test: a snapshot in three chunks, then changes with real
 * offsets, partly in a closed chunk, partly in the open tail.
 */
typedef struct Rec
{
	uint32_t	len;
	uint32_t	kind;
	LogOffset	o;
	uint64_t	pos;			/* filled in as appended */
} Rec;

static Rec recs[] = {
	/* chunk 0, ends 0_0: small records, one exactly 8-aligned, one empty */
	{10, SLOG_RECORD_CHANGE, {0, 0}}, {0, SLOG_RECORD_CHANGE, {0, 0}},
	{8, SLOG_RECORD_CHANGE, {0, 0}}, {30000, SLOG_RECORD_CHANGE, {0, 0}},
	/* chunk 1, ends 0_1: the first straddles the first block boundary */
	{5000, SLOG_RECORD_CHANGE, {0, 1}}, {1, SLOG_RECORD_CHANGE, {0, 1}},
	/* chunk 2, ends 0_2: larger than a block (100 KB), then snapshot-end */
	{100 * 1024, SLOG_RECORD_CHANGE, {0, 2}}, {77, SLOG_RECORD_CONTROL, {0, 2}},
	/* chunk 3, ends 150_0: changes */
	{300, SLOG_RECORD_CHANGE, {100, 0}}, {301, SLOG_RECORD_CHANGE, {100, 2}},
	{302, SLOG_RECORD_CHANGE, {150, 0}},
	/* the open tail */
	{40000, SLOG_RECORD_CHANGE, {200, 0}}, {5, SLOG_RECORD_CHANGE, {200, 2}},
};
#define NRECS ((int) (sizeof(recs) / sizeof(recs[0])))
static const int chunk_last[] = {3, 5, 7, 10};	/* last record of each chunk */

static void
check_range(const char *file, int line, const ShapeLogArena *arena, const ShapeLog *log,
			const SlogPublished *pub, LogOffset after, bool ready, int first, int last,
			LogOffset chunk_end, bool beyond)
{
	SlogRange	r;
	char		a[LOG_OFFSET_TEXT_LEN];

	log_offset_format(after, a, sizeof(a));
	memset(&r, 0x5a, sizeof(r));
	slog_locate(arena, log, pub, after, &r);
	if (r.ready != ready)
	{
		unit_fail(file, line, "locate(%s): ready %d, expected %d", a, r.ready, ready);
		return;
	}
	if (!ready)
		return;
	if (r.beyond_end != beyond)
		unit_fail(file, line, "locate(%s): beyond_end %d, expected %d", a, r.beyond_end, beyond);
	if (log_offset_cmp(r.chunk_end, chunk_end) != 0)
	{
		char		g[LOG_OFFSET_TEXT_LEN];
		char		w[LOG_OFFSET_TEXT_LEN];

		log_offset_format(r.chunk_end, g, sizeof(g));
		log_offset_format(chunk_end, w, sizeof(w));
		unit_fail(file, line, "locate(%s): chunk_end %s, expected %s", a, g, w);
	}
	/* records first..last inclusive; first > last means an empty range */
	{
		/* (every empty range of this test sits at the end of the data) */
		uint64_t	want_start = first <= last ? recs[first].pos : pub->data_end;
		uint64_t	want_end = first <= last ?
			recs[last].pos + slog_record_span(recs[last].len) : want_start;

		if (r.start != want_start || r.end != want_end)
		{
			unit_fail(file, line, "locate(%s): [%llu, %llu), expected [%llu, %llu)", a,
					  (unsigned long long) r.start, (unsigned long long) r.end,
					  (unsigned long long) want_start, (unsigned long long) want_end);
			return;
		}
	}
	/* the bytes in the range are exactly those records */
	for (int i = first; i <= last; i++)
		if (!check_record(file, line, arena, log, recs[i].pos, (uint64_t) i, recs[i].len,
						  recs[i].kind, recs[i].o))
			break;
}

#define CHECK_RANGE(after, ready, first, last, chunk_end, beyond) \
	check_range(__FILE__, __LINE__, arena, &log, &pub, after, ready, first, last, chunk_end, beyond)

TEST(append_publish_locate)
{
	void	   *mem;
	ShapeLogArena *arena = arena_new(64 * (size_t) SLOG_BLOCK_SIZE, &mem);
	ShapeLog	log;
	SlogPublished pub;
	int			c = 0;
	uint32_t	nblocks;

	REQUIRE(arena != NULL);
	nblocks = arena->nblocks;
	slog_init(&log);

	/* nothing published yet: nothing to serve, not even for -1 */
	slog_read_published(&log, &pub);
	CHECK_EQ(pub.data_end, 0);
	CHECK_EQ(pub.chunk_count, 0);
	CHECK_EQ(pub.flags, 0);
	CHECK_EQ(pub.last.tx, -1);
	CHECK_RANGE(LOG_OFFSET_BEFORE_ALL, false, 0, -1, off(0, 0), false);

	for (int i = 0; i < NRECS; i++)
	{
		recs[i].pos = log.write_pos;
		REQUIRE_EQ(append_id(arena, &log, (uint64_t) i, recs[i].len, recs[i].kind, recs[i].o),
				   SLOG_OK);
		CHECK_EQ(log.write_pos, recs[i].pos + slog_record_span(recs[i].len));
		if (c < 4 && i == chunk_last[c])
		{
			REQUIRE_EQ(slog_close_chunk(arena, &log, recs[i].o), SLOG_OK);
			c++;
			CHECK_EQ(log.chunk_count, c);
		}
		if (i == 4)
		{
			/* appended but not published: readers see the old state */
			slog_read_published(&log, &pub);
			CHECK_EQ(pub.data_end, 0);

			/* chunk 0 published, snapshot running */
			slog_publish(&log, off(0, 0), 0);
			slog_read_published(&log, &pub);
			CHECK_EQ(pub.data_end, recs[4].pos + slog_record_span(recs[4].len));
			CHECK_EQ(pub.chunk_count, 1);
			CHECK_EQ(pub.flags, 0);
			CHECK(pub.last.tx == 0 && pub.last.op == 0);
			CHECK_RANGE(LOG_OFFSET_BEFORE_ALL, true, 0, 3, off(0, 0), false);
			/* the next chunk is still being written: wait */
			CHECK_RANGE(off(0, 0), false, 0, -1, off(0, 0), false);
			CHECK_RANGE(off(0, 5), false, 0, -1, off(0, 0), false);
		}
		if (i == 7)
		{
			/* the snapshot is done: three chunks */
			slog_publish(&log, LOG_OFFSET_SNAPSHOT_END, SLOG_SNAPSHOT_DONE);
			slog_read_published(&log, &pub);
			CHECK_EQ(pub.chunk_count, 3);
			CHECK_EQ(pub.flags, SLOG_SNAPSHOT_DONE);
			CHECK_RANGE(off(0, 2), true, 8, 7, LOG_OFFSET_SNAPSHOT_END, false);
			CHECK_RANGE(LOG_OFFSET_SNAPSHOT_END, true, 8, 7, LOG_OFFSET_SNAPSHOT_END, false);
			CHECK_RANGE(off(1, 0), true, 8, 7, LOG_OFFSET_SNAPSHOT_END, true);
		}
	}
	CHECK_EQ(c, 4);
	slog_publish(&log, off(200, 2), SLOG_SNAPSHOT_DONE);
	slog_read_published(&log, &pub);
	CHECK_EQ(pub.data_end, log.write_pos);
	CHECK_EQ(pub.chunk_count, 4);
	CHECK(pub.last.tx == 200 && pub.last.op == 2);

	/* every chunk from its predecessor's end */
	CHECK_RANGE(LOG_OFFSET_BEFORE_ALL, true, 0, 3, off(0, 0), false);
	CHECK_RANGE(off(0, 0), true, 4, 5, off(0, 1), false);
	CHECK_RANGE(off(0, 1), true, 6, 7, off(0, 2), false);
	CHECK_RANGE(off(0, 2), true, 8, 10, off(150, 0), false);
	CHECK_RANGE(LOG_OFFSET_SNAPSHOT_END, true, 8, 10, off(150, 0), false);
	/* mid-chunk offsets: exclusive of the offset itself */
	CHECK_RANGE(off(1, 0), true, 8, 10, off(150, 0), false);
	CHECK_RANGE(off(100, 0), true, 9, 10, off(150, 0), false);
	CHECK_RANGE(off(100, 1), true, 9, 10, off(150, 0), false);
	CHECK_RANGE(off(100, 2), true, 10, 10, off(150, 0), false);
	CHECK_RANGE(off(149, LOG_OFFSET_OP_INF), true, 10, 10, off(150, 0), false);
	/* the tail after the last chunk, once the snapshot is done */
	CHECK_RANGE(off(150, 0), true, 11, 12, off(200, 2), false);
	CHECK_RANGE(off(199, 7), true, 11, 12, off(200, 2), false);
	CHECK_RANGE(off(200, 0), true, 12, 12, off(200, 2), false);
	CHECK_RANGE(off(200, 1), true, 12, 12, off(200, 2), false);
	/* at the end: an empty range; past it: beyond_end */
	CHECK_RANGE(off(200, 2), true, 13, 12, off(200, 2), false);
	CHECK_RANGE(off(200, 3), true, 13, 12, off(200, 2), true);
	CHECK_RANGE(off(300, 0), true, 13, 12, off(200, 2), true);

	/* a copy across block boundaries returns exactly the payload bytes */
	{
		uint32_t	len = recs[6].len;
		char	   *want = malloc(len);
		char	   *got = malloc(len + 64);

		fill_payload(want, len, 6);
		memset(got, 0x77, len + 64);
		slog_copy_out(arena, &log, recs[6].pos + sizeof(SlogRecordHeader), got, len);
		CHECK_MEM_EQ(got, want, len);
		for (int i = 0; i < 64; i++)
			if (got[len + i] != 0x77)
			{
				FAIL("slog_copy_out wrote past n");
				break;
			}
		/* a piece in the middle, straddling a boundary */
		{
			uint64_t	p = recs[6].pos + sizeof(SlogRecordHeader);
			uint64_t	boundary = (p / SLOG_BLOCK_SIZE + 2) * SLOG_BLOCK_SIZE;

			slog_copy_out(arena, &log, boundary - 100, got, 200);
			CHECK_MEM_EQ(got, want + (boundary - 100 - p), 200);
		}
		free(want);
		free(got);
	}

	/* the straddling records really straddle */
	CHECK(recs[4].pos / SLOG_BLOCK_SIZE !=
		  (recs[4].pos + slog_record_span(recs[4].len) - 1) / SLOG_BLOCK_SIZE);
	CHECK((recs[6].pos + slog_record_span(recs[6].len)) / SLOG_BLOCK_SIZE -
		  recs[6].pos / SLOG_BLOCK_SIZE >= 3);

	/*
	 * blocks: data past the four direct ones (so a data directory), chunks
	 * past the two inline ones (so a chunk index block), and data past 32 kB
	 * (so a position index block)
	 */
	{
		uint32_t	data_blocks = (uint32_t) ((log.write_pos + SLOG_BLOCK_SIZE - 1) / SLOG_BLOCK_SIZE);

		CHECK(data_blocks > SLOG_MAP_DIRECT);
		CHECK(log.chunk_count > SLOG_CHUNKS_INLINE && log.chunk_count <= SLOG_CHUNKS_INLINE + SLOG_CHUNKS_PER_BLOCK);
		CHECK_EQ(log.blocks_held, data_blocks + 3);
		CHECK_EQ(log.blocks_held, expected_blocks(log.write_pos, log.chunk_count));
		CHECK(atomic_load(&log.data.indirect[0]) != SLOG_NO_BLOCK);
		CHECK(atomic_load(&log.chunk_blocks.direct[0]) != SLOG_NO_BLOCK);
		CHECK(atomic_load(&log.pos_blocks.direct[0]) != SLOG_NO_BLOCK);
		CHECK_EQ(slog_arena_free_blocks(arena), nblocks - log.blocks_held);
	}

	slog_release(arena, &log);
	CHECK_EQ(slog_arena_free_blocks(arena), nblocks);
	CHECK_EQ(log.write_pos, 0);
	CHECK_EQ(log.blocks_held, 0);
	slog_read_published(&log, &pub);
	CHECK_EQ(pub.data_end, 0);
	CHECK_EQ(pub.chunk_count, 0);
	CHECK_EQ(pub.flags, 0);
	CHECK_EQ(pub.last.tx, -1);
	free(mem);
}

TEST(empty_chunks_and_empty_log)
{
	void	   *mem;
	ShapeLogArena *arena = arena_new(16 * (size_t) SLOG_BLOCK_SIZE, &mem);
	ShapeLog	log;
	SlogPublished pub;
	SlogRange	r;

	REQUIRE(arena != NULL);
	slog_init(&log);

	/* an empty, finished snapshot: the tail is empty and up to date */
	slog_publish(&log, LOG_OFFSET_SNAPSHOT_END, SLOG_SNAPSHOT_DONE);
	slog_read_published(&log, &pub);
	slog_locate(arena, &log, &pub, LOG_OFFSET_BEFORE_ALL, &r);
	CHECK(r.ready);
	CHECK(!r.beyond_end);
	CHECK_EQ(r.start, 0);
	CHECK_EQ(r.end, 0);
	CHECK(log_offset_cmp(r.chunk_end, LOG_OFFSET_SNAPSHOT_END) == 0);

	/* a closed chunk with no records */
	REQUIRE_EQ(slog_close_chunk(arena, &log, off(0, 0)), SLOG_OK);
	slog_publish(&log, off(0, 0), 0);
	slog_read_published(&log, &pub);
	slog_locate(arena, &log, &pub, LOG_OFFSET_BEFORE_ALL, &r);
	CHECK(r.ready);
	CHECK_EQ(r.start, 0);
	CHECK_EQ(r.end, 0);
	CHECK(r.chunk_end.tx == 0 && r.chunk_end.op == 0);
	slog_locate(arena, &log, &pub, off(0, 0), &r);
	CHECK(!r.ready);

	slog_release(arena, &log);
	CHECK_EQ(slog_arena_free_blocks(arena), arena->nblocks);
	free(mem);
}

TEST(many_chunks_binary_search)
{
	/* more chunks than fit in one index block */
	void	   *mem;
	ShapeLogArena *arena = arena_new(64 * (size_t) SLOG_BLOCK_SIZE, &mem);
	ShapeLog	log;
	SlogPublished pub;
	uint32_t	n = (uint32_t) SLOG_CHUNKS_PER_BLOCK * 2 + 7;
	uint64_t   *pos = malloc(sizeof(uint64_t) * (n + 1));

	REQUIRE(arena != NULL);
	REQUIRE(pos != NULL);
	slog_init(&log);
	for (uint32_t k = 0; k < n; k++)
	{
		pos[k] = log.write_pos;
		REQUIRE_EQ(append_id(arena, &log, k, k % 13, SLOG_RECORD_CHANGE, off(0, k)), SLOG_OK);
		REQUIRE_EQ(slog_close_chunk(arena, &log, off(0, k)), SLOG_OK);
	}
	pos[n] = log.write_pos;
	slog_publish(&log, LOG_OFFSET_SNAPSHOT_END, SLOG_SNAPSHOT_DONE);
	slog_read_published(&log, &pub);
	CHECK_EQ(pub.chunk_count, n);
	for (int64_t k = -1; k < (int64_t) n; k++)
	{
		SlogRange	r;
		LogOffset	after = k < 0 ? LOG_OFFSET_BEFORE_ALL : off(0, (uint64_t) k);

		slog_locate(arena, &log, &pub, after, &r);
		if (k + 1 < (int64_t) n)
		{
			if (!r.ready || r.start != pos[k + 1] || r.end != pos[k + 2] ||
				r.chunk_end.tx != 0 || r.chunk_end.op != (uint64_t) (k + 1))
			{
				FAIL("locate(0_%lld) gave [%llu, %llu) ending %llu", (long long) k,
					 (unsigned long long) r.start, (unsigned long long) r.end,
					 (unsigned long long) r.chunk_end.op);
				break;
			}
		}
		else
		{
			CHECK(r.ready);
			CHECK_EQ(r.start, pos[n]);
			CHECK_EQ(r.end, pos[n]);
			CHECK_UEQ(r.chunk_end.op, LOG_OFFSET_OP_INF);
		}
	}
	/*
	 * The data in direct blocks, and three chunk index blocks for the
	 * chunks past the two inline ones
	 */
	CHECK(pos[n] > (uint64_t) SLOG_BLOCK_SIZE &&
		  pos[n] <= SLOG_MAP_DIRECT * (uint64_t) SLOG_BLOCK_SIZE);
	CHECK_EQ(log.blocks_held, (pos[n] + SLOG_BLOCK_SIZE - 1) / SLOG_BLOCK_SIZE + 3);
	CHECK_EQ(log.blocks_held, expected_blocks(pos[n], n));
	CHECK(atomic_load(&log.chunk_blocks.direct[2]) != SLOG_NO_BLOCK);
	CHECK_UEQ(atomic_load(&log.chunk_blocks.direct[3]), SLOG_NO_BLOCK);
	slog_release(arena, &log);
	CHECK_EQ(slog_arena_free_blocks(arena), arena->nblocks);
	free(pos);
	free(mem);
}

/* ------------------------------------------------------ position index */

/*
 * A log and, aside, what was appended to it: slog_locate's answers are
 * compared with a reference that reads only this record of appends and
 * knows nothing of the position index.
 */
typedef struct RefRec
{
	LogOffset	o;
	uint64_t	pos;
	uint32_t	len;
	uint64_t	id;				/* payload seed */
} RefRec;

typedef struct RefChunk
{
	uint64_t	start;
	uint64_t	end;
	LogOffset	end_off;
} RefChunk;

typedef struct RefLog
{
	RefRec	   *recs;
	int			nrecs;
	int			rec_cap;
	RefChunk   *chunks;
	int			nchunks;
	int			chunk_cap;
	uint64_t	write_pos;
	uint64_t	chunk_start;
	/* as last published */
	int			pub_nrecs;
	int			pub_nchunks;
	uint64_t	pub_data_end;
	uint32_t	pub_flags;
	LogOffset	pub_last;
} RefLog;

static void
ref_init(RefLog *ref)
{
	memset(ref, 0, sizeof(*ref));
	ref->pub_last = LOG_OFFSET_BEFORE_ALL;
}

static void
ref_free(RefLog *ref)
{
	free(ref->recs);
	free(ref->chunks);
	ref_init(ref);
}

/* Appends to the log and to the reference; offsets never decrease. */
static SlogResult
ref_append(RefLog *ref, ShapeLogArena *arena, ShapeLog *log, LogOffset o, uint32_t len)
{
	uint64_t	id = (uint64_t) ref->nrecs + 1000;
	SlogResult	res;

	if (ref->nrecs > 0 && log_offset_cmp(o, ref->recs[ref->nrecs - 1].o) < 0)
	{
		FAIL("test bug: offsets of appends decrease");
		return SLOG_TOO_LARGE;
	}
	res = append_id(arena, log, id, len, SLOG_RECORD_CHANGE, o);
	if (res != SLOG_OK)
		return res;
	if (ref->nrecs == ref->rec_cap)
	{
		ref->rec_cap = ref->rec_cap ? 2 * ref->rec_cap : 1024;
		ref->recs = realloc(ref->recs, sizeof(RefRec) * (size_t) ref->rec_cap);
	}
	ref->recs[ref->nrecs].o = o;
	ref->recs[ref->nrecs].pos = ref->write_pos;
	ref->recs[ref->nrecs].len = len;
	ref->recs[ref->nrecs].id = id;
	ref->nrecs++;
	ref->write_pos += slog_record_span(len);
	return SLOG_OK;
}

static SlogResult
ref_close(RefLog *ref, ShapeLogArena *arena, ShapeLog *log, LogOffset end)
{
	SlogResult	res = slog_close_chunk(arena, log, end);

	if (res != SLOG_OK)
		return res;
	if (ref->nchunks == ref->chunk_cap)
	{
		ref->chunk_cap = ref->chunk_cap ? 2 * ref->chunk_cap : 64;
		ref->chunks = realloc(ref->chunks, sizeof(RefChunk) * (size_t) ref->chunk_cap);
	}
	ref->chunks[ref->nchunks].start = ref->chunk_start;
	ref->chunks[ref->nchunks].end = ref->write_pos;
	ref->chunks[ref->nchunks].end_off = end;
	ref->nchunks++;
	ref->chunk_start = ref->write_pos;
	return SLOG_OK;
}

static void
ref_publish(RefLog *ref, ShapeLog *log, LogOffset last, uint32_t flags)
{
	slog_publish(log, last, flags);
	ref->pub_nrecs = ref->nrecs;
	ref->pub_nchunks = ref->nchunks;
	ref->pub_data_end = ref->write_pos;
	ref->pub_flags = flags;
	ref->pub_last = last;
}

/* What slog_locate should answer: ready, start, end, chunk_end, beyond_end. */
typedef struct RefAnswer
{
	bool		ready;
	bool		beyond_end;
	uint64_t	start;
	uint64_t	end;
	LogOffset	chunk_end;
} RefAnswer;

/*
 * The chunk part of the answer: the first published chunk ending past
 * `after`, else the open tail once the snapshot is done.  c is that chunk.
 */
static void
ref_chunk_answer(const RefLog *ref, int c, LogOffset after, RefAnswer *want)
{
	memset(want, 0, sizeof(*want));
	if (c < ref->pub_nchunks)
	{
		want->ready = true;
		want->start = ref->chunks[c].start;
		want->end = ref->chunks[c].end;
		want->chunk_end = ref->chunks[c].end_off;
	}
	else if (ref->pub_flags & SLOG_SNAPSHOT_DONE)
	{
		want->ready = true;
		want->start = ref->pub_nchunks > 0 ? ref->chunks[ref->pub_nchunks - 1].end : 0;
		want->end = ref->pub_data_end;
		want->chunk_end = ref->pub_last;
		want->beyond_end = log_offset_cmp(after, ref->pub_last) > 0;
	}
}

/*
 * The plain scan, one query at a time: every chunk, every record.  A chunk
 * with records but none after `after` (it ends past its last record) gives
 * way to the next one.
 */
static void
ref_scan(const RefLog *ref, LogOffset after, RefAnswer *want)
{
	int			c = 0;

	while (c < ref->pub_nchunks && log_offset_cmp(ref->chunks[c].end_off, after) <= 0)
		c++;
	for (;; c++)
	{
		ref_chunk_answer(ref, c, after, want);
		if (!want->ready || log_offset_is_before_all(after))
			return;
		for (int i = 0; i < ref->pub_nrecs; i++)
		{
			const RefRec *r = &ref->recs[i];

			if (r->pos < want->start)
				continue;
			if (r->pos >= want->end || log_offset_cmp(r->o, after) > 0)
				break;
			want->start = r->pos + slog_record_span(r->len);
		}
		if (want->start < want->end || c >= ref->pub_nchunks ||
			ref->chunks[c].start == ref->chunks[c].end)
			return;
	}
}

static int
cmp_offsets(const void *a, const void *b)
{
	return log_offset_cmp(*(const LogOffset *) a, *(const LogOffset *) b);
}

static void
add_query(LogOffset *q, int *n, int64_t tx, uint64_t op)
{
	q[(*n)++] = off(tx, op);
}

static void
answer_of(const SlogRange *r, RefAnswer *a)
{
	a->ready = r->ready;
	a->beyond_end = r->beyond_end;
	a->start = r->start;
	a->end = r->end;
	a->chunk_end = r->chunk_end;
}

/* Reports a difference between two answers; true if there is one. */
static bool
answer_differs(const char *file, int line, const char *what, LogOffset after,
			   const RefAnswer *got, const RefAnswer *want)
{
	char		a[LOG_OFFSET_TEXT_LEN];
	char		g[LOG_OFFSET_TEXT_LEN];
	char		w[LOG_OFFSET_TEXT_LEN];

	if (got->ready == want->ready &&
		(!want->ready ||
		 (got->beyond_end == want->beyond_end && got->start == want->start &&
		  got->end == want->end && log_offset_cmp(got->chunk_end, want->chunk_end) == 0)))
		return false;
	log_offset_format(after, a, sizeof(a));
	log_offset_format(got->chunk_end, g, sizeof(g));
	log_offset_format(want->chunk_end, w, sizeof(w));
	unit_fail(file, line, "%s: locate(%s) = ready %d [%llu, %llu) %s beyond %d, "
			  "expected ready %d [%llu, %llu) %s beyond %d", what, a,
			  got->ready, (unsigned long long) got->start, (unsigned long long) got->end,
			  g, got->beyond_end, want->ready, (unsigned long long) want->start,
			  (unsigned long long) want->end, w, want->beyond_end);
	return true;
}

/*
 * Locates every published record's offset, the offsets just below and
 * above it and at the end of its tx, every chunk end, and offsets before
 * and past everything, and compares each answer with the reference.  The
 * queries go in ascending order, so the reference is one pass over chunks
 * and records (a record pointer and a chunk pointer that only move
 * forward); a sample is also checked against ref_scan.  Returns the number
 * of queries.
 */
static int
sweep(const char *file, int line, const ShapeLogArena *arena, const ShapeLog *log,
	  const RefLog *ref)
{
	SlogPublished pub;
	LogOffset  *q = malloc(sizeof(LogOffset) * ((size_t) ref->pub_nrecs * 5 +
												(size_t) ref->pub_nchunks + 16));
	int			nq = 0;
	int			c = 0;
	int			r = 0;
	int			failures = 0;
	uint64_t	x = 99;

	slog_read_published(log, &pub);
	if (pub.data_end != ref->pub_data_end || pub.chunk_count != (uint32_t) ref->pub_nchunks)
	{
		unit_fail(file, line, "sweep: published state differs from the reference");
		free(q);
		return 0;
	}
	for (int i = 0; i < ref->pub_nrecs; i++)
	{
		LogOffset	o = ref->recs[i].o;

		if (i > 0 && log_offset_cmp(o, ref->recs[i - 1].o) == 0)
			continue;
		add_query(q, &nq, o.tx, o.op);
		if (o.op > 0)
			add_query(q, &nq, o.tx, o.op - 1);
		else
			add_query(q, &nq, o.tx - 1, LOG_OFFSET_OP_INF);
		if (o.op < LOG_OFFSET_OP_INF)
			add_query(q, &nq, o.tx, o.op + 1);
		add_query(q, &nq, o.tx, LOG_OFFSET_OP_INF);
	}
	for (int i = 0; i < ref->pub_nchunks; i++)
		q[nq++] = ref->chunks[i].end_off;
	q[nq++] = LOG_OFFSET_BEFORE_ALL;
	q[nq++] = LOG_OFFSET_SNAPSHOT_END;
	add_query(q, &nq, 0, 0);
	add_query(q, &nq, ref->pub_last.tx, ref->pub_last.op + 1);
	add_query(q, &nq, ref->pub_last.tx + 1, 0);
	add_query(q, &nq, INT64_MAX, LOG_OFFSET_OP_INF);
	qsort(q, (size_t) nq, sizeof(LogOffset), cmp_offsets);

	for (int i = 0; i < nq && failures < 10; i++)
	{
		SlogRange	range;
		RefAnswer	got;
		RefAnswer	want;

		if (i > 0 && log_offset_cmp(q[i], q[i - 1]) == 0)
			continue;
		while (c < ref->pub_nchunks && log_offset_cmp(ref->chunks[c].end_off, q[i]) <= 0)
			c++;
		while (r < ref->pub_nrecs && log_offset_cmp(ref->recs[r].o, q[i]) <= 0)
			r++;
		for (int cc = c;; cc++)
		{
			ref_chunk_answer(ref, cc, q[i], &want);
			if (!want.ready || log_offset_is_before_all(q[i]))
				break;
			{
				/* the first record past q[i], if in the range, else its edge */
				uint64_t	first = r < ref->pub_nrecs ? ref->recs[r].pos : ref->pub_data_end;

				want.start = first < want.start ? want.start :
					first > want.end ? want.end : first;
			}
			/* nothing past q[i] in a chunk that ends past its last record: the next one */
			if (want.start < want.end || cc >= ref->pub_nchunks ||
				ref->chunks[cc].start == ref->chunks[cc].end)
				break;
		}
		memset(&range, 0x5a, sizeof(range));
		slog_locate(arena, log, &pub, q[i], &range);
		answer_of(&range, &got);
		if (answer_differs(file, line, "sweep", q[i], &got, &want))
			failures++;

		/* now and then, the reference itself against the plain scan */
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		if (x % 500 == 0 || i < 8 || i > nq - 8)
		{
			RefAnswer	scan;

			ref_scan(ref, q[i], &scan);
			if (answer_differs(file, line, "the plain scan vs. sweep's reference", q[i],
							   &scan, &want))
				failures++;
		}
	}
	free(q);
	return nq;
}

#define SWEEP(log, ref) sweep(__FILE__, __LINE__, arena, log, ref)

/* Every record of the reference is intact in the log. */
static void
check_all_records(const char *file, int line, const ShapeLogArena *arena, const ShapeLog *log,
				  const RefLog *ref)
{
	for (int i = 0; i < ref->nrecs; i++)
		if (!check_record(file, line, arena, log, ref->recs[i].pos, ref->recs[i].id,
						  ref->recs[i].len, SLOG_RECORD_CHANGE, ref->recs[i].o))
			return;
}

static uint64_t
next_rand(uint64_t *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 7;
	*x ^= *x << 17;
	return *x;
}

/*
 * A snapshot of three chunks, each one run of a single offset (0, k), then
 * about 10 MB of rows of 0 to 200 bytes in the open tail, in runs of 1 to 6
 * records sharing an offset: the tail a live client locates after every
 * change.  Checked half-way through the snapshot and at the end.
 */
TEST(locate_small_records_in_the_tail)
{
	void	   *mem;
	ShapeLogArena *arena = arena_new(24u << 20, &mem);
	ShapeLog	log;
	RefLog		ref;
	uint64_t	x = 4242;
	int64_t		tx = 100;
	int			queries;

	REQUIRE(arena != NULL);
	slog_init(&log);
	ref_init(&ref);
	for (uint64_t k = 0; k < 3; k++)
	{
		while (ref.write_pos - ref.chunk_start < 300 * 1024)
			REQUIRE_EQ(ref_append(&ref, arena, &log, off(0, k), (uint32_t) (next_rand(&x) % 201)),
					   SLOG_OK);
		REQUIRE_EQ(ref_close(&ref, arena, &log, off(0, k)), SLOG_OK);
		if (k == 1)
		{
			ref_publish(&ref, &log, off(0, k), 0);
			queries = SWEEP(&log, &ref);
			CHECK(queries > 4);
		}
	}
	while (ref.write_pos < (11u << 20))
	{
		int			run = 1 + (int) (next_rand(&x) % 6);

		tx += 1 + (int64_t) (next_rand(&x) % 3);
		for (int i = 0; i < run; i++)
			REQUIRE_EQ(ref_append(&ref, arena, &log, off(tx, 2 * (uint64_t) (i / 2)),
								  (uint32_t) (next_rand(&x) % 201)), SLOG_OK);
	}
	ref_publish(&ref, &log, ref.recs[ref.nrecs - 1].o, SLOG_SNAPSHOT_DONE);
	CHECK(ref.write_pos - ref.chunk_start > (10u << 20));
	queries = SWEEP(&log, &ref);
	CHECK(queries > 100000);
	check_all_records(__FILE__, __LINE__, arena, &log, &ref);

	slog_release(arena, &log);
	CHECK_EQ(slog_arena_free_blocks(arena), arena->nblocks);
	ref_free(&ref);
	free(mem);
}

/*
 * A log whose closed chunks left memory: every lookup and every record is
 * as before, read from its file; the tail stays in memory; the blocks come
 * back to the arena once given back, and its release frees the rest
 * exactly once.  Without its file, what lies on disk fails cleanly (the
 * range or cursor says so) while the tail is still served.
 */
TEST(trimmed_log_reads_from_its_file)
{
	void	   *mem;
	ShapeLogArena *arena = arena_new(24u << 20, &mem);
	ShapeLog	log;
	RefLog		ref;
	uint64_t	x = 31337;
	int64_t		tx = 10;
	uint32_t	blocks[1024];
	uint32_t	n;
	uint32_t	free_before;
	uint64_t	trim_to;
	char		dir[] = "/tmp/test_shape_log.XXXXXX";
	char		path[SLOG_FILE_PATH_LEN];
	SlogPublished pub;
	SlogRange	range;
	SlogCursor	cursor;
	char		buf[4096];
	bool		any = false;
	uint64_t	bytes;
	uint64_t	messages;

	REQUIRE(arena != NULL);
	REQUIRE(mkdtemp(dir) != NULL);
	snprintf(path, sizeof(path), "%s/h.1.log", dir);
	slog_init(&log);
	ref_init(&ref);
	/* 40 chunks of about 100 kB, records of 0 to 3000 bytes, then a tail */
	for (int c = 0; c < 40; c++)
	{
		while (ref.write_pos - ref.chunk_start < 100 * 1024)
		{
			tx += 1 + (int64_t) (next_rand(&x) % 3);
			REQUIRE_EQ(ref_append(&ref, arena, &log, off(tx, 0),
								  (uint32_t) (next_rand(&x) % 3001)), SLOG_OK);
		}
		REQUIRE_EQ(ref_close(&ref, arena, &log, off(tx, c % 3 == 0 ? 5 : 0)), SLOG_OK);
	}
	for (int i = 0; i < 200; i++)
		REQUIRE_EQ(ref_append(&ref, arena, &log, off(++tx, 0), (uint32_t) (next_rand(&x) % 300)),
				   SLOG_OK);
	ref_publish(&ref, &log, ref.recs[ref.nrecs - 1].o, SLOG_SNAPSHOT_DONE);
	REQUIRE(write_log_file(arena, &log, path));

	/* nothing leaves memory before the log names its file */
	CHECK_EQ(slog_trim(&log, ref.chunks[20].end, arena, blocks, 1024), 0);
	slog_set_file(&log, path);
	trim_to = ref.chunks[ref.nchunks - 1].end;
	free_before = slog_arena_free_blocks(arena);
	n = slog_trim(&log, trim_to, arena, blocks, 1024);
	CHECK_EQ(n, trim_to / SLOG_BLOCK_SIZE);
	CHECK_EQ(slog_mem_start(&log), (uint64_t) n * SLOG_BLOCK_SIZE);
	CHECK(reader_epoch_passed(reader_epoch_retire()));	/* no reader here */
	slog_arena_give_back(arena, blocks, n);
	CHECK_EQ(slog_arena_free_blocks(arena), free_before + n);
	/* a trim to where it is already is none */
	CHECK_EQ(slog_trim(&log, trim_to, arena, blocks, 1024), 0);

	/* fill the blocks given back with other bytes: nothing may read them */
	{
		ShapeLog	other;

		slog_init(&other);
		for (uint32_t i = 0; i < n; i++)
			REQUIRE_EQ(append_id(arena, &other, 99999, SLOG_BLOCK_SIZE - 64,
								 SLOG_RECORD_CHANGE, off(1, i)), SLOG_OK);
		CHECK(SWEEP(&log, &ref) > 1000);
		check_all_records(__FILE__, __LINE__, arena, &log, &ref);
		slog_release(arena, &other);
	}

	/* a cursor through trimmed chunks copies what the reference holds */
	slog_read_published(&log, &pub);
	slog_locate(arena, &log, &pub, ref.recs[5].o, &range);
	CHECK(range.ready && !range.failed && range.start == ref.recs[6].pos);
	slog_cursor_init(arena, &log, &cursor, range.start, range.end, ref.recs[5].o);
	CHECK(slog_cursor_measure(arena, &log, &cursor, &bytes, &messages));
	CHECK(messages > 0 && bytes > 0);

	/* without its file: lookups and cursors in trimmed chunks fail, the tail does not */
	slog_cursor_init(arena, &log, &cursor, ref.chunks[3].start, ref.chunks[3].end,
					 LOG_OFFSET_BEFORE_ALL);
	REQUIRE(unlink(path) == 0);
	CHECK(!slog_cursor_measure(arena, &log, &cursor, &bytes, &messages));
	CHECK_EQ(slog_cursor_copy_messages(arena, &log, &cursor, buf, sizeof(buf), &any), 0);
	CHECK(cursor.failed && !slog_cursor_more(&cursor));
	slog_locate(arena, &log, &pub, ref.recs[5].o, &range);
	CHECK(range.ready && range.failed && range.start == range.end);
	slog_cursor_init(arena, &log, &cursor, ref.chunks[3].start, ref.chunks[3].end,
					 LOG_OFFSET_BEFORE_ALL);
	CHECK(cursor.failed && !slog_cursor_more(&cursor));
	CHECK(!slog_copy_out(arena, &log, 0, buf, 16));
	slog_locate(arena, &log, &pub, ref.chunks[ref.nchunks - 1].end_off, &range);
	CHECK(range.ready && !range.failed && range.start < range.end);
	slog_cursor_init(arena, &log, &cursor, range.start, range.end,
					 ref.chunks[ref.nchunks - 1].end_off);
	CHECK(slog_cursor_copy_messages(arena, &log, &cursor, buf, sizeof(buf), &any) > 0);
	CHECK(!cursor.failed);

	slog_release(arena, &log);
	CHECK_EQ(slog_arena_free_blocks(arena), arena->nblocks);
	CHECK_EQ(slog_mem_start(&log), 0);
	rmdir(dir);
	ref_free(&ref);
	free(mem);
}

/*
 * Measures a range the slow way, by its record headers, and copies it out
 * whole; checks that the copy has the measured length.
 */
static bool
measure_by_walk(const ShapeLogArena *arena, const ShapeLog *log, const SlogRange *range,
				LogOffset after, uint64_t *bytes, uint64_t *messages)
{
	SlogCursor	cursor;
	char	   *buf;
	size_t		copied = 0;
	bool		any = false;
	bool		ok;

	slog_cursor_init(arena, log, &cursor, range->start, range->end, after);
	if (!slog_cursor_measure(arena, log, &cursor, bytes, messages))
		return false;
	buf = malloc(*bytes + *messages + 1);
	for (;;)
	{
		size_t		step = slog_cursor_copy_messages(arena, log, &cursor, buf + copied,
													 *bytes + *messages - copied, &any);

		if (step == 0)
			break;
		copied += step;
	}
	ok = !cursor.failed && !slog_cursor_more(&cursor) &&
		copied == *bytes + (*messages > 0 ? *messages - 1 : 0);
	free(buf);
	return ok;
}

/*
 * A range that is a whole closed chunk knows its size from the chunk index
 * (the length of a catch-up response, without reading its records twice):
 * the same as its records' headers say, for chunks in memory and on disk,
 * with records larger than a block, an empty chunk, and after a restore
 * that appends the records again.  A chunk holding a tombstone, a range
 * starting inside a chunk, and the open tail are measured by their headers.
 */
TEST(whole_chunks_know_their_size)
{
	void	   *mem;
	ShapeLogArena *arena = arena_new(16u << 20, &mem);
	ShapeLog	log;
	ShapeLog	restored;
	RefLog		ref;
	uint64_t	x = 777;
	int64_t		tx = 10;
	uint32_t	blocks[1024];
	uint32_t	n;
	int			tombstone_chunk = 4;
	char		dir[] = "/tmp/test_shape_log.XXXXXX";
	char		path[SLOG_FILE_PATH_LEN];
	SlogPublished pub;
	SlogRange	range;
	SlogCursor	cursor;
	uint64_t	bytes;
	uint64_t	messages;

	REQUIRE(arena != NULL);
	REQUIRE(mkdtemp(dir) != NULL);
	snprintf(path, sizeof(path), "%s/k.1.log", dir);
	slog_init(&log);
	ref_init(&ref);
	for (int c = 0; c < 12; c++)
	{
		if (c == 7)
		{
			/* an empty chunk */
			REQUIRE_EQ(ref_close(&ref, arena, &log, off(++tx, 0)), SLOG_OK);
			continue;
		}
		while (ref.write_pos - ref.chunk_start < 60 * 1024)
		{
			uint32_t	len = (uint32_t) (next_rand(&x) % 7 == 0 ? 20000 : next_rand(&x) % 500);

			tx++;
			REQUIRE_EQ(ref_append(&ref, arena, &log, off(tx, 0), len), SLOG_OK);
		}
		if (c == tombstone_chunk)
		{
			char		payload[SLOG_TOMBSTONE_PREFIX + 40];
			LogOffset	born = off(tx - 3, 0);

			memcpy(payload, &born.tx, sizeof(born.tx));
			memcpy(payload + sizeof(born.tx), &born.op, sizeof(born.op));
			memset(payload + SLOG_TOMBSTONE_PREFIX, 'd', 40);
			REQUIRE_EQ(slog_append(arena, &log, off(++tx, 0), SLOG_RECORD_TOMBSTONE,
								   payload, sizeof(payload)), SLOG_OK);
			ref.write_pos += slog_record_span(sizeof(payload));
		}
		REQUIRE_EQ(ref_close(&ref, arena, &log, off(tx, 0)), SLOG_OK);
	}
	for (int i = 0; i < 30; i++)
		REQUIRE_EQ(ref_append(&ref, arena, &log, off(++tx, 0), 100), SLOG_OK);
	ref_publish(&ref, &log, off(tx, 0), SLOG_SNAPSHOT_DONE);
	REQUIRE(write_log_file(arena, &log, path));

	/* twice: in memory, then with the first half of the chunks on disk only */
	for (int pass = 0; pass < 2; pass++)
	{
		if (pass == 1)
		{
			slog_set_file(&log, path);
			n = slog_trim(&log, ref.chunks[5].end, arena, blocks, 1024);
			REQUIRE(n > 20);
			CHECK(reader_epoch_passed(reader_epoch_retire()));
			slog_arena_give_back(arena, blocks, n);
		}
		slog_read_published(&log, &pub);
		for (int c = 0; c < ref.nchunks; c++)
		{
			LogOffset	after = c == 0 ? LOG_OFFSET_BEFORE_ALL : ref.chunks[c - 1].end_off;
			uint64_t	walk_bytes;
			uint64_t	walk_messages;

			slog_locate(arena, &log, &pub, after, &range);
			if (c == 7)
			{
				/* the empty chunk is passed over */
				CHECK(range.start == ref.chunks[8].start);
				continue;
			}
			REQUIRE(range.ready && !range.failed && range.start == ref.chunks[c].start &&
					range.end == ref.chunks[c].end);
			CHECK_EQ(range.whole_chunk, c != tombstone_chunk);
			REQUIRE(measure_by_walk(arena, &log, &range, after, &walk_bytes, &walk_messages));
			slog_cursor_init(arena, &log, &cursor, range.start, range.end, after);
			slog_cursor_size(&cursor, &range);
			CHECK_EQ(cursor.sized, c != tombstone_chunk);
			CHECK(slog_cursor_measure(arena, &log, &cursor, &bytes, &messages));
			CHECK_UEQ(bytes, walk_bytes);
			CHECK_UEQ(messages, walk_messages);
			if (c != tombstone_chunk)
			{
				CHECK_UEQ(range.message_bytes, walk_bytes);
				CHECK_UEQ(range.messages, walk_messages);
			}
		}
		/* from inside a chunk, and the tail: no known size */
		slog_locate(arena, &log, &pub, ref.recs[3].o, &range);
		CHECK(range.ready && range.start == ref.recs[4].pos && !range.whole_chunk);
		slog_cursor_init(arena, &log, &cursor, range.start, range.end, ref.recs[3].o);
		slog_cursor_size(&cursor, &range);
		CHECK(!cursor.sized);
		slog_locate(arena, &log, &pub, ref.chunks[ref.nchunks - 1].end_off, &range);
		CHECK(range.ready && range.start < range.end && !range.whole_chunk);
	}

	/* restored by appending its records again, as log_restore.c does */
	slog_init(&restored);
	{
		uint64_t	pos = 0;
		int			c = 0;
		char	   *rec = malloc(1 << 16);

		while (pos < ref.write_pos)
		{
			SlogRecordHeader hdr;

			REQUIRE(slog_read_header(arena, &log, pos, &hdr));
			REQUIRE(slog_copy_out(arena, &log, pos + sizeof(hdr), rec, hdr.len));
			REQUIRE_EQ(slog_append(arena, &restored, off(hdr.tx, hdr.op), hdr.kind, rec, hdr.len),
					   SLOG_OK);
			pos += slog_record_span(hdr.len);
			while (c < ref.nchunks && ref.chunks[c].end == pos)
				REQUIRE_EQ(slog_close_chunk(arena, &restored, ref.chunks[c++].end_off), SLOG_OK);
		}
		free(rec);
	}
	slog_publish(&restored, off(tx, 0), SLOG_SNAPSHOT_DONE);
	for (int c = 0; c < ref.nchunks; c++)
	{
		SlogChunk	a;
		SlogChunk	b;

		slog_chunk_read(arena, &log, (uint32_t) c, &a);
		slog_chunk_read(arena, &restored, (uint32_t) c, &b);
		CHECK(memcmp(&a, &b, sizeof(a)) == 0);
	}

	slog_release(arena, &restored);
	slog_release(arena, &log);
	CHECK_EQ(slog_arena_free_blocks(arena), arena->nblocks);
	unlink(path);
	rmdir(dir);
	ref_free(&ref);
	free(mem);
}

/*
 * A thread's next reader call reuses the window its last one read from the
 * same file (a response's next piece, an SSE stream's next message): with
 * the file gone, what the window holds is still served, as it was, and
 * what it does not hold fails.
 */
TEST(reader_calls_reuse_the_threads_window)
{
	void	   *mem;
	ShapeLogArena *arena = arena_new(8u << 20, &mem);
	ShapeLog	log;
	RefLog		ref;
	uint64_t	x = 4242;
	int64_t		tx = 10;
	uint32_t	blocks[256];
	uint32_t	n;
	char		dir[] = "/tmp/test_shape_log.XXXXXX";
	char		path[SLOG_FILE_PATH_LEN];
	char		before[64];
	char		after[64];
	uint64_t	at;

	REQUIRE(arena != NULL);
	REQUIRE(mkdtemp(dir) != NULL);
	snprintf(path, sizeof(path), "%s/w.1.log", dir);
	slog_init(&log);
	ref_init(&ref);
	for (int c = 0; c < 10; c++)
	{
		while (ref.write_pos - ref.chunk_start < 100 * 1024)
		{
			tx++;
			REQUIRE_EQ(ref_append(&ref, arena, &log, off(tx, 0),
								  (uint32_t) (next_rand(&x) % 2000)), SLOG_OK);
		}
		REQUIRE_EQ(ref_close(&ref, arena, &log, off(tx, 0)), SLOG_OK);
	}
	ref_publish(&ref, &log, ref.recs[ref.nrecs - 1].o, SLOG_SNAPSHOT_DONE);
	REQUIRE(write_log_file(arena, &log, path));
	slog_set_file(&log, path);
	n = slog_trim(&log, ref.chunks[ref.nchunks - 1].end, arena, blocks, 256);
	REQUIRE(n > 40);
	CHECK(reader_epoch_passed(reader_epoch_retire()));
	slog_arena_give_back(arena, blocks, n);

	/* a block in the middle of what is on disk: the window starts there */
	at = (uint64_t) (n / 2) * SLOG_BLOCK_SIZE;
	CHECK(slog_copy_out(arena, &log, at, before, 16));
	CHECK(slog_copy_out(arena, &log, at + 3 * SLOG_BLOCK_SIZE + 100, before + 16, 16));
	REQUIRE(unlink(path) == 0);
	CHECK(slog_copy_out(arena, &log, at, after, 16));
	CHECK(slog_copy_out(arena, &log, at + 3 * SLOG_BLOCK_SIZE + 100, after + 16, 16));
	CHECK(memcmp(before, after, 32) == 0);
	/* before the window, and past it: the file is gone */
	CHECK(!slog_copy_out(arena, &log, at - SLOG_BLOCK_SIZE, after, 16));
	CHECK(!slog_copy_out(arena, &log, at + 20 * SLOG_BLOCK_SIZE, after, 16));

	slog_release(arena, &log);
	CHECK_EQ(slog_arena_free_blocks(arena), arena->nblocks);
	rmdir(dir);
	ref_free(&ref);
	free(mem);
}

/*
 * Changes in closed chunks of about 1 MB and a 1 MB tail: runs of equal
 * offsets, chunks that end at their last record's offset or past it, and
 * an empty chunk.
 */
TEST(locate_small_records_in_closed_chunks)
{
	void	   *mem;
	ShapeLogArena *arena = arena_new(16u << 20, &mem);
	ShapeLog	log;
	RefLog		ref;
	uint64_t	x = 777;
	int64_t		tx = 1;
	int			queries;

	REQUIRE(arena != NULL);
	slog_init(&log);
	ref_init(&ref);
	while (ref.write_pos < (10u << 20))
	{
		int			run = 1 + (int) (next_rand(&x) % 5);
		LogOffset	o = off(tx, 2 * (next_rand(&x) % 3));

		for (int i = 0; i < run; i++)
			REQUIRE_EQ(ref_append(&ref, arena, &log, o, (uint32_t) (next_rand(&x) % 160)),
					   SLOG_OK);
		if (ref.write_pos - ref.chunk_start >= (1u << 20) && ref.write_pos < (9u << 20))
		{
			LogOffset	end = next_rand(&x) % 2 ? o : off(tx, o.op + 1);

			REQUIRE_EQ(ref_close(&ref, arena, &log, end), SLOG_OK);
			if (ref.nchunks == 4)
				REQUIRE_EQ(ref_close(&ref, arena, &log, off(tx, LOG_OFFSET_OP_INF)), SLOG_OK);
		}
		tx += 1 + (int64_t) (next_rand(&x) % 2);
	}
	CHECK(ref.nchunks >= 9);
	/* snapshot not done: the tail is not served yet */
	ref_publish(&ref, &log, ref.recs[ref.nrecs - 1].o, 0);
	queries = SWEEP(&log, &ref);
	ref_publish(&ref, &log, ref.recs[ref.nrecs - 1].o, SLOG_SNAPSHOT_DONE);
	queries += SWEEP(&log, &ref);
	CHECK(queries > 50000);
	check_all_records(__FILE__, __LINE__, arena, &log, &ref);
	slog_release(arena, &log);
	CHECK_EQ(slog_arena_free_blocks(arena), arena->nblocks);
	ref_free(&ref);
	free(mem);
}

/*
 * Records of every size around a stride and a block: runs of records that
 * each start exactly on a stride boundary, records that span several
 * strides and blocks, and 20 MB in all, so that a closed chunk and the
 * tail cross from the first position index block into the second.
 */
TEST(locate_records_straddling_strides_and_blocks)
{
	void	   *mem;
	ShapeLogArena *arena = arena_new(28u << 20, &mem);
	ShapeLog	log;
	RefLog		ref;
	uint64_t	x = 31337;
	int64_t		tx = 1;
	int			queries = 0;
	bool		checked_midway = false;

	REQUIRE(arena != NULL);
	slog_init(&log);
	ref_init(&ref);
	while (ref.write_pos < (20u << 20))
	{
		uint64_t	what = next_rand(&x) % 16;
		int			run = 1 + (int) (next_rand(&x) % (what >= 8 ? 40 : 4));

		for (int i = 0; i < run; i++)
		{
			uint32_t	len;

			if (what == 0)
			{
				/* pad to a stride boundary, then records of one stride each */
				uint64_t	gap = SLOG_POS_STRIDE - ref.write_pos % SLOG_POS_STRIDE;

				if (gap < sizeof(SlogRecordHeader))
					gap += SLOG_POS_STRIDE;
				REQUIRE_EQ(ref_append(&ref, arena, &log, off(tx, 0),
									  (uint32_t) (gap - sizeof(SlogRecordHeader))), SLOG_OK);
				for (int k = 0; k < 12; k++)
					REQUIRE_EQ(ref_append(&ref, arena, &log, off(tx, 0),
										  SLOG_POS_STRIDE - sizeof(SlogRecordHeader)), SLOG_OK);
				CHECK_EQ(ref.write_pos % SLOG_POS_STRIDE, 0);
				break;
			}
			else if (what == 1)
				len = SLOG_BLOCK_SIZE - sizeof(SlogRecordHeader);
			else if (what <= 3)
				len = 5000 + (uint32_t) (next_rand(&x) % 70000);
			else if (what <= 7)
				len = SLOG_POS_STRIDE - 64 + (uint32_t) (next_rand(&x) % 128);
			else
				len = (uint32_t) (next_rand(&x) % 300);
			REQUIRE_EQ(ref_append(&ref, arena, &log, off(tx, 2 * (uint64_t) (i / 2)), len),
					   SLOG_OK);
		}
		tx++;
		if (ref.write_pos - ref.chunk_start >= (3u << 20))
			REQUIRE_EQ(ref_close(&ref, arena, &log, ref.recs[ref.nrecs - 1].o), SLOG_OK);
		if (!checked_midway && ref.write_pos > (9u << 20))
		{
			ref_publish(&ref, &log, ref.recs[ref.nrecs - 1].o, SLOG_SNAPSHOT_DONE);
			queries += SWEEP(&log, &ref);
			checked_midway = true;
		}
	}
	/* a chunk and the tail both span the first index block's end (4 MB) */
	{
		bool		chunk_across = false;
		uint64_t	edge = (uint64_t) SLOG_POS_PER_BLOCK * SLOG_POS_STRIDE;

		for (int c = 0; c < ref.nchunks; c++)
			chunk_across |= ref.chunks[c].start < edge && ref.chunks[c].end > edge + SLOG_POS_STRIDE;
		CHECK(chunk_across || (ref.chunk_start < edge && ref.write_pos > edge));
		CHECK_UEQ(atomic_load(&log.pos_blocks.direct[1]) != SLOG_NO_BLOCK, 1);
	}
	ref_publish(&ref, &log, ref.recs[ref.nrecs - 1].o, SLOG_SNAPSHOT_DONE);
	queries += SWEEP(&log, &ref);
	CHECK(queries > 20000);
	check_all_records(__FILE__, __LINE__, arena, &log, &ref);
	slog_release(arena, &log);
	CHECK_EQ(slog_arena_free_blocks(arena), arena->nblocks);
	ref_free(&ref);
	free(mem);
}

/* The nth block of a block map, walked as the layout says (shape_log.h). */
static uint32_t
map_block(const ShapeLogArena *arena, const SlogBlockMap *map, uint64_t nth)
{
	const char *blocks = (const char *) arena + arena->blocks_offset;
	uint32_t	dir;

	if (nth < SLOG_MAP_DIRECT)
		return atomic_load(&map->direct[nth]);
	nth -= SLOG_MAP_DIRECT;
	if (nth < (uint64_t) SLOG_MAP_INDIRECT * SLOG_DIR_FANOUT)
		dir = atomic_load(&map->indirect[nth / SLOG_DIR_FANOUT]);
	else
	{
		nth -= (uint64_t) SLOG_MAP_INDIRECT * SLOG_DIR_FANOUT;
		dir = ((const uint32_t *) (blocks + (size_t) atomic_load(&map->double_indirect) *
								   SLOG_BLOCK_SIZE))[nth / SLOG_DIR_FANOUT];
	}
	return ((const uint32_t *) (blocks + (size_t) dir * SLOG_BLOCK_SIZE))[nth % SLOG_DIR_FANOUT];
}

/* Overwrites n bytes of the log at pos, behind the log's back. */
static void
poke(ShapeLogArena *arena, const ShapeLog *log, uint64_t pos, const void *src, size_t n)
{
	const char *p = src;

	while (n > 0)
	{
		char	   *blocks = (char *) arena + arena->blocks_offset;
		uint32_t	blk = map_block(arena, &log->data, pos / SLOG_BLOCK_SIZE);
		size_t		in_block = SLOG_BLOCK_SIZE - pos % SLOG_BLOCK_SIZE;
		size_t		step = n < in_block ? n : in_block;

		memcpy(blocks + (size_t) blk * SLOG_BLOCK_SIZE + pos % SLOG_BLOCK_SIZE, p, step);
		pos += step;
		p += step;
		n -= step;
	}
}

/*
 * What bounds the work: slog_locate reads the headers of the records the
 * position index names and of those within a stride before its answer,
 * and no others.  Long runs of one offset, in a closed chunk and in the
 * tail, then every other header of the runs is overwritten with an offset
 * past everything: a locate that reads one of them (a scan from the
 * chunk's start, or a search that stops before the run's last entry)
 * answers wrong.
 */
TEST(locate_reads_one_stride_of_headers)
{
	void	   *mem;
	ShapeLogArena *arena = arena_new(4u << 20, &mem);
	ShapeLog	log;
	RefLog		ref;
	uint64_t	answer[2];
	int			run_first[2];
	int			corrupted = 0;

	REQUIRE(arena != NULL);
	slog_init(&log);
	ref_init(&ref);
	for (int c = 0; c < 2; c++)
	{
		int64_t		tx = 1 + 2 * c;

		for (int i = 0; i < 3; i++)
			REQUIRE_EQ(ref_append(&ref, arena, &log, off(tx, 0), 40), SLOG_OK);
		run_first[c] = ref.nrecs;
		for (int i = 0; i < 5000; i++)
			REQUIRE_EQ(ref_append(&ref, arena, &log, off(tx + 1, 0), 100), SLOG_OK);
		answer[c] = ref.write_pos;
		for (int i = 0; i < 5; i++)
			REQUIRE_EQ(ref_append(&ref, arena, &log, off(tx + 1, 2), 40), SLOG_OK);
		if (c == 0)
			REQUIRE_EQ(ref_close(&ref, arena, &log, off(tx + 1, 2)), SLOG_OK);
	}
	ref_publish(&ref, &log, off(4, 2), SLOG_SNAPSHOT_DONE);
	CHECK(SWEEP(&log, &ref) > 10);

	for (int c = 0; c < 2; c++)
		for (int i = run_first[c]; i < run_first[c] + 5000; i++)
		{
			uint64_t	p = ref.recs[i].pos;
			uint64_t	span = slog_record_span(ref.recs[i].len);
			SlogRecordHeader bad = {ref.recs[i].len, SLOG_RECORD_CHANGE, INT64_MAX, 0};

			/* an indexed record, or one within two strides of the answer */
			if ((p + SLOG_POS_STRIDE - 1) / SLOG_POS_STRIDE <= (p + span - 1) / SLOG_POS_STRIDE ||
				p + 2 * SLOG_POS_STRIDE >= answer[c])
				continue;
			poke(arena, &log, p, &bad, sizeof(bad));
			corrupted++;
		}
	CHECK(corrupted > 9000);
	for (int c = 0; c < 2; c++)
		for (uint64_t op = 0; op < 2; op++)
		{
			SlogPublished pub;
			SlogRange	r;

			slog_read_published(&log, &pub);
			slog_locate(arena, &log, &pub, off(2 + 2 * c, op), &r);
			if (!r.ready || r.start != answer[c])
				FAIL("locate(%d_%llu) = [%llu, %llu), expected to start at %llu",
					 2 + 2 * c, (unsigned long long) op, (unsigned long long) r.start,
					 (unsigned long long) r.end, (unsigned long long) answer[c]);
		}
	slog_release(arena, &log);
	CHECK_EQ(slog_arena_free_blocks(arena), arena->nblocks);
	ref_free(&ref);
	free(mem);
}

/* -------------------------------------------------------- exhaustion */

TEST(arena_exhaustion)
{
	/* ten blocks exactly */
	size_t		size = 11 * (size_t) SLOG_BLOCK_SIZE;
	void	   *mem = aligned_alloc(SLOG_BLOCK_SIZE, size);
	ShapeLogArena *arena;
	ShapeLog	a;
	ShapeLog	b;
	SlogPublished pub;
	SlogRange	r;
	int			n = 0;
	const uint32_t big = 6000;	/* span 6024 */
	const uint64_t span = slog_record_span(big);

	REQUIRE(mem != NULL);
	arena = slog_arena_init(mem, size);
	REQUIRE_EQ(arena->nblocks, 10);
	slog_init(&a);
	slog_init(&b);

	/* b: two directly named data blocks, nothing else */
	REQUIRE_EQ(append_id(arena, &b, 1000, big, SLOG_RECORD_CHANGE, off(1, 0)), SLOG_OK);
	CHECK_EQ(b.blocks_held, 1);
	REQUIRE_EQ(append_id(arena, &b, 1001, big, SLOG_RECORD_CHANGE, off(1, 2)), SLOG_OK);
	CHECK_EQ(b.blocks_held, 2);
	CHECK_EQ(slog_arena_free_blocks(arena), 8);

	/*
	 * a: five records in its four direct blocks; the sixth takes a directory,
	 * a data block and a position index block (its entry 8 is past the inline
	 * ones), the seventh one more data block, the eighth fits, the ninth does
	 * not
	 */
	for (;;)
	{
		SlogResult	res = append_id(arena, &a, (uint64_t) n, big, SLOG_RECORD_CHANGE,
									off(1, (uint64_t) n));

		if (res != SLOG_OK)
		{
			CHECK_EQ(res, SLOG_FULL);
			break;
		}
		if (n == 4)
			CHECK_EQ(a.blocks_held, 4);
		if (n == 5)
			CHECK_EQ(a.blocks_held, 7);
		if (++n > 100)
			break;
	}
	CHECK_EQ(n, 8);
	CHECK_EQ(slog_arena_free_blocks(arena), 0);
	CHECK_EQ(a.write_pos, 8 * span);
	CHECK_EQ(a.blocks_held, 8);
	CHECK(atomic_load(&a.data.indirect[0]) != SLOG_NO_BLOCK);
	CHECK(atomic_load(&a.pos_blocks.direct[0]) != SLOG_NO_BLOCK);

	/* a record that fits in the last attached block still goes in */
	{
		uint64_t	room = 6 * (uint64_t) SLOG_BLOCK_SIZE - a.write_pos;

		CHECK_EQ(room, 960);
		REQUIRE_EQ(append_id(arena, &a, 8, (uint32_t) (room - 24), SLOG_RECORD_CHANGE, off(1, 8)),
				   SLOG_OK);
		n++;
		CHECK_EQ(a.write_pos, 6 * (uint64_t) SLOG_BLOCK_SIZE);
		CHECK_EQ(append_id(arena, &a, 9, 0, SLOG_RECORD_CHANGE, off(1, 9)), SLOG_FULL);
	}

	/* the records already there are intact and servable */
	slog_publish(&a, off(1, 8), SLOG_SNAPSHOT_DONE);
	slog_read_published(&a, &pub);
	slog_locate(arena, &a, &pub, LOG_OFFSET_BEFORE_ALL, &r);
	CHECK(r.ready);
	CHECK_EQ(r.start, 0);
	CHECK_EQ(r.end, a.write_pos);
	for (int i = 0; i < 8; i++)
		CHECK_RECORD(arena, &a, (uint64_t) i * span, (uint64_t) i, big,
					 SLOG_RECORD_CHANGE, off(1, (uint64_t) i));
	CHECK_RECORD(arena, &a, 8 * span, 8, 960 - 24, SLOG_RECORD_CHANGE, off(1, 8));
	for (int i = 0; i < 9; i++)
	{
		slog_locate(arena, &a, &pub, off(1, (uint64_t) i), &r);
		CHECK_EQ(r.start, i < 8 ? (uint64_t) (i + 1) * span : a.write_pos);
	}

	/* another log gives its blocks back: a can grow again */
	slog_release(arena, &b);
	CHECK_EQ(slog_arena_free_blocks(arena), 2);

	/*
	 * A record needing three new blocks gets the two there are, fails,
	 * and keeps them attached: the log itself is unchanged.
	 */
	{
		uint64_t	before = a.write_pos;

		CHECK_EQ(append_id(arena, &a, 10, 3 * SLOG_BLOCK_SIZE - 100, SLOG_RECORD_CHANGE, off(2, 0)),
				 SLOG_FULL);
		CHECK_EQ(a.write_pos, before);
		CHECK_EQ(slog_arena_free_blocks(arena), 0);
		CHECK_EQ(a.blocks_held, 10);
		slog_read_published(&a, &pub);
		CHECK_EQ(pub.data_end, before);
	}

	/* smaller records reuse the blocks the failed append attached */
	REQUIRE_EQ(append_id(arena, &a, 11, big, SLOG_RECORD_CHANGE, off(2, 2)), SLOG_OK);
	REQUIRE_EQ(append_id(arena, &a, 12, big, SLOG_RECORD_CHANGE, off(2, 4)), SLOG_OK);
	CHECK_EQ(a.blocks_held, 10);
	CHECK_EQ(slog_arena_free_blocks(arena), 0);
	slog_publish(&a, off(2, 4), SLOG_SNAPSHOT_DONE);
	slog_read_published(&a, &pub);
	slog_locate(arena, &a, &pub, off(1, 8), &r);
	CHECK(r.ready);
	CHECK_EQ(r.start, 6 * (uint64_t) SLOG_BLOCK_SIZE);
	CHECK_EQ(r.end, 6 * (uint64_t) SLOG_BLOCK_SIZE + 2 * span);
	CHECK_RECORD(arena, &a, r.start, 11, big, SLOG_RECORD_CHANGE, off(2, 2));
	CHECK_RECORD(arena, &a, r.start + span, 12, big, SLOG_RECORD_CHANGE, off(2, 4));
	slog_locate(arena, &a, &pub, off(2, 2), &r);
	CHECK_EQ(r.start, 6 * (uint64_t) SLOG_BLOCK_SIZE + span);

	/* release returns every block, the ones past write_pos included */
	slog_release(arena, &a);
	CHECK_EQ(slog_arena_free_blocks(arena), 10);

	/*
	 * And the arena hands out all ten again, each once: eight records of a
	 * block each take the four direct blocks, a directory naming four more,
	 * and a position index block.
	 */
	{
		ShapeLog	c;
		uint32_t	seen[10] = {0};
		uint32_t	dir;
		uint32_t	idx;

		slog_init(&c);
		for (int i = 0; i < 8; i++)
			CHECK_EQ(append_id(arena, &c, (uint64_t) i, SLOG_BLOCK_SIZE - 24, SLOG_RECORD_CHANGE,
							   off(3, (uint64_t) i)), SLOG_OK);
		CHECK_EQ(slog_arena_free_blocks(arena), 0);
		dir = atomic_load(&c.data.indirect[0]);
		idx = atomic_load(&c.pos_blocks.direct[0]);
		REQUIRE(dir < 10);
		REQUIRE(idx < 10);
		seen[dir]++;
		seen[idx]++;
		for (int i = 0; i < 8; i++)
		{
			uint32_t	blk = map_block(arena, &c.data, (uint64_t) i);

			REQUIRE(blk < 10);
			seen[blk]++;
		}
		for (int i = 0; i < 10; i++)
			CHECK_EQ(seen[i], 1);
		for (int i = 0; i < 8; i++)
			CHECK_RECORD(arena, &c, (uint64_t) i * SLOG_BLOCK_SIZE, (uint64_t) i,
						 SLOG_BLOCK_SIZE - 24, SLOG_RECORD_CHANGE, off(3, (uint64_t) i));
		slog_release(arena, &c);
		CHECK_EQ(slog_arena_free_blocks(arena), 10);
	}
	free(mem);
}

/*
 * The first SLOG_CHUNKS_INLINE closed chunks live in the log: a log of one
 * block closes them with the arena empty, and the next one needs a chunk
 * index block: SLOG_FULL and nothing changed, then it goes in once a block
 * is free.
 */
TEST(chunk_index_exhaustion)
{
	size_t		size = 3 * (size_t) SLOG_BLOCK_SIZE;
	void	   *mem = aligned_alloc(SLOG_BLOCK_SIZE, size);
	ShapeLogArena *arena;
	ShapeLog	a;
	ShapeLog	b;
	SlogPublished pub;
	SlogRange	r;

	REQUIRE(mem != NULL);
	arena = slog_arena_init(mem, size);
	REQUIRE_EQ(arena->nblocks, 2);
	slog_init(&a);
	slog_init(&b);
	REQUIRE_EQ(append_id(arena, &b, 100, 10, SLOG_RECORD_CHANGE, off(1, 0)), SLOG_OK);
	for (uint64_t k = 0; k < 2; k++)
	{
		REQUIRE_EQ(append_id(arena, &a, k, 50, SLOG_RECORD_CHANGE, off(1, k)), SLOG_OK);
		REQUIRE_EQ(slog_close_chunk(arena, &a, off(1, k)), SLOG_OK);
	}
	REQUIRE_EQ(append_id(arena, &a, 2, 50, SLOG_RECORD_CHANGE, off(1, 2)), SLOG_OK);
	CHECK_EQ(slog_arena_free_blocks(arena), 0);
	CHECK_EQ(a.blocks_held, 1);
	CHECK_EQ(slog_close_chunk(arena, &a, off(1, 2)), SLOG_FULL);
	CHECK_EQ(a.chunk_count, 2);
	slog_publish(&a, off(1, 2), SLOG_SNAPSHOT_DONE);
	slog_read_published(&a, &pub);
	CHECK_EQ(pub.chunk_count, 2);
	slog_locate(arena, &a, &pub, off(1, 0), &r);
	CHECK(r.ready);
	CHECK_EQ(r.start, slog_record_span(50));
	CHECK_EQ(r.end, 2 * slog_record_span(50));
	CHECK_UEQ(r.chunk_end.op, 1);

	slog_release(arena, &b);
	REQUIRE_EQ(slog_close_chunk(arena, &a, off(1, 2)), SLOG_OK);
	CHECK_EQ(a.blocks_held, 2);
	slog_publish(&a, off(1, 2), SLOG_SNAPSHOT_DONE);
	slog_read_published(&a, &pub);
	slog_locate(arena, &a, &pub, off(1, 1), &r);
	CHECK_EQ(r.start, 2 * slog_record_span(50));
	CHECK_EQ(r.end, 3 * slog_record_span(50));
	CHECK_UEQ(r.chunk_end.op, 2);
	slog_release(arena, &a);
	CHECK_EQ(slog_arena_free_blocks(arena), 2);
	free(mem);
}

/*
 * A shape of one row, its chunk closed and published, holds one block: the
 * record's data block; its chunk, its position entries and its block
 * map are in the log itself.  So is a second chunk; the third takes a
 * chunk block.
 */
TEST(small_log_is_one_block)
{
	void	   *mem;
	ShapeLogArena *arena = arena_new(16 * (size_t) SLOG_BLOCK_SIZE, &mem);
	ShapeLog	log;
	SlogPublished pub;
	SlogRange	r;
	uint32_t	free_before;
	const uint64_t span = slog_record_span(280);

	REQUIRE(arena != NULL);
	free_before = slog_arena_free_blocks(arena);
	slog_init(&log);
	REQUIRE_EQ(append_id(arena, &log, 7, 280, SLOG_RECORD_CHANGE, off(0, 0)), SLOG_OK);
	REQUIRE_EQ(slog_close_chunk(arena, &log, LOG_OFFSET_SNAPSHOT_END), SLOG_OK);
	slog_publish(&log, LOG_OFFSET_SNAPSHOT_END, SLOG_SNAPSHOT_DONE);
	CHECK_EQ(log.blocks_held, 1);
	CHECK_EQ(slog_arena_free_blocks(arena), free_before - 1);
	CHECK(atomic_load(&log.data.direct[0]) != SLOG_NO_BLOCK);
	CHECK_UEQ(atomic_load(&log.data.direct[1]), SLOG_NO_BLOCK);
	CHECK_UEQ(atomic_load(&log.data.indirect[0]), SLOG_NO_BLOCK);
	CHECK_UEQ(atomic_load(&log.chunk_blocks.direct[0]), SLOG_NO_BLOCK);
	CHECK_UEQ(atomic_load(&log.pos_blocks.direct[0]), SLOG_NO_BLOCK);
	slog_read_published(&log, &pub);
	CHECK_EQ(pub.chunk_count, 1);
	CHECK_EQ(pub.data_end, span);
	slog_locate(arena, &log, &pub, LOG_OFFSET_BEFORE_ALL, &r);
	CHECK(r.ready);
	CHECK_EQ(r.start, 0);
	CHECK_EQ(r.end, span);
	CHECK(log_offset_cmp(r.chunk_end, LOG_OFFSET_SNAPSHOT_END) == 0);
	CHECK_RECORD(arena, &log, r.start, 7, 280, SLOG_RECORD_CHANGE, off(0, 0));
	/* after it: the empty, up-to-date tail */
	slog_locate(arena, &log, &pub, LOG_OFFSET_SNAPSHOT_END, &r);
	CHECK(r.ready && !r.beyond_end);
	CHECK_EQ(r.start, span);
	CHECK_EQ(r.end, span);

	/* the second chunk is inline too */
	REQUIRE_EQ(append_id(arena, &log, 8, 280, SLOG_RECORD_CHANGE, off(1, 0)), SLOG_OK);
	REQUIRE_EQ(slog_close_chunk(arena, &log, off(1, 0)), SLOG_OK);
	CHECK_EQ(log.blocks_held, 1);
	CHECK_EQ(slog_arena_free_blocks(arena), free_before - 1);

	/* the third takes one chunk block, and nothing else */
	REQUIRE_EQ(append_id(arena, &log, 9, 280, SLOG_RECORD_CHANGE, off(2, 0)), SLOG_OK);
	CHECK_EQ(log.blocks_held, 1);
	REQUIRE_EQ(slog_close_chunk(arena, &log, off(2, 0)), SLOG_OK);
	CHECK_EQ(log.blocks_held, 2);
	CHECK_EQ(log.blocks_held, expected_blocks(log.write_pos, log.chunk_count));
	CHECK_EQ(slog_arena_free_blocks(arena), free_before - 2);
	CHECK(atomic_load(&log.chunk_blocks.direct[0]) != SLOG_NO_BLOCK);
	CHECK_UEQ(atomic_load(&log.chunk_blocks.direct[1]), SLOG_NO_BLOCK);

	/* each chunk is found, wherever it is kept */
	slog_publish(&log, off(2, 0), SLOG_SNAPSHOT_DONE);
	slog_read_published(&log, &pub);
	CHECK_EQ(pub.chunk_count, 3);
	for (int c = 0; c < 3; c++)
	{
		SlogChunk	chunk;
		LogOffset	after = c == 0 ? LOG_OFFSET_BEFORE_ALL :
			c == 1 ? LOG_OFFSET_SNAPSHOT_END : off(1, 0);

		slog_chunk_read(arena, &log, (uint32_t) c, &chunk);
		CHECK_EQ(chunk.start_pos, (uint64_t) c * span);
		CHECK_EQ(chunk.end_pos, (uint64_t) (c + 1) * span);
		slog_locate(arena, &log, &pub, after, &r);
		CHECK(r.ready);
		CHECK_EQ(r.start, (uint64_t) c * span);
		CHECK_EQ(r.end, (uint64_t) (c + 1) * span);
		CHECK(log_offset_cmp(r.chunk_end, c == 0 ? LOG_OFFSET_SNAPSHOT_END : off(c, 0)) == 0);
		CHECK_RECORD(arena, &log, r.start, 7 + (uint64_t) c, 280, SLOG_RECORD_CHANGE,
					 c == 0 ? off(0, 0) : off(c, 0));
	}

	slog_release(arena, &log);
	CHECK_EQ(log.blocks_held, 0);
	CHECK_EQ(slog_arena_free_blocks(arena), free_before);
	free(mem);
}

/*
 * An append whose data blocks are there but whose position index block is
 * not fails like one without its data: SLOG_FULL, the log unchanged and
 * servable; it goes in once another log gives a block back.
 */
TEST(position_index_exhaustion)
{
	size_t		size = 8 * (size_t) SLOG_BLOCK_SIZE;
	void	   *mem = aligned_alloc(SLOG_BLOCK_SIZE, size);
	ShapeLogArena *arena;
	ShapeLog	a;
	ShapeLog	b;
	RefLog		ref;
	const uint32_t big = 6000;	/* span 6024 */

	REQUIRE(mem != NULL);
	arena = slog_arena_init(mem, size);
	REQUIRE_EQ(arena->nblocks, 7);
	slog_init(&a);
	slog_init(&b);
	ref_init(&ref);

	/* b: a data block; a: five records in its four direct blocks, no index block yet */
	REQUIRE_EQ(append_id(arena, &b, 1, 100, SLOG_RECORD_CHANGE, off(1, 0)), SLOG_OK);
	for (int i = 0; i < 5; i++)
		REQUIRE_EQ(ref_append(&ref, arena, &a, off(1, 2 * (uint64_t) i), big), SLOG_OK);
	CHECK_EQ(a.blocks_held, 4);
	CHECK_EQ(slog_arena_free_blocks(arena), 2);

	/* the sixth gets its directory and data block, but not the index block */
	CHECK_EQ(ref_append(&ref, arena, &a, off(1, 10), big), SLOG_FULL);
	CHECK_EQ(a.write_pos, 5 * slog_record_span(big));
	CHECK_EQ(a.blocks_held, 6);
	CHECK_EQ(slog_arena_free_blocks(arena), 0);
	CHECK_UEQ(atomic_load(&a.pos_blocks.direct[0]), SLOG_NO_BLOCK);
	ref_publish(&ref, &a, off(1, 8), SLOG_SNAPSHOT_DONE);
	CHECK(SWEEP(&a, &ref) > 4);

	/* b gives its block back: the same append goes in, reusing the data block */
	slog_release(arena, &b);
	REQUIRE_EQ(ref_append(&ref, arena, &a, off(1, 10), big), SLOG_OK);
	CHECK_EQ(a.blocks_held, 7);
	CHECK(atomic_load(&a.pos_blocks.direct[0]) != SLOG_NO_BLOCK);
	CHECK_EQ(slog_arena_free_blocks(arena), 0);
	while (ref_append(&ref, arena, &a, off(1, 2 * (uint64_t) ref.nrecs), big) == SLOG_OK)
		;
	CHECK_EQ(ref.nrecs, 6);
	ref_publish(&ref, &a, ref.recs[ref.nrecs - 1].o, SLOG_SNAPSHOT_DONE);
	CHECK(SWEEP(&a, &ref) > 10);
	check_all_records(__FILE__, __LINE__, arena, &a, &ref);

	slog_release(arena, &a);
	CHECK_EQ(slog_arena_free_blocks(arena), 7);
	ref_free(&ref);
	free(mem);
}

/*
 * Past 16 MB of data (SLOG_MAP_DIRECT index blocks) the position index needs
 * its first directory block.  Records of exactly 1 MB fill 16 MB; the next
 * one needs 128 data blocks: the last 4 that the first data directory names,
 * a second data directory and 124 blocks under it; then the position
 * directory and an index block.  With fewer free blocks it fails at each of
 * those steps (with 4, for want of the data directory; with 5, for want of
 * the block under it) and leaves the log as it was; with all of them, the
 * records and small ones after them are found through the directory.
 */
#define BIG_SPAN		((uint64_t) 1 << 20)
#define BIG_LEN			((uint32_t) (BIG_SPAN - sizeof(SlogRecordHeader)))

static SlogResult
append_big(ShapeLogArena *arena, ShapeLog *log, char *buf, uint64_t id, LogOffset o)
{
	memcpy(buf, &id, sizeof(id));
	return slog_append(arena, log, o, SLOG_RECORD_CHANGE, buf, BIG_LEN);
}

TEST(position_index_directory)
{
	/* 16 MB: 2048 data blocks, 1 directory (4 are direct), 4 direct index blocks */
	const uint32_t base = 2048 + 1 + 4;
	const uint32_t extra[] = {0, 4, 5, 128, 129, 130, 131};
	size_t		size = slog_arena_size((uint64_t) (base + 200) * SLOG_BLOCK_SIZE);
	void	   *mem = aligned_alloc(SLOG_BLOCK_SIZE, size);
	char	   *buf = calloc(1, BIG_LEN);

	REQUIRE(mem != NULL);
	REQUIRE(buf != NULL);
	for (int e = 0; e < (int) (sizeof(extra) / sizeof(extra[0])); e++)
	{
		ShapeLogArena *arena;
		ShapeLog	log;
		SlogPublished pub;
		SlogRange	r;
		uint32_t	nblocks = base + extra[e];
		SlogResult	res;

		arena = slog_arena_init(mem, slog_arena_size((uint64_t) nblocks * SLOG_BLOCK_SIZE));
		REQUIRE_EQ(arena->nblocks, nblocks);
		slog_init(&log);
		for (uint64_t i = 0; i < 16; i++)
			REQUIRE_EQ(append_big(arena, &log, buf, i, off(1 + (int64_t) (i / 3), 0)), SLOG_OK);
		CHECK_EQ(log.blocks_held, base);
		CHECK_EQ(log.blocks_held, expected_blocks(log.write_pos, 0));
		CHECK_UEQ(atomic_load(&log.pos_blocks.direct[3]) == SLOG_NO_BLOCK, 0);
		CHECK_UEQ(atomic_load(&log.pos_blocks.indirect[0]), SLOG_NO_BLOCK);

		res = append_big(arena, &log, buf, 16, off(100, 0));
		CHECK_EQ(res, extra[e] < 131 ? SLOG_FULL : SLOG_OK);
		CHECK_EQ(log.write_pos, (res == SLOG_OK ? 17 : 16) * BIG_SPAN);
		CHECK_EQ(log.blocks_held, base + extra[e]);
		CHECK_EQ(slog_arena_free_blocks(arena), 0);
		CHECK_UEQ(atomic_load(&log.data.indirect[1]) == SLOG_NO_BLOCK, extra[e] < 5);
		CHECK_UEQ(atomic_load(&log.pos_blocks.indirect[0]) == SLOG_NO_BLOCK, extra[e] < 130);
		if (res == SLOG_OK)
		{
			CHECK_EQ(log.blocks_held, expected_blocks(log.write_pos, 0));

			/* again with room for small records after the big ones */
			RefLog		ref;
			uint64_t	x = 5;

			slog_release(arena, &log);
			arena = slog_arena_init(mem, size);
			slog_init(&log);
			ref_init(&ref);
			for (uint64_t i = 0; i < 17; i++)
				REQUIRE_EQ(ref_append(&ref, arena, &log, off(1 + (int64_t) (i / 3), 0), BIG_LEN),
						   SLOG_OK);
			for (int i = 0; i < 3000; i++)
				REQUIRE_EQ(ref_append(&ref, arena, &log, off(100 + i / 4, 0),
									  (uint32_t) (next_rand(&x) % 200)), SLOG_OK);
			CHECK(atomic_load(&log.pos_blocks.indirect[0]) != SLOG_NO_BLOCK);
			REQUIRE_EQ(ref_close(&ref, arena, &log, off(100 + 1000, 0)), SLOG_OK);
			for (int i = 0; i < 1000; i++)
				REQUIRE_EQ(ref_append(&ref, arena, &log, off(2000 + i / 2, 2),
									  (uint32_t) (next_rand(&x) % 200)), SLOG_OK);
			ref_publish(&ref, &log, ref.recs[ref.nrecs - 1].o, SLOG_SNAPSHOT_DONE);
			CHECK(SWEEP(&log, &ref) > 4000);
			slog_release(arena, &log);
			CHECK_EQ(slog_arena_free_blocks(arena), arena->nblocks);
			ref_free(&ref);
			continue;
		}

		/* what is there is intact and servable */
		slog_publish(&log, off(6, 0), SLOG_SNAPSHOT_DONE);
		slog_read_published(&log, &pub);
		CHECK_EQ(pub.data_end, 16 * BIG_SPAN);
		for (int64_t tx = 1; tx <= 6; tx++)
		{
			uint64_t	first = (uint64_t) tx * 3 < 16 ? (uint64_t) tx * 3 : 16;
			SlogRecordHeader hdr;
			uint64_t	id = UINT64_MAX;

			slog_locate(arena, &log, &pub, off(tx, 0), &r);
			if (r.start != first * BIG_SPAN)
			{
				FAIL("%u blocks free: locate(%lld_0) started at %llu, not record %llu",
					 extra[e], (long long) tx, (unsigned long long) r.start,
					 (unsigned long long) first);
				break;
			}
			if (first == 16)
				continue;
			slog_read_header(arena, &log, r.start, &hdr);
			slog_copy_out(arena, &log, r.start + sizeof(hdr), (char *) &id, sizeof(id));
			CHECK(hdr.len == BIG_LEN && hdr.tx == 1 + (int64_t) (first / 3) && id == first);
		}
		slog_release(arena, &log);
		CHECK_EQ(slog_arena_free_blocks(arena), nblocks);
	}
	free(buf);
	free(mem);
}

/*
 * Checks the bytes of the record at pos (payload seed id, len bytes) that
 * lie within 64 bytes of `edge`: a copy across the edge takes them from
 * two blocks.
 */
static bool
check_across(const char *file, int line, const ShapeLogArena *arena, const ShapeLog *log,
			 uint64_t pos, uint64_t id, uint32_t len, uint64_t edge)
{
	uint64_t	payload = pos + sizeof(SlogRecordHeader);
	uint64_t	lo = edge - 64 > payload ? edge - 64 : payload;
	uint64_t	hi = edge + 64 < payload + len ? edge + 64 : payload + len;
	char	   *want = malloc(len);
	char		got[128];
	bool		ok;

	fill_payload(want, len, id);
	slog_copy_out(arena, log, lo, got, hi - lo);
	ok = lo < edge && edge < hi && memcmp(got, want + (lo - payload), hi - lo) == 0;
	if (!ok)
		unit_fail(file, line, "record %llu at %llu: bytes [%llu, %llu) around %llu differ",
				  (unsigned long long) id, (unsigned long long) pos, (unsigned long long) lo,
				  (unsigned long long) hi, (unsigned long long) edge);
	free(want);
	return ok;
}

#define TIERS_MAX_RECORDS 128

/*
 * A log's data map in all three tiers.  Records of 3000 bytes fill the four
 * direct blocks, and the one across 32 kB takes the first directory;
 * records of 1 MB fill the four directories, and the one across
 * 64 MB + 32 kB takes the block of directories and a directory under it; a
 * few small records follow in that tier.  After each append the log holds
 * what expected_blocks says; every record reads back whole (the two across
 * the edges from both sides of them), every offset is located, and release
 * gives every block back.
 */
TEST(data_map_tiers)
{
	const uint64_t edge1 = SLOG_MAP_DIRECT * (uint64_t) SLOG_BLOCK_SIZE;
	const uint64_t edge2 = (SLOG_MAP_DIRECT + (uint64_t) SLOG_MAP_INDIRECT * SLOG_DIR_FANOUT) *
		SLOG_BLOCK_SIZE;
	const uint32_t small = 3000;
	size_t		size = slog_arena_size(66u << 20);
	void	   *mem = aligned_alloc(SLOG_BLOCK_SIZE, size);
	uint64_t	pos[TIERS_MAX_RECORDS + 1];
	uint32_t	len[TIERS_MAX_RECORDS];
	int			n = 0;
	int			across1 = -1;
	int			across2 = -1;
	int			tail_small = 0;
	ShapeLogArena *arena;
	ShapeLog	log;
	SlogPublished pub;
	SlogRange	r;

	CHECK_EQ(edge1, 32768);
	CHECK_EQ(edge2, (64u << 20) + 32768);
	REQUIRE(mem != NULL);
	arena = slog_arena_init(mem, size);
	slog_init(&log);
	while (tail_small < 3 && n < TIERS_MAX_RECORDS)
	{
		uint32_t	nblocks;

		len[n] = log.write_pos <= edge1 || log.write_pos > edge2 ? small : BIG_LEN;
		pos[n] = log.write_pos;
		REQUIRE_EQ(append_id(arena, &log, (uint64_t) n, len[n], SLOG_RECORD_CHANGE,
							 off(1 + n, 0)), SLOG_OK);
		if (pos[n] < edge1 && log.write_pos > edge1)
			across1 = n;
		if (pos[n] < edge2 && log.write_pos > edge2)
			across2 = n;
		if (pos[n] > edge2)
			tail_small++;
		n++;
		pos[n] = log.write_pos;

		if (log.blocks_held != expected_blocks(log.write_pos, 0))
		{
			FAIL("after record %d (%llu bytes): %u blocks held, expected %u", n - 1,
				 (unsigned long long) log.write_pos, log.blocks_held,
				 expected_blocks(log.write_pos, 0));
			break;
		}
		/* each tier's directories are there exactly when its blocks are */
		nblocks = (uint32_t) ((log.write_pos + SLOG_BLOCK_SIZE - 1) / SLOG_BLOCK_SIZE);
		for (int d = 0; d < SLOG_MAP_INDIRECT; d++)
			CHECK_UEQ(atomic_load(&log.data.indirect[d]) != SLOG_NO_BLOCK,
					  nblocks > SLOG_MAP_DIRECT + (uint32_t) d * SLOG_DIR_FANOUT);
		CHECK_UEQ(atomic_load(&log.data.double_indirect) != SLOG_NO_BLOCK,
				  log.write_pos > edge2);
		CHECK_EQ(slog_arena_free_blocks(arena), arena->nblocks - log.blocks_held);

		/* published at each edge: what is there is found */
		if (n - 1 == across1 || n - 1 == across2)
		{
			slog_publish(&log, off(n, 0), SLOG_SNAPSHOT_DONE);
			slog_read_published(&log, &pub);
			for (int i = 0; i < n; i++)
			{
				slog_locate(arena, &log, &pub, i == 0 ? LOG_OFFSET_BEFORE_ALL : off(i, 0), &r);
				CHECK(r.ready);
				CHECK_EQ(r.start, pos[i]);
				CHECK_EQ(r.end, log.write_pos);
			}
		}
	}
	REQUIRE(across1 >= 0 && across2 >= 0);
	CHECK_EQ(len[across1], small);
	CHECK_EQ(len[across2], BIG_LEN);
	CHECK_EQ(tail_small, 3);
	/*
	 * 14 small records and 64 of 1 MB: 8198 data blocks, 4 directories, the
	 * block of directories and 1 under it; 17 position blocks, 1 directory
	 */
	CHECK_EQ(log.write_pos, 14 * slog_record_span(small) + 64 * BIG_SPAN);
	CHECK_EQ(log.blocks_held, 8198 + 4 + 2 + 17 + 1);

	slog_publish(&log, off(n, 0), SLOG_SNAPSHOT_DONE);
	slog_read_published(&log, &pub);
	CHECK_EQ(pub.data_end, log.write_pos);
	for (int i = 0; i < n; i++)
		if (!CHECK_RECORD(arena, &log, pos[i], (uint64_t) i, len[i], SLOG_RECORD_CHANGE,
						  off(1 + i, 0)))
			break;
	check_across(__FILE__, __LINE__, arena, &log, pos[across1], (uint64_t) across1,
				 len[across1], edge1);
	check_across(__FILE__, __LINE__, arena, &log, pos[across2], (uint64_t) across2,
				 len[across2], edge2);
	/* the blocks on either side of each edge come from different tiers */
	CHECK_UEQ(map_block(arena, &log.data, edge1 / SLOG_BLOCK_SIZE - 1),
			  atomic_load(&log.data.direct[SLOG_MAP_DIRECT - 1]));
	CHECK_UEQ(map_block(arena, &log.data, edge1 / SLOG_BLOCK_SIZE),
			  ((const uint32_t *) ((const char *) arena + arena->blocks_offset +
								   (size_t) atomic_load(&log.data.indirect[0]) *
								   SLOG_BLOCK_SIZE))[0]);
	for (int i = 0; i <= n; i++)
	{
		LogOffset	after = i == 0 ? LOG_OFFSET_BEFORE_ALL : off(i, 0);

		slog_locate(arena, &log, &pub, after, &r);
		if (!r.ready || r.start != pos[i] || r.end != log.write_pos ||
			r.beyond_end || log_offset_cmp(r.chunk_end, off(n, 0)) != 0)
		{
			FAIL("locate after record %d: ready %d [%llu, %llu), expected [%llu, %llu)",
				 i - 1, r.ready, (unsigned long long) r.start, (unsigned long long) r.end,
				 (unsigned long long) pos[i], (unsigned long long) log.write_pos);
			break;
		}
	}
	slog_locate(arena, &log, &pub, off(n, 1), &r);
	CHECK(r.ready && r.beyond_end && r.start == log.write_pos);

	slog_release(arena, &log);
	CHECK_EQ(log.blocks_held, 0);
	CHECK_EQ(slog_arena_free_blocks(arena), arena->nblocks);
	free(mem);
}

/*
 * A data map grown one block at a time at a tier's edge.  A log fills
 * `fill` bytes (records of 1 MB, then of a block) in an arena that three
 * other logs of one block each leave empty; the next small record needs
 * `need` = 3 new blocks.  Each other log that gives its block back lets the
 * append take one more and fail with SLOG_FULL, the log unchanged and
 * servable, until the third: then it goes in, with the blocks the failed
 * appends attached.  The caller checks which blocks those are.
 */
typedef struct Grow
{
	void	   *mem;
	ShapeLogArena *arena;
	ShapeLog	log;
	ShapeLog	others[3];
	RefLog		ref;
	uint64_t	fill;
	uint32_t	base;			/* blocks of the filled log */
	int			given;			/* other logs released so far */
} Grow;

static bool
grow_init(Grow *g, uint64_t fill)
{
	const uint32_t block_len = SLOG_BLOCK_SIZE - sizeof(SlogRecordHeader);
	size_t		size;

	memset(g, 0, sizeof(*g));
	g->fill = fill;
	g->base = expected_blocks(fill, 0);
	size = slog_arena_size((uint64_t) (g->base + 3) * SLOG_BLOCK_SIZE);
	g->mem = aligned_alloc(SLOG_BLOCK_SIZE, size);
	if (g->mem == NULL)
		return false;
	g->arena = slog_arena_init(g->mem, size);
	slog_init(&g->log);
	ref_init(&g->ref);
	for (int i = 0; i < 3; i++)
	{
		slog_init(&g->others[i]);
		if (append_id(g->arena, &g->others[i], 900 + (uint64_t) i, 100, SLOG_RECORD_CHANGE,
					  off(1, 0)) != SLOG_OK)
			return false;
	}
	while (g->ref.write_pos < fill)
	{
		uint32_t	len = fill - g->ref.write_pos >= BIG_SPAN ? BIG_LEN : block_len;

		if (ref_append(&g->ref, g->arena, &g->log, off(1 + g->ref.nrecs, 0), len) != SLOG_OK)
			return false;
	}
	return g->arena->nblocks == g->base + 3 && g->log.write_pos == fill &&
		g->log.blocks_held == g->base && slog_arena_free_blocks(g->arena) == 0;
}

/*
 * The next small record; when it fails, checks that the log is as it was
 * and that what was published is served.
 */
static SlogResult
grow_try(const char *file, int line, Grow *g)
{
	ShapeLogArena *arena = g->arena;
	int			nrecs = g->ref.nrecs;
	SlogResult	res = ref_append(&g->ref, arena, &g->log, off(1 + nrecs, 0), 100);
	const RefRec *last;

	if (res == SLOG_OK)
		return res;
	if (res != SLOG_FULL || g->log.write_pos != g->fill || g->ref.nrecs != nrecs)
		unit_fail(file, line, "a failed append: %d, %llu bytes, %d records", (int) res,
				  (unsigned long long) g->log.write_pos, g->ref.nrecs);
	ref_publish(&g->ref, &g->log, off(nrecs, 0), SLOG_SNAPSHOT_DONE);
	if (sweep(file, line, arena, &g->log, &g->ref) < nrecs)
		unit_fail(file, line, "the sweep made too few queries");
	last = &g->ref.recs[nrecs - 1];
	check_record(file, line, arena, &g->log, last->pos, last->id, last->len,
				 SLOG_RECORD_CHANGE, last->o);
	return res;
}

#define GROW_TRY(g) grow_try(__FILE__, __LINE__, g)

static void
grow_give(Grow *g)
{
	slog_release(g->arena, &g->others[g->given++]);
}

static void
grow_free(Grow *g)
{
	slog_release(g->arena, &g->log);
	for (int i = g->given; i < 3; i++)
		slog_release(g->arena, &g->others[i]);
	ref_free(&g->ref);
	free(g->mem);
}

/* The grown log is servable whole; then every block goes back. */
static void
grow_serve_and_free(Grow *g)
{
	ref_publish(&g->ref, &g->log, g->ref.recs[g->ref.nrecs - 1].o, SLOG_SNAPSHOT_DONE);
	CHECK(sweep(__FILE__, __LINE__, g->arena, &g->log, &g->ref) > 4);
	check_all_records(__FILE__, __LINE__, g->arena, &g->log, &g->ref);
	slog_release(g->arena, &g->log);
	CHECK_EQ(slog_arena_free_blocks(g->arena), g->arena->nblocks);
	grow_free(g);
}

/*
 * At 32 kB: the first data directory, the data block it names, and the
 * first position block.  With one free block the append gets the
 * directory but not the data block under it.
 */
TEST(data_directory_exhaustion)
{
	Grow		g;
	ShapeLogArena *arena;
	uint32_t	dir;
	uint32_t	blk;

	REQUIRE(grow_init(&g, SLOG_MAP_DIRECT * (uint64_t) SLOG_BLOCK_SIZE));
	arena = g.arena;
	CHECK_EQ(g.base, 4);

	CHECK_EQ(GROW_TRY(&g), SLOG_FULL);
	CHECK_EQ(g.log.blocks_held, g.base);
	CHECK_UEQ(atomic_load(&g.log.data.indirect[0]), SLOG_NO_BLOCK);

	grow_give(&g);
	CHECK_EQ(slog_arena_free_blocks(arena), 1);
	CHECK_EQ(GROW_TRY(&g), SLOG_FULL);
	CHECK_EQ(g.log.blocks_held, g.base + 1);
	CHECK_EQ(slog_arena_free_blocks(arena), 0);
	dir = atomic_load(&g.log.data.indirect[0]);
	REQUIRE(dir < arena->nblocks);
	CHECK_UEQ(map_block(arena, &g.log.data, SLOG_MAP_DIRECT), SLOG_NO_BLOCK);

	grow_give(&g);
	CHECK_EQ(GROW_TRY(&g), SLOG_FULL);
	CHECK_EQ(g.log.blocks_held, g.base + 2);
	blk = map_block(arena, &g.log.data, SLOG_MAP_DIRECT);
	REQUIRE(blk < arena->nblocks);
	CHECK(blk != dir);
	CHECK_UEQ(atomic_load(&g.log.pos_blocks.direct[0]), SLOG_NO_BLOCK);

	grow_give(&g);
	REQUIRE_EQ(GROW_TRY(&g), SLOG_OK);
	CHECK_EQ(g.log.blocks_held, g.base + 3);
	CHECK_EQ(g.log.blocks_held, expected_blocks(g.log.write_pos, 0));
	CHECK_EQ(slog_arena_free_blocks(arena), 0);
	CHECK_UEQ(atomic_load(&g.log.data.indirect[0]), dir);
	CHECK_UEQ(map_block(arena, &g.log.data, SLOG_MAP_DIRECT), blk);
	CHECK(atomic_load(&g.log.pos_blocks.direct[0]) != SLOG_NO_BLOCK);
	grow_serve_and_free(&g);
}

/*
 * At 64 MB + 32 kB: the block of directories, the first directory under
 * it and the data block that one names (the position block is there).
 */
TEST(double_indirect_exhaustion)
{
	Grow		g;
	ShapeLogArena *arena;
	const char *blocks;
	uint32_t	top;
	uint32_t	dir;

	REQUIRE(grow_init(&g, (SLOG_MAP_DIRECT + (uint64_t) SLOG_MAP_INDIRECT * SLOG_DIR_FANOUT) *
					  SLOG_BLOCK_SIZE));
	arena = g.arena;
	blocks = (const char *) arena + arena->blocks_offset;
	CHECK_EQ(g.base, 8196 + 4 + 17 + 1);

	CHECK_EQ(GROW_TRY(&g), SLOG_FULL);
	CHECK_EQ(g.log.blocks_held, g.base);
	CHECK_UEQ(atomic_load(&g.log.data.double_indirect), SLOG_NO_BLOCK);

	grow_give(&g);
	CHECK_EQ(GROW_TRY(&g), SLOG_FULL);
	CHECK_EQ(g.log.blocks_held, g.base + 1);
	top = atomic_load(&g.log.data.double_indirect);
	REQUIRE(top < arena->nblocks);
	CHECK_UEQ(((const uint32_t *) (blocks + (size_t) top * SLOG_BLOCK_SIZE))[0], SLOG_NO_BLOCK);

	grow_give(&g);
	CHECK_EQ(GROW_TRY(&g), SLOG_FULL);
	CHECK_EQ(g.log.blocks_held, g.base + 2);
	dir = ((const uint32_t *) (blocks + (size_t) top * SLOG_BLOCK_SIZE))[0];
	REQUIRE(dir < arena->nblocks);
	CHECK_UEQ(((const uint32_t *) (blocks + (size_t) dir * SLOG_BLOCK_SIZE))[0], SLOG_NO_BLOCK);

	grow_give(&g);
	REQUIRE_EQ(GROW_TRY(&g), SLOG_OK);
	CHECK_EQ(g.log.blocks_held, g.base + 3);
	CHECK_EQ(g.log.blocks_held, expected_blocks(g.log.write_pos, 0));
	CHECK_EQ(slog_arena_free_blocks(arena), 0);
	CHECK_UEQ(atomic_load(&g.log.data.double_indirect), top);
	CHECK_UEQ(((const uint32_t *) (blocks + (size_t) top * SLOG_BLOCK_SIZE))[0], dir);
	CHECK(map_block(arena, &g.log.data, g.fill / SLOG_BLOCK_SIZE) < arena->nblocks);
	grow_serve_and_free(&g);
}

TEST(size_caps)
{
	void	   *mem;
	ShapeLogArena *arena = arena_new(8 * (size_t) SLOG_BLOCK_SIZE, &mem);
	ShapeLog	log;
	uint32_t	free_before;

	REQUIRE(arena != NULL);
	slog_init(&log);
	free_before = slog_arena_free_blocks(arena);

	/* past the per-log data cap: refused before taking any block */
	log.write_pos = SLOG_MAX_DATA_BYTES - 16;
	CHECK_EQ(append_id(arena, &log, 1, 100, SLOG_RECORD_CHANGE, off(1, 0)), SLOG_TOO_LARGE);
	CHECK_EQ(slog_arena_free_blocks(arena), free_before);
	log.write_pos = 0;

	log.chunk_count = SLOG_MAX_CHUNKS;
	CHECK_EQ(slog_close_chunk(arena, &log, off(1, 0)), SLOG_TOO_LARGE);
	CHECK_EQ(slog_arena_free_blocks(arena), free_before);
	log.chunk_count = 0;

	slog_release(arena, &log);
	CHECK_EQ(slog_arena_free_blocks(arena), free_before);
	free(mem);
}

TEST(logs_share_the_arena)
{
	void	   *mem;
	ShapeLogArena *arena = arena_new(100 * (size_t) SLOG_BLOCK_SIZE, &mem);
	ShapeLog	logs[4];
	uint32_t	nblocks;

	REQUIRE(arena != NULL);
	nblocks = arena->nblocks;
	for (int l = 0; l < 4; l++)
		slog_init(&logs[l]);
	/* interleaved appends: blocks of different logs interleave in the arena */
	for (int i = 0; i < 40; i++)
		for (int l = 0; l < 4; l++)
			REQUIRE_EQ(append_id(arena, &logs[l], (uint64_t) (l * 1000 + i), 4000 + (uint32_t) l,
								 SLOG_RECORD_CHANGE, off(1 + l, (uint64_t) i)), SLOG_OK);
	/* releasing one leaves the others intact */
	slog_release(arena, &logs[1]);
	for (int l = 0; l < 4; l++)
	{
		uint64_t	pos = 0;

		if (l == 1)
			continue;
		for (int i = 0; i < 40; i++)
		{
			if (!CHECK_RECORD(arena, &logs[l], pos, (uint64_t) (l * 1000 + i), 4000 + (uint32_t) l,
							  SLOG_RECORD_CHANGE, off(1 + l, (uint64_t) i)))
				break;
			pos += slog_record_span(4000 + (uint32_t) l);
		}
	}
	/* the freed blocks are reused by a log that grows now */
	for (int i = 0; i < 40; i++)
		REQUIRE_EQ(append_id(arena, &logs[1], (uint64_t) (5000 + i), 3999, SLOG_RECORD_CHANGE,
							 off(9, (uint64_t) i)), SLOG_OK);
	for (int l = 0; l < 4; l++)
		slog_release(arena, &logs[l]);
	CHECK_EQ(slog_arena_free_blocks(arena), nblocks);
	free(mem);
}

/* ------------------------------------------------------- concurrency */

/*
 * One writer appends records i = 0, 1, 2, ... at offsets (1 + i/4, 2*(i%4)),
 * closes a chunk every few records and publishes (sometimes mid-chunk, so
 * the open tail is served too).  Readers pick an offset, locate, and check
 * that the range starts exactly at the next record and that every record in
 * it is intact.  Published values must never go backwards.
 */
#define CONC_READERS 3

typedef struct ConcState
{
	ShapeLogArena *arena;
	ShapeLog	log;
	bool		trim;			/* the writer writes a file and trims */
	char		path[SLOG_FILE_PATH_LEN];
	_Atomic uint64_t trimmed_blocks;
	_Atomic bool stop;
	_Atomic uint64_t published_records;
	_Atomic uint64_t reads[CONC_READERS];
	_Atomic uint64_t records_checked;
} ConcState;

static LogOffset
conc_offset(uint64_t i)
{
	return off((int64_t) (1 + i / 4), 2 * (i % 4));
}

static uint64_t
conc_index(LogOffset o)
{
	return (uint64_t) (o.tx - 1) * 4 + o.op / 2;
}

static uint32_t
conc_len(uint64_t i)
{
	uint64_t	h = i * 0x2545f4914f6cdd1dull;

	/* mostly small records, now and then one that spans blocks */
	return (h >> 40) % 20 == 0 ? (uint32_t) ((h >> 20) % 40000) : (uint32_t) ((h >> 20) % 1500);
}

/*
 * What the trimming writer keeps: its file, how much of the log it holds,
 * and the blocks of the last trim, given back once the readers moved on.
 * Freed blocks are taken again first (the free list is a stack), so a
 * reader that copied from a block after it was given back would find the
 * bytes of a later record there.
 */
typedef struct ConcTrim
{
	int			fd;
	uint64_t	written;
	uint64_t	ticket;
	uint32_t	n;
	uint32_t	blocks[4096];
} ConcTrim;

/* Takes n blocks of the arena (those just given back) and fills them with other bytes. */
static void
conc_scribble(ConcState *s, uint32_t n)
{
	ShapeLog	scratch;

	slog_init(&scratch);
	for (uint32_t i = 0; i < n; i++)
		if (append_id(s->arena, &scratch, 4242, SLOG_BLOCK_SIZE - 64, SLOG_RECORD_CHANGE,
					  off(1, i)) != SLOG_OK)
			break;
	slog_release(s->arena, &scratch);
}

static bool
conc_trim(ConcState *s, ConcTrim *t, uint64_t closed_end)
{
	char		buf[65536];

	while (t->written < s->log.write_pos)
	{
		size_t		n = s->log.write_pos - t->written < sizeof(buf) ?
			(size_t) (s->log.write_pos - t->written) : sizeof(buf);

		if (!slog_copy_out(s->arena, &s->log, t->written, buf, n) ||
			pwrite(t->fd, buf, n, (off_t) t->written) != (ssize_t) n)
		{
			FAIL("the writer could not write its file");
			return false;
		}
		t->written += n;
	}
	if (t->n > 0)
	{
		if (!reader_epoch_passed(t->ticket))
			return true;		/* the previous trim's blocks are still held */
		slog_arena_give_back(s->arena, t->blocks, t->n);
		conc_scribble(s, t->n);
		t->n = 0;
	}
	/* the open chunk stays, and so does the last closed block or two */
	if (closed_end > 2 * SLOG_BLOCK_SIZE)
		t->n = slog_trim(&s->log, closed_end - 2 * SLOG_BLOCK_SIZE, s->arena, t->blocks,
						 (uint32_t) (sizeof(t->blocks) / sizeof(t->blocks[0])));
	if (t->n > 0)
	{
		t->ticket = reader_epoch_retire();
		atomic_fetch_add(&s->trimmed_blocks, t->n);
	}
	return true;
}

static void *
conc_writer(void *arg)
{
	ConcState  *s = arg;
	uint64_t	i = 0;
	double		until = unit_now() + 1.0;
	uint64_t	x = 12345;
	uint64_t	closed_end = 0;
	ConcTrim	trim = {.fd = -1};

	if (s->trim)
	{
		trim.fd = open(s->path, O_RDWR | O_CREAT | O_TRUNC, 0600);
		if (trim.fd < 0)
		{
			FAIL("could not create %s", s->path);
			atomic_store(&s->stop, true);
			return NULL;
		}
		slog_set_file(&s->log, s->path);
	}

	while (unit_now() < until)
	{
		int			n;

		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		n = 1 + (int) (x % 8);
		for (int k = 0; k < n; k++, i++)
		{
			if (append_id(s->arena, &s->log, i, conc_len(i), SLOG_RECORD_CHANGE,
						  conc_offset(i)) != SLOG_OK)
				goto out;
		}
		if (x % 5 != 0)
		{
			if (slog_close_chunk(s->arena, &s->log, conc_offset(i - 1)) != SLOG_OK)
				goto out;
			closed_end = s->log.write_pos;
		}
		slog_publish(&s->log, conc_offset(i - 1), SLOG_SNAPSHOT_DONE);
		atomic_store(&s->published_records, i);
		if (s->trim && !conc_trim(s, &trim, closed_end))
			goto out;
		usleep(300);
	}
out:
	atomic_store(&s->stop, true);
	if (s->trim)
	{
		while (trim.n > 0 && !reader_epoch_passed(trim.ticket))
			usleep(100);
		slog_arena_give_back(s->arena, trim.blocks, trim.n);
		if (trim.fd >= 0)
			close(trim.fd);
	}
	return NULL;
}

typedef struct ReaderArg
{
	ConcState  *s;
	int			id;
} ReaderArg;

static void *
conc_reader(void *arg)
{
	ReaderArg  *ra = arg;
	ConcState  *s = ra->s;
	SlogPublished prev = {0, 0, 0, {-1, 0}};
	uint64_t	x = 777 + (uint64_t) ra->id;
	char	   *buf = malloc(40000);
	char	   *want = malloc(40000);

	for (int pass = 0;; pass++)
	{
		SlogPublished pub;
		SlogRange	r;
		uint64_t	nrec;
		int64_t		pick;
		LogOffset	after;
		uint64_t	pos;
		uint64_t	expect;
		bool		stopping = atomic_load(&s->stop);
		bool		beyond;

		slog_read_published(&s->log, &pub);
		if (pub.data_end < prev.data_end || pub.chunk_count < prev.chunk_count ||
			log_offset_cmp(pub.last, prev.last) < 0 || (prev.flags & ~pub.flags) != 0)
		{
			FAIL("reader %d: published state went backwards", ra->id);
			break;
		}
		prev = pub;
		if (pub.chunk_count == 0 && pub.data_end == 0)
		{
			if (stopping)
				break;
			continue;
		}
		nrec = conc_index(pub.last) + 1;

		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		/* -1, a record's own offset, or an offset between records */
		pick = (int64_t) (x % (nrec + 1)) - 1;
		if (s->trim && (x >> 33) % 2 == 0 && pub.data_end > 0)
		{
			/* about where memory starts: the blocks being trimmed and given back */
			int64_t		at = (int64_t) ((double) nrec * (double) slog_mem_start(&s->log) /
										(double) pub.data_end);

			pick = at - 20 + (int64_t) ((x >> 8) % 60);
			if (pick < -1)
				pick = -1;
			if (pick > (int64_t) nrec - 1)
				pick = (int64_t) nrec - 1;
		}
		after = pick < 0 ? LOG_OFFSET_BEFORE_ALL : conc_offset((uint64_t) pick);
		if (pick >= 0 && (x >> 32) % 3 == 0)
			after.op++;			/* odd ops never name a record */
		beyond = log_offset_cmp(after, pub.last) > 0;
		slog_locate(s->arena, &s->log, &pub, after, &r);
		if (!r.ready)
		{
			FAIL("reader %d: not ready after %lld with the snapshot done", ra->id,
				 (long long) pick);
			break;
		}
		if (r.beyond_end != beyond || r.end > pub.data_end || r.start > r.end)
		{
			FAIL("reader %d: bad range [%llu, %llu) of %llu", ra->id,
				 (unsigned long long) r.start, (unsigned long long) r.end,
				 (unsigned long long) pub.data_end);
			break;
		}
		expect = (uint64_t) (pick + 1);
		if (expect < nrec && r.start == r.end)
		{
			FAIL("reader %d: empty range after record %lld of %llu", ra->id,
				 (long long) pick, (unsigned long long) nrec);
			break;
		}
		for (pos = r.start; pos < r.end; expect++)
		{
			SlogRecordHeader hdr;
			uint32_t	len = conc_len(expect);

			if (!slog_read_header(s->arena, &s->log, pos, &hdr))
			{
				FAIL("reader %d: record %llu at %llu could not be read", ra->id,
					 (unsigned long long) expect, (unsigned long long) pos);
				goto done;
			}
			if (hdr.len != len || hdr.tx != conc_offset(expect).tx ||
				hdr.op != conc_offset(expect).op || hdr.kind != SLOG_RECORD_CHANGE)
			{
				FAIL("reader %d: record %llu at %llu has a wrong header (%u %lld_%llu)",
					 ra->id, (unsigned long long) expect, (unsigned long long) pos,
					 hdr.len, (long long) hdr.tx, (unsigned long long) hdr.op);
				goto done;
			}
			if (!slog_copy_out(s->arena, &s->log, pos + sizeof(hdr), buf, len))
			{
				FAIL("reader %d: record %llu's payload could not be read", ra->id,
					 (unsigned long long) expect);
				goto done;
			}
			fill_payload(want, len, expect);
			if (memcmp(buf, want, len) != 0)
			{
				FAIL("reader %d: record %llu has a wrong payload", ra->id,
					 (unsigned long long) expect);
				goto done;
			}
			atomic_fetch_add(&s->records_checked, 1);
			pos += slog_record_span(len);
		}
		if (pos != r.end)
		{
			FAIL("reader %d: records overrun the range end", ra->id);
			break;
		}
		/* the response offset covers the last record sent */
		if (r.start < r.end && log_offset_cmp(r.chunk_end, conc_offset(expect - 1)) < 0)
		{
			FAIL("reader %d: chunk_end before the last record", ra->id);
			break;
		}
		atomic_fetch_add(&s->reads[ra->id], 1);
		if (stopping)
			break;
	}
done:
	free(buf);
	free(want);
	return NULL;
}

static void
concurrent_writer_and_readers(bool trim)
{
	void	   *mem;
	ConcState  *s = calloc(1, sizeof(ConcState));
	pthread_t	writer;
	pthread_t	readers[CONC_READERS];
	ReaderArg	args[CONC_READERS];
	uint32_t	nblocks;
	char		dir[] = "/tmp/test_shape_log.XXXXXX";

	REQUIRE(s != NULL);
	s->arena = arena_new(64u << 20, &mem);
	REQUIRE(s->arena != NULL);
	nblocks = s->arena->nblocks;
	slog_init(&s->log);
	s->trim = trim;
	if (trim)
	{
		REQUIRE(mkdtemp(dir) != NULL);
		snprintf(s->path, sizeof(s->path), "%s/log", dir);
	}
	for (int i = 0; i < CONC_READERS; i++)
	{
		args[i].s = s;
		args[i].id = i;
		pthread_create(&readers[i], NULL, conc_reader, &args[i]);
	}
	pthread_create(&writer, NULL, conc_writer, s);
	pthread_join(writer, NULL);
	for (int i = 0; i < CONC_READERS; i++)
		pthread_join(readers[i], NULL);

	CHECK(atomic_load(&s->published_records) > 200);
	for (int i = 0; i < CONC_READERS; i++)
		CHECK(atomic_load(&s->reads[i]) > 20);
	CHECK(atomic_load(&s->records_checked) > 1000);
	fprintf(stderr, "  # %llu records published, %llu/%llu/%llu reads, %llu records checked\n",
			(unsigned long long) atomic_load(&s->published_records),
			(unsigned long long) atomic_load(&s->reads[0]),
			(unsigned long long) atomic_load(&s->reads[1]),
			(unsigned long long) atomic_load(&s->reads[2]),
			(unsigned long long) atomic_load(&s->records_checked));
	if (trim)
	{
		fprintf(stderr, "  # %llu blocks trimmed, %llu bytes of %llu left in memory\n",
				(unsigned long long) atomic_load(&s->trimmed_blocks),
				(unsigned long long) (s->log.write_pos - slog_mem_start(&s->log)),
				(unsigned long long) s->log.write_pos);
		CHECK(atomic_load(&s->trimmed_blocks) > 100);
	}

	slog_release(s->arena, &s->log);
	CHECK_EQ(slog_arena_free_blocks(s->arena), nblocks);
	if (trim)
	{
		unlink(s->path);
		rmdir(dir);
	}
	free(mem);
	free(s);
}

TEST(concurrent_writer_and_readers)
{
	concurrent_writer_and_readers(false);
}

/*
 * The same while the writer writes the log to a file and takes the blocks
 * of its closed chunks back from memory: readers read those from the file
 * and never a block given back (reader_epochs.c).
 */
TEST(concurrent_writer_trimming_and_readers)
{
	concurrent_writer_and_readers(true);
}

/*
 * The same with chunks of thousands of records, so that readers find their
 * offsets through the position index, in closed chunks and in the open
 * tail, while the writer fills the strides and index blocks after them.
 * Offsets come in runs: group g (tx 1 + g) holds 8 records whose ops are
 * 2 * (j / w) for j = 0 .. 7, w = 1 + g % 8, so runs are 1 to 8 records
 * long.  Chunks close at group ends once they pass 256 kB.  Readers copy
 * each record out through a cursor, in pieces.  At the end, every offset
 * is checked against the reference the writer kept.
 */
#define RUNS_READERS 3

typedef struct RunsState
{
	ShapeLogArena *arena;
	ShapeLog	log;
	RefLog		ref;			/* the writer's; read after it is joined */
	_Atomic bool stop;
	_Atomic uint64_t published_records;
	_Atomic uint64_t reads[RUNS_READERS];
	_Atomic uint64_t records_checked;
	_Atomic uint64_t through_index;	/* ranges that start past a stride */
} RunsState;

static LogOffset
runs_offset(uint64_t i)
{
	uint64_t	g = i / 8;

	return off((int64_t) (1 + g), 2 * ((i % 8) / (1 + g % 8)));
}

/* The first record whose offset is past o. */
static uint64_t
runs_first_after(LogOffset o)
{
	uint64_t	i;

	if (o.tx < 1)
		return 0;
	for (i = (uint64_t) (o.tx - 1) * 8; log_offset_cmp(runs_offset(i), o) <= 0; i++)
		;
	return i;
}

static uint32_t
runs_len(uint64_t i)
{
	uint64_t	h = (i + 1) * 0x2545f4914f6cdd1dull;

	return (h >> 40) % 64 == 0 ? (uint32_t) ((h >> 20) % 40000) : (uint32_t) ((h >> 20) % 300);
}

static void *
runs_writer(void *arg)
{
	RunsState  *s = arg;
	uint64_t	i = 0;
	double		until = unit_now() + 1.0;
	uint64_t	x = 2024;

	while (unit_now() < until && s->ref.write_pos < (40u << 20))
	{
		int			n = 1 + (int) (next_rand(&x) % 64);

		for (int k = 0; k < n; k++, i++)
		{
			if (ref_append(&s->ref, s->arena, &s->log, runs_offset(i), runs_len(i)) != SLOG_OK)
				goto out;
			/* ref_append seeds payloads by record number from 1000 */
			if (i % 8 == 7 && s->ref.write_pos - s->ref.chunk_start >= 256 * 1024 &&
				ref_close(&s->ref, s->arena, &s->log, runs_offset(i)) != SLOG_OK)
				goto out;
		}
		ref_publish(&s->ref, &s->log, runs_offset(i - 1), SLOG_SNAPSHOT_DONE);
		atomic_store(&s->published_records, i);
		usleep(50);
	}
out:
	atomic_store(&s->stop, true);
	return NULL;
}

typedef struct RunsArg
{
	RunsState  *s;
	int			id;
} RunsArg;

static void *
runs_reader(void *arg)
{
	RunsArg    *ra = arg;
	RunsState  *s = ra->s;
	uint64_t	x = 4711 + (uint64_t) ra->id;
	char	   *want = malloc(40000);
	char	   *got = malloc(40000);

	for (;;)
	{
		SlogPublished pub;
		SlogRange	r;
		SlogCursor	cur;
		LogOffset	after;
		uint64_t	expect;
		uint64_t	count = atomic_load(&s->published_records);
		uint64_t	pick;
		bool		stopping = atomic_load(&s->stop);

		slog_read_published(&s->log, &pub);
		if (pub.data_end == 0)
		{
			if (stopping)
				break;
			continue;
		}
		/* a record's offset, one between records, -1, or one past the end */
		pick = next_rand(&x) % (count + 16);
		after = runs_offset(pick);
		if (next_rand(&x) % 3 == 0)
			after.op++;
		if (next_rand(&x) % 64 == 0)
			after = LOG_OFFSET_BEFORE_ALL;
		expect = runs_first_after(after);

		slog_locate(s->arena, &s->log, &pub, after, &r);
		if (!r.ready || r.start > r.end || r.end > pub.data_end ||
			r.beyond_end != (log_offset_cmp(after, pub.last) > 0) ||
			(r.start == r.end) != (log_offset_cmp(after, pub.last) >= 0))
		{
			FAIL("reader %d: locate after record %llu: ready %d [%llu, %llu) of %llu, beyond %d",
				 ra->id, (unsigned long long) pick, r.ready, (unsigned long long) r.start,
				 (unsigned long long) r.end, (unsigned long long) pub.data_end, r.beyond_end);
			break;
		}
		if (r.start % SLOG_POS_STRIDE != 0 && r.start / SLOG_POS_STRIDE > 0)
			atomic_fetch_add(&s->through_index, 1);

		/* the range holds records expect, expect + 1, ... intact (the first 200) */
		slog_cursor_init(s->arena, &s->log, &cur, r.start, r.end, after);
		for (int k = 0; k < 200 && slog_cursor_more(&cur); k++)
		{
			uint64_t	pos = cur.pos;
			uint32_t	len = runs_len(expect);
			SlogRecordHeader hdr;
			size_t		n = 0;

			slog_read_header(s->arena, &s->log, pos, &hdr);
			if (hdr.len != len || log_offset_cmp(off(hdr.tx, hdr.op), runs_offset(expect)) != 0)
			{
				FAIL("reader %d: after record %llu, record %llu at %llu has a wrong header "
					 "(%u %lld_%llu)", ra->id, (unsigned long long) pick,
					 (unsigned long long) expect, (unsigned long long) pos, hdr.len,
					 (long long) hdr.tx, (unsigned long long) hdr.op);
				goto done;
			}
			slog_cursor_begin(s->arena, &s->log, &cur);
			do
				n += slog_cursor_copy(s->arena, &s->log, &cur, got + n, 1000);
			while (n < len);
			fill_payload(want, len, expect + 1000);
			if (memcmp(got, want, len) != 0 || cur.in_record)
			{
				FAIL("reader %d: record %llu has a wrong payload", ra->id,
					 (unsigned long long) expect);
				goto done;
			}
			atomic_fetch_add(&s->records_checked, 1);
			expect++;
		}
		if (cur.pos > r.end || (!slog_cursor_more(&cur) && cur.pos != r.end))
		{
			FAIL("reader %d: records overrun the range end", ra->id);
			break;
		}
		if (r.start < r.end && log_offset_cmp(r.chunk_end, runs_offset(expect - 1)) < 0)
		{
			FAIL("reader %d: chunk_end before the last record", ra->id);
			break;
		}
		atomic_fetch_add(&s->reads[ra->id], 1);
		if (stopping)
			break;
	}
done:
	free(want);
	free(got);
	return NULL;
}

TEST(concurrent_locate_through_the_index)
{
	void	   *mem;
	RunsState  *s = calloc(1, sizeof(RunsState));
	pthread_t	writer;
	pthread_t	readers[RUNS_READERS];
	RunsArg		args[RUNS_READERS];
	uint32_t	nblocks;

	REQUIRE(s != NULL);
	s->arena = arena_new(48u << 20, &mem);
	REQUIRE(s->arena != NULL);
	nblocks = s->arena->nblocks;
	slog_init(&s->log);
	ref_init(&s->ref);
	for (int i = 0; i < RUNS_READERS; i++)
	{
		args[i].s = s;
		args[i].id = i;
		pthread_create(&readers[i], NULL, runs_reader, &args[i]);
	}
	pthread_create(&writer, NULL, runs_writer, s);
	pthread_join(writer, NULL);
	for (int i = 0; i < RUNS_READERS; i++)
		pthread_join(readers[i], NULL);

	CHECK(atomic_load(&s->published_records) > 2000);
	CHECK(s->ref.nchunks > 2);
	for (int i = 0; i < RUNS_READERS; i++)
		CHECK(atomic_load(&s->reads[i]) > 20);
	CHECK(atomic_load(&s->through_index) > 20);
	fprintf(stderr, "  # %llu records in %d chunks, %llu/%llu/%llu reads (%llu past a stride), "
			"%llu records checked\n",
			(unsigned long long) atomic_load(&s->published_records), s->ref.nchunks,
			(unsigned long long) atomic_load(&s->reads[0]),
			(unsigned long long) atomic_load(&s->reads[1]),
			(unsigned long long) atomic_load(&s->reads[2]),
			(unsigned long long) atomic_load(&s->through_index),
			(unsigned long long) atomic_load(&s->records_checked));

	/* every offset, now that the writer is done */
	{
		ShapeLogArena *arena = s->arena;

		CHECK(SWEEP(&s->log, &s->ref) > 4000);
	}
	slog_release(s->arena, &s->log);
	CHECK_EQ(slog_arena_free_blocks(s->arena), nblocks);
	ref_free(&s->ref);
	free(mem);
	free(s);
}

/*
 * Several threads allocate and release logs against one small arena at
 * once: the lock-free free list must never hand a block to two logs.
 */
#define POOL_THREADS 4

typedef struct PoolArg
{
	ShapeLogArena *arena;
	int			id;
	_Atomic uint64_t *rounds;
} PoolArg;

static void *
pool_worker(void *arg)
{
	PoolArg    *pa = arg;
	ShapeLog	log;
	double		until = unit_now() + 0.5;
	uint64_t	round = 0;

	slog_init(&log);
	while (unit_now() < until)
	{
		int			n = 0;
		uint64_t	pos = 0;

		/* grab what we can, up to five records of about a block each */
		for (; n < 5; n++)
		{
			uint64_t	id = (uint64_t) pa->id << 40 | round << 8 | (uint64_t) n;

			if (append_id(pa->arena, &log, id, 30000, SLOG_RECORD_CHANGE,
						  off(1, (uint64_t) n)) != SLOG_OK)
				break;
		}
		/* another thread writing into one of our blocks would show here */
		for (int i = 0; i < n; i++)
		{
			uint64_t	id = (uint64_t) pa->id << 40 | round << 8 | (uint64_t) i;

			if (!CHECK_RECORD(pa->arena, &log, pos, id, 30000, SLOG_RECORD_CHANGE,
							  off(1, (uint64_t) i)))
				break;
			pos += slog_record_span(30000);
		}
		slog_release(pa->arena, &log);
		round++;
	}
	atomic_fetch_add(pa->rounds, round);
	return NULL;
}

TEST(concurrent_block_allocation)
{
	void	   *mem;
	ShapeLogArena *arena = arena_new(17 * (size_t) SLOG_BLOCK_SIZE, &mem);
	pthread_t	th[POOL_THREADS];
	PoolArg		args[POOL_THREADS];
	_Atomic uint64_t rounds = 0;

	REQUIRE(arena != NULL);
	for (int i = 0; i < POOL_THREADS; i++)
	{
		args[i].arena = arena;
		args[i].id = i;
		args[i].rounds = &rounds;
		pthread_create(&th[i], NULL, pool_worker, &args[i]);
	}
	for (int i = 0; i < POOL_THREADS; i++)
		pthread_join(th[i], NULL);
	CHECK(atomic_load(&rounds) > 10);
	CHECK_EQ(slog_arena_free_blocks(arena), arena->nblocks);
	/* the free list holds each block exactly once */
	{
		uint32_t	count = 0;
		uint32_t	b = (uint32_t) atomic_load(&arena->free_head);
		char	   *seen = calloc(arena->nblocks, 1);

		while (b != SLOG_NO_BLOCK && count <= arena->nblocks)
		{
			REQUIRE(b < arena->nblocks);
			CHECK_EQ(seen[b], 0);
			seen[b] = 1;
			count++;
			b = atomic_load(&arena->next[b]);
		}
		CHECK_EQ(count, arena->nblocks);
		free(seen);
	}
	free(mem);
}

UNIT_MAIN()
