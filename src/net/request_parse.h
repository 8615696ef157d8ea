/*-------------------------------------------------------------------------
 *
 * request_parse.h
 *		Parsing and validation of GET /v1/shape query parameters.
 *
 * IDENTIFICATION
 *	  src/net/request_parse.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef REQUEST_PARSE_H
#define REQUEST_PARSE_H

#include <stdbool.h>
#include <stddef.h>

#include "log_offset.h"
#include "request_queue.h"

#define REQ_MAX_PARAMS		256
#define REQ_MAX_ERRORS		8
#define REQ_IDENT_MAX		63	/* NAMEDATALEN - 1 */

/* One validation failure: a field and a message, as Electric reports it. */
typedef struct RequestError
{
	const char *field;
	char		message[256];
} RequestError;

typedef struct RequestErrors
{
	int			count;
	RequestError items[REQ_MAX_ERRORS];
} RequestErrors;

/* Everything a shape GET carries besides the definition. */
typedef struct ShapeQuery
{
	ShapeDefinition def;
	bool		has_table;
	bool		offset_now;		/* offset=now */
	bool		has_offset;
	bool		bad_offset;		/* given, but not an offset */
	LogOffset	offset;
	char	   *handle;			/* NULL when absent or ignored */
	char	   *reuse_handle;	/* offset -1 or now: the handle sent (the one a
								 * 409 named), which is not checked, only
								 * looked for among kept resolutions */
	bool		live;
	bool		live_sse;
	char	   *cursor;
	uint32_t	given;			/* QUERY_GIVEN_* bits: the parameters seen, to refuse a repeat */
	bool		subset;			/* some subset__* parameter was given */
	SubsetRequest *subset_in;	/* the subset__* and queryable_columns values
								 * given; NULL when none */
} ShapeQuery;

/*
 * Feeds one decoded key/value pair, with their lengths (a decoded %00 is a
 * NUL inside them); value may be NULL.  Unknown keys are ignored.  A
 * parameter that says what is served (the definition, the handle, the
 * offset, a subset's fields) given twice is refused: a proxy that
 * authorises requests might read the first where shape_sync would read the
 * last.
 */
extern void shape_query_add(ShapeQuery *q, RequestErrors *errs,
							const char *key, size_t key_len,
							const char *value, size_t value_len);

/*
 * Checks the cross-parameter rules once all pairs are in, and the where
 * clause against max_where_length bytes (0: no limit).
 */
extern void shape_query_finish(ShapeQuery *q, RequestErrors *errs, int max_where_length);

/* DELETE /v1/shape: a handle, a definition, or both. */
extern void shape_query_finish_delete(ShapeQuery *q, RequestErrors *errs);

extern void shape_query_free(ShapeQuery *q);

/*
 * Identifier parsing, PostgreSQL rules: unquoted names are folded to lower
 * case, "quoted" names keep their case and "" stands for one quote.
 */
extern bool parse_table_name(const char *text, char **schema, char **table,
							 char *err, size_t errlen);
extern bool parse_column_list(const char *text, char ***columns, int *ncolumns,
							  char *err, size_t errlen);

extern void request_errors_add(RequestErrors *errs, const char *field,
							   const char *fmt,...)
			__attribute__((format(printf, 3, 4)));

/* {"message":"Invalid request","errors":{...}} as a malloc'd string. */
extern char *request_errors_json(const RequestErrors *errs);

#endif							/* REQUEST_PARSE_H */
