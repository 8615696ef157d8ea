/*-------------------------------------------------------------------------
 *
 * byte_codec.h
 *		Little-endian integers and byte runs written into a buffer that
 *		grows, and read out of one whose end is checked: the encoding of
 *		the store's files (log_manifest.c, value_sets_file.c).
 *
 * A writer that runs out of memory sets `failed` and takes nothing more;
 * a reader asked for more than is left sets `failed` and returns zeros.
 * Either way the caller checks `failed` once, at the end.  A header only,
 * plain C: no PostgreSQL.
 *
 * IDENTIFICATION
 *	  src/contract/byte_codec.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef BYTE_CODEC_H
#define BYTE_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* What was written so far, in malloc'd memory. */
typedef struct ByteWriter
{
	char	   *data;
	size_t		len;
	size_t		cap;
	bool		failed;			/* out of memory (or the caller's own limit) */
} ByteWriter;

static inline void
byte_put(ByteWriter *w, const void *p, size_t n)
{
	if (w->failed)
		return;
	if (w->len + n > w->cap)
	{
		size_t		cap = w->cap ? w->cap : 256;
		char	   *grown;

		while (cap < w->len + n)
			cap *= 2;
		grown = realloc(w->data, cap);
		if (grown == NULL)
		{
			w->failed = true;
			return;
		}
		w->data = grown;
		w->cap = cap;
	}
	if (n > 0)
		memcpy(w->data + w->len, p, n);
	w->len += n;
}

static inline void
byte_put_u32(ByteWriter *w, uint32_t v)
{
	unsigned char b[4];

	for (int i = 0; i < 4; i++)
		b[i] = (unsigned char) (v >> (8 * i));
	byte_put(w, b, 4);
}

static inline void
byte_put_u64(ByteWriter *w, uint64_t v)
{
	unsigned char b[8];

	for (int i = 0; i < 8; i++)
		b[i] = (unsigned char) (v >> (8 * i));
	byte_put(w, b, 8);
}

/* Where reading is, and how much is left. */
typedef struct ByteReader
{
	const unsigned char *p;
	size_t		left;
	bool		failed;
} ByteReader;

static inline uint32_t
byte_le32(const unsigned char *b)
{
	return (uint32_t) b[0] | (uint32_t) b[1] << 8 | (uint32_t) b[2] << 16 |
		(uint32_t) b[3] << 24;
}

static inline uint64_t
byte_le64(const unsigned char *b)
{
	return (uint64_t) byte_le32(b) | (uint64_t) byte_le32(b + 4) << 32;
}

/* n bytes where the reader is, skipped; NULL when fewer are left. */
static inline const unsigned char *
byte_take(ByteReader *r, size_t n)
{
	const unsigned char *p = r->p;

	if (r->failed || r->left < n)
	{
		r->failed = true;
		return NULL;
	}
	r->p += n;
	r->left -= n;
	return p;
}

/* n bytes into `out` (zeros when fewer are left). */
static inline bool
byte_get(ByteReader *r, void *out, size_t n)
{
	const unsigned char *p = byte_take(r, n);

	if (p == NULL)
	{
		memset(out, 0, n);
		return false;
	}
	memcpy(out, p, n);
	return true;
}

static inline uint32_t
byte_get_u32(ByteReader *r)
{
	const unsigned char *p = byte_take(r, 4);

	return p ? byte_le32(p) : 0;
}

static inline uint64_t
byte_get_u64(ByteReader *r)
{
	const unsigned char *p = byte_take(r, 8);

	return p ? byte_le64(p) : 0;
}

#endif							/* BYTE_CODEC_H */
