/*-------------------------------------------------------------------------
 *
 * shape_log_internal.h
 *		What the writer's and the readers' files of the shape log share:
 *		blocks, block maps, the position and chunk indexes.
 *
 * See shape_log.c for the layout and the notes on synchronization.
 *
 * IDENTIFICATION
 *	  src/contract/shape_log_internal.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SHAPE_LOG_INTERNAL_H
#define SHAPE_LOG_INTERNAL_H

#include "shape_log.h"

#define relaxed memory_order_relaxed
#define acquire memory_order_acquire
#define release memory_order_release

static inline char *
slog_block(const ShapeLogArena *arena, uint32_t block)
{
	return (char *) arena + arena->blocks_offset + (size_t) block * SLOG_BLOCK_SIZE;
}

/* The nth block of a map, or SLOG_NO_BLOCK if none was attached. */
static inline uint32_t
slog_map_get(const ShapeLogArena *arena, const SlogBlockMap *map, uint64_t nth)
{
	uint32_t	dir;

	if (nth < SLOG_MAP_DIRECT)
		return atomic_load_explicit(&map->direct[nth], relaxed);
	nth -= SLOG_MAP_DIRECT;
	if (nth < (uint64_t) SLOG_MAP_INDIRECT * SLOG_DIR_FANOUT)
		dir = atomic_load_explicit(&map->indirect[nth / SLOG_DIR_FANOUT], relaxed);
	else
	{
		uint32_t	top = atomic_load_explicit(&map->double_indirect, relaxed);

		nth -= (uint64_t) SLOG_MAP_INDIRECT * SLOG_DIR_FANOUT;
		if (top == SLOG_NO_BLOCK)
			return SLOG_NO_BLOCK;
		dir = ((const uint32_t *) slog_block(arena, top))[nth / SLOG_DIR_FANOUT];
	}
	if (dir == SLOG_NO_BLOCK)
		return SLOG_NO_BLOCK;
	return ((const uint32_t *) slog_block(arena, dir))[nth % SLOG_DIR_FANOUT];
}

/* Entry k (k >= 1) of the position index; the writer wrote it. */
static inline uint64_t
slog_pos_get(const ShapeLogArena *arena, const ShapeLog *log, uint64_t k)
{
	if (k <= SLOG_POS_INLINE)
		return log->pos_inline[k - 1];
	return ((const uint64_t *) slog_block(arena, slog_map_get(arena, &log->pos_blocks,
															  k / SLOG_POS_PER_BLOCK)))
		[k % SLOG_POS_PER_BLOCK];
}

static inline SlogChunk *
slog_chunk_at(const ShapeLogArena *arena, const ShapeLog *log, uint32_t i)
{
	if (i < SLOG_CHUNKS_INLINE)
		return (SlogChunk *) &log->chunks_inline[i];
	i -= SLOG_CHUNKS_INLINE;
	return (SlogChunk *) slog_block(arena, slog_map_get(arena, &log->chunk_blocks,
														i / SLOG_CHUNKS_PER_BLOCK))
		+ i % SLOG_CHUNKS_PER_BLOCK;
}

#endif							/* SHAPE_LOG_INTERNAL_H */
