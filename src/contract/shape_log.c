/*-------------------------------------------------------------------------
 *
 * shape_log.c
 *		The per-shape log of pre-encoded messages, in shared memory.
 *
 * A shape's log is the byte sequence a client is sent, minus framing: each
 * record is one Electric JSON message, encoded once when it is appended and
 * copied out as is for every client that reads it.  Records carry their
 * offset in a small header, and closed chunks are listed in an index so that
 * a request for "everything after offset O" finds its chunk with a binary
 * search over chunks.
 *
 * Inside that chunk, or inside the open tail (which may hold 10 MB of
 * small rows, and which every live client locates again after each
 * change), the first record after O is found with a sparse position index:
 * entry k is the start of the record that holds log byte
 * k * SLOG_POS_STRIDE (4 kB).  Offsets never decrease along the log, so a
 * binary search over the entries whose byte lies inside the chunk finds
 * the last indexed record at or before O, and the scan that follows stops
 * at the next entry's record at the latest: it reads the headers of the
 * records that start within one stride (a few dozen typical rows),
 * whatever the chunk's size.  Entries are keyed by bytes, not by record
 * counts, so that both the scan and the memory (8 bytes per 4 kB, 0.2%)
 * are bounded whatever the record sizes; by the record holding the byte,
 * not the first one starting after it, so that which entries exist follows
 * from the published data end alone.  An entry holds only a position: the
 * offset stays in the record's header.  An append that cannot get an index
 * block fails with SLOG_FULL, as one that cannot get a data block does,
 * and leaves the log unchanged: no part of a log is ever unindexed.
 *
 * Memory comes from one arena of fixed-size blocks (SLOG_BLOCK_SIZE, 8 kB),
 * sized by shape_sync.log_memory and shared by all shapes.  A log's data,
 * its closed chunks and its position index are each a sequence of blocks
 * reached through a block map (SlogBlockMap): the first few block numbers
 * in the log itself, then directory blocks, then one block of directory
 * blocks, as a Unix inode names a file's blocks.  So a log position maps to
 * a block in O(1), a log never needs contiguous memory, and a small log
 * costs only what it holds: a shape of a few rows is one 8 kB data block,
 * with its first chunks and position entries kept inline in the ShapeLog
 * (10,000 such shapes fit in the default 128 MB).  Records may straddle
 * blocks; readers copy out piecewise.  Free blocks sit on a lock-free stack
 * whose links live outside the blocks, in arena->next[], so that a popped
 * block's contents never race with a stale reader of its link.
 *
 * A log that also lives in a file (log_files.c writes it behind memory)
 * can give the blocks of its oldest bytes back (slog_trim): its readers
 * then read those bytes from the file, and memory keeps the recent part
 * of the log, which live clients read, plus the indexes of the whole log
 * (about 0.3% of its bytes), so a shape may be larger than the arena.
 *
 * Nothing here calls PostgreSQL: the writer is a PostgreSQL process (the
 * snapshot worker, later the decoder), the readers are HTTP threads, and
 * standalone tests drive both.
 *
 * Notes on synchronization
 * ------------------------
 * - Exactly one writer per log at a time.  The writer-private fields
 *   (write_pos, chunk_start, the open chunk's counts, chunk_count, blocks_held,
 *   and the map, directory, chunk and index entries at or past what is
 *   published) are touched by that writer only.  A log changes writer only
 *   through the shape's state transitions (see shape_table.c), which are
 *   release/acquire pairs.
 * - The published state (pub_*) is guarded by the seqlock `seq`: the writer
 *   makes it odd, stores the fields, and makes it even with a release store;
 *   a reader retries until it sees the same even value before and after.
 * - Record bytes, block map entries and closed chunks below the published
 *   bounds are written before the publishing release store and never again,
 *   so a reader that acquired the published state may read them without a
 *   lock.  The maps' inline entries are atomics only because readers load
 *   them while the writer fills later entries.
 * - Position index entries (pos_inline[] and index blocks) and the block
 *   numbers that reach them (pos_blocks and its directories) are
 *   written by the writer only, in slog_append: entry k when the record
 *   holding byte k * SLOG_POS_STRIDE is appended, after every block it
 *   needs is attached and never again until slog_release.  The publish
 *   that makes data_end exceed k * SLOG_POS_STRIDE comes after, so a reader
 *   reads entry k only when k * SLOG_POS_STRIDE lies below the end of a
 *   published range, and then without a lock.  A failed append writes no
 *   entry; index blocks it attached stay attached, for the next append or
 *   for slog_release, as data blocks do.
 * - Blocks return to the arena through slog_release, which the caller
 *   runs when no reader can still hold the log (the pin protocol of
 *   shape_table.c guarantees it), and, for the oldest data blocks of a log
 *   that lives on disk too, through slog_trim: it moves mem_start past
 *   them (seq_cst), and the caller gives them back only once every reader
 *   that could have loaded the previous mem_start has left its epoch
 *   section (reader_epochs.c).  Every reader function is one section: it
 *   loads mem_start once, reads blocks at or past it from memory and
 *   blocks below it from the log's file (file_path, written before the
 *   first trim), whole blocks at a time.  Chunk and position index blocks
 *   and the block maps stay in memory for the log's life.
 * - The free stack head packs an ABA tag with the block number and changes
 *   by CAS; pops acquire, pushes release, so a block's previous life
 *   happens-before its next one.
 *
 * IDENTIFICATION
 *	  src/contract/shape_log.c
 *
 *-------------------------------------------------------------------------
 */
