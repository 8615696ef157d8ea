/*-------------------------------------------------------------------------
 *
 * waiters.c
 *		Parked connections and the park thread that resumes them.
 *
 * This file runs on libmicrohttpd threads and on the park thread, and must
 * not call into PostgreSQL.
 *
 * A request with nothing to send yet (a live request at the end of its
 * shape's log, an SSE stream between batches, one waiting for a snapshot
 * chunk) suspends its connection and parks on its shape's wait list; a
 * suspended connection holds no thread.  Only the park thread resumes
 * parked connections, for one of three reasons:
 *
 *	- the shape's log grew: the main thread calls waiters_notify(), which
 *	  sets the shape's bit and writes an eventfd, O(1) whatever the number
 *	  of waiters; the park thread empties the lists of the marked shapes;
 *	- the connection's deadline passed (long-poll timeout, SSE keep-alive):
 *	  deadlines sit in a min-heap and the park thread sleeps until the
 *	  earliest;
 *	- the client went away: libmicrohttpd does not poll a suspended
 *	  connection, so the park thread watches every socket for
 *	  EPOLLRDHUP/EPOLLHUP itself, and resumes the connection marked
 *	  client_gone, which then ends, releasing everything it held.  A socket
 *	  joins the watch set once, when its connection opens, edge-triggered
 *	  (closing it leaves the set), not at every park: parking and waking
 *	  cost no system call of their own but the resume's.  A close seen
 *	  while the connection is not parked leaves a mark on its slot
 *	  (peer_gone), and its next park ends it instead.
 *
 * A thousand clients vanishing at once are a thousand epoll events, each
 * handled in O(log n), on this thread only: the decoder and the HTTP
 * threads of other clients are not involved.
 *
 * Notes on synchronization
 * ------------------------
 * - A list's links (head, prev, next, in_list) are guarded by the list's
 *   lock.  A request checks whether it must wait and suspends itself under
 *   that lock, so a notification after the check finds it listed: no
 *   wakeup is lost.
 * - The heap and heap_index are guarded by timer_lock; a waiter with a
 *   deadline is in the heap from its park (under its list lock) until the
 *   park thread takes it out.  ConnSlot.parked, watched and peer_gone, and
 *   Waiter.watched (a socket added for one park only, when adding it for
 *   good failed), are guarded by the slot's lock; the check of peer_gone
 *   and the setting of parked happen under it together, so a close is
 *   either seen by the park or finds the waiter parked.
 * - Lock order: list lock, then timer_lock or a ConnSlot lock (never both).
 * - `parked` goes 1 -> 0 by CAS, by the park thread only (the CAS guards
 *   against a misdirected second resume all the same).  A waiter cannot
 *   be freed while parked: its connection is suspended, and completes only
 *   after the park thread has taken it out of the list, the heap and the
 *   epoll set, and resumed it.  Epoll events carry (ConnTable slot,
 *   generation), never a pointer, and the waiter is found through the
 *   slot's `parked` field after the generation check.
 * - `changed` bits are set with fetch_or and taken with exchange.
 * - `stopping` is set once; parking checks it under the list lock, and
 *   the park thread resumes everything before it exits.
 *
 * IDENTIFICATION
 *	  src/net/waiters.c
 *
 *-------------------------------------------------------------------------
 */
#include "waiters.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#ifdef POSTGRES_H
#error "waiters.c runs on HTTP threads and must not include postgres.h"
#endif

#define PARK_IDLE_MS	1000
#define PARK_EVENTS		256
#define CHANGED_WORDS(n) (((n) + 63) / 64)

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

/*
 * The lists count what they hold where SQL and the metrics see it (the
 * shape's slot; shape_sync_live_waiters is their sum), under the list's
 * lock.
 */
static void
list_count(WaitList *list, int delta)
{
	if (list->parked != NULL)
		atomic_fetch_add_explicit(list->parked, (uint32_t) delta, memory_order_relaxed);
}

