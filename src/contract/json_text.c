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

/* Appends s as a JSON string literal, quotes included. */
void
json_buf_put_string(JsonBuf *buf, const char *s)
{
	const char *run = s;

	json_buf_putc(buf, '"');
	for (const char *p = s;; p++)
	{
		char		tmp[JSON_ESCAPE_MAX];
		const char *escape;

		if (*p && !json_byte_needs_escape((unsigned char) *p))
			continue;
		escape = *p ? json_escape_byte((unsigned char) *p, tmp) : NULL;
		json_buf_put(buf, run, (size_t) (p - run));
		if (*p == '\0')
			break;
		json_buf_puts(buf, escape);
		run = p + 1;
	}
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

bool
utf8_is_valid(const char *s, size_t len)
{
	const unsigned char *p = (const unsigned char *) s;
	const unsigned char *end = p + len;

	while (p < end)
	{
		unsigned char c = *p;
		size_t		n;
		uint32_t	cp;
		uint32_t	min;

		if (c < 0x80)
		{
			p++;
			continue;
		}
		if (c >= 0xC2 && c <= 0xDF)
			n = 1, cp = c & 0x1F, min = 0x80;
		else if (c >= 0xE0 && c <= 0xEF)
			n = 2, cp = c & 0x0F, min = 0x800;
		else if (c >= 0xF0 && c <= 0xF4)
			n = 3, cp = c & 0x07, min = 0x10000;
		else
			return false;		/* a continuation byte, C0, C1 or F5..FF */
		if ((size_t) (end - p) <= n)
			return false;
		for (size_t i = 1; i <= n; i++)
		{
			if ((p[i] & 0xC0) != 0x80)
				return false;
			cp = (cp << 6) | (p[i] & 0x3F);
		}
		if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
			return false;
		p += n + 1;
	}
	return true;
}
