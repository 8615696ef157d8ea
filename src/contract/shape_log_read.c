/*-------------------------------------------------------------------------
 *
 * shape_log_read.c
 *		Reading a shape log without a lock: its published state, the range
 *		a request is sent, and cursors over the records of a range.
 *
 * Every reader function below is one epoch section (reader_epochs.c): it
 * loads the log's mem_start once, reads the blocks at or past it from the
 * arena, which stay there until the section ends, and the blocks below it
 * from the log's file, 64 kB per read, through the descriptor the thread
 * keeps open between calls (reader_files.c; SlogBlockCache).  A file that
 * cannot be read fails
 * the call cleanly: a range says `failed`, a cursor stops and says
 * `failed`, a copy returns false; the caller answers 503 or closes the
 * connection, never sends bytes it did not read.  The layout, the indexes
 * and the notes on synchronization are in shape_log.c.
 *
 * IDENTIFICATION
 *	  src/contract/shape_log_read.c
 *
 *-------------------------------------------------------------------------
 */
#include "shape_log_internal.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "file_io.h"
#include "reader_epochs.h"
#include "reader_files.h"

#ifdef POSTGRES_H
#error "shape_log_read.c is shared by threads and must not include postgres.h"
#endif

void
slog_read_published(const ShapeLog *log, SlogPublished *out)
{
	for (;;)
	{
		uint64_t	before = atomic_load_explicit(&log->seq, acquire);

		if (before & 1)
			continue;
		out->data_end = atomic_load_explicit(&log->pub_data_end, relaxed);
		out->chunk_count = atomic_load_explicit(&log->pub_chunk_count, relaxed);
		out->flags = atomic_load_explicit(&log->pub_flags, relaxed);
		out->last.tx = atomic_load_explicit(&log->pub_last_tx, relaxed);
		out->last.op = atomic_load_explicit(&log->pub_last_op, relaxed);
		atomic_thread_fence(acquire);
		if (atomic_load_explicit(&log->seq, relaxed) == before)
			return;
	}
}

/*
 * A reader's access to a log's data, for the length of one call of a
 * reader function: an epoch section (reader_epochs.c), so that the blocks
 * it finds in memory stay there until it returns; the log's mem_start as
 * the section began; and the block it read last, so that the records of
 * one block (a hundred or more of typical rows) cost one directory lookup,
 * not one each.  Blocks below mem_start are read from the log's file
 * (the thread's descriptor of it, reader_files.c), SLOG_READ_AHEAD of them
 * at a time (readers walk
 * forward) into a buffer of the thread's, which the thread's next call
 * reuses when it reads the same file there.
 */
#define SLOG_READ_AHEAD		8	/* blocks: 64 kB a read */

typedef struct SlogBlockCache
{
	uint64_t	nth;			/* the block's number in the log, or UINT64_MAX */
	const char *base;
	uint64_t	mem_start;
	int			fd;				/* the log's file, or -1 (reader_files.c) */
	const char *path;			/* ... at this path */
	bool		failed;			/* the file could not be read ... */
	int			error;			/* ... for this errno */
	uint64_t	window_first;	/* blocks read from the file: the first ... */
	uint64_t	window_blocks;	/* ... and how many (0: none) */
} SlogBlockCache;

/* Where a thread reads blocks from files; one call of a reader at a time uses it. */
static _Thread_local char slog_read_window[SLOG_READ_AHEAD * SLOG_BLOCK_SIZE];

/*
 * What the window holds, kept from one call to the next (a response's
 * next piece, an SSE stream's next message): the bytes a file holds below
 * mem_start never change, and a file's name never names other bytes (a
 * data file is append-only; compaction writes another generation, a new
 * shape has a new handle), so a window read from a path serves any later
 * call on that path.  window_blocks 0: nothing.
 */
static _Thread_local char slog_window_path[SLOG_FILE_PATH_LEN];
static _Thread_local uint64_t slog_window_first;
static _Thread_local uint64_t slog_window_blocks;

