/*-------------------------------------------------------------------------
 *
 * shape_log.h
 *		The per-shape log of pre-encoded messages, in shared memory.
 *
 * See shape_log.c for the layout and the notes on synchronization.
 *
 * IDENTIFICATION
 *	  src/contract/shape_log.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SHAPE_LOG_H
#define SHAPE_LOG_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "log_offset.h"

#define SLOG_BLOCK_SIZE			8192u
#define SLOG_NO_BLOCK			UINT32_MAX
#define SLOG_DIR_FANOUT			(SLOG_BLOCK_SIZE / sizeof(uint32_t))

/*
 * A block map names the blocks of one sequence (data, chunk index or
 * position index), the nth at a time: the first SLOG_MAP_DIRECT in the log
 * itself, so that a small log needs no directory block; the next
 * SLOG_MAP_INDIRECT * SLOG_DIR_FANOUT through directory blocks named in the
 * log; the rest through one block of directory blocks.
 */
#define SLOG_MAP_DIRECT			4
#define SLOG_MAP_INDIRECT		4
#define SLOG_MAP_CAPACITY \
	((uint64_t) SLOG_MAP_DIRECT + (uint64_t) SLOG_MAP_INDIRECT * SLOG_DIR_FANOUT + \
	 (uint64_t) SLOG_DIR_FANOUT * SLOG_DIR_FANOUT)

#define SLOG_MAX_DATA_BYTES		((uint64_t) 8 << 30)
#define SLOG_FILE_PATH_LEN		96	/* "pg_shape_sync/<handle>.<generation>.log" */
#define SLOG_CHUNKS_INLINE		2	/* closed chunks kept in the log itself */
#define SLOG_CHUNKS_PER_BLOCK	(SLOG_BLOCK_SIZE / sizeof(SlogChunk))
#define SLOG_MAX_CHUNKS			(1u << 20)

/*
 * The position index: entry k (k >= 1) is the start of the record holding
 * log byte k * SLOG_POS_STRIDE.  Entries 1 .. SLOG_POS_INLINE (those of
 * the directly named data blocks) live in the log itself, the others in
 * index blocks of SLOG_POS_PER_BLOCK entries, entry k in slot
 * k % SLOG_POS_PER_BLOCK of the index block that the position map names
 * k / SLOG_POS_PER_BLOCK-th.
 */
#define SLOG_POS_STRIDE			4096u
#define SLOG_POS_PER_BLOCK		(SLOG_BLOCK_SIZE / sizeof(uint64_t))
#define SLOG_POS_INLINE			(SLOG_MAP_DIRECT * SLOG_BLOCK_SIZE / SLOG_POS_STRIDE - 1)

/* Kinds of record; a reader serves both, the kind is for inspection. */
#define SLOG_RECORD_CHANGE		1
#define SLOG_RECORD_CONTROL		2
#define SLOG_RECORD_TOMBSTONE	3	/* a delete kept by compaction: the offset
									 * of its life's insert (tx, op), then the
									 * message; see log_compact.c */
#define SLOG_TOMBSTONE_PREFIX	16

/* Bits of the published flags word. */
#define SLOG_SNAPSHOT_DONE		0x1

typedef enum SlogResult
{
	SLOG_OK = 0,
	SLOG_FULL,					/* the arena has no free block left */
	SLOG_TOO_LARGE				/* the shape hit its per-shape size cap */
} SlogResult;

/* Every record starts with this header; the payload follows, padded to 8. */
typedef struct SlogRecordHeader
{
	uint32_t	len;			/* payload bytes */
	uint32_t	kind;			/* SLOG_RECORD_* */
	int64_t		tx;				/* the record's offset ... */
	uint64_t	op;				/* ... as (tx, op) */
} SlogRecordHeader;

/*
 * One closed chunk: records in [start_pos, end_pos) ending at `end`, and
 * what a response of the whole chunk carries (its body's length is known
 * before a byte of it is read): the bytes of its messages and how many.
 * A tombstone's message is sent or not depending on the reader's offset,
 * so the two hold for every reader only when `tombstones` is 0.  Counted
 * by slog_append, so a log restored from its file counts them again; the
 * manifest does not store them.
 */
