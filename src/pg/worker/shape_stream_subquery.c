/*-------------------------------------------------------------------------
 *
 * shape_stream_subquery.c
 *		Shapes with subqueries: their rows judged against the value sets of
 *		their inner selects, their routes, and the moves they make.
 *
 * A shape whose where clause has `a IN (SELECT c FROM t WHERE w)`
 * (shape_subquery.c) is matched by the decoder against the values that
 * select has at the point of the WAL being decoded: its value set
 * (shape_stream_values.c), shared with the shapes of the same select.
 *
 * Judging a transaction.  A change of a shape's own table is matched
 * against the values its sets had before the transaction, whatever the
 * transaction does to them meanwhile (each value keeps its count from
 * before; SQL's three-valued logic throughout).  At commit, the values
 * whose condition changed between before and after move: an event names
 * the positions of the subquery and the value's hash (row_tags.c) after the
 * transaction's changes.  So a client that applied the transaction's
 * changes and then its moves holds the rows of the table after it, judged
 * against the values after it; and a value that enters and leaves within
 * one transaction moves nothing.  NOT IN turns moves around; for NOT IN, a
 * set that gains or loses its first NULL, or becomes empty or not, changes
 * rows whose value is NULL, or all rows: the shape rotates.
 *
 * Moves out are an event alone: clients drop the rows whose tags it
 * matches and that no other disjunct keeps.  Moves in bring rows no change
 * sent.  Their query is a job of the snapshot pool (subset_jobs.c,
 * subset_query.c): the shape's rows with one of the values that were not in
 * the shape before (the clause with the subquery as it was holds for those
 * the client has: the event flips their conditions), tagged, is_move_in,
 * at a snapshot of its own.  Meanwhile the stream keeps its transactions,
 * as while its own snapshot is taken, encoded twice: as if the rows had
 * come, and as if the move had not happened (ss_old_view).  Once the rows
 * are in and decoding is past every commit their snapshot saw, they are
 * spliced in (ss_move_in_splice): the kept transactions the snapshot saw,
 * the second way (the rows already hold their effects), the move-in event,
 * the rows, snapshot-end, then the kept transactions it did not see, the
 * first way.  Values of the same subquery that enter while one is read
 * join it (ss_move_in_join): from then on the second encoding masks them
 * too, and the rows of all its values are read again at a snapshot that
 * sees them.  A move-in of another subquery while one is read, a move-in
 * of a shape still taking its snapshot, no free query cell, or a failed
 * query rotates the shape instead (move_in).
 *
 * Routing.  A shape whose clause is one conjunction with a positive
 * `a IN (subquery)` is filed in its table's equality index under each value
 * its set has (ss_subquery_route): changes of its table find it as they
 * find `a = constant` shapes.  Filings follow the set at commit, so during
 * a transaction they are the values before it, which the transaction is
 * judged against.
 *
 * Shapes with subqueries are not compacted (events name no key).  They are
 * kept on disk as others are, their sets with them
 * (shape_stream_sets_disk.c), except while a move-in is in flight.
 *
 * Everything here runs on the worker's main thread.
 *
 * IDENTIFICATION
 *	  src/pg/worker/shape_stream_subquery.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/table.h"
#include "access/transam.h"
#include "access/xlog.h"
#include "access/xlog_internal.h"
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

/* ------------------------------------------------- the outer table's rows */

static StringInfoData ss_row_value;	/* a row's value, looked up */

/*
 * A set of value keys (bytes, under set id 0): a move of many values looks
 * each of its values up in another list of them (the move's own, those
 * moved out again), and walking that list made it quadratic.  The keys
 * (StringInfo) on `keys` must outlive it; it lives in `context`.
 */
static HTAB *
ss_key_set(List *keys, MemoryContext context)
{
	HASHCTL		ctl;
	HTAB	   *set;
	ListCell   *lc;

	ctl.keysize = sizeof(SsValueKey);
	ctl.entrysize = sizeof(SsValueKey);
	ctl.hash = ss_value_hash;
	ctl.match = ss_value_match;
	ctl.hcxt = context;
	set = hash_create("shape_sync value keys", Max(list_length(keys), 8), &ctl,
					  HASH_ELEM | HASH_FUNCTION | HASH_COMPARE | HASH_CONTEXT);
	foreach(lc, keys)
	{
		StringInfo	k = lfirst(lc);
		SsValueKey	key = {0, (uint32) k->len, k->data};

		(void) hash_search(set, &key, HASH_ENTER, NULL);
	}
	return set;
}

static bool
ss_key_set_has(HTAB *set, const char *data, uint32 len)
{
	SsValueKey	key = {0, len, data};

	return hash_search(set, &key, HASH_FIND, NULL) != NULL;
}

/* Whether `key` is one of the move-in's values. */
static bool
ss_moving_value(const SsMoveIn *m, const StringInfo key)
{
	return ss_key_set_has(m->key_set, key->data, (uint32) key->len);
}

/*
 * Whether the row is in the shape, and each position's condition, as
 * clients read them (polarity applied, NULL as false).  The values are
 * those the sets had before the current transaction: a transaction is
 * judged against them, its moves follow its changes (ss_stream_moves).
 * With `old_view`, a move-in in flight had not happened.
 */
