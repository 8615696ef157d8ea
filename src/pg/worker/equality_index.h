/*-------------------------------------------------------------------------
 *
 * equality_index.h
 *		The shapes of one table, found by the constants their where clauses
 *		compare a column with.
 *
 * IDENTIFICATION
 *	  src/pg/worker/equality_index.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SHAPE_SYNC_EQUALITY_INDEX_H
#define SHAPE_SYNC_EQUALITY_INDEX_H

#include "postgres.h"

#include "executor/tuptable.h"
#include "nodes/primnodes.h"

/*
 * How a shape is found: through the hashes of the constants a column of
 * its where clause must equal (attnum > 0), or by evaluating its clause on
 * every change (attnum 0).
 */
typedef struct EqualityRoute
{
	AttrNumber	attnum;
	Oid			column_type;	/* the column's type when the shape was made */
	Oid			column_hash;	/* hash function of that type, in the
								 * operator's hash family */
	Oid			collation;		/* the comparison's */
	int			nhashes;		/* distinct; 0: the clause matches no row */
	uint32	   *hashes;
	int			keyno;			/* set by equality_index_add: where it is
								 * filed (-1: with the unrouted shapes) */
} EqualityRoute;

typedef struct EqualityIndex EqualityIndex;

typedef void (*EqualityVisit) (uint32 slot, void *arg);

/* The route of a where clause (planned, as the executor runs it). */
extern void equality_route_of(Expr *where, EqualityRoute *route);

extern EqualityIndex *equality_index_create(MemoryContext parent);
extern void equality_index_destroy(EqualityIndex *index);
extern void equality_index_add(EqualityIndex *index, uint32 slot, EqualityRoute *route);
extern void equality_index_remove(EqualityIndex *index, uint32 slot, const EqualityRoute *route);
extern void equality_index_file(EqualityIndex *index, uint32 slot, const EqualityRoute *route,
								uint32 hash, bool add);

/*
 * Visits the routed shapes that a row may belong to: each one of whose
 * constants hashes like the row's column (a shape may be visited more than
 * once).  A column whose type is no longer the one its shapes were made
 * with routes nothing: those shapes are checked one by one, and go.  The
 * shapes that are not routed are visited by the second call.
 */
extern void equality_index_visit(EqualityIndex *index, TupleTableSlot *row,
								 EqualityVisit visit, void *arg);
extern void equality_index_visit_unrouted(EqualityIndex *index,
										  EqualityVisit visit, void *arg);

#endif