typedef struct SlogChunk
{
	uint64_t	start_pos;
	uint64_t	end_pos;
	int64_t		end_tx;
	uint64_t	end_op;
	uint64_t	message_bytes;
	uint32_t	messages;
	uint32_t	tombstones;
} SlogChunk;

/* The free-block pool that all shape logs share. */
typedef struct ShapeLogArena
{
	uint32_t	nblocks;		/* fixed at creation */
	uint32_t	pad;
	uint64_t	blocks_offset;	/* from the arena's start to block 0 */
	_Atomic uint64_t free_head; /* (ABA tag << 32) | first free block */
	_Atomic uint32_t free_count;
	_Atomic uint32_t next[];	/* free-list links, one per block */
} ShapeLogArena;

/* A consistent copy of what the writer has published. */
typedef struct SlogPublished
{
	uint64_t	data_end;		/* bytes of complete records */
	uint32_t	chunk_count;	/* closed chunks */
	uint32_t	flags;			/* SLOG_SNAPSHOT_DONE */
	LogOffset	last;			/* offset of the last record */
} SlogPublished;

typedef struct SlogBlockMap
{
	_Atomic uint32_t direct[SLOG_MAP_DIRECT];
	_Atomic uint32_t indirect[SLOG_MAP_INDIRECT];	/* directory blocks */
	_Atomic uint32_t double_indirect;	/* a block of directory blocks */
} SlogBlockMap;

typedef struct ShapeLog
{
	/* Published state, guarded by the seqlock `seq`. */
	_Atomic uint64_t seq;		/* odd while the writer updates */
	_Atomic uint64_t pub_data_end;
	_Atomic uint32_t pub_chunk_count;
	_Atomic uint32_t pub_flags;
	_Atomic int64_t pub_last_tx;
	_Atomic uint64_t pub_last_op;

	/*
	 * Bytes below mem_start are not in memory but in the file at file_path
	 * (relative to the process's working directory), which the writer sets
	 * before mem_start first moves (slog_trim) and keeps until slog_init.
	 * mem_start is a multiple of SLOG_BLOCK_SIZE and only grows.
	 */
	_Atomic uint64_t mem_start;
	char		file_path[SLOG_FILE_PATH_LEN];

	/* Block maps: set by the writer before the range is published. */
	SlogBlockMap data;			/* the log's bytes */
	SlogBlockMap chunk_blocks;	/* closed chunks past the inline ones */
	SlogBlockMap pos_blocks;	/* position index entries past the inline ones */

	/* Set by the writer before the chunk or position is published. */
	SlogChunk	chunks_inline[SLOG_CHUNKS_INLINE];
	uint64_t	pos_inline[SLOG_POS_INLINE];

	/* Writer-private: only the current writer reads or writes these. */
	uint64_t	write_pos;		/* end of complete records */
	uint64_t	chunk_start;	/* start of the open chunk */
	uint64_t	open_chunk_bytes;	/* payload bytes in the open chunk ... */
	uint32_t	open_chunk_records; /* ... its records ... */
	uint32_t	open_chunk_tombstones;	/* ... and of those, tombstones */
	uint32_t	chunk_count;	/* closed chunks */
	uint32_t	blocks_held;	/* blocks this log owns (data, maps, indexes) */
} ShapeLog;

/* The part of a log that one response covers. */
typedef struct SlogRange
{
	bool		ready;			/* false: wait for the writer */
	bool		failed;			/* its file could not be read ... */
	int			error;			/* ... for this errno */
	bool		beyond_end;		/* the request is past the last offset */
	uint64_t	start;			/* first record to send */
	uint64_t	end;			/* end of the last record to send */
	LogOffset	chunk_end;		/* the response's electric-offset */
	bool		whole_chunk;	/* a closed chunk without tombstones, so ... */
	uint64_t	message_bytes;	/* ... its messages' bytes ... */
	uint64_t	messages;		/* ... and count are known */
} SlogRange;

