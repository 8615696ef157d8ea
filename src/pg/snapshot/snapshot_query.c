/*-------------------------------------------------------------------------
 *
 * snapshot_query.c
 *		A snapshot's transaction and query: what a shape's snapshot
 *		(snapshot_worker.c) and a subset query (subset_query.c) share.
 *
 * A snapshot runs in a REPEATABLE READ, READ ONLY transaction
 * (snapshot_begin), taken once its table is locked, which records
 * pg_current_snapshot() (the xmin, xmax and xip list that stitch the
 * snapshot to the replication stream) and the WAL insert position after
 * it.  The query is a tree built around the
 * validated, folded where clause (snap_build_query), planned and run by
 * the executor: no text is parsed again, so no name can bind to anything
 * but what was validated.  It runs as the shape's role (shape_sync.role),
 * in a security-restricted operation with search_path pinned to
 * pg_catalog, so the executor's own privilege checks apply, and within a
 * statement timeout.  The planner alone runs as the table's owner: what it
 * evaluates of the table's own code (index expressions and the like) runs
 * with the rights of whoever wrote it, and a table carrying code of an
 * untrusted role is refused (table_code.c).  A table whose row-level
 * security applies to the role is refused: the stream could not filter
 * its changes the same way.  Each row is encoded once (row_encoder.c) and
 * handed to the caller's SnapshotEmit.  A subset query adds its where
 * clause, ORDER BY, LIMIT and OFFSET to the shape's tree.
 *
 * Everything here runs in a snapshot worker (snapshot_worker.c), but
 * snapshot_scan also runs in a backend for encode_rows() (sql_api.c).
 *
 * IDENTIFICATION
 *	  src/pg/snapshot/snapshot_query.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/table.h"
#include "catalog/pg_inherits.h"
#include "executor/execExpr.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/optimizer.h"
#include "parser/parse_oper.h"
#include "parser/parse_relation.h"
#include "pgstat.h"
#include "storage/lmgr.h"
#include "rewrite/rewriteHandler.h"
#include "rewrite/rewriteManip.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timeout.h"

#include "eval_deadline.h"
#include "name_lookup.h"
#include "row_encoder.h"
#include "row_tags.h"
#include "shape_def.h"
#include "shape_relation.h"
#include "snapshot_query.h"
#include "table_code.h"

/* ----------------------------------------------------------------- scan */

/* Receives the snapshot query's rows and encodes each as it comes. */
typedef struct SnapshotReceiver
{
	DestReceiver pub;
	RowEncoder	enc;
	const AttrNumber *fetched;	/* attnum of each target list entry */
	int			nfetched;
	Datum	   *values;			/* by attnum - 1 */
	bool	   *nulls;
	StringInfoData message;
	SnapshotEmit emit;
	void	   *arg;
	RowTagger  *tagger;			/* a shape with subqueries: its rows' tags, */
	bool	   *active;			/* from its positions' conditions, which */
	StringInfoData tags;		/* follow the fetched columns */
} SnapshotReceiver;

static bool
snap_receive(TupleTableSlot *slot, DestReceiver *self)
{
	SnapshotReceiver *r = (SnapshotReceiver *) self;

	slot_getallattrs(slot);
	for (int c = 0; c < r->nfetched; c++)
	{
		r->values[r->fetched[c] - 1] = slot->tts_values[c];
		r->nulls[r->fetched[c] - 1] = slot->tts_isnull[c];
	}
	resetStringInfo(&r->message);
	if (r->tagger != NULL)
	{
		const SubqueryPlan *plan = r->tagger->plan;
		MemoryContext old = MemoryContextSwitchTo(r->enc.row_context);
		RowTags		tags;

		for (int p = 0; p < plan->npositions; p++)
		{
			bool		known = !slot->tts_isnull[r->nfetched + p];
			bool		holds = known && DatumGetBool(slot->tts_values[r->nfetched + p]);

			/* whether the condition, negated or not, is true (NULL is not) */
			r->active[p] = plan->positions[p].negated ? known && !holds : holds;
		}
		row_tags_make(r->tagger, r->values, r->nulls, r->active, &tags);
		resetStringInfo(&r->tags);
		row_tags_json(r->tagger, &tags, NULL, &r->tags);
		MemoryContextSwitchTo(old);
		/* (the encoder resets its row context once the row is written) */
		row_encoder_snapshot_row_with(&r->enc, r->values, r->nulls, r->tags.data, &r->message);
	}
	else
		row_encoder_snapshot_row(&r->enc, r->values, r->nulls, &r->message);
	r->emit(r->arg, r->message.data, r->message.len);
	return true;
}

