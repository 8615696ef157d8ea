/*-------------------------------------------------------------------------
 *
 * shape_stream_values.c
 *		The value sets of subqueries: read when first used, then followed
 *		through decoding.
 *
 * A shape whose where clause has `a IN (SELECT c FROM t WHERE w)`
 * (shape_subquery.c) is matched by the decoder against the values that
 * select has at the point of the WAL being decoded
 * (shape_stream_subquery.c).  Those are kept here, one value set per inner
 * select and role, shared by the shapes that use it and freed with the
 * last of them: the text of each value (the key of a hash table; the
 * compared types are those whose equal values print alike), and how many
 * rows of t have it.  Each value also keeps its count from before the
 * transaction being decoded, which the transaction is judged against.
 *
 * Reading a set.  A set is read when the first shape that uses it is made:
 * on the main thread, in the resolving transaction, with its snapshot (the
 * inner select, as the shape's role, planned as the table's owner, at most
 * shape_sync.subquery_max_values rows, as one evaluation under
 * shape_sync.where_evaluation_timeout).  Decoding is behind that snapshot:
 * until it reaches the WAL position read after the query, a transaction
 * the snapshot saw is not applied again, and one it did not see is.  Should
 * one it did not see come before one it saw (commit order is not
 * visibility order), the first was matched against values from after it,
 * and the set's shapes rotate.  Then every change of t is matched against
 * w and counted in or out, through an index of the sets' constants
 * (equality_index.c): 10,000 sets of `user_id = $1` cost a change of t what
 * it concerns.
 *
 * A set whose table changes under it (a column it reads dropped or
 * retyped, a TRUNCATE, old rows no longer logged in full, an error while
 * matching) rotates its shapes at once, and is found by no new shape.
 *
 * A partitioned t is read whole: the changes of its partitions, at any
 * level, are counted as rows of t (shape_stream_change.c converts them).
 * A set lists t's partitions before it is read; a partition attached,
 * detached or truncated, at any level and also while detached, brings or
 * takes rows without a change that reaches t, and fails the sets that
 * listed it (ss_set_partitions, ss_set_partitions_problem).
 *
 * A set is kept on disk from the first round of the logs' files after
 * decoding passed its reading, and each change of its counts is recorded
 * for the next round (ss_disk_*, shape_stream_sets_disk.c); a restored
 * shape's set is built from the file (ss_disk_restore_set), and skips the
 * commits before the file's position (resume_lsn), as its shapes do.
 *
 * Everything here runs on the worker's main thread.
 *
 * IDENTIFICATION
 *	  src/pg/worker/shape_stream_values.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/table.h"
#include "access/transam.h"
#include "access/xlog.h"
#include "common/hashfn.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/optimizer.h"
#include "rewrite/rewriteHandler.h"
#include "tcop/tcopprot.h"
#include "nodes/makefuncs.h"
#include "utils/json.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "eval_deadline.h"
#include "guc.h"
#include "log_record.h"
#include "subset_jobs.h"
#include "shape_def_error.h"
#include "decoder.h"
#include "shape_relation.h"
#include "shape_role.h"
#include "table_code.h"

#include "shape_stream_internal.h"

typedef struct SsSetRelation
{
	Oid			relid;			/* hash key */
	EqualityIndex *index;		/* its sets, by their constants */
	int			nsets;
} SsSetRelation;

static void ss_set_row(SsValueSet *set, TupleTableSlot *slot, int delta, StringInfo key,
					   bool timed);
SsValueSet **ss_sets;		/* by id */
int			ss_npartitioned_sets;	/* sets of partitioned tables */
int			ss_nsets;
static HTAB *ss_set_relids;		/* relid -> SsSetRelation */
List	   *ss_sets_touched;	/* SsValueSet *, in the current transaction */
uint64		ss_txn_number;
static uint64 ss_set_visits;

/*
 * Every partition a set of a partitioned table listed when it was read,
 * with those tables (SsPartitionRoot, each with its number of sets): an
 * invalidation of one (a partition attached to it or detached from it,
 * at any level) has their sets' shapes checked, and a change of one that
 * no longer reaches such a table (detached, as decoding sees it) fails
 * their sets.  A partition belongs to few partitioned tables, whatever
 * the number of sets: a change looks at those, not at the sets.
 */
typedef struct SsSetPartition
{
	Oid			relid;			/* hash key */
	List	   *roots;			/* SsPartitionRoot * */
} SsSetPartition;

static HTAB *ss_set_partitions;

/* Lists or unlists the partitions `set` read under its table. */
static void
ss_set_partitions_note(SsValueSet *set, bool add)
{
	for (int i = 0; i < set->npartitions; i++)
	{
		bool		found;
		SsSetPartition *e;
		SsPartitionRoot *root = NULL;
		ListCell   *lc;

		if (ss_set_partitions == NULL)
			ss_set_partitions = ss_oid_hash("shape_sync subquery partitions",
											sizeof(SsSetPartition), 16);
		e = hash_search(ss_set_partitions, &set->partitions[i], add ? HASH_ENTER : HASH_FIND, &found);
		if (e == NULL)
			continue;
		if (!found)
			e->roots = NIL;
		foreach(lc, e->roots)
			if (((SsPartitionRoot *) lfirst(lc))->relid == set->relid)
				root = lfirst(lc);
		if (add)
		{
			if (root == NULL)
			{
				MemoryContext old = MemoryContextSwitchTo(ss_context);

				root = palloc0(sizeof(SsPartitionRoot));
				root->relid = set->relid;
				e->roots = lappend(e->roots, root);
				MemoryContextSwitchTo(old);
			}
			root->nsets++;
		}
		else if (root != NULL && --root->nsets == 0)
		{
			e->roots = list_delete_ptr(e->roots, root);
			pfree(root);
			if (e->roots == NIL)
				hash_search(ss_set_partitions, &set->partitions[i], HASH_REMOVE, NULL);
		}
	}
}

