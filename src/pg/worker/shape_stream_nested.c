/*-------------------------------------------------------------------------
 *
 * shape_stream_nested.c
 *		Value sets whose select has subqueries of its own: the rows their
 *		deeper values decide, and how a move of one reaches the sets above.
 *
 * In `a IN (SELECT b FROM t WHERE c IN (SELECT d FROM u WHERE w))` the
 * value set of the outer select (the b of t) depends on the set of the
 * inner one (the d of u), its child.  A child is its parent's alone, never
 * shared: the two are read at one snapshot.  Each is followed through
 * decoding as any set is (shape_stream_values.c), down to
 * SUBQUERY_MAX_LEVELS.
 *
 * Judging.  A change of t is judged, as a change of a shape's table is,
 * against the values the children had before the transaction being
 * decoded.  At commit, the values of a child that entered or left change
 * the rows of t that compare with them: those are judged again against the
 * values before and after the transaction, and counted in or out of the
 * parent, deepest level first (ss_nested_cascade), before any set's moves
 * reach its shapes (ss_sets_commit).  So a chain of moves within one
 * transaction is that transaction's moves, and a value that enters and
 * leaves within it moves nothing.
 *
 * Kept rows.  No query can run at the decoder's position, so a parent
 * keeps the rows of t its children decide: those whose where clause is
 * NULL with each subquery's result unknown (NULL).  A row whose clause is
 * then true or false is so whatever the children hold (AND, OR and NOT
 * only add what is known), and is counted, or not, once.  A kept row is
 * the columns the select reads and nothing else, with how many rows of t
 * have them, and is found through each subquery's compared value.  Under
 * NOT IN, a child that gains or loses its first NULL, or becomes empty or
 * not, concerns every row: all kept rows are judged again.  Under IN it
 * concerns none (a result that goes from false to NULL leaves no clause
 * true).
 *
 * The first reading reads the children, then the rows of t whose clause
 * is not false with the subqueries unknown (ss_nested_query), each
 * matched and kept here.  Kept rows go to the value sets file with the
 * set's values (their keys are their columns' texts), and are read in
 * again from them at start (ss_nested_restore_row).
 *
 * Everything here runs on the worker's main thread.
 *
 * IDENTIFICATION
 *	  src/pg/worker/shape_stream_nested.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/detoast.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "executor/tuptable.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "eval_deadline.h"
#include "shape_role.h"

#include "shape_stream_internal.h"

/* A row (or rows alike) of a parent's table that its children decide. */
typedef struct SsNestedLink SsNestedLink;

typedef struct SsNestedRow
{
	SsValueKey	key;			/* hash key: the columns it reads (set 0) */
	int64		count;			/* rows of the table with them */
	MinimalTuple tuple;			/* those columns, the others NULL */
	uint64		visited;		/* the cascade that last gathered it */
	SsNestedLink *links;		/* by sublink */
} SsNestedRow;

/* The kept rows of one compared value of one sublink. */
typedef struct SsNestedValue
{
	SsValueKey	key;			/* hash key: the sublink's number, the value */
	dlist_head	rows;			/* SsNestedLink */
} SsNestedValue;

struct SsNestedLink
{
	dlist_node	node;
	SsNestedRow *row;
	SsNestedValue *value;		/* NULL: the compared value has a NULL */
};

struct SsNested
{
	int			nsublinks;
	int		   *sublink_dependency; /* by sublink */
	AttrNumber **sublink_attnums;	/* by sublink: its compared columns */
	FmgrInfo  **sublink_outputs;	/* ... and their output functions */
	int			ndependencies;
	int		   *children;		/* by dependency: its set, or -1 */
	bool	   *negated;		/* by dependency: used as NOT IN */
	ParamExecData *params;		/* by sublink: its result for the row judged */
	TupleDesc	desc;			/* the table's, when the set was read */
	TupleTableSlot *read_slot;	/* a row read, as a row of the table */
	TupleTableSlot *kept_slot;	/* a kept row */
	Datum	   *values;			/* by column of desc, to form a kept row */
	bool	   *isnull;
	FmgrInfo   *read_outputs;	/* by column the set reads */
	HTAB	   *rows;			/* SsNestedRow */
	HTAB	   *by_value;		/* SsNestedValue */
	int64		nrows;
	StringInfoData key;
	List	   *gathered;		/* SsNestedRow *: to judge again at commit */
};