static void
snap_receiver_startup(DestReceiver *self, int operation, TupleDesc typeinfo)
{
}

static void
snap_receiver_shutdown(DestReceiver *self)
{
}

static void
snap_receiver_destroy(DestReceiver *self)
{
}

/*
 * A subset query's ORDER BY (each key a column of the target list, with the
 * type's default ordering) and LIMIT/OFFSET.
 */
static void
snap_add_subset_clauses(Query *query, const SnapshotSubset *subset)
{
	for (int k = 0; k < subset->norder; k++)
	{
		const SnapshotOrder *o = &subset->order[k];
		TargetEntry *tle = NULL;
		SortGroupClause *sort = makeNode(SortGroupClause);
		Oid			lt;
		Oid			eq;
		Oid			gt;
		bool		hashable;
		ListCell   *lc;

		foreach(lc, query->targetList)
		{
			TargetEntry *t = lfirst(lc);

			if (((Var *) t->expr)->varattno == o->attnum)
				tle = t;
		}
		if (tle == NULL)
			elog(ERROR, "a subset's sort column %d is not fetched", o->attnum);
		get_sort_group_operators(exprType((Node *) tle->expr), true, true, false,
								 &lt, &eq, &gt, &hashable);
		if (tle->ressortgroupref == 0)
			tle->ressortgroupref = (Index) (k + 1);
		sort->tleSortGroupRef = tle->ressortgroupref;
		sort->eqop = eq;
		sort->sortop = o->descending ? gt : lt;
		sort->nulls_first = o->nulls_first;
		sort->hashable = hashable;
		query->sortClause = lappend(query->sortClause, sort);
	}
	if (subset->limit >= 0)
		query->limitCount = (Node *) makeConst(INT8OID, -1, InvalidOid, sizeof(int64),
											   Int64GetDatum(subset->limit), false,
											   FLOAT8PASSBYVAL);
	if (subset->offset > 0)
		query->limitOffset = (Node *) makeConst(INT8OID, -1, InvalidOid, sizeof(int64),
												Int64GetDatum(subset->offset), false,
												FLOAT8PASSBYVAL);
	query->limitOption = LIMIT_OPTION_COUNT;
}

/*
 * SELECT <the shape's and its key's columns> FROM ONLY <table> WHERE
 * <where>, built as a query tree around the validated, folded where tree:
 * no text is parsed again, so no name can resolve to anything but what was
 * validated.  The range table entry asks for SELECT on exactly the columns
 * read, for the executor's privilege check.
 */
