/*-------------------------------------------------------------------------
 *
 * log_trim.c
 *		Shape logs larger than memory: their written chunks leave the
 *		arena, and their blocks come back once no reader holds them.
 *
 * With durable logs every ready shape's log is also in its data file
 * (log_files.c writes it behind memory), so the arena need not hold all
 * of it.  When the arena's free blocks fall under a quarter of it, each
 * log whose file holds its bytes gives back the blocks of its closed
 * chunks that the file holds (slog_trim); its open chunk, which live
 * clients read, stays.  Readers find those bytes in the file from then on
 * (shape_log_read.c: a whole block per read, from the page cache as a
 * rule).  A trimmed block returns to the arena only once every HTTP
 * thread that may have seen it in memory has left its reader section
 * (reader_epochs.c): each trim is a batch with a ticket, and each step
 * gives back the batches whose ticket has passed.  So a shape's size is
 * bounded by the disk, not by shape_sync.log_memory, which keeps the
 * recent part of every log and the indexes of all of it (about 0.3% of
 * its bytes).  Decoding ends its batch at a transaction's end when a trim
 * is due (log_trim_due) and logs on disk grew in the batch
 * (shape_stream_write_out_due), so that a burst of transactions larger
 * than the memory left is written and trimmed on the way; a trim walk made
 * less than LOG_TRIM_RETRY_MS ago is made again only when an eighth of
 * the arena is left and that walk trimmed a sixteenth of it.  One
 * transaction is published whole at its commit, so while one is replayed
 * and memory runs short, the logs it appended to are written ahead of
 * the commit and trimmed to their last closed chunk, published or not
 * (log_files_write_ahead, log_trim_ahead; shape_stream_log.c).  Under eviction's own, lower reserve (shape_eviction.c), the
 * least recently read shapes give back their whole written log, open
 * chunk included (log_trim_whole_shape): a shape on disk leaves memory
 * rather than the server, and only what trimming cannot free (logs not on
 * disk, bytes not written yet) is evicted.
 *
 * A trimmed log is compacted from its file, and the copy compaction
 * builds leaves memory the same way as its chunks close
 * (log_trim_loading; shape_stream_log.c).  A trimmed log whose file later fails a
 * write keeps that file for its readers, and the file of a trimmed log
 * whose shape is dropped stays until its last reader lets go (log_files.c).
 *
 * The worker's pending batches are given back when it stops, once its HTTP
 * threads are joined (log_trim_shutdown): shared memory outlives a worker
 * that is terminated and starts again.
 *
 * Everything here runs on the worker's main thread, the writer of every
 * ready shape's log.
 *
 * IDENTIFICATION
 *	  src/pg/worker/log_trim.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "log_files_internal.h"
#include "log_trim.h"
#include "reader_epochs.h"
#include "shape_stream.h"
#include "shared_state.h"

/* Blocks trimmed together, given back together once their ticket passes. */
typedef struct TrimBatch
{
	struct TrimBatch *next;
	uint64		ticket;
	uint32		n;
	uint32		blocks[FLEXIBLE_ARRAY_MEMBER];
} TrimBatch;

static TrimBatch *lt_pending;	/* oldest first */
static TrimBatch *lt_pending_tail;
static TimestampTz lt_walked_at;	/* the last walk of the shapes */
static bool lt_walk_trimmed;	/* and whether it trimmed much (see log_trim_due) */

#define LOG_TRIM_RETRY_MS	100

static ShapeLogArena *
lt_arena(void)
{
	return shape_sync_shared->table->arena;
}

bool
log_trim_wanted(void)
{
	ShapeLogArena *arena = lt_arena();

	return slog_arena_free_blocks(arena) < arena->nblocks / 4;
}

/*
 * Whether the next step would trim: memory runs low, and the shapes were
 * not walked within LOG_TRIM_RETRY_MS, or it runs so low (an eighth of the
 * arena free, counting the blocks trimmed that come back at the next step)
 * that they are walked again at once, unless the last walk trimmed less
 * than a sixteenth of the arena: the memory is then held by what cannot
 * leave it (open chunks, logs not on disk), which a walk per transaction,
 * each a walk of every shape, would not change.
 */
bool
log_trim_due(void)
{
	ShapeLogArena *arena = lt_arena();

	if (lf_shapes == NULL || !log_trim_wanted())
		return false;
	if (lt_walk_trimmed &&
		slog_arena_free_blocks(arena) + log_trim_pending_blocks() < arena->nblocks / 8)
		return true;
	return TimestampDifferenceExceeds(lt_walked_at, GetCurrentTimestamp(), LOG_TRIM_RETRY_MS);
}

/* Gives back the batches whose readers have all left (all, with `all`). */
static void
lt_give_back(bool all)
{
	while (lt_pending != NULL && (all || reader_epoch_passed(lt_pending->ticket)))
	{
		TrimBatch  *b = lt_pending;

		slog_arena_give_back(lt_arena(), b->blocks, b->n);
		lt_pending = b->next;
		if (lt_pending == NULL)
			lt_pending_tail = NULL;
		free(b);
	}
}

/* How much of a log a trim may take from memory, at most what its file holds. */
typedef enum LtExtent
{
	LT_PUBLISHED_CHUNKS,		/* its published closed chunks */
	LT_CLOSED_CHUNKS,			/* its closed chunks, published or not */
	LT_WHOLE,					/* all of it, open chunk included */
} LtExtent;

/*
 * Trims one ready shape's log to what its file holds and `extent` allows,
 * into `batch` (room for `room` more blocks); the blocks taken.
 */
