/*-------------------------------------------------------------------------
 *
 * shape_table.c
 *		The table of shapes in shared memory: slots, pins and handles.
 *
 * A shape lives in a slot for its whole life.  The main thread of the
 * shape_sync worker claims a free slot when it creates a shape, fills in the
 * descriptive fields, and moves it to SNAPSHOTTING; the snapshot worker
 * writes the log and moves it to READY or FAILED; the main thread retires it
 * when the shape is dropped or the worker restarts.  A retired slot's log
 * blocks go back to the arena when its last reader unpins, and only then
 * does the slot become FREE again.
 *
 * A reader names a shape by (slot, generation).  Pinning checks the
 * generation after taking the pin, so a reader that raced with the slot's
 * reuse notices and backs off; it can never read a log that a newer shape
 * owns.
 *
 * Notes on synchronization
 * ------------------------
 * - `state` is written with release stores and read with acquire loads.
 *   The descriptive fields (handle, relation, where_preview, columns,
 *   relid, flags, created_at_us) are written by the main thread while the slot is FREE
 *   and unpinned, before the release store that leaves FREE; readers read
 *   them only after an acquire load of a non-FREE state.  `error_reason`,
 *   `error_number` and `error` are written by whoever fails the shape (its snapshot
 *   worker, or the main thread for a shape it can no longer serve) before
 *   its release store of FAILED, and read only after an acquire load of
 *   FAILED.
 * - A snapshot worker leaves SNAPSHOTTING only by CAS
 *   (shape_table_transition) and retiring is a CAS loop too, so a worker
 *   that finishes as its shape is retired can never make it READY again.
 * - `pins` counts readers; its top bit marks a retired slot.  Pinning is a
 *   CAS that fails once the bit is set.  Exactly one party frees the log:
 *   the retirer if there were no pins, else the unpinner that brings the
 *   count to zero.  Freeing resets the log, then release-stores FREE.
 * - `generation` changes only in shape_table_claim, on a FREE slot, by the
 *   main thread (the only claimer).
 * - `dirty` bits are set with fetch_or by writers and cleared with exchange
 *   by the main thread; a set bit only means "look at this slot".  A bit
 *   of `dirty_words` says that word of `dirty` may have bits set, so that
 *   taking the marks costs what was marked, not the number of slots (the
 *   main thread takes them at every turn of its loop).  A writer sets its
 *   slot's bit, then its word's bit with a release fetch_or; the main
 *   thread exchanges a summary word (acquire), then each word it names.  A
 *   slot marked between the two exchanges keeps its word's bit (set after
 *   the first), or is taken by the second; either way it is seen, at worst
 *   at the next turn.  A word's bit may outlive its marks: it is only a
 *   hint.
 * - Log versions.  `log_current` (release-stored by the writer, acquired by
 *   readers) names the version served.  `log_pins[v]` counts readers of
 *   version v, with SHAPE_PIN_RETIRED set once v is not served; pinning is
 *   a CAS that fails on a retired version, then re-reads `log_current`, so
 *   a reader that pinned a version being swapped out lets it go.  Whoever
 *   brings a retired version to no readers (the swapper or the last
 *   unpinner) releases its blocks, then release-stores `log_free[v]`; the
 *   writer builds a spare version again only after an acquire load of it.
 *   A reader holds a version only while it holds the slot, and lets go of
 *   the version first, so a slot freed at its last unpin has no version
 *   readers left.
 * - `last_handle_us` and `last_seen_lsn` only move forward (CAS max).
 *   `last_seen_lsn` is noted (release) only after every shape log that
 *   is past its snapshot (SLOG_SNAPSHOT_DONE) has published the
 *   transactions up to it, and read (acquire) before a reader locates its
 *   range: a range located after reading it holds every record of its
 *   shape up to it, so an up-to-date message that names it promises
 *   nothing the response did not send.  (A log before SLOG_SNAPSHOT_DONE
 *   answers no up-to-date.  The exception is a shape marked for rotation
 *   that stopped taking changes: until the main thread retires it, at the
 *   end of the decoding batch, its readers may be told so; they get 409
 *   next and start over.)
 * - `last_read_us` is stored (relaxed) by the main thread when it resolves
 *   a request, and by HTTP threads that serve one on a resolution they
 *   kept (at most every SHAPE_READ_NOTE_US), and read by SQL and eviction; it is only
 *   ever a hint for eviction.
 * - `catalog_epoch` is moved (fetch_add) by the main thread whenever
 *   something a resolution depends on may have changed: an invalidation of
 *   a served table, a role or schema, a reload, a replay.  A resolution
 *   carries the epoch read before it was made, and is reused on an HTTP
 *   thread only while the epoch is still that (acquire load against the
 *   main thread's fetch_add: seq_cst).
 * - `compactions`, `changes`, `published_us` and `route_attnum` are
 *   stored (relaxed) by the main thread, its log's writer once the shape is
 *   ready, and read by SQL and HTTP threads (metrics), each value on its
 *   own.  published_us
 *   is stored before the publish it dates, so a reader that sees the new
 *   data (acquire) sees its time, not an older one.
 * - `waiters` is changed by fetch_add/sub under the shape's wait-list lock
 *   (waiters.c) and read relaxed by SQL.
 * - `columns`, like where_preview, is written while the slot is FREE.
 * - `blocks_wanted` is raised by snapshot workers that ran out of log
 *   memory and cleared by the main thread once it made room (or could not);
 *   a worker re-raises it while it still waits.
 *
 * IDENTIFICATION
 *	  src/contract/shape_table.c
 *
 *-------------------------------------------------------------------------
 */