static Query *
snap_build_query(Relation relation, const AttrNumber *fetched, int nfetched, Node *where,
				 const SnapshotSubset *subset, const SubqueryPlan *plan)
{
	ParseState *pstate = make_parsestate(NULL);
	ParseNamespaceItem *nsitem;
	RangeTblEntry *rte;
	RangeTblRef *rtr = makeNode(RangeTblRef);
	Query	   *query = makeNode(Query);
	TupleDesc	desc = RelationGetDescr(relation);
	Bitmapset  *where_cols = NULL;
	int			x = -1;

	/* a partitioned table's rows are its partitions'; any other table: ONLY */
	nsitem = addRangeTableEntryForRelation(pstate, relation, AccessShareLock, NULL,
										   relation->rd_rel->relkind == RELKIND_PARTITIONED_TABLE,
										   true);
	rte = nsitem->p_rte;
	for (int i = 0; i < nfetched; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, fetched[i] - 1);
		Var		   *var = makeVar(1, fetched[i], att->atttypid, att->atttypmod,
								  att->attcollation, 0);

		query->targetList = lappend(query->targetList,
									makeTargetEntry((Expr *) var, (AttrNumber) (i + 1),
													pstrdup(NameStr(att->attname)), false));
		rte->selectedCols = bms_add_member(rte->selectedCols,
										   fetched[i] - FirstLowInvalidHeapAttributeNumber);
	}
	if (where != NULL)
		pull_varattnos(where, 1, &where_cols);
	while ((x = bms_next_member(where_cols, x)) >= 0)
		rte->selectedCols = bms_add_member(rte->selectedCols, x);

	if (subset != NULL)
		snap_add_subset_clauses(query, subset);

	/* a shape with subqueries: each position's condition, after the columns */
	for (int p = 0; plan != NULL && p < plan->npositions; p++)
	{
		const SubqueryPosition *pos = &plan->positions[p];
		Expr	   *cond = pos->sublink >= 0 ?
			(Expr *) copyObject(plan->sublinks[pos->sublink].node) :
			(Expr *) copyObject(pos->expr);

		query->targetList = lappend(query->targetList,
									makeTargetEntry(cond,
													(AttrNumber) (list_length(query->targetList) + 1),
													psprintf("shape_sync_condition_%d", p), false));
	}
	query->hasSubLinks = plan != NULL || (where != NULL && checkExprHasSubLink(where));

	query->commandType = CMD_SELECT;
	query->querySource = QSRC_ORIGINAL;
	query->canSetTag = true;
	query->rtable = pstate->p_rtable;
	rtr->rtindex = 1;
	query->jointree = makeFromExpr(list_make1(rtr), where);
	free_parsestate(pstate);
	return query;
}

/* The n-th outer column the subqueries of `plan` compare, in sublink order. */
static AttrNumber
snap_sublinked_column(const SubqueryPlan *plan, int n)
{
	for (int i = 0; i < plan->nsublinks; i++)
	{
		int			ncolumns = plan->dependencies[plan->sublinks[i].dependency].ncolumns;

		if (n < ncolumns)
			return plan->sublinks[i].outer_attnums[n];
		n -= ncolumns;
	}
	elog(ERROR, "column %d of the subqueries out of range", n);
	return InvalidAttrNumber;
}

/* Whether a table the query reads, its subqueries' too, got policies. */
static bool
snap_has_security_quals(Node *node, void *context)
{
	ListCell   *lc;

	if (node == NULL)
		return false;
	if (IsA(node, Query))
	{
		foreach(lc, ((Query *) node)->rtable)
			if (((RangeTblEntry *) lfirst(lc))->securityQuals != NIL)
				return true;
		return query_tree_walker((Query *) node, snap_has_security_quals, context, 0);
	}
	return expression_tree_walker(node, snap_has_security_quals, context);
}

/*
 * A shape is shared by all its clients: never a row-filtered one.  Checked
 * for the current role, which reads the snapshot, by every snapshot, also
 * one that reads no rows (log=changes_only): its stream would otherwise
 * send what the policies hide.  With `force`, refused whatever the catalog
 * says: the rewriter found policies to apply.
 */
void
snapshot_refuse_row_security(const ShapeRelation *rel, bool force)
{
	if (force || shape_row_security_applies(rel->relid, GetUserId()))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("table %s has row-level security that applies to role \"%s\"",
						shape_quoted_relation(rel), GetUserNameFromId(GetUserId(), false)),
				 errdetail("A shape is shared by all its clients, so such a table is not served.")));
}

/* ------------------------------------------------- the per-row deadline */

/*
 * A client's where clause runs on every row the scan reads, and one row
 * may take no longer than shape_sync.where_evaluation_timeout here either,
 * as on the main thread (eval_deadline.c): a backtracking pattern must not
 * hold a worker of the pool, and its lock on the table, until the
 * statement timeout.  The executor has no hook per row, so each scan
 * node's filter, an ExprState the interpreter runs, is given an entry
 * point that brackets the evaluation (snap_qual_guarded).  The interpreter
 * replaces its entry point once it has checked the expression against the
 * first row (ExecInterpExprStillValid); the wrapper calls that check every
 * time and puts itself back.  Snapshots run with jit off, so every filter
 * is the interpreter's.
 */