static void
slog_cache_begin(const ShapeLog *log, SlogBlockCache *cache)
{
	reader_epoch_enter();
	cache->nth = UINT64_MAX;
	cache->base = NULL;
	cache->mem_start = log ? atomic_load(&log->mem_start) : 0;	/* seq_cst */
	cache->fd = -1;
	cache->path = log ? log->file_path : NULL;
	cache->failed = false;
	cache->error = 0;
	cache->window_first = 0;
	cache->window_blocks = 0;
	/* file_path is set before mem_start first moves (shape_log.h) */
	if (cache->mem_start > 0 && slog_window_blocks > 0 &&
		strcmp(slog_window_path, log->file_path) == 0)
	{
		cache->window_first = slog_window_first;
		cache->window_blocks = slog_window_blocks;
	}
}

static void
slog_cache_end(SlogBlockCache *cache)
{
	if (cache->fd >= 0)
		reader_file_done(cache->fd, cache->path);
	reader_epoch_exit();
}

/* The bytes of the log's nth data block; NULL when its file cannot be read. */
static const char *
slog_cache_block(const ShapeLogArena *arena, const ShapeLog *log, SlogBlockCache *cache,
				 uint64_t nth)
{
	if (nth == cache->nth)
		return cache->base;
	if (nth * SLOG_BLOCK_SIZE >= cache->mem_start)
	{
		cache->base = slog_block(arena, slog_map_get(arena, &log->data, nth));
		cache->nth = nth;
		return cache->base;
	}
	if (nth < cache->window_first || nth >= cache->window_first + cache->window_blocks)
	{
		/* the file holds every byte below mem_start: read ahead up to there */
		uint64_t	blocks = cache->mem_start / SLOG_BLOCK_SIZE - nth;

		if (blocks > SLOG_READ_AHEAD)
			blocks = SLOG_READ_AHEAD;
		if (cache->failed)
			return NULL;
		if (cache->fd < 0)
			cache->fd = reader_file_open(log->file_path);
		slog_window_blocks = 0; /* overwritten now: kept again once whole */
		if (cache->fd < 0 ||
			!fd_pread_all(cache->fd, slog_read_window, blocks * SLOG_BLOCK_SIZE,
							nth * SLOG_BLOCK_SIZE))
		{
			cache->failed = true;
			cache->error = errno;
			cache->nth = UINT64_MAX;
			cache->window_blocks = 0;
			return NULL;
		}
		cache->window_first = nth;
		cache->window_blocks = blocks;
		strcpy(slog_window_path, log->file_path);
		slog_window_first = nth;
		slog_window_blocks = blocks;
	}
	cache->nth = nth;
	cache->base = slog_read_window + (nth - cache->window_first) * SLOG_BLOCK_SIZE;
	return cache->base;
}

/* Copies [pos, pos + n) of published data out; false when the file failed. */
static bool
slog_cached_copy(const ShapeLogArena *arena, const ShapeLog *log, SlogBlockCache *cache,
				 uint64_t pos, char *dst, size_t n)
{
	while (n > 0)
	{
		size_t		in_block = SLOG_BLOCK_SIZE - pos % SLOG_BLOCK_SIZE;
		size_t		step = n < in_block ? n : in_block;
		const char *base = slog_cache_block(arena, log, cache, pos / SLOG_BLOCK_SIZE);

		if (base == NULL)
			return false;
		memcpy(dst, base + pos % SLOG_BLOCK_SIZE, step);
		pos += step;
		dst += step;
		n -= step;
	}
	return true;
}

/*
 * The bytes at log byte `pos` where they lie now, without a copy, and in
 * *avail how many follow them there contiguously: to the end of the block
 * in memory, to the end of the window read from the file.  NULL when the
 * file cannot be read.  A record that lies within *avail is read in place.
 */
static inline const char *
slog_cache_view(const ShapeLogArena *arena, const ShapeLog *log, SlogBlockCache *cache,
				uint64_t pos, size_t *avail)
{
	uint64_t	nth = pos / SLOG_BLOCK_SIZE;
	const char *base = slog_cache_block(arena, log, cache, nth);

	if (base == NULL)
		return NULL;
	if (nth * SLOG_BLOCK_SIZE >= cache->mem_start)
		*avail = SLOG_BLOCK_SIZE - pos % SLOG_BLOCK_SIZE;
	else
		*avail = (cache->window_first + cache->window_blocks) * SLOG_BLOCK_SIZE - pos;
	return base + pos % SLOG_BLOCK_SIZE;
}