bool
ss_subquery_row(ShapeStream *s, TupleTableSlot *slot, bool *active, bool old_view)
{
	SsSubquery *q = s->subquery;
	const SubqueryPlan *plan = q->plan;
	bool		isnull;
	Datum		result;
	bool		in;

	if (ss_row_value.data == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(ss_context);

		initStringInfo(&ss_row_value);
		MemoryContextSwitchTo(old);
	}
	for (int i = 0; i < plan->nsublinks; i++)
	{
		const SubquerySublink *sl = &plan->sublinks[i];
		SsValueSet *set = ss_sets[q->sets[sl->dependency]];
		ParamExecData *param = &q->params[i];

		if (ss_sublink_result(set, slot, sl->outer_attnums, q->tagger.outputs[i], true,
							  &ss_row_value, param) &&
			old_view && s->moving != NULL && sl->dependency == s->moving->dependency &&
			ss_moving_value(s->moving, &ss_row_value))
		{
			/* as before it moved */
			bool		found = plan->dependencies[sl->dependency].negated;

			param->isnull = !found && ss_set_null_rows(set, true) > 0;
			param->value = BoolGetDatum(found);
		}
	}
	ss_econtext_ensure();
	ss_econtext->ecxt_scantuple = slot;
	ss_econtext->ecxt_param_exec_vals = q->params;
	eval_deadline_begin();
	result = ExecEvalExprSwitchContext(q->where, ss_econtext, &isnull);
	in = !isnull && DatumGetBool(result);
	for (int p = 0; in && p < plan->npositions; p++)
	{
		const SubqueryPosition *pos = &plan->positions[p];
		bool		known;
		bool		holds;

		if (pos->sublink >= 0)
		{
			known = !q->params[pos->sublink].isnull;
			holds = known && DatumGetBool(q->params[pos->sublink].value);
		}
		else
		{
			Datum		d = ExecEvalExprSwitchContext(q->conditions[p], ss_econtext, &isnull);

			known = !isnull;
			holds = known && DatumGetBool(d);
		}
		/* whether the condition, negated or not, is true (NULL is not) */
		active[p] = pos->negated ? known && !holds : holds;
	}
	if (eval_deadline_end())
		ss_evaluation_too_slow();
	ss_econtext->ecxt_param_exec_vals = NULL;
	ResetExprContext(ss_econtext);
	return in;
}

/*
 * Sets a stream up for its where clause's subqueries: its plan, its
 * tagger, the expressions, and its value sets (read now if new).
 */
void
ss_subquery_add(ShapeStream *s, Node *where, const char *handle)
{
	SubqueryPlan *plan = subquery_plan(where, s->relid);
	SsSubquery *q;

	if (plan == NULL)
		return;
	q = palloc0(sizeof(SsSubquery));
	q->plan = plan;
	row_tagger_init(&q->tagger, plan, s->relid, handle);
	q->where = ExecInitExpr(expression_planner((Expr *) plan->where_params), NULL);
	q->conditions = palloc0(sizeof(ExprState *) * plan->npositions);
	for (int p = 0; p < plan->npositions; p++)
		if (plan->positions[p].sublink < 0)
			q->conditions[p] = ExecInitExpr(expression_planner(plan->positions[p].expr), NULL);
	q->params = palloc0(sizeof(ParamExecData) * Max(plan->nsublinks, 1));
	q->sets = palloc(sizeof(int) * plan->ndependencies);
	for (int d = 0; d < plan->ndependencies; d++)
		q->sets[d] = -1;
	q->where_tree = where;
	q->route_sublink = -1;
	s->subquery = q;
	for (int d = 0; d < plan->ndependencies; d++)
		q->sets[d] = ss_set_acquire(&plan->dependencies[d], s->slot);
}

void
ss_subquery_remove(ShapeStream *s)
{
	SsSubquery *q = s->subquery;

	if (q == NULL)
		return;
	if (s->counted)
		ss_subquery_file_all(s, false);
	for (int d = 0; d < q->plan->ndependencies; d++)
		if (q->sets[d] >= 0)
			ss_set_release(q->sets[d], s->slot);
	s->subquery = NULL;
}

/* ------------------------------------------------------------ routing */

static List *ss_sublink_comparisons(const SubqueryPlan *plan, int sublink);

/*
 * A shape whose clause is one conjunction holding `a IN (subquery)` can
 * only have rows whose a is one of the subquery's values: it is filed in
 * its table's equality index (equality_index.c) under the hash of each of
 * them (of the first column, for a row), and changes find it as they find
 * `a = constant` shapes.  Filed under the values the set had before the
 * transaction being decoded, which is what the transaction is judged
 * against: the filings change at commit (ss_sets_commit).  Fills `route`
 * and returns true when the shape can be routed so.
 */
