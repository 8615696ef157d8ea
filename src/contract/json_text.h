/*-------------------------------------------------------------------------
 *
 * json_text.h
 *		A growable text buffer with JSON string escaping.
 *
 * IDENTIFICATION
 *	  src/contract/json_text.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef JSON_TEXT_H
#define JSON_TEXT_H

#include <stdbool.h>
#include <stddef.h>

typedef struct JsonBuf
{
	char	   *data;
	size_t		len;
	size_t		cap;
	bool		failed;			/* an allocation failed; finish returns NULL */
} JsonBuf;

extern void json_buf_init(JsonBuf *buf);
extern void json_buf_put(JsonBuf *buf, const char *s, size_t n);
extern void json_buf_puts(JsonBuf *buf, const char *s);
extern void json_buf_putc(JsonBuf *buf, char c);
extern void json_buf_printf(JsonBuf *buf, const char *fmt,...)
			__attribute__((format(printf, 2, 3)));
extern void json_buf_put_escaped(JsonBuf *buf, const char *s);
extern void json_buf_put_string(JsonBuf *buf, const char *s);

#define JSON_ESCAPE_MAX 8		/* "\\u001f" and its NUL */
extern const char *json_escape_byte(unsigned char c, char tmp[JSON_ESCAPE_MAX]);

/* Whether byte c must be escaped inside a JSON string (json_escape_byte says how). */
static inline bool
json_byte_needs_escape(unsigned char c)
{
	return c < 0x20 || c == '"' || c == '\\';
}

extern char *json_buf_finish(JsonBuf *buf);

/*
 * Whether s[0, len) is well-formed UTF-8: no overlong forms, no
 * surrogates, nothing past U+10FFFF.  A NUL byte is well-formed; callers
 * that refuse it check for it themselves.
 */
extern bool utf8_is_valid(const char *s, size_t len);

/* {"message":"<msg>"}-style bodies, malloc'd; NULL when out of memory. */
extern char *json_message_body(const char *key, const char *message);

#endif							/* JSON_TEXT_H */
