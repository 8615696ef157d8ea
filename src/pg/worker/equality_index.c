/*-------------------------------------------------------------------------
 *
 * equality_index.c
 *		The shapes of one table, found by the constants their where clauses
 *		compare a column with.
 *
 * Most shapes of a real application differ only by a constant: `tenant_id
 * = $1`, `user_id IN (...)`, `doc = $1 AND deleted = false`.  Evaluating
 * every such clause on every change of the table costs the decoder time in
 * proportion to the number of shapes, nearly all of which the change does
 * not concern.  So a shape whose clause is, or is a conjunction containing,
 * `column = constant` or `column = ANY(constant array)` (what `IN` lists
 * become) is filed under the hash of each constant, and a decoded row
 * visits only the shapes filed under the hash of its own column value:
 * one hash function call and one hash table probe per column that routes
 * shapes, whatever their number.
 *
 * The index only narrows: the shapes it returns are candidates, whose
 * whole where clause is still evaluated on the row (shape_stream_change.c).  So
 * it is correct as long as every shape whose clause is true on a row is
 * among them, which holds when the comparison's operator is the equality
 * of a hash operator family and the row's value and the constant are
 * hashed with that family's functions and the comparison's collation:
 * values that the operator finds equal then hash alike, by the contract
 * that hash joins rely on (cross-type members included, e.g. int4 = int8;
 * nondeterministic collations hash by sort key).  A row whose column is
 * NULL matches no such clause (the operator is strict) and is routed to no
 * shape.  Collisions only cost an evaluation.
 *
 * What is not routed: clauses without such an equality (ranges, OR, LIKE,
 * functions of a column), and equalities whose hash function is not built
 * in: hashing runs as the worker, not as the shape's role, so no
 * user-defined code runs there, and not the container hashes (arrays,
 * records, ranges), which fail at run time on element types that have no
 * hash function.  Those shapes are evaluated on every change.
 *
 * Everything here runs on the worker's main thread.
 *
 * IDENTIFICATION
 *	  src/pg/worker/equality_index.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/transam.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "nodes/nodeFuncs.h"
#include "utils/array.h"
#include "utils/fmgroids.h"
#include "utils/hsearch.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"

#include "equality_index.h"

/* A column, hashed one way: the routed shapes of the index share a few. */
typedef struct EqKey
{
	AttrNumber	attnum;
	Oid			column_type;
	Oid			column_hash;
	Oid			collation;
	int			nshapes;		/* 0: looked up no more */
	FmgrInfo	hash_fn;
} EqKey;

typedef struct EqBucketKey
{
	uint32		keyno;
	uint32		hash;
} EqBucketKey;

typedef struct EqBucket
{
	EqBucketKey key;
	List	   *slots;			/* int list */
} EqBucket;

struct EqualityIndex
{
	MemoryContext context;		/* everything of the index */
	int			nkeys;
	EqKey	  **keys;
	HTAB	   *buckets;		/* EqBucketKey -> EqBucket */
	List	   *unrouted;		/* int list: shapes evaluated on every row */
};

#define EQ_MAX_KEYS		64		/* distinct (column, hash, collation) */

/* ------------------------------------------------------------ analysis */

/* The column a side of a comparison reads as it is, or 0; and its type. */
static AttrNumber
eq_column(Node *node, Oid *type)
{
	while (node != NULL && IsA(node, RelabelType))
		node = (Node *) ((RelabelType *) node)->arg;
	if (node == NULL || !IsA(node, Var))
		return 0;
	if (((Var *) node)->varno != 1 || ((Var *) node)->varlevelsup != 0 ||
		((Var *) node)->varattno <= 0)
		return 0;
	*type = ((Var *) node)->vartype;
	return ((Var *) node)->varattno;
}

static bool
eq_hash_usable(Oid proc)
{
	return OidIsValid(proc) && proc < FirstNormalObjectId &&
		proc != F_HASH_ARRAY && proc != F_HASH_RECORD &&
		proc != F_HASH_RANGE && proc != F_HASH_MULTIRANGE;
}