static uint32
lt_trim_shape(uint32 slot, TrimBatch *batch, uint32 room, LtExtent extent)
{
	ShapeTable *table = shape_sync_shared->table;
	FileShape  *fs = &lf_shapes[slot];
	ShapeLog   *log;
	SlogPublished pub;
	SlogChunk	last;
	uint64		upto;
	char		path[MAXPGPATH];

	if (!fs->in_use || fs->failed || fs->file < 0 || fs->written == 0 ||
		!shape_stream_durable(slot))
		return 0;
	log = shape_table_log(table, slot);
	upto = fs->written;
	if (extent == LT_CLOSED_CHUNKS)
		upto = Min(upto, log->chunk_start);	/* the writer's own: this thread */
	else if (extent == LT_PUBLISHED_CHUNKS)
	{
		slog_read_published(log, &pub);
		if (pub.chunk_count == 0)
			return 0;
		slog_chunk_read(table->arena, log, pub.chunk_count - 1, &last);
		upto = Min(upto, last.end_pos);
	}
	if (slog_mem_start(log) + SLOG_BLOCK_SIZE > upto)
		return 0;				/* not a whole block more */
	lf_data_path(fs->handle, fs->generation, path);
	if (!slog_set_file(log, path))
		return 0;
	return slog_trim(log, upto, table->arena, batch->blocks + batch->n, room);
}

/* A batch of room for `room` blocks; NULL when out of memory. */
static TrimBatch *
lt_batch_new(uint32 room)
{
	TrimBatch  *batch = malloc(offsetof(TrimBatch, blocks) + sizeof(uint32) * (size_t) room);

	if (batch != NULL)
	{
		batch->next = NULL;
		batch->n = 0;
	}
	return batch;
}

/* Queues a batch until its readers are gone (or frees it when empty). */
static void
lt_batch_queue(TrimBatch *batch)
{
	if (batch->n == 0)
	{
		free(batch);
		return;
	}
	batch->ticket = reader_epoch_retire();
	if (lt_pending_tail != NULL)
		lt_pending_tail->next = batch;
	else
		lt_pending = batch;
	lt_pending_tail = batch;
}

/* One shape's trim, in a batch of its own; the blocks taken. */
static uint32
lt_trim_one(uint32 slot, LtExtent extent)
{
	TrimBatch  *batch;
	uint32		n;

	if (lf_shapes == NULL || slot >= lf_nslots)
		return 0;
	n = shape_table_log_blocks(shape_sync_shared->table, slot);
	if (n == 0 || (batch = lt_batch_new(n)) == NULL)
		return 0;
	batch->n = lt_trim_shape(slot, batch, n, extent);
	n = batch->n;
	lt_batch_queue(batch);
	return n;
}

uint32
log_trim_whole_shape(uint32 slot)
{
	/* what waits for the next round (log_files_step) goes to the file first: all of it leaves */
	(void) log_files_catch_up(slot);
	return lt_trim_one(slot, LT_WHOLE);
}

void
log_trim_step(void)
{
	ShapeLogArena *arena;
	TrimBatch  *batch;
	uint32		room;

	if (lf_shapes == NULL)
		return;
	lt_give_back(false);
	if (!log_trim_due())
		return;
	arena = lt_arena();
	/* what would bring the arena back to half free */
	room = arena->nblocks / 2 - Min(slog_arena_free_blocks(arena), arena->nblocks / 2);
	if (room == 0)
		return;
	batch = lt_batch_new(room);
	if (batch == NULL)
		return;
	for (uint32 slot = 0; slot < lf_nslots && batch->n < room; slot++)
		batch->n += lt_trim_shape(slot, batch, room - batch->n, LT_PUBLISHED_CHUNKS);
	/* a walk of every shape: not again for LOG_TRIM_RETRY_MS (log_trim_due) */
	lt_walked_at = GetCurrentTimestamp();
	lt_walk_trimmed = batch->n >= Max(arena->nblocks / 16, 1);
	if (batch->n > 0)
		ereport(DEBUG1,
				(errmsg_internal("%u blocks of shape logs left memory for their files", batch->n)));
	lt_batch_queue(batch);
}

uint32
log_trim_ahead(uint32 slot)
{
	const ShapeLog *log;

	if (lf_shapes == NULL || slot >= lf_nslots)
		return 0;
	log = shape_table_log(shape_sync_shared->table, slot);
	if (slog_mem_start(log) + SLOG_BLOCK_SIZE > Min(lf_shapes[slot].written, log->chunk_start))
		return 0;				/* not a whole block to take: no batch */
	return lt_trim_one(slot, LT_CLOSED_CHUNKS);
}

uint32
log_trim_give_back(void)
{
	uint32		before = log_trim_pending_blocks();

	lt_give_back(false);
	return before - log_trim_pending_blocks();
}

uint32
log_trim_pending_blocks(void)
{
	uint32		n = 0;

	for (TrimBatch *b = lt_pending; b != NULL; b = b->next)
		n += b->n;
	return n;
}

void
log_trim_shutdown(void)
{
	lt_give_back(true);
}

void
log_trim_loading(ShapeLog *log, const char *path, uint64 upto)
{
	uint32		blocks[256];
	uint32		n;

	if (!log_trim_wanted() || !slog_set_file(log, path))
		return;
	do
	{
		n = slog_trim(log, upto, lt_arena(), blocks, lengthof(blocks));
		slog_arena_give_back(lt_arena(), blocks, n);	/* unpublished: no reader */
	} while (n == lengthof(blocks));
}