bool
ss_subquery_route(ShapeStream *s, EqualityRoute *route)
{
	SsSubquery *q = s->subquery;
	const SubqueryPlan *plan = q->plan;

	if (plan->ndisjuncts != 1)
		return false;
	for (int p = plan->disjunct_first[0]; p < plan->disjunct_first[1]; p++)
	{
		int			sublink = plan->positions[p].sublink;
		OpExpr	   *op;
		Oid			lhs_hash;
		Oid			rhs_hash;
		Oid			input;

		if (sublink < 0 || plan->positions[p].negated)
			continue;
		op = linitial(ss_sublink_comparisons(plan, sublink));
		if (!get_op_hash_functions(op->opno, &lhs_hash, &rhs_hash) ||
			lhs_hash >= FirstNormalObjectId || rhs_hash >= FirstNormalObjectId)
			continue;
		memset(route, 0, sizeof(*route));
		route->attnum = plan->sublinks[sublink].outer_attnums[0];
		route->column_type = get_atttype(s->relid, route->attnum);
		route->column_hash = lhs_hash;
		route->collation = op->inputcollid;
		route->nhashes = 0;
		route->keyno = -1;
		q->route_sublink = sublink;
		fmgr_info_cxt(rhs_hash, &q->route_hash, s->context);
		getTypeInputInfo(exprType(lsecond(op->args)), &input, &q->route_ioparam);
		fmgr_info_cxt(input, &q->route_input, s->context);
		q->route_collation = op->inputcollid;
		return true;
	}
	return false;
}

/*
 * Files the stream under one value of its routing subquery, or unfiles it.
 * Streams go outside transactions too: what reading the value allocates
 * goes in a context of its own, emptied each time.
 */
static void
ss_subquery_file(ShapeStream *s, const SsValueKey *key, bool add)
{
	static MemoryContext scratch = NULL;
	SsSubquery *q = s->subquery;
	SsRelation *r = hash_search(ss_relids, &s->relid, HASH_FIND, NULL);
	MemoryContext old;
	char	  **texts;
	Datum		value;
	uint32		hash;

	if (r == NULL || s->route.keyno < 0)
		return;
	if (scratch == NULL)
		scratch = AllocSetContextCreate(ss_context, "shape_sync routes", ALLOCSET_SMALL_SIZES);
	old = MemoryContextSwitchTo(scratch);
	texts = ss_key_texts(key, 1);
	value = InputFunctionCall(&q->route_input, texts[0], q->route_ioparam, -1);
	hash = DatumGetUInt32(FunctionCall1Coll(&q->route_hash, q->route_collation, value));
	MemoryContextSwitchTo(old);
	MemoryContextReset(scratch);
	equality_index_file(r->index, s->slot, &s->route, hash, add);
}

/* Files a routed stream under every value its routing subquery has now. */
void
ss_subquery_file_all(ShapeStream *s, bool add)
{
	SsSubquery *q = s->subquery;
	SsValueSet *set;
	dlist_iter	it;

	if (q == NULL || q->route_sublink < 0 ||
		q->sets[q->plan->sublinks[q->route_sublink].dependency] < 0)
		return;
	set = ss_sets[q->sets[q->plan->sublinks[q->route_sublink].dependency]];
	/*
	 * Filed under the values as they were before the transaction decoded
	 * (they change at its commit, ss_set_route_moved), also when the
	 * stream goes in the middle of one.
	 */
	dlist_foreach(it, &set->values)
	{
		SsValue    *v = dlist_container(SsValue, in_set, it.cur);
		bool		touched = set->txn != 0 && set->txn == ss_txn_number && !set->skip_txn &&
			v->txn == set->txn;

		if ((touched ? v->before : v->count) > 0)
			ss_subquery_file(s, &v->key, add);
	}
}

/* Appends a move event of `s`'s dependency `dep` for `values`. */
static void
ss_emit_move(ShapeStream *s, int dep, List *values, const char *event)
{
	SsSubquery *q = s->subquery;
	const SubqueryPlan *plan = q->plan;
	StringInfoData msg;
	ListCell   *lc;
	bool		first = true;
	LogOffset	offset = {(int64_t) ss_lsn, ss_op};
	int			ncolumns = plan->dependencies[dep].ncolumns;
	MemoryContext old = MemoryContextSwitchTo(s->context);

	ss_op += 2;
	initStringInfo(&msg);
	appendStringInfo(&msg, "{\"headers\":{\"event\":\"%s\",\"patterns\":[", event);
	for (int p = 0; p < plan->npositions; p++)
	{
		int			sublink = plan->positions[p].sublink;

		if (sublink < 0 || plan->sublinks[sublink].dependency != dep)
			continue;
		foreach(lc, values)
		{
			char	  **texts = ss_key_texts(&((SsValue *) lfirst(lc))->key, ncolumns);
			char		hash[ROW_TAG_HASH_LEN + 1];

			row_tag_value_hash(&q->tagger, sublink, texts, hash);
			appendStringInfo(&msg, "%s{\"pos\":%d,\"value\":\"%s\"}", first ? "" : ",", p, hash);
			first = false;
			for (int c = 0; c < ncolumns; c++)
				pfree(texts[c]);
			pfree(texts);
		}
	}
	appendStringInfo(&msg, "]" LOG_RECORD_TXIDS "%u]" LOG_RECORD_END, ss_xid);
	/* after the transaction's changes, the last of which says so */
	if (ss_old_view)
	{
		ss_release_held_before(s, true);
		ss_emit_before(s, offset, msg.data, (uint32) msg.len);
	}
	else
	{
		ss_release_held(s, true);
		ss_emit(s, offset, msg.data, (uint32) msg.len);
	}
	pfree(msg.data);
	MemoryContextSwitchTo(old);
}

/*
 * The same event as if the stream's move-in in flight had not happened:
 * without the move-in's values, which were never in then.
 */
