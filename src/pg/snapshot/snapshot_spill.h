/*-------------------------------------------------------------------------
 *
 * snapshot_spill.h
 *		A snapshot larger than the log memory: written to its shape's data
 *		file as it is taken, its closed chunks leave the arena.
 *
 * IDENTIFICATION
 *	  src/pg/snapshot/snapshot_spill.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SNAPSHOT_SPILL_H
#define SNAPSHOT_SPILL_H

#include "postgres.h"

#include "shape_table.h"

/* Before the first row: the shape's data file is to be written (durable logs). */
extern void snapshot_spill_begin(ShapeTable *table, uint32 slot, ShapeLog *log);

/*
 * After each closed chunk: writes it, and trims when memory runs low or
 * would not hold the next chunk (`chunk_bytes` of messages).
 */
extern void snapshot_spill_chunk(int64 chunk_bytes);

/* An append found the arena full: true when trimming gave blocks back. */
extern bool snapshot_spill_make_room(void);

/*
 * The snapshot is complete: what the file holds is handed to the main
 * thread (ShapeSlot.snapshot_file_bytes), before the shape is READY.
 */
extern void snapshot_spill_finish(void);

/* ... and the shape became READY: the main thread owns the file now. */
extern void snapshot_spill_handed_over(void);

/*
 * The snapshot failed, was dropped, or its worker exits: the blocks come
 * back, the descriptor closes (the main thread removes the file).
 */
extern void snapshot_spill_abort(void);

#endif							/* SNAPSHOT_SPILL_H */