#include "shape_table.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#ifdef POSTGRES_H
#error "shape_table.c is shared by threads and must not include postgres.h"
#endif


#define DIRTY_WORDS(n)	(((n) + 63) / 64)

size_t
shape_table_size(uint32_t nslots)
{
	return sizeof(ShapeTable) +
		(DIRTY_WORDS(nslots) + DIRTY_WORDS(DIRTY_WORDS(nslots))) * sizeof(uint64_t) +
		64 + (size_t) nslots * sizeof(ShapeSlot);
}

ShapeTable *
shape_table_init(void *mem, uint32_t nslots, ShapeLogArena *arena)
{
	ShapeTable *table = mem;
	char	   *p = (char *) mem + sizeof(ShapeTable);

	table->nslots = nslots;
	table->claim_next = 0;
	atomic_init(&table->last_handle_us, 0);
	atomic_init(&table->last_seen_lsn, 0);
	atomic_init(&table->catalog_epoch, 0);
	atomic_init(&table->blocks_wanted, 0);
	table->arena = arena;
	table->dirty = (_Atomic uint64_t *) p;
	for (uint32_t i = 0; i < DIRTY_WORDS(nslots); i++)
		atomic_init(&table->dirty[i], 0);
	p += DIRTY_WORDS(nslots) * sizeof(uint64_t);
	table->dirty_words = (_Atomic uint64_t *) p;
	for (uint32_t i = 0; i < DIRTY_WORDS(DIRTY_WORDS(nslots)); i++)
		atomic_init(&table->dirty_words[i], 0);
	p += DIRTY_WORDS(DIRTY_WORDS(nslots)) * sizeof(uint64_t);
	p = (char *) (((uintptr_t) p + 63) & ~(uintptr_t) 63);
	table->slots = (ShapeSlot *) p;
	for (uint32_t i = 0; i < nslots; i++)
	{
		ShapeSlot  *s = &table->slots[i];

		memset(s, 0, sizeof(*s));
		atomic_init(&s->state, SHAPE_FREE);
		atomic_init(&s->generation, 0);
		atomic_init(&s->pins, SHAPE_PIN_RETIRED);	/* unpinnable while free */
		atomic_init(&s->last_read_us, 0);
		atomic_init(&s->log_current, 0);
		for (int v = 0; v < 2; v++)
		{
			atomic_init(&s->log_pins[v], SHAPE_PIN_RETIRED);
			atomic_init(&s->log_free[v], 1);
			slog_init(&s->logs[v]);
		}
	}
	return table;
}

/*
 * Claims a FREE slot for a new shape and returns its index, or SHAPE_NO_SLOT.
 * Main thread only.  The slot's generation is new; the caller fills in the
 * descriptive fields and then sets the state to SNAPSHOTTING.
 */