/* The partitioned tables of sets that listed `relid` as a partition (SsPartitionRoot *). */
List *
ss_sets_partition_roots(Oid relid)
{
	SsSetPartition *e = ss_set_partitions ?
		hash_search(ss_set_partitions, &relid, HASH_FIND, NULL) : NULL;

	return e != NULL ? e->roots : NIL;
}

/*
 * `partition` of the sets' table `relid` left it (or lost its rows:
 * `why`) without a change that reached it: the sets that listed it fail,
 * unless their read saw the transaction (ss_set_touch).
 */
void
ss_sets_partition_left(Oid relid, Oid partition, const char *why)
{
	for (int id = 0; id < ss_nsets; id++)
	{
		SsValueSet *set = ss_sets[id];

		if (set->in_use && set->relid == relid &&
			ss_oid_in(partition, set->partitions, set->npartitions) && ss_set_touch(set))
			ss_set_fail(set, why);
	}
}
/*
 * One hash table holds the values of every set, keyed by set and text: a
 * table of its own per set cost each set 12 kB, and most sets are one
 * user's few memberships.
 */
static HTAB *ss_values = NULL;

uint32
ss_value_hash(const void *key, Size keysize)
{
	const SsValueKey *k = key;

	return hash_combine(murmurhash32((uint32) k->set),
						hash_bytes((const unsigned char *) k->data, (int) k->len));
}

int
ss_value_match(const void *a, const void *b, Size keysize)
{
	const SsValueKey *x = a;
	const SsValueKey *y = b;

	return x->set == y->set && x->len == y->len && memcmp(x->data, y->data, x->len) == 0 ? 0 : 1;
}

/* A set's value of these bytes, or NULL. */
SsValue *
ss_value_find(SsValueSet *set, const char *data, uint32 len)
{
	SsValueKey	k = {set->id, len, data};

	return ss_values ? hash_search(ss_values, &k, HASH_FIND, NULL) : NULL;
}

/* Takes a value out of its set and of the table. */
void
ss_value_remove(SsValueSet *set, SsValue *v)
{
	const char *data = v->key.data;

	dlist_delete(&v->in_set);
	hash_search(ss_values, &v->key, HASH_REMOVE, NULL);
	pfree((char *) data);
}

/* Takes every value of a set out of the table (its texts go with its context). */
static void
ss_set_forget_values(SsValueSet *set)
{
	dlist_mutable_iter it;

	dlist_foreach_modify(it, &set->values)
	{
		SsValue    *v = dlist_container(SsValue, in_set, it.cur);

		dlist_delete(&v->in_set);
		hash_search(ss_values, &v->key, HASH_REMOVE, NULL);
	}
}

/* Appends a column's text to a key. */
static void
ss_key_add(StringInfo key, const char *text)
{
	uint32		len = (uint32) strlen(text);

	appendBinaryStringInfo(key, (const char *) &len, sizeof(len));
	appendBinaryStringInfo(key, text, len);
}

/* The column texts of a key, palloc'd. */
char	  **
ss_key_texts(const SsValueKey *key, int ncolumns)
{
	char	  **texts = palloc(sizeof(char *) * ncolumns);
	const char *p = key->data;

	for (int c = 0; c < ncolumns; c++)
	{
		uint32		len;

		memcpy(&len, p, sizeof(len));
		texts[c] = pnstrdup(p + sizeof(len), len);
		p += sizeof(len) + len;
	}
	return texts;
}

/*
 * The key of a row's value in `key` (reset first); false when a column is
 * NULL.  `attnums` and `outputs` are the columns'.
 */
bool
ss_row_key(TupleTableSlot *slot, int ncolumns, const AttrNumber *attnums,
		   FmgrInfo *outputs, StringInfo key)
{
	resetStringInfo(key);
	for (int c = 0; c < ncolumns; c++)
	{
		AttrNumber	attnum = attnums[c];

		if (slot->tts_isnull[attnum - 1])
			return false;
		ss_key_add(key, OutputFunctionCall(&outputs[c], slot->tts_values[attnum - 1]));
	}
	return true;
}

/* ------------------------------------------------------------ the sets */

static SsValueSet *
ss_set_new(void)
{
	int			id;
	MemoryContext old = MemoryContextSwitchTo(ss_context);

	for (id = 0; id < ss_nsets && ss_sets[id]->in_use; id++)
		;
	if (id == ss_nsets)
	{
		ss_sets = ss_nsets == 0 ? palloc(sizeof(SsValueSet *) * 8) :
			(ss_nsets % 8 == 0 ? repalloc(ss_sets, sizeof(SsValueSet *) * (ss_nsets + 8)) : ss_sets);
		ss_sets[ss_nsets++] = palloc0(sizeof(SsValueSet));
	}
	MemoryContextSwitchTo(old);
	memset(ss_sets[id], 0, sizeof(SsValueSet));
	ss_sets[id]->id = id;
	return ss_sets[id];
}

