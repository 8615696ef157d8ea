/*-------------------------------------------------------------------------
 *
 * partition_route.h
 *		The partitioned tables above a partition, for decoded changes.
 *
 * IDENTIFICATION
 *	  src/pg/worker/partition_route.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SHAPE_SYNC_PARTITION_ROUTE_H
#define SHAPE_SYNC_PARTITION_ROUTE_H

#include "postgres.h"

#include "access/attmap.h"
#include "access/tupdesc.h"
#include "utils/relcache.h"

typedef struct PartitionAncestor
{
	Oid			relid;
	TupleDesc	desc;			/* its columns */
	AttrMap    *map;			/* the leaf's columns to its own; NULL: the same */
} PartitionAncestor;

typedef struct PartitionRoute
{
	Oid			leaf;			/* hash key */
	int			nancestors;		/* parent first, root last */
	PartitionAncestor *ancestors;
} PartitionRoute;

/* The ancestors of a table (none when it is not a partition). */
extern const PartitionRoute *partition_route_of(Relation leaf);

#endif