static int
eq_uint32_cmp(const void *a, const void *b)
{
	uint32		x = *(const uint32 *) a;
	uint32		y = *(const uint32 *) b;

	return x < y ? -1 : x > y ? 1 : 0;
}

static void
eq_add_hash(EqualityRoute *route, Oid hash_proc, Datum value)
{
	route->hashes[route->nhashes++] =
		DatumGetUInt32(OidFunctionCall1Coll(hash_proc, route->collation, value));
}

/*
 * The route of one conjunct: `column = constant`, `constant = column` or
 * `column = ANY(constant array)`, under an operator a hash family has.
 */
static bool
eq_route_of_conjunct(Node *node, EqualityRoute *route)
{
	Oid			opno;
	Oid			lhs_hash;
	Oid			rhs_hash;
	Node	   *left;
	Node	   *right;
	AttrNumber	attnum;
	Const	   *constant;

	if (IsA(node, OpExpr) && list_length(((OpExpr *) node)->args) == 2)
	{
		opno = ((OpExpr *) node)->opno;
		route->collation = ((OpExpr *) node)->inputcollid;
		left = linitial(((OpExpr *) node)->args);
		right = lsecond(((OpExpr *) node)->args);
	}
	else if (IsA(node, ScalarArrayOpExpr) && ((ScalarArrayOpExpr *) node)->useOr)
	{
		opno = ((ScalarArrayOpExpr *) node)->opno;
		route->collation = ((ScalarArrayOpExpr *) node)->inputcollid;
		left = linitial(((ScalarArrayOpExpr *) node)->args);
		right = lsecond(((ScalarArrayOpExpr *) node)->args);
	}
	else
		return false;
	if (!op_strict(opno) || !op_hashjoinable(opno, exprType(left)) ||
		!get_op_hash_functions(opno, &lhs_hash, &rhs_hash) ||
		!eq_hash_usable(lhs_hash) || !eq_hash_usable(rhs_hash))
		return false;

	/*
	 * name = text under a nondeterministic collation compares by the
	 * collation, but hashname hashes bytes (PostgreSQL's own hash joins
	 * have that flaw): not routed.
	 */
	if ((lhs_hash == F_HASHNAME || rhs_hash == F_HASHNAME) && OidIsValid(route->collation) &&
		!get_collation_isdeterministic(route->collation))
		return false;

	if ((attnum = eq_column(left, &route->column_type)) > 0 && IsA(right, Const))
	{
		route->column_hash = lhs_hash;
		constant = (Const *) right;
	}
	else if (IsA(node, OpExpr) && (attnum = eq_column(right, &route->column_type)) > 0 &&
			 IsA(left, Const))
	{
		route->column_hash = rhs_hash;
		rhs_hash = lhs_hash;	/* the constant's */
		constant = (Const *) left;
	}
	else
		return false;
	route->attnum = attnum;
	route->nhashes = 0;

	if (IsA(node, OpExpr))
	{
		route->hashes = palloc(sizeof(uint32));
		if (!constant->constisnull)
			eq_add_hash(route, rhs_hash, constant->constvalue);
	}
	else if (!constant->constisnull)
	{
		ArrayType  *array = DatumGetArrayTypeP(constant->constvalue);
		Oid			element = ARR_ELEMTYPE(array);
		int16		typlen;
		bool		typbyval;
		char		typalign;
		Datum	   *values;
		bool	   *nulls;
		int			n;

		get_typlenbyvalalign(element, &typlen, &typbyval, &typalign);
		deconstruct_array(array, element, typlen, typbyval, typalign, &values, &nulls, &n);
		route->hashes = palloc(sizeof(uint32) * Max(n, 1));
		for (int i = 0; i < n; i++)
			if (!nulls[i])
				eq_add_hash(route, rhs_hash, values[i]);
	}
	else
		route->hashes = palloc(sizeof(uint32));

	/* an IN list may repeat a constant, or two may hash alike */
	qsort(route->hashes, route->nhashes, sizeof(uint32), eq_uint32_cmp);
	{
		int			kept = 0;

		for (int i = 0; i < route->nhashes; i++)
			if (kept == 0 || route->hashes[kept - 1] != route->hashes[i])
				route->hashes[kept++] = route->hashes[i];
		route->nhashes = kept;
	}
	return true;
}

