/*-------------------------------------------------------------------------
 *
 * refusal.c
 *		Setting and freeing the malloc'd facts of a Refusal, and the
 *		sentence of a failed shape.
 *
 * Used by both sides: the main thread sets a resolution's refusal, the
 * HTTP thread that sends the answer frees it (shape_resolution_free).  A
 * failed shape keeps only its reason and facts in its slot; its sentence
 * is made here, for the answer (refusal_render.c) and for the server log
 * (registry.c), so that both say the same.
 *
 * IDENTIFICATION
 *	  src/contract/refusal.c
 *
 *-------------------------------------------------------------------------
 */
#include "refusal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef POSTGRES_H
#error "refusal.c is shared with HTTP threads and must not include postgres.h"
#endif

bool
refusal_set(Refusal *r, RefusalReason reason, const char *field, const char *text)
{
	refusal_free(r);
	r->reason = reason;
	if (field != NULL && (r->field = strdup(field)) == NULL)
		return false;
	if (text != NULL && (r->text = strdup(text)) == NULL)
	{
		free(r->field);
		r->field = NULL;
		return false;
	}
	return true;
}

void
refusal_free(Refusal *r)
{
	free(r->field);
	free(r->text);
	memset(r, 0, sizeof(*r));
}

void
refusal_failure_sentence(RefusalReason reason, int64_t number, const char *text,
						 char *buf, size_t len)
{
	const char *t = text ? text : "";

	switch (reason)
	{
		case REFUSAL_SNAPSHOT_FORBIDDEN:
			snprintf(buf, len, "Forbidden: %s", t);
			break;
		case REFUSAL_SNAPSHOT_FAILED:
			snprintf(buf, len, "The shape's snapshot failed: %s", t);
			break;
		case REFUSAL_SNAPSHOT_TIMEOUT:
			snprintf(buf, len,
					 "The shape's snapshot took longer than the %" PRId64 " ms that "
					 "shape_sync.snapshot_statement_timeout allows; narrow the shape with a "
					 "where clause",
					 number);
			break;
		case REFUSAL_SNAPSHOT_ROW_TOO_SLOW:
			snprintf(buf, len,
					 "The shape's where clause took longer than the %" PRId64 " ms that "
					 "shape_sync.where_evaluation_timeout allows on one row",
					 number);
			break;
		case REFUSAL_SNAPSHOT_ROW_FAILED:
			snprintf(buf, len, "The shape's where clause failed on a row of the table: %s", t);
			break;
		case REFUSAL_SNAPSHOT_CANCELLED:
			snprintf(buf, len, "The shape's snapshot was cancelled, please retry");
			break;
		case REFUSAL_SNAPSHOT_CONFLICT:
			snprintf(buf, len, "The shape's snapshot could not be taken: %s, please retry", t);
			break;
		case REFUSAL_SNAPSHOT_TABLE_BUSY:
			snprintf(buf, len,
					 "The table is in use: REPLICA IDENTITY FULL could not be set within %" PRId64
					 " ms, please retry",
					 number);
			break;
		case REFUSAL_SNAPSHOT_WORKER_STOPPED:
			snprintf(buf, len,
					 "The snapshot worker stopped before the snapshot was complete, please retry");
			break;
		case REFUSAL_STREAM_CHANGE_TOO_SLOW:
			snprintf(buf, len,
					 "The shape's where clause took longer than the %" PRId64 " ms that "
					 "shape_sync.where_evaluation_timeout allows on one change of its table",
					 number);
			break;
		default:
			snprintf(buf, len, "%s", t);
			break;
	}
}