static void
ss_emit_move_before(ShapeStream *s, int dep, List *values, const char *event)
{
	List	   *kept = NIL;
	ListCell   *lc;
	StringInfoData key;

	if (dep != s->moving->dependency)
		kept = list_copy(values);
	else
	{
		initStringInfo(&key);
		foreach(lc, values)
		{
			SsValue    *v = lfirst(lc);

			resetStringInfo(&key);
			appendBinaryStringInfo(&key, v->key.data, v->key.len);
			if (!ss_moving_value(s->moving, &key))
				kept = lappend(kept, v);
		}
		pfree(key.data);
	}
	if (kept != NIL)
	{
		ss_old_view = true;
		PG_TRY();
		{
			ss_emit_move(s, dep, kept, event);
		}
		PG_FINALLY();
		{
			ss_old_view = false;
		}
		PG_END_TRY();
	}
	list_free(kept);
}

/*
 * The move-in event of the stream's move in flight, but for the values
 * whose keys are in `gone` (StringInfo): moved out again before the rows
 * were read.
 */
void
ss_move_in_event(ShapeStream *s, List *gone, StringInfo msg)
{
	SsMoveIn   *m = s->moving;
	const SubqueryPlan *plan = s->subquery->plan;
	ListCell   *lc;
	bool		first = true;
	HTAB	   *left = gone != NIL ? ss_key_set(gone, CurrentMemoryContext) : NULL;

	appendStringInfoString(msg, "{\"headers\":{\"event\":\"move-in\",\"patterns\":[");
	for (int p = 0; p < plan->npositions; p++)
	{
		int			sublink = plan->positions[p].sublink;

		if (sublink < 0 || plan->sublinks[sublink].dependency != m->dependency)
			continue;
		foreach(lc, m->values)
		{
			char		hash[ROW_TAG_HASH_LEN + 1];
			StringInfo	key = list_nth(m->keys, foreach_current_index(lc));

			if (left != NULL && ss_key_set_has(left, key->data, (uint32) key->len))
				continue;
			row_tag_value_hash(&s->subquery->tagger, sublink, lfirst(lc), hash);
			appendStringInfo(msg, "%s{\"pos\":%d,\"value\":\"%s\"}", first ? "" : ",", p, hash);
			first = false;
		}
	}
	appendStringInfoString(msg, "]" LOG_RECORD_TXIDS);
	for (int i = 0; i < m->nxids; i++)
		appendStringInfo(msg, "%s%u", i > 0 ? "," : "", m->xids[i]);
	appendStringInfoString(msg, "]" LOG_RECORD_END);
	if (left != NULL)
		hash_destroy(left);
}

/* The comparisons of one of the plan's subqueries, each an OpExpr. */
static List *
ss_sublink_comparisons(const SubqueryPlan *plan, int sublink)
{
	Node	   *test = plan->sublinks[sublink].node->testexpr;

	return IsA(test, OpExpr) ? list_make1(test) : ((BoolExpr *) test)->args;
}

/* A value's column text as a constant of the type `op` compares it as. */
static Const *
ss_value_const(OpExpr *op, const char *text)
{
	Oid			type = exprType(lsecond(op->args));
	Oid			input;
	Oid			ioparam;
	int16		typlen;
	bool		typbyval;

	getTypeInputInfo(type, &input, &ioparam);
	get_typlenbyval(type, &typlen, &typbyval);
	return makeConst(type, -1, exprCollation(lsecond(op->args)), typlen,
					 OidInputFunctionCall(input, (char *) text, ioparam, -1), false, typbyval);
}

/*
 * Whether the compared columns of subquery `sublink` hold one of the
 * move-in's values: an OR of each value's equalities.
 */
static Node *
ss_moving_values_condition(ShapeStream *s, int sublink)
{
	List	   *comparisons = ss_sublink_comparisons(s->subquery->plan, sublink);
	List	   *alternatives = NIL;
	ListCell   *vc;

	foreach(vc, s->moving->values)
	{
		char	  **texts = lfirst(vc);
		List	   *conds = NIL;
		ListCell   *cc;

		foreach(cc, comparisons)
		{
			OpExpr	   *op = lfirst(cc);
			OpExpr	   *eq = (OpExpr *) make_opclause(op->opno, BOOLOID, false,
													 copyObject(linitial(op->args)),
													 (Expr *) ss_value_const(op, texts[foreach_current_index(cc)]),
													 InvalidOid, op->inputcollid);

			eq->opfuncid = op->opfuncid;
			conds = lappend(conds, eq);
		}
		alternatives = lappend(alternatives, list_length(conds) == 1 ? linitial(conds) :
							   (Node *) make_andclause(conds));
	}
	return list_length(alternatives) == 1 ? linitial(alternatives) :
		(Node *) make_orclause(alternatives);
}

/*
 * The clause as it was before the move: each subquery of the moving
 * dependency, for the moving values, as it was (IN was false for them; NOT
 * IN's subquery had them), and as it is for any other value.
 */
static Node *
ss_mask_dependency(Node *node, void *context)
{
	ShapeStream *s = context;
	const SubqueryPlan *plan = s->subquery->plan;

	if (node == NULL)
		return NULL;
	if (IsA(node, SubLink))
		for (int i = 0; i < plan->nsublinks; i++)
			if (plan->sublinks[i].node == (SubLink *) node &&
				plan->sublinks[i].dependency == s->moving->dependency)
			{
				Node	   *moving = ss_moving_values_condition(s, i);

				if (plan->dependencies[s->moving->dependency].negated)
					return (Node *) make_orclause(list_make2(copyObject(node), moving));
				return (Node *) make_andclause(list_make2(copyObject(node),
														  make_notclause((Expr *) moving)));
			}
	return expression_tree_mutator(node, ss_mask_dependency, context);
}

