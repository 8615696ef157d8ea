/*-------------------------------------------------------------------------
 *
 * catalog_use.c
 *		Which catalog the worker's caches were built from: as decoding
 *		sees it, or as it is now.
 *
 * The worker's main thread reads the catalog in two ways: decoding reads
 * it as of each transaction it decodes (historic snapshots), and the rest
 * (resolving shapes, checking tables) as it is now.  The relation and
 * catalog caches keep entries from either, and nothing tells one use that
 * an entry was built for the other (decoder.c says why that breaks), so
 * the caches are emptied whenever the use switches, and only then.  Cache
 * callbacks (shape_stream.c) ignore those resets: nothing changed.
 *
 * Everything here runs on the worker's main thread, outside transactions.
 *
 * IDENTIFICATION
 *	  src/pg/worker/catalog_use.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "utils/inval.h"

#include "catalog_use.h"

typedef enum CatalogUse
{
	CATALOG_USE_CURRENT,
	CATALOG_USE_HISTORIC,
} CatalogUse;

static CatalogUse catalog_use = CATALOG_USE_CURRENT;
bool		catalog_use_resetting_caches = false;

/* Empties the relation and catalog caches for the other use of the catalog. */
static void
catalog_use_switch(CatalogUse use)
{
	if (catalog_use == use)
		return;
	/* inside a transaction a reset would rebuild entries and read messages */
	Assert(!IsTransactionState());
	catalog_use_resetting_caches = true;
	PG_TRY();
	{
		InvalidateSystemCaches();
	}
	PG_FINALLY();
	{
		catalog_use_resetting_caches = false;
	}
	PG_END_TRY();
	catalog_use = use;
}

void
catalog_use_current(void)
{
	catalog_use_switch(CATALOG_USE_CURRENT);
}

void
catalog_use_historic(void)
{
	catalog_use_switch(CATALOG_USE_HISTORIC);
}
