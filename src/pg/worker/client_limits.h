/*-------------------------------------------------------------------------
 *
 * client_limits.h
 *		Per-client limits on new shapes and refused definitions, a minute
 *		at a time.
 *
 * IDENTIFICATION
 *	  src/pg/worker/client_limits.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SHAPE_SYNC_CLIENT_LIMITS_H
#define SHAPE_SYNC_CLIENT_LIMITS_H

#include "postgres.h"

#include "utils/timestamp.h"

#include "shape_request.h"

/* The registry starts (its memory context) and stops. */
extern void client_limits_start(MemoryContext context);
extern void client_limits_stop(void);

/* Once a minute at most: forgets the clients whose minute is over. */
extern void client_limits_maintain(TimestampTz now);

/*
 * Whether the request's client may create another shape this minute; if
 * not, *retry_s says when it may.  client_created counts one.
 */
extern bool client_may_create(const ShapeRequest *req, unsigned *retry_s);
extern void client_created(const ShapeRequest *req);

/*
 * Whether the main thread looks at another definition of the request's
 * client this minute; if not, *retry_s says when.  client_refused counts
 * one refused.
 */
extern bool client_may_validate(const ShapeRequest *req, unsigned *retry_s);
extern void client_refused(const ShapeRequest *req);

/* Whether the definition validated lately; and noting that it did. */
extern bool client_definition_valid_lately(const ShapeDefinition *def);
extern void client_definition_validated(const ShapeDefinition *def);

#endif							/* SHAPE_SYNC_CLIENT_LIMITS_H */
