/*
 * fuzz_shape_query.c
 *		A whole query string through shape_query_add / shape_query_finish.
 *
 * The input is split like a decoded query string: pairs separated by '&',
 * key and value by the first '='; a key without '=' has a NULL value, as
 * libmicrohttpd passes it.  Keys and values go in with their lengths, so a
 * NUL byte in the input is a decoded %00 inside them.  Oracles: the error
 * body is valid JSON of the documented shape and says each error once; an
 * accepted query satisfies the cross-parameter rules of section 1.1, holds
 * no NUL and only well-formed UTF-8 in what the main thread will parse, and
 * a where clause within the limit, and so do a subset's inputs and
 * queryable_columns; nothing leaks (ASan).
 */
#include "fuzz_common.h"

#include "json_text.h"
#include "request_parse.h"

#define FUZZ_WHERE_LIMIT	512

static void
feed(ShapeQuery *q, RequestErrors *errs, const uint8_t *data, size_t size)
{
	char	   *buf = malloc(size + 1);
	size_t		i = 0;

	memcpy(buf, data, size);
	buf[size] = '\0';
	while (i <= size)
	{
		size_t		j = i;
		char	   *eq;
		char	   *key = buf + i;

		while (j < size && buf[j] != '&')
			j++;
		buf[j] = '\0';
		eq = memchr(key, '=', j - i);
		if (eq)
		{
			*eq = '\0';
			shape_query_add(q, errs, key, (size_t) (eq - key), eq + 1,
							(size_t) (buf + j - eq - 1));
		}
		else if (j > i)
			shape_query_add(q, errs, key, j - i, NULL, 0);
		i = j + 1;
	}
	free(buf);
}

/* A string the main thread will parse: no NUL cut it short, valid UTF-8. */
static void
check_text(const char *s)
{
	if (s != NULL)
		FUZZ_ASSERT(utf8_is_valid(s, strlen(s)));
}

static void
check_errors(const RequestErrors *errs)
{
	char	   *json = request_errors_json(errs);

	FUZZ_ASSERT(json != NULL);
	FUZZ_ASSERT(json_is_valid(json));
	FUZZ_ASSERT(strncmp(json, "{\"message\":\"Invalid request\",\"errors\":{", 39) == 0);
	FUZZ_ASSERT(errs->count >= 1 && errs->count <= REQ_MAX_ERRORS);
	for (int i = 0; i < errs->count; i++)
		for (int j = 0; j < i; j++)
			FUZZ_ASSERT(strcmp(errs->items[i].field, errs->items[j].field) != 0 ||
						strcmp(errs->items[i].message, errs->items[j].message) != 0);
	free(json);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	ShapeQuery	q;
	RequestErrors errs;

	if (size > 65536)
		return 0;

	/* GET */
	memset(&q, 0, sizeof(q));
	memset(&errs, 0, sizeof(errs));
	feed(&q, &errs, data, size);
	shape_query_finish(&q, &errs, FUZZ_WHERE_LIMIT);
	if (errs.count > 0)
		check_errors(&errs);
	else
	{
		bool		initial = q.offset_now || log_offset_is_before_all(q.offset);

		FUZZ_ASSERT(q.has_table && q.def.table != NULL && q.def.table[0] != '\0');
		FUZZ_ASSERT(strlen(q.def.table) <= REQ_IDENT_MAX);
		FUZZ_ASSERT(q.has_offset);
		if (initial)
			FUZZ_ASSERT(q.handle == NULL);
		else
			FUZZ_ASSERT(q.handle != NULL && q.handle[0] != '\0');
		if (q.live)
			FUZZ_ASSERT(!initial);
		if (q.live_sse)
			FUZZ_ASSERT(q.live);
		FUZZ_ASSERT(q.def.nparams >= 0 && q.def.nparams <= REQ_MAX_PARAMS);
		FUZZ_ASSERT((q.def.columns == NULL) == (q.def.ncolumns == 0));
		for (int i = 0; i < q.def.ncolumns; i++)
		{
			FUZZ_ASSERT(q.def.columns[i][0] != '\0');
			check_text(q.def.columns[i]);
		}
		check_text(q.def.table);
		check_text(q.def.schema);
		check_text(q.def.where);
		for (int i = 0; i < q.def.nparams; i++)
			check_text(q.def.params[i]);
		FUZZ_ASSERT(q.def.where == NULL || strlen(q.def.where) <= FUZZ_WHERE_LIMIT);
		/* a subset's inputs go to a snapshot worker's parsers as they are */
		if (q.subset)
			FUZZ_ASSERT(q.subset_in != NULL);
		if (q.subset_in != NULL)
		{
			check_text(q.subset_in->where);
			check_text(q.subset_in->params);
			check_text(q.subset_in->limit);
			check_text(q.subset_in->offset);
			check_text(q.subset_in->order_by);
			FUZZ_ASSERT((q.subset_in->queryable == NULL) == (q.subset_in->nqueryable == 0));
			for (int i = 0; i < q.subset_in->nqueryable; i++)
			{
				FUZZ_ASSERT(q.subset_in->queryable[i][0] != '\0');
				check_text(q.subset_in->queryable[i]);
			}
		}
	}
	shape_query_free(&q);

	/* DELETE: a handle, a definition, or both */
	memset(&q, 0, sizeof(q));
	memset(&errs, 0, sizeof(errs));
	feed(&q, &errs, data, size);
	shape_query_finish_delete(&q, &errs);
	if (errs.count > 0)
		check_errors(&errs);
	else
		FUZZ_ASSERT(q.has_table || (q.handle != NULL && q.handle[0] != '\0'));
	shape_query_free(&q);
	return 0;
}
