/*-------------------------------------------------------------------------
 *
 * request_parse.c
 *		Parsing and validation of GET /v1/shape query parameters.
 *
 * This file runs on libmicrohttpd threads and must not call into
 * PostgreSQL.
 *
 * Everything a client sends passes through here before anything else looks
 * at it, so every function is total over its input: arbitrary bytes give
 * either a parsed value or an error message, never a crash or an unbounded
 * allocation (identifiers are capped at 63 bytes, params at REQ_MAX_PARAMS,
 * the where clause at shape_sync.max_where_length).  Values come with their
 * lengths: a value of a known parameter that holds a NUL byte (a decoded
 * %00, which would silently cut it short) or is not well-formed UTF-8 is an
 * error of that parameter.  An error is reported once however many
 * parameters repeat it.  The rules and messages follow Electric's API so
 * that the official client sees the errors it expects.  The where clause is
 * not parsed here: only PostgreSQL's parser, on the main thread, decides
 * what it means.
 *
 * IDENTIFICATION
 *	  src/net/request_parse.c
 *
 *-------------------------------------------------------------------------
 */
#include "request_parse.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_text.h"

#ifdef POSTGRES_H
#error "request_parse.c runs on HTTP threads and must not include postgres.h"
#endif

void
request_errors_add(RequestErrors *errs, const char *field, const char *fmt,...)
{
	va_list		ap;
	RequestError *e;

	if (errs->count >= REQ_MAX_ERRORS)
		return;
	e = &errs->items[errs->count];
	e->field = field;
	va_start(ap, fmt);
	vsnprintf(e->message, sizeof(e->message), fmt, ap);
	va_end(ap);
	/* one error said once, however many parameters repeat it */
	for (int i = 0; i < errs->count; i++)
		if (strcmp(errs->items[i].field, field) == 0 &&
			strcmp(errs->items[i].message, e->message) == 0)
			return;
	errs->count++;
}

/*
 * Renders the errors grouped by field, in first-seen field order:
 * {"message":"Invalid request","errors":{"f":["m1","m2"],...}}
 */
char *
request_errors_json(const RequestErrors *errs)
{
	JsonBuf		out;

	json_buf_init(&out);
	json_buf_puts(&out, "{\"message\":\"Invalid request\",\"errors\":{");
	for (int i = 0; i < errs->count; i++)
	{
		bool		seen = false;
		bool		first = true;

		for (int j = 0; j < i; j++)
			if (strcmp(errs->items[j].field, errs->items[i].field) == 0)
				seen = true;
		if (seen)
			continue;
		if (i > 0)
			json_buf_putc(&out, ',');
		json_buf_put_string(&out, errs->items[i].field);
		json_buf_puts(&out, ":[");
		for (int j = i; j < errs->count; j++)
		{
			if (strcmp(errs->items[j].field, errs->items[i].field) != 0)
				continue;
			if (!first)
				json_buf_putc(&out, ',');
			first = false;
			json_buf_put_string(&out, errs->items[j].message);
		}
		json_buf_putc(&out, ']');
	}
	json_buf_puts(&out, "}}");
	return json_buf_finish(&out);
}

/* ---------------------------------------------------------- identifiers */

static bool
is_ident_start(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c >= 0x80;
}

static bool
is_ident_char(unsigned char c)
{
	return is_ident_start(c) || (c >= '0' && c <= '9') || c == '$';
}

/*
 * Parses one identifier at *p, stopping at `stop` (or the end); stores a
 * malloc'd copy in *out and advances *p past it.
 */
/* A character for an error message: quoted if printable ASCII, else its byte value. */
static const char *
rp_describe_char(char c, char *buf, size_t len)
{
	unsigned char u = (unsigned char) c;

	if (u >= 0x20 && u < 0x7F && u != '"' && u != '\\')
		snprintf(buf, len, "\"%c\"", c);
	else
		snprintf(buf, len, "byte 0x%02X", u);
	return buf;
}