int			ss_nnested = 0;
static uint64 ss_nested_visits = 0;

static HTAB *
ss_nested_hash(const char *name, Size entrysize, MemoryContext context)
{
	HASHCTL		ctl;

	ctl.keysize = sizeof(SsValueKey);
	ctl.entrysize = entrysize;
	ctl.hash = ss_value_hash;
	ctl.match = ss_value_match;
	ctl.hcxt = context;
	return hash_create(name, 16, &ctl, HASH_ELEM | HASH_FUNCTION | HASH_COMPARE | HASH_CONTEXT);
}

/* Sets up a set whose select's where clause has subqueries (`dep->nested`). */
void
ss_nested_init(SsValueSet *set, const SubqueryDependency *dep)
{
	const SubqueryPlan *plan = dep->nested;
	MemoryContext old = MemoryContextSwitchTo(set->context);
	SsNested   *n = palloc0(sizeof(SsNested));
	Relation	rel = table_open(dep->relid, AccessShareLock);

	n->desc = CreateTupleDescCopy(RelationGetDescr(rel));
	table_close(rel, NoLock);
	n->read_slot = MakeSingleTupleTableSlot(n->desc, &TTSOpsVirtual);
	n->kept_slot = MakeSingleTupleTableSlot(n->desc, &TTSOpsMinimalTuple);
	n->values = palloc0(sizeof(Datum) * Max(n->desc->natts, 1));
	n->isnull = palloc0(sizeof(bool) * Max(n->desc->natts, 1));
	n->nsublinks = plan->nsublinks;
	n->sublink_dependency = palloc(sizeof(int) * plan->nsublinks);
	n->sublink_attnums = palloc(sizeof(AttrNumber *) * plan->nsublinks);
	n->sublink_outputs = palloc(sizeof(FmgrInfo *) * plan->nsublinks);
	for (int i = 0; i < plan->nsublinks; i++)
	{
		const SubquerySublink *sl = &plan->sublinks[i];
		int			ncolumns = plan->dependencies[sl->dependency].ncolumns;

		n->sublink_dependency[i] = sl->dependency;
		n->sublink_attnums[i] = palloc(sizeof(AttrNumber) * ncolumns);
		n->sublink_outputs[i] = palloc(sizeof(FmgrInfo) * ncolumns);
		for (int c = 0; c < ncolumns; c++)
		{
			Oid			output;
			bool		varlena;

			n->sublink_attnums[i][c] = sl->outer_attnums[c];
			getTypeOutputInfo(TupleDescAttr(n->desc, sl->outer_attnums[c] - 1)->atttypid,
							  &output, &varlena);
			fmgr_info(output, &n->sublink_outputs[i][c]);
		}
	}
	n->ndependencies = plan->ndependencies;
	n->children = palloc(sizeof(int) * plan->ndependencies);
	n->negated = palloc(sizeof(bool) * plan->ndependencies);
	for (int d = 0; d < plan->ndependencies; d++)
	{
		n->children[d] = -1;
		n->negated[d] = plan->dependencies[d].negated;
	}
	n->params = palloc0(sizeof(ParamExecData) * Max(plan->nsublinks, 1));
	n->read_outputs = palloc(sizeof(FmgrInfo) * Max(set->nread, 1));
	for (int c = 0; c < set->nread; c++)
	{
		Oid			output;
		bool		varlena;

		getTypeOutputInfo(set->read_types[c], &output, &varlena);
		fmgr_info(output, &n->read_outputs[c]);
	}
	n->rows = ss_nested_hash("shape_sync nested rows", sizeof(SsNestedRow), set->context);
	n->by_value = ss_nested_hash("shape_sync nested values", sizeof(SsNestedValue), set->context);
	initStringInfo(&n->key);
	set->nested = n;
	ss_nnested++;
	MemoryContextSwitchTo(old);
}

