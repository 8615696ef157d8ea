/*
 * test_request_parse.c
 *		Query parameter parsing and validation (src/net/request_parse.c),
 *		against the rules of Electric's API (shared/reference, sections 1.1,
 *		1.2 and 2).
 */
#include "unit.h"

#include "json_text.h"
#include "request_parse.h"

/* ---------------------------------------------------------- helpers */

typedef struct TableCase
{
	const char *schema;
	const char *table;
	char		err[256];
	bool		ok;
} TableCase;

static TableCase
table_name(const char *text)
{
	TableCase	c = {0};
	char	   *schema = (char *) "sentinel";
	char	   *table = (char *) "sentinel";
	static char sbuf[256];
	static char tbuf[256];

	c.ok = parse_table_name(text, &schema, &table, c.err, sizeof(c.err));
	if (!c.ok)
	{
		if (schema != NULL || table != NULL)
			FAIL("parse_table_name(\"%s\") failed but left schema/table set", text);
		return c;
	}
	c.schema = schema ? strcpy(sbuf, schema) : NULL;
	c.table = table ? strcpy(tbuf, table) : NULL;
	free(schema);
	free(table);
	return c;
}

static const char *
long_name(char c, int n, bool quoted)
{
	static char buf[512];
	int			o = 0;

	if (quoted)
		buf[o++] = '"';
	for (int i = 0; i < n; i++)
		buf[o++] = c;
	if (quoted)
		buf[o++] = '"';
	buf[o] = '\0';
	return buf;
}

/* The parsed query and the error body, for a list of key/value pairs. */
typedef struct QueryCase
{
	ShapeQuery	q;
	RequestErrors errs;
	char	   *json;			/* NULL when there were no errors */
} QueryCase;

static void
run_query(QueryCase *c, const char *const *kv, int npairs)
{
	memset(c, 0, sizeof(*c));
	for (int i = 0; i < npairs; i++)
		shape_query_add(&c->q, &c->errs, kv[2 * i], strlen(kv[2 * i]), kv[2 * i + 1],
						kv[2 * i + 1] ? strlen(kv[2 * i + 1]) : 0);
	shape_query_finish(&c->q, &c->errs, 0);
	c->json = c->errs.count > 0 ? request_errors_json(&c->errs) : NULL;
}

static void
query_free(QueryCase *c)
{
	shape_query_free(&c->q);
	free(c->json);
	c->json = NULL;
}

#define QUERY(c, ...) \
	do { \
		static const char *const kv_[] = {__VA_ARGS__}; \
		run_query(c, kv_, (int) (sizeof(kv_) / sizeof(kv_[0])) / 2); \
	} while (0)

#define INVALID(fields) "{\"message\":\"Invalid request\",\"errors\":{" fields "}}"

/* ------------------------------------------------------ table names */

TEST(table_name_plain_and_folded)
{
	TableCase	c;

	c = table_name("items");
	CHECK(c.ok);
	CHECK(c.schema == NULL);
	CHECK_STR_EQ(c.table, "items");

	c = table_name("Items");
	CHECK(c.ok);
	CHECK(c.schema == NULL);
	CHECK_STR_EQ(c.table, "items");

	c = table_name("_a$1_B9");
	CHECK(c.ok);
	CHECK_STR_EQ(c.table, "_a$1_b9");

	/* only ASCII folds; other bytes are kept */
	c = table_name("AB\xc3\x89x");
	CHECK(c.ok);
	CHECK_STR_EQ(c.table, "ab\xc3\x89x");
}

TEST(table_name_quoted)
{
	TableCase	c;

	c = table_name("\"Items\"");
	CHECK(c.ok);
	CHECK(c.schema == NULL);
	CHECK_STR_EQ(c.table, "Items");

	c = table_name("public.items");
	CHECK(c.ok);
	CHECK_STR_EQ(c.schema, "public");
	CHECK_STR_EQ(c.table, "items");

	c = table_name("\"my schema\".\"has \"\"quote\"\" and, comma\"");
	CHECK(c.ok);
	CHECK_STR_EQ(c.schema, "my schema");
	CHECK_STR_EQ(c.table, "has \"quote\" and, comma");

	c = table_name("electric_test.\"issues for 1_0_ab12\"");
	CHECK(c.ok);
	CHECK_STR_EQ(c.schema, "electric_test");
	CHECK_STR_EQ(c.table, "issues for 1_0_ab12");

	c = table_name("\"a.b\"");	/* the dot is inside the quotes */
	CHECK(c.ok);
	CHECK(c.schema == NULL);
	CHECK_STR_EQ(c.table, "a.b");

	c = table_name("\"\"\"\"");	/* a name that is one quote */
	CHECK(c.ok);
	CHECK_STR_EQ(c.table, "\"");

	c = table_name("Public.\"Items\"");
	CHECK(c.ok);
	CHECK_STR_EQ(c.schema, "public");
	CHECK_STR_EQ(c.table, "Items");
}

