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

/* Whether the arena is low enough on free blocks that logs should trim. */
extern bool log_trim_wanted(void);

/*
 * A log being loaded at start, not yet published (no reader can hold its
 * blocks): its closed chunks up to `upto`, held by the file at `path`,
 * leave memory now, when it runs low.
 */
extern void log_trim_loading(ShapeLog *log, const char *path, uint64 upto);

#endif							/* LOG_TRIM_H */