uint32_t
shape_table_claim(ShapeTable *table)
{
	/* next fit: the slots before the last claimed one were taken lately */
	for (uint32_t n = 0; n < table->nslots; n++)
	{
		uint32_t	i = (table->claim_next + n) % table->nslots;
		ShapeSlot  *s = &table->slots[i];

		if (atomic_load_explicit(&s->state, memory_order_acquire) != SHAPE_FREE)
			continue;
		table->claim_next = (i + 1) % table->nslots;
		atomic_fetch_add_explicit(&s->generation, 1, memory_order_relaxed);
		s->snapshot_rows = 0;
		s->snapshot_ms = 0;
		s->snapshot_file_bytes = 0;
		s->compactions = 0;
		atomic_store_explicit(&s->published_us, 0, memory_order_relaxed);
		atomic_store_explicit(&s->changes, 0, memory_order_relaxed);
		atomic_store_explicit(&s->route_attnum, 0, memory_order_relaxed);
		s->error_reason = 0;
		s->error_number = 0;
		s->error[0] = '\0';
		/* version 0 is served; version 1 is free (both were released) */
		atomic_store_explicit(&s->log_current, 0, memory_order_relaxed);
		atomic_store_explicit(&s->log_free[0], 0, memory_order_relaxed);
		atomic_store_explicit(&s->log_pins[0], 0, memory_order_relaxed);
		atomic_store_explicit(&s->log_pins[1], SHAPE_PIN_RETIRED, memory_order_relaxed);
		atomic_store_explicit(&s->pins, 0, memory_order_release);
		return i;
	}
	return SHAPE_NO_SLOT;
}

/*
 * Frees a retired slot's logs; no reader holds the slot, and so none holds
 * a version (readers let go of the version before the slot).
 */
static void
shape_table_free(ShapeTable *table, ShapeSlot *s)
{
	for (int v = 0; v < 2; v++)
	{
		if (!atomic_load_explicit(&s->log_free[v], memory_order_acquire))
		{
			slog_release(table->arena, &s->logs[v]);
			atomic_store_explicit(&s->log_free[v], 1, memory_order_release);
		}
		atomic_store_explicit(&s->log_pins[v], SHAPE_PIN_RETIRED, memory_order_relaxed);
	}
	atomic_store_explicit(&s->state, SHAPE_FREE, memory_order_release);
}

/*
 * Retires a shape: new pins fail from now on, and the log is freed when the
 * last existing pin goes.  A FAILED shape stays FAILED meanwhile, so that
 * its remaining readers still report the failure.  Main thread only; at
 * most once per claim.
 */
void
shape_table_retire(ShapeTable *table, uint32_t slot)
{
	ShapeSlot  *s = &table->slots[slot];
	uint64_t	prev;

	uint32_t	state = atomic_load_explicit(&s->state, memory_order_acquire);

	/* a CAS: a snapshot worker may be finishing the shape this instant */
	while (state != SHAPE_FAILED &&
		   !atomic_compare_exchange_weak_explicit(&s->state, &state, SHAPE_RETIRED,
												  memory_order_acq_rel, memory_order_acquire))
		;
	prev = atomic_fetch_or_explicit(&s->pins, SHAPE_PIN_RETIRED, memory_order_acq_rel);
	if (prev == 0)
		shape_table_free(table, s);
}

bool
shape_table_pin(ShapeTable *table, uint32_t slot, uint32_t generation)
{
	ShapeSlot  *s;
	uint64_t	pins;

	if (slot >= table->nslots)
		return false;
	s = &table->slots[slot];
	pins = atomic_load_explicit(&s->pins, memory_order_relaxed);
	do
	{
		if (pins & SHAPE_PIN_RETIRED)
			return false;
	} while (!atomic_compare_exchange_weak_explicit(&s->pins, &pins, pins + 1,
													memory_order_acquire,
													memory_order_relaxed));
	if (atomic_load_explicit(&s->generation, memory_order_relaxed) != generation)
	{
		shape_table_unpin(table, slot);
		return false;
	}
	return true;
}

int64_t
shape_table_unix_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/*
 * A request read the shape without the main thread (resolved_shapes.c):
 * last_read_us, which eviction consults, moves on.  Stored only when
 * SHAPE_READ_NOTE_US has passed, so that a hot shape's readers mostly only
 * read the line (a store at most every 10 ms per shape), while eviction
 * still orders reads that far apart: with a second, a shape made and read
 * again within it counted as read when made, and was evicted before shapes
 * read less recently.
 */
