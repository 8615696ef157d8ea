/*-------------------------------------------------------------------------
 *
 * waiters.c
 *		Parked connections: per-shape wait lists and long-poll deadlines.
 *
 * This file runs on libmicrohttpd threads and its own timer thread, and
 * must not call into PostgreSQL.
 *
 * A request with nothing to send yet (a live request at the end of its
 * shape's log, or one waiting for a snapshot chunk) suspends its
 * connection and parks on its shape's wait list; a suspended connection
 * holds no thread.  Two parties may resume it:
 *
 *	- the main thread, when the shape's log grew (waiters_wake): it empties
 *	  the shape's list, so its cost is the number of connections woken,
 *	  and shapes that did not change cost nothing;
 *	- the timer thread, when the connection's deadline (long-poll timeout)
 *	  passes: deadlines sit in a min-heap, and the thread sleeps until the
 *	  earliest.
 *
 * Exactly one of them resumes a connection: each clears the waiter's
 * `parked` flag with a compare-and-swap first, and only the winner resumes
 * it.  libmicrohttpd forbids resuming a connection twice, or one that is
 * not suspended.
 *
 * Notes on synchronization
 * ------------------------
 * - A list's links (head, prev, next, in_list) are guarded by the list's
 *   lock.  A connection checks whether it must wait and suspends itself
 *   under that lock, so a wake after the check finds it listed: no wakeup
 *   is lost.
 * - The heap and each waiter's heap_index are guarded by timer_lock.
 * - Lock order: a list lock, then timer_lock (waiters_park).  The waker
 *   and the timer thread hold one lock at a time.
 * - `parked` goes 1 -> 0 by CAS, by the waker under the list lock or by
 *   the timer under timer_lock.  The winner removes the waiter from the
 *   other structure before resuming: the waker takes it out of the heap,
 *   the timer out of the list.  A waiter is freed only after its
 *   connection completes, which needs a resume, which comes after both
 *   removals, so neither structure ever holds a freed waiter.
 * - `stopping` is set once, before everything parked is woken; parking
 *   checks it under the list lock.
 *
 * IDENTIFICATION
 *	  src/net/waiters.c
 *
 *-------------------------------------------------------------------------
 */
#ifdef POSTGRES_H
#error "waiters.c runs on HTTP threads and must not include postgres.h"
#endif

#include "waiters.h"

#include <errno.h>
#include <stdlib.h>
#include <time.h>

#define TIMER_IDLE_MS	1000

int64_t
waiters_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ----------------------------------------------------------- the heap */

static void
heap_swap(Waiters *w, int a, int b)
{
	Waiter	   *t = w->heap[a];

	w->heap[a] = w->heap[b];
	w->heap[b] = t;
	w->heap[a]->heap_index = a;
	w->heap[b]->heap_index = b;
}

static void
heap_up(Waiters *w, int i)
{
	while (i > 0 && w->heap[(i - 1) / 2]->deadline_ms > w->heap[i]->deadline_ms)
	{
		heap_swap(w, i, (i - 1) / 2);
		i = (i - 1) / 2;
	}
}

static void
heap_down(Waiters *w, int i)
{
	for (;;)
	{
		int			l = 2 * i + 1;
		int			m = i;

		if (l < w->heap_len && w->heap[l]->deadline_ms < w->heap[m]->deadline_ms)
			m = l;
		if (l + 1 < w->heap_len && w->heap[l + 1]->deadline_ms < w->heap[m]->deadline_ms)
			m = l + 1;
		if (m == i)
			return;
		heap_swap(w, i, m);
		i = m;
	}
}

static bool
heap_add(Waiters *w, Waiter *waiter)
{
	if (w->heap_len == w->heap_cap)
	{
		int			cap = w->heap_cap ? 2 * w->heap_cap : 64;
		Waiter	  **grown = realloc(w->heap, sizeof(Waiter *) * (size_t) cap);

		if (grown == NULL)
			return false;
		w->heap = grown;
		w->heap_cap = cap;
	}
	w->heap[w->heap_len] = waiter;
	waiter->heap_index = w->heap_len++;
	heap_up(w, waiter->heap_index);
	return true;
}

static void
heap_remove(Waiters *w, Waiter *waiter)
{
	int			i = waiter->heap_index;

	if (i < 0)
		return;
	waiter->heap_index = -1;
	w->heap_len--;
	if (i == w->heap_len)
		return;
	w->heap[i] = w->heap[w->heap_len];
	w->heap[i]->heap_index = i;
	heap_down(w, i);
	heap_up(w, i);
}

/* ---------------------------------------------------------- the lists */

static void
list_link(WaitList *list, Waiter *waiter)
{
	waiter->prev = NULL;
	waiter->next = list->head;
	if (list->head)
		list->head->prev = waiter;
	list->head = waiter;
	waiter->in_list = true;
}

static void
list_unlink(WaitList *list, Waiter *waiter)
{
	if (!waiter->in_list)
		return;
	if (waiter->prev)
		waiter->prev->next = waiter->next;
	else
		list->head = waiter->next;
	if (waiter->next)
		waiter->next->prev = waiter->prev;
	waiter->prev = waiter->next = NULL;
	waiter->in_list = false;
}

/* ------------------------------------------------------------- the API */

int
waiters_init(Waiters *w, uint32_t nslots)
{
	w->nslots = nslots;
	w->lists = calloc(nslots ? nslots : 1, sizeof(WaitList));
	if (w->lists == NULL)
		return -1;
	for (uint32_t i = 0; i < nslots; i++)
		pthread_mutex_init(&w->lists[i].lock, NULL);
	pthread_mutex_init(&w->timer_lock, NULL);
	pthread_cond_init(&w->timer_cond, NULL);
	w->heap = NULL;
	w->heap_len = w->heap_cap = 0;
	w->timer_started = false;
	atomic_init(&w->stopping, false);
	return 0;
}

