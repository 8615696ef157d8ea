/*-------------------------------------------------------------------------
 *
 * deadline.c
 *		The deadline thread: closes connections whose writes stall, or whose
 *		requests do not arrive in time.
 *
 * This file runs on its own thread and must not call into PostgreSQL.
 *
 * A response goes to its socket in pieces of at most
 * shape_sync.write_piece_size.  Handing a piece over stores the time in
 * the connection's own ConnTable slot, and asking for the next piece (the
 * previous one reached the kernel) or ending the response clears it: one
 * relaxed store each, on the connection's own cache line, with no lock, no
 * message and no timer structure (conn_table.h).  Once the socket's send
 * buffer is full, a piece completes only as the client drains it, so a
 * completed piece is the progress signal, and a slow client that keeps
 * draining re-arms its deadline with every piece and is never reaped.  A
 * client that stopped reading, or trickles a few bytes per window, leaves
 * a piece unfinished past its deadline.
 *
 * The request deadline works the same way.  A connection is armed when it
 * starts waiting for a request (accepted, or its previous response ended)
 * and cleared once the whole request is in (http_request.c), so a client
 * that trickles its headers, or a body, a byte at a time, or holds an idle
 * keep-alive connection, has shape_sync.request_header_timeout from the
 * start of the wait, however often it sends a byte.  (libmicrohttpd's own
 * connection timeout restarts on every byte received.)  Such a connection
 * is closed without an answer: a 408 written from this thread could land
 * in the middle of a response the connection's thread has just begun, and
 * clients treat an idle keep-alive connection that closes as nothing to
 * report.  Nor is it logged, as a flood of them would flood the log: it is
 * only counted.
 *
 * This thread sweeps the table a few times per (shortest) timeout window.
 * A sweep reads one cache line per connection and does nothing else unless
 * a deadline has passed: its work grows with connections and stalls, never
 * with writes or requests.  A stalled connection is closed with
 * shutdown(2), never close(2): libmicrohttpd's next send or receive fails,
 * it runs its usual close path (the request's completion callback releases
 * its admission slot and everything else), and only then closes the
 * socket.  The shutdown happens under the slot's lock after re-checking the
 * generation and the deadline, and libmicrohttpd's close notification
 * bumps the generation under the same lock before close(2), so a
 * connection that completed in the meantime, or a new one that got the
 * same socket number, is never touched.  A write (or request) that
 * completes between the re-check and the shutdown is reaped anyway: it was
 * past its deadline when looked at.
 *
 * The contract for clients: drain about one socket send buffer plus one
 * piece per shape_sync.stalled_serve_timeout, and send each request whole
 * within shape_sync.request_header_timeout of the previous response (or of
 * connecting).  Each reap of a stalled write is logged as a WARNING with
 * the shape handle and the peer, and counted.
 *
 * Notes on synchronization
 * ------------------------
 * - Reads write_armed_ms and request_armed_ms without a lock (relaxed);
 *   acts only under the slot's lock, after re-reading gen_state and the
 *   deadline (see conn_table.c).
 * - `stopping` is set once by deadline_stop, which wakes the thread and
 *   joins it.
 *
 * IDENTIFICATION
 *	  src/net/deadline.c
 *
 *-------------------------------------------------------------------------
 */
#include "deadline.h"

#include <string.h>
#include <sys/socket.h>

#include "server_metrics.h"
#include "thread_log.h"

#ifdef POSTGRES_H
#error "deadline.c runs on its own thread and must not include postgres.h"
#endif

#define SWEEP_MIN_MS	20
#define SWEEP_MAX_MS	1000

/* The two deadlines a connection's slot carries. */
typedef enum DeadlineKind
{
	DEADLINE_WRITE,				/* a response piece in flight */
	DEADLINE_REQUEST			/* the next request, not in yet */
} DeadlineKind;

/* Whether a deadline armed at `armed` has passed by `now`. */
static inline bool
deadline_passed(int64_t armed, int64_t timeout, int64_t now)
{
	return armed != 0 && timeout > 0 && now - armed >= timeout;
}