void
shape_table_note_read(ShapeTable *table, uint32_t slot)
{
	struct timespec ts;
	int64_t		now;

	clock_gettime(CLOCK_REALTIME_COARSE, &ts);
	now = (int64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
	if (now - atomic_load_explicit(&table->slots[slot].last_read_us, memory_order_relaxed) >=
		SHAPE_READ_NOTE_US)
		atomic_store_explicit(&table->slots[slot].last_read_us, now, memory_order_relaxed);
}

void
shape_table_unpin(ShapeTable *table, uint32_t slot)
{
	ShapeSlot  *s = &table->slots[slot];
	uint64_t	prev = atomic_fetch_sub_explicit(&s->pins, 1, memory_order_acq_rel);

	if (prev == (SHAPE_PIN_RETIRED | 1))
		shape_table_free(table, s);
}

ShapeState
shape_table_state(const ShapeTable *table, uint32_t slot)
{
	return (ShapeState) atomic_load_explicit(&table->slots[slot].state,
											 memory_order_acquire);
}

void
shape_table_set_state(ShapeTable *table, uint32_t slot, ShapeState state)
{
	atomic_store_explicit(&table->slots[slot].state, state, memory_order_release);
}

/*
 * Moves a slot from `from` to `to` unless someone else moved it first (a
 * retired shape stays retired): how a snapshot worker finishes or fails
 * its shape.  Returns whether it moved.
 */
bool
shape_table_transition(ShapeTable *table, uint32_t slot, ShapeState from, ShapeState to)
{
	uint32_t	expected = from;

	return atomic_compare_exchange_strong_explicit(&table->slots[slot].state, &expected, to,
												   memory_order_acq_rel,
												   memory_order_acquire);
}

/* ------------------------------------------------------ log versions */

/*
 * Pins the version of a pinned slot's log that is served now.  The version
 * is re-read after the pin: one swapped out meanwhile is let go and the
 * new one pinned, so a reader never starts reading a retired version.
 */
const ShapeLog *
shape_table_log_pin(ShapeTable *table, uint32_t slot, uint32_t *version)
{
	ShapeSlot  *s = &table->slots[slot];

	for (;;)
	{
		uint32_t	v = atomic_load_explicit(&s->log_current, memory_order_acquire);
		uint64_t	pins = atomic_load_explicit(&s->log_pins[v], memory_order_relaxed);
		bool		pinned = false;

		while (!(pins & SHAPE_PIN_RETIRED))
		{
			if (atomic_compare_exchange_weak_explicit(&s->log_pins[v], &pins, pins + 1,
													  memory_order_acquire,
													  memory_order_relaxed))
			{
				pinned = true;
				break;
			}
		}
		if (!pinned)
			continue;			/* swapped out just now: read log_current again */
		if (atomic_load_explicit(&s->log_current, memory_order_acquire) == v)
		{
			*version = v;
			return &s->logs[v];
		}
		shape_table_log_unpin(table, slot, v);
	}
}

/* The last reader of a retired version releases its blocks. */
void
shape_table_log_unpin(ShapeTable *table, uint32_t slot, uint32_t version)
{
	ShapeSlot  *s = &table->slots[slot];
	uint64_t	prev = atomic_fetch_sub_explicit(&s->log_pins[version], 1, memory_order_acq_rel);

	if (prev == (SHAPE_PIN_RETIRED | 1))
	{
		slog_release(table->arena, &s->logs[version]);
		atomic_store_explicit(&s->log_free[version], 1, memory_order_release);
	}
}

/* The version the writer appends to and readers are served from. */
ShapeLog *
shape_table_log(ShapeTable *table, uint32_t slot)
{
	ShapeSlot  *s = &table->slots[slot];

	return &s->logs[atomic_load_explicit(&s->log_current, memory_order_relaxed)];
}

/*
 * The other version, emptied for compaction to build, or NULL while
 * readers of its previous life still hold it.  The log's writer only.
 */
ShapeLog *
shape_table_spare_log(ShapeTable *table, uint32_t slot)
{
	ShapeSlot  *s = &table->slots[slot];
	uint32_t	spare = 1 - atomic_load_explicit(&s->log_current, memory_order_relaxed);

	if (!atomic_load_explicit(&s->log_free[spare], memory_order_acquire))
		return NULL;
	atomic_store_explicit(&s->log_free[spare], 0, memory_order_relaxed);
	slog_init(&s->logs[spare]);
	return &s->logs[spare];
}

/*
 * Whether the version that is not served is free: no reader of its last
 * life holds it any more (and compaction is not building it).  Any thread.
 */
bool
shape_table_previous_log_free(const ShapeTable *table, uint32_t slot)
{
	const ShapeSlot *s = &table->slots[slot];
	uint32_t	previous = 1 - atomic_load_explicit(&s->log_current, memory_order_acquire);

	return atomic_load_explicit(&s->log_free[previous], memory_order_acquire) != 0;
}

/* Gives back what compaction built, when it gave up. */
void
shape_table_drop_spare_log(ShapeTable *table, uint32_t slot)
{
	ShapeSlot  *s = &table->slots[slot];
	uint32_t	spare = 1 - atomic_load_explicit(&s->log_current, memory_order_relaxed);

	slog_release(table->arena, &s->logs[spare]);
	atomic_store_explicit(&s->log_free[spare], 1, memory_order_release);
}

/*
 * Serves the spare version (published by its builder) from now on, and
 * retires the old one: freed now if nobody reads it, else by its last
 * reader.
 */
void
shape_table_swap_log(ShapeTable *table, uint32_t slot)
{
	ShapeSlot  *s = &table->slots[slot];
	uint32_t	old = atomic_load_explicit(&s->log_current, memory_order_relaxed);
	uint64_t	prev;

	atomic_store_explicit(&s->log_pins[1 - old], 0, memory_order_relaxed);
	atomic_store_explicit(&s->log_current, 1 - old, memory_order_release);
	prev = atomic_fetch_or_explicit(&s->log_pins[old], SHAPE_PIN_RETIRED, memory_order_acq_rel);
	if (prev == 0)
	{
		slog_release(table->arena, &s->logs[old]);
		atomic_store_explicit(&s->log_free[old], 1, memory_order_release);
	}
}

/* Blocks both versions hold (a hint, read by the writer). */
uint32_t
shape_table_log_blocks(const ShapeTable *table, uint32_t slot)
{
	const ShapeSlot *s = &table->slots[slot];

	return s->logs[0].blocks_held + s->logs[1].blocks_held;
}

void
shape_table_mark_dirty(ShapeTable *table, uint32_t slot)
{
	uint32_t	word = slot / 64;

	atomic_fetch_or_explicit(&table->dirty[word], (uint64_t) 1 << (slot % 64),
							 memory_order_release);
	atomic_fetch_or_explicit(&table->dirty_words[word / 64], (uint64_t) 1 << (word % 64),
							 memory_order_release);
}

/*
 * Collects up to `max` dirty slots into `slots`, clearing their marks, and
 * returns how many.  Marks past `max` stay set for the next call.
 */
uint32_t
shape_table_take_dirty(ShapeTable *table, uint32_t *slots, uint32_t max)
{
	uint32_t	n = 0;

	for (uint32_t sw = 0; sw < DIRTY_WORDS(DIRTY_WORDS(table->nslots)); sw++)
	{
		uint64_t	words;

		if (atomic_load_explicit(&table->dirty_words[sw], memory_order_relaxed) == 0)
			continue;
		words = atomic_exchange_explicit(&table->dirty_words[sw], 0, memory_order_acquire);
		while (words != 0)
		{
			uint32_t	w = sw * 64 + (uint32_t) __builtin_ctzll(words);
			uint64_t	bits;

			words &= words - 1;
			bits = atomic_exchange_explicit(&table->dirty[w], 0, memory_order_acquire);
			while (bits != 0)
			{
				int			b = __builtin_ctzll(bits);

				bits &= bits - 1;
				if (n == max)
				{
					/* for the next call: the slot's mark, then its word's */
					atomic_fetch_or_explicit(&table->dirty[w], (uint64_t) 1 << b,
											 memory_order_relaxed);
					atomic_fetch_or_explicit(&table->dirty_words[sw], (uint64_t) 1 << (w % 64),
											 memory_order_release);
					continue;
				}
				slots[n++] = w * 64 + (uint32_t) b;
			}
		}
	}
	return n;
}

void
shape_table_new_handle(ShapeTable *table, uint32_t hash, int64_t now_us, char *out)
{
	int64_t		last = atomic_load_explicit(&table->last_handle_us, memory_order_relaxed);
	int64_t		next;

	do
		next = now_us > last ? now_us : last + 1;
	while (!atomic_compare_exchange_weak_explicit(&table->last_handle_us, &last, next,
												  memory_order_relaxed,
												  memory_order_relaxed));
	snprintf(out, SHAPE_HANDLE_LEN, "%u-%lld", hash, (long long) next);
}

void
shape_table_note_lsn(ShapeTable *table, uint64_t lsn)
{
	uint64_t	cur = atomic_load_explicit(&table->last_seen_lsn, memory_order_relaxed);

	while (cur < lsn &&
		   !atomic_compare_exchange_weak_explicit(&table->last_seen_lsn, &cur, lsn,
												  memory_order_release,
												  memory_order_relaxed))
		;
}