int
ss_set_id(SsValueSet *set)
{
	return set->id;
}

/* Counts one row's value in (+1) or out (-1). */
void
ss_set_count(SsValueSet *set, StringInfo key, bool has_value, int64 delta)
{
	SsValueKey	k;
	SsValue    *v;
	bool		found;

	if (!has_value)
	{
		set->null_rows += delta;
		ss_disk_null_rows(set);
		return;
	}
	v = ss_value_find(set, key->data, (uint32) key->len);
	if (v == NULL)
	{
		if (delta < 0)
		{
			ss_set_fail(set, "a row left its subquery's result that was not counted in it");
			return;
		}
		if (ss_values == NULL)
		{
			HASHCTL		ctl;

			ctl.keysize = sizeof(SsValueKey);
			ctl.entrysize = sizeof(SsValue);
			ctl.hash = ss_value_hash;
			ctl.match = ss_value_match;
			ctl.hcxt = ss_context;
			ss_values = hash_create("shape_sync subquery values", 1024, &ctl,
									HASH_ELEM | HASH_FUNCTION | HASH_COMPARE | HASH_CONTEXT);
		}
		k.set = set->id;
		k.len = (uint32) key->len;
		k.data = MemoryContextAlloc(set->context, key->len);
		memcpy((char *) k.data, key->data, key->len);
		v = hash_search(ss_values, &k, HASH_ENTER, &found);
		v->count = 0;
		v->txn = 0;
		dlist_push_tail(&set->values, &v->in_set);
	}
	if (set->txn != 0 && v->txn != set->txn)
	{
		MemoryContext old = MemoryContextSwitchTo(set->context);

		v->txn = set->txn;
		v->before = v->count;
		set->txn_values = lappend(set->txn_values, v);
		MemoryContextSwitchTo(old);
	}
	if (v->count == 0 && delta > 0)
	{
		set->nvalues++;
		sm_gauge_add(SM_SUBQUERY_VALUES, 0, 1);
	}
	v->count += delta;
	if (v->count == 0)
	{
		set->nvalues--;
		sm_gauge_add(SM_SUBQUERY_VALUES, 0, -1);
	}
	ss_disk_value(set, v);
}

/* Receives the rows of a set's first reading. */
typedef struct SsSetReceiver
{
	DestReceiver pub;
	SsValueSet *set;
	StringInfoData key;
	int64		rows;
} SsSetReceiver;

static bool
ss_set_receive(TupleTableSlot *slot, DestReceiver *self)
{
	SsSetReceiver *r = (SsSetReceiver *) self;
	SsValueSet *set = r->set;
	AttrNumber	positions[INDEX_MAX_KEYS];
	bool		has_value;

	if (++r->rows > shape_sync_subquery_max_values)
	{
		char		msg[256];

		snprintf(msg, sizeof(msg),
				 "A subquery of the where clause selects more than %d rows, the most this server reads (shape_sync.subquery_max_values)",
				 shape_sync_subquery_max_values);
		shape_def_error_set("where", msg);
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("a subquery of the shape selects more than %d rows",
						shape_sync_subquery_max_values),
				 errhint("Make the subquery more selective, or raise \"%s\".",
						 "shape_sync.subquery_max_values")));
	}
	slot_getallattrs(slot);
	if (set->nested != NULL)
	{
		/* the columns it reads, matched here (ss_nested_query) */
		ss_set_row(set, ss_nested_read_row(set, slot), 1, &r->key, false);
		return true;
	}
	for (int c = 0; c < set->ncolumns; c++)
		positions[c] = (AttrNumber) (c + 1);
	has_value = ss_row_key(slot, set->ncolumns, positions, set->outputs, &r->key);
	ss_set_count(set, &r->key, has_value, 1);
	return true;
}

static void
ss_set_receiver_noop(DestReceiver *self, int operation, TupleDesc typeinfo)
{
}

static void
ss_set_receiver_end(DestReceiver *self)
{
}

/*
 * Reads the inner select with the active snapshot, as the current role;
 * its privileges are the executor's to check.
 */
