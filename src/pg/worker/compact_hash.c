/*-------------------------------------------------------------------------
 *
 * compact_hash.c
 *		Backend-local hash tables that give memory back once emptied.
 *
 * dynahash never shrinks: a table that once held 10,000 shapes keeps its
 * buckets and a freelist of 10,000 entries for as long as it lives, after
 * the shapes are gone.  A CompactHash is a dynahash table that remembers
 * the most entries it held (compact_hash_enter) and, when asked at a point
 * where no entry pointer is held and no scan is open (compact_hash_shrink),
 * is made anew at its current size once it holds less than an eighth of
 * that peak: the entries are copied to a new table and the old one's
 * memory context is deleted, so its memory goes back to malloc, and from
 * there to the kernel (the worker trims its heap after shapes go).  A
 * rebuild costs O(entries) and happens after seven eighths of the peak
 * were removed, so removals pay O(1) each, amortized.
 *
 * Entries move on a rebuild: a caller keeps no pointer to one across a call
 * of compact_hash_shrink.  Keys are at the start of entries, as dynahash
 * requires.
 *
 * IDENTIFICATION
 *	  src/pg/worker/compact_hash.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "compact_hash.h"

/* Creates the table; ctl and flags as hash_create takes them (HASH_ELEM at least). */
void
compact_hash_create(CompactHash *hash, const char *name, long initial,
					const HASHCTL *ctl, int flags)
{
	hash->name = name;
	hash->ctl = *ctl;
	hash->flags = flags;
	hash->initial = initial;
	hash->peak = 0;
	hash->htab = hash_create(name, initial, &hash->ctl, flags);
}

/* hash_search(HASH_ENTER), noting the peak. */
void *
compact_hash_enter(CompactHash *hash, const void *key, bool *found)
{
	void	   *entry = hash_search(hash->htab, key, HASH_ENTER, found);
	long		n = hash_get_num_entries(hash->htab);

	if (n > hash->peak)
		hash->peak = n;
	return entry;
}

/* Makes the table anew if it holds less than an eighth of its peak. */
void
compact_hash_shrink(CompactHash *hash)
{
	long		n = hash_get_num_entries(hash->htab);
	HTAB	   *fresh;
	HASH_SEQ_STATUS seq;
	void	   *entry;

	if (hash->peak <= hash->initial || n * 8 >= hash->peak)
		return;

	/*
	 * The new table replaces the old one only once it holds every entry: an
	 * error while it is filled (out of memory) leaves the old one in use.
	 */
	fresh = hash_create(hash->name, Max(hash->initial, n), &hash->ctl, hash->flags);
	PG_TRY();
	{
		hash_seq_init(&seq, hash->htab);
		while ((entry = hash_seq_search(&seq)) != NULL)
			memcpy(hash_search(fresh, entry, HASH_ENTER, NULL), entry, hash->ctl.entrysize);
	}
	PG_CATCH();
	{
		/* the open scan of the old table ends with the transaction's abort */
		hash_destroy(fresh);
		PG_RE_THROW();
	}
	PG_END_TRY();
	hash_destroy(hash->htab);
	hash->htab = fresh;
	hash->peak = n;
}