static int	snap_watching = 0;	/* eval_deadline_watch calls of this job */
static bool snap_row_too_slow = false;

static Datum
snap_qual_guarded(ExprState *state, ExprContext *econtext, bool *isnull)
{
	Datum		result;

	eval_deadline_begin();
	result = ExecInterpExprStillValid(state, econtext, isnull);
	state->evalfunc = snap_qual_guarded;
	if (unlikely(eval_deadline_end()))
	{
		/* it ran past the deadline without looking at the cancel */
		snap_row_too_slow = true;
		ereport(ERROR,
				(errcode(ERRCODE_QUERY_CANCELED),
				 errmsg("the where clause took too long on one row")));
	}
	return result;
}

static void
snap_guard_expr(ExprState *state)
{
	if (state != NULL && state->evalfunc == ExecInterpExprStillValid)
		state->evalfunc = snap_qual_guarded;
}

static bool
snap_guard_planstate(PlanState *ps, void *context)
{
	if (ps == NULL)
		return false;
	snap_guard_expr(ps->qual);
	if (IsA(ps, IndexScanState))
		snap_guard_expr(((IndexScanState *) ps)->indexqualorig);
	else if (IsA(ps, IndexOnlyScanState))
		snap_guard_expr(((IndexOnlyScanState *) ps)->recheckqual);
	else if (IsA(ps, BitmapHeapScanState))
		snap_guard_expr(((BitmapHeapScanState *) ps)->bitmapqualorig);
	return planstate_tree_walker(ps, snap_guard_planstate, context);
}

bool
snapshot_deadline_caught(void)
{
	bool		expired = eval_deadline_end() || snap_row_too_slow;

	snap_row_too_slow = false;
	for (; snap_watching > 0; snap_watching--)
		eval_deadline_unwatch();
	return expired;
}

/*
 * Takes the locks planning would: the partitions' and every index's.  A
 * wait for another session's lock is the statement timeout's business,
 * not the where clause's deadline, which brackets planning.
 */
static void
snap_lock_for_planning(Oid relid)
{
	List	   *rels = get_rel_relkind(relid) == RELKIND_PARTITIONED_TABLE ?
		find_all_inheritors(relid, AccessShareLock, NULL) : list_make1_oid(relid);
	ListCell   *lc;

	foreach(lc, rels)
	{
		Relation	rel = try_table_open(lfirst_oid(lc), AccessShareLock);
		List	   *indexes;
		ListCell   *ic;

		if (rel == NULL)
			continue;			/* detached and dropped meanwhile */
		indexes = RelationGetIndexList(rel);
		foreach(ic, indexes)
			LockRelationOid(lfirst_oid(ic), AccessShareLock);
		table_close(rel, NoLock);
	}
}

