/*-------------------------------------------------------------------------
 *
 * subset_results.c
 *		Where subset snapshots leave their answers, in shared memory.
 *
 * A subset request (GET with subset__* parameters, or POST /v1/shape) is
 * answered by a query that a snapshot worker runs (subset_query.c), not by
 * the shape's log.  The worker writes the answer into a cell here: a
 * ShapeLog of its own, whose blocks come from the shape log arena, so that
 * the HTTP thread copies the body out exactly as it copies a shape's log,
 * and so that subsets count against shape_sync.log_memory like everything
 * else the server holds for clients.
 *
 * A cell has up to two holders, counted in `refs`:
 *	- the request, from subset_claim on its HTTP thread (none free: the
 *	  request gets 503) until its connection is done with it, however it
 *	  ended (shape_conn_free);
 *	- the job, from the main thread's subset_hold_for_job, just before it
 *	  queues the job, until the worker finished it, or found it stale.
 * Whoever lets go last gives the log's blocks back and frees the cell.  So
 * a request that gave up (its deadline passed, its client left, the server
 * stops) never frees a cell a worker still writes, and a job whose request
 * is gone still frees its cell.  `ticket` tells one use of a cell from the
 * next, and `done` says which use the worker finished.
 *
 * Claims start where the last one left off, so that a claim costs one step
 * while cells are free, and at most SUBSET_RESULTS_MAX when all are taken.
 * One client (an address, an IPv6 /64, or behind a trusted proxy the
 * client it forwards for: ShapeRequest.client_key) holds at most
 * SUBSET_PER_CLIENT_MAX cells, counted over the cells (a fixed bound) at
 * each claim, so that one client's subsets leave cells for others.  The
 * count is a snapshot: claims racing from one client may pass it by a
 * few, one per HTTP thread at most.
 *
 * Notes on synchronization
 * ------------------------
 * - A cell is claimed by CAS of `refs` from 0 to 1, which acquires: the
 *   last holder's release (below) happens-before, so the log it gave back
 *   is empty.  The claimer then moves `ticket` on (only a holder writes
 *   it, and only the claimer while refs is 1).
 * - The job's hold is added (relaxed: the request's hold keeps the cell
 *   alive) before the job is queued; the queue's release/acquire pair
 *   hands the cell to the worker.
 * - The worker writes the log and `outcome`, then stores `done` = ticket
 *   with release; readers load `done` with acquire before they read
 *   `outcome` or the log, which are then complete and never written again
 *   until the cell is freed.
 * - `client` is written by the claimer after its CAS and reset by the
 *   last holder, both relaxed: the per-client count reads it as a hint.
 * - `abandoned` is a hint, stored and loaded relaxed: the main thread
 *   names a use whose request it answered already, and the worker stops
 *   the job when it sees it (its answer is then never read).  It is reset
 *   with `done` by the last holder.
 * - Holds are let go with an acq_rel decrement; the last holder (refs
 *   read as 1, with acquire, from the other's decrement) sees every other
 *   holder's reads and writes, resets the log and `done`, and only then
 *   stores refs = 0 with release, which the next claimer's CAS acquires.
 *   While refs is 1 no one else can add a hold: the request's hold is let
 *   go only after the main thread handed it back, and the job's hold is
 *   added only while the request's is held.
 *
 * IDENTIFICATION
 *	  src/contract/subset_results.c
 *
 *-------------------------------------------------------------------------
 */
#include "subset_results.h"

#include <string.h>

#ifdef POSTGRES_H
#error "subset_results.c is shared by threads and processes and must not include postgres.h"
#endif

void
subset_results_init(SubsetResults *r)
{
	memset(r, 0, sizeof(*r));
	for (int i = 0; i < SUBSET_RESULTS_MAX; i++)
		slog_init(&r->cells[i].log);
}