static bool
parse_identifier(const char **p, char stop, char **out, char *err, size_t errlen)
{
	const char *s = *p;
	char		buf[REQ_IDENT_MAX + 1];
	char		what[16];
	size_t		n = 0;

	if (*s == '"')
	{
		for (s++;; s++)
		{
			if (*s == '\0')
			{
				snprintf(err, errlen, "Invalid identifier: unterminated quoted identifier");
				return false;
			}
			if (*s == '"')
			{
				if (s[1] != '"')
					break;
				s++;
			}
			if (n == REQ_IDENT_MAX)
			{
				snprintf(err, errlen, "Identifier is too long: at most %d bytes are allowed",
						 REQ_IDENT_MAX);
				return false;
			}
			buf[n++] = *s;
		}
		s++;					/* closing quote */
		if (n == 0)
		{
			snprintf(err, errlen, "Invalid zero-length delimited identifier");
			return false;
		}
	}
	else
	{
		if (!is_ident_start((unsigned char) *s))
		{
			if (*s == '\0' || *s == stop)
				snprintf(err, errlen, "Invalid zero-length delimited identifier");
			else
				snprintf(err, errlen,
						 "Invalid unquoted identifier: %s is not allowed here; quote names with special characters",
						 rp_describe_char(*s, what, sizeof(what)));
			return false;
		}
		for (; is_ident_char((unsigned char) *s); s++)
		{
			if (n == REQ_IDENT_MAX)
			{
				snprintf(err, errlen, "Identifier is too long: at most %d bytes are allowed",
						 REQ_IDENT_MAX);
				return false;
			}
			buf[n++] = (*s >= 'A' && *s <= 'Z') ? (char) (*s - 'A' + 'a') : *s;
		}
	}
	if (*s != '\0' && *s != stop)
	{
		snprintf(err, errlen,
				 "Invalid identifier: unexpected %s; quote names with special characters",
				 rp_describe_char(*s, what, sizeof(what)));
		return false;
	}
	buf[n] = '\0';
	*out = strdup(buf);
	*p = s;
	return true;
}

/* "name" or "schema.name", with PostgreSQL's quoting rules. */
bool
parse_table_name(const char *text, char **schema, char **table,
				 char *err, size_t errlen)
{
	const char *p = text;
	char	   *first = NULL;
	char	   *second = NULL;

	*schema = *table = NULL;
	if (!parse_identifier(&p, '.', &first, err, errlen))
		return false;
	if (*p == '.')
	{
		p++;
		if (!parse_identifier(&p, '.', &second, err, errlen))
		{
			free(first);
			return false;
		}
		if (*p != '\0')
		{
			snprintf(err, errlen, "Invalid table name: expected \"table\" or \"schema.table\"");
			free(first);
			free(second);
			return false;
		}
		*schema = first;
		*table = second;
		return true;
	}
	*table = first;
	return true;
}

/* A comma-separated list of identifiers. */
bool
parse_column_list(const char *text, char ***columns, int *ncolumns,
				  char *err, size_t errlen)
{
	const char *p = text;
	char	  **list = NULL;
	int			n = 0;

	for (;;)
	{
		char	   *name;

		if (!parse_identifier(&p, ',', &name, err, errlen))
			goto fail;
		if (n % 16 == 0)
		{
			char	  **grown = realloc(list, (size_t) (n + 16) * sizeof(char *));

			if (grown == NULL)
			{
				free(name);
				snprintf(err, errlen, "out of memory");
				goto fail;
			}
			list = grown;
		}
		list[n++] = name;
		if (n > 1600)
		{
			snprintf(err, errlen, "Too many columns: a table has at most 1600");
			goto fail;
		}
		if (*p == '\0')
			break;
		p++;					/* the comma */
	}
	*columns = list;
	*ncolumns = n;
	return true;

fail:
	for (int i = 0; i < n; i++)
		free(list[i]);
	free(list);
	*columns = NULL;
	*ncolumns = 0;
	return false;
}