/* A record's header at `pos`, in place where it lies whole in the view. */
static inline bool
slog_cached_header(const ShapeLogArena *arena, const ShapeLog *log, SlogBlockCache *cache,
				   uint64_t pos, SlogRecordHeader *hdr, const char **view, size_t *avail)
{
	*view = slog_cache_view(arena, log, cache, pos, avail);
	if (*view == NULL)
		return false;
	if (*avail >= sizeof(*hdr))
	{
		memcpy(hdr, *view, sizeof(*hdr));
		return true;
	}
	return slog_cached_copy(arena, log, cache, pos, (char *) hdr, sizeof(*hdr));
}

bool
slog_copy_out(const ShapeLogArena *arena, const ShapeLog *log, uint64_t pos,
			  char *dst, size_t n)
{
	SlogBlockCache cache;
	bool		ok;

	slog_cache_begin(log, &cache);
	ok = slog_cached_copy(arena, log, &cache, pos, dst, n);
	slog_cache_end(&cache);
	return ok;
}

bool
slog_read_header(const ShapeLogArena *arena, const ShapeLog *log,
				 uint64_t pos, SlogRecordHeader *hdr)
{
	return slog_copy_out(arena, log, pos, (char *) hdr, sizeof(*hdr));
}

static LogOffset
slog_chunk_end(const SlogChunk *chunk)
{
	LogOffset	o = {chunk->end_tx, chunk->end_op};

	return o;
}

/* The offset in a record's header. */
static LogOffset
slog_header_offset(const SlogRecordHeader *hdr)
{
	LogOffset	o = {hdr->tx, hdr->op};

	return o;
}

/*
 * The first record of [start, end) whose offset is past `after`, or end if
 * none is; UINT64_MAX when the log's file could not be read.  start and
 * end are record boundaries of published data.  The entries whose byte
 * lies in (start, end) name records of the range; the binary search finds
 * the last of them at or before `after`, and the scan from there stops at
 * the next entry's record at the latest: it reads the headers of records
 * that start within one stride.
 */
static uint64_t
slog_seek(const ShapeLogArena *arena, const ShapeLog *log, SlogBlockCache *cache,
		  uint64_t start, uint64_t end, LogOffset after)
{
	SlogRecordHeader hdr;
	uint64_t	pos = start;

	if (start < end)
	{
		uint64_t	lo = start / SLOG_POS_STRIDE + 1;
		uint64_t	hi = (end - 1) / SLOG_POS_STRIDE;

		while (lo <= hi)
		{
			uint64_t	mid = lo + (hi - lo) / 2;
			uint64_t	p = slog_pos_get(arena, log, mid);

			if (!slog_cached_copy(arena, log, cache, p, (char *) &hdr, sizeof(hdr)))
				return UINT64_MAX;
			if (log_offset_cmp(slog_header_offset(&hdr), after) <= 0)
			{
				pos = p + slog_record_span(hdr.len);
				lo = mid + 1;
			}
			else
				hi = mid - 1;
		}
	}
	while (pos < end)
	{
		if (!slog_cached_copy(arena, log, cache, pos, (char *) &hdr, sizeof(hdr)))
			return UINT64_MAX;
		if (log_offset_cmp(slog_header_offset(&hdr), after) > 0)
			break;
		pos += slog_record_span(hdr.len);
	}
	return pos;
}

/*
 * Finds what a request for "everything after `after`" is sent: the records
 * of the chunk holding the first record after `after` (or of the open tail
 * once the snapshot is done), minus those at or before `after`.  Reads
 * entries after offset O are exclusive of O, as in Electric.  A chunk may
 * end past its last record (log_compact.c makes such ends), so a reader at
 * that record finds nothing in it: the next chunk is its answer, since an
 * empty range means "nothing yet" to a live request.  (A chunk with no
 * records at all is answered as it is.)  A range whose headers could not
 * be read from the log's file is ready and failed.
 */
