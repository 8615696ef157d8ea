/*-------------------------------------------------------------------------
 *
 * name_lookup.c
 *		Keeps names that do not exist from filling the catalog caches.
 *
 * Resolving a request looks its names up in PostgreSQL's catalog caches:
 * its schema, table and columns, and the types, functions and operators
 * its where clause names.  A lookup that finds nothing leaves a negative
 * entry (about 235 bytes for a table or column name), so that the next
 * miss of the same name is cheap; it stays until an invalidation of its
 * catalog, which on an idle database never comes (the decoder empties the
 * caches only when it switches between decoding and the current catalog,
 * decoder.c).  Each request naming something that does not exist, with a
 * fresh name each time, thus grew the worker, and a snapshot worker taking
 * subset queries, without bound.
 *
 * Such a request fails: each failed resolution is counted, and every
 * NAME_LOOKUP_FAILURES_BOUND failures the process empties its catalog
 * caches (ResetCatalogCaches), negative entries and lists with the rest.
 * Nothing in the catalog changed, so no cache callback is called (the
 * registered ones are for changes, and shape_stream.c would recheck every
 * shape); entries in use are only marked dead, as an invalidation does.
 * The cost is the lookups that fill the caches again, once per
 * NAME_LOOKUP_FAILURES_BOUND failed requests; the memory kept is at most
 * what that many failures leave, reused after each reset.  Failures that
 * left nothing count too: simpler than knowing which lookups missed.
 *
 * IDENTIFICATION
 *	  src/pg/shape/name_lookup.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/catcache.h"

#include "name_lookup.h"

#define NAME_LOOKUP_FAILURES_BOUND	2048

static uint32 nl_failures = 0;	/* since this process last emptied its caches */

void
name_lookup_failed(void)
{
	if (++nl_failures < NAME_LOOKUP_FAILURES_BOUND)
		return;
	nl_failures = 0;
	ResetCatalogCaches();
}