/* ------------------------------------------------------------- the query */

/* Whether the key (or value), of key_len bytes, is exactly `name`. */
static bool
key_is(const char *key, size_t key_len, const char *name)
{
	size_t		n = strlen(name);

	return key_len == n && memcmp(key, name, n) == 0;
}

/* Electric: any value other than "false" turns a flag on. */
static bool
flag_value(const char *value, size_t len)
{
	return !key_is(value, len, "false");
}

/* "params[N]" with 1 <= N <= REQ_MAX_PARAMS; 0 when the key is not one. */
static int
param_index(const char *key)
{
	const char *p = key + strlen("params[");
	int			n = 0;

	if (strncmp(key, "params[", 7) != 0 || *p < '1' || *p > '9')
		return 0;
	for (; *p >= '0' && *p <= '9'; p++)
	{
		n = n * 10 + (*p - '0');
		if (n > REQ_MAX_PARAMS)
			return -1;
	}
	return (p[0] == ']' && p[1] == '\0') ? n : 0;
}

static void
replace_string(char **slot, const char *value)
{
	free(*slot);
	*slot = strdup(value ? value : "");
}

/*
 * A value a known parameter may carry: no NUL byte (libmicrohttpd decodes
 * %00, and the value would silently end there) and well-formed UTF-8.
 */
/* The query's subset inputs, made on first use; NULL when out of memory. */
static SubsetRequest *
subset_inputs(ShapeQuery *q)
{
	if (q->subset_in == NULL)
	{
		q->subset_in = calloc(1, sizeof(SubsetRequest));
		if (q->subset_in != NULL)
			q->subset_in->cell = -1;
	}
	return q->subset_in;
}

static bool
value_acceptable(RequestErrors *errs, const char *field, const char *value, size_t len)
{
	if (memchr(value, '\0', len) != NULL)
	{
		request_errors_add(errs, field, "must not contain a NUL byte");
		return false;
	}
	if (!utf8_is_valid(value, len))
	{
		request_errors_add(errs, field, "must be valid UTF-8");
		return false;
	}
	return true;
}

/* the parameters that may be given once (ShapeQuery.given) */
enum
{
	QUERY_GIVEN_TABLE = 1 << 0,
	QUERY_GIVEN_OFFSET = 1 << 1,
	QUERY_GIVEN_HANDLE = 1 << 2,
	QUERY_GIVEN_WHERE = 1 << 3,
	QUERY_GIVEN_COLUMNS = 1 << 4,
	QUERY_GIVEN_REPLICA = 1 << 5,
	QUERY_GIVEN_LOG = 1 << 6,
	QUERY_GIVEN_QUERYABLE = 1 << 7,
};

/*
 * Notes that the parameter `name` (bit `bit`) was given; false, with an
 * error for it, when it was given before.
 */
static bool
given_once(ShapeQuery *q, RequestErrors *errs, uint32_t bit, const char *name)
{
	if (q->given & bit)
	{
		request_errors_add(errs, name, "is given more than once");
		return false;
	}
	q->given |= bit;
	return true;
}