void
slog_locate(const ShapeLogArena *arena, const ShapeLog *log,
			const SlogPublished *pub, LogOffset after, SlogRange *range)
{
	SlogBlockCache cache;
	uint32_t	lo = 0;
	uint32_t	hi = pub->chunk_count;
	bool		has_records;

	/* first closed chunk whose end is past `after` */
	while (lo < hi)
	{
		uint32_t	mid = lo + (hi - lo) / 2;

		if (log_offset_cmp(slog_chunk_end(slog_chunk_at(arena, log, mid)), after) > 0)
			hi = mid;
		else
			lo = mid + 1;
	}

	slog_cache_begin(log, &cache);
	for (;; lo++)
	{
		memset(range, 0, sizeof(*range));
		if (lo < pub->chunk_count)
		{
			const SlogChunk *chunk = slog_chunk_at(arena, log, lo);

			range->start = chunk->start_pos;
			range->end = chunk->end_pos;
			range->chunk_end = slog_chunk_end(chunk);
			range->whole_chunk = chunk->tombstones == 0;
			range->message_bytes = chunk->message_bytes;
			range->messages = chunk->messages;
		}
		else if (pub->flags & SLOG_SNAPSHOT_DONE)
		{
			range->start = pub->chunk_count == 0 ? 0 :
				slog_chunk_at(arena, log, pub->chunk_count - 1)->end_pos;
			range->end = pub->data_end;
			range->chunk_end = pub->last;
			range->beyond_end = log_offset_cmp(after, pub->last) > 0;
		}
		else
			break;				/* the chunk is still being written */

		range->ready = true;
		has_records = range->start < range->end;
		if (!log_offset_is_before_all(after))
		{
			uint64_t	chunk_start = range->start;

			range->start = slog_seek(arena, log, &cache, range->start, range->end, after);
			range->whole_chunk &= range->start == chunk_start;
			if (range->start == UINT64_MAX)
			{
				range->start = range->end;
				range->failed = true;
				range->error = cache.error;
				break;
			}
		}
		/* the tail, a chunk with records after `after`, or one with none at all */
		if (lo >= pub->chunk_count || range->start < range->end || !has_records)
			break;
	}
	slog_cache_end(&cache);
}

/* ------------------------------------------------------------- cursors */

/* The cursor's file could not be read: it has no more records. */
static void
slog_cursor_fail(SlogCursor *cursor, int error)
{
	cursor->failed = true;
	cursor->error = error;
	cursor->in_record = false;
	cursor->pos = cursor->end;
}

/*
 * Moves past the tombstones this reader is not to see: those of a key
 * life that began after `after`, whose row the reader never had (see
 * log_compact.c).
 */
static void
slog_cursor_skip(const ShapeLogArena *arena, const ShapeLog *log, SlogBlockCache *cache,
				 SlogCursor *cursor)
{
	while (cursor->pos < cursor->end)
	{
		SlogRecordHeader hdr;
		LogOffset	born;

		if (!slog_cached_copy(arena, log, cache, cursor->pos, (char *) &hdr, sizeof(hdr)))
		{
			slog_cursor_fail(cursor, cache->error);
			return;
		}
		if (hdr.kind != SLOG_RECORD_TOMBSTONE)
			return;
		if (!slog_cached_copy(arena, log, cache, cursor->pos + sizeof(hdr),
							  (char *) &born.tx, sizeof(born.tx)) ||
			!slog_cached_copy(arena, log, cache, cursor->pos + sizeof(hdr) + sizeof(born.tx),
							  (char *) &born.op, sizeof(born.op)))
		{
			slog_cursor_fail(cursor, cache->error);
			return;
		}
		if (log_offset_cmp(born, cursor->after) <= 0)
			return;				/* it had the row: it needs the delete */
		cursor->pos += slog_record_span(hdr.len);
	}
}

/*
 * A cursor over the records of [start, end) for a reader that has
 * everything up to `after`.
 */