static void
list_link(WaitList *list, Waiter *waiter)
{
	list_count(list, 1);
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
	list_count(list, -1);
	if (waiter->prev)
		waiter->prev->next = waiter->next;
	else
		list->head = waiter->next;
	if (waiter->next)
		waiter->next->prev = waiter->prev;
	waiter->prev = waiter->next = NULL;
	waiter->in_list = false;
}

static uint64_t
watch_key(Waiters *w, uint32_t conn_slot)
{
	return (uint64_t) conn_slot | conn_table_generation(w->conns, conn_slot) << 32;
}

/* ------------------------------------------------------------- parking */

/* shapes: where each shape's parked requests are counted for SQL, or NULL */
int
waiters_init(Waiters *w, uint32_t nslots, ConnTable *conns, ShapeTable *shapes)
{
	struct epoll_event ev = {.events = EPOLLIN, .data.u64 = UINT64_MAX};

	memset(w, 0, sizeof(*w));
	w->nslots = nslots;
	w->conns = conns;
	w->lists = calloc(nslots ? nslots : 1, sizeof(WaitList));
	w->changed = calloc(CHANGED_WORDS(nslots) ? CHANGED_WORDS(nslots) : 1, sizeof(uint64_t));
	w->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
	w->notify_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (w->lists == NULL || w->changed == NULL || w->epoll_fd < 0 || w->notify_fd < 0 ||
		epoll_ctl(w->epoll_fd, EPOLL_CTL_ADD, w->notify_fd, &ev) != 0)
		return -1;
	for (uint32_t i = 0; i < nslots; i++)
	{
		pthread_mutex_init(&w->lists[i].lock, NULL);
		w->lists[i].parked = shapes ? &shapes->slots[i].waiters : NULL;
	}
	for (uint32_t i = 0; i < CHANGED_WORDS(nslots); i++)
		atomic_init(&w->changed[i], 0);
	pthread_mutex_init(&w->timer_lock, NULL);
	atomic_init(&w->stopping, false);
	atomic_init(&w->clients_gone, 0);
	return 0;
}

static void
waiters_poke(Waiters *w)
{
	uint64_t	one = 1;

	while (write(w->notify_fd, &one, sizeof(one)) < 0 && errno == EINTR)
		;
}

void
waiters_watch(Waiters *w, uint32_t conn_slot)
{
	ConnSlot   *cs;
	struct epoll_event ev = {.events = EPOLLRDHUP | EPOLLHUP | EPOLLERR | EPOLLET};

	if (conn_slot == CONN_NO_SLOT)
		return;
	cs = &w->conns->slots[conn_slot];
	ev.data.u64 = watch_key(w, conn_slot);
	pthread_mutex_lock(&cs->lock);
	if (cs->fd >= 0 && epoll_ctl(w->epoll_fd, EPOLL_CTL_ADD, cs->fd, &ev) == 0)
		cs->watched = true;
	pthread_mutex_unlock(&cs->lock);
}

bool
waiters_park(Waiters *w, Waiter *waiter, uint32_t slot, int64_t deadline_ms,
			 bool (*ready) (void *arg), void *arg)
{
	WaitList   *list = &w->lists[slot];
	bool		earliest = false;

	waiter->client_gone = false;
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
	waiter->watched = false;
	if (waiter->conn_slot != CONN_NO_SLOT)
	{
		ConnSlot   *cs = &w->conns->slots[waiter->conn_slot];
		bool		gone;

		/*
		 * The peer may have closed since the request came in: the park
		 * thread saw it, found nobody parked and left the mark.  Checked
		 * and parked under the slot's lock, so that a close seen later
		 * finds the waiter.
		 */
		pthread_mutex_lock(&cs->lock);
		gone = cs->peer_gone;
		if (!gone)
		{
			cs->parked = waiter;
			if (!cs->watched && cs->fd >= 0)
			{
				/* not in the set for good (epoll_ctl failed then): for this park */
				struct epoll_event ev = {.events = EPOLLRDHUP | EPOLLHUP | EPOLLERR,
				.data.u64 = watch_key(w, waiter->conn_slot)};

				waiter->watched = epoll_ctl(w->epoll_fd, EPOLL_CTL_ADD, cs->fd, &ev) == 0;
			}
		}
		pthread_mutex_unlock(&cs->lock);
		if (gone)
		{
			pthread_mutex_unlock(&list->lock);
			waiter->client_gone = true;
			return false;
		}
	}
	atomic_store(&waiter->parked, 1);
	list_link(list, waiter);
	MHD_suspend_connection(waiter->connection);

	if (deadline_ms > 0)
	{
		pthread_mutex_lock(&w->timer_lock);
		if (!heap_add(w, waiter))
			waiter->deadline_ms = 0;	/* out of memory: no deadline */
		earliest = w->heap_len > 0 && w->heap[0] == waiter;
		pthread_mutex_unlock(&w->timer_lock);
	}
	pthread_mutex_unlock(&list->lock);
	if (earliest)
		waiters_poke(w);
	return true;
}