/* Reads the sets of the subqueries of the set's where clause: its children. */
void
ss_nested_read_children(SsValueSet *set, const SubqueryDependency *dep)
{
	for (int d = 0; d < dep->nested->ndependencies; d++)
	{
		SsValueSet *child = ss_set_create(&dep->nested->dependencies[d], set->id,
										  set->level + 1);

		set->nested->children[d] = child->id;
	}
}

/*
 * The set and its children are read: decoding applies to all of them the
 * transactions their snapshot did not see from the parent's position on
 * (their snapshot is one; the parent read last).
 */
void
ss_nested_read_done(SsValueSet *set)
{
	for (int d = 0; d < set->nested->ndependencies; d++)
	{
		SsValueSet *child = ss_sets[set->nested->children[d]];

		child->seen_lsn = Max(child->seen_lsn, set->seen_lsn);
		if (child->nested != NULL)
			ss_nested_read_done(child);
	}
}

static Node *
ss_nested_unknown_mutator(Node *node, void *context)
{
	if (node == NULL)
		return NULL;
	if (IsA(node, Param) && ((Param *) node)->paramkind == PARAM_EXEC)
		return (Node *) makeBoolConst(false, true);
	return expression_tree_mutator(node, ss_nested_unknown_mutator, context);
}

/*
 * The select of the set's first reading: the columns it reads, of the rows
 * whose where clause is not false with its subqueries unknown (each is
 * matched and kept by ss_nested_read_row).  Its columns' privileges are
 * those of the select as written, which reads them all.
 */
Query *
ss_nested_query(SsValueSet *set, const SubqueryDependency *dep)
{
	Query	   *query = copyObject(dep->select);
	BooleanTest *test = makeNode(BooleanTest);
	List	   *targets = NIL;

	for (int c = 0; c < set->nread; c++)
	{
		Form_pg_attribute att = TupleDescAttr(set->nested->desc, set->read_attnums[c] - 1);

		targets = lappend(targets,
						  makeTargetEntry((Expr *) makeVar(1, att->attnum, att->atttypid,
														   att->atttypmod, att->attcollation, 0),
										  (AttrNumber) (c + 1), pstrdup(NameStr(att->attname)),
										  false));
	}
	query->targetList = targets;
	test->arg = (Expr *) ss_nested_unknown_mutator(copyObject(dep->nested->where_params), NULL);
	test->booltesttype = IS_NOT_FALSE;
	test->location = -1;
	query->jointree->quals = (Node *) test;
	query->hasSubLinks = false;
	return query;
}

/* A row of the first reading (the set's read columns) as a row of its table. */
TupleTableSlot *
ss_nested_read_row(SsValueSet *set, TupleTableSlot *slot)
{
	TupleTableSlot *row = set->nested->read_slot;

	ExecClearTuple(row);
	for (int a = 0; a < row->tts_tupleDescriptor->natts; a++)
	{
		row->tts_values[a] = (Datum) 0;
		row->tts_isnull[a] = true;
	}
	for (int c = 0; c < set->nread; c++)
	{
		row->tts_values[set->read_attnums[c] - 1] = slot->tts_values[c];
		row->tts_isnull[set->read_attnums[c] - 1] = slot->tts_isnull[c];
	}
	return ExecStoreVirtualTuple(row);
}

ParamExecData *
ss_nested_params(SsValueSet *set)
{
	return set->nested != NULL ? set->nested->params : NULL;
}

/*
 * Sets the parameters of the set's where clause, each subquery's result for
 * the row: against its child's values before the transaction being
 * decoded, or now.
 */