#include "shape_log_internal.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>


#ifdef POSTGRES_H
#error "shape_log.c is shared by threads and must not include postgres.h"
#endif


/* the position index reaches every entry a log of the largest size needs */
_Static_assert(SLOG_MAX_DATA_BYTES / SLOG_POS_STRIDE / SLOG_POS_PER_BLOCK + 1 <=
			   SLOG_MAP_CAPACITY, "position index too small");
_Static_assert(SLOG_MAX_DATA_BYTES / SLOG_BLOCK_SIZE <= SLOG_MAP_CAPACITY,
			   "data map too small");
_Static_assert((SLOG_MAX_CHUNKS - SLOG_CHUNKS_INLINE) / SLOG_CHUNKS_PER_BLOCK + 1 <=
			   SLOG_MAP_CAPACITY, "chunk index too small");
/* a chunk's record counts cannot overflow: a record takes 24 bytes at least */
_Static_assert(SLOG_MAX_DATA_BYTES / sizeof(SlogRecordHeader) <= UINT32_MAX,
			   "chunk counts too small");
_Static_assert(SLOG_BLOCK_SIZE % SLOG_POS_STRIDE == 0,
			   "strides must tile a data block");

/* ---------------------------------------------------------------- arena */

size_t
slog_arena_size(uint64_t bytes)
{
	uint64_t	nblocks = bytes / SLOG_BLOCK_SIZE;
	size_t		header = sizeof(ShapeLogArena) + nblocks * sizeof(_Atomic uint32_t);

	header = (header + SLOG_BLOCK_SIZE - 1) & ~((size_t) SLOG_BLOCK_SIZE - 1);
	return header + nblocks * SLOG_BLOCK_SIZE;
}

/*
 * Lays out an arena in `mem` (size from slog_arena_size) with every block
 * free.  Block 0 starts at a multiple of SLOG_BLOCK_SIZE from `mem`.
 */
