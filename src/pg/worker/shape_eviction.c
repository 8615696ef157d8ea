/*-------------------------------------------------------------------------
 *
 * shape_eviction.c
 *		The shapes in the order they were last read, and their eviction.
 *
 * Shapes sit on a list in the order they were last read (every request
 * the main thread resolves for a shape moves it to the head: registry.c
 * calls eviction_touch).  A shape is in active use while its snapshot
 * runs or a request holds it (a parked live request, an SSE stream, a
 * response being sent: its pins); every other shape may be evicted
 * (rotated: its clients get 409 must-refetch and its log memory goes back
 * to the arena once its last reader lets go).  Four things evict, always
 * from the least recently read end, moving shapes in active use to the
 * head as they pass, so that each walk costs what it evicts plus what it
 * passes once:
 *	- a shape not read for shape_sync.shape_idle_timeout (checked each second);
 *	- a new shape finding shape_sync.max_shapes reached (registry.c);
 *	- the shapes' data files passing shape_sync.log_disk_budget (checked
 *	  each turn of the main loop; the files of an evicted shape go with it);
 *	- the arena's free memory falling under a reserve (a sixteenth of it),
 *	  or a snapshot worker asking for blocks (ShapeTable.blocks_wanted), so
 *	  that a growing log rarely finds the arena full (and is then rotated
 *	  itself, never a bystander).  Before evicting for room, shapes on disk
 *	  give their written logs back, oldest read first (log_trim.c), and
 *	  stay: only what that cannot free is evicted.
 * With shape_sync.shape_eviction = none only idle shapes go, and a full
 * server refuses new shapes with 503.  A new shape is refused only when
 * every held shape is in active use.
 *
 * Requests for a shape that their connection, or any other, resolved
 * before are served without the main thread (resolved_shapes.c) and note
 * the read in the slot's last_read_us only; a walk that meets such a shape moves it to the
 * newest end, as if this thread had seen the read.
 *
 * Everything here runs on the main worker's main thread.
 *
 * IDENTIFICATION
 *	  src/pg/worker/shape_eviction.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <stdatomic.h>

#include "guc.h"
#include "log_files.h"
#include "log_trim.h"
#include "shape_eviction.h"
#include "shared_state.h"

#define EVICTION_LOG_EVERY_MS	60000

/* A shape's place on the list. */
typedef struct EvictionEntry
{
	int32		lru_newer;		/* the shape read after this one, or -1 */
	int32		lru_older;		/* ... before it, or -1 */
	int64		touched_us;		/* last_read_us as of its place on the list */
} EvictionEntry;

static EvictionEntry *ev_entries;	/* by slot */
static int32 ev_newest = -1;
static int32 ev_oldest = -1;
static EvictionRotate ev_rotate;
static TimestampTz ev_last_idle_sweep;
static TimestampTz ev_evictions_logged_at;
static TimestampTz ev_room_retry_at;	/* ev_make_room found nothing to evict */
static TimestampTz ev_disk_retry_at;	/* ev_keep_disk_budget found nothing either */
static uint64 ev_evictions_unlogged;	/* for room, since the last LOG */

static ShapeTable *
ev_table(void)
{
	return shape_sync_shared->table;
}

void
eviction_start(uint32 nslots, MemoryContext context, EvictionRotate rotate)
{
	ev_entries = MemoryContextAlloc(context, sizeof(EvictionEntry) * nslots);
	for (uint32 i = 0; i < nslots; i++)
	{
		ev_entries[i].lru_newer = ev_entries[i].lru_older = -1;
		ev_entries[i].touched_us = 0;
	}
	ev_newest = ev_oldest = -1;
	ev_rotate = rotate;
}

void
eviction_stop(void)
{
	/* its memory is the registry's context */
	ev_entries = NULL;
}

/* ------------------------------------------------------------ eviction */

/*
 * Whether a shape is in active use: its snapshot runs, or a request holds
 * it (parked live requests, SSE streams and responses being sent all do).
 */
static bool
ev_in_active_use(uint32 slot)
{
	ShapeTable *table = ev_table();

	if (shape_table_state(table, slot) == SHAPE_SNAPSHOTTING)
		return true;
	return (atomic_load_explicit(&table->slots[slot].pins, memory_order_relaxed) &
			~SHAPE_PIN_RETIRED) > 0;
}

/*
 * Whether the shape was read since it took its place on the list: requests
 * for it that a connection resolved before are served without this thread
 * (resolved_shapes.c) and note the read in the slot only.  Eviction moves
 * such a shape to the newest end, as if this thread had seen the read.
 */