void
shape_query_add(ShapeQuery *q, RequestErrors *errs, const char *key, size_t key_len,
				const char *value, size_t value_len)
{
	char		err[200];
	int			pidx;

	if (value == NULL)
	{
		value = "";
		value_len = 0;
	}
	if (memchr(key, '\0', key_len) != NULL)
		return;					/* not any parameter's name: ignored */

	if (key_is(key, key_len, "table"))
	{
		if (!given_once(q, errs, QUERY_GIVEN_TABLE, "table"))
			return;
		free(q->def.schema);
		free(q->def.table);
		q->def.schema = q->def.table = NULL;
		q->has_table = value_len > 0;
		if (q->has_table && value_acceptable(errs, "table", value, value_len) &&
			!parse_table_name(value, &q->def.schema, &q->def.table, err, sizeof(err)))
			request_errors_add(errs, "table", "%s", err);
	}
	else if (key_is(key, key_len, "offset"))
	{
		if (!given_once(q, errs, QUERY_GIVEN_OFFSET, "offset"))
			return;
		q->has_offset = true;
		q->offset_now = key_is(value, value_len, "now");
		q->bad_offset = !q->offset_now &&
			(memchr(value, '\0', value_len) != NULL || !log_offset_parse(value, &q->offset));
		if (q->bad_offset)
			request_errors_add(errs, "offset", "has invalid format");
	}
	else if (key_is(key, key_len, "handle"))
	{
		if (given_once(q, errs, QUERY_GIVEN_HANDLE, "handle") &&
			value_acceptable(errs, "handle", value, value_len))
			replace_string(&q->handle, value);
	}
	else if (key_is(key, key_len, "live"))
		q->live = flag_value(value, value_len);
	else if (key_is(key, key_len, "live_sse") || key_is(key, key_len, "experimental_live_sse"))
		q->live_sse = q->live_sse || flag_value(value, value_len);
	else if (key_is(key, key_len, "cursor"))
	{
		if (value_acceptable(errs, "cursor", value, value_len))
			replace_string(&q->cursor, value);
	}
	else if (key_is(key, key_len, "where"))
	{
		if (given_once(q, errs, QUERY_GIVEN_WHERE, "where") &&
			value_acceptable(errs, "where", value, value_len))
			replace_string(&q->def.where, value);
	}
	else if (key_is(key, key_len, "columns"))
	{
		if (!given_once(q, errs, QUERY_GIVEN_COLUMNS, "columns"))
			return;
		for (int i = 0; i < q->def.ncolumns; i++)
			free(q->def.columns[i]);
		free(q->def.columns);
		q->def.columns = NULL;
		q->def.ncolumns = 0;
		if (value_acceptable(errs, "columns", value, value_len) &&
			!parse_column_list(value, &q->def.columns, &q->def.ncolumns, err, sizeof(err)))
			request_errors_add(errs, "columns", "%s", err);
	}
	else if (key_is(key, key_len, "replica"))
	{
		if (!given_once(q, errs, QUERY_GIVEN_REPLICA, "replica"))
			return;
		if (key_is(value, value_len, "full"))
			q->def.replica_full = true;
		else if (key_is(value, value_len, "default"))
			q->def.replica_full = false;
		else
			request_errors_add(errs, "replica", "is invalid");
	}
	else if (key_is(key, key_len, "log"))
	{
		if (!given_once(q, errs, QUERY_GIVEN_LOG, "log"))
			return;
		if (key_is(value, value_len, "changes_only"))
			q->def.changes_only = true;
		else if (key_is(value, value_len, "full"))
			q->def.changes_only = false;
		else
			request_errors_add(errs, "log", "is invalid");
	}
	else if (key_len >= 8 && strncmp(key, "subset__", 8) == 0)
	{
		char	  **field = NULL;
		SubsetRequest *in = subset_inputs(q);

		/* the client's where_expr/order_by_expr echoes carry no request */
		if (key_is(key, key_len, "subset__where_expr") ||
			key_is(key, key_len, "subset__order_by_expr"))
			return;
		q->subset = true;
		if (in == NULL)
			return;
		if (key_is(key, key_len, "subset__where"))
			field = &in->where;
		else if (key_is(key, key_len, "subset__params"))
			field = &in->params;
		else if (key_is(key, key_len, "subset__limit"))
			field = &in->limit;
		else if (key_is(key, key_len, "subset__offset"))
			field = &in->offset;
		else if (key_is(key, key_len, "subset__order_by"))
			field = &in->order_by;
		if (field != NULL && *field != NULL)
			request_errors_add(errs, "subset", "%.*s is given more than once", (int) key_len, key);
		else if (field != NULL && value_acceptable(errs, "subset", value, value_len))
			replace_string(field, value);
	}
	else if (key_is(key, key_len, "queryable_columns"))
	{
		SubsetRequest *in = subset_inputs(q);

		if (in == NULL || !given_once(q, errs, QUERY_GIVEN_QUERYABLE, "queryable_columns"))
			return;
		for (int i = 0; i < in->nqueryable; i++)
			free(in->queryable[i]);
		free(in->queryable);
		in->queryable = NULL;
		in->nqueryable = 0;
		if (value_acceptable(errs, "queryable_columns", value, value_len) &&
			!parse_column_list(value, &in->queryable, &in->nqueryable, err, sizeof(err)))
			request_errors_add(errs, "queryable_columns", "%s", err);
	}
	else if ((pidx = param_index(key)) != 0)
	{
		if (pidx < 0)
		{
			request_errors_add(errs, "params", "at most %d parameters are supported",
							   REQ_MAX_PARAMS);
			return;
		}
		if (!value_acceptable(errs, "params", value, value_len))
			return;
		if (pidx > q->def.nparams)
		{
			char	  **grown = realloc(q->def.params, (size_t) pidx * sizeof(char *));

			if (grown == NULL)
				return;
			for (int i = q->def.nparams; i < pidx; i++)
				grown[i] = NULL;
			q->def.params = grown;
			q->def.nparams = pidx;
		}
		if (q->def.params[pidx - 1] != NULL)
		{
			request_errors_add(errs, "params", "params[%d] is given more than once", pidx);
			return;
		}
		replace_string(&q->def.params[pidx - 1], value);
	}
	/* anything else is ignored, as Electric does */
}