/*
 * The route of a planned where clause; of a conjunction, that of the
 * conjunct with the fewest constants.  Allocates in the current context.
 */
void
equality_route_of(Expr *where, EqualityRoute *route)
{
	memset(route, 0, sizeof(*route));
	if (where == NULL)
		return;
	if (IsA(where, BoolExpr) && ((BoolExpr *) where)->boolop == AND_EXPR)
	{
		ListCell   *lc;

		foreach(lc, ((BoolExpr *) where)->args)
		{
			EqualityRoute candidate;

			memset(&candidate, 0, sizeof(candidate));
			if (!eq_route_of_conjunct(lfirst(lc), &candidate))
				continue;
			if (route->attnum == 0 || candidate.nhashes < route->nhashes)
				*route = candidate;
		}
		return;
	}
	if (!eq_route_of_conjunct((Node *) where, route))
		memset(route, 0, sizeof(*route));
}

/* --------------------------------------------------------------- index */

EqualityIndex *
equality_index_create(MemoryContext parent)
{
	MemoryContext context = AllocSetContextCreate(parent, "shape_sync equality index",
												  ALLOCSET_SMALL_SIZES);
	EqualityIndex *index = MemoryContextAllocZero(context, sizeof(EqualityIndex));
	HASHCTL		ctl;

	index->context = context;
	index->keys = MemoryContextAllocZero(context, sizeof(EqKey *) * EQ_MAX_KEYS);
	ctl.keysize = sizeof(EqBucketKey);
	ctl.entrysize = sizeof(EqBucket);
	ctl.hcxt = context;
	index->buckets = hash_create("shape_sync equality buckets", 64, &ctl,
								 HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	return index;
}

void
equality_index_destroy(EqualityIndex *index)
{
	if (index != NULL)
		MemoryContextDelete(index->context);
}

/*
 * The key of a route, made if need be; -1 when the index has too many (the
 * shape is then evaluated on every row).
 */
static int
eq_key_of(EqualityIndex *index, const EqualityRoute *route, bool add)
{
	int			unused = -1;

	for (int i = 0; i < index->nkeys; i++)
	{
		EqKey	   *key = index->keys[i];

		if (key->attnum == route->attnum && key->column_type == route->column_type &&
			key->column_hash == route->column_hash && key->collation == route->collation)
			return i;
		if (key->nshapes == 0 && unused < 0)
			unused = i;
	}
	if (!add)
		return -1;
	if (unused < 0)
	{
		if (index->nkeys == EQ_MAX_KEYS)
			return -1;
		unused = index->nkeys++;
		index->keys[unused] = MemoryContextAllocZero(index->context, sizeof(EqKey));
	}
	{
		EqKey	   *key = index->keys[unused];

		/* a reused key holds no bucket any more: its shapes are gone */
		key->attnum = route->attnum;
		key->column_type = route->column_type;
		key->column_hash = route->column_hash;
		key->collation = route->collation;
		fmgr_info_cxt(route->column_hash, &key->hash_fn, index->context);
	}
	return unused;
}

void
equality_index_add(EqualityIndex *index, uint32 slot, EqualityRoute *route)
{
	MemoryContext old = MemoryContextSwitchTo(index->context);
	int			keyno = route->attnum > 0 ? eq_key_of(index, route, true) : -1;

	route->keyno = keyno;		/* what equality_index_remove undoes */
	if (keyno < 0)
		index->unrouted = lappend_int(index->unrouted, (int) slot);
	else
	{
		index->keys[keyno]->nshapes++;
		for (int i = 0; i < route->nhashes; i++)
		{
			EqBucketKey bkey = {(uint32) keyno, route->hashes[i]};
			bool		found;
			EqBucket   *bucket = hash_search(index->buckets, &bkey, HASH_ENTER, &found);

			bucket->slots = lappend_int(found ? bucket->slots : NIL, (int) slot);
		}
	}
	MemoryContextSwitchTo(old);
}

void
equality_index_remove(EqualityIndex *index, uint32 slot, const EqualityRoute *route)
{
	int			keyno = route->keyno;

	if (keyno < 0)
	{
		index->unrouted = list_delete_int(index->unrouted, (int) slot);
		return;
	}
	index->keys[keyno]->nshapes--;
	for (int i = 0; i < route->nhashes; i++)
	{
		EqBucketKey bkey = {(uint32) keyno, route->hashes[i]};
		EqBucket   *bucket = hash_search(index->buckets, &bkey, HASH_FIND, NULL);

		if (bucket == NULL)
			continue;
		bucket->slots = list_delete_int(bucket->slots, (int) slot);
		if (bucket->slots == NIL)
			hash_search(index->buckets, &bkey, HASH_REMOVE, NULL);
	}
}

/*
 * Files `slot` under one more hash of its route's column (`add`), or
 * takes one filing back: a route made with no constants, whose values
 * come and go (a subquery's: shape_stream_subquery.c).
 */
void
equality_index_file(EqualityIndex *index, uint32 slot, const EqualityRoute *route, uint32 hash,
					bool add)
{
	EqBucketKey bkey = {(uint32) route->keyno, hash};
	EqBucket   *bucket;
	bool		found;
	MemoryContext old;

	Assert(route->keyno >= 0);
	bucket = hash_search(index->buckets, &bkey, add ? HASH_ENTER : HASH_FIND, &found);
	if (bucket == NULL)
		return;
	if (!add)
	{
		bucket->slots = list_delete_int(bucket->slots, (int) slot);
		if (bucket->slots == NIL)
			hash_search(index->buckets, &bkey, HASH_REMOVE, NULL);
		return;
	}
	old = MemoryContextSwitchTo(index->context);
	bucket->slots = lappend_int(found ? bucket->slots : NIL, (int) slot);
	MemoryContextSwitchTo(old);
}

void
equality_index_visit(EqualityIndex *index, TupleTableSlot *row,
					 EqualityVisit visit, void *arg)
{
	TupleDesc	desc = row->tts_tupleDescriptor;

	for (int k = 0; k < index->nkeys; k++)
	{
		EqKey	   *key = index->keys[k];
		EqBucketKey bkey;
		EqBucket   *bucket;
		bool		isnull;
		Datum		value;
		ListCell   *lc;

		if (key->nshapes == 0)
			continue;
		if (key->attnum > desc->natts ||
			TupleDescAttr(desc, key->attnum - 1)->attisdropped ||
			TupleDescAttr(desc, key->attnum - 1)->atttypid != key->column_type)
			continue;			/* not hashed as this type: see the header */
		value = slot_getattr(row, key->attnum, &isnull);
		if (isnull)
			continue;			/* no equality is true of NULL */
		bkey.keyno = (uint32) k;
		bkey.hash = DatumGetUInt32(FunctionCall1Coll(&key->hash_fn, key->collation, value));
		bucket = hash_search(index->buckets, &bkey, HASH_FIND, NULL);
		if (bucket == NULL)
			continue;
		foreach(lc, bucket->slots)
			visit((uint32) lfirst_int(lc), arg);
	}
}

void
equality_index_visit_unrouted(EqualityIndex *index, EqualityVisit visit, void *arg)
{
	ListCell   *lc;

	foreach(lc, index->unrouted)
		visit((uint32) lfirst_int(lc), arg);
}
