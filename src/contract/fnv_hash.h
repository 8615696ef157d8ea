/*-------------------------------------------------------------------------
 *
 * fnv_hash.h
 *		FNV-1a, the 64-bit hash of short keys: client addresses, the keys
 *		a compaction groups by.
 *
 * A header only, for threads and PostgreSQL processes alike.
 *
 * IDENTIFICATION
 *	  src/contract/fnv_hash.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef FNV_HASH_H
#define FNV_HASH_H

#include <stddef.h>
#include <stdint.h>

#define FNV_HASH_START	14695981039346656037ULL	/* the offset basis, 0xcbf29ce484222325 */

/* Hashes n more bytes into h (start with FNV_HASH_START). */
static inline uint64_t
fnv_hash_bytes(uint64_t h, const void *bytes, size_t n)
{
	const unsigned char *p = bytes;

	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 1099511628211ULL;
	return h;
}

#endif							/* FNV_HASH_H */
