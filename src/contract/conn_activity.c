/*-------------------------------------------------------------------------
 *
 * conn_activity.c
 *		What each HTTP connection is doing, in shared memory.
 *
 * The view shape_sync.connections shows every open connection of the
 * server: its peer, the shape it is served, what it does (waiting for a
 * request, resolving, waiting for a snapshot or for changes, streaming a
 * response or an SSE stream), since when, the bytes sent and the age of
 * the write in flight, as pg_stat_activity does for backends.  Any backend
 * reads it, so it lives in shared memory, one entry per ConnTable slot
 * (the index is the slot's); the worker's threads write it.  The two
 * deadline fields of a connection live here too: they are what the
 * deadline thread reads, and the age of the current write is the view's.
 *
 * Writing costs the connection's own thread a relaxed store to its own
 * entry, no lock: at a state change, per response piece (bytes sent and
 * the write deadline), and a seqlock around the peer and handle text,
 * which change once per connection and once per shape served.
 *
 * Notes on synchronization
 * ------------------------
 * - An entry is written by the thread that serves its connection only
 *   (libmicrohttpd runs a connection's callbacks, its open and close
 *   notifications included, on one thread); the deadline thread also
 *   clears a deadline it enforced.  Each field is a relaxed atomic.
 * - Opening and closing a connection, and changing its handle, happen
 *   inside the seqlock text_seq: odd while they change (release fence
 *   after making it odd, release store when it is even again), and peer
 *   and handle are words of text.  A reader copies the whole entry and
 *   retries until it saw the same even value before and after (acquire),
 *   so a row never mixes two connections that held the slot one after the
 *   other; a slot reopened all the while is left out after a few tries.
 *   State changes and byte counts within a connection's life are single
 *   relaxed stores outside it: a row may show a state with the bytes of a
 *   moment before.
 * - Entries are 128-byte aligned: no two connections share a line, so
 *   threads serving different connections never write the same line.
 *
 * IDENTIFICATION
 *	  src/contract/conn_activity.c
 *
 *-------------------------------------------------------------------------
 */
#include "conn_activity.h"

#include <string.h>

#ifdef POSTGRES_H
#error "conn_activity.c runs on HTTP threads and must not include postgres.h"
#endif

#define relaxed memory_order_relaxed

size_t
conn_activity_size(uint32_t nslots)
{
	return sizeof(ConnActivity) * (nslots ? nslots : 1);
}

void
conn_activity_init(ConnActivity *a, uint32_t nslots)
{
	memset(a, 0, conn_activity_size(nslots));
}

static void
text_store(_Atomic uint64_t *words, size_t nwords, const char *text)
{
	char		buf[CONN_ACTIVITY_PEER_LEN] = {0};

	if (text != NULL)
		strncpy(buf, text, nwords * 8 - 1);
	for (size_t i = 0; i < nwords; i++)
	{
		uint64_t	w;

		memcpy(&w, buf + i * 8, 8);
		atomic_store_explicit(&words[i], w, relaxed);
	}
}

static void
text_load(const _Atomic uint64_t *words, size_t nwords, char *out)
{
	for (size_t i = 0; i < nwords; i++)
	{
		uint64_t	w = atomic_load_explicit(&words[i], relaxed);

		memcpy(out + i * 8, &w, 8);
	}
	out[nwords * 8 - 1] = '\0';
}

static void
text_begin(ConnActivity *a)
{
	atomic_store_explicit(&a->text_seq, atomic_load_explicit(&a->text_seq, relaxed) + 1, relaxed);
	atomic_thread_fence(memory_order_release);
}

static void
text_end(ConnActivity *a)
{
	atomic_store_explicit(&a->text_seq, atomic_load_explicit(&a->text_seq, relaxed) + 1,
						  memory_order_release);
}

/* A connection starts: it waits for its first request. */
void
conn_activity_open(ConnActivity *a, const char *peer, int64_t now_ms)
{
	int64_t		now_us = conn_activity_unix_us();

	text_begin(a);
	text_store(a->peer, CONN_ACTIVITY_PEER_LEN / 8, peer);
	text_store(a->handle, CONN_ACTIVITY_HANDLE_LEN / 8, "");
	atomic_store_explicit(&a->write_armed_ms, 0, relaxed);
	atomic_store_explicit(&a->request_armed_ms, now_ms, relaxed);
	atomic_store_explicit(&a->bytes_sent, 0, relaxed);
	atomic_store_explicit(&a->opened_us, now_us, relaxed);
	atomic_store_explicit(&a->state_since_us, now_us, relaxed);
	atomic_store_explicit(&a->state, CONN_ACTIVITY_IDLE, relaxed);
	text_end(a);
}

void
conn_activity_close(ConnActivity *a)
{
	text_begin(a);
	atomic_store_explicit(&a->state, CONN_ACTIVITY_CLOSED, relaxed);
	atomic_store_explicit(&a->write_armed_ms, 0, relaxed);
	atomic_store_explicit(&a->request_armed_ms, 0, relaxed);
	text_end(a);
}

void
conn_activity_set_handle(ConnActivity *a, const char *handle)
{
	text_begin(a);
	text_store(a->handle, CONN_ACTIVITY_HANDLE_LEN / 8, handle);
	text_end(a);
}

/*
 * Copies an entry; false when no connection holds it.  now_ms is the
 * monotonic clock (conn_now_coarse_ms), for the age of the pending write.
 */
bool
conn_activity_read(const ConnActivity *a, ConnActivityView *out, int64_t now_ms)
{
	ConnActivity *w = (ConnActivity *) a;

	for (int tries = 0; tries < 100; tries++)
	{
		uint32_t	before = atomic_load_explicit(&w->text_seq, memory_order_acquire);
		int64_t		armed;

		if (before % 2 != 0)
			continue;
		out->state = (ConnActivityState) atomic_load_explicit(&a->state, relaxed);
		out->bytes_sent = atomic_load_explicit(&a->bytes_sent, relaxed);
		out->opened_us = atomic_load_explicit(&a->opened_us, relaxed);
		out->state_since_us = atomic_load_explicit(&a->state_since_us, relaxed);
		armed = atomic_load_explicit(&a->write_armed_ms, relaxed);
		out->write_age_ms = armed != 0 && now_ms >= armed ? now_ms - armed : -1;
		text_load(a->peer, CONN_ACTIVITY_PEER_LEN / 8, out->peer);
		text_load(a->handle, CONN_ACTIVITY_HANDLE_LEN / 8, out->handle);
		atomic_thread_fence(memory_order_acquire);
		if (atomic_load_explicit(&w->text_seq, relaxed) == before)
			return out->state != CONN_ACTIVITY_CLOSED && out->state < CONN_ACTIVITY_STATES;
	}
	return false;				/* changing all along: opened or closed again and again */
}

const char *
conn_activity_state_name(ConnActivityState state)
{
	static const char *const names[CONN_ACTIVITY_STATES] = {
		"closed", "idle", "resolving", "snapshot", "waiting", "streaming", "sse"
	};

	return state < CONN_ACTIVITY_STATES ? names[state] : "unknown";
}
