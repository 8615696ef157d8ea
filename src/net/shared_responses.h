/*-------------------------------------------------------------------------
 *
 * shared_responses.h
 *		One live response per shape, shared by the waiters a change wakes.
 *
 * IDENTIFICATION
 *	  src/net/shared_responses.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SHARED_RESPONSES_H
#define SHARED_RESPONSES_H

#include <microhttpd.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Bodies up to this are shared; longer ones are rare in live responses. */
#define SHARED_RESPONSE_MAX_BODY	(16 * 1024)
#define SHARED_RESPONSE_MAX_KEY		512

/*
 * Everything a live response's bytes depend on, besides its body: the
 * shape (handle), the offsets, up-to-date, the cursor and the origin its
 * CORS headers echo, as one string.
 */
typedef struct SharedResponseKey
{
	char		text[SHARED_RESPONSE_MAX_KEY];
	size_t		len;
} SharedResponseKey;

typedef struct SharedResponse
{
	pthread_mutex_t lock;
	SharedResponseKey key;
	char	   *body;			/* the response's body (it owns it) */
	size_t		body_len;
	struct MHD_Response *response;	/* one reference held here; NULL: none */
	uint64_t	hits;			/* requests that queued the kept one */
} SharedResponse;

typedef struct SharedResponses
{
	uint32_t	nslots;
	SharedResponse *slots;		/* one per shape slot */
} SharedResponses;

extern int	shared_responses_init(SharedResponses *shared, uint32_t nslots);
extern void shared_responses_destroy(SharedResponses *shared);

/*
 * Queues shape `slot`'s shared response on `connection` if it has the same
 * key and body; true when it did (*ret is MHD_queue_response's result).
 */
extern bool shared_responses_queue(SharedResponses *shared, uint32_t slot,
								   const SharedResponseKey *key, const char *body,
								   size_t body_len, struct MHD_Connection *connection,
								   enum MHD_Result *ret);

/*
 * Makes `response`, already queued by the caller, with body `body` (which
 * the response owns), shape `slot`'s shared response, taking the caller's
 * reference to it.
 */
extern void shared_responses_keep(SharedResponses *shared, uint32_t slot,
								  const SharedResponseKey *key, const char *body,
								  size_t body_len, struct MHD_Response *response);

#endif							/* SHARED_RESPONSES_H */
