/*-------------------------------------------------------------------------
 *
 * shared_responses.c
 *		One live response per shape, shared by the waiters a change wakes.
 *
 * This file runs on libmicrohttpd threads and must not call into
 * PostgreSQL.
 *
 * A commit wakes every live request parked on its shape at once, and most
 * of them asked from the same offset, with the same cursor and origin: their
 * answers are the same bytes.  Building each answer anew (the response
 * object, a dozen headers, each a malloc'd copy) is most of what a wake-up
 * costs the HTTP threads beyond the write itself.  So each shape slot keeps
 * the last live response it built, and a request whose answer would be the
 * same, byte for byte, queues that response instead: libmicrohttpd counts
 * the references of a response, sends a buffer response to several
 * connections at once, and frees it with its body when the last lets go.
 *
 * "The same" is decided on everything the bytes depend on: the key (the
 * handle, the requested and the answered offset, up-to-date, the cursor
 * and the origin CORS echoes) and the body itself, which the request has
 * built anyway (a memcmp of at most SHARED_RESPONSE_MAX_BODY bytes), so
 * that no reasoning about which log version or compaction a request read
 * can go wrong.  Only live answers with data, of a known length up to that
 * size, are shared (shape_serve.c decides); the memory kept is at most one
 * such body per shape slot.
 *
 * Notes on synchronization
 * ------------------------
 * - A SharedResponse is read and replaced under its lock.  A request
 *   queues the kept response under that lock, so that the reference it
 *   takes (libmicrohttpd's, taken inside MHD_queue_response under the
 *   response's own mutex) is taken before a replacement could drop the
 *   slot's.  The slot's reference is dropped (MHD_destroy_response) after
 *   the lock is released; connections still sending it hold their own.
 *
 * IDENTIFICATION
 *	  src/net/shared_responses.c
 *
 *-------------------------------------------------------------------------
 */
#include "shared_responses.h"

#include <stdlib.h>
#include <string.h>

#ifdef POSTGRES_H
#error "shared_responses.c runs on HTTP threads and must not include postgres.h"
#endif

int
shared_responses_init(SharedResponses *shared, uint32_t nslots)
{
	shared->slots = calloc(nslots ? nslots : 1, sizeof(SharedResponse));
	if (shared->slots == NULL)
		return -1;
	shared->nslots = nslots;
	for (uint32_t i = 0; i < nslots; i++)
		pthread_mutex_init(&shared->slots[i].lock, NULL);
	return 0;
}

void
shared_responses_destroy(SharedResponses *shared)
{
	if (shared->slots == NULL)
		return;
	for (uint32_t i = 0; i < shared->nslots; i++)
	{
		if (shared->slots[i].response != NULL)
			MHD_destroy_response(shared->slots[i].response);
		pthread_mutex_destroy(&shared->slots[i].lock);
	}
	free(shared->slots);
	shared->slots = NULL;
}

static bool
shared_same(const SharedResponse *s, const SharedResponseKey *key, const char *body,
			size_t body_len)
{
	return s->response != NULL && s->key.len == key->len && s->body_len == body_len &&
		memcmp(s->key.text, key->text, key->len) == 0 && memcmp(s->body, body, body_len) == 0;
}

bool
shared_responses_queue(SharedResponses *shared, uint32_t slot, const SharedResponseKey *key,
					   const char *body, size_t body_len, struct MHD_Connection *connection,
					   enum MHD_Result *ret)
{
	SharedResponse *s;
	bool		hit;

	if (slot >= shared->nslots)
		return false;
	s = &shared->slots[slot];
	pthread_mutex_lock(&s->lock);
	hit = shared_same(s, key, body, body_len);
	if (hit)
	{
		*ret = MHD_queue_response(connection, MHD_HTTP_OK, s->response);
		s->hits++;
	}
	pthread_mutex_unlock(&s->lock);
	return hit;
}

void
shared_responses_keep(SharedResponses *shared, uint32_t slot, const SharedResponseKey *key,
					  const char *body, size_t body_len, struct MHD_Response *response)
{
	SharedResponse *s;
	struct MHD_Response *old;

	if (slot >= shared->nslots)
	{
		MHD_destroy_response(response);
		return;
	}
	s = &shared->slots[slot];
	pthread_mutex_lock(&s->lock);
	old = s->response;
	s->response = response;
	s->key = *key;
	s->body = (char *) body;
	s->body_len = body_len;
	pthread_mutex_unlock(&s->lock);
	if (old != NULL)
		MHD_destroy_response(old);
}