/*
 * The rows of a move-in: those of the shape whose compared columns have
 * one of the values, and that were not in the shape before (the clause
 * with the values as they were holds for them: the client has them, and
 * the move-in event flips their conditions).
 */
static Node *
ss_move_in_filter(ShapeStream *s)
{
	const SubqueryPlan *plan = s->subquery->plan;
	List	   *alternatives = NIL;
	CoalesceExpr *before = makeNode(CoalesceExpr);

	for (int i = 0; i < plan->nsublinks; i++)
		if (plan->sublinks[i].dependency == s->moving->dependency)
			alternatives = lappend(alternatives, ss_moving_values_condition(s, i));
	before->coalescetype = BOOLOID;
	before->coalescecollid = InvalidOid;
	before->args = list_make2(ss_mask_dependency(s->subquery->where_tree, s),
							  makeBoolConst(false, false));
	before->location = -1;
	return (Node *) make_andclause(list_make2(list_length(alternatives) == 1 ?
											  linitial(alternatives) :
											  (Node *) make_orclause(alternatives),
											  make_notclause((Expr *) before)));
}

void
ss_move_in_forget(ShapeStream *s)
{
	if (s->moving == NULL)
		return;
	MemoryContextDelete(s->moving->context);
	s->moving = NULL;
}

/*
 * Queues the query of the move-in's rows (subset_jobs.c), whose filter
 * (ss_move_in_filter) is `where`, as text; a stream whose query cannot be
 * queued now rotates.
 */
static void
ss_move_in_request(ShapeStream *s, const char *where)
{
	SubsetRequest *request = MemoryContextAllocZero(TopMemoryContext, sizeof(SubsetRequest));

	request->move_in_where = MemoryContextStrdup(TopMemoryContext, where);
	request->move_in_handle = MemoryContextStrdup(TopMemoryContext, s->subquery->tagger.handle);
	if (!subset_jobs_move_in(s->slot, s->generation, request))
	{
		pfree(request->move_in_where);
		pfree(request->move_in_handle);
		pfree(request);
		ss_move_in_forget(s);
		ss_rotate_later(s, SM_ROTATION_MOVE_IN,
						"a value entered the result of its subquery, and no query slot was free to read its rows");
	}
}

/*
 * Adds a value to the move-in's (its key set, once made, included); in
 * its context.
 */
static void
ss_move_in_add(SsMoveIn *m, const SsValue *v, int ncolumns)
{
	StringInfo	key = makeStringInfo();

	appendBinaryStringInfo(key, v->key.data, v->key.len);
	m->keys = lappend(m->keys, key);
	m->values = lappend(m->values, ss_key_texts(&v->key, ncolumns));
	if (m->key_set != NULL)
	{
		SsValueKey	k = {0, (uint32) key->len, key->data};

		(void) hash_search(m->key_set, &k, HASH_ENTER, NULL);
	}
}

/* a move-in's rows read again for values that joined it, at most (then: move_in) */
#define MOVE_IN_MAX_REREADS		3

/* A value of the move-in in flight is back: no kept transaction moved it out. */
static void
ss_move_in_back(ShapeStream *s, const SsValueKey *key)
{
	List	   *txns = list_copy(s->pending);
	ListCell   *lc;

	if (s->txn_pending != NULL)
		txns = lappend(txns, s->txn_pending);
	foreach(lc, txns)
	{
		PendingTxn *txn = lfirst(lc);
		ListCell   *kc;

		foreach(kc, txn->moved_out)
		{
			StringInfo	k = lfirst(kc);

			if ((uint32) k->len == key->len && memcmp(k->data, key->data, key->len) == 0)
			{
				txn->moved_out = foreach_delete_current(txn->moved_out, kc);
				pfree(k->data);
				pfree(k);
			}
		}
	}
	list_free(txns);
}

/*
 * Values of the same subquery entered while a move-in is in flight: they
 * join it.  Its kept transactions from here on are encoded as if none of
 * its values had moved (the second view masks them all), and its rows are
 * read again, for every value, at a snapshot that sees this transaction:
 * now if the first query's rows are in, else when that query ends (one
 * that fails rotates the shape, as a move-in's does); at most
 * MOVE_IN_MAX_REREADS times, then the shape rotates.  The event names
 * every transaction.
 */
