/*-------------------------------------------------------------------------
 *
 * admission.c
 *		Admission slots: concurrent requests per kind, in shared memory.
 *
 * As in Electric, the kind follows whether the server holds what a
 * request asks for: `initial` while it makes a shape or waits for a
 * snapshot, `existing` otherwise, and each kind has a limit
 * (shape_sync.max_concurrent_initial, shape_sync.max_concurrent_existing).
 * A request takes a slot before any work (existing, or initial for one
 * without a handle when existing is full) and holds one for its whole
 * life: long-poll hold and response streaming included.  An existing slot
 * is demoted, within the initial limit, when the request turns out to wait
 * for its shape's snapshot, and an initial one promoted once the shape has
 * what the request asks for (shape_serve.c); the main thread asks
 * admission_would_admit before it makes a shape for a request that holds
 * no initial slot (registry.c).  The slot is given
 * back in exactly one place, when the request's state is freed by
 * libmicrohttpd's completion callback, which runs once for every request
 * however it ends: done, client abort, error, timeout, reap or shutdown.
 *
 * The counters live in shared memory so that SQL (the view
 * shape_sync.admission) sees them live.
 *
 * Notes on synchronization
 * ------------------------
 * - in_use[] changes by CAS (acquire, which checks the limit) and by
 *   fetch_add/fetch_sub (release, promote); the count is exact at every
 *   moment, and never exceeds the limit through acquire.  Promotion does
 *   not check the limit: a request already admitted is never turned away.
 *   Demotion takes its initial slot through acquire before it gives the
 *   existing one back, so for an instant the request counts twice, never
 *   zero times.
 * - limit[] is stored by the worker's main thread on start and on SIGHUP
 *   and read relaxed; a lowered limit applies to new requests only.
 * - Refusals are counted in the striped metrics (server_metrics.c), on
 *   the refusing thread's own stripe: a refusal writes no shared line.
 *
 * IDENTIFICATION
 *	  src/contract/admission.c
 *
 *-------------------------------------------------------------------------
 */
#include "admission.h"
#include "server_metrics.h"

#ifdef POSTGRES_H
#error "admission.c is shared by threads and must not include postgres.h"
#endif

void
admission_init(Admission *a, uint32_t initial, uint32_t existing)
{
	for (int k = 0; k < ADMISSION_KINDS; k++)
	{
		atomic_init(&a->in_use[k], 0);
	}
	atomic_init(&a->limit[ADMISSION_INITIAL], initial);
	atomic_init(&a->limit[ADMISSION_EXISTING], existing);
}

void
admission_set_limits(Admission *a, uint32_t initial, uint32_t existing)
{
	atomic_store_explicit(&a->limit[ADMISSION_INITIAL], initial, memory_order_relaxed);
	atomic_store_explicit(&a->limit[ADMISSION_EXISTING], existing, memory_order_relaxed);
}

bool
admission_acquire(Admission *a, AdmissionKind kind)
{
	uint32_t	limit = atomic_load_explicit(&a->limit[kind], memory_order_relaxed);
	uint32_t	cur = atomic_load_explicit(&a->in_use[kind], memory_order_relaxed);

	do
	{
		if (cur >= limit)
		{
			sm_add(SM_ADMISSION_REJECTED, (uint32_t) kind, 1);
			return false;
		}
	} while (!atomic_compare_exchange_weak_explicit(&a->in_use[kind], &cur, cur + 1,
													memory_order_relaxed,
													memory_order_relaxed));
	return true;
}

void
admission_release(Admission *a, AdmissionKind kind)
{
	if (kind == ADMISSION_NONE)
		return;
	atomic_fetch_sub_explicit(&a->in_use[kind], 1, memory_order_relaxed);
}

void
admission_promote(Admission *a)
{
	atomic_fetch_add_explicit(&a->in_use[ADMISSION_EXISTING], 1, memory_order_relaxed);
	atomic_fetch_sub_explicit(&a->in_use[ADMISSION_INITIAL], 1, memory_order_relaxed);
}

/*
 * The reverse of admission_promote, for an admitted request that turns out
 * to wait for a snapshot: it takes an initial slot, within the initial
 * limit, and gives its existing one back.  Returns false, with nothing
 * changed but the refusal counted, when the initial kind is full.
 */
bool
admission_demote(Admission *a)
{
	if (!admission_acquire(a, ADMISSION_INITIAL))
		return false;
	atomic_fetch_sub_explicit(&a->in_use[ADMISSION_EXISTING], 1, memory_order_relaxed);
	return true;
}

/* Whether `kind` has a slot free now; nothing is taken or counted. */
bool
admission_has_room(Admission *a, AdmissionKind kind)
{
	return atomic_load_explicit(&a->in_use[kind], memory_order_relaxed) <
		atomic_load_explicit(&a->limit[kind], memory_order_relaxed);
}

/*
 * Whether a request of `kind` would be admitted now, without taking a slot
 * (the registry asks before it makes a shape whose snapshot the request
 * would wait for); a no is counted as a refusal.  Advisory: another
 * request may take the slot first, and then admission_demote refuses.
 */
bool
admission_would_admit(Admission *a, AdmissionKind kind)
{
	if (admission_has_room(a, kind))
		return true;
	sm_add(SM_ADMISSION_REJECTED, (uint32_t) kind, 1);
	return false;
}

const char *
admission_kind_name(AdmissionKind kind)
{
	return kind == ADMISSION_INITIAL ? "initial" :
		kind == ADMISSION_EXISTING ? "existing" : "none";
}