static bool
ev_read_since_touched(uint32 slot)
{
	return atomic_load_explicit(&ev_table()->slots[slot].last_read_us, memory_order_relaxed) >
		ev_entries[slot].touched_us;
}

void
eviction_forget(uint32 slot)
{
	EvictionEntry *e = &ev_entries[slot];

	if (e->lru_newer >= 0)
		ev_entries[e->lru_newer].lru_older = e->lru_older;
	else if (ev_newest == (int32) slot)
		ev_newest = e->lru_older;
	if (e->lru_older >= 0)
		ev_entries[e->lru_older].lru_newer = e->lru_newer;
	else if (ev_oldest == (int32) slot)
		ev_oldest = e->lru_newer;
	e->lru_newer = e->lru_older = -1;
}

/* The shape was just read (or made): it moves to the newest end. */
void
eviction_touch(uint32 slot)
{
	EvictionEntry *e = &ev_entries[slot];

	if (ev_newest != (int32) slot)
	{
		eviction_forget(slot);
		e->lru_older = ev_newest;
		if (ev_newest >= 0)
			ev_entries[ev_newest].lru_newer = (int32) slot;
		ev_newest = (int32) slot;
		if (ev_oldest < 0)
			ev_oldest = (int32) slot;
	}
	e->touched_us = shape_table_unix_us();
	atomic_store_explicit(&ev_table()->slots[slot].last_read_us, e->touched_us,
						  memory_order_relaxed);
}

static void
ev_evict(uint32 slot, SmEvictionCause cause, const char *why)
{
	ShapeSlot  *s = &ev_table()->slots[slot];

	ereport(DEBUG1,
			(errmsg_internal("shape %s on %s evicted: %s", s->handle, s->relation, why)));
	if (cause != SM_EVICTION_IDLE)
		ev_evictions_unlogged++;	/* for room */
	sm_add(SM_EVICTIONS, cause, 1);
	ev_rotate(slot, SM_ROTATION_EVICTED);
}

/*
 * Evicts the least recently read shape not in active use; those in active
 * use that it passes count as read now, and those read on an HTTP thread
 * since they took their place (ev_read_since_touched) take their place
 * anew, at the newest end, where the walk comes to them again.  Returns
 * the log blocks the victim held (they return to the arena at its last
 * unpin), or -1 if every shape is in active use.
 */
/*
 * The least recently read shape not in active use; those in active use
 * that the walk passes count as read now, and those read on an HTTP
 * thread since they took their place (ev_read_since_touched) take their
 * place anew, at the newest end, where the walk comes to them again.
 * -1 if every shape is in active use.
 */
static int32
ev_oldest_idle(void)
{
	int32		slot = ev_oldest;
	uint32		passes = 2 * ev_table()->nslots;	/* those read meanwhile come round again */

	while (slot >= 0 && passes-- > 0)
	{
		int32		newer = ev_entries[slot].lru_newer;

		if (!ev_in_active_use((uint32) slot) && !ev_read_since_touched((uint32) slot))
			return slot;
		eviction_touch((uint32) slot);
		slot = newer;
	}
	return -1;
}

int64
eviction_evict_oldest(SmEvictionCause cause, const char *why)
{
	int32		slot = ev_oldest_idle();
	int64		blocks;

	if (slot < 0)
		return -1;
	blocks = shape_table_log_blocks(ev_table(), (uint32) slot);
	ev_evict((uint32) slot, cause, why);
	return blocks;
}

/*
 * Keeps the shapes' data files within their share of
 * shape_sync.log_disk_budget (the journal has the rest), by evicting the
 * least recently read shapes not in active use (the others count as read
 * now, as for memory).  A walk that finds every shape in use waits a
 * second before the next.
 */
static void
ev_keep_disk_budget(void)
{
	uint64		budget = log_files_data_budget();
	uint64		used = log_files_disk_bytes();

	if (budget == 0 || used <= budget || shape_sync_shape_eviction != SHAPE_EVICTION_LRU ||
		GetCurrentTimestamp() < ev_disk_retry_at)
		return;
	while (used > budget)
	{
		int32		slot = ev_oldest_idle();
		uint64		bytes;

		if (slot < 0)
		{
			ev_disk_retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), 1000);
			return;
		}
		bytes = log_files_shape_disk_bytes((uint32) slot);
		ev_evict((uint32) slot, SM_EVICTION_LOG_DISK,
				 "the shape logs' files reached \"shape_sync.log_disk_budget\"");
		/* its files go now, not when the rotation is done: the next turn sees them gone */
		log_files_forget((uint32) slot);
		used -= Min(used, bytes);
	}
}