void
ss_nested_params_set(SsValueSet *set, TupleTableSlot *slot, bool before)
{
	SsNested   *n = set->nested;

	for (int i = 0; i < n->nsublinks; i++)
		(void) ss_sublink_result(ss_sets[n->children[n->sublink_dependency[i]]], slot,
								 n->sublink_attnums[i], n->sublink_outputs[i], before,
								 &n->key, &n->params[i]);
}

/* The key of a kept row: per column read, a NULL flag, then its text. */
static void
ss_nested_row_key(SsValueSet *set, TupleTableSlot *slot, StringInfo key)
{
	resetStringInfo(key);
	for (int c = 0; c < set->nread; c++)
	{
		AttrNumber	attnum = set->read_attnums[c];
		char		isnull = slot->tts_isnull[attnum - 1] ? 1 : 0;

		appendBinaryStringInfo(key, &isnull, 1);
		if (!isnull)
		{
			char	   *text = OutputFunctionCall(&set->nested->read_outputs[c],
												  slot->tts_values[attnum - 1]);
			uint32		len = (uint32) strlen(text);

			appendBinaryStringInfo(key, (const char *) &len, sizeof(len));
			appendBinaryStringInfo(key, text, len);
			pfree(text);
		}
	}
}

/* Files a new kept row under its compared value for sublink `i`. */
static void
ss_nested_link(SsValueSet *set, SsNestedRow *row, TupleTableSlot *slot, int i)
{
	SsNested   *n = set->nested;
	SsValueSet *child = ss_sets[n->children[n->sublink_dependency[i]]];
	SsNestedLink *link = &row->links[i];
	SsValueKey	k;
	SsNestedValue *value;
	char	   *data;
	bool		found;

	link->row = row;
	link->value = NULL;
	if (!ss_row_key(slot, child->ncolumns, n->sublink_attnums[i], n->sublink_outputs[i], &n->key))
		return;
	/* the key's own copy first: an entry is whole from its making on */
	data = MemoryContextAlloc(set->context, Max(n->key.len, 1));
	memcpy(data, n->key.data, n->key.len);
	k.set = i;
	k.len = (uint32) n->key.len;
	k.data = data;
	value = hash_search(n->by_value, &k, HASH_ENTER, &found);
	if (found)
		pfree(data);
	else
		dlist_init(&value->rows);
	dlist_push_tail(&value->rows, &link->node);
	link->value = value;
}

static void
ss_nested_forget_row(SsValueSet *set, SsNestedRow *row)
{
	SsNested   *n = set->nested;
	const char *data = row->key.data;

	for (int i = 0; row->links != NULL && i < n->nsublinks; i++)
	{
		SsNestedValue *value = row->links[i].value;

		if (value == NULL)
			continue;
		dlist_delete(&row->links[i].node);
		if (dlist_is_empty(&value->rows))
		{
			const char *value_data = value->key.data;

			hash_search(n->by_value, &value->key, HASH_REMOVE, NULL);
			pfree((char *) value_data);
		}
	}
	if (row->links != NULL)
		pfree(row->links);
	if (row->tuple != NULL)
		pfree(row->tuple);
	hash_search(n->rows, &row->key, HASH_REMOVE, NULL);
	pfree((char *) data);
	n->nrows--;
	sm_gauge_add(SM_SUBQUERY_KEPT_ROWS, 0, -1);
}

static void ss_nested_count_row(SsValueSet *set, TupleTableSlot *slot, int64 delta);

/*
 * Keeps (+1) or stops keeping (-1) a row of the set's table, if its
 * children decide it.  `timed`: as ss_set_evaluate.
 */
void
ss_nested_keep(SsValueSet *set, TupleTableSlot *slot, int delta, bool timed)
{
	SsNested   *n = set->nested;

	for (int i = 0; i < n->nsublinks; i++)
	{
		n->params[i].execPlan = NULL;
		n->params[i].isnull = true;
		n->params[i].value = (Datum) 0;
	}
	if (ss_set_evaluate(set, slot, timed) != -1)
		return;					/* true or false whatever the children hold */
	ss_nested_row_key(set, slot, &n->key);
	ss_nested_count_row(set, slot, delta);
}

