/*-------------------------------------------------------------------------
 *
 * log_trim.h
 *		Shape logs larger than memory: their written chunks leave the
 *		arena, and their blocks come back once no reader holds them.
 *
 * IDENTIFICATION
 *	  src/pg/worker/log_trim.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef LOG_TRIM_H
#define LOG_TRIM_H

#include "postgres.h"

#include "shape_log.h"

/* Main loop: gives back blocks readers let go, trims when memory runs low. */
extern void log_trim_step(void);

/* The worker stops, its HTTP threads joined: every trimmed block goes back. */
extern void log_trim_shutdown(void);

/*
 * Memory is short: the shape's whole written log leaves memory, open chunk
 * included; the blocks taken (they come back once its readers moved on).
 */
extern uint32 log_trim_whole_shape(uint32 slot);

/*
 * During a transaction's replay, memory short: the shape's closed chunks,
 * published or not, leave memory as far as its file holds them
 * (log_files_write_ahead); the blocks taken.
 */
extern uint32 log_trim_ahead(uint32 slot);

/* The trimmed blocks whose readers moved on, back to the arena: how many. */
extern uint32 log_trim_give_back(void);

/* Blocks trimmed that come back once their readers moved on. */
extern uint32 log_trim_pending_blocks(void);

/* Whether the arena is low enough on free blocks that logs should trim. */
extern bool log_trim_wanted(void);

/* Whether log_trim_step would trim now (it may skip a walk just made). */
extern bool log_trim_due(void);

/*
 * A log being loaded at start, not yet published (no reader can hold its
 * blocks): its bytes up to `upto`, held by the file at `path`, leave
 * memory now, when it runs low.  Cheap when it does not: call it after
 * each record.
 */
extern void log_trim_loading(ShapeLog *log, const char *path, uint64 upto);

#endif							/* LOG_TRIM_H */
