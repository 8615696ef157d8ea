/*-------------------------------------------------------------------------
 *
 * refusal_render.h
 *		What the client reads of a refusal: status, body, retry-after.
 *
 * IDENTIFICATION
 *	  src/net/refusal_render.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef REFUSAL_RENDER_H
#define REFUSAL_RENDER_H

#include <stdbool.h>

#include "refusal.h"

typedef struct RefusalAnswer
{
	unsigned	status;			/* HTTP status */
	char	   *body;			/* malloc'd JSON; NULL with must_refetch, or
								 * out of memory */
	unsigned	retry_after_s;	/* the retry-after header, sent with a 503
								 * only; 0 with any other status */
	bool		must_refetch;	/* 409: the must-refetch control message is
								 * the answer, not `body` */
} RefusalAnswer;

/*
 * Renders r into *out; false when out of memory (out->body NULL, the
 * status and retry-after set).  Free out->body with free().
 */
extern bool refusal_render(const Refusal *r, RefusalAnswer *out);

#endif							/* REFUSAL_RENDER_H */