/* Counts a kept row (its key in n->key) in (> 0) or out (< 0). */
static void
ss_nested_count_row(SsValueSet *set, TupleTableSlot *slot, int64 delta)
{
	SsNested   *n = set->nested;
	SsValueKey	k;
	SsNestedRow *row;
	bool		found;

	k.set = 0;
	k.len = (uint32) n->key.len;
	k.data = n->key.data;
	if (delta > 0 && hash_search(n->rows, &k, HASH_FIND, NULL) == NULL)
	{
		/* the key's own copy first: an entry is whole from its making on */
		char	   *data = MemoryContextAlloc(set->context, Max(k.len, 1));

		memcpy(data, k.data, k.len);
		k.data = data;
	}
	row = hash_search(n->rows, &k, delta > 0 ? HASH_ENTER : HASH_FIND, &found);
	if (row == NULL)
	{
		ss_set_fail(set, "a row left its subquery's table that was not kept");
		return;
	}
	if (!found)
	{
		MemoryContext old;

		row->count = 0;
		row->visited = 0;
		row->tuple = NULL;
		row->links = NULL;
		n->nrows++;
		sm_gauge_add(SM_SUBQUERY_KEPT_ROWS, 0, 1);
		for (int a = 0; a < n->desc->natts; a++)
		{
			n->values[a] = (Datum) 0;
			n->isnull[a] = true;
		}
		old = MemoryContextSwitchTo(set->context);
		for (int c = 0; c < set->nread; c++)
		{
			AttrNumber	attnum = set->read_attnums[c];
			Datum		value = slot->tts_values[attnum - 1];

			/*
			 * A value kept past the change: not a pointer into the decoder's
			 * memory (a toasted value it rebuilt) or into a TOAST table.
			 */
			if (!slot->tts_isnull[attnum - 1] &&
				TupleDescAttr(n->desc, attnum - 1)->attlen == -1 &&
				VARATT_IS_EXTERNAL(DatumGetPointer(value)))
				value = PointerGetDatum(detoast_external_attr((struct varlena *) DatumGetPointer(value)));
			n->values[attnum - 1] = value;
			n->isnull[attnum - 1] = slot->tts_isnull[attnum - 1];
		}
		row->tuple = heap_form_minimal_tuple(n->desc, n->values, n->isnull);
		row->links = palloc0(sizeof(SsNestedLink) * Max(n->nsublinks, 1));
		MemoryContextSwitchTo(old);
		for (int c = 0; c < set->nread; c++)
		{
			AttrNumber	attnum = set->read_attnums[c];

			if (!n->isnull[attnum - 1] && n->values[attnum - 1] != slot->tts_values[attnum - 1])
				pfree(DatumGetPointer(n->values[attnum - 1]));	/* (copied in the tuple) */
		}
		for (int i = 0; i < n->nsublinks; i++)
			ss_nested_link(set, row, slot, i);
	}
	row->count += delta;
	ss_disk_kept_row(set, row->key.data, row->key.len, row->count);
	if (row->count == 0)
		ss_nested_forget_row(set, row);
}

/* -------------------------------------------------------- the cascade */

static void
ss_nested_gather_row(SsNested *n, SsNestedRow *row, uint64 visit)
{
	MemoryContext old;

	if (row->visited == visit)
		return;
	row->visited = visit;
	old = MemoryContextSwitchTo(ss_context);
	n->gathered = lappend(n->gathered, row);
	MemoryContextSwitchTo(old);
}

/*
 * Gathers the kept rows of `parent` that the transaction's moves of
 * `child` concern; whether there are any.
 */
