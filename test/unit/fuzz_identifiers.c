/*
 * fuzz_identifiers.c
 *		parse_table_name and parse_column_list on arbitrary text.
 *
 * The first byte picks the parser, the rest (up to a NUL) is its input.
 * Oracles: accepted names are 1..63 bytes; re-quoting what was parsed and
 * parsing it again gives the same names; a rejection leaves no output and
 * has a message; error bodies built from messages are valid JSON.
 */
#include "fuzz_common.h"

#include "request_parse.h"

static void
check_error_body(const char *field, const char *err)
{
	RequestErrors errs = {0};
	char	   *json;

	FUZZ_ASSERT(err[0] != '\0');
	request_errors_add(&errs, field, "%s", err);
	json = request_errors_json(&errs);
	FUZZ_ASSERT(json_is_valid(json));
	free(json);
}

static void
fuzz_table(const char *s)
{
	char	   *schema = (char *) 1;
	char	   *table = (char *) 1;
	char		err[256] = "";

	if (!parse_table_name(s, &schema, &table, err, sizeof(err)))
	{
		FUZZ_ASSERT(schema == NULL && table == NULL);
		check_error_body("table", err);
		return;
	}
	FUZZ_ASSERT(table != NULL);
	FUZZ_ASSERT(strlen(table) >= 1 && strlen(table) <= REQ_IDENT_MAX);
	if (schema != NULL)
		FUZZ_ASSERT(strlen(schema) >= 1 && strlen(schema) <= REQ_IDENT_MAX);

	/* "schema"."table", quoted, parses back to the same names */
	{
		char		quoted[2 * 2 * REQ_IDENT_MAX + 8] = "";
		size_t		o = 0;
		char	   *s2;
		char	   *t2;

		if (schema)
		{
			o += fuzz_quote_ident(quoted, schema);
			quoted[o++] = '.';
		}
		fuzz_quote_ident(quoted + o, table);
		FUZZ_ASSERT(parse_table_name(quoted, &s2, &t2, err, sizeof(err)));
		FUZZ_ASSERT((schema == NULL) == (s2 == NULL));
		if (schema)
			FUZZ_ASSERT(strcmp(schema, s2) == 0);
		FUZZ_ASSERT(strcmp(table, t2) == 0);
		free(s2);
		free(t2);
	}
	free(schema);
	free(table);
}

static void
fuzz_columns(const char *s)
{
	char	  **cols = (char **) 1;
	int			n = -1;
	char		err[256] = "";

	if (!parse_column_list(s, &cols, &n, err, sizeof(err)))
	{
		FUZZ_ASSERT(cols == NULL && n == 0);
		check_error_body("columns", err);
		return;
	}
	FUZZ_ASSERT(n >= 1 && n <= 1600 && cols != NULL);
	{
		size_t		cap = (size_t) n * (2 * REQ_IDENT_MAX + 3) + 1;
		char	   *quoted = malloc(cap);
		size_t		o = 0;
		char	  **cols2;
		int			n2;

		for (int i = 0; i < n; i++)
		{
			FUZZ_ASSERT(strlen(cols[i]) >= 1 && strlen(cols[i]) <= REQ_IDENT_MAX);
			if (i)
				quoted[o++] = ',';
			o += fuzz_quote_ident(quoted + o, cols[i]);
		}
		quoted[o] = '\0';
		FUZZ_ASSERT(parse_column_list(quoted, &cols2, &n2, err, sizeof(err)));
		FUZZ_ASSERT(n2 == n);
		for (int i = 0; i < n; i++)
		{
			FUZZ_ASSERT(strcmp(cols[i], cols2[i]) == 0);
			free(cols2[i]);
		}
		free(cols2);
		free(quoted);
	}
	for (int i = 0; i < n; i++)
		free(cols[i]);
	free(cols);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char	   *s;

	if (size == 0)
		return 0;
	s = fuzz_cstring(data + 1, size - 1);
	if (data[0] & 1)
		fuzz_columns(s);
	else
		fuzz_table(s);
	free(s);
	return 0;
}