void
waiters_notify(Waiters *w, uint32_t slot)
{
	if (slot >= w->nslots)
		return;
	atomic_fetch_or(&w->changed[slot / 64], (uint64_t) 1 << (slot % 64));
	waiters_poke(w);
}

/* --------------------------------------------------------- the thread */

/*
 * Takes a waiter whose CAS we won out of the heap and the epoll set, and
 * resumes its connection.  The caller has taken it off its list.
 */
static void
park_resume(Waiters *w, Waiter *waiter)
{
	if (waiter->deadline_ms > 0)	/* in the heap (set before it parked) */
	{
		pthread_mutex_lock(&w->timer_lock);
		heap_remove(w, waiter);
		pthread_mutex_unlock(&w->timer_lock);
	}
	if (waiter->conn_slot != CONN_NO_SLOT)
	{
		ConnSlot   *cs = &w->conns->slots[waiter->conn_slot];

		pthread_mutex_lock(&cs->lock);
		if (waiter->watched && cs->fd >= 0)
			epoll_ctl(w->epoll_fd, EPOLL_CTL_DEL, cs->fd, NULL);
		waiter->watched = false;
		if (cs->parked == waiter)
			cs->parked = NULL;
		pthread_mutex_unlock(&cs->lock);
	}
	MHD_resume_connection(waiter->connection);
}

/* Takes a parked waiter off its list; false if someone else has it. */
static bool
park_take(Waiters *w, Waiter *waiter)
{
	WaitList   *list = &w->lists[waiter->slot];
	int			one = 1;
	bool		won;

	pthread_mutex_lock(&list->lock);
	won = atomic_compare_exchange_strong(&waiter->parked, &one, 0);
	if (won)
		list_unlink(list, waiter);
	pthread_mutex_unlock(&list->lock);
	return won;
}

/* Resumes everything parked on shape `slot`. */
static void
park_wake_list(Waiters *w, uint32_t slot)
{
	WaitList   *list = &w->lists[slot];
	Waiter	   *woken = NULL;

	pthread_mutex_lock(&list->lock);
	while (list->head != NULL)
	{
		Waiter	   *it = list->head;
		int			one = 1;

		list_unlink(list, it);
		if (atomic_compare_exchange_strong(&it->parked, &one, 0))
		{
			it->next = woken;	/* off the list now: the link is ours */
			woken = it;
		}
	}
	pthread_mutex_unlock(&list->lock);
	while (woken != NULL)
	{
		Waiter	   *next = woken->next;

		woken->next = NULL;
		park_resume(w, woken);
		woken = next;
	}
}

static void
park_expire(Waiters *w, int64_t now)
{
	for (;;)
	{
		Waiter	   *top = NULL;

		pthread_mutex_lock(&w->timer_lock);
		if (w->heap_len > 0 && w->heap[0]->deadline_ms <= now)
			top = w->heap[0];
		pthread_mutex_unlock(&w->timer_lock);
		if (top == NULL)
			return;
		/* only this thread unparks, so `top` is still parked here */
		if (park_take(w, top))
		{
			top->timed_out = true;
			park_resume(w, top);
		}
		else
		{
			pthread_mutex_lock(&w->timer_lock);
			heap_remove(w, top);
			pthread_mutex_unlock(&w->timer_lock);
		}
	}
}