TEST(table_name_rejects)
{
	TableCase	c;

	c = table_name("a.b.c");
	CHECK(!c.ok);
	CHECK_STR_EQ(c.err, "Invalid table name: expected \"table\" or \"schema.table\"");

	c = table_name("");
	CHECK(!c.ok);
	CHECK_STR_EQ(c.err, "Invalid zero-length delimited identifier");

	c = table_name("\"\"");
	CHECK(!c.ok);
	CHECK_STR_EQ(c.err, "Invalid zero-length delimited identifier");

	c = table_name("public.\"\"");
	CHECK(!c.ok);
	CHECK_STR_EQ(c.err, "Invalid zero-length delimited identifier");

	c = table_name("\"unterminated");
	CHECK(!c.ok);
	CHECK_STR_EQ(c.err, "Invalid identifier: unterminated quoted identifier");

	c = table_name("\"ends with escaped quote\"\"");
	CHECK(!c.ok);
	CHECK_STR_EQ(c.err, "Invalid identifier: unterminated quoted identifier");

	c = table_name("bad-name");
	CHECK(!c.ok);
	CHECK_STR_EQ(c.err, "Invalid identifier: unexpected \"-\"; quote names with special characters");

	c = table_name("1items");
	CHECK(!c.ok);
	CHECK_STR_EQ(c.err,
				 "Invalid unquoted identifier: \"1\" is not allowed here; quote names with special characters");

	c = table_name(".items");
	CHECK(!c.ok);
	CHECK_STR_EQ(c.err, "Invalid zero-length delimited identifier");

	c = table_name("public.");
	CHECK(!c.ok);
	CHECK_STR_EQ(c.err, "Invalid zero-length delimited identifier");

	c = table_name("\"a\"b");
	CHECK(!c.ok);
	CHECK_STR_EQ(c.err, "Invalid identifier: unexpected \"b\"; quote names with special characters");

	c = table_name("items ");
	CHECK(!c.ok);
	CHECK_STR_EQ(c.err, "Invalid identifier: unexpected \" \"; quote names with special characters");

	c = table_name(" items");
	CHECK(!c.ok);
}

TEST(table_name_length_limit)
{
	TableCase	c;

	c = table_name(long_name('a', 63, false));
	CHECK(c.ok);
	CHECK_EQ(strlen(c.table), 63);

	c = table_name(long_name('a', 64, false));
	CHECK(!c.ok);
	CHECK_STR_EQ(c.err, "Identifier is too long: at most 63 bytes are allowed");

	c = table_name(long_name('Q', 63, true));
	CHECK(c.ok);
	CHECK_EQ(strlen(c.table), 63);
	CHECK(c.table[0] == 'Q');

	c = table_name(long_name('Q', 64, true));
	CHECK(!c.ok);
	CHECK_STR_EQ(c.err, "Identifier is too long: at most 63 bytes are allowed");

	/* the limit counts bytes of the name, "" being one byte */
	{
		char		buf[256] = "\"";

		for (int i = 0; i < 31; i++)
			strcat(buf, "x\"\"");
		strcat(buf, "y\"");		/* 31 * 2 + 1 = 63 bytes */
		c = table_name(buf);
		CHECK(c.ok);
		CHECK_EQ(strlen(c.table), 63);
		buf[strlen(buf) - 1] = '\0';
		strcat(buf, "z\"");		/* 64 */
		c = table_name(buf);
		CHECK(!c.ok);
	}

	/* schema and table are limited separately */
	{
		char		buf[256];

		snprintf(buf, sizeof(buf), "%s.", long_name('s', 63, false));
		strcat(buf, long_name('t', 63, false));
		c = table_name(buf);
		CHECK(c.ok);
		CHECK_EQ(strlen(c.schema), 63);
		CHECK_EQ(strlen(c.table), 63);
	}
}

/* ----------------------------------------------------------- columns */

TEST(column_list)
{
	char	  **cols = (char **) 1;
	int			n = -1;
	char		err[256] = "";

	CHECK(parse_column_list("id,title", &cols, &n, err, sizeof(err)));
	REQUIRE_EQ(n, 2);
	CHECK_STR_EQ(cols[0], "id");
	CHECK_STR_EQ(cols[1], "title");
	for (int i = 0; i < n; i++)
		free(cols[i]);
	free(cols);

	CHECK(parse_column_list("\"id\",\"has,comma\",\"has\"\"quote\"", &cols, &n, err, sizeof(err)));
	REQUIRE_EQ(n, 3);
	CHECK_STR_EQ(cols[0], "id");
	CHECK_STR_EQ(cols[1], "has,comma");
	CHECK_STR_EQ(cols[2], "has\"quote");
	for (int i = 0; i < n; i++)
		free(cols[i]);
	free(cols);

	CHECK(parse_column_list("ID,\"ID\"", &cols, &n, err, sizeof(err)));
	REQUIRE_EQ(n, 2);
	CHECK_STR_EQ(cols[0], "id");
	CHECK_STR_EQ(cols[1], "ID");
	for (int i = 0; i < n; i++)
		free(cols[i]);
	free(cols);
}