void
snapshot_scan(const ShapeSpec *spec, const SnapshotSubset *subset, const char *handle,
			  SnapshotEmit emit, void *arg)
{
	ShapeRelation *rel = shape_relation_load(spec->relid, spec->ncolumns, spec->columns);
	Relation	relation;
	SnapshotReceiver receiver;
	AttrNumber *fetched;
	int			nfetched = 0;
	int			norder;
	Node	   *where;
	Query	   *query;
	List	   *rewritten;
	PlannedStmt *plan;
	QueryDesc  *qd;
	ShapeRoleSaved planner_user;
	Node	   *shape_where = spec->where_tree ? stringToNode(spec->where_tree) : NULL;
	SubqueryPlan *conditions = subquery_plan(shape_where, spec->relid);
	int			nsublinked = 0;

	snapshot_refuse_row_security(rel, false);

	memset(&receiver, 0, sizeof(receiver));
	receiver.pub.receiveSlot = snap_receive;
	receiver.pub.rStartup = snap_receiver_startup;
	receiver.pub.rShutdown = snap_receiver_shutdown;
	receiver.pub.rDestroy = snap_receiver_destroy;
	receiver.pub.mydest = DestNone;
	receiver.emit = emit;
	receiver.arg = arg;
	row_encoder_init(&receiver.enc, rel);
	if (subset != NULL && subset->move_in)
		row_encoder_set_move_in(&receiver.enc);
	else if (subset != NULL)
		row_encoder_set_snapshot_mark(&receiver.enc, subset->snapshot_mark);
	initStringInfo(&receiver.message);

	/* the shape's columns, the key columns and a subset's sort columns, each once */
	norder = subset != NULL ? subset->norder : 0;
	for (int i = 0; conditions != NULL && i < conditions->nsublinks; i++)
		nsublinked += conditions->dependencies[conditions->sublinks[i].dependency].ncolumns;
	fetched = palloc(sizeof(AttrNumber) * (rel->ncolumns + rel->nkeys + norder + nsublinked + 1));
	for (int i = 0; i < rel->ncolumns + rel->nkeys + norder + nsublinked; i++)
	{
		AttrNumber	attnum = i < rel->ncolumns ? rel->columns[i].attnum :
			i < rel->ncolumns + rel->nkeys ? rel->keys[i - rel->ncolumns] :
			i < rel->ncolumns + rel->nkeys + norder ?
			subset->order[i - rel->ncolumns - rel->nkeys].attnum :
			snap_sublinked_column(conditions, i - rel->ncolumns - rel->nkeys - norder);
		bool		dup = false;

		for (int j = 0; j < nfetched; j++)
			dup = dup || fetched[j] == attnum;
		if (!dup)
			fetched[nfetched++] = attnum;
	}
	receiver.fetched = fetched;
	receiver.nfetched = nfetched;
	receiver.values = palloc0(sizeof(Datum) * Max(rel->natts, 1));
	receiver.nulls = palloc(sizeof(bool) * Max(rel->natts, 1));
	memset(receiver.nulls, true, sizeof(bool) * Max(rel->natts, 1));

	if (conditions != NULL)
	{
		ListCell   *lc;

		/* the subqueries' tables' code, at every level, must be trusted too: the planner may run it */
		foreach(lc, subquery_relids(shape_where))
			table_code_check(lfirst_oid(lc));
		/* the rows' tags: the outer columns compared are fetched too */
		receiver.tagger = palloc(sizeof(RowTagger));
		row_tagger_init(receiver.tagger, conditions, spec->relid, handle);
		receiver.active = palloc(sizeof(bool) * conditions->npositions);
		initStringInfo(&receiver.tags);
	}

	relation = table_open(spec->relid, AccessShareLock);
	where = shape_where;
	if (subset != NULL && subset->where != NULL)
		where = where ? (Node *) make_andclause(list_make2(where, subset->where)) :
			subset->where;
	query = snap_build_query(relation, fetched, nfetched, where, subset, conditions);
	table_close(relation, NoLock);

	/*
	 * A table with row-level security marks the query hasRowSecurity even
	 * when none applies to the role (BYPASSRLS, the owner): only its plan's
	 * reuse depends on that.  Policies that apply are the RTE's
	 * securityQuals; the role checked above had none, unless the catalog
	 * changed since.
	 */
	rewritten = QueryRewrite(query);
	if (list_length(rewritten) != 1 ||
		((Query *) linitial(rewritten))->commandType != CMD_SELECT)
		elog(ERROR, "snapshot query of %s was rewritten unexpectedly",
			 shape_quoted_relation(rel));
	if (snap_has_security_quals(linitial(rewritten), NULL))
		snapshot_refuse_row_security(rel, true);
	snap_lock_for_planning(spec->relid);
	/* what planning evaluates of the table's own code runs as its owner (table_code.c) */
	shape_role_become(table_code_owner(spec->relid), &planner_user);
	/*
	 * Estimating selectivity runs the clause's operators on the column's
	 * statistics (every most common value and histogram bound): planning
	 * is one evaluation, within the same deadline as a row.
	 */
	eval_deadline_watch();
	snap_watching++;
	eval_deadline_begin();
	plan = pg_plan_query(linitial(rewritten), NULL, 0, NULL);
	if (unlikely(eval_deadline_end()))
	{
		snap_row_too_slow = true;
		ereport(ERROR,
				(errcode(ERRCODE_QUERY_CANCELED),
				 errmsg("the where clause took too long while the query was planned")));
	}
	snap_watching--;
	eval_deadline_unwatch();
	shape_role_restore(&planner_user);

	qd = CreateQueryDesc(plan, "shape_sync snapshot", GetActiveSnapshot(), InvalidSnapshot,
						 &receiver.pub, NULL, NULL, 0);
	ExecutorStart(qd, 0);
	(void) snap_guard_planstate(qd->planstate, NULL);
	eval_deadline_watch();
	snap_watching++;
	ExecutorRun(qd, ForwardScanDirection, 0, true);
	snap_watching--;
	eval_deadline_unwatch();
	ExecutorFinish(qd);
	ExecutorEnd(qd);
	FreeQueryDesc(qd);
}

