/*-------------------------------------------------------------------------
 *
 * shape_eviction.h
 *		The shapes in the order they were last read, and their eviction.
 *
 * IDENTIFICATION
 *	  src/pg/worker/shape_eviction.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SHAPE_SYNC_SHAPE_EVICTION_H
#define SHAPE_SYNC_SHAPE_EVICTION_H

#include "postgres.h"

#include "utils/timestamp.h"

#include "server_metrics.h"

/* How a shape is evicted: the registry's registry_rotate. */
typedef void (*EvictionRotate) (uint32 slot, SmRotationCause cause);

/* The registry starts (its memory context) and stops. */
extern void eviction_start(uint32 nslots, MemoryContext context, EvictionRotate rotate);
extern void eviction_stop(void);

/* The shape was just read (or made): it moves to the newest end. */
extern void eviction_touch(uint32 slot);

/* The shape is dropped: it leaves the list. */
extern void eviction_forget(uint32 slot);

/*
 * Evicts the least recently read shape not in active use.  Returns the
 * log blocks it held, or -1 if every shape is in active use.
 */
extern int64 eviction_evict_oldest(SmEvictionCause cause, const char *why);

/*
 * Main loop: idle shapes go (not during a replay), the arena keeps its
 * reserve, evictions are logged once a minute at most.
 */
extern void eviction_maintain(TimestampTz now, bool replaying);

#endif							/* SHAPE_SYNC_SHAPE_EVICTION_H */