ShapeLogArena *
slog_arena_init(void *mem, size_t size)
{
	ShapeLogArena *arena = mem;
	uint64_t	nblocks = 0;
	size_t		header;

	/* find the largest block count whose header and blocks fit */
	nblocks = size / SLOG_BLOCK_SIZE;
	for (;;)
	{
		header = sizeof(ShapeLogArena) + nblocks * sizeof(_Atomic uint32_t);
		header = (header + SLOG_BLOCK_SIZE - 1) & ~((size_t) SLOG_BLOCK_SIZE - 1);
		if (nblocks == 0 || header + nblocks * SLOG_BLOCK_SIZE <= size)
			break;
		nblocks--;
	}
	if (nblocks >= SLOG_NO_BLOCK)
		nblocks = SLOG_NO_BLOCK - 1;

	arena->nblocks = (uint32_t) nblocks;
	arena->pad = 0;
	arena->blocks_offset = header;
	for (uint32_t i = 0; i < arena->nblocks; i++)
		atomic_init(&arena->next[i], i + 1 < arena->nblocks ? i + 1 : SLOG_NO_BLOCK);
	atomic_init(&arena->free_head, arena->nblocks > 0 ? 0 : SLOG_NO_BLOCK);
	atomic_init(&arena->free_count, arena->nblocks);
	return arena;
}

uint32_t
slog_arena_free_blocks(const ShapeLogArena *arena)
{
	return atomic_load_explicit(&arena->free_count, relaxed);
}

/*
 * Makes blocks [first, first + count) resident in memory without changing
 * a byte of them, so it is safe while writers fill those blocks: the kernel
 * allocates and zeroes a page of shared memory when it is first touched,
 * and a log that grows into fresh pages pays that on its hot path (several
 * times the cost of writing the bytes, under a hypervisor).  Uses
 * MADV_POPULATE_WRITE (Linux 5.14); where the kernel lacks it, reads one
 * byte of each page, which allocates shared memory's pages too.  Only whole
 * pages of the arena's blocks are touched.  Returns the number of blocks
 * covered (count, clipped to the arena), or 0 when the kernel refused (out
 * of memory, say): the caller stops, and blocks are allocated when first
 * written, as without a prefault.
 */
uint32_t
slog_arena_prefault(ShapeLogArena *arena, uint32_t first, uint32_t count)
{
	uintptr_t	page_mask = (uintptr_t) sysconf(_SC_PAGESIZE) - 1;
	uintptr_t	start;
	uintptr_t	end;
	uintptr_t	arena_end = (uintptr_t) slog_block(arena, arena->nblocks) & ~page_mask;

	if (first >= arena->nblocks)
		return 0;
	if (count > arena->nblocks - first)
		count = arena->nblocks - first;
	start = ((uintptr_t) slog_block(arena, first) + page_mask) & ~page_mask;
	end = ((uintptr_t) slog_block(arena, first + count) + page_mask) & ~page_mask;
	if (end > arena_end)
		end = arena_end;
	if (end <= start)
		return count;
#ifdef MADV_POPULATE_WRITE
	if (madvise((void *) start, end - start, MADV_POPULATE_WRITE) == 0)
		return count;
	if (errno != EINVAL)
		return 0;
#endif
	for (uintptr_t p = start; p < end; p += page_mask + 1)
		(void) *(volatile const char *) p;
	return count;
}

static uint32_t
slog_block_pop(ShapeLogArena *arena)
{
	uint64_t	head = atomic_load_explicit(&arena->free_head, acquire);

	for (;;)
	{
		uint32_t	block = (uint32_t) head;
		uint64_t	next;

		if (block == SLOG_NO_BLOCK)
			return SLOG_NO_BLOCK;
		next = ((head >> 32) + 1) << 32 |
			atomic_load_explicit(&arena->next[block], relaxed);
		if (atomic_compare_exchange_weak_explicit(&arena->free_head, &head, next,
												  memory_order_acq_rel, acquire))
		{
			atomic_fetch_sub_explicit(&arena->free_count, 1, relaxed);
			return block;
		}
	}
}

static void
slog_block_push(ShapeLogArena *arena, uint32_t block)
{
	uint64_t	head = atomic_load_explicit(&arena->free_head, relaxed);
	uint64_t	next;

	do
	{
		atomic_store_explicit(&arena->next[block], (uint32_t) head, relaxed);
		next = ((head >> 32) + 1) << 32 | block;
	} while (!atomic_compare_exchange_weak_explicit(&arena->free_head, &head, next,
													release, relaxed));
	atomic_fetch_add_explicit(&arena->free_count, 1, relaxed);
}

