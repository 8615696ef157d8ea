/*
 * fuzz_shape_query.c
 *		A whole query string through shape_query_add / shape_query_finish.
 *
 * The input is split like a decoded query string: pairs separated by '&'
 * (or NUL), key and value by the first '='; a key without '=' has a NULL
 * value, as libmicrohttpd passes it.  Oracles: the error body is valid JSON
 * of the documented shape; an accepted query satisfies the cross-parameter
 * rules of section 1.1; nothing leaks (ASan).
 */
#include "fuzz_common.h"

#include "request_parse.h"

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

		while (j < size && buf[j] != '&' && buf[j] != '\0')
			j++;
		buf[j] = '\0';
		eq = strchr(key, '=');
		if (eq)
		{
			*eq = '\0';
			shape_query_add(q, errs, key, eq + 1);
		}
		else if (key[0] != '\0')
			shape_query_add(q, errs, key, NULL);
		i = j + 1;
	}
	free(buf);
}

static void
check_errors(const RequestErrors *errs)
{
	char	   *json = request_errors_json(errs);

	FUZZ_ASSERT(json != NULL);
	FUZZ_ASSERT(json_is_valid(json));
	FUZZ_ASSERT(strncmp(json, "{\"message\":\"Invalid request\",\"errors\":{", 39) == 0);
	FUZZ_ASSERT(errs->count >= 1 && errs->count <= REQ_MAX_ERRORS);
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
	shape_query_finish(&q, &errs);
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
			FUZZ_ASSERT(q.def.columns[i][0] != '\0');
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