static bool
ss_nested_gather(SsValueSet *parent, SsValueSet *child, uint64 visit)
{
	SsNested   *n = parent->nested;
	int			d;
	ListCell   *lc;

	for (d = 0; d < n->ndependencies && n->children[d] != child->id; d++)
		;
	if (d == n->ndependencies)
		return false;
	if (n->negated[d] &&
		((child->null_rows > 0) != (child->null_rows_before > 0) ||
		 (child->nvalues + child->null_rows == 0) !=
		 (child->nvalues_before + child->null_rows_before == 0)))
	{
		/* NOT IN of a NULL, or of nothing, concerns every row */
		HASH_SEQ_STATUS seq;
		SsNestedRow *row;

		hash_seq_init(&seq, n->rows);
		while ((row = hash_seq_search(&seq)) != NULL)
			ss_nested_gather_row(n, row, visit);
		return n->gathered != NIL;
	}
	foreach(lc, child->txn_values)
	{
		SsValue    *v = lfirst(lc);

		if ((v->before > 0) == (v->count > 0))
			continue;
		for (int i = 0; i < n->nsublinks; i++)
		{
			SsValueKey	k = {i, v->key.len, v->key.data};
			SsNestedValue *value;
			dlist_iter	it;

			if (n->sublink_dependency[i] != d ||
				(value = hash_search(n->by_value, &k, HASH_FIND, NULL)) == NULL)
				continue;
			dlist_foreach(it, &value->rows)
				ss_nested_gather_row(n, dlist_container(SsNestedLink, node, it.cur)->row, visit);
		}
	}
	return n->gathered != NIL;
}

/*
 * Judges the gathered rows of `set` again, against its children's values
 * before the transaction and now, and counts those that changed.
 */
static void
ss_nested_judge_again(SsValueSet *set)
{
	SsNested   *n = set->nested;
	MemoryContext old = CurrentMemoryContext;
	ShapeRoleSaved saved;
	ListCell   *lc;

	if (!ss_set_touch(set))
	{
		list_free(n->gathered);
		n->gathered = NIL;
		return;
	}
	shape_role_become(set->role, &saved);
	PG_TRY();
	{
		foreach(lc, n->gathered)
		{
			SsNestedRow *row = lfirst(lc);
			TupleTableSlot *slot = n->kept_slot;
			bool		before;
			bool		after;

			ExecStoreMinimalTuple(row->tuple, slot, false);
			slot_getallattrs(slot);
			ss_nested_params_set(set, slot, true);
			before = ss_set_evaluate(set, slot, true) == 1;
			ss_nested_params_set(set, slot, false);
			after = ss_set_evaluate(set, slot, true) == 1;
			if (before != after)
			{
				bool		has = ss_row_key(slot, set->ncolumns, set->attnums, set->outputs, &n->key);

				ss_set_count(set, &n->key, has, after ? row->count : -row->count);
			}
			ExecClearTuple(slot);
		}
	}
	PG_CATCH();
	{
		ExecClearTuple(n->kept_slot);
		ss_set_fail_caught(set, old);
	}
	PG_END_TRY();
	shape_role_restore(&saved);
	list_free(n->gathered);
	n->gathered = NIL;
}

/*
 * At commit, before any set's moves: the values that entered or left
 * nested sets reach the sets above them, deepest level first.
 */
void
ss_nested_cascade(void)
{
	int			top = 0;
	ListCell   *lc;

	foreach(lc, ss_sets_touched)
		top = Max(top, ((SsValueSet *) lfirst(lc))->level);
	for (int level = top; level >= 1; level--)
	{
		List	   *parents = NIL;
		uint64		visit = ++ss_nested_visits;

		/* gathered first: judging touches the parents, which joins them to the list */
		foreach(lc, ss_sets_touched)
		{
			SsValueSet *child = lfirst(lc);
			SsValueSet *parent;

			if (child->level != level || child->parent < 0 || child->skip_txn ||
				child->txn != ss_txn_number)
				continue;
			parent = ss_sets[child->parent];
			if (parent->problem == NULL && ss_nested_gather(parent, child, visit))
				parents = list_append_unique_ptr(parents, parent);
		}
		foreach(lc, parents)
			ss_nested_judge_again(lfirst(lc));
		list_free(parents);
	}
}