/* ----------------------------------------------------------- block maps */

static void
slog_map_init(SlogBlockMap *map)
{
	for (int i = 0; i < SLOG_MAP_DIRECT; i++)
		atomic_init(&map->direct[i], SLOG_NO_BLOCK);
	for (int i = 0; i < SLOG_MAP_INDIRECT; i++)
		atomic_init(&map->indirect[i], SLOG_NO_BLOCK);
	atomic_init(&map->double_indirect, SLOG_NO_BLOCK);
}

/*
 * Unnames the nth block of a map (attached), so that releasing the map
 * leaves it alone.  Only when no reader can use the map (slog_release).
 */
static void
slog_map_forget(const ShapeLogArena *arena, SlogBlockMap *map, uint64_t nth)
{
	uint32_t	dir;

	if (nth < SLOG_MAP_DIRECT)
	{
		atomic_store_explicit(&map->direct[nth], SLOG_NO_BLOCK, relaxed);
		return;
	}
	nth -= SLOG_MAP_DIRECT;
	if (nth < (uint64_t) SLOG_MAP_INDIRECT * SLOG_DIR_FANOUT)
		dir = atomic_load_explicit(&map->indirect[nth / SLOG_DIR_FANOUT], relaxed);
	else
	{
		nth -= (uint64_t) SLOG_MAP_INDIRECT * SLOG_DIR_FANOUT;
		dir = ((const uint32_t *) slog_block(arena, atomic_load_explicit(&map->double_indirect,
																		   relaxed)))
			[nth / SLOG_DIR_FANOUT];
	}
	((uint32_t *) slog_block(arena, dir))[nth % SLOG_DIR_FANOUT] = SLOG_NO_BLOCK;
}

/* Takes a block for the log; a directory block starts with no entries. */
static uint32_t
slog_take(ShapeLogArena *arena, ShapeLog *log, bool directory)
{
	uint32_t	block = slog_block_pop(arena);

	if (block == SLOG_NO_BLOCK)
		return SLOG_NO_BLOCK;
	log->blocks_held++;

	/*
	 * Read before the first write: a read fault on shared memory maps the
	 * resident pages around it too (the kernel's fault-around, 64 kB), where
	 * a write fault maps one page, so a writer process that has not touched
	 * these blocks yet (a snapshot worker) takes a fault per few blocks, not
	 * two per block.
	 */
	(void) *(volatile const char *) slog_block(arena, block);
	if (directory)
	{
		uint32_t   *entries = (uint32_t *) slog_block(arena, block);

		for (uint32_t i = 0; i < SLOG_DIR_FANOUT; i++)
			entries[i] = SLOG_NO_BLOCK;
	}
	return block;
}

/* The directory entry `i` of an atomic slot, attaching a directory if needed. */
static uint32_t *
slog_dir_entry(ShapeLogArena *arena, ShapeLog *log, _Atomic uint32_t *slot, uint64_t i)
{
	uint32_t	dir = atomic_load_explicit(slot, relaxed);

	if (dir == SLOG_NO_BLOCK)
	{
		dir = slog_take(arena, log, true);
		if (dir == SLOG_NO_BLOCK)
			return NULL;
		atomic_store_explicit(slot, dir, relaxed);
	}
	return (uint32_t *) slog_block(arena, dir) + i;
}

/*
 * Makes sure the map names an nth block, taking it (and the directories on
 * the way) from the arena if not; a block left attached by an append that
 * failed is kept.  Writer only.
 */