TEST(column_list_rejects)
{
	static const struct
	{
		const char *text;
		const char *err;
	}			cases[] = {
		{"id,,x", "Invalid zero-length delimited identifier"},
		{"", "Invalid zero-length delimited identifier"},
		{"id,", "Invalid zero-length delimited identifier"},
		{",id", "Invalid zero-length delimited identifier"},
		{"id,\"\"", "Invalid zero-length delimited identifier"},
		{"id title", "Invalid identifier: unexpected \" \"; quote names with special characters"},
		{"a.b", "Invalid identifier: unexpected \".\"; quote names with special characters"},
		{"\"open", "Invalid identifier: unterminated quoted identifier"},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
	{
		char	  **cols = (char **) 1;
		int			n = -1;
		char		err[256] = "";

		if (parse_column_list(cases[i].text, &cols, &n, err, sizeof(err)))
		{
			FAIL("parse_column_list(\"%s\") accepted", cases[i].text);
			for (int j = 0; j < n; j++)
				free(cols[j]);
			free(cols);
			continue;
		}
		CHECK_STR_EQ(err, cases[i].err);
		CHECK(cols == NULL);
		CHECK_EQ(n, 0);
	}
}

TEST(column_list_limits)
{
	/* 1600 columns (PostgreSQL's maximum) parse; 1601 do not */
	size_t		cap = 1601 * 8 + 16;
	char	   *text = malloc(cap);
	size_t		o = 0;
	char	  **cols = NULL;
	int			n = 0;
	char		err[256] = "";

	REQUIRE(text != NULL);
	for (int i = 0; i < 1600; i++)
		o += (size_t) snprintf(text + o, cap - o, "%sc%d", i ? "," : "", i);
	CHECK(parse_column_list(text, &cols, &n, err, sizeof(err)));
	CHECK_EQ(n, 1600);
	if (n == 1600)
	{
		CHECK_STR_EQ(cols[0], "c0");
		CHECK_STR_EQ(cols[1599], "c1599");
	}
	for (int i = 0; i < n; i++)
		free(cols[i]);
	free(cols);

	snprintf(text + o, cap - o, ",c1600");
	CHECK(!parse_column_list(text, &cols, &n, err, sizeof(err)));
	CHECK_STR_EQ(err, "Too many columns: a table has at most 1600");
	CHECK(cols == NULL);
	free(text);
}

/* ----------------------------------------------------------- queries */

TEST(query_minimal_valid)
{
	QueryCase	c;

	QUERY(&c, "table", "items", "offset", "-1");
	CHECK(c.json == NULL);
	CHECK(c.q.has_table);
	CHECK(c.q.has_offset);
	CHECK(!c.q.offset_now);
	CHECK_EQ(c.q.offset.tx, -1);
	CHECK(c.q.def.schema == NULL);
	CHECK_STR_EQ(c.q.def.table, "items");
	CHECK(c.q.def.where == NULL);
	CHECK(c.q.def.columns == NULL);
	CHECK_EQ(c.q.def.ncolumns, 0);
	CHECK_EQ(c.q.def.nparams, 0);
	CHECK(!c.q.def.replica_full);
	CHECK(!c.q.def.changes_only);
	CHECK(!c.q.live);
	CHECK(!c.q.live_sse);
	CHECK(!c.q.subset);
	CHECK(c.q.handle == NULL);
	query_free(&c);

	QUERY(&c, "table", "s.\"T\"", "offset", "12_4", "handle", "123-456",
		  "where", "id > $1", "params[1]", "7", "columns", "id,\"Title\"",
		  "replica", "full", "log", "changes_only", "cursor", "99");
	CHECK(c.json == NULL);
	CHECK_STR_EQ(c.q.def.schema, "s");
	CHECK_STR_EQ(c.q.def.table, "T");
	CHECK_EQ(c.q.offset.tx, 12);
	CHECK_UEQ(c.q.offset.op, 4);
	CHECK_STR_EQ(c.q.handle, "123-456");
	CHECK_STR_EQ(c.q.def.where, "id > $1");
	REQUIRE_EQ(c.q.def.nparams, 1);
	CHECK_STR_EQ(c.q.def.params[0], "7");
	REQUIRE_EQ(c.q.def.ncolumns, 2);
	CHECK_STR_EQ(c.q.def.columns[0], "id");
	CHECK_STR_EQ(c.q.def.columns[1], "Title");
	CHECK(c.q.def.replica_full);
	CHECK(c.q.def.changes_only);
	CHECK_STR_EQ(c.q.cursor, "99");
	query_free(&c);
}

TEST(query_unknown_keys_ignored)
{
	QueryCase	c;

	QUERY(&c, "table", "items", "offset", "-1", "cache-buster", "x",
		  "expired_handle", "1-2", "customParam", "v", "secret", "s",
		  "api_secret", "s", "", "", "Table", "ignored", "OFFSET", "zz",
		  "params", "x", "queryable_columns", "a");
	CHECK(c.json == NULL);
	CHECK_STR_EQ(c.q.def.table, "items");
	CHECK_EQ(c.q.def.nparams, 0);
	query_free(&c);
}

TEST(query_required_fields)
{
	QueryCase	c;

	QUERY(&c, "foo", "bar");
	CHECK_STR_EQ(c.json, INVALID("\"table\":[\"can't be blank\"],\"offset\":[\"can't be blank\"]"));
	query_free(&c);

	QUERY(&c, "offset", "-1");
	CHECK_STR_EQ(c.json, INVALID("\"table\":[\"can't be blank\"]"));
	query_free(&c);

	QUERY(&c, "table", "", "offset", "-1");
	CHECK_STR_EQ(c.json, INVALID("\"table\":[\"can't be blank\"]"));
	query_free(&c);

	QUERY(&c, "table", "items");
	CHECK_STR_EQ(c.json, INVALID("\"offset\":[\"can't be blank\"]"));
	query_free(&c);

	QUERY(&c, "table", "bad-name", "offset", "-1");
	CHECK_STR_EQ(c.json, INVALID("\"table\":[\"Invalid identifier: unexpected \\\"-\\\"; "
								 "quote names with special characters\"]"));
	query_free(&c);

	QUERY(&c, "table", "items", "offset", "-1", "columns", "");
	CHECK_STR_EQ(c.json, INVALID("\"columns\":[\"Invalid zero-length delimited identifier\"]"));
	query_free(&c);
}

TEST(query_offset_and_handle)
{
	QueryCase	c;

	/* a handle sent with -1 or now is not checked, only kept to look for */
	QUERY(&c, "table", "items", "offset", "-1", "handle", "old-1");
	CHECK(c.json == NULL);
	CHECK(c.q.handle == NULL);
	CHECK_STR_EQ(c.q.reuse_handle, "old-1");
	query_free(&c);

	QUERY(&c, "handle", "old-1", "table", "items", "offset", "now");
	CHECK(c.json == NULL);
	CHECK(c.q.offset_now);
	CHECK(c.q.handle == NULL);
	CHECK_STR_EQ(c.q.reuse_handle, "old-1");
	query_free(&c);

	QUERY(&c, "table", "items", "offset", "0_0", "handle", "h-1");
	CHECK_STR_EQ(c.q.handle, "h-1");
	CHECK(c.q.reuse_handle == NULL);
	query_free(&c);

	QUERY(&c, "table", "items", "offset", "0_0");
	CHECK_STR_EQ(c.json, INVALID("\"handle\":[\"can't be blank when offset != -1\"]"));
	query_free(&c);

	QUERY(&c, "table", "items", "offset", "0_0", "handle", "");
	CHECK_STR_EQ(c.json, INVALID("\"handle\":[\"can't be blank when offset != -1\"]"));
	query_free(&c);

	QUERY(&c, "table", "items", "offset", "0_inf", "handle", "h-1");
	CHECK(c.json == NULL);
	CHECK_STR_EQ(c.q.handle, "h-1");
	CHECK_EQ(c.q.offset.tx, 0);
	CHECK_UEQ(c.q.offset.op, LOG_OFFSET_OP_INF);
	query_free(&c);

	/* a repeated key is refused (query_repeated_parameters_refused) */
	QUERY(&c, "table", "items", "offset", "0_1", "handle", "a", "handle", "b");
	CHECK_STR_EQ(c.json, INVALID("\"handle\":[\"is given more than once\"]"));
	query_free(&c);

	QUERY(&c, "table", "items", "offset", "1_2_3", "handle", "h");
	CHECK_STR_EQ(c.json, INVALID("\"offset\":[\"has invalid format\"]"));
	query_free(&c);

	QUERY(&c, "table", "items", "offset", "10", "handle", "h");
	CHECK_STR_EQ(c.json, INVALID("\"offset\":[\"has invalid format\"]"));
	query_free(&c);
}

/* Electric skips the handle rule once the offset is invalid */
TEST(query_bad_offset_reports_only_offset)
{
	QueryCase	c;

	QUERY(&c, "table", "items", "offset", "abc");
	CHECK_STR_EQ(c.json, INVALID("\"offset\":[\"has invalid format\"]"));
	query_free(&c);

	QUERY(&c, "table", "items", "offset", "0_x", "live", "true");
	CHECK_STR_EQ(c.json, INVALID("\"offset\":[\"has invalid format\"]"));
	query_free(&c);
}

TEST(query_live_truthiness)
{
	static const struct
	{
		const char *value;
		bool		live;
	}			cases[] = {
		{NULL, true}, {"", true}, {"true", true}, {"1", true}, {"yes", true},
		{"false", false}, {"False", true}, {"0", true},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
	{
		QueryCase	c;
		const char *kv[] = {"table", "items", "offset", "0_0", "handle", "h",
		"live", cases[i].value};

		run_query(&c, kv, 4);
		if (c.q.live != cases[i].live)
			FAIL("live=%s parsed as %d", cases[i].value ? cases[i].value : "(null)", c.q.live);
		CHECK(c.json == NULL);
		query_free(&c);
	}
}

TEST(query_live_rules)
{
	QueryCase	c;

	QUERY(&c, "table", "items", "offset", "-1", "live", "true");
	CHECK_STR_EQ(c.json, INVALID("\"live\":[\"can't be true when offset == -1\"]"));
	query_free(&c);

	QUERY(&c, "table", "items", "offset", "now", "live", "true");
	CHECK_STR_EQ(c.json, INVALID("\"live\":[\"can't be true when offset is 'now'\"]"));
	query_free(&c);

	QUERY(&c, "table", "items", "offset", "-1", "live", "false");
	CHECK(c.json == NULL);
	query_free(&c);

	QUERY(&c, "table", "items", "offset", "0_0", "handle", "h", "live_sse", "true");
	CHECK_STR_EQ(c.json, INVALID("\"live_sse\":[\"can't be true unless live is also true\"]"));
	query_free(&c);

	QUERY(&c, "table", "items", "offset", "0_0", "handle", "h",
		  "experimental_live_sse", "true");
	CHECK_STR_EQ(c.json, INVALID("\"live_sse\":[\"can't be true unless live is also true\"]"));
	query_free(&c);

	QUERY(&c, "table", "items", "offset", "0_0", "handle", "h", "live_sse", "false");
	CHECK(c.json == NULL);
	CHECK(!c.q.live_sse);
	query_free(&c);

	/* what the client sends in SSE mode: both names, with live */
	QUERY(&c, "table", "items", "offset", "0_0", "handle", "h", "live", "true",
		  "live_sse", "true", "experimental_live_sse", "true");
	CHECK(c.json == NULL);
	CHECK(c.q.live);
	CHECK(c.q.live_sse);
	query_free(&c);
}

TEST(query_params)
{
	QueryCase	c;

	/* order of arrival and gaps */
	QUERY(&c, "table", "items", "offset", "-1", "params[3]", "c", "params[1]", "a");
	CHECK(c.json == NULL);
	REQUIRE_EQ(c.q.def.nparams, 3);
	CHECK_STR_EQ(c.q.def.params[0], "a");
	CHECK(c.q.def.params[1] == NULL);
	CHECK_STR_EQ(c.q.def.params[2], "c");
	query_free(&c);

	/* one given twice: refused (a proxy might have authorised the other) */
	QUERY(&c, "table", "items", "offset", "-1", "params[2]", "two", "params[1]", "one",
		  "params[1]", "uno");
	CHECK_STR_EQ(c.json, INVALID("\"params\":[\"params[1] is given more than once\"]"));
	REQUIRE_EQ(c.q.def.nparams, 2);
	CHECK_STR_EQ(c.q.def.params[0], "one");
	query_free(&c);

	/* not params[N] with N >= 1: ignored */
	QUERY(&c, "table", "items", "offset", "-1", "params[0]", "z", "params[x]", "x",
		  "params[]", "e", "params[1", "u", "params[1]x", "t", "params[-1]", "m",
		  "params[01]", "lead", "params[1][2]", "n");
	CHECK(c.json == NULL);
	CHECK_EQ(c.q.def.nparams, 0);
	CHECK(c.q.def.params == NULL);
	query_free(&c);

	/* empty value is kept as "" (bound as an empty string) */
	QUERY(&c, "table", "items", "offset", "-1", "params[1]", "");
	CHECK(c.json == NULL);
	REQUIRE_EQ(c.q.def.nparams, 1);
	CHECK_STR_EQ(c.q.def.params[0], "");
	query_free(&c);

	QUERY(&c, "table", "items", "offset", "-1", "params[256]", "last");
	CHECK(c.json == NULL);
	REQUIRE_EQ(c.q.def.nparams, 256);
	CHECK_STR_EQ(c.q.def.params[255], "last");
	CHECK(c.q.def.params[0] == NULL);
	query_free(&c);

	QUERY(&c, "table", "items", "offset", "-1", "params[257]", "x");
	CHECK_STR_EQ(c.json, INVALID("\"params\":[\"at most 256 parameters are supported\"]"));
	CHECK_EQ(c.q.def.nparams, 0);
	query_free(&c);

	QUERY(&c, "table", "items", "offset", "-1", "params[99999999999999999999]", "x");
	CHECK_STR_EQ(c.json, INVALID("\"params\":[\"at most 256 parameters are supported\"]"));
	query_free(&c);
}

/*
 * What says which rows are served may be given once: an authorising proxy in
 * front that reads the first of two `table` parameters, while shape_sync read
 * the last, would let a client read a table it was refused.
 */
TEST(query_repeated_parameters_refused)
{
	static const char *const once[][2] = {
		{"table", "items"}, {"offset", "-1"}, {"handle", "1-2"}, {"where", "id = 1"},
		{"columns", "id"}, {"replica", "full"}, {"log", "full"},
	};
	QueryCase	c;
	char		want[160];

	for (size_t i = 0; i < sizeof(once) / sizeof(once[0]); i++)
	{
		const char *kv[] = {"table", "items", "offset", "-1", once[i][0], once[i][1],
		once[i][0], once[i][1]};
		bool		required = strcmp(once[i][0], "table") == 0 || strcmp(once[i][0], "offset") == 0;

		/* the same value twice too: a repeat is refused whatever it says (a required one
		 * is given once more) */
		run_query(&c, kv, required ? 3 : 4);
		snprintf(want, sizeof(want), "\"%s\":[\"is given more than once\"]", once[i][0]);
		CHECK(c.json != NULL && strstr(c.json, want) != NULL);
		if (c.json == NULL || strstr(c.json, want) == NULL)
			fprintf(stderr, "  %s twice: %s\n", once[i][0], c.json ? c.json : "accepted");
		query_free(&c);
	}

	QUERY(&c, "table", "items", "offset", "-1", "table", "secrets");
	CHECK(c.json != NULL && strstr(c.json, "\"table\":[\"is given more than once\"]") != NULL);
	CHECK_STR_EQ(c.q.def.table, "items");
	query_free(&c);

	QUERY(&c, "table", "items", "offset", "0_0", "handle", "1-2", "subset__where", "id = 1",
		  "subset__where", "true");
	CHECK(c.json != NULL && strstr(c.json, "subset__where is given more than once") != NULL);
	query_free(&c);

	/* what says nothing of the rows may come twice, as before */
	QUERY(&c, "table", "items", "offset", "-1", "cursor", "1", "cursor", "2", "x", "1", "x", "2");
	CHECK(c.json == NULL);
	query_free(&c);
}

TEST(query_replica_and_log)
{
	QueryCase	c;

	QUERY(&c, "table", "items", "offset", "-1", "replica", "full", "log", "changes_only");
	CHECK(c.json == NULL);
	CHECK(c.q.def.replica_full);
	CHECK(c.q.def.changes_only);
	query_free(&c);

	QUERY(&c, "table", "items", "offset", "-1", "replica", "default", "log", "full");
	CHECK(c.json == NULL);
	CHECK(!c.q.def.replica_full);
	CHECK(!c.q.def.changes_only);
	query_free(&c);

	QUERY(&c, "table", "items", "offset", "-1", "replica", "full", "replica", "default",
		  "log", "changes_only", "log", "full");
	CHECK_STR_EQ(c.json, INVALID("\"replica\":[\"is given more than once\"],"
								 "\"log\":[\"is given more than once\"]"));
	CHECK(c.q.def.replica_full);
	CHECK(c.q.def.changes_only);
	query_free(&c);

	QUERY(&c, "table", "items", "offset", "-1", "replica", "FULL");
	CHECK_STR_EQ(c.json, INVALID("\"replica\":[\"is invalid\"]"));
	query_free(&c);

	QUERY(&c, "table", "items", "offset", "-1", "log", "");
	CHECK_STR_EQ(c.json, INVALID("\"log\":[\"is invalid\"]"));
	query_free(&c);

	QUERY(&c, "table", "items", "offset", "-1", "replica", NULL, "log", "x");
	CHECK_STR_EQ(c.json, INVALID("\"replica\":[\"is invalid\"],\"log\":[\"is invalid\"]"));
	query_free(&c);
}

TEST(query_subset)
{
	QueryCase	c;

	QUERY(&c, "table", "items", "offset", "-1", "subset__where", "id > 1");
	CHECK(c.json == NULL);
	CHECK(c.q.subset);
	query_free(&c);

	QUERY(&c, "table", "items", "offset", "-1", "subset__limit", "10");
	CHECK(c.q.subset);
	query_free(&c);

	/* the inputs are kept as sent, for the worker that checks them */
	QUERY(&c, "table", "items", "offset", "-1", "subset__where", "a = $1",
		  "subset__params", "{\"1\":\"x\"}", "subset__limit", "abc", "subset__offset", "2",
		  "subset__order_by", "a desc", "queryable_columns", "\"A\",b");
	CHECK(c.json == NULL);
	REQUIRE(c.q.subset_in != NULL);
	CHECK_STR_EQ(c.q.subset_in->where, "a = $1");
	CHECK_STR_EQ(c.q.subset_in->params, "{\"1\":\"x\"}");
	CHECK_STR_EQ(c.q.subset_in->limit, "abc");
	CHECK_STR_EQ(c.q.subset_in->offset, "2");
	CHECK_STR_EQ(c.q.subset_in->order_by, "a desc");
	REQUIRE(c.q.subset_in->nqueryable == 2);
	CHECK_STR_EQ(c.q.subset_in->queryable[0], "A");
	CHECK_STR_EQ(c.q.subset_in->queryable[1], "b");
	query_free(&c);

	/* queryable_columns alone asks for no subset */
	QUERY(&c, "table", "items", "offset", "-1", "queryable_columns", "a");
	CHECK(!c.q.subset);
	query_free(&c);

	QUERY(&c, "table", "items", "offset", "-1", "subset__where_expr", "{}",
		  "subset__order_by_expr", "{}");
	CHECK(c.json == NULL);
	CHECK(!c.q.subset);
	query_free(&c);

	QUERY(&c, "table", "items", "offset", "-1", "subset_where", "x");
	CHECK(!c.q.subset);
	query_free(&c);
}

TEST(query_all_errors_together)
{
	QueryCase	c;

	QUERY(&c, "offset", "0_0", "live_sse", "1", "replica", "x", "table", "a.b.c");
	CHECK_STR_EQ(c.json,
				 INVALID("\"replica\":[\"is invalid\"],"
						 "\"table\":[\"Invalid table name: expected \\\"table\\\" or \\\"schema.table\\\"\"],"
						 "\"handle\":[\"can't be blank when offset != -1\"],"
						 "\"live_sse\":[\"can't be true unless live is also true\"]"));
	query_free(&c);
}

/* ----------------------------------------------------- error bodies */

TEST(errors_json_grouping_and_escaping)
{
	RequestErrors errs = {0};
	char	   *json;

	json = request_errors_json(&errs);
	CHECK_STR_EQ(json, "{\"message\":\"Invalid request\",\"errors\":{}}");
	free(json);

	request_errors_add(&errs, "table", "first %d", 1);
	request_errors_add(&errs, "offset", "middle");
	request_errors_add(&errs, "table", "second");
	json = request_errors_json(&errs);
	CHECK_STR_EQ(json, INVALID("\"table\":[\"first 1\",\"second\"],\"offset\":[\"middle\"]"));
	free(json);

	memset(&errs, 0, sizeof(errs));
	request_errors_add(&errs, "where", "q\"b\\c\nd\re\tf\x01g\x1fh\x7fi/j\xc3\xa9");
	json = request_errors_json(&errs);
	CHECK_STR_EQ(json, INVALID("\"where\":[\"q\\\"b\\\\c\\nd\\re\\tf\\u0001g\\u001fh\x7fi/j\xc3\xa9\"]"));
	free(json);
}

TEST(errors_cap_and_truncation)
{
	RequestErrors errs = {0};
	char		longmsg[400];
	char	   *json;

	for (int i = 0; i < REQ_MAX_ERRORS + 3; i++)
		request_errors_add(&errs, "f", "m%d", i);
	CHECK_EQ(errs.count, REQ_MAX_ERRORS);
	json = request_errors_json(&errs);
	CHECK_STR_EQ(json, INVALID("\"f\":[\"m0\",\"m1\",\"m2\",\"m3\",\"m4\",\"m5\",\"m6\",\"m7\"]"));
	free(json);

	memset(&errs, 0, sizeof(errs));
	memset(longmsg, 'x', sizeof(longmsg) - 1);
	longmsg[sizeof(longmsg) - 1] = '\0';
	request_errors_add(&errs, "f", "%s", longmsg);
	CHECK_EQ(strlen(errs.items[0].message), sizeof(errs.items[0].message) - 1);
}

/* ------------------------------------------------- hostile bytes */

/* One pair with explicit lengths (a decoded %00 sits inside them), then the rules. */
static char *
query_n(ShapeQuery *q, RequestErrors *errs, const char *key, size_t key_len,
		const char *value, size_t value_len)
{
	memset(q, 0, sizeof(*q));
	memset(errs, 0, sizeof(*errs));
	shape_query_add(q, errs, "offset", 6, "-1", 2);
	if (strcmp(key, "table") != 0)
		shape_query_add(q, errs, "table", 5, "items", 5);
	shape_query_add(q, errs, key, key_len, value, value_len);
	shape_query_finish(q, errs, 0);
	return errs->count > 0 ? request_errors_json(errs) : NULL;
}

/* regression: table=t%00x was served as table t */
TEST(nul_in_a_value_is_refused)
{
	static const struct
	{
		const char *key;
		const char *field;
	}			keys[] = {{"table", "table"}, {"where", "where"}, {"columns", "columns"},
	{"params[1]", "params"}, {"handle", "handle"}, {"cursor", "cursor"}};
	ShapeQuery	q;
	RequestErrors errs;

	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
	{
		char		want[128];
		char	   *json = query_n(&q, &errs, keys[i].key, strlen(keys[i].key), "t\0x", 3);

		snprintf(want, sizeof(want), INVALID("\"%s\":[\"must not contain a NUL byte\"]"),
				 keys[i].field);
		CHECK(json != NULL);
		if (json)
			CHECK_STR_EQ(json, want);
		free(json);
		shape_query_free(&q);
	}
	/* an offset with a NUL is no offset */
	memset(&q, 0, sizeof(q));
	memset(&errs, 0, sizeof(errs));
	shape_query_add(&q, &errs, "table", 5, "items", 5);
	shape_query_add(&q, &errs, "offset", 6, "-1\0x", 4);
	shape_query_finish(&q, &errs, 0);
	CHECK(q.bad_offset);
	shape_query_free(&q);
	/* a flag with a NUL is not "false" */
	memset(&q, 0, sizeof(q));
	memset(&errs, 0, sizeof(errs));
	shape_query_add(&q, &errs, "live", 4, "false\0", 6);
	CHECK(q.live);
	shape_query_free(&q);
}

TEST(nul_in_a_key_is_no_known_key)
{
	ShapeQuery	q;
	RequestErrors errs;
	char	   *json;

	memset(&q, 0, sizeof(q));
	memset(&errs, 0, sizeof(errs));
	shape_query_add(&q, &errs, "table\0x", 7, "items", 5);
	shape_query_add(&q, &errs, "offset", 6, "-1", 2);
	shape_query_finish(&q, &errs, 0);
	CHECK(!q.has_table);
	json = request_errors_json(&errs);
	CHECK_STR_EQ(json, INVALID("\"table\":[\"can't be blank\"]"));
	free(json);
	shape_query_free(&q);
}

/* regression: invalid UTF-8 in where, params or columns was accepted */
TEST(invalid_utf8_is_refused)
{
	static const char *const bad[] = {
		"\xff", "a\xc3", "\xc0\x80", "\xe0\x80\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80",
		"\x80", "\xf8\x88\x80\x80\x80", "x\xe2\x82"
	};
	static const char *const fields[] = {"where", "columns", "params[1]", "table"};
	ShapeQuery	q;
	RequestErrors errs;

	for (size_t f = 0; f < sizeof(fields) / sizeof(fields[0]); f++)
		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		{
			char	   *json = query_n(&q, &errs, fields[f], strlen(fields[f]), bad[i],
									   strlen(bad[i]));

			CHECK(json != NULL && strstr(json, "must be valid UTF-8") != NULL);
			if (json == NULL || strstr(json, "must be valid UTF-8") == NULL)
				fprintf(stderr, "  %s with bad[%zu] -> %s\n", fields[f], i, json ? json : "accepted");
			free(json);
			shape_query_free(&q);
		}
	/* well-formed multi-byte text is fine */
	{
		static const char ok[] = "title = '\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80'";

		CHECK(query_n(&q, &errs, "where", 5, ok, sizeof(ok) - 1) == NULL);
	}
	shape_query_free(&q);
}

TEST(utf8_validator_edges)
{
	CHECK(utf8_is_valid("", 0));
	CHECK(utf8_is_valid("abc", 3));
	CHECK(utf8_is_valid("\xc2\x80", 2));			/* U+0080 */
	CHECK(utf8_is_valid("\xdf\xbf", 2));			/* U+07FF */
	CHECK(utf8_is_valid("\xe0\xa0\x80", 3));		/* U+0800 */
	CHECK(utf8_is_valid("\xed\x9f\xbf", 3));		/* U+D7FF */
	CHECK(utf8_is_valid("\xee\x80\x80", 3));		/* U+E000 */
	CHECK(utf8_is_valid("\xf0\x90\x80\x80", 4));	/* U+10000 */
	CHECK(utf8_is_valid("\xf4\x8f\xbf\xbf", 4));	/* U+10FFFF */
	CHECK(!utf8_is_valid("\xc1\xbf", 2));			/* overlong */
	CHECK(!utf8_is_valid("\xe0\x9f\xbf", 3));		/* overlong */
	CHECK(!utf8_is_valid("\xf0\x8f\xbf\xbf", 4));	/* overlong */
	CHECK(!utf8_is_valid("\xed\xbf\xbf", 3));		/* surrogate */
	CHECK(!utf8_is_valid("\xf4\x90\x80\x80", 4));	/* past U+10FFFF */
	CHECK(!utf8_is_valid("\xe2\x82", 2));			/* cut short */
	CHECK(!utf8_is_valid("\xe2\x28\xa1", 3));		/* not a continuation */
	CHECK(utf8_is_valid("a\0b", 3));				/* NUL is the caller's business */
}

/* regression: 1,000 params past the limit gave one copy of the error per param */
TEST(one_error_said_once)
{
	ShapeQuery	q = {0};
	RequestErrors errs = {0};
	char	   *json;

	shape_query_add(&q, &errs, "table", 5, "items", 5);
	shape_query_add(&q, &errs, "offset", 6, "-1", 2);
	for (int i = 1; i <= 1000; i++)
	{
		char		key[32];
		int			n = snprintf(key, sizeof(key), "params[%d]", 1000 + i);

		shape_query_add(&q, &errs, key, (size_t) n, "1", 1);
	}
	shape_query_finish(&q, &errs, 0);
	json = request_errors_json(&errs);
	CHECK_EQ(errs.count, 1);
	CHECK_STR_EQ(json, INVALID("\"params\":[\"at most 256 parameters are supported\"]"));
	free(json);
	shape_query_free(&q);

	/* different messages of one field are all kept */
	memset(&errs, 0, sizeof(errs));
	request_errors_add(&errs, "f", "a");
	request_errors_add(&errs, "f", "b");
	request_errors_add(&errs, "f", "a");
	request_errors_add(&errs, "g", "a");
	CHECK_EQ(errs.count, 3);
}

TEST(where_length_limit)
{
	ShapeQuery	q = {0};
	RequestErrors errs = {0};
	char		where[101];
	char	   *json;

	memset(where, 'x', 100);
	where[100] = '\0';
	shape_query_add(&q, &errs, "table", 5, "items", 5);
	shape_query_add(&q, &errs, "offset", 6, "-1", 2);
	shape_query_add(&q, &errs, "where", 5, where, 100);
	shape_query_finish(&q, &errs, 100);
	CHECK_EQ(errs.count, 0);
	shape_query_finish(&q, &errs, 99);
	json = request_errors_json(&errs);
	CHECK_STR_EQ(json, INVALID("\"where\":[\"The where clause is 100 bytes long; this server accepts at most 99 (shape_sync.max_where_length)\"]"));
	free(json);
	shape_query_free(&q);
}

/* regression: parse_identifier echoes one byte of a multi-byte character with %c,  so the 400 body can hold a truncated UTF-8 sequence */
TEST(error_messages_are_valid_utf8)
{
	TableCase	c = table_name("\"a\"\xc3\xa9");

	CHECK(!c.ok);
	/* the message must not end a UTF-8 sequence early: no lone 0xc3 */
	for (const unsigned char *p = (const unsigned char *) c.err; *p; p++)
		if (*p == 0xc3 && (p[1] & 0xc0) != 0x80)
		{
			FAIL("error message holds a truncated UTF-8 sequence: \"%s\"", c.err);
			break;
		}
}

UNIT_MAIN()