static bool
deadline_reap(DeadlineWatch *watch, uint32_t i, DeadlineKind kind, int64_t timeout,
			  int64_t now)
{
	ConnSlot   *s = &watch->conns->slots[i];
	ConnActivity *a = &watch->conns->activity[i];
	_Atomic int64_t *armed_at = kind == DEADLINE_WRITE ? &a->write_armed_ms :
		&a->request_armed_ms;
	char		handle[CONN_HANDLE_LEN];
	char		peer[CONN_PEER_LEN];
	int64_t		stalled = 0;
	bool		reaped = false;

	pthread_mutex_lock(&s->lock);
	{
		uint64_t	gs = atomic_load(&s->gen_state);
		int64_t		armed = atomic_load_explicit(armed_at, memory_order_relaxed);

		if ((gs & 0xFF) == CONN_SLOT_OPEN && deadline_passed(armed, timeout, now) && s->fd >= 0)
		{
			struct linger abort_on_close = {1, 0};

			/*
			 * The close that follows sends a reset and frees the unsent
			 * data at once, instead of an orphaned socket holding its send
			 * queue for as long as the idle peer answers window probes.
			 * A connection waiting for a request has nothing unsent: it
			 * gets the ordinary close of an idle connection.
			 */
			if (kind == DEADLINE_WRITE)
				setsockopt(s->fd, SOL_SOCKET, SO_LINGER, &abort_on_close,
						   sizeof(abort_on_close));
			shutdown(s->fd, SHUT_RDWR);
			atomic_store(&s->gen_state, (gs & ~(uint64_t) 0xFF) | CONN_SLOT_REAPED);
			atomic_store_explicit(armed_at, 0, memory_order_relaxed);
			memcpy(handle, s->handle, sizeof(handle));
			memcpy(peer, s->peer, sizeof(peer));
			stalled = now - armed;
			reaped = true;
		}
	}
	pthread_mutex_unlock(&s->lock);
	if (reaped && kind == DEADLINE_REQUEST)
		sm_add(SM_REAPED, SM_REAP_REQUEST_TIMEOUT, 1);
	else if (reaped)
	{
		sm_add(SM_REAPED, SM_REAP_STALLED_WRITE, 1);
		thread_log(THREAD_LOG_WARNING,
				   "closed a stalled serve of shape %s to %s: a write made no progress for %lld ms",
				   handle[0] ? handle : "(none)", peer, (long long) stalled);
	}
	return reaped;
}

int
deadline_sweep(DeadlineWatch *watch, int64_t now)
{
	int64_t		write_timeout = atomic_load(&watch->conns->write_timeout_ms);
	int64_t		request_timeout = atomic_load(&watch->conns->request_timeout_ms);
	int			reaped = 0;

	if (write_timeout <= 0 && request_timeout <= 0)
		return 0;
	for (uint32_t i = 0; i < watch->conns->nslots; i++)
	{
		ConnActivity *a = &watch->conns->activity[i];
		int64_t		write_armed = atomic_load_explicit(&a->write_armed_ms,
													   memory_order_relaxed);
		int64_t		request_armed = atomic_load_explicit(&a->request_armed_ms,
														 memory_order_relaxed);

		if (deadline_passed(write_armed, write_timeout, now) &&
			deadline_reap(watch, i, DEADLINE_WRITE, write_timeout, now))
			reaped++;
		else if (deadline_passed(request_armed, request_timeout, now) &&
				 deadline_reap(watch, i, DEADLINE_REQUEST, request_timeout, now))
			reaped++;
	}
	return reaped;
}

/* How long the thread sleeps between sweeps: an eighth of the shortest timeout. */
static int64_t
deadline_tick(const ConnTable *conns)
{
	int64_t		write_timeout = atomic_load(&conns->write_timeout_ms);
	int64_t		request_timeout = atomic_load(&conns->request_timeout_ms);
	int64_t		shortest = write_timeout > 0 ? write_timeout : request_timeout;
	int64_t		tick;

	if (request_timeout > 0 && request_timeout < shortest)
		shortest = request_timeout;
	tick = shortest > 0 ? shortest / 8 : SWEEP_MAX_MS;
	if (tick < SWEEP_MIN_MS)
		tick = SWEEP_MIN_MS;
	if (tick > SWEEP_MAX_MS)
		tick = SWEEP_MAX_MS;
	return tick;
}

static void *
deadline_main(void *arg)
{
	DeadlineWatch *watch = arg;

	pthread_mutex_lock(&watch->lock);
	while (!atomic_load(&watch->stopping))
	{
		int64_t		tick = deadline_tick(watch->conns);
		struct timespec until;

		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += tick / 1000;
		until.tv_nsec += (tick % 1000) * 1000000;
		if (until.tv_nsec >= 1000000000)
		{
			until.tv_sec++;
			until.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&watch->wake, &watch->lock, &until);
		if (atomic_load(&watch->stopping))
			break;
		pthread_mutex_unlock(&watch->lock);
		deadline_sweep(watch, conn_now_coarse_ms());
		pthread_mutex_lock(&watch->lock);
	}
	pthread_mutex_unlock(&watch->lock);
	return NULL;
}

int
deadline_start(DeadlineWatch *watch, ConnTable *conns)
{
	int			rc;

	watch->conns = conns;
	atomic_init(&watch->stopping, false);
	pthread_mutex_init(&watch->lock, NULL);
	pthread_cond_init(&watch->wake, NULL);
	rc = pthread_create(&watch->thread, NULL, deadline_main, watch);
	watch->started = rc == 0;
	return rc;
}

void
deadline_stop(DeadlineWatch *watch)
{
	if (!watch->started)
		return;
	pthread_mutex_lock(&watch->lock);
	atomic_store(&watch->stopping, true);
	pthread_cond_signal(&watch->wake);
	pthread_mutex_unlock(&watch->lock);
	pthread_join(watch->thread, NULL);
	watch->started = false;
	pthread_mutex_destroy(&watch->lock);
	pthread_cond_destroy(&watch->wake);
}