void
shape_query_finish(ShapeQuery *q, RequestErrors *errs, int max_where_length)
{
	bool		initial = !q->has_offset || q->offset_now ||
		log_offset_is_before_all(q->offset);

	if (!q->has_table)
		request_errors_add(errs, "table", "can't be blank");
	if (!q->has_offset)
		request_errors_add(errs, "offset", "can't be blank");
	if (q->has_offset && initial)
	{
		/* a handle sent with -1 or now is not checked (shape_serve.c may reuse it) */
		free(q->reuse_handle);
		q->reuse_handle = q->handle;
		q->handle = NULL;
	}
	else if (q->has_offset && !q->bad_offset && (q->handle == NULL || q->handle[0] == '\0'))
		request_errors_add(errs, "handle", "can't be blank when offset != -1");
	if (q->live && q->has_offset && q->offset_now)
		request_errors_add(errs, "live", "can't be true when offset is 'now'");
	else if (q->live && q->has_offset && log_offset_is_before_all(q->offset))
		request_errors_add(errs, "live", "can't be true when offset == -1");
	if (q->live_sse && !q->live)
		request_errors_add(errs, "live_sse", "can't be true unless live is also true");
	if (q->def.where != NULL && max_where_length > 0 &&
		strlen(q->def.where) > (size_t) max_where_length)
		request_errors_add(errs, "where",
						   "The where clause is %zu bytes long; this server accepts at most %d (shape_sync.max_where_length)",
						   strlen(q->def.where), max_where_length);
}

void
shape_query_finish_delete(ShapeQuery *q, RequestErrors *errs)
{
	if (!q->has_table && (q->handle == NULL || q->handle[0] == '\0'))
		request_errors_add(errs, "handle", "can't be blank when no table is given");
}

void
shape_query_free(ShapeQuery *q)
{
	subset_request_free(q->subset_in);
	q->subset_in = NULL;
	shape_definition_free(&q->def);
	free(q->handle);
	free(q->reuse_handle);
	free(q->cursor);
	q->handle = q->reuse_handle = q->cursor = NULL;
}