/* Drops the shapes nobody read for shape_sync.shape_idle_timeout. */
static void
ev_evict_idle(void)
{
	ShapeTable *table = ev_table();
	int64		cutoff = shape_table_unix_us() - (int64) shape_sync_shape_idle_timeout * USECS_PER_SEC;
	int32		slot = ev_oldest;
	uint32		passes = table->nslots;

	while (slot >= 0 && passes-- > 0)
	{
		int32		newer = ev_entries[slot].lru_newer;

		if (ev_read_since_touched((uint32) slot))
		{
			eviction_touch((uint32) slot);	/* read on another thread meanwhile */
			slot = newer;
			continue;
		}
		if (atomic_load_explicit(&table->slots[slot].last_read_us, memory_order_relaxed) >= cutoff)
			break;
		if (ev_in_active_use((uint32) slot))
			eviction_touch((uint32) slot);
		else
			ev_evict((uint32) slot, SM_EVICTION_IDLE, "not read for shape_sync.shape_idle_timeout");
		slot = newer;
	}
}

/*
 * Keeps a reserve of free log memory, and gives a waiting snapshot what it
 * asks for, by evicting the least recently read shapes.
 */
static void
ev_make_room(void)
{
	ShapeTable *table = ev_table();
	ShapeLogArena *arena = table->arena;
	uint32		reserve = Max(arena->nblocks / 16, 4);
	uint32		wanted = atomic_load_explicit(&table->blocks_wanted, memory_order_acquire);
	/* with the blocks trimmed a moment ago: they are on their way back */
	int64		free_blocks = slog_arena_free_blocks(arena) + log_trim_pending_blocks();
	int64		target;

	if (free_blocks >= reserve && (wanted == 0 || free_blocks >= wanted + reserve / 2))
	{
		if (wanted != 0)
			atomic_store_explicit(&table->blocks_wanted, 0, memory_order_relaxed);
		return;
	}
	if (wanted == 0 && GetCurrentTimestamp() < ev_room_retry_at)
	{
		atomic_store_explicit(&table->blocks_wanted, 0, memory_order_relaxed);
		return;
	}
	target = Max((int64) reserve * 2, (int64) wanted + reserve);
	/* first what shapes on disk can give back: they stay (log_trim.c) */
	for (int32 slot = ev_oldest; slot >= 0 && free_blocks < target;
		 slot = ev_entries[slot].lru_newer)
		free_blocks += log_trim_whole_shape((uint32) slot);
	if (free_blocks < target && shape_sync_shape_eviction != SHAPE_EVICTION_LRU)
		ev_room_retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), 1000);
	if (shape_sync_shape_eviction != SHAPE_EVICTION_LRU)
	{
		atomic_store_explicit(&table->blocks_wanted, 0, memory_order_relaxed);
		return;
	}
	/* evict until what the victims hold would reach the target */
	while (free_blocks < target)
	{
		int64		freed = eviction_evict_oldest(SM_EVICTION_LOG_MEMORY,
											 "the shape log memory (\"shape_sync.log_memory\") is nearly full");

		if (freed < 0)
		{
			/* all in use: a walk of every shape, not again for a second */
			ev_room_retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), 1000);
			break;
		}
		free_blocks += freed;
	}
	atomic_store_explicit(&table->blocks_wanted, 0, memory_order_relaxed);
}

/* Says, once a minute at most, how many shapes were evicted to make room. */
static void
ev_log_evictions(TimestampTz now)
{
	if (ev_evictions_unlogged == 0 ||
		!TimestampDifferenceExceeds(ev_evictions_logged_at, now, EVICTION_LOG_EVERY_MS))
		return;
	ereport(LOG,
			(errmsg_plural("shape_sync evicted %llu least recently read shape to make room for others",
						   "shape_sync evicted %llu least recently read shapes to make room for others",
						   ev_evictions_unlogged, (unsigned long long) ev_evictions_unlogged),
			 errdetail("\"shape_sync.max_shapes\" (%d), \"shape_sync.log_memory\" (%d MB) or \"shape_sync.log_disk_budget\" (%d MB) was reached; their clients refetch.",
					   shape_sync_max_shapes, shape_sync_log_memory, shape_sync_log_disk_budget),
			 errhint("Consider increasing them if evicted shapes are asked for again.")));
	ev_evictions_unlogged = 0;
	ev_evictions_logged_at = now;
}

void
eviction_maintain(TimestampTz now, bool replaying)
{
	if (!replaying && shape_sync_shape_idle_timeout > 0 &&
		TimestampDifferenceExceeds(ev_last_idle_sweep, now, 1000))
	{
		ev_evict_idle();
		ev_last_idle_sweep = now;
	}
	ev_make_room();
	ev_keep_disk_budget();
	ev_log_evictions(now);
}
