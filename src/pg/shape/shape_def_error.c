/*-------------------------------------------------------------------------
 *
 * shape_def_error.c
 *		The request field a shape definition's error belongs to, and the
 *		sentence Electric's clients expect for it.
 *
 * Failures of validation (shape_def.c) and of the where-clause guard
 * (shape_where.c, shape_where_check.c, shape_where_fold.c) are ordinary ereport(ERROR)s, so the SQL function
 * validate_shape() reports them the PostgreSQL way.  The HTTP path catches
 * them and needs two more facts, kept in shape_def_error_field and
 * shape_def_http_message: which request field failed, and, where
 * Electric's clients expect a particular sentence, that sentence.  Each
 * check records them with shape_def_error_set just before it raises its
 * error; the caller that catches it reads them, and
 * shape_def_error_message turns them, with the error, into what the client
 * is told.
 *
 * IDENTIFICATION
 *	  src/pg/shape/shape_def_error.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "mb/pg_wchar.h"

#include "shape_def_error.h"

const char *shape_def_error_field = NULL;
char		shape_def_http_message[512];

/* Records the field and Electric's wording for the error about to be raised. */
void
shape_def_error_set(const char *field, const char *http_message)
{
	shape_def_error_field = field;
	if (http_message)
		strlcpy(shape_def_http_message, http_message, sizeof(shape_def_http_message));
	else
		shape_def_http_message[0] = '\0';
}

/* Byte offset of the (1-based) character position `pos` in `text`. */
static int
serr_byte_position(const char *text, int pos)
{
	int			bytes = 0;

	for (int c = 1; c < pos && text[bytes] != '\0'; c++)
		bytes += pg_mblen(text + bytes);
	return bytes;
}

/*
 * What a client is told of a validation error of field `field`: the
 * sentence Electric's clients expect when there is one, a where clause's
 * syntax error with its location, or PostgreSQL's message.
 */
char *
shape_def_error_message(const char *field, const ErrorData *edata)
{
	if (shape_def_http_message[0] != '\0')
		return pstrdup(shape_def_http_message);
	if (strcmp(field, "where") == 0 && edata->internalpos > 0 && edata->internalquery)
		return psprintf("At location %d: %s",
						serr_byte_position(edata->internalquery, edata->internalpos),
						edata->message);
	return pstrdup(edata->message);
}
