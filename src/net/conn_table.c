/*-------------------------------------------------------------------------
 *
 * conn_table.c
 *		One slot per open TCP connection: generation, socket, deadlines.
 *
 * This file runs on libmicrohttpd threads and the server's own threads,
 * and must not call into PostgreSQL.
 *
 * libmicrohttpd tells us when a TCP connection starts and when it closes
 * (MHD_OPTION_NOTIFY_CONNECTION); a connection holds one slot in between.
 * Other threads act on a connection only through its slot: the deadline
 * thread shuts down a stalled socket, the park thread watches a parked
 * one's socket for a client that went away.  They name a connection by
 * (slot, generation), and every action re-checks the generation under the
 * slot's lock, so a connection that has since closed, or whose socket
 * number the kernel gave to a new connection, is never touched:
 * libmicrohttpd reports the close before it calls close(2), and the close
 * bumps the generation under the same lock.
 *
 * A slot carries two deadlines, each as the time it was armed (0: none),
 * for the deadline thread to compare with the timeout in force: the write
 * deadline of a response piece in flight (write_armed_ms), and the request
 * deadline (request_armed_ms), armed from the moment the connection waits
 * for a request, at accept or when its previous response ended, until the
 * whole request (headers, and a body if the client sends one) is in.
 *
 * Notes on synchronization
 * ------------------------
 * - write_armed_ms and request_armed_ms (in the connection's ConnActivity
 *   entry, conn_activity.c) are stored by the connection's own thread
 *   (relaxed), and by open and close under `lock`, and read by the
 *   deadline thread; they share a cache line with nothing of any other
 *   connection, so neither path shares a line across connections.
 *   query_strings, target_len, resolved, query_seen and query_refused, on
 *   the same line, are the connection's own thread's alone (resolved is
 *   freed by its close notification, on that thread).
 * - gen_state, fd, parked, watched, peer_gone, peer and handle change
 *   under `lock` only; gen_state is also an atomic so that readers may
 *   peek without it.  handle is written only by the connection's own
 *   thread (and at open), which may therefore read it without the lock;
 *   the deadline thread reads it under the lock.  peer_gone is set by the
 *   park thread and read by a park, both under the lock (waiters.c).
 * - The free list is guarded by free_lock, taken at open and close only.
 *
 * IDENTIFICATION
 *	  src/net/conn_table.c
 *
 *-------------------------------------------------------------------------
 */
#include "conn_table.h"

#include <stdlib.h>
#include <string.h>

#ifdef POSTGRES_H
#error "conn_table.c runs on HTTP threads and must not include postgres.h"
#endif

/*
 * `shared`: nslots ConnActivity entries in shared memory, where backends
 * can see them; NULL: the table allocates its own (standalone tests).
 */
int
conn_table_init(ConnTable *table, uint32_t nslots, ConnActivity *shared)
{
	table->nslots = nslots;
	table->slots = aligned_alloc(128, sizeof(ConnSlot) * (nslots ? nslots : 1));
	if (table->slots == NULL)
		return -1;
	table->owns_activity = shared == NULL;
	table->activity = shared ? shared : aligned_alloc(128, conn_activity_size(nslots));
	if (table->activity == NULL)
	{
		free(table->slots);
		table->slots = NULL;
		return -1;
	}
	conn_activity_init(table->activity, nslots);
	memset(table->slots, 0, sizeof(ConnSlot) * (nslots ? nslots : 1));
	for (uint32_t i = 0; i < nslots; i++)
	{
		ConnSlot   *s = &table->slots[i];

		atomic_init(&s->gen_state, CONN_SLOT_FREE);
		pthread_mutex_init(&s->lock, NULL);
		s->fd = -1;
		s->next_free = i + 1 < nslots ? i + 1 : CONN_NO_SLOT;
	}
	pthread_mutex_init(&table->free_lock, NULL);
	table->free_head = nslots > 0 ? 0 : CONN_NO_SLOT;
	atomic_init(&table->write_timeout_ms, 0);
	atomic_init(&table->request_timeout_ms, 0);
	return 0;
}

void
conn_table_destroy(ConnTable *table)
{
	if (table->slots == NULL)
		return;
	for (uint32_t i = 0; i < table->nslots; i++)
		pthread_mutex_destroy(&table->slots[i].lock);
	pthread_mutex_destroy(&table->free_lock);
	for (uint32_t i = 0; i < table->nslots; i++)
		conn_activity_close(&table->activity[i]);
	if (table->owns_activity)
		free(table->activity);
	table->activity = NULL;
	free(table->slots);
	table->slots = NULL;
}

/*
 * Gives a new connection a slot, its request deadline armed (it waits for
 * its first request); CONN_NO_SLOT when all are taken.
 */
uint32_t
conn_table_open(ConnTable *table, int fd, const char *peer)
{
	uint32_t	i;
	ConnSlot   *s;
	uint64_t	gs;

	pthread_mutex_lock(&table->free_lock);
	i = table->free_head;
	if (i != CONN_NO_SLOT)
		table->free_head = table->slots[i].next_free;
	pthread_mutex_unlock(&table->free_lock);
	if (i == CONN_NO_SLOT)
		return CONN_NO_SLOT;

	s = &table->slots[i];
	pthread_mutex_lock(&s->lock);
	gs = atomic_load(&s->gen_state);
	s->fd = fd;
	s->parked = NULL;
	s->watched = false;
	s->peer_gone = false;
	strncpy(s->peer, peer ? peer : "?", sizeof(s->peer) - 1);
	s->peer[sizeof(s->peer) - 1] = '\0';
	s->handle[0] = '\0';
	conn_activity_open(&table->activity[i], s->peer, conn_now_coarse_ms());
	atomic_store(&s->gen_state, ((gs >> 8) + 1) << 8 | CONN_SLOT_OPEN);
	pthread_mutex_unlock(&s->lock);
	return i;
}

/* The connection is closing (its socket is still open): free the slot. */
void
conn_table_close(ConnTable *table, uint32_t i)
{
	ConnSlot   *s;
	uint64_t	gs;

	if (i == CONN_NO_SLOT || i >= table->nslots)
		return;
	s = &table->slots[i];
	pthread_mutex_lock(&s->lock);
	gs = atomic_load(&s->gen_state);
	s->fd = -1;
	s->parked = NULL;
	conn_activity_close(&table->activity[i]);
	atomic_store(&s->gen_state, ((gs >> 8) + 1) << 8 | CONN_SLOT_FREE);
	pthread_mutex_unlock(&s->lock);

	pthread_mutex_lock(&table->free_lock);
	s->next_free = table->free_head;
	table->free_head = i;
	pthread_mutex_unlock(&table->free_lock);
}

void
conn_table_set_handle(ConnTable *table, uint32_t i, const char *handle)
{
	ConnSlot   *s;

	if (i == CONN_NO_SLOT)
		return;
	s = &table->slots[i];
	pthread_mutex_lock(&s->lock);
	strncpy(s->handle, handle, sizeof(s->handle) - 1);
	s->handle[sizeof(s->handle) - 1] = '\0';
	pthread_mutex_unlock(&s->lock);
	conn_activity_set_handle(&table->activity[i], handle);
}

uint64_t
conn_table_generation(ConnTable *table, uint32_t i)
{
	return atomic_load(&table->slots[i].gen_state) >> 8;
}
