/*-------------------------------------------------------------------------
 *
 * partition_route.c
 *		Which partitioned tables a decoded change of a partition belongs to.
 *
 * Decoding reports a change of a partitioned table as a change of the leaf
 * partition that stores the row.  A shape on the partitioned table (or on
 * a partition above the leaf) needs the change too, as a row of that
 * table: its columns may sit at other attribute numbers (a partition made
 * with columns in another order, or with dropped columns, or attached
 * from an existing table).  For a leaf, this file gives its ancestors,
 * each with its tuple descriptor and the map from the leaf's columns to
 * its own, read from the catalog as decoding sees it.
 *
 * The answers are cached per leaf and all forgotten at any relcache
 * invalidation (an ATTACH or DETACH PARTITION invalidates the tables
 * involved, and invalidations are rare next to changes).  The callback
 * only marks the cache stale: it may fire while an entry is being built,
 * during the catalog reads below, and the entry's memory must not vanish
 * under the builder.  The next lookup starts from an empty cache.
 *
 * Everything here runs on the worker's main thread, while decoding.
 *
 * IDENTIFICATION
 *	  src/pg/worker/partition_route.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/partition.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "partition_route.h"

static MemoryContext route_context;
static HTAB *route_cache;		/* leaf relid -> PartitionRoute */
static bool route_stale;
static bool route_callback_registered;

static void
route_invalidate(Datum arg, Oid relid)
{
	route_stale = true;
}

static void
route_reset(void)
{
	HASHCTL		ctl;

	if (route_context == NULL)
		route_context = AllocSetContextCreate(TopMemoryContext, "shape_sync partition routes",
											  ALLOCSET_SMALL_SIZES);
	else
		MemoryContextReset(route_context);
	ctl.keysize = sizeof(Oid);
	ctl.entrysize = sizeof(PartitionRoute);
	ctl.hcxt = route_context;
	route_cache = hash_create("shape_sync partition routes", 64, &ctl,
							  HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	route_stale = false;
	if (!route_callback_registered)
	{
		CacheRegisterRelcacheCallback(route_invalidate, (Datum) 0);
		route_callback_registered = true;
	}
}

/* The ancestors of `leaf`, as the catalog says at this point of decoding. */
static void
route_build(Relation leaf, PartitionRoute *route)
{
	List	   *ancestors = get_partition_ancestors(RelationGetRelid(leaf));
	MemoryContext old = MemoryContextSwitchTo(route_context);
	ListCell   *lc;
	int			n = 0;

	route->ancestors = palloc0(sizeof(PartitionAncestor) * Max(list_length(ancestors), 1));
	foreach(lc, ancestors)
	{
		Relation	parent = RelationIdGetRelation(lfirst_oid(lc));
		PartitionAncestor *a;

		if (!RelationIsValid(parent))
			continue;
		a = &route->ancestors[n++];
		a->relid = RelationGetRelid(parent);
		a->desc = CreateTupleDescCopy(RelationGetDescr(parent));
		a->map = build_attrmap_by_name_if_req(RelationGetDescr(leaf), a->desc);
		RelationClose(parent);
	}
	route->nancestors = n;
	MemoryContextSwitchTo(old);
}

const PartitionRoute *
partition_route_of(Relation leaf)
{
	Oid			relid = RelationGetRelid(leaf);
	PartitionRoute *route;
	PartitionRoute built = {0};
	bool		found;

	if (route_cache == NULL || route_stale)
		route_reset();
	route = hash_search(route_cache, &relid, HASH_FIND, NULL);
	if (route != NULL)
		return route;
	built.leaf = relid;
	if (leaf->rd_rel->relispartition)
		route_build(leaf, &built);
	if (route_stale)
	{
		/* invalidated while being read: good for this change only */
		PartitionRoute *once = palloc(sizeof(PartitionRoute));

		*once = built;
		return once;
	}
	route = hash_search(route_cache, &relid, HASH_ENTER, &found);
	*route = built;
	return route;
}