int
subset_claim(SubsetResults *r, uint64_t client, uint32_t *ticket)
{
	uint32_t	start = atomic_fetch_add_explicit(&r->next_claim, 1, memory_order_relaxed);

	if (client != 0)
	{
		int			held = 0;

		for (int i = 0; i < SUBSET_RESULTS_MAX; i++)
			held += atomic_load_explicit(&r->cells[i].refs, memory_order_relaxed) != 0 &&
				atomic_load_explicit(&r->cells[i].client, memory_order_relaxed) == client;
		if (held >= SUBSET_PER_CLIENT_MAX)
			return SUBSET_CLAIM_CLIENT_FULL;
	}
	for (uint32_t n = 0; n < SUBSET_RESULTS_MAX; n++)
	{
		int			i = (int) ((start + n) % SUBSET_RESULTS_MAX);
		SubsetCell *c = &r->cells[i];
		uint32_t	expected = 0;

		if (atomic_load_explicit(&c->refs, memory_order_relaxed) != 0)
			continue;
		if (!atomic_compare_exchange_strong_explicit(&c->refs, &expected, 1,
													 memory_order_acquire,
													 memory_order_relaxed))
			continue;
		/* never 0, which `done` uses for "not finished" */
		*ticket = atomic_load_explicit(&c->ticket, memory_order_relaxed) + 1;
		if (*ticket == 0)
			*ticket = 1;
		atomic_store_explicit(&c->ticket, *ticket, memory_order_relaxed);
		atomic_store_explicit(&c->client, client, memory_order_relaxed);
		return i;
	}
	return SUBSET_CLAIM_FULL;
}

void
subset_hold_for_job(SubsetResults *r, int cell)
{
	atomic_fetch_add_explicit(&r->cells[cell].refs, 1, memory_order_relaxed);
}

void
subset_abandon_job(SubsetResults *r, int cell, uint32_t ticket)
{
	atomic_store_explicit(&r->cells[cell].abandoned, ticket, memory_order_relaxed);
}

bool
subset_abandoned(SubsetResults *r, int cell, uint32_t ticket)
{
	return atomic_load_explicit(&r->cells[cell].abandoned, memory_order_relaxed) == ticket;
}

void
subset_finish(SubsetResults *r, int cell, uint32_t ticket, const SubsetOutcome *outcome)
{
	SubsetCell *c = &r->cells[cell];

	if (outcome != NULL)
	{
		c->outcome = *outcome;
		c->outcome.field[SUBSET_FIELD_LEN - 1] = '\0';
	}
	else
		memset(&c->outcome, 0, sizeof(c->outcome));
	atomic_store_explicit(&c->done, ticket, memory_order_release);
}

bool
subset_finished(SubsetResults *r, int cell, uint32_t ticket, SubsetOutcome *outcome)
{
	SubsetCell *c = &r->cells[cell];

	if (atomic_load_explicit(&c->done, memory_order_acquire) != ticket)
		return false;
	*outcome = c->outcome;
	return true;
}

/*
 * Whether the job of this use is done with the cell, for a caller that no
 * longer holds it (the request gave up): finished, or the cell was freed,
 * or it was claimed again since.
 */
bool
subset_job_gone(SubsetResults *r, int cell, uint32_t ticket)
{
	SubsetCell *c = &r->cells[cell];

	return atomic_load_explicit(&c->done, memory_order_acquire) == ticket ||
		atomic_load_explicit(&c->refs, memory_order_acquire) == 0 ||
		atomic_load_explicit(&c->ticket, memory_order_relaxed) != ticket;
}

void
subset_release(SubsetResults *r, ShapeLogArena *arena, int cell)
{
	SubsetCell *c = &r->cells[cell];
	uint32_t	refs = atomic_load_explicit(&c->refs, memory_order_acquire);

	/* the last holder resets the cell before it lets refs reach 0 */
	for (;;)
	{
		if (refs == 1)
		{
			slog_release(arena, &c->log);
			atomic_store_explicit(&c->done, 0, memory_order_relaxed);
			atomic_store_explicit(&c->abandoned, 0, memory_order_relaxed);
			atomic_store_explicit(&c->client, 0, memory_order_relaxed);
			memset(&c->outcome, 0, sizeof(c->outcome));
			/* no one else holds it: refs is ours to store */
			atomic_store_explicit(&c->refs, 0, memory_order_release);
			return;
		}
		if (atomic_compare_exchange_weak_explicit(&c->refs, &refs, refs - 1,
												  memory_order_acq_rel,
												  memory_order_acquire))
			return;
	}
}

uint32_t
subset_cells_in_use(SubsetResults *r)
{
	uint32_t	n = 0;

	for (int i = 0; i < SUBSET_RESULTS_MAX; i++)
		n += atomic_load_explicit(&r->cells[i].refs, memory_order_relaxed) != 0;
	return n;
}