static SlogResult
slog_map_attach(ShapeLogArena *arena, ShapeLog *log, SlogBlockMap *map, uint64_t nth)
{
	uint32_t   *entry;
	uint32_t	block;

	if (nth < SLOG_MAP_DIRECT)
	{
		if (atomic_load_explicit(&map->direct[nth], relaxed) != SLOG_NO_BLOCK)
			return SLOG_OK;
		block = slog_take(arena, log, false);
		if (block == SLOG_NO_BLOCK)
			return SLOG_FULL;
		atomic_store_explicit(&map->direct[nth], block, relaxed);
		return SLOG_OK;
	}
	nth -= SLOG_MAP_DIRECT;
	if (nth < (uint64_t) SLOG_MAP_INDIRECT * SLOG_DIR_FANOUT)
		entry = slog_dir_entry(arena, log, &map->indirect[nth / SLOG_DIR_FANOUT],
							   nth % SLOG_DIR_FANOUT);
	else
	{
		uint32_t   *top_entry;

		nth -= (uint64_t) SLOG_MAP_INDIRECT * SLOG_DIR_FANOUT;
		if (nth >= (uint64_t) SLOG_DIR_FANOUT * SLOG_DIR_FANOUT)
			return SLOG_TOO_LARGE;
		top_entry = slog_dir_entry(arena, log, &map->double_indirect, nth / SLOG_DIR_FANOUT);
		if (top_entry == NULL)
			return SLOG_FULL;
		if (*top_entry == SLOG_NO_BLOCK)
		{
			uint32_t	dir = slog_take(arena, log, true);

			if (dir == SLOG_NO_BLOCK)
				return SLOG_FULL;
			*top_entry = dir;
		}
		entry = (uint32_t *) slog_block(arena, *top_entry) + nth % SLOG_DIR_FANOUT;
	}
	if (entry == NULL)
		return SLOG_FULL;
	if (*entry != SLOG_NO_BLOCK)
		return SLOG_OK;
	block = slog_take(arena, log, false);
	if (block == SLOG_NO_BLOCK)
		return SLOG_FULL;
	*entry = block;
	return SLOG_OK;
}

/* Pushes a directory's blocks and the directory itself back to the arena. */
static void
slog_dir_release(ShapeLogArena *arena, uint32_t dir, int depth)
{
	const uint32_t *entries = (const uint32_t *) slog_block(arena, dir);

	for (uint32_t i = 0; i < SLOG_DIR_FANOUT; i++)
	{
		if (entries[i] == SLOG_NO_BLOCK)
			continue;
		if (depth > 1)
			slog_dir_release(arena, entries[i], depth - 1);
		else
			slog_block_push(arena, entries[i]);
	}
	slog_block_push(arena, dir);
}

static void
slog_map_release(ShapeLogArena *arena, SlogBlockMap *map)
{
	for (int i = 0; i < SLOG_MAP_DIRECT; i++)
	{
		uint32_t	block = atomic_load_explicit(&map->direct[i], relaxed);

		if (block != SLOG_NO_BLOCK)
			slog_block_push(arena, block);
	}
	for (int i = 0; i < SLOG_MAP_INDIRECT; i++)
	{
		uint32_t	dir = atomic_load_explicit(&map->indirect[i], relaxed);

		if (dir != SLOG_NO_BLOCK)
			slog_dir_release(arena, dir, 1);
	}
	if (atomic_load_explicit(&map->double_indirect, relaxed) != SLOG_NO_BLOCK)
		slog_dir_release(arena, atomic_load_explicit(&map->double_indirect, relaxed), 2);
	slog_map_init(map);
}

/* --------------------------------------------------------------- writer */