void
slog_cursor_init(const ShapeLogArena *arena, const ShapeLog *log, SlogCursor *cursor,
				 uint64_t start, uint64_t end, LogOffset after)
{
	cursor->pos = start;
	cursor->end = end;
	cursor->after = after;
	cursor->len = cursor->sent = cursor->skip = 0;
	cursor->in_record = false;
	cursor->failed = false;
	cursor->error = 0;
	cursor->sized = false;
	if (start < end)
	{
		SlogBlockCache cache;

		slog_cache_begin(log, &cache);
		slog_cursor_skip(arena, log, &cache, cursor);
		slog_cache_end(&cache);
	}
}

/* Whether records remain: one being copied, or one not yet begun. */
bool
slog_cursor_more(const SlogCursor *cursor)
{
	return cursor->in_record || cursor->pos < cursor->end;
}

/*
 * The length of the next record's message; call when !in_record and more.
 * 0 when the log's file cannot be read (slog_cursor_begin then fails).
 */
uint32_t
slog_cursor_peek(const ShapeLogArena *arena, const ShapeLog *log, const SlogCursor *cursor)
{
	SlogRecordHeader hdr;

	if (!slog_read_header(arena, log, cursor->pos, &hdr))
		return 0;
	return hdr.kind == SLOG_RECORD_TOMBSTONE ? hdr.len - SLOG_TOMBSTONE_PREFIX : hdr.len;
}

/*
 * The bytes before the message in the record at `pos` with header `hdr`,
 * -1 when it is a tombstone the cursor's reader does not need (it never
 * had the row: see slog_cursor_skip), -2 when the file failed.
 */
static inline int
slog_message_skip(const ShapeLogArena *arena, const ShapeLog *log, SlogBlockCache *cache,
				  const SlogCursor *cursor, uint64_t pos, const SlogRecordHeader *hdr)
{
	LogOffset	born;

	if (hdr->kind != SLOG_RECORD_TOMBSTONE)
		return 0;
	if (!slog_cached_copy(arena, log, cache, pos + sizeof(*hdr), (char *) &born.tx,
						  sizeof(born.tx)) ||
		!slog_cached_copy(arena, log, cache, pos + sizeof(*hdr) + sizeof(born.tx),
						  (char *) &born.op, sizeof(born.op)))
		return -2;
	return log_offset_cmp(born, cursor->after) > 0 ? -1 : (int) SLOG_TOMBSTONE_PREFIX;
}

/*
 * Lets a cursor just made over `range` (slog_cursor_init with its start
 * and end) answer slog_cursor_measure without a walk when the range is a
 * whole closed chunk whose size its index entry holds: a catch-up request
 * of a chunk on disk then reads its bytes once, not twice.
 */
void
slog_cursor_size(SlogCursor *cursor, const SlogRange *range)
{
	if (!range->whole_chunk || cursor->pos != range->start || cursor->end != range->end ||
		cursor->in_record)
		return;
	cursor->sized = true;
	cursor->sized_bytes = range->message_bytes;
	cursor->sized_messages = range->messages;
}

/*
 * The message bytes a cursor that has not begun a record would copy out
 * from here to the end of its range, and how many messages: a walk of the
 * record headers, which a response of known length needs before it starts.
 * False, and the cursor fails, when the log's file could not be read.
 */
bool
slog_cursor_measure(const ShapeLogArena *arena, const ShapeLog *log, SlogCursor *cursor,
					uint64_t *bytes, uint64_t *messages)
{
	SlogBlockCache cache;
	uint64_t	pos = cursor->pos;
	bool		ok = true;

	if (cursor->sized)
	{
		*bytes = cursor->sized_bytes;
		*messages = cursor->sized_messages;
		return true;
	}
	*bytes = *messages = 0;
	slog_cache_begin(log, &cache);
	while (pos < cursor->end)
	{
		SlogRecordHeader hdr;
		const char *view;
		size_t		avail;
		int			skip;

		if (!slog_cached_header(arena, log, &cache, pos, &hdr, &view, &avail) ||
			(skip = slog_message_skip(arena, log, &cache, cursor, pos, &hdr)) == -2)
		{
			slog_cursor_fail(cursor, cache.error);
			ok = false;
			break;
		}
		if (skip >= 0)
		{
			*bytes += hdr.len - (uint32_t) skip;
			(*messages)++;
		}
		pos += slog_record_span(hdr.len);
	}
	slog_cache_end(&cache);
	return ok;
}