static void
ss_set_read(SsValueSet *set, const SubqueryDependency *dep)
{
	SsSetReceiver receiver;
	List	   *rewritten;
	PlannedStmt *plan;
	QueryDesc  *qd;
	Snapshot	snapshot = GetActiveSnapshot();
	FullTransactionId next = ReadNextFullTransactionId();

	memset(&receiver, 0, sizeof(receiver));
	receiver.pub.receiveSlot = ss_set_receive;
	receiver.pub.rStartup = ss_set_receiver_noop;
	receiver.pub.rShutdown = ss_set_receiver_end;
	receiver.pub.rDestroy = ss_set_receiver_end;
	receiver.pub.mydest = DestNone;
	receiver.set = set;
	initStringInfo(&receiver.key);

	/* the table's code must still be trusted (table_code.c) */
	table_code_check(dep->relid);
	if (get_rel_relkind(dep->relid) == RELKIND_PARTITIONED_TABLE)
	{
		/*
		 * Listed before it is planned: a partition attached meanwhile may be
		 * read but is not listed, and its first change fails the set.
		 */
		Oid		   *partitions = ss_list_partitions(dep->relid, &set->npartitions);

		set->partitioned = true;
		set->partitions = MemoryContextAlloc(set->context,
											 sizeof(Oid) * Max(set->npartitions, 1));
		memcpy(set->partitions, partitions, sizeof(Oid) * set->npartitions);
		pfree(partitions);
	}
	rewritten = QueryRewrite(set->nested != NULL ? ss_nested_query(set, dep) :
							 copyObject(dep->select));
	if (list_length(rewritten) != 1)
		elog(ERROR, "a subquery's select was rewritten unexpectedly");
	if (linitial_node(RangeTblEntry, ((Query *) linitial(rewritten))->rtable)->securityQuals != NIL)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("a subquery's table has row-level security that applies to role \"%s\"",
						GetUserNameFromId(GetUserId(), false)),
				 errdetail("A shape is shared by all its clients, so a subquery may not read such a table.")));
	{
		ShapeRoleSaved planner;

		shape_role_become(table_code_owner(dep->relid), &planner);
		plan = pg_plan_query(linitial(rewritten), NULL, 0, NULL);
		shape_role_restore(&planner);
		qd = CreateQueryDesc(plan, "shape_sync subquery", snapshot, InvalidSnapshot,
							 &receiver.pub, NULL, NULL, 0);
		ExecutorStart(qd, 0);
		ExecutorRun(qd, ForwardScanDirection, 0, true);
		ExecutorFinish(qd);
		ExecutorEnd(qd);
		FreeQueryDesc(qd);
	}

	/* decoding applies what this snapshot did not see, once it gets here */
	set->seen = ss_visibility_of(snapshot, next, set->context);
	set->seen_lsn = GetXLogInsertRecPtr();
	set->filtering = true;
}

static void
ss_set_index(SsValueSet *set, bool add)
{
	SsSetRelation *r;
	bool		found;

	if (ss_set_relids == NULL)
		ss_set_relids = ss_oid_hash("shape_sync subquery tables", sizeof(SsSetRelation), 16);
	r = hash_search(ss_set_relids, &set->relid, add ? HASH_ENTER : HASH_FIND, &found);
	if (r == NULL)
		return;
	if (add && !found)
	{
		r->index = equality_index_create(ss_context);
		r->nsets = 0;
	}
	set->indexed = add;
	if (set->partitioned)
	{
		ss_npartitioned_sets += add ? 1 : -1;
		ss_set_partitions_note(set, add);
	}
	if (add)
	{
		equality_index_add(r->index, (uint32) ss_set_id(set), &set->route);
		r->nsets++;
	}
	else
	{
		equality_index_remove(r->index, (uint32) ss_set_id(set), &set->route);
		if (--r->nsets == 0)
		{
			equality_index_destroy(r->index);
			hash_search(ss_set_relids, &set->relid, HASH_REMOVE, NULL);
		}
	}
}

/*
 * The sets new shapes may use, by the hash of their role, table and
 * select: finding one costs a probe, not a look at every set.
 */
typedef struct SsSetsByIdentity
{
	uint32		hash;			/* hash key */
	List	   *ids;			/* int list: the sets of that hash */
} SsSetsByIdentity;

static HTAB *ss_sets_by_identity = NULL;

static uint32
ss_set_identity_hash(Oid role, Oid relid, const char *identity)
{
	return hash_combine(hash_combine(murmurhash32((uint32) role), murmurhash32((uint32) relid)),
						hash_bytes((const unsigned char *) identity, (int) strlen(identity)));
}

static pg_noinline SsValueSet *
ss_set_find(Oid role, Oid relid, const char *identity)
{
	uint32		hash = ss_set_identity_hash(role, relid, identity);
	SsSetsByIdentity *e = ss_sets_by_identity ?
		hash_search(ss_sets_by_identity, &hash, HASH_FIND, NULL) : NULL;
	ListCell   *lc;

	if (e == NULL)
		return NULL;
	foreach(lc, e->ids)
	{
		SsValueSet *set = ss_sets[lfirst_int(lc)];

		if (set->role == role && set->relid == relid && strcmp(set->identity, identity) == 0)
			return set;
	}
	return NULL;
}