/*
 * pg_current_snapshot()'s text, "xmin:xmax:xip,...", as the JSON members
 * "xmin":"..","xmax":"..","xip_list":[..] (snapshot-end, subset metadata).
 */
void
snapshot_visibility_json(StringInfo buf, const char *snapshot)
{
	char	   *copy = pstrdup(snapshot);
	char	   *xmax = strchr(copy, ':');
	char	   *xip;

	if (xmax == NULL || (xip = strchr(xmax + 1, ':')) == NULL)
		elog(ERROR, "unexpected snapshot text \"%s\"", snapshot);
	*xmax++ = '\0';
	*xip++ = '\0';
	appendStringInfoString(buf, "\"xmin\":");
	escape_json(buf, copy);
	appendStringInfoString(buf, ",\"xmax\":");
	escape_json(buf, xmax);
	appendStringInfoString(buf, ",\"xip_list\":[");
	for (char *tok = strtok(xip, ","), *first = tok; tok; tok = strtok(NULL, ","))
	{
		if (tok != first)
			appendStringInfoChar(buf, ',');
		escape_json(buf, tok);
	}
	appendStringInfoChar(buf, ']');
}

/* pg_current_snapshot()::text: the active snapshot, its xids widened to xid8 */
char *
snapshot_current_text(void)
{
	LOCAL_FCINFO(fcinfo, 0);
	Datum		snapshot;

	InitFunctionCallInfoData(*fcinfo, NULL, 0, InvalidOid, NULL, NULL);
	snapshot = pg_current_snapshot(fcinfo);
	return DatumGetCString(DirectFunctionCall1(pg_snapshot_out, snapshot));
}

/*
 * The shape's table, and its partitions, locked before the snapshot is
 * taken.  A table rewrite (ALTER TABLE ... TYPE, TRUNCATE) writes every
 * row again under its own transaction and is not MVCC-safe: to a snapshot
 * taken before it committed, the rewritten table looks empty, and the
 * stream carries no change for the rows it moved.  Locked first, a
 * rewrite that holds the table is waited for and is inside the snapshot,
 * and one that comes later waits for this transaction.
 */
static void
snapshot_lock_table(Oid relid)
{
	LockRelationOid(relid, AccessShareLock);
	if (!SearchSysCacheExists1(RELOID, ObjectIdGetDatum(relid)))
		ereport(ERROR,		/* its clients start over, as for a change */
				(errcode(ERRCODE_INVALID_TABLE_DEFINITION),
				 errmsg("the shape's table was dropped after the shape was made")));
	/* a plain table's query reads it alone (ONLY), not its inheritance children */
	if (get_rel_relkind(relid) == RELKIND_PARTITIONED_TABLE)
		(void) find_all_inheritors(relid, AccessShareLock, NULL);
}