void
slog_init(ShapeLog *log)
{
	atomic_init(&log->seq, 0);
	atomic_init(&log->pub_data_end, 0);
	atomic_init(&log->pub_chunk_count, 0);
	atomic_init(&log->pub_flags, 0);
	atomic_init(&log->pub_last_tx, LOG_OFFSET_BEFORE_ALL.tx);
	atomic_init(&log->pub_last_op, LOG_OFFSET_BEFORE_ALL.op);
	atomic_init(&log->mem_start, 0);
	log->file_path[0] = '\0';
	slog_map_init(&log->data);
	slog_map_init(&log->chunk_blocks);
	slog_map_init(&log->pos_blocks);
	memset(log->chunks_inline, 0, sizeof(log->chunks_inline));
	memset(log->pos_inline, 0, sizeof(log->pos_inline));
	log->write_pos = 0;
	log->chunk_start = 0;
	log->open_chunk_bytes = 0;
	log->open_chunk_records = 0;
	log->open_chunk_tombstones = 0;
	log->chunk_count = 0;
	log->blocks_held = 0;
}

/* The data block holding `pos`, or SLOG_NO_BLOCK if none was attached. */
static inline uint32_t
slog_data_block(const ShapeLogArena *arena, const ShapeLog *log, uint64_t pos)
{
	return slog_map_get(arena, &log->data, pos / SLOG_BLOCK_SIZE);
}

/*
 * Makes sure a data block is attached for every position below `end`.
 * Blocks holding bytes below write_pos are attached already; past it, the
 * map may still hold a block from an append that failed, which is reused.
 */
static SlogResult
slog_reserve(ShapeLogArena *arena, ShapeLog *log, uint64_t end)
{
	uint64_t	need = (end + SLOG_BLOCK_SIZE - 1) / SLOG_BLOCK_SIZE;

	if (end > SLOG_MAX_DATA_BYTES)
		return SLOG_TOO_LARGE;
	for (uint64_t nth = log->write_pos / SLOG_BLOCK_SIZE; nth < need; nth++)
	{
		SlogResult	res = slog_map_attach(arena, log, &log->data, nth);

		if (res != SLOG_OK)
			return res;
	}
	return SLOG_OK;
}

/* Copies n bytes into the log at pos; the blocks must be reserved. */
static void
slog_copy_in(ShapeLogArena *arena, ShapeLog *log, uint64_t pos,
			 const char *src, size_t n)
{
	while (n > 0)
	{
		size_t		in_block = SLOG_BLOCK_SIZE - pos % SLOG_BLOCK_SIZE;
		size_t		step = n < in_block ? n : in_block;

		memcpy(slog_block(arena, slog_data_block(arena, log, pos)) +
			   pos % SLOG_BLOCK_SIZE, src, step);
		pos += step;
		src += step;
		n -= step;
	}
}

/* Sets entry k (k >= 1); its index block must be attached. */
static void
slog_pos_set(ShapeLogArena *arena, ShapeLog *log, uint64_t k, uint64_t pos)
{
	if (k <= SLOG_POS_INLINE)
		log->pos_inline[k - 1] = pos;
	else
		((uint64_t *) slog_block(arena, slog_map_get(arena, &log->pos_blocks,
													 k / SLOG_POS_PER_BLOCK)))
			[k % SLOG_POS_PER_BLOCK] = pos;
}

/*
 * Makes sure an index block is attached for every position entry in
 * [first, last].  As in slog_reserve, a block attached by an append that
 * failed is reused.
 */
static SlogResult
slog_pos_reserve(ShapeLogArena *arena, ShapeLog *log, uint64_t first, uint64_t last)
{
	if (first <= SLOG_POS_INLINE)
		first = SLOG_POS_INLINE + 1;
	for (uint64_t nth = first / SLOG_POS_PER_BLOCK;
		 first <= last && nth <= last / SLOG_POS_PER_BLOCK; nth++)
	{
		SlogResult	res = slog_map_attach(arena, log, &log->pos_blocks, nth);

		if (res != SLOG_OK)
			return res;
	}
	return SLOG_OK;
}

/*
 * Appends one record.  Its offset must not be below the previous record's
 * (slog_locate's searches rely on it).  Nothing becomes visible to readers
 * until slog_publish.  On failure the log is unchanged (blocks it attached
 * stay attached and are reused by the next append, or freed with the log).
 */