static void
ss_move_in_join(ShapeStream *s, List *values)
{
	SsMoveIn   *m = s->moving;
	int			ncolumns = s->subquery->plan->dependencies[m->dependency].ncolumns;
	LogOffset	now;
	MemoryContext old;
	ListCell   *lc;

	/*
	 * Values that keep joining would have its rows read again and again,
	 * and its transactions kept meanwhile: past a few, the shape rotates.
	 */
	if (m->rereads >= MOVE_IN_MAX_REREADS)
	{
		ss_rotate_later(s, SM_ROTATION_MOVE_IN,
						"values kept entering the result of its subquery while a move-in was read");
		return;
	}
	m->rereads++;
	old = MemoryContextSwitchTo(m->context);

	foreach(lc, values)
	{
		SsValue    *v = lfirst(lc);

		if (ss_key_set_has(m->key_set, v->key.data, v->key.len))
			ss_move_in_back(s, &v->key);	/* moved out by a kept transaction, and in again */
		else
			ss_move_in_add(m, v, ncolumns);
	}
	if (m->xids[m->nxids - 1] != ss_xid)
	{
		m->xids = repalloc(m->xids, sizeof(TransactionId) * (m->nxids + 1));
		m->xids[m->nxids++] = ss_xid;
	}
	/* the event comes after this transaction's records too */
	now.tx = (int64_t) ss_lsn;
	now.op = ss_op;
	m->after = log_offset_max(m->after, now);
	MemoryContextSwitchTo(old);
	if (!m->answered)
	{
		/*
		 * Its query runs: read again when it ends (between batches, outside
		 * a transaction: the filter is made now).
		 */
		if (m->stale != NULL)
			pfree(m->stale);
		m->stale = MemoryContextStrdup(m->context, nodeToString(ss_move_in_filter(s)));
		return;
	}
	/* its rows are in, waiting for decoding: they are read again */
	m->answered = false;
	m->visibility = NULL;
	m->database_lsn = 0;
	resetStringInfo(&m->answer);
	ss_move_in_request(s, nodeToString(ss_move_in_filter(s)));
}

/*
 * Values moved the shape's rows in: their query is queued (subset_jobs.c),
 * and the stream keeps its transactions until the rows are spliced in.
 * Values of the same subquery that enter meanwhile join the move-in
 * (ss_move_in_join).  A stream still taking its snapshot, or reading a
 * move-in of another subquery, rotates instead (move_in).
 */
static void
ss_move_in_begin(ShapeStream *s, int dep, List *values)
{
	SsMoveIn   *m;
	ListCell   *lc;
	MemoryContext old;
	int			ncolumns = s->subquery->plan->dependencies[dep].ncolumns;

	if (!s->ready)
	{
		ss_rotate_unless_in_snapshot(s, SM_ROTATION_MOVE_IN,
									 "a value entered the result of its subquery while its snapshot was taken");
		return;
	}
	if (s->moving != NULL && s->moving->dependency == dep)
	{
		ss_move_in_join(s, values);
		return;
	}
	if (s->moving != NULL)
	{
		ss_rotate_later(s, SM_ROTATION_MOVE_IN,
						"a value entered the result of one of its subqueries while a move-in of another was read");
		return;
	}
	{
		MemoryContext context = AllocSetContextCreate(s->context, "shape_sync move-in",
													  ALLOCSET_SMALL_SIZES);

		old = MemoryContextSwitchTo(context);
		m = palloc0(sizeof(SsMoveIn));
		m->context = context;
	}
	m->dependency = dep;
	m->xids = palloc(sizeof(TransactionId));
	m->xids[0] = ss_xid;
	m->nxids = 1;
	/* the transaction's records are before this op: its events took theirs */
	m->after.tx = (int64_t) ss_lsn;
	m->after.op = ss_op;
	foreach(lc, values)
		ss_move_in_add(m, lfirst(lc), ncolumns);
	m->key_set = ss_key_set(m->keys, m->context);
	initStringInfo(&m->answer);
	s->moving = m;
	MemoryContextSwitchTo(old);
	ss_move_in_request(s, nodeToString(ss_move_in_filter(s)));
}

static int	ss_moves_answered = 0;	/* move-ins whose rows are in, not spliced,
										 * or to read again */

static ShapeStream *
ss_moving_stream(uint32 slot, uint32 generation)
{
	ShapeStream *s;

	if (ss_streams == NULL)
		return NULL;
	s = &ss_streams[slot];
	if (!s->in_use || s->generation != generation || s->moving == NULL || s->rotate)
		return NULL;
	return s;
}

void
shape_stream_move_in_failed(uint32 slot, uint32 generation)
{
	ShapeStream *s = ss_moving_stream(slot, generation);

	if (s == NULL)
		return;
	ss_move_in_forget(s);
	ss_rotate_later(s, SM_ROTATION_MOVE_IN, "the rows a value brought into it could not be read");
}

/*
 * Whether decoding is past every commit the move-in's snapshot saw: the
 * WAL insert position after it (at a page's start, past that page's
 * header, where decoding stops until more WAL comes).
 */
static void
ss_move_in_try(ShapeStream *s)
{
	XLogRecPtr	at = decoder_position();
	XLogRecPtr	seen = s->moving->database_lsn;

	if (s->moving->answered &&
		(at >= seen || (at % XLOG_BLCKSZ == 0 && seen - at <= SizeOfXLogLongPHD)))
		ss_move_in_splice(s);
}