/*
 * Starts a snapshot's transaction (a shape's or a subset's) on table
 * `relid`, locked first (snapshot_lock_table): REPEATABLE
 * READ, READ ONLY, Electric's display settings, search_path pinned to
 * pg_catalog, a statement timeout of timeout_ms (0: none), as `role`.  Returns
 * what pg_current_snapshot() and, in *insert_lsn, pg_current_wal_insert_lsn()
 * return, without a query to parse and plan (a third of a small shape's
 * snapshot).  The insert position, read after the snapshot was taken, is
 * past the commit record of every transaction the snapshot sees: the
 * stream stops checking visibility at the first commit at or beyond it.
 * (The server's last seen LSN is not moved on here: it names only what the
 * stream has published, see shape_table.c.)
 */
char *
snapshot_begin(Oid relid, Oid role, const char *activity, int timeout_ms,
			   ShapeRoleSaved *saved, uint64 *insert_lsn)
{
	char	   *snapshot_text;

	pgstat_report_activity(STATE_RUNNING, activity);
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	XactIsoLevel = XACT_REPEATABLE_READ;
	XactReadOnly = true;
	row_encoder_set_display_settings(PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SET);
	(void) set_config_option("search_path", "pg_catalog", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SET, true, 0, false);
	/* every filter the interpreter's, for the per-row deadline */
	(void) set_config_option("jit", "off", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SET, true, 0, false);
	if (timeout_ms > 0)
		enable_timeout_after(STATEMENT_TIMEOUT, timeout_ms);
	snapshot_lock_table(relid);
	PushActiveSnapshot(GetTransactionSnapshot());
	shape_role_become(role, saved);
	snapshot_text = snapshot_current_text();
	*insert_lsn = (uint64) GetXLogInsertRecPtr();
	return snapshot_text;
}

/* Ends what snapshot_begin started, committing. */
void
snapshot_end(const ShapeRoleSaved *saved)
{
	shape_role_restore(saved);
	if (get_timeout_active(STATEMENT_TIMEOUT))
		disable_timeout(STATEMENT_TIMEOUT, false);
	PopActiveSnapshot();
	CommitTransactionCommand();
}

/*
 * Under the snapshot just taken: the table is still as the shape was made
 * from it (its name, key and the columns it reads: a table renamed, a
 * column added or changed since would be read under the old name and
 * electric-schema, before the stream noticed), else
 * ERRCODE_INVALID_TABLE_DEFINITION; and the role may still read it, as
 * the catalog says now (the main thread checked it against the catalog it
 * resolved the shape with, which a replay's is older than: registry.c),
 * else ERRCODE_INSUFFICIENT_PRIVILEGE; and shape_sync.role is still the
 * role the shape was made for, else ERRCODE_INVALID_TABLE_DEFINITION too.
 */
void
snapshot_check_shape(const ShapeSpec *spec, const char *fingerprint, Oid role,
					 const char *relation)
{
	const char *field;
	char	   *problem;
	Oid			usable;

	if (strcmp(shape_definition_fingerprint(spec), fingerprint) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TABLE_DEFINITION),
				 errmsg("table %s was renamed or its definition changed after the shape was made",
						relation)));
	usable = shape_role_usable();
	if (OidIsValid(usable) && usable != role)
	{
		/*
		 * A reload of the configuration changed the role between the main
		 * thread and here (either may have read it first): the shape is
		 * made again, under the role the main thread reads now.
		 */
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TABLE_DEFINITION),
				 errmsg("\"shape_sync.role\" changed after the shape was made")));
	}
	problem = !OidIsValid(usable) ?
		pstrdup("\"shape_sync.role\" cannot be used") :
		shape_spec_read_problem(spec, &field);
	if (problem != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("a shape of table %s cannot be served: %s", relation, problem)));
	table_code_check(spec->relid);
}

/*
 * After an error in a job: what a backend's error recovery does, so that
 * the worker can take the next job.  The transaction's abort gives back
 * its locks, snapshots, SPI and the role and settings it changed.
 */
void
snapshot_worker_recover(void)
{
	HOLD_INTERRUPTS();
	disable_all_timeouts(false);
	AbortOutOfAnyTransaction();
	FlushErrorState();
	QueryCancelPending = false;
	name_lookup_failed();		/* a subset query's names may not exist */
	RESUME_INTERRUPTS();
}