static void *
timer_main(void *arg)
{
	Waiters    *w = arg;

	pthread_mutex_lock(&w->timer_lock);
	while (!atomic_load(&w->stopping))
	{
		int64_t		now = waiters_now_ms();
		Waiter	   *due = NULL;

		/* take the expired ones whose CAS we win */
		while (w->heap_len > 0 && w->heap[0]->deadline_ms <= now)
		{
			Waiter	   *top = w->heap[0];
			int			one = 1;

			heap_remove(w, top);
			if (atomic_compare_exchange_strong(&top->parked, &one, 0))
			{
				top->timed_out = true;
				top->due_next = due;
				due = top;
			}
		}
		if (due != NULL)
		{
			pthread_mutex_unlock(&w->timer_lock);
			while (due != NULL)
			{
				Waiter	   *next = due->due_next;
				WaitList   *list = &w->lists[due->slot];

				pthread_mutex_lock(&list->lock);
				list_unlink(list, due);
				pthread_mutex_unlock(&list->lock);
				MHD_resume_connection(due->connection);
				due = next;
			}
			pthread_mutex_lock(&w->timer_lock);
			continue;
		}

		{
			struct timespec until;
			int64_t		wait_ms = w->heap_len > 0 ? w->heap[0]->deadline_ms - now : TIMER_IDLE_MS;

			if (wait_ms > TIMER_IDLE_MS)
				wait_ms = TIMER_IDLE_MS;
			clock_gettime(CLOCK_MONOTONIC, &until);
			until.tv_sec += wait_ms / 1000;
			until.tv_nsec += (wait_ms % 1000) * 1000000;
			if (until.tv_nsec >= 1000000000)
			{
				until.tv_sec++;
				until.tv_nsec -= 1000000000;
			}
			pthread_cond_timedwait(&w->timer_cond, &w->timer_lock, &until);
		}
	}
	pthread_mutex_unlock(&w->timer_lock);
	return NULL;
}

int
waiters_start_timer(Waiters *w)
{
	pthread_condattr_t attr;
	int			rc;

	/* the timer waits on the monotonic clock */
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_destroy(&w->timer_cond);
	pthread_cond_init(&w->timer_cond, &attr);
	pthread_condattr_destroy(&attr);
	rc = pthread_create(&w->timer_thread, NULL, timer_main, w);
	w->timer_started = rc == 0;
	return rc;
}

bool
waiters_park(Waiters *w, Waiter *waiter, uint32_t slot, int64_t deadline_ms,
			 bool (*ready) (void *arg), void *arg)
{
	WaitList   *list = &w->lists[slot];

	pthread_mutex_lock(&list->lock);
	if (atomic_load(&w->stopping) || ready(arg))
	{
		pthread_mutex_unlock(&list->lock);
		return false;
	}
	waiter->slot = slot;
	waiter->timed_out = false;
	waiter->deadline_ms = deadline_ms;
	waiter->heap_index = -1;
	atomic_store(&waiter->parked, 1);
	list_link(list, waiter);
	MHD_suspend_connection(waiter->connection);
	if (deadline_ms > 0)
	{
		bool		earliest;

		pthread_mutex_lock(&w->timer_lock);
		if (!heap_add(w, waiter))
			waiter->deadline_ms = 0;	/* out of memory: no deadline */
		earliest = w->heap_len > 0 && w->heap[0] == waiter;
		pthread_mutex_unlock(&w->timer_lock);
		if (earliest)
			pthread_cond_signal(&w->timer_cond);
	}
	pthread_mutex_unlock(&list->lock);
	return true;
}

void
waiters_wake(Waiters *w, uint32_t slot)
{
	WaitList   *list;
	Waiter	   *woken = NULL;

	if (slot >= w->nslots)
		return;
	list = &w->lists[slot];
	pthread_mutex_lock(&list->lock);
	for (Waiter *it = list->head; it != NULL;)
	{
		Waiter	   *next = it->next;
		int			one = 1;

		it->in_list = false;
		it->prev = it->next = NULL;
		if (atomic_compare_exchange_strong(&it->parked, &one, 0))
		{
			it->next = woken;
			woken = it;
		}
		it = next;
	}
	list->head = NULL;
	pthread_mutex_unlock(&list->lock);

	while (woken != NULL)
	{
		Waiter	   *next = woken->next;

		woken->next = NULL;
		if (woken->deadline_ms > 0)
		{
			pthread_mutex_lock(&w->timer_lock);
			heap_remove(w, woken);
			pthread_mutex_unlock(&w->timer_lock);
		}
		MHD_resume_connection(woken->connection);
		woken = next;
	}
}

void
waiters_wake_all_and_stop(Waiters *w)
{
	atomic_store(&w->stopping, true);
	for (uint32_t i = 0; i < w->nslots; i++)
		waiters_wake(w, i);
	if (w->timer_started)
	{
		pthread_mutex_lock(&w->timer_lock);
		pthread_cond_signal(&w->timer_cond);
		pthread_mutex_unlock(&w->timer_lock);
		pthread_join(w->timer_thread, NULL);
		w->timer_started = false;
	}
}

void
waiters_destroy(Waiters *w)
{
	for (uint32_t i = 0; i < w->nslots; i++)
		pthread_mutex_destroy(&w->lists[i].lock);
	free(w->lists);
	free(w->heap);
	pthread_mutex_destroy(&w->timer_lock);
	pthread_cond_destroy(&w->timer_cond);
	w->lists = NULL;
	w->heap = NULL;
}