static void
park_client_gone(Waiters *w, uint64_t key)
{
	uint32_t	conn_slot = (uint32_t) key;
	ConnSlot   *cs;
	Waiter	   *waiter;

	if (conn_slot >= w->conns->nslots)
		return;
	cs = &w->conns->slots[conn_slot];
	pthread_mutex_lock(&cs->lock);
	if ((conn_table_generation(w->conns, conn_slot) & 0xFFFFFFFF) != key >> 32)
		waiter = NULL;			/* an event of a connection since closed */
	else if ((waiter = cs->parked) == NULL)
		cs->peer_gone = true;	/* not parked now: its next park sees it */
	pthread_mutex_unlock(&cs->lock);
	if (waiter != NULL && park_take(w, waiter))
	{
		waiter->client_gone = true;
		atomic_fetch_add(&w->clients_gone, 1);
		park_resume(w, waiter);
	}
}

static void *
park_main(void *arg)
{
	Waiters    *w = arg;
	struct epoll_event events[PARK_EVENTS];

	while (!atomic_load(&w->stopping))
	{
		int64_t		now = waiters_now_ms();
		int			timeout = PARK_IDLE_MS;
		int			n;

		pthread_mutex_lock(&w->timer_lock);
		if (w->heap_len > 0)
		{
			int64_t		until = w->heap[0]->deadline_ms - now;

			timeout = until < 0 ? 0 : until < PARK_IDLE_MS ? (int) until : PARK_IDLE_MS;
		}
		pthread_mutex_unlock(&w->timer_lock);

		n = epoll_wait(w->epoll_fd, events, PARK_EVENTS, timeout);
		for (int i = 0; i < n; i++)
		{
			if (events[i].data.u64 == UINT64_MAX)
			{
				uint64_t	count;

				while (read(w->notify_fd, &count, sizeof(count)) < 0 && errno == EINTR)
					;
				continue;
			}
			park_client_gone(w, events[i].data.u64);
		}
		for (uint32_t word = 0; word < CHANGED_WORDS(w->nslots); word++)
		{
			uint64_t	bits;

			if (atomic_load_explicit(&w->changed[word], memory_order_relaxed) == 0)
				continue;
			bits = atomic_exchange(&w->changed[word], 0);
			while (bits != 0)
			{
				int			b = __builtin_ctzll(bits);

				bits &= bits - 1;
				park_wake_list(w, word * 64 + (uint32_t) b);
			}
		}
		park_expire(w, waiters_now_ms());
	}

	/* shutting down: nobody may stay suspended */
	for (uint32_t i = 0; i < w->nslots; i++)
		park_wake_list(w, i);
	return NULL;
}

int
waiters_start(Waiters *w)
{
	int			rc = pthread_create(&w->thread, NULL, park_main, w);

	w->thread_started = rc == 0;
	return rc;
}

/* Refuses further parking, resumes everything parked, joins the thread. */
void
waiters_stop(Waiters *w)
{
	atomic_store(&w->stopping, true);
	if (w->thread_started)
	{
		waiters_poke(w);
		pthread_join(w->thread, NULL);
		w->thread_started = false;
	}
	else
		for (uint32_t i = 0; i < w->nslots; i++)
			park_wake_list(w, i);
}

void
waiters_destroy(Waiters *w)
{
	if (w->lists)
		for (uint32_t i = 0; i < w->nslots; i++)
			pthread_mutex_destroy(&w->lists[i].lock);
	free(w->lists);
	free(w->heap);
	free((void *) w->changed);
	if (w->epoll_fd >= 0)
		close(w->epoll_fd);
	if (w->notify_fd >= 0)
		close(w->notify_fd);
	pthread_mutex_destroy(&w->timer_lock);
	w->lists = NULL;
	w->heap = NULL;
}
