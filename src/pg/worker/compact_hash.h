/*-------------------------------------------------------------------------
 *
 * compact_hash.h
 *		Backend-local hash tables that give memory back once emptied.
 *
 * IDENTIFICATION
 *	  src/pg/worker/compact_hash.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef COMPACT_HASH_H
#define COMPACT_HASH_H

#include "postgres.h"

#include "utils/hsearch.h"

typedef struct CompactHash
{
	HTAB	   *htab;			/* hash_search this one */
	const char *name;
	HASHCTL		ctl;			/* keysize, entrysize, hcxt, ... as created */
	int			flags;
	long		initial;		/* the size it was created for */
	long		peak;			/* the most entries since the last rebuild */
} CompactHash;

extern void compact_hash_create(CompactHash *hash, const char *name, long initial,
								const HASHCTL *ctl, int flags);
extern void *compact_hash_enter(CompactHash *hash, const void *key, bool *found);
extern void compact_hash_shrink(CompactHash *hash);

#endif							/* COMPACT_HASH_H */