/* A set becomes one new shapes may use, or stops being one. */
static void
ss_set_findable(SsValueSet *set, bool findable)
{
	uint32		hash;
	SsSetsByIdentity *e;
	bool		found;

	if (set->findable == findable)
		return;
	set->findable = findable;
	hash = ss_set_identity_hash(set->role, set->relid, set->identity);
	if (ss_sets_by_identity == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(uint32);
		ctl.entrysize = sizeof(SsSetsByIdentity);
		ctl.hcxt = ss_context;
		ss_sets_by_identity = hash_create("shape_sync subquery sets", 64, &ctl,
										  HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	e = hash_search(ss_sets_by_identity, &hash, findable ? HASH_ENTER : HASH_FIND, &found);
	if (e == NULL)
		return;
	if (findable)
	{
		MemoryContext old = MemoryContextSwitchTo(ss_context);

		e->ids = lappend_int(found ? e->ids : NIL, set->id);
		MemoryContextSwitchTo(old);
		return;
	}
	e->ids = list_delete_int(e->ids, set->id);
	if (e->ids == NIL)
		hash_search(ss_sets_by_identity, &hash, HASH_REMOVE, NULL);
}

/*
 * A new set for `dep`, empty, not indexed: what ss_set_create reads and
 * ss_disk_restore_set (shape_stream_sets_disk.c) fills from disk.
 */
SsValueSet *
ss_set_make(const SubqueryDependency *dep, int parent, int level)
{
	SsValueSet *set;
	MemoryContext old;

	set = ss_set_new();
	/* most sets are one user's few values: small to start with */
	set->context = AllocSetContextCreate(ss_context, "shape_sync value set",
										 ALLOCSET_SMALL_SIZES);
	set->in_use = true;
	set->parent = parent;
	set->level = level;
	old = MemoryContextSwitchTo(set->context);
	set->identity = pstrdup(dep->identity);
	set->role = GetUserId();
	set->relid = dep->relid;
	set->ncolumns = dep->ncolumns;
	set->attnums = palloc(sizeof(AttrNumber) * dep->ncolumns);
	set->types = palloc(sizeof(Oid) * dep->ncolumns);
	set->outputs = palloc(sizeof(FmgrInfo) * dep->ncolumns);
	set->nread = dep->nread;
	set->read_attnums = palloc(sizeof(AttrNumber) * dep->nread);
	set->read_types = palloc(sizeof(Oid) * dep->nread);
	memcpy(set->read_attnums, dep->read_attnums, sizeof(AttrNumber) * dep->nread);
	memcpy(set->read_types, dep->read_types, sizeof(Oid) * dep->nread);
	for (int c = 0; c < dep->ncolumns; c++)
	{
		Oid			output;
		bool		varlena;

		set->attnums[c] = dep->inner_attnums[c];
		set->types[c] = dep->types[c];
		getTypeOutputInfo(dep->types[c], &output, &varlena);
		fmgr_info(output, &set->outputs[c]);
	}
	if (dep->where != NULL)
	{
		/* a subquery of the clause is a parameter the set sets (ss_nested_params) */
		Node	   *where = dep->nested != NULL ? dep->nested->where_params : dep->where;
		Expr	   *planned = expression_planner((Expr *) copyObject(where));

		set->where = ExecInitExpr(planned, NULL);
		equality_route_of(planned, &set->route);
	}
	else
		equality_route_of(NULL, &set->route);
	dlist_init(&set->values);
	MemoryContextSwitchTo(old);
	return set;
}

/* A set, indexed: changes of its table reach it from now on. */
void
ss_set_indexed(SsValueSet *set)
{
	ss_set_index(set, true);
	sm_gauge_add(SM_SUBQUERY_VALUE_SETS, 0, 1);
}

/*
 * A new set for `dep`, read now: the sets of its where clause's own
 * subqueries first (its children, `level` + 1), all with the active
 * snapshot.  A set with a parent is that parent's alone.
 */
SsValueSet *
ss_set_create(const SubqueryDependency *dep, int parent, int level)
{
	SsValueSet *set;

	if (!ActiveSnapshotSet() || GetActiveSnapshot()->snapshot_type != SNAPSHOT_MVCC)
		elog(ERROR, "a subquery's values can only be read under an MVCC snapshot");
	set = ss_set_make(dep, parent, level);

	/*
	 * The main thread waits for this: planning (as the table's owner, whose
	 * code it may evaluate) and reading, of the set and of its children at
	 * every level, are one evaluation under the deadline of a where clause
	 * (eval_deadline.c), lock waits included; past it, the request is
	 * refused.
	 */
	if (parent < 0)
	{
		eval_deadline_watch();
		eval_deadline_begin();
	}
	PG_TRY();
	{
		if (dep->nested != NULL)
		{
			ss_nested_init(set, dep);
			ss_nested_read_children(set, dep);
		}
		ss_set_read(set, dep);
		if (set->nested != NULL)
			ss_nested_read_done(set);
	}
	PG_CATCH();
	{
		bool		expired = parent < 0 && eval_deadline_end();

		if (parent < 0)
			eval_deadline_unwatch();
		/* a set that could not be read is no set */
		ss_set_destroy(set);
		if (expired)
		{
			char		msg[256];

			FlushErrorState();
			snprintf(msg, sizeof(msg),
					 "Reading a subquery's rows took longer than this server allows (shape_sync.where_evaluation_timeout)");
			shape_def_error_set("where", msg);
			ereport(ERROR,
					(errcode(ERRCODE_QUERY_CANCELED),
					 errmsg("reading a subquery's rows took longer than \"%s\" allows",
							"shape_sync.where_evaluation_timeout"),
					 errhint("Make the subquery more selective, or give it an index.")));
		}
		PG_RE_THROW();
	}
	PG_END_TRY();
	if (parent < 0)
	{
		(void) eval_deadline_end();
		eval_deadline_unwatch();
	}
	ss_set_indexed(set);
	return set;
}

int
ss_set_acquire(const SubqueryDependency *dep, uint32 slot)
{
	SsValueSet *set = ss_set_find(GetUserId(), dep->relid, dep->identity);
	MemoryContext old;

	if (set != NULL && ss_set_partitions_problem(set) != NULL)
		set = NULL;				/* failed: its shapes rotate, this one reads anew */
	if (set == NULL)
	{
		/* a restored shape's set is read back from disk, as of its log's end */
		set = ss_disk_restoring() ? ss_disk_restore_set(dep) :
			ss_set_create(dep, -1, 0);
		ss_set_findable(set, true);
		ss_disk_unsettled(set, true);
	}
	set->refcount++;
	old = MemoryContextSwitchTo(set->context);
	set->dependents = list_append_unique_int(set->dependents, (int) slot);
	MemoryContextSwitchTo(old);
	return ss_set_id(set);
}

/*
 * Frees a set no shape uses, or one that could not be read, with its
 * children.  An indexed set is unindexed.
 */
void
ss_set_destroy(SsValueSet *set)
{
	ss_disk_drop(set);
	if (set->parent < 0)
		ss_disk_unsettled(set, false);
	ss_nested_destroy(set);
	ss_sets_touched = list_delete_ptr(ss_sets_touched, set);
	ss_set_findable(set, false);
	if (set->indexed)
	{
		ss_set_index(set, false);
		sm_gauge_add(SM_SUBQUERY_VALUE_SETS, 0, -1);
	}
	sm_gauge_add(SM_SUBQUERY_VALUES, 0, -set->nvalues);
	ss_set_forget_values(set);
	MemoryContextDelete(set->context);
	memset(set, 0, sizeof(*set));
}

void
ss_set_release(int id, uint32 slot)
{
	SsValueSet *set = ss_sets[id];

	Assert(set->in_use && set->refcount > 0);
	set->dependents = list_delete_int(set->dependents, (int) slot);
	if (--set->refcount > 0)
		return;
	ss_set_destroy(set);
}

/*
 * A set that can no longer be followed: no new shape uses it, and every
 * shape that does rotates now, whatever transaction it is at (it no longer
 * follows its subquery).
 */
void
ss_set_fail(SsValueSet *set, const char *problem)
{
	ListCell   *lc;

	if (set->problem == NULL)
		set->problem = MemoryContextStrdup(set->context, problem);
	ss_set_findable(set, false);
	ss_disk_drop(set);			/* no longer kept on disk: its shapes rotate */
	/* a child's values are its parent's where clause */
	if (set->parent >= 0)
		ss_set_fail(ss_sets[set->parent], problem);
	foreach(lc, set->dependents)
	{
		ShapeStream *s = &ss_streams[lfirst_int(lc)];

		if (s->in_use && !s->rotate)
			ss_rotate_later(s, SM_ROTATION_TABLE_CHANGED, set->problem);
	}
}

/* ------------------------------------------------- inner table changes */

/*
 * In a PG_CATCH around matching rows of a set's table: the error (caught
 * in `context`'s callee) fails the set, and is flushed.
 */
void
ss_set_fail_caught(SsValueSet *set, MemoryContext context)
{
	ErrorData  *edata;

	(void) eval_deadline_end();
	MemoryContextSwitchTo(context);
	if (ss_econtext != NULL)
		ResetExprContext(ss_econtext);
	edata = CopyErrorData();
	FlushErrorState();
	ss_set_fail(set, psprintf("a change of its subquery's table could not be processed: %s",
							  edata->message));
	FreeErrorData(edata);
}

/*
 * The set's where clause for the row: 1 true, 0 false, -1 NULL; its
 * subqueries' results, if any, are in its parameters (ss_nested_params_*).
 * `timed`: one evaluation under the deadline (a set's first reading is
 * one as a whole).
 */
int
ss_set_evaluate(SsValueSet *set, TupleTableSlot *slot, bool timed)
{
	bool		isnull;
	Datum		result;

	ss_econtext_ensure();
	ss_econtext->ecxt_scantuple = slot;
	ss_econtext->ecxt_param_exec_vals = ss_nested_params(set);
	if (timed)
		eval_deadline_begin();
	result = ExecEvalExprSwitchContext(set->where, ss_econtext, &isnull);
	if (timed && eval_deadline_end())
		ereport(ERROR,
				(errcode(ERRCODE_QUERY_CANCELED),
				 errmsg("a subquery's where clause took longer than \"%s\" allows",
						"shape_sync.where_evaluation_timeout")));
	ss_econtext->ecxt_param_exec_vals = NULL;
	ResetExprContext(ss_econtext);
	return isnull ? -1 : DatumGetBool(result) ? 1 : 0;
}

/*
 * Whether the tuple is in the set's select (its where clause), judged
 * against the values its subqueries had before the transaction.
 */
static bool
ss_set_matches(SsValueSet *set, TupleTableSlot *slot, bool timed)
{
	if (set->where == NULL)
		return true;
	if (set->nested != NULL)
		ss_nested_params_set(set, slot, true);
	return ss_set_evaluate(set, slot, timed) == 1;
}

/*
 * Counts a row of the set's table in (+1) or out (-1), and keeps it if
 * the set's children decide it.  `timed`: as ss_set_evaluate.
 */
static void
ss_set_row(SsValueSet *set, TupleTableSlot *slot, int delta, StringInfo key, bool timed)
{
	if (set->nested != NULL)
		ss_nested_keep(set, slot, delta, timed);
	if (ss_set_matches(set, slot, timed))
	{
		bool		has = ss_row_key(slot, set->ncolumns, set->attnums, set->outputs, key);

		ss_set_count(set, key, has, delta);
	}
}

/* Rows of the set's table whose value has a NULL, before the transaction or now. */
int64
ss_set_null_rows(const SsValueSet *set, bool before)
{
	bool		touched = before && set->txn != 0 && set->txn == ss_txn_number && !set->skip_txn;

	return touched ? set->null_rows_before : set->null_rows;
}

/*
 * The result of `(a [, b ...]) IN (the set's select)` for the row, whose
 * a, b ... are `attnums` (printed with `outputs`), into `param`: true when
 * the set has its value; else NULL when the set has a row whose value has
 * a NULL, or the row's value has one and the set is not empty; else
 * false.  With `before`, as the set was before the transaction being
 * decoded.  Leaves the row's value in `key`; false when it has a NULL.
 */
bool
ss_sublink_result(SsValueSet *set, TupleTableSlot *slot, const AttrNumber *attnums,
				  FmgrInfo *outputs, bool before, StringInfo key, ParamExecData *param)
{
	bool		touched = before && set->txn != 0 && set->txn == ss_txn_number && !set->skip_txn;
	int64		null_rows = touched ? set->null_rows_before : set->null_rows;
	int64		nvalues = touched ? set->nvalues_before : set->nvalues;
	SsValue    *v;
	bool		found;

	param->execPlan = NULL;
	if (!ss_row_key(slot, set->ncolumns, attnums, outputs, key))
	{
		/* NULL IN (nothing) is false; otherwise it is NULL */
		param->isnull = nvalues > 0 || null_rows > 0;
		param->value = BoolGetDatum(false);
		return false;
	}
	v = ss_value_find(set, key->data, (uint32) key->len);
	found = v != NULL && (touched && v->txn == set->txn ? v->before : v->count) > 0;
	param->isnull = !found && null_rows > 0;
	param->value = BoolGetDatum(found);
	return true;
}

/* The set a child belongs to, at the top of its parents (itself if none). */
SsValueSet *
ss_set_top(SsValueSet *set)
{
	while (set->parent >= 0)
		set = ss_sets[set->parent];
	return set;
}

/* First change of the transaction for the set: whether it applies. */
bool
ss_set_touch(SsValueSet *set)
{
	MemoryContext old;

	if (set->txn == ss_txn_number)
		return !set->skip_txn;
	set->txn = ss_txn_number;
	/* restored from disk with it */
	set->skip_txn = ss_lsn < set->resume_lsn;
	set->txn_values = NIL;
	set->null_rows_before = set->null_rows;
	set->nvalues_before = set->nvalues;
	old = MemoryContextSwitchTo(ss_context);
	ss_sets_touched = lappend(ss_sets_touched, set);
	MemoryContextSwitchTo(old);
	if (set->filtering)
	{
		/*
		 * A nested set and its children were read at one snapshot: the
		 * order of their tables' commits is judged for all of them.
		 */
		SsValueSet *top = ss_set_top(set);

		if (ss_lsn >= set->seen_lsn)
			set->filtering = false;
		else if (ss_visible(set->seen, ss_xid))
		{
			set->skip_txn = true;
			if (top->applied_unseen)
				ss_set_fail(set, "its subquery's table committed out of visibility order while its values were read");
		}
		else
			top->applied_unseen = true;
	}
	return !set->skip_txn;
}

typedef struct SsSetChange
{
	Oid			partition;		/* the table that stored the row */
	TupleDesc	desc;
	TupleTableSlot *newslot;
	TupleTableSlot *oldslot;
	bool		old_row_complete;
	uint64		visit;
	StringInfoData key;
} SsSetChange;

/* Whether the columns the set's select reads still have their types. */
static bool
ss_set_types_match(SsValueSet *set, TupleDesc desc)
{
	for (int c = 0; c < set->nread; c++)
	{
		AttrNumber	attnum = set->read_attnums[c];

		if (attnum > desc->natts || TupleDescAttr(desc, attnum - 1)->attisdropped ||
			TupleDescAttr(desc, attnum - 1)->atttypid != set->read_types[c])
			return false;
	}
	return true;
}

static void
ss_set_apply(uint32 id, void *arg)
{
	SsValueSet *set = ss_sets[id];
	SsSetChange *c = arg;
	MemoryContext old = CurrentMemoryContext;
	ShapeRoleSaved saved;

	if (set->visited == c->visit || set->problem != NULL)
		return;
	set->visited = c->visit;
	if (!ss_set_touch(set))
		return;
	if (!c->old_row_complete)
	{
		ss_set_fail(set, "a change of its subquery's table came without the old row: its replica identity is no longer FULL");
		return;
	}
	if (set->partitioned && !ss_oid_in(c->partition, set->partitions, set->npartitions))
	{
		ss_set_fail(set, "a partition was attached to its subquery's table");
		return;
	}
	if (!ss_set_types_match(set, c->desc))
	{
		ss_set_fail(set, "a column its subquery reads was dropped or changed type");
		return;
	}
	shape_role_become(set->role, &saved);
	PG_TRY();
	{
		if (c->oldslot != NULL)
			ss_set_row(set, c->oldslot, -1, &c->key, true);
		if (c->newslot != NULL)
			ss_set_row(set, c->newslot, 1, &c->key, true);
	}
	PG_CATCH();
	{
		ss_set_fail_caught(set, old);
	}
	PG_END_TRY();
	shape_role_restore(&saved);
}

bool
ss_sets_on(Oid relid)
{
	return ss_set_relids != NULL && hash_search(ss_set_relids, &relid, HASH_FIND, NULL) != NULL;
}

void
ss_sets_change(Oid relid, TupleDesc desc, Relation stored_in, ReorderBufferChangeType action,
			   TupleTableSlot *newslot, TupleTableSlot *oldslot)
{
	SsSetRelation *r = hash_search(ss_set_relids, &relid, HASH_FIND, NULL);
	SsSetChange c;

	if (r == NULL)
		return;
	c.partition = RelationGetRelid(stored_in);
	c.desc = desc;
	c.newslot = newslot;
	c.oldslot = oldslot;
	/* the table that stored the row logged it: its replica identity says how */
	c.old_row_complete = action == REORDER_BUFFER_CHANGE_INSERT ||
		(oldslot != NULL && stored_in->rd_rel->relreplident == REPLICA_IDENTITY_FULL);
	c.visit = ++ss_set_visits;
	initStringInfo(&c.key);
	if (!c.old_row_complete)
	{
		for (int id = 0; id < ss_nsets; id++)
			if (ss_sets[id]->in_use && ss_sets[id]->relid == relid)
				ss_set_apply((uint32) id, &c);
	}
	else
	{
		MemoryContext old = CurrentMemoryContext;

		equality_index_visit_unrouted(r->index, ss_set_apply, &c);
		PG_TRY();
		{
			if (newslot != NULL)
				equality_index_visit(r->index, newslot, ss_set_apply, &c);
			if (oldslot != NULL)
				equality_index_visit(r->index, oldslot, ss_set_apply, &c);
		}
		PG_CATCH();
		{
			/* a hash that failed: every set of the table hears of it */
			MemoryContextSwitchTo(old);
			FlushErrorState();
			for (int id = 0; id < ss_nsets; id++)
				if (ss_sets[id]->in_use && ss_sets[id]->relid == relid)
					ss_set_apply((uint32) id, &c);
		}
		PG_END_TRY();
	}
	pfree(c.key.data);
}

/* A TRUNCATE of a table sets read: their values left without changes. */
void
ss_sets_truncated(Oid relid)
{
	for (int id = 0; id < ss_nsets; id++)
		if (ss_sets[id]->in_use && ss_sets[id]->relid == relid && ss_set_touch(ss_sets[id]))
			ss_set_fail(ss_sets[id], "its subquery's table was truncated");
}

/*
 * Whether the partitions of a partitioned set's table are still those it
 * read: one attached or detached brought or took rows without a change in
 * the WAL, so the set fails (its shapes rotate, no new shape uses it).
 * The catalog as it is now: a shape made meanwhile must not share it.
 */
const char *
ss_set_partitions_problem(SsValueSet *set)
{
	int			n;
	Oid		   *now;
	bool		same;

	if (set->problem != NULL)
		return set->problem;
	if (set->nested != NULL && ss_nested_partitions_problem(set) != NULL)
		return set->problem;	/* a child's, failed with it */
	if (!set->partitioned)
		return NULL;
	now = ss_list_partitions(set->relid, &n);
	same = n == set->npartitions && memcmp(now, set->partitions, sizeof(Oid) * n) == 0;
	pfree(now);
	if (!same)
		ss_set_fail(set, "partitions were attached to its subquery's table or detached from it");
	return set->problem;
}

/* The streams using a set on `relid`, for the catalog watch. */
List *
ss_sets_dependents_on(Oid relid)
{
	List	   *slots = NIL;
	List	   *roots = ss_sets_partition_roots(relid);

	/*
	 * Sets on the table, and sets on the tables it is a partition of at any
	 * level (a set lists all of its table's partitions: one look is enough).
	 */
	for (int id = 0; id < ss_nsets; id++)
	{
		SsValueSet *set = ss_sets[id];
		bool		above = false;
		ListCell   *lc;

		if (!set->in_use)
			continue;
		foreach(lc, roots)
			above = above || ((SsPartitionRoot *) lfirst(lc))->relid == set->relid;
		/* a child's streams are those of the set at the top of it */
		if (set->relid == relid || above)
			slots = list_concat_unique_int(slots, ss_set_top(set)->dependents);
	}
	return slots;
}

/* The number of value sets and the values they hold, for the views. */
void
ss_sets_count(int64 *nsets, int64 *nvalues)
{
	*nsets = 0;
	*nvalues = 0;
	for (int id = 0; id < ss_nsets; id++)
		if (ss_sets[id]->in_use)
		{
			(*nsets)++;
			*nvalues += ss_sets[id]->nvalues;
		}
}

/* A transaction begins. */
void
ss_sets_begin(void)
{
	ss_txn_number++;
}

