/*
 * test_json_text.c
 *		JSON string escaping and UTF-8 checks (src/contract/json_text.c).
 */
#include "unit.h"

#include "json_text.h"

/* json_buf_put_string(s) as a malloc'd string; NULL on allocation failure. */
static char *
quoted(const char *s)
{
	JsonBuf		b;

	json_buf_init(&b);
	json_buf_put_string(&b, s);
	return json_buf_finish(&b);
}

static void
check_quotes(const char *file, int line, const char *in, const char *expected)
{
	char	   *out = quoted(in);

	if (out == NULL)
		unit_fail(file, line, "json_buf_put_string failed to allocate");
	else if (strcmp(out, expected) != 0)
		unit_fail(file, line, "json_buf_put_string(\"%s\") = %s, expected %s", in, out, expected);
	else if (!utf8_is_valid(out, strlen(out)))
		unit_fail(file, line, "json_buf_put_string(\"%s\") wrote invalid UTF-8", in);
	free(out);
}

#define QUOTES(in, expected) check_quotes(__FILE__, __LINE__, in, expected)

TEST(escapes_what_json_requires)
{
	QUOTES("", "\"\"");
	QUOTES("plain", "\"plain\"");
	QUOTES("a\"b\\c", "\"a\\\"b\\\\c\"");
	QUOTES("\b\f\n\r\t", "\"\\b\\f\\n\\r\\t\"");
	QUOTES("\x01x\x1f", "\"\\u0001x\\u001f\"");
	QUOTES("/<>\x7f", "\"/<>\x7f\"");
}

TEST(keeps_well_formed_utf8)
{
	QUOTES("caf\xC3\xA9", "\"caf\xC3\xA9\"");					/* 2 bytes */
	QUOTES("\xE2\x82\xAC 5", "\"\xE2\x82\xAC 5\"");				/* 3 bytes */
	QUOTES("\xEF\xBB\xBF", "\"\xEF\xBB\xBF\"");					/* U+FEFF */
	QUOTES("\xF0\x9F\x98\x80!", "\"\xF0\x9F\x98\x80!\"");		/* 4 bytes */
	QUOTES("\xF4\x8F\xBF\xBF", "\"\xF4\x8F\xBF\xBF\"");			/* U+10FFFF */
}

/*
 * The fuzz finding (seed 3179421464): PostgreSQL's jsonpath error quoted a
 * text cut after the first byte of U+FEFF, and the 400's body was not UTF-8.
 */
TEST(writes_replacement_for_invalid_utf8)
{
	QUOTES("at \"3648a\xEF\"", "\"at \\\"3648a\xEF\xBF\xBD\\\"\"");	/* cut 3-byte */
	QUOTES("x\xEF\xBB", "\"x\xEF\xBF\xBD\xEF\xBF\xBD\"");		/* cut at the end */
	QUOTES("\x80", "\"\xEF\xBF\xBD\"");							/* lone continuation */
	QUOTES("\xC0\xAF", "\"\xEF\xBF\xBD\xEF\xBF\xBD\"");			/* overlong '/' */
	QUOTES("\xED\xA0\x80", "\"\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\"");	/* surrogate */
	QUOTES("\xF4\x90\x80\x80", "\"\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\"");	/* > U+10FFFF */
	QUOTES("\xFF\"", "\"\xEF\xBF\xBD\\\"\"");						/* then an escape */
	QUOTES("\xC3\xA9\xC3", "\"\xC3\xA9\xEF\xBF\xBD\"");			/* valid, then cut */
}

TEST(validates_utf8)
{
	CHECK(utf8_is_valid("", 0));
	CHECK(utf8_is_valid("a\0b", 3));		/* NUL is callers' business */
	CHECK(utf8_is_valid("\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80", 9));
	CHECK(!utf8_is_valid("\xC3", 1));
	CHECK(!utf8_is_valid("\xE2\x82", 2));
	CHECK(!utf8_is_valid("\xC1\xBF", 2));
	CHECK(!utf8_is_valid("\xE0\x9F\xBF", 3));	/* overlong 3-byte */
	CHECK(!utf8_is_valid("\xF0\x8F\xBF\xBF", 4));	/* overlong 4-byte */
	CHECK(!utf8_is_valid("\xED\xBF\xBF", 3));	/* surrogate */
	CHECK(!utf8_is_valid("\xF5\x80\x80\x80", 4));
	CHECK(!utf8_is_valid("a\xC3(", 3));
}

TEST(message_body_stays_valid_json_text)
{
	char	   *body = json_message_body("message", "bad \xE2\x82");

	REQUIRE(body != NULL);
	CHECK_STR_EQ(body, "{\"message\":\"bad \xEF\xBF\xBD\xEF\xBF\xBD\"}");
	free(body);
}

UNIT_MAIN()
