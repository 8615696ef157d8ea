/*-------------------------------------------------------------------------
 *
 * reader_epochs.c
 *		When memory that lock-free readers may still be reading can be
 *		reused: epochs announced by the readers of one process.
 *
 * The HTTP threads read shape logs without a lock while the main thread
 * appends to them, and, since logs live on disk too, while it takes the
 * blocks of their oldest bytes back from memory (slog_trim).  A reader
 * that decided a byte was in memory may still copy it when the block is
 * retired, so a retired block is given back to the arena only once every
 * reader that could have seen it has left.  This is epoch-based
 * reclamation: a global epoch, and one slot per reading thread in which
 * the thread announces the epoch it entered with, or 0 while it reads
 * nothing.  The reclaimer makes the memory unreachable (slog_trim moves
 * the log's mem_start past it), then advances the epoch: the new value is
 * its ticket.  A reader that entered before that may hold the memory, one
 * that entered after cannot; reader_epoch_passed(ticket) is true once no
 * slot announces an epoch below the ticket.
 *
 * A section is one call of a reader function of shape_log_read.c: a copy
 * of at most one response buffer, or a walk of the record headers of one
 * chunk (a response's length, a request's range), which for a chunk on
 * disk reads it from the page cache, or the disk.  Sections nest (a reader
 * function calling another), and only the outermost announces.  Its cost
 * is two stores to the thread's own slot, on its own cache line; the
 * reclaimer's check reads every claimed slot, and runs once per trim (a
 * main loop's, or a snapshot chunk's), not per read.  No reader ever
 * waits.
 *
 * The readers are threads of the main worker (its HTTP threads, and its
 * main thread when it reads a log it writes); the reclaimers are its main
 * thread and the snapshot workers, other processes that take blocks of the
 * snapshots they write back from memory.  So the slots live in shared
 * memory (reader_epochs_use, from shared_state.c); a process that has none
 * (a unit test) uses its own.  A thread claims a slot at its first section
 * and gives it back when it exits; the main worker lays the slots out again
 * when it starts, since no reader of its previous life is alive.
 *
 * Notes on synchronization
 * ------------------------
 * - Reader: load the epoch, store it in the slot, then load whatever tells
 *   it where the memory is (a log's mem_start), all seq_cst; leave with a
 *   release store of 0.  Reclaimer: store the new mem_start, advance the
 *   epoch, later load the slots, all seq_cst.  In the single order of
 *   seq_cst operations, a reader that loaded the old mem_start stored its
 *   slot before the reclaimer advanced the epoch, with an older epoch: the
 *   check sees that value until the reader's release store of 0, after
 *   which (acquire) its copies happened before the block is reused.  A
 *   reader whose slot store comes later loads the new mem_start.
 * - Slot ownership changes by CAS on `owned`; only the owning thread
 *   writes `announced`.
 *
 * IDENTIFICATION
 *	  src/contract/reader_epochs.c
 *
 *-------------------------------------------------------------------------
 */
#include "reader_epochs.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stddef.h>

#ifdef POSTGRES_H
#error "reader_epochs.c is shared by threads and must not include postgres.h"
#endif

static ReaderEpochs re_own = {.epoch = 1};
static ReaderEpochs *re = &re_own;

static _Thread_local ReaderEpochSlot *re_mine;
static _Thread_local ReaderEpochs *re_mine_in;	/* the epochs re_mine belongs to */
static _Thread_local uint32_t re_depth;

static pthread_once_t re_once = PTHREAD_ONCE_INIT;
static pthread_key_t re_key;

void
reader_epochs_init(ReaderEpochs *epochs)
{
	atomic_init(&epochs->epoch, 1);
	atomic_init(&epochs->high, 0);
	for (uint32_t i = 0; i < READER_EPOCH_SLOTS; i++)
	{
		atomic_init(&epochs->slots[i].announced, 0);
		atomic_init(&epochs->slots[i].owned, 0);
	}
}

void
reader_epochs_reset(ReaderEpochs *epochs)
{
	for (uint32_t i = 0; i < READER_EPOCH_SLOTS; i++)
	{
		atomic_store(&epochs->slots[i].announced, 0);
		atomic_store(&epochs->slots[i].owned, 0);
	}
	atomic_store(&epochs->high, 0);
}

void
reader_epochs_use(ReaderEpochs *epochs)
{
	re = epochs;
}

static void
re_thread_exit(void *slot)
{
	ReaderEpochSlot *s = slot;

	atomic_store_explicit(&s->announced, 0, memory_order_release);
	atomic_store_explicit(&s->owned, 0, memory_order_release);
}

static void
re_init_key(void)
{
	(void) pthread_key_create(&re_key, re_thread_exit);
}

/*
 * Claims a slot for this thread.  The slots outnumber the threads that
 * read logs (shape_sync.http_threads is at most 256); were they all
 * taken, the thread waits for one, as no read may go unannounced.
 */
static ReaderEpochSlot *
re_claim(void)
{
	(void) pthread_once(&re_once, re_init_key);
	for (;;)
	{
		for (uint32_t i = 0; i < READER_EPOCH_SLOTS; i++)
		{
			uint32_t	expected = 0;

			if (atomic_load_explicit(&re->slots[i].owned, memory_order_relaxed) != 0 ||
				!atomic_compare_exchange_strong_explicit(&re->slots[i].owned, &expected, 1,
														 memory_order_acq_rel,
														 memory_order_relaxed))
				continue;
			{
				uint32_t	high = atomic_load_explicit(&re->high, memory_order_relaxed);

				while (high < i + 1 &&
					   !atomic_compare_exchange_weak_explicit(&re->high, &high, i + 1,
															  memory_order_seq_cst,
															  memory_order_relaxed))
					;
			}
			(void) pthread_setspecific(re_key, &re->slots[i]);
			return &re->slots[i];
		}
		sched_yield();
	}
}

void
reader_epoch_enter(void)
{
	if (re_depth++ > 0)
		return;
	if (re_mine == NULL || re_mine_in != re)
	{
		re_mine = re_claim();
		re_mine_in = re;
	}
	atomic_store(&re_mine->announced, atomic_load(&re->epoch));
}

void
reader_epoch_exit(void)
{
	if (--re_depth > 0)
		return;
	atomic_store_explicit(&re_mine->announced, 0, memory_order_release);
}

uint64_t
reader_epoch_retire(void)
{
	return atomic_fetch_add(&re->epoch, 1) + 1;
}

bool
reader_epoch_passed(uint64_t ticket)
{
	uint32_t	high = atomic_load(&re->high);

	for (uint32_t i = 0; i < high; i++)
	{
		uint64_t	announced = atomic_load(&re->slots[i].announced);

		if (announced != 0 && announced < ticket)
			return false;
	}
	return true;
}

uint32_t
reader_epoch_slots_claimed(void)
{
	uint32_t	high = atomic_load(&re->high);
	uint32_t	n = 0;

	for (uint32_t i = 0; i < high; i++)
		n += atomic_load_explicit(&re->slots[i].owned, memory_order_relaxed);
	return n;
}