/*
 * Copies whole messages into dst while they fit in its n bytes, each after
 * a ',' when *any is set (it is set after the first): the bulk of a JSON
 * array's body, one header read and one copy per message.  Returns the
 * bytes written; stops at the end of the range or before the first message
 * that does not fit whole, which slog_cursor_begin and slog_cursor_copy
 * then split.  Call when the cursor is not inside a record.  When the
 * log's file cannot be read, the cursor fails (cursor->failed) and has no
 * more records.
 */
size_t
slog_cursor_copy_messages(const ShapeLogArena *arena, const ShapeLog *log, SlogCursor *cursor,
						  char *dst, size_t n, bool *any)
{
	SlogBlockCache cache;
	size_t		done = 0;

	cursor->sized = false;		/* its size was of the whole range */
	slog_cache_begin(log, &cache);
	while (cursor->pos < cursor->end)
	{
		SlogRecordHeader hdr;
		const char *view;
		size_t		avail;
		int			skip;
		size_t		len;

		if (!slog_cached_header(arena, log, &cache, cursor->pos, &hdr, &view, &avail) ||
			(skip = slog_message_skip(arena, log, &cache, cursor, cursor->pos, &hdr)) == -2)
		{
			slog_cursor_fail(cursor, cache.error);
			break;
		}
		if (skip >= 0)
		{
			size_t		from = sizeof(hdr) + (uint32_t) skip;

			len = hdr.len - (uint32_t) skip;
			if (len + (*any ? 1 : 0) > n - done)
				break;
			if (avail >= from + len)
				memcpy(dst + done + (*any ? 1 : 0), view + from, len);
			else if (!slog_cached_copy(arena, log, &cache, cursor->pos + from,
									   dst + done + (*any ? 1 : 0), len))
			{
				slog_cursor_fail(cursor, cache.error);
				break;
			}
			if (*any)
				dst[done++] = ',';
			*any = true;
			done += len;
		}
		cursor->pos += slog_record_span(hdr.len);
	}
	slog_cache_end(&cache);
	return done;
}

/* Starts copying the next record (or fails the cursor: see above). */
void
slog_cursor_begin(const ShapeLogArena *arena, const ShapeLog *log, SlogCursor *cursor)
{
	SlogRecordHeader hdr;

	if (!slog_read_header(arena, log, cursor->pos, &hdr))
	{
		slog_cursor_fail(cursor, errno);
		return;
	}
	cursor->skip = hdr.kind == SLOG_RECORD_TOMBSTONE ? SLOG_TOMBSTONE_PREFIX : 0;
	cursor->len = hdr.len - cursor->skip;
	cursor->sent = 0;
	cursor->in_record = true;
}

/*
 * Copies up to n bytes of the current record's message and returns how
 * many; the cursor moves to the next record once the message is out.
 * Returns 0, and fails the cursor, when the log's file cannot be read.
 */
size_t
slog_cursor_copy(const ShapeLogArena *arena, const ShapeLog *log, SlogCursor *cursor,
				 char *dst, size_t n)
{
	SlogBlockCache cache;
	size_t		step = cursor->len - cursor->sent;

	cursor->sized = false;		/* its size was of the whole range */
	if (step > n)
		step = n;
	slog_cache_begin(log, &cache);
	if (!slog_cached_copy(arena, log, &cache,
						  cursor->pos + sizeof(SlogRecordHeader) + cursor->skip + cursor->sent,
						  dst, step))
	{
		slog_cursor_fail(cursor, cache.error);
		slog_cache_end(&cache);
		return 0;
	}
	cursor->sent += (uint32_t) step;
	if (cursor->sent == cursor->len)
	{
		cursor->pos += slog_record_span(cursor->len + cursor->skip);
		cursor->in_record = false;
		slog_cursor_skip(arena, log, &cache, cursor);
	}
	slog_cache_end(&cache);
	return step;
}