SlogResult
slog_append(ShapeLogArena *arena, ShapeLog *log, LogOffset offset,
			uint32_t kind, const char *payload, uint32_t len)
{
	SlogRecordHeader hdr;
	uint64_t	span = slog_record_span(len);
	uint64_t	pos = log->write_pos;
	/* the position entries whose byte this record holds, from 1 */
	uint64_t	first = pos == 0 ? 1 : (pos + SLOG_POS_STRIDE - 1) / SLOG_POS_STRIDE;
	uint64_t	last = (pos + span - 1) / SLOG_POS_STRIDE;
	SlogResult	res;

	res = slog_reserve(arena, log, pos + span);
	if (res != SLOG_OK)
		return res;
	res = slog_pos_reserve(arena, log, first, last);
	if (res != SLOG_OK)
		return res;
	for (uint64_t k = first; k <= last; k++)
		slog_pos_set(arena, log, k, pos);
	hdr.len = len;
	hdr.kind = kind;
	hdr.tx = offset.tx;
	hdr.op = offset.op;
	slog_copy_in(arena, log, log->write_pos, (const char *) &hdr, sizeof(hdr));
	slog_copy_in(arena, log, log->write_pos + sizeof(hdr), payload, len);
	log->write_pos += span;
	log->open_chunk_bytes += len;
	log->open_chunk_records++;
	if (kind == SLOG_RECORD_TOMBSTONE)
		log->open_chunk_tombstones++;
	return SLOG_OK;
}

/* A copy of closed chunk `i` (below the published chunk count). */
void
slog_chunk_read(const ShapeLogArena *arena, const ShapeLog *log, uint32_t i, SlogChunk *out)
{
	*out = *slog_chunk_at(arena, log, i);
}

/* Closes the open chunk at the current write position, ending at `end`. */
SlogResult
slog_close_chunk(ShapeLogArena *arena, ShapeLog *log, LogOffset end)
{
	uint32_t	i = log->chunk_count;
	SlogChunk  *chunk;

	if (i >= SLOG_MAX_CHUNKS)
		return SLOG_TOO_LARGE;
	if (i >= SLOG_CHUNKS_INLINE && (i - SLOG_CHUNKS_INLINE) % SLOG_CHUNKS_PER_BLOCK == 0)
	{
		SlogResult	res = slog_map_attach(arena, log, &log->chunk_blocks,
										  (i - SLOG_CHUNKS_INLINE) / SLOG_CHUNKS_PER_BLOCK);

		if (res != SLOG_OK)
			return res;
	}
	chunk = slog_chunk_at(arena, log, i);
	chunk->start_pos = log->chunk_start;
	chunk->end_pos = log->write_pos;
	chunk->end_tx = end.tx;
	chunk->end_op = end.op;
	chunk->message_bytes = log->open_chunk_bytes -
		log->open_chunk_tombstones * SLOG_TOMBSTONE_PREFIX;
	chunk->messages = log->open_chunk_records;
	chunk->tombstones = log->open_chunk_tombstones;
	log->chunk_count = i + 1;
	log->chunk_start = log->write_pos;
	log->open_chunk_bytes = 0;
	log->open_chunk_records = 0;
	log->open_chunk_tombstones = 0;
	return SLOG_OK;
}

/* Makes every appended record and closed chunk visible to readers. */
void
slog_publish(ShapeLog *log, LogOffset last, uint32_t flags)
{
	uint64_t	seq = atomic_load_explicit(&log->seq, relaxed);

	atomic_store_explicit(&log->seq, seq + 1, relaxed);
	atomic_thread_fence(release);
	atomic_store_explicit(&log->pub_data_end, log->write_pos, relaxed);
	atomic_store_explicit(&log->pub_chunk_count, log->chunk_count, relaxed);
	atomic_store_explicit(&log->pub_flags, flags, relaxed);
	atomic_store_explicit(&log->pub_last_tx, last.tx, relaxed);
	atomic_store_explicit(&log->pub_last_op, last.op, relaxed);
	atomic_store_explicit(&log->seq, seq + 2, release);
}

