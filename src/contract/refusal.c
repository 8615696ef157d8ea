/*-------------------------------------------------------------------------
 *
 * refusal.c
 *		Setting and freeing the malloc'd facts of a Refusal.
 *
 * Used by both sides: the main thread sets a resolution's refusal, the
 * HTTP thread that sends the answer frees it (shape_resolution_free).
 *
 * IDENTIFICATION
 *	  src/contract/refusal.c
 *
 *-------------------------------------------------------------------------
 */
#ifdef POSTGRES_H
#error "refusal.c is shared with HTTP threads and must not include postgres.h"
#endif

#include "refusal.h"

#include <stdlib.h>
#include <string.h>

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
