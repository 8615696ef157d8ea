/*
 * hand_bytes.h
 *		Bytes built by hand for the store files' tests (test_log_manifest.c,
 *		test_value_sets_file.c): little-endian integers appended to a buffer
 *		that grows, written independently of the encoders under test
 *		(src/contract/byte_codec.h), so that a fault there cannot hide in
 *		the expected bytes.
 */
#ifndef HAND_BYTES_H
#define HAND_BYTES_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct Buf
{
	unsigned char *d;
	size_t		len;
	size_t		cap;
} Buf;

static inline void
put(Buf *b, const void *p, size_t n)
{
	if (b->len + n > b->cap)
	{
		size_t		cap = b->cap ? b->cap : 64;

		while (cap < b->len + n)
			cap *= 2;
		b->d = realloc(b->d, cap);
		if (b->d == NULL)
			abort();
		b->cap = cap;
	}
	if (n > 0)
		memcpy(b->d + b->len, p, n);
	b->len += n;
}

static inline void
put_u8(Buf *b, unsigned char v)
{
	put(b, &v, 1);
}

static inline void
put_u32(Buf *b, uint32_t v)
{
	unsigned char x[4];

	for (int i = 0; i < 4; i++)
		x[i] = (unsigned char) (v >> (8 * i));
	put(b, x, 4);
}

static inline void
put_u64(Buf *b, uint64_t v)
{
	unsigned char x[8];

	for (int i = 0; i < 8; i++)
		x[i] = (unsigned char) (v >> (8 * i));
	put(b, x, 8);
}

/* An exact-size copy of n bytes (malloc(0) avoided: ASan sees any read). */
static inline char *
copy_of(const void *p, size_t n)
{
	char	   *c = malloc(n ? n : 1);

	if (c == NULL)
		abort();
	if (n > 0)
		memcpy(c, p, n);
	return c;
}

static inline void
buf_free(Buf *b)
{
	free(b->d);
	memset(b, 0, sizeof(*b));
}

#endif							/* HAND_BYTES_H */