/*
 * Returns every block of the log to the arena and resets it.  The caller
 * guarantees that no writer or reader uses the log any more.
 */
void
slog_release(ShapeLogArena *arena, ShapeLog *log)
{
	uint64_t	trimmed = atomic_load_explicit(&log->mem_start, relaxed) / SLOG_BLOCK_SIZE;

	/* blocks slog_trim retired go back through slog_arena_give_back */
	for (uint64_t nth = 0; nth < trimmed; nth++)
		slog_map_forget(arena, &log->data, nth);
	slog_map_release(arena, &log->data);
	slog_map_release(arena, &log->chunk_blocks);
	slog_map_release(arena, &log->pos_blocks);
	slog_init(log);
}

/* ------------------------------------------------------ memory to disk */

/*
 * Names the file that holds the log's bytes, relative to the working
 * directory of the processes that read the log.  Writer, before the first
 * slog_trim; the name stays until slog_init.  False when the name does not
 * fit, or another one is in use already (the log is trimmed).
 */
bool
slog_set_file(ShapeLog *log, const char *path)
{
	size_t		len = strlen(path);

	if (atomic_load_explicit(&log->mem_start, relaxed) != 0)
		return strcmp(log->file_path, path) == 0;
	if (len >= sizeof(log->file_path))
		return false;
	memcpy(log->file_path, path, len + 1);
	return true;
}

/* The first byte of the log still in memory (0: all of it). */
uint64_t
slog_mem_start(const ShapeLog *log)
{
	return atomic_load(&log->mem_start);
}

/*
 * Takes from memory the data blocks of the log that lie wholly below
 * `upto` (clipped to what the writer appended), max_blocks at most: their
 * numbers go to `blocks`, and readers read those bytes from the file named
 * by slog_set_file from now on, which must hold them.  Returns how many.
 * The caller gives the blocks back to the arena once every reader that
 * could still copy from them has left (reader_epoch_retire, then
 * reader_epoch_passed, then slog_arena_give_back).  Writer only.
 */
uint32_t
slog_trim(ShapeLog *log, uint64_t upto, const ShapeLogArena *arena, uint32_t *blocks,
		  uint32_t max_blocks)
{
	uint64_t	from = atomic_load_explicit(&log->mem_start, relaxed) / SLOG_BLOCK_SIZE;
	uint64_t	to;
	uint32_t	n = 0;

	if (log->file_path[0] == '\0')
		return 0;
	if (upto > log->write_pos)
		upto = log->write_pos;
	to = upto / SLOG_BLOCK_SIZE;
	for (uint64_t nth = from; nth < to && n < max_blocks; nth++)
		blocks[n++] = slog_map_get(arena, &log->data, nth);
	if (n == 0)
		return 0;
	log->blocks_held -= n;
	/* seq_cst: see reader_epochs.c */
	atomic_store(&log->mem_start, (from + n) * SLOG_BLOCK_SIZE);
	return n;
}

/*
 * Copies [pos, pos + n) of what the writer appended out of memory, for the
 * writer itself (its file): no reader section, since only the writer
 * trims its log, and only below what it copies.  Writer only; pos at or
 * past slog_mem_start.
 */
void
slog_writer_copy_out(const ShapeLogArena *arena, const ShapeLog *log, uint64_t pos,
					 char *dst, size_t n)
{
	while (n > 0)
	{
		size_t		in_block = SLOG_BLOCK_SIZE - pos % SLOG_BLOCK_SIZE;
		size_t		step = n < in_block ? n : in_block;

		memcpy(dst, slog_block(arena, slog_data_block(arena, log, pos)) +
			   pos % SLOG_BLOCK_SIZE, step);
		pos += step;
		dst += step;
		n -= step;
	}
}

/* Gives blocks that slog_trim took back to the arena. */
void
slog_arena_give_back(ShapeLogArena *arena, const uint32_t *blocks, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		slog_block_push(arena, blocks[i]);
}