void
shape_stream_move_in_answered(uint32 slot, uint32 generation, const ShapeLog *answer,
							  const SubsetOutcome *outcome)
{
	ShapeStream *s = ss_moving_stream(slot, generation);
	ShapeLogArena *arena = ss_table()->arena;
	SlogPublished pub;
	uint64		pos = 0;
	MemoryContext old;
	SsMoveIn   *m;

	if (s == NULL)
		return;
	m = s->moving;
	if (outcome->reason != REFUSAL_NONE)
	{
		shape_stream_move_in_failed(slot, generation);
		return;
	}
	if (m->stale != NULL)
	{
		/*
		 * Values joined it while it ran: its rows are read again, all of
		 * them, between batches (not from within this job's own answer).
		 */
		m->requery = true;
		ss_moves_answered++;
		return;
	}
	slog_read_published(answer, &pub);
	if (pub.data_end > MaxAllocSize / 2)
	{
		/* more than the worker copies at once (an answer is bounded by the log memory) */
		shape_stream_move_in_failed(slot, generation);
		return;
	}
	old = MemoryContextSwitchTo(m->context);
	resetStringInfo(&m->answer);
	while (pos < pub.data_end)
	{
		SlogRecordHeader hdr;
		char	   *data;

		if (!slog_read_header(arena, answer, pos, &hdr))
			break;
		data = palloc(hdr.len + 1);
		if (!slog_copy_out(arena, answer, pos + sizeof(hdr), data, hdr.len))
			break;
		data[hdr.len] = '\0';
		if (pos == 0)
		{
			/* the insert position after the snapshot, and the snapshot */
			char	   *space = strchr(data, ' ');

			m->database_lsn = strtoull(data, NULL, 10);
			m->visibility = space ? snapshot_visibility_parse(space + 1) : NULL;
		}
		else
		{
			appendBinaryStringInfo(&m->answer, (const char *) &hdr.len, sizeof(hdr.len));
			appendBinaryStringInfo(&m->answer, data, hdr.len);
		}
		pfree(data);
		pos += slog_record_span(hdr.len);
	}
	MemoryContextSwitchTo(old);
	if (pos < pub.data_end || m->visibility == NULL)
	{
		shape_stream_move_in_failed(slot, generation);
		return;
	}
	m->answered = true;
	/* never in the middle of a transaction's replay: between batches, then */
	if (!ss_in_txn)
		ss_move_in_try(s);
	if (s->moving != NULL)
		ss_moves_answered++;
}

/*
 * Between batches: the move-ins whose rows came, once decoding caught up,
 * and those to read again.
 */
void
ss_moves_maintain(void)
{
	ShapeTable *table;

	if (ss_streams == NULL || ss_moves_answered == 0)
		return;
	table = ss_table();
	ss_moves_answered = 0;
	for (uint32 i = 0; i < table->nslots; i++)
		if (ss_streams[i].in_use && ss_streams[i].moving != NULL && !ss_streams[i].rotate)
		{
			if (ss_streams[i].moving->requery)
			{
				SsMoveIn   *m = ss_streams[i].moving;
				char	   *where = m->stale;

				m->requery = false;
				m->stale = NULL;
				ss_move_in_request(&ss_streams[i], where);
				if (ss_streams[i].moving != NULL)
					pfree(where);	/* (else it went with the move-in) */
				continue;
			}
			ss_move_in_try(&ss_streams[i]);
			if (ss_streams[i].moving != NULL && ss_streams[i].moving->answered)
				ss_moves_answered++;
		}
}

/* Whether a move-in's rows wait for decoding to catch up (the main loop looks soon). */
bool
shape_stream_moves_waiting(void)
{
	return ss_moves_answered > 0;
}

/*
 * A kept transaction moved some of the move-in's values out again: should
 * the move-in's snapshot see it, those values are not moved in (the
 * snapshot has no rows for them) and the transaction's second encoding
 * has no event for them either.
 */
static void
ss_note_moved_out(ShapeStream *s, int dep, List *out)
{
	MemoryContext old;
	ListCell   *lc;
	StringInfoData key;

	if (dep != s->moving->dependency || s->txn_pending == NULL)
		return;
	initStringInfo(&key);
	old = MemoryContextSwitchTo(s->context);
	foreach(lc, out)
	{
		SsValue    *v = lfirst(lc);

		resetStringInfo(&key);
		appendBinaryStringInfo(&key, v->key.data, v->key.len);
		if (ss_moving_value(s->moving, &key))
		{
			StringInfo	copy = makeStringInfo();

			appendBinaryStringInfo(copy, key.data, key.len);
			s->txn_pending->moved_out = lappend(s->txn_pending->moved_out, copy);
		}
	}
	MemoryContextSwitchTo(old);
	pfree(key.data);
}

/*
 * What the transaction did to one set, for one of its streams: the values
 * whose subquery condition held before it and does not after it move out
 * (an event), those for which it is the other way round move in (their
 * rows are read: ss_move_in_begin).  A value that entered and left within
 * the transaction moves nothing: the transaction was judged without it.
 */