/* ----------------------------------------------------------- the rest */

/* Whether a child's table had partitions attached or detached (failing it). */
const char *
ss_nested_partitions_problem(SsValueSet *set)
{
	for (int d = 0; d < set->nested->ndependencies; d++)
	{
		const char *problem;

		if (set->nested->children[d] >= 0 &&
			(problem = ss_set_partitions_problem(ss_sets[set->nested->children[d]])) != NULL)
			return problem;
	}
	return NULL;
}

/* The subqueries of the set's where clause: 0 when it has none. */
int
ss_nested_nchildren(const SsValueSet *set)
{
	return set->nested != NULL ? set->nested->ndependencies : 0;
}

/* The set of the set's subquery `dependency`, or -1 (not read yet). */
int
ss_nested_child(const SsValueSet *set, int dependency)
{
	return set->nested->children[dependency];
}

void
ss_nested_set_child(SsValueSet *set, int dependency, int child)
{
	set->nested->children[dependency] = child;
}

/* The set's kept rows, as records of the value sets file. */
void
ss_nested_write_kept(SsValueSet *set, ValueSetsBuffer *buf)
{
	HASH_SEQ_STATUS seq;
	SsNestedRow *row;

	hash_seq_init(&seq, set->nested->rows);
	while ((row = hash_seq_search(&seq)) != NULL)
		value_sets_write_kept_row(buf, set->uid, row->key.data, row->key.len, row->count);
}

/*
 * Keeps a row read back from the value sets file: its key (ss_nested_row_key)
 * is the texts of the columns it reads, read in again with their types'
 * input functions.  A key that does not print back the same is refused.
 */
void
ss_nested_restore_row(SsValueSet *set, const char *key, uint32 len, int64 count)
{
	SsNested   *n = set->nested;
	TupleTableSlot *slot = n->read_slot;
	uint32		at = 0;

	ExecClearTuple(slot);
	for (int a = 0; a < slot->tts_tupleDescriptor->natts; a++)
	{
		slot->tts_values[a] = (Datum) 0;
		slot->tts_isnull[a] = true;
	}
	for (int c = 0; c < set->nread; c++)
	{
		Form_pg_attribute att = TupleDescAttr(n->desc, set->read_attnums[c] - 1);
		uint32		text_len;
		char	   *text;
		Oid			input;
		Oid			ioparam;

		if (at >= len)
			break;
		if (key[at++] != 0)
			continue;			/* NULL */
		if (len - at < sizeof(text_len))
			break;
		memcpy(&text_len, key + at, sizeof(text_len));
		at += sizeof(text_len);
		if (len - at < text_len)
			break;
		text = pnstrdup(key + at, text_len);
		at += text_len;
		getTypeInputInfo(att->atttypid, &input, &ioparam);
		slot->tts_values[att->attnum - 1] = OidInputFunctionCall(input, text, ioparam,
																 att->atttypmod);
		slot->tts_isnull[att->attnum - 1] = false;
	}
	ExecStoreVirtualTuple(slot);
	ss_nested_row_key(set, slot, &n->key);
	if (at != len || n->key.len != (int) len || memcmp(n->key.data, key, len) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("a row kept for a nested subquery does not read back as it was written")));
	ss_nested_count_row(set, slot, count);
}

/* Frees the set's children and kept rows (the rest goes with its context). */
void
ss_nested_destroy(SsValueSet *set)
{
	SsNested   *n = set->nested;

	if (n == NULL)
		return;
	for (int d = 0; d < n->ndependencies; d++)
		if (n->children[d] >= 0)
			ss_set_destroy(ss_sets[n->children[d]]);
	list_free(n->gathered);
	sm_gauge_add(SM_SUBQUERY_KEPT_ROWS, 0, -n->nrows);
	ss_nnested--;
	set->nested = NULL;
}