/* Arena */
extern size_t slog_arena_size(uint64_t bytes);
extern ShapeLogArena *slog_arena_init(void *mem, size_t size);
extern uint32_t slog_arena_free_blocks(const ShapeLogArena *arena);
extern uint32_t slog_arena_prefault(ShapeLogArena *arena, uint32_t first, uint32_t count);

/* Writer (one at a time per log) */
extern void slog_init(ShapeLog *log);
extern SlogResult slog_append(ShapeLogArena *arena, ShapeLog *log,
							  LogOffset offset, uint32_t kind,
							  const char *payload, uint32_t len);
extern SlogResult slog_close_chunk(ShapeLogArena *arena, ShapeLog *log,
								   LogOffset end);
extern void slog_publish(ShapeLog *log, LogOffset last, uint32_t flags);
extern void slog_release(ShapeLogArena *arena, ShapeLog *log);
extern bool slog_set_file(ShapeLog *log, const char *path);
extern uint32_t slog_trim(ShapeLog *log, uint64_t upto, const ShapeLogArena *arena,
						  uint32_t *blocks, uint32_t max_blocks);
extern void slog_arena_give_back(ShapeLogArena *arena, const uint32_t *blocks, uint32_t n);
extern uint64_t slog_mem_start(const ShapeLog *log);
extern void slog_writer_copy_out(const ShapeLogArena *arena, const ShapeLog *log,
								 uint64_t pos, char *dst, size_t n);

/* Readers (any thread or process, no lock) */
extern void slog_read_published(const ShapeLog *log, SlogPublished *out);
extern void slog_locate(const ShapeLogArena *arena, const ShapeLog *log,
						const SlogPublished *pub, LogOffset after,
						SlogRange *range);
extern bool slog_read_header(const ShapeLogArena *arena, const ShapeLog *log,
							 uint64_t pos, SlogRecordHeader *hdr);
extern void slog_chunk_read(const ShapeLogArena *arena, const ShapeLog *log, uint32_t i,
							SlogChunk *out);
extern bool slog_copy_out(const ShapeLogArena *arena, const ShapeLog *log,
						  uint64_t pos, char *dst, size_t n);

/*
 * Walks the records of a range, copying each payload out in as many
 * pieces as the caller's buffers require.
 */
typedef struct SlogCursor
{
	uint64_t	pos;			/* the current (or next) record */
	uint64_t	end;			/* end of the range */
	LogOffset	after;			/* the reader has everything up to here */
	uint32_t	len;			/* message bytes of the current record */
	uint32_t	sent;			/* ... copied out so far */
	uint32_t	skip;			/* bytes of its payload before the message */
	bool		in_record;
	bool		failed;			/* its file could not be read: no more records */
	int			error;			/* ... for this errno */
	bool		sized;			/* slog_cursor_size was called: ... */
	uint64_t	sized_bytes;	/* ... slog_cursor_measure's answer */
	uint64_t	sized_messages;
} SlogCursor;

extern void slog_cursor_init(const ShapeLogArena *arena, const ShapeLog *log, SlogCursor *cursor,
							 uint64_t start, uint64_t end, LogOffset after);
extern bool slog_cursor_more(const SlogCursor *cursor);
extern uint32_t slog_cursor_peek(const ShapeLogArena *arena, const ShapeLog *log,
								 const SlogCursor *cursor);
extern void slog_cursor_size(SlogCursor *cursor, const SlogRange *range);
extern bool slog_cursor_measure(const ShapeLogArena *arena, const ShapeLog *log,
								SlogCursor *cursor, uint64_t *bytes, uint64_t *messages);
extern size_t slog_cursor_copy_messages(const ShapeLogArena *arena, const ShapeLog *log,
										SlogCursor *cursor, char *dst, size_t n, bool *any);
extern void slog_cursor_begin(const ShapeLogArena *arena, const ShapeLog *log,
							  SlogCursor *cursor);
extern size_t slog_cursor_copy(const ShapeLogArena *arena, const ShapeLog *log,
							   SlogCursor *cursor, char *dst, size_t n);

static inline uint64_t
slog_record_span(uint32_t len)
{
	return (sizeof(SlogRecordHeader) + (uint64_t) len + 7) & ~(uint64_t) 7;
}

#endif							/* SHAPE_LOG_H */