static void
ss_stream_moves(ShapeStream *s, SsValueSet *set, int dep)
{
	bool		negated = s->subquery->plan->dependencies[dep].negated;
	List	   *out = NIL;
	List	   *entering = NIL;
	ListCell   *lc;

	if (s->rotate || !ss_touch(s) || (!s->ready && s->txn_pending->problem != NULL))
		return;					/* rotating, in its snapshot, or doomed */
	if (set->problem != NULL)
	{
		ss_rotate_unless_in_snapshot(s, SM_ROTATION_TABLE_CHANGED, set->problem);
		return;
	}
	if (negated && ((set->null_rows > 0) != (set->null_rows_before > 0) ||
					(set->nvalues + set->null_rows == 0) !=
					(set->nvalues_before + set->null_rows_before == 0)))
	{
		/* NOT IN of a NULL, or of nothing, concerns every row */
		ss_rotate_unless_in_snapshot(s, SM_ROTATION_MOVE_IN,
									 "its NOT IN subquery gained or lost a NULL, or became empty or not");
		return;
	}
	foreach(lc, set->txn_values)
	{
		SsValue    *v = lfirst(lc);
		bool		held = negated ? v->before == 0 : v->before > 0;
		bool		holds = negated ? v->count == 0 : v->count > 0;

		if (holds && !held)
			entering = lappend(entering, v);
		else if (held && !holds)
			out = lappend(out, v);
	}
	if (out != NIL)
	{
		ss_emit_move(s, dep, out, "move-out");
		if (ss_holding(s))
		{
			ss_emit_move_before(s, dep, out, "move-out");
			ss_note_moved_out(s, dep, out);
		}
	}
	if (entering != NIL)
		ss_move_in_begin(s, dep, entering);
	list_free(out);
	list_free(entering);
}

/* A value entered or left a set: the streams it routes follow. */
static void
ss_set_route_moved(SsValueSet *set, int id, SsValue *v)
{
	ListCell   *dc;

	foreach(dc, set->dependents)
	{
		ShapeStream *s = &ss_streams[lfirst_int(dc)];
		SsSubquery *q = s->subquery;

		if (s->in_use && q != NULL && q->route_sublink >= 0 &&
			q->sets[q->plan->sublinks[q->route_sublink].dependency] == id)
			ss_subquery_file(s, &v->key, v->count > 0);
	}
}

/*
 * At commit, before the streams publish (shape_stream_commit): the moves
 * of every set the transaction counted values in or out of.
 */
void
ss_sets_commit(void)
{
	ListCell   *lc;

	/* the moves of nested sets' values reach the sets above them first */
	if (ss_nnested > 0)
		ss_nested_cascade();
	foreach(lc, ss_sets_touched)
	{
		SsValueSet *set = lfirst(lc);
		int			id = ss_set_id(set);
		ListCell   *dc;
		ListCell   *vc;

		if (!set->skip_txn && (set->txn_values != NIL || set->problem != NULL ||
							   set->null_rows != set->null_rows_before))
			foreach(dc, set->dependents)
			{
				ShapeStream *s = &ss_streams[lfirst_int(dc)];

				if (!s->in_use || s->subquery == NULL)
					continue;
				for (int d = 0; d < s->subquery->plan->ndependencies; d++)
					if (s->subquery->sets[d] == id)
						ss_stream_moves(s, set, d);
			}
		/* values no row has any more leave the set, and their routes */
		foreach(vc, set->txn_values)
		{
			SsValue    *v = lfirst(vc);

			if (!set->skip_txn && (v->before > 0) != (v->count > 0))
				ss_set_route_moved(set, id, v);
			v->txn = 0;
			if (v->count == 0)
				ss_value_remove(set, v);
		}
		list_free(set->txn_values);
		set->txn_values = NIL;
		set->txn = 0;
	}
	list_free(ss_sets_touched);
	ss_sets_touched = NIL;
}

/* ------------------------------------------------------ catalog checks */

/*
 * What is wrong with the table one inner select reads, and those of its
 * own subqueries (`set` is its value set, or -1), as the current catalog
 * and the current role see them; NULL when nothing is.
 */
static const char *
ss_dependency_problem(const SubqueryDependency *dep, int set)
{
	const char *field;
	const char *moved;
	char	   *problem;

	if (!SearchSysCacheExists1(RELOID, ObjectIdGetDatum(dep->relid)))
		return "a table its subquery reads was dropped";
	for (int c = 0; c < dep->nread; c++)
		if (get_atttype(dep->relid, dep->read_attnums[c]) != dep->read_types[c])
			return "a column its subquery reads was dropped or changed type";
	if (OidIsValid(shape_table_not_logged_in_full(dep->relid)))
		return "a table its subquery reads no longer has REPLICA IDENTITY FULL";
	if (OidIsValid(shape_table_not_logged(dep->relid)))
		return "a table its subquery reads, or a partition of it, is unlogged";
	if (set >= 0 && (moved = ss_set_partitions_problem(ss_sets[set])) != NULL)
		return moved;			/* partitions attached or detached, at any level */
	if (shape_row_security_applies(dep->relid, GetUserId()))
		return "a table its subquery reads has row-level security that applies to its role";
	problem = shape_read_problem(dep->relid, dep->nread, dep->read_attnums, &field);
	if (problem != NULL)
		return problem;
	for (int d = 0; dep->nested != NULL && d < dep->nested->ndependencies; d++)
	{
		const char *nested = ss_dependency_problem(&dep->nested->dependencies[d], -1);

		if (nested != NULL)
			return nested;
	}
	return NULL;
}

/*
 * What is wrong with the tables the stream's subqueries read, at every
 * level, as the current catalog and the stream's role see them; NULL when
 * nothing is.  Runs as the stream's role.
 */
const char *
ss_subquery_problem(ShapeStream *s)
{
	const SubqueryPlan *plan;

	if (s->subquery == NULL)
		return NULL;
	plan = s->subquery->plan;
	for (int d = 0; d < plan->ndependencies; d++)
	{
		const char *problem = ss_dependency_problem(&plan->dependencies[d],
													s->subquery->sets[d]);

		if (problem != NULL)
			return problem;
	}
	return NULL;
}
