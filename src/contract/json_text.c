/*-------------------------------------------------------------------------
 *
 * json_text.c
 *		A growable text buffer with JSON string escaping.
 *
 * This file runs on libmicrohttpd threads and must not call into
 * PostgreSQL.  The HTTP side only writes small JSON documents (error bodies
 * and control messages); row messages are encoded once, by the PostgreSQL
 * side, when they enter a shape log.
 *
 * IDENTIFICATION
 *	  src/contract/json_text.c
 *
 *-------------------------------------------------------------------------
 */
#include "json_text.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef POSTGRES_H
#error "json_text.c is shared by threads and processes and must not include postgres.h"
#endif

/* U+FFFD, written for a byte that is not UTF-8. */
#define UTF8_REPLACEMENT_CHARACTER "\xEF\xBF\xBD"

static size_t utf8_sequence_length(const unsigned char *p, const unsigned char *end);

void
json_buf_init(JsonBuf *buf)
{
	buf->data = NULL;
	buf->len = 0;
	buf->cap = 0;
	buf->failed = false;
}

static bool
json_buf_reserve(JsonBuf *buf, size_t more)
{
	size_t		want = buf->len + more + 1;
	char	   *grown;

	if (buf->failed)
		return false;
	if (want <= buf->cap)
		return true;
	if (want < 2 * buf->cap)
		want = 2 * buf->cap;
	if (want < 256)
		want = 256;
	grown = realloc(buf->data, want);
	if (grown == NULL)
	{
		buf->failed = true;
		return false;
	}
	buf->data = grown;
	buf->cap = want;
	return true;
}

void
json_buf_put(JsonBuf *buf, const char *s, size_t n)
{
	if (!json_buf_reserve(buf, n))
		return;
	memcpy(buf->data + buf->len, s, n);
	buf->len += n;
	buf->data[buf->len] = '\0';
}

void
json_buf_puts(JsonBuf *buf, const char *s)
{
	json_buf_put(buf, s, strlen(s));
}

void
json_buf_putc(JsonBuf *buf, char c)
{
	json_buf_put(buf, &c, 1);
}

void
json_buf_printf(JsonBuf *buf, const char *fmt,...)
{
	char		small[256];
	va_list		ap;
	int			n;

	va_start(ap, fmt);
	n = vsnprintf(small, sizeof(small), fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t) n < sizeof(small))
	{
		json_buf_put(buf, small, (size_t) n);
		return;
	}
	if (!json_buf_reserve(buf, (size_t) n))
		return;
	va_start(ap, fmt);
	vsnprintf(buf->data + buf->len, (size_t) n + 1, fmt, ap);
	va_end(ap);
	buf->len += (size_t) n;
}

/*
 * How byte c is written inside a JSON string, as PostgreSQL's escape_json
 * writes it (the row encoder's messages and the server's own bodies agree):
 * its escape, in `tmp` when it has no fixed one, or NULL when the byte
 * stands for itself.
 */
const char *
json_escape_byte(unsigned char c, char tmp[JSON_ESCAPE_MAX])
{
	switch (c)
	{
		case '"':
			return "\\\"";
		case '\\':
			return "\\\\";
		case '\b':
			return "\\b";
		case '\f':
			return "\\f";
		case '\n':
			return "\\n";
		case '\r':
			return "\\r";
		case '\t':
			return "\\t";
		default:
			if (c >= 0x20)
				return NULL;
			snprintf(tmp, JSON_ESCAPE_MAX, "\\u%04x", c);
			return tmp;
	}
}

/*
 * Appends s escaped as the inside of a JSON string.  A byte that does not
 * start a well-formed UTF-8 sequence is written as U+FFFD, so the document
 * stays valid JSON whatever the text came from (an error message PostgreSQL
 * cut in the middle of a character, for example).
 */
void
json_buf_put_escaped(JsonBuf *buf, const char *s)
{
	const unsigned char *end = (const unsigned char *) s + strlen(s);
	const unsigned char *run = (const unsigned char *) s;
	const unsigned char *p = run;

	while (p < end)
	{
		char		tmp[JSON_ESCAPE_MAX];
		const char *replacement;
		size_t		n;

		if (*p < 0x80)
		{
			if (!json_byte_needs_escape(*p))
			{
				p++;
				continue;
			}
			replacement = json_escape_byte(*p, tmp);
		}
		else if ((n = utf8_sequence_length(p, end)) > 0)
		{
			p += n;
			continue;
		}
		else
			replacement = UTF8_REPLACEMENT_CHARACTER;
		json_buf_put(buf, (const char *) run, (size_t) (p - run));
		json_buf_puts(buf, replacement);
		run = ++p;
	}
	json_buf_put(buf, (const char *) run, (size_t) (p - run));
}

/* Appends s as a JSON string literal, quotes included. */
void
json_buf_put_string(JsonBuf *buf, const char *s)
{
	json_buf_putc(buf, '"');
	json_buf_put_escaped(buf, s);
	json_buf_putc(buf, '"');
}

char *
json_buf_finish(JsonBuf *buf)
{
	if (buf->failed)
	{
		free(buf->data);
		buf->data = NULL;
		return NULL;
	}
	if (buf->data == NULL)
		return strdup("");
	return buf->data;
}

char *
json_message_body(const char *key, const char *message)
{
	JsonBuf		out;

	json_buf_init(&out);
	json_buf_putc(&out, '{');
	json_buf_put_string(&out, key);
	json_buf_putc(&out, ':');
	json_buf_put_string(&out, message);
	json_buf_putc(&out, '}');
	return json_buf_finish(&out);
}

/*
 * The length of the well-formed UTF-8 sequence that starts at p (an ASCII
 * byte is one), or 0 when p starts none: a continuation byte, C0, C1,
 * F5..FF, a truncated sequence, an overlong form, a surrogate or a code
 * point past U+10FFFF.
 */
static size_t
utf8_sequence_length(const unsigned char *p, const unsigned char *end)
{
	unsigned char c = *p;
	size_t		n;
	uint32_t	cp;
	uint32_t	min;

	if (c < 0x80)
		return 1;
	if (c >= 0xC2 && c <= 0xDF)
		n = 1, cp = c & 0x1F, min = 0x80;
	else if (c >= 0xE0 && c <= 0xEF)
		n = 2, cp = c & 0x0F, min = 0x800;
	else if (c >= 0xF0 && c <= 0xF4)
		n = 3, cp = c & 0x07, min = 0x10000;
	else
		return 0;
	if ((size_t) (end - p) <= n)
		return 0;
	for (size_t i = 1; i <= n; i++)
	{
		if ((p[i] & 0xC0) != 0x80)
			return 0;
		cp = (cp << 6) | (p[i] & 0x3F);
	}
	if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
		return 0;
	return n + 1;
}

bool
utf8_is_valid(const char *s, size_t len)
{
	const unsigned char *p = (const unsigned char *) s;
	const unsigned char *end = p + len;

	while (p < end)
	{
		size_t		n = utf8_sequence_length(p, end);

		if (n == 0)
			return false;
		p += n;
	}
	return true;
}
