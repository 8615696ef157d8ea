/*-------------------------------------------------------------------------
 *
 * snapshot.c
 *		Initial snapshots of shapes, taken by a pool of background workers.
 *
 * Snapshots run in background workers, so that a large table never stalls
 * the main worker, and in a pool of up to shape_sync.max_snapshot_workers
 * long-lived ones, so that a small shape does not pay for starting a
 * backend (milliseconds, more than its snapshot): the main thread queues a
 * job per new shape (snapshot_jobs.c) and wakes an idle worker or starts
 * one (snapshot_pool_staff); a worker takes jobs one after the other and
 * exits after SNAPSHOT_WORKER_IDLE_MS without one.  A failed job is
 * recovered from as a backend recovers from an error (snapshot_worker_recover), and
 * the worker goes on.
 *
 * For each job the worker opens a REPEATABLE READ, READ ONLY transaction,
 * records pg_current_snapshot() (the xmin, xmax and xip list that will
 * stitch the snapshot to the replication stream) and runs the shape's
 * query.  The query is a tree built around the validated, folded
 * where clause (snap_build_query), planned and run by the executor: no
 * text is parsed again, so no name can bind to anything but what was
 * validated.  It runs as the shape's role (shape_sync.role), in a
 * security-restricted operation with search_path pinned to pg_catalog, so
 * the executor's own privilege checks apply, and within
 * shape_sync.snapshot_statement_timeout.  The planner alone runs as the
 * table's owner: what it evaluates of the table's own code (index
 * expressions and the like) runs with the rights of whoever wrote it, and
 * a table carrying code of an untrusted role is refused (table_code.c).  A table whose row-level
 * security applies to the role is refused: the stream could not filter
 * its changes the same way.  Each row is encoded once
 * (row_encoder.c) and appended to the shape's log; a chunk closes when the
 * running size (message bytes plus one per row) reaches
 * shape_sync.chunk_bytes_threshold, and each closed chunk is published at
 * once, so clients read the first chunks of a large table while the rest
 * is still being read.  The last chunk ends with the snapshot-end control
 * message.
 *
 * The worker holds a pin on the shape while it writes, so a shape dropped
 * meanwhile keeps its memory until the worker is done; the main thread
 * cancels the query of a dropped shape (SIGINT to the worker that takes
 * its job).  If the log memory
 * runs out, or anything else fails, the shape is marked FAILED with a
 * message the HTTP side returns to its clients, and the main worker is
 * woken to let them know.
 *
 * IDENTIFICATION
 *	  src/pg/snapshot.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <stdatomic.h>

#include "access/sysattr.h"
#include "access/table.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_class.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_type.h"
#include "executor/execExpr.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/optimizer.h"
#include "parser/parse_oper.h"
#include "parser/parse_node.h"
#include "parser/parse_relation.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "storage/latch.h"
#include "storage/lmgr.h"
#include "postmaster/interrupt.h"
#include "rewrite/rewriteHandler.h"
#include "storage/ipc.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/json.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"

#include "eval_deadline.h"
#include "guc.h"
#include "name_lookup.h"
#include "row_encoder.h"
#include "shape_role.h"
#include "server_metrics.h"
#include "shared_state.h"
#include "snapshot.h"
#include "subset_query.h"
#include "table_code.h"

/* What bgw_extra carries. */
typedef struct SnapshotWorkerArgs
{
	Oid			dboid;
} SnapshotWorkerArgs;

/* The definition, flattened into the DSM segment. */
typedef struct SnapshotDefinition
{
	Oid			relid;
	uint32		flags;
	int32		chunk_threshold;
	int32		ncolumns;
	int32		where_len;		/* -1: no where clause */
	/*
	 * AttrNumber columns[ncolumns], the where tree (nodeToString) and its
	 * NUL, then the shape's definition fingerprint and its NUL
	 */
} SnapshotDefinition;

/* How long the owner's ALTER TABLE may wait for its lock. */
#define REPLICA_IDENTITY_LOCK_TIMEOUT_MS	100
#define SNAPSHOT_REPLICA_IDENTITY_TRIES	3	/* when something keeps setting it back */
#define SNAPSHOT_ROOM_WAIT_MS	3000	/* for the main thread to free log memory */


/* The writer's state while appending to the shape log. */
typedef struct SnapshotWriter
{
	ShapeTable *table;
	ShapeSlot  *slot;
	uint32		slot_index;
	ShapeLog   *log;			/* the version it writes (no compaction yet) */
	uint32		chunk;			/* the open chunk's number */
	int64		chunk_bytes;	/* message bytes + 1 per row in the open chunk */
	int32		threshold;
	uint64		rows;
} SnapshotWriter;

static uint32 snap_slot = SHAPE_NO_SLOT;	/* pinned by this worker */
static SnapshotWriter snap_writer;	/* the job's */
static int	snap_entry = -1;	/* this worker's SnapshotWorkerEntry */
static volatile sig_atomic_t snap_in_job = false;

/* A worker that found no job for this long exits. */
#define SNAPSHOT_WORKER_IDLE_MS		30000

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
				 const SnapshotSubset *subset)
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

	query->commandType = CMD_SELECT;
	query->querySource = QSRC_ORIGINAL;
	query->canSetTag = true;
	query->rtable = pstate->p_rtable;
	rtr->rtindex = 1;
	query->jointree = makeFromExpr(list_make1(rtr), where);
	free_parsestate(pstate);
	return query;
}

/*
 * A shape is shared by all its clients: never a row-filtered one.  Checked
 * for the current role, which reads the snapshot, by every snapshot, also
 * one that reads no rows (log=changes_only): its stream would otherwise
 * send what the policies hide.  With `force`, refused whatever the catalog
 * says: the rewriter found policies to apply.
 */
static void
snap_refuse_row_security(const ShapeRelation *rel, bool force)
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
snapshot_scan(const ShapeSpec *spec, const SnapshotSubset *subset, SnapshotEmit emit, void *arg)
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
	ListCell   *lc;
	PlannedStmt *plan;
	QueryDesc  *qd;
	ShapeRoleSaved planner_user;

	snap_refuse_row_security(rel, false);

	memset(&receiver, 0, sizeof(receiver));
	receiver.pub.receiveSlot = snap_receive;
	receiver.pub.rStartup = snap_receiver_startup;
	receiver.pub.rShutdown = snap_receiver_shutdown;
	receiver.pub.rDestroy = snap_receiver_destroy;
	receiver.pub.mydest = DestNone;
	receiver.emit = emit;
	receiver.arg = arg;
	row_encoder_init(&receiver.enc, rel);
	if (subset != NULL)
		row_encoder_set_snapshot_mark(&receiver.enc, subset->snapshot_mark);
	initStringInfo(&receiver.message);

	/* the shape's columns, the key columns and a subset's sort columns, each once */
	norder = subset != NULL ? subset->norder : 0;
	fetched = palloc(sizeof(AttrNumber) * (rel->ncolumns + rel->nkeys + norder + 1));
	for (int i = 0; i < rel->ncolumns + rel->nkeys + norder; i++)
	{
		AttrNumber	attnum = i < rel->ncolumns ? rel->columns[i].attnum :
			i < rel->ncolumns + rel->nkeys ? rel->keys[i - rel->ncolumns] :
			subset->order[i - rel->ncolumns - rel->nkeys].attnum;
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

	relation = table_open(spec->relid, AccessShareLock);
	where = spec->where_tree ? stringToNode(spec->where_tree) : NULL;
	if (subset != NULL && subset->where != NULL)
		where = where ? (Node *) make_andclause(list_make2(where, subset->where)) :
			subset->where;
	query = snap_build_query(relation, fetched, nfetched, where, subset);
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
	foreach(lc, ((Query *) linitial(rewritten))->rtable)
	{
		if (((RangeTblEntry *) lfirst(lc))->securityQuals != NIL)
			snap_refuse_row_security(rel, true);
	}
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

/* ---------------------------------------------------------------- launch */

dsm_segment *
snapshot_definition_create(const ShapeSpec *spec, const char *fingerprint, int chunk_threshold)
{
	SnapshotDefinition *def;
	int			where_len = spec->where_tree ? (int) strlen(spec->where_tree) : -1;
	Size		size;
	dsm_segment *seg;
	char	   *p;

	size = sizeof(SnapshotDefinition) + sizeof(AttrNumber) * spec->ncolumns +
		Max(where_len, 0) + 1 + strlen(fingerprint) + 1;
	seg = dsm_create(size, 0);
	dsm_pin_mapping(seg);
	def = dsm_segment_address(seg);
	def->relid = spec->relid;
	def->flags = spec->flags;
	def->chunk_threshold = chunk_threshold;
	def->ncolumns = spec->ncolumns;
	def->where_len = where_len;
	p = (char *) (def + 1);
	memcpy(p, spec->columns, sizeof(AttrNumber) * spec->ncolumns);
	p += sizeof(AttrNumber) * spec->ncolumns;
	if (where_len >= 0)
		memcpy(p, spec->where_tree, where_len + 1);
	else
		*p = '\0';
	p += Max(where_len, 0) + 1;
	memcpy(p, fingerprint, strlen(fingerprint) + 1);
	return seg;
}

/* ------------------------------------------------------- pool (main thread) */

static BackgroundWorkerHandle *pool_handles[SNAPSHOT_WORKERS_MAX];	/* started by
																	 * this process */
static bool pool_warned_no_worker = false;

static bool
snap_pool_has_pid(SnapshotJobs *q, int32 pid)
{
	for (int i = 0; i < SNAPSHOT_WORKERS_MAX; i++)
		if (atomic_load_explicit(&q->workers[i].pid, memory_order_acquire) == pid)
			return true;
	return false;
}

static BackgroundWorkerHandle *
pool_start_worker(void)
{
	BackgroundWorker worker;
	BackgroundWorkerHandle *handle;
	SnapshotWorkerArgs args = {MyDatabaseId};

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	strlcpy(worker.bgw_library_name, "shape_sync", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "shape_sync_snapshot_main", BGW_MAXLEN);
	strlcpy(worker.bgw_name, "shape_sync snapshot worker", BGW_MAXLEN);
	strlcpy(worker.bgw_type, "shape_sync snapshot", BGW_MAXLEN);
	worker.bgw_notify_pid = MyProcPid;
	StaticAssertStmt(sizeof(SnapshotWorkerArgs) <= BGW_EXTRALEN, "worker arguments too large");
	memcpy(worker.bgw_extra, &args, sizeof(args));
	if (!RegisterDynamicBackgroundWorker(&worker, &handle))
		return NULL;
	return handle;
}

/*
 * Sees that the queued snapshot jobs have workers: wakes an idle worker
 * for each, and starts more, up to shape_sync.max_snapshot_workers, for
 * the rest.  Main thread; cheap when nothing is queued.
 */
void
snapshot_pool_staff(void)
{
	SnapshotJobs *q = &shape_sync_shared->snapshot_jobs;
	uint32		queued;
	int			live = 0;		/* workers in the pool's entries */
	int			idle = 0;		/* ... waiting for a job */
	int			starting = 0;	/* started here, not in the entries yet */
	int			woken = 0;

	/* the jobs queued before, the entries after: see snapshot_jobs.c */
	atomic_thread_fence(memory_order_seq_cst);
	queued = snapshot_jobs_queued(q);
	for (int i = 0; i < SNAPSHOT_WORKERS_MAX; i++)
	{
		SnapshotWorkerEntry *w = &q->workers[i];

		if (atomic_load_explicit(&w->pid, memory_order_acquire) == 0)
			continue;
		live++;
		if (atomic_load_explicit(&w->job, memory_order_acquire) == 0)
			idle++;
	}
	for (int i = 0; i < SNAPSHOT_WORKERS_MAX; i++)
	{
		pid_t		pid;
		BgwHandleStatus status;

		if (pool_handles[i] == NULL)
			continue;
		status = GetBackgroundWorkerPid(pool_handles[i], &pid);
		if (status == BGWH_STOPPED)
		{
			pfree(pool_handles[i]);
			pool_handles[i] = NULL;
		}
		else if (status == BGWH_NOT_YET_STARTED ||
				 (status == BGWH_STARTED && !snap_pool_has_pid(q, (int32) pid)))
			starting++;
	}
	if (queued == 0)
		return;
	/* one idle worker woken per job (a woken one may still look idle) */
	for (int i = 0; i < SNAPSHOT_WORKERS_MAX && woken < (int) queued; i++)
	{
		SnapshotWorkerEntry *w = &q->workers[i];
		void	   *wakeup;

		if (atomic_load_explicit(&w->pid, memory_order_acquire) == 0 ||
			atomic_load_explicit(&w->job, memory_order_acquire) != 0)
			continue;
		wakeup = atomic_load_explicit(&w->wakeup, memory_order_acquire);
		if (wakeup != NULL)
		{
			SetLatch((Latch *) wakeup);
			woken++;
		}
	}
	/* and more workers for jobs that neither an idle nor a starting one covers */
	while (idle + starting < (int) queued &&
		   live + starting < shape_sync_max_snapshot_workers)
	{
		int			free_handle;
		MemoryContext old;

		for (free_handle = 0; free_handle < SNAPSHOT_WORKERS_MAX; free_handle++)
			if (pool_handles[free_handle] == NULL)
				break;
		if (free_handle == SNAPSHOT_WORKERS_MAX)
			break;
		old = MemoryContextSwitchTo(TopMemoryContext);
		pool_handles[free_handle] = pool_start_worker();
		MemoryContextSwitchTo(old);
		if (pool_handles[free_handle] == NULL)
		{
			if (!pool_warned_no_worker && live == 0)
				ereport(WARNING,
						(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
						 errmsg("no background worker slot is free for a shape snapshot"),
						 errhint("Consider increasing the configuration parameter \"%s\".",
								 "max_worker_processes")));
			pool_warned_no_worker = true;
			break;
		}
		pool_warned_no_worker = false;
		starting++;
	}
}

/* Cancels the snapshot of a shape that was dropped, if a worker takes it. */
void
snapshot_pool_cancel(uint32 slot, uint32 generation)
{
	int32		pid = snapshot_worker_cancel(&shape_sync_shared->snapshot_jobs,
											 snapshot_job_key(slot, generation));

	/*
	 * The worker may have moved on to another job meanwhile: the cancel
	 * names this one, so that one is not taken for cancelled (snap_run_job).
	 */
	if (pid != 0)
		kill(pid, SIGINT);
}

/*
 * A restarted main worker retires every shape of its previous life: the
 * snapshots still being taken for them are cancelled.
 */
void
snapshot_pool_cancel_all(void)
{
	SnapshotJobs *q = &shape_sync_shared->snapshot_jobs;

	for (int i = 0; i < SNAPSHOT_WORKERS_MAX; i++)
	{
		uint64		job = atomic_load_explicit(&q->workers[i].job, memory_order_acquire);
		int32		pid;

		if (job != 0 && (pid = snapshot_worker_cancel(q, job)) != 0)
			kill(pid, SIGINT);
	}
}

/* ---------------------------------------------------------------- worker */

static void
snap_fail(SnapshotWriter *w, RefusalReason reason, const char *message)
{
	ShapeSlot  *slot = w->slot;

	if (shape_table_state(w->table, w->slot_index) != SHAPE_SNAPSHOTTING)
		return;
	slot->error_reason = reason;
	strlcpy(slot->error, message, sizeof(slot->error));
	if (!shape_table_transition(w->table, w->slot_index, SHAPE_SNAPSHOTTING, SHAPE_FAILED))
		return;					/* retired meanwhile */
	shape_table_mark_dirty(w->table, w->slot_index);
	shape_sync_wake_worker();
}

/* Publishes what was appended and tells the main worker. */
static void
snap_publish(SnapshotWriter *w, LogOffset last, uint32 flags)
{
	slog_publish(w->log, last, flags);
	shape_table_mark_dirty(w->table, w->slot_index);
	shape_sync_wake_worker();
}

/*
 * After an append that found the arena full: asks the main thread for room
 * (it evicts the least recently read shapes, see registry.c) and waits a
 * little; the caller then tries again.  Past SNAPSHOT_ROOM_WAIT_MS, or for
 * anything but a full arena, raises the error.
 */
static void
snap_wait_for_room(SnapshotWriter *w, SlogResult res, TimestampTz *since)
{
	ShapeLogArena *arena = w->table->arena;

	if (res == SLOG_FULL && shape_table_log_blocks(w->table, w->slot_index) + 8 < arena->nblocks &&
		shape_sync_shape_eviction == SHAPE_EVICTION_LRU)
	{
		TimestampTz now = GetCurrentTimestamp();

		if (*since == 0)
			*since = now;
		if (!TimestampDifferenceExceeds(*since, now, SNAPSHOT_ROOM_WAIT_MS))
		{
			uint32		want = 16;
			uint32		cur = atomic_load(&w->table->blocks_wanted);

			while (cur < want && !atomic_compare_exchange_weak(&w->table->blocks_wanted, &cur, want))
				;
			shape_sync_wake_worker();
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, 10,
							 PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
			return;
		}
	}
	if (res == SLOG_FULL && shape_table_log_blocks(w->table, w->slot_index) + 8 < arena->nblocks)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("shape log memory is full"),
				 errdetail("Other shapes hold the rest of the %d MB set by \"%s\".",
						   shape_sync_log_memory, "shape_sync.log_memory"),
				 errhint("Increase \"%s\", or drop shapes that are no longer used.",
						 "shape_sync.log_memory")));
	ereport(ERROR,
			(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
			 errmsg("shape is too large for the shape log memory"),
			 errdetail("The snapshot of relation \"%s\" needs more than the %d MB set by \"%s\".",
					   w->slot->relation, shape_sync_log_memory, "shape_sync.log_memory"),
			 errhint("Increase \"%s\", or narrow the shape with a where clause or a column list.",
					 "shape_sync.log_memory")));
}

static void
snap_append(SnapshotWriter *w, LogOffset offset, uint32 kind, const char *data, uint32 len)
{
	TimestampTz since = 0;
	SlogResult	res;

	while ((res = slog_append(w->table->arena, w->log, offset, kind, data, len)) != SLOG_OK)
		snap_wait_for_room(w, res, &since);
}

static void
snap_close_chunk(SnapshotWriter *w, LogOffset end)
{
	TimestampTz since = 0;
	SlogResult	res;

	while ((res = slog_close_chunk(w->table->arena, w->log, end)) != SLOG_OK)
		snap_wait_for_room(w, res, &since);
}

static void
snap_emit(void *arg, const char *message, int len)
{
	SnapshotWriter *w = arg;
	LogOffset	offset = {0, w->chunk};

	snap_append(w, offset, SLOG_RECORD_CHANGE, message, (uint32) len);
	w->rows++;
	w->chunk_bytes += len + 1;
	if (w->chunk_bytes >= w->threshold)
	{
		snap_close_chunk(w, offset);
		atomic_store_explicit(&w->slot->snapshot_rows, w->rows, memory_order_relaxed);
		snap_publish(w, offset, 0);
		w->chunk++;
		w->chunk_bytes = 0;
		if (shape_table_state(w->table, w->slot_index) != SHAPE_SNAPSHOTTING)
			ereport(ERROR,
					(errcode(ERRCODE_QUERY_CANCELED),
					 errmsg("shape %s was dropped during its snapshot", w->slot->handle)));
	}
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

/* The snapshot-end control message of a snapshot. */
static void
snap_end_message(StringInfo buf, const char *snapshot)
{
	appendStringInfoString(buf, "{\"headers\":{\"control\":\"snapshot-end\",");
	snapshot_visibility_json(buf, snapshot);
	appendStringInfoString(buf, "}}");
}

/*
 * Shapes need the old row of every update and delete, to tell rows moving
 * out of a where clause and to send old values.  When the operator lets it
 * (shape_sync.manage_replica_identity), the worker sets REPLICA IDENTITY
 * FULL on the table, in a transaction of its own that commits before the
 * snapshot is taken, so that every change the snapshot does not see is
 * logged in full.  The ALTER TABLE runs as the table's owner, in a
 * security-restricted operation, and waits at most
 * REPLICA_IDENTITY_LOCK_TIMEOUT_MS for its lock: it never queues behind a
 * long transaction, holding up every query of the table behind it.
 */
static void
snap_set_replica_identity_full(Oid relid)
{
	Relation	rel;
	char		ident;
	Oid			owner;
	char	   *name;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	rel = table_open(relid, AccessShareLock);
	ident = rel->rd_rel->relreplident;
	owner = rel->rd_rel->relowner;
	name = quote_qualified_identifier(get_namespace_name(RelationGetNamespace(rel)),
									  RelationGetRelationName(rel));
	table_close(rel, AccessShareLock);
	if (ident != REPLICA_IDENTITY_FULL)
	{
		ShapeRoleSaved saved;

		pgstat_report_activity(STATE_RUNNING, "setting REPLICA IDENTITY FULL for a shape");
		(void) set_config_option("lock_timeout",
								 psprintf("%d", REPLICA_IDENTITY_LOCK_TIMEOUT_MS),
								 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_LOCAL, true, 0, false);
		/* nor behind a synchronous standby that does not answer */
		(void) set_config_option("synchronous_commit", "local",
								 PGC_USERSET, PGC_S_SESSION, GUC_ACTION_LOCAL, true, 0, false);
		shape_role_become(owner, &saved);
		if (SPI_connect() != SPI_OK_CONNECT)
			elog(ERROR, "SPI_connect failed");
		PushActiveSnapshot(GetTransactionSnapshot());
		if (SPI_execute(psprintf("ALTER TABLE ONLY %s REPLICA IDENTITY FULL", name),
						false, 0) != SPI_OK_UTILITY)
			elog(ERROR, "could not set REPLICA IDENTITY FULL on %s", name);
		SPI_finish();
		PopActiveSnapshot();
		shape_role_restore(&saved);
		ereport(LOG,
				(errmsg("shape_sync set REPLICA IDENTITY FULL on table %s", name),
				 errdetail("Shapes need the old values of updated and deleted rows, and \"%s\" is on.",
						   "shape_sync.manage_replica_identity")));
	}
	CommitTransactionCommand();
}

/* The same for each partition of a partitioned table. */
static void
snap_ensure_replica_identity_full(Oid relid)
{
	for (int tables = 0; tables < 100000; tables++)
	{
		Oid			not_full;

		SetCurrentStatementStartTimestamp();
		StartTransactionCommand();
		not_full = shape_table_not_logged_in_full(relid);
		CommitTransactionCommand();
		if (!OidIsValid(not_full))
			return;
		snap_set_replica_identity_full(not_full);
	}
}

/* Runs at exit, whatever the path: fail an unfinished shape, drop the pin. */
static void
snap_on_exit(int code, Datum arg)
{
	ShapeTable *table = shape_sync_shared->table;
	SnapshotWriter *w = (SnapshotWriter *) DatumGetPointer(arg);

	server_metrics_detach_process();
	if (snap_entry >= 0)
		snapshot_worker_release(&shape_sync_shared->snapshot_jobs, snap_entry);
	snap_entry = -1;
	subset_abandon();
	if (snap_slot == SHAPE_NO_SLOT)
		return;
	snap_fail(w, REFUSAL_SNAPSHOT_FAILED, "The snapshot worker stopped before the snapshot was complete, please retry");
	shape_table_unpin(table, snap_slot);
	snap_slot = SHAPE_NO_SLOT;
	shape_sync_wake_worker();
}

/*
 * What the shape's clients are told of a failed snapshot: a reason
 * (refusal.h) and a sentence.  What a client can change (a narrower shape)
 * is invalid, what it may not read forbidden, what may pass (memory, a busy
 * table) unavailable; a table changed since the shape was made means the
 * shape is made again (must-refetch).
 */
static RefusalReason
snap_failure(const ErrorData *edata, int64 elapsed_ms, char *message, size_t len)
{
	if (edata->sqlerrcode == ERRCODE_INVALID_TABLE_DEFINITION)
	{
		/* snapshot_check_shape: the table changed since the shape was made */
		/* not an error of the definition: its clients start over (409) */
		snprintf(message, len, "%s", edata->message);
		return REFUSAL_MUST_REFETCH;
	}
	switch (edata->sqlerrcode)
	{
		case ERRCODE_PROGRAM_LIMIT_EXCEEDED:
			snprintf(message, len, "%s: %s %s", edata->message,
					 edata->detail ? edata->detail : "", edata->hint ? edata->hint : "");
			return REFUSAL_SNAPSHOT_INVALID;
		case ERRCODE_OUT_OF_MEMORY:
			snprintf(message, len, "%s: %s %s", edata->message,
					 edata->detail ? edata->detail : "", edata->hint ? edata->hint : "");
			return REFUSAL_SNAPSHOT_UNAVAILABLE;
		case ERRCODE_QUERY_CANCELED:
			if (shape_sync_snapshot_statement_timeout > 0 &&
				elapsed_ms >= shape_sync_snapshot_statement_timeout)
			{
				snprintf(message, len,
						 "The shape's snapshot took longer than the %d ms that shape_sync.snapshot_statement_timeout allows; narrow the shape with a where clause",
						 shape_sync_snapshot_statement_timeout);
				return REFUSAL_SNAPSHOT_INVALID;
			}
			snprintf(message, len, "The shape's snapshot was cancelled, please retry");
			return REFUSAL_SNAPSHOT_UNAVAILABLE;
		case ERRCODE_INSUFFICIENT_PRIVILEGE:
			snprintf(message, len, "Forbidden: %s", edata->message);
			return REFUSAL_SNAPSHOT_FORBIDDEN;
		case ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE:
			snprintf(message, len, "%s. %s", edata->message, edata->hint ? edata->hint : "");
			return REFUSAL_SNAPSHOT_INVALID;
		case ERRCODE_T_R_SERIALIZATION_FAILURE:
			snprintf(message, len, "The shape's snapshot could not be taken: %s, please retry",
					 edata->message);
			return REFUSAL_SNAPSHOT_UNAVAILABLE;
		case ERRCODE_LOCK_NOT_AVAILABLE:
			snprintf(message, len,
					 "The table is in use: REPLICA IDENTITY FULL could not be set within %d ms, please retry",
					 REPLICA_IDENTITY_LOCK_TIMEOUT_MS);
			return REFUSAL_SNAPSHOT_UNAVAILABLE;
	}
	if (ERRCODE_TO_CATEGORY(edata->sqlerrcode) == ERRCODE_DATA_EXCEPTION)
	{
		/* the where clause failed on a row (a division by zero, a value it cannot cast) */
		snprintf(message, len, "The shape's where clause failed on a row of the table: %s",
				 edata->message);
		return REFUSAL_SNAPSHOT_INVALID;
	}
	snprintf(message, len, "The shape's snapshot failed: %s", edata->message);
	return REFUSAL_SNAPSHOT_FAILED;
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
 * Starts a snapshot's transaction (a shape's or a subset's): REPEATABLE
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
snapshot_begin(Oid role, const char *activity, int timeout_ms, ShapeRoleSaved *saved,
			   uint64 *insert_lsn)
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
 * else ERRCODE_INSUFFICIENT_PRIVILEGE.
 */
void
snapshot_check_shape(const ShapeSpec *spec, const char *fingerprint, Oid role,
					 const char *relation)
{
	const char *field;
	char	   *problem;

	if (strcmp(shape_definition_fingerprint(spec), fingerprint) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TABLE_DEFINITION),
				 errmsg("table %s was renamed or its definition changed after the shape was made",
						relation)));
	problem = shape_role_usable() != role ?
		pstrdup("\"shape_sync.role\" changed or cannot be used") :
		shape_spec_read_problem(spec, &field);
	if (problem != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("a shape of table %s cannot be served: %s", relation, problem)));
	table_code_check(spec->relid);
}

/*
 * The snapshot itself: in a REPEATABLE READ, READ ONLY transaction, as
 * the shape's role, within shape_sync.snapshot_statement_timeout.  A table
 * whose replica identity another session set back from FULL between this
 * worker's ALTER TABLE and the snapshot gets it set again and another
 * snapshot, up to SNAPSHOT_REPLICA_IDENTITY_TRIES times; then the shape
 * fails with a 503, which clients retry.
 */
static void
snap_take(SnapshotWriter *writer, const SnapshotJob *job, const ShapeSpec *spec,
		  const char *fingerprint, TimestampTz started)
{
	ShapeTable *table = writer->table;
	ShapeRoleSaved saved;
	char	   *snapshot_text;
	StringInfoData end;
	LogOffset	offset;
	Relation	rel;
	Oid			not_full;

	for (int attempt = 1;; attempt++)
	{
		if (job->flags & SNAPSHOT_JOB_MANAGE_REPLICA_IDENTITY)
			snap_ensure_replica_identity_full(spec->relid);

		snapshot_text = snapshot_begin((Oid) job->role, "taking a shape snapshot",
									   shape_sync_snapshot_statement_timeout, &saved,
									   &writer->slot->snapshot_lsn);

		/*
		 * What the stream needs must still hold, now that the snapshot is
		 * taken: the table as the shape was made from it, read by the role
		 * (snapshot_check_shape), and old rows logged in full.
		 */
		rel = table_open(spec->relid, AccessShareLock);
		snapshot_check_shape(spec, fingerprint, (Oid) job->role, writer->slot->relation);
		not_full = shape_table_not_logged_in_full(spec->relid);
		if (!OidIsValid(not_full))
			break;
		if (!(job->flags & SNAPSHOT_JOB_MANAGE_REPLICA_IDENTITY))
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("table \"%s\" does not have REPLICA IDENTITY FULL any more",
							get_rel_name(not_full)),
					 errhint("The database operator can run ALTER TABLE ... REPLICA IDENTITY FULL.")));
		if (attempt == SNAPSHOT_REPLICA_IDENTITY_TRIES)
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("the replica identity of table \"%s\" was changed from FULL while the snapshot was taken",
							get_rel_name(not_full))));

		/* set back meanwhile by someone else: set it again, take another snapshot */
		table_close(rel, NoLock);
		shape_role_restore(&saved);
		if (get_timeout_active(STATEMENT_TIMEOUT))
			disable_timeout(STATEMENT_TIMEOUT, false);
		PopActiveSnapshot();
		AbortCurrentTransaction();
	}
	table_close(rel, NoLock);

	/* log=changes_only: the snapshot is its end message alone */
	if (spec->flags & SHAPE_FLAG_CHANGES_ONLY)
		snap_refuse_row_security(shape_relation_load(spec->relid, spec->ncolumns,
													 spec->columns), false);
	else
		snapshot_scan(spec, NULL, snap_emit, writer);

	initStringInfo(&end);
	snap_end_message(&end, snapshot_text);
	offset.tx = 0;
	offset.op = writer->chunk;
	snap_append(writer, offset, SLOG_RECORD_CONTROL, end.data, (uint32) end.len);
	snap_close_chunk(writer, offset);
	atomic_store_explicit(&writer->slot->snapshot_rows, writer->rows, memory_order_relaxed);
	writer->slot->snapshot_ms = (GetCurrentTimestamp() - started) / 1000;

	snapshot_end(&saved);

	/*
	 * Publish, then hand over: the main thread takes the pen when it sees
	 * READY, and must find the whole snapshot published by then.  Every
	 * chunk is closed, so clients read them all now; what comes after the
	 * snapshot is the main thread's to publish (SLOG_SNAPSHOT_DONE, in
	 * ss_take_over), once it has stitched on the transactions it kept
	 * meanwhile: until then a reader at the end of the snapshot waits,
	 * instead of being told it is up to date past commits its log does not
	 * hold yet.
	 */
	slog_publish(writer->log, LOG_OFFSET_SNAPSHOT_END, 0);
	if (!shape_table_transition(table, job->slot, SHAPE_SNAPSHOTTING, SHAPE_READY))
		return;					/* retired while we finished: it stays retired */
	shape_table_mark_dirty(table, job->slot);
	shape_sync_wake_worker();
	pgstat_report_activity(STATE_IDLE, NULL);
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

/*
 * One job: the snapshot of one shape.  A shape dropped before or while it
 * is taken ends it quietly; a failure fails the shape with what its
 * clients are told (snap_failure), and the worker goes on.
 */
static void
snap_run_job(const SnapshotJob *job, MemoryContext job_context)
{
	ShapeTable *table = shape_sync_shared->table;
	TimestampTz started = GetCurrentTimestamp();
	dsm_segment *volatile seg = NULL;
	SnapshotDefinition *def;
	ShapeSpec	spec;
	char	   *fingerprint;

	MemoryContextSwitchTo(job_context);
	if (!shape_table_pin(table, job->slot, job->generation))
		return;					/* the shape was dropped before we started */
	snap_slot = job->slot;
	memset(&snap_writer, 0, sizeof(snap_writer));
	snap_writer.table = table;
	snap_writer.slot = &table->slots[job->slot];
	snap_writer.slot_index = job->slot;
	snap_writer.log = shape_table_log(table, job->slot);
	sm_add(SM_SNAPSHOTS_STARTED, 0, 1);

	PG_TRY();
	{
		seg = dsm_attach((dsm_handle) job->definition);
		if (seg == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					 errmsg("could not map the definition of shape %s", snap_writer.slot->handle)));
		def = dsm_segment_address(seg);
		memset(&spec, 0, sizeof(spec));
		spec.relid = def->relid;
		spec.flags = def->flags;
		spec.ncolumns = def->ncolumns;
		spec.columns = palloc(sizeof(AttrNumber) * Max(def->ncolumns, 1));
		memcpy(spec.columns, def + 1, sizeof(AttrNumber) * def->ncolumns);
		spec.where_tree = def->where_len < 0 ? NULL :
			pstrdup((char *) (def + 1) + sizeof(AttrNumber) * def->ncolumns);
		fingerprint = pstrdup((char *) (def + 1) + sizeof(AttrNumber) * def->ncolumns +
							  Max(def->where_len, 0) + 1);
		snap_writer.threshold = def->chunk_threshold;
		dsm_detach(seg);
		seg = NULL;

		snap_take(&snap_writer, job, &spec, fingerprint, started);
	}
	PG_CATCH();
	{
		ErrorData  *edata;
		char		message[SHAPE_ERROR_LEN];
		RefusalReason reason;
		bool		too_slow;

		MemoryContextSwitchTo(job_context);
		edata = CopyErrorData();
		too_slow = snapshot_deadline_caught();
		snapshot_worker_recover();
		if (seg != NULL)
			dsm_detach(seg);
		if (shape_table_state(table, job->slot) != SHAPE_SNAPSHOTTING)
		{
			/* dropped (rotated, evicted, deleted): nobody waits for it */
			ereport(DEBUG1,
					(errmsg_internal("shape %s: snapshot stopped, the shape was dropped: %s",
									 snap_writer.slot->handle, edata->message)));
		}
		else
		{
			int64		elapsed_ms = (GetCurrentTimestamp() - started) / 1000;

			if (too_slow)
			{
				reason = REFUSAL_SNAPSHOT_INVALID;
				snprintf(message, sizeof(message),
						 "The shape's where clause took longer than the %d ms that shape_sync.where_evaluation_timeout allows on one row",
						 shape_sync_where_evaluation_timeout);
			}
			else if (edata->sqlerrcode == ERRCODE_QUERY_CANCELED &&
				!snapshot_worker_cancelled(&shape_sync_shared->snapshot_jobs, snap_entry,
										   snapshot_job_key(job->slot, job->generation)) &&
				!(shape_sync_snapshot_statement_timeout > 0 &&
				  elapsed_ms >= shape_sync_snapshot_statement_timeout))
			{
				/*
				 * A cancel meant for this worker's previous job: the
				 * shape is made again at once, by its clients (409),
				 * not remembered as failed.
				 */
				reason = REFUSAL_MUST_REFETCH;
				snprintf(message, sizeof(message),
						 "The shape's snapshot was interrupted, please retry");
			}
			else
				reason = snap_failure(edata, elapsed_ms, message, sizeof(message));
			snap_fail(&snap_writer, reason, message);
			sm_add(SM_SNAPSHOTS_FAILED, 0, 1);
			sm_add(SM_ERRORS, SM_ERROR_SNAPSHOT, 1);
			/* the main thread logs the shape's failure; the cause, here */
			ereport(LOG,
					(errmsg("snapshot of shape %s failed: %s", snap_writer.slot->handle,
							edata->message),
					 edata->detail ? errdetail_internal("%s", edata->detail) : 0));
		}
		shape_table_unpin(table, job->slot);
		snap_slot = SHAPE_NO_SLOT;
		shape_sync_wake_worker();
		pgstat_report_activity(STATE_IDLE, NULL);
		return;
	}
	PG_END_TRY();

	sm_add(SM_SNAPSHOT_ROWS, 0, snap_writer.rows);
	sm_observe(SM_SNAPSHOT_SECONDS, 0, (double) (GetCurrentTimestamp() - started) / 1e6);
	ereport(DEBUG1,
			(errmsg_internal("shape %s: snapshot of %llu rows in %lld ms",
							 snap_writer.slot->handle, (unsigned long long) snap_writer.rows,
							 (long long) snap_writer.slot->snapshot_ms)));
	shape_table_unpin(table, job->slot);
	snap_slot = SHAPE_NO_SLOT;
}

/*
 * SIGTERM: a worker in the middle of a snapshot stops at once, as any
 * backend does (die); an idle one leaves its loop and exits quietly.
 */
static void
snap_handle_sigterm(SIGNAL_ARGS)
{
	if (snap_in_job)
		die(postgres_signal_arg);
	else
	{
		int			save_errno = errno;

		ShutdownRequestPending = true;
		SetLatch(MyLatch);
		errno = save_errno;
	}
}

/*
 * A worker of the pool: takes queued jobs, one after the other, and
 * exits once it found none for SNAPSHOT_WORKER_IDLE_MS.  A job queued
 * just as it exits is staffed by the main thread's next turn.
 */
void
shape_sync_snapshot_main(Datum arg)
{
	SnapshotWorkerArgs args;
	SnapshotJobs *q = &shape_sync_shared->snapshot_jobs;
	MemoryContext job_context;
	TimestampTz idle_since;

	memcpy(&args, MyBgworkerEntry->bgw_extra, sizeof(args));
	pqsignal(SIGTERM, snap_handle_sigterm);
	pqsignal(SIGINT, StatementCancelHandler);	/* its shape was dropped */
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnectionByOid(args.dboid, InvalidOid, 0);
	/* folding a subset's where clause, and each row's filter, within the deadline */
	eval_deadline_enable();

	snap_entry = snapshot_worker_claim(q, (int32) MyProcPid, MyLatch);
	if (snap_entry < 0)
		proc_exit(0);			/* more workers than entries: not needed */
	before_shmem_exit(snap_on_exit, PointerGetDatum(&snap_writer));
	job_context = AllocSetContextCreate(TopMemoryContext, "shape_sync snapshot job",
										ALLOCSET_DEFAULT_SIZES);
	idle_since = GetCurrentTimestamp();

	/*
	 * A cancel counts only during a job: one that comes late (after the
	 * job's last look at interrupts, or for a job already done) must not
	 * end the worker with an ERROR while it waits.
	 */
	HOLD_CANCEL_INTERRUPTS();
	for (;;)
	{
		SnapshotJob job;
		long		idle_ms;

		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		if (ShutdownRequestPending)
			break;
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		snap_in_job = true;
		if (ShutdownRequestPending)
			break;				/* came just now */
		if (snapshot_jobs_pop(q, &job))
		{
			snapshot_worker_set_job(q, snap_entry, snapshot_job_key(job.slot, job.generation));
			QueryCancelPending = false; /* a cancel meant for an earlier job */
			RESUME_CANCEL_INTERRUPTS();
			if (job.slot & SUBSET_JOB_SLOT_BIT)
				subset_run_job(&job, job_context);
			else
				snap_run_job(&job, job_context);
			HOLD_CANCEL_INTERRUPTS();
			QueryCancelPending = false;
			snapshot_worker_set_job(q, snap_entry, 0);
			snap_in_job = false;
			pgstat_report_activity(STATE_IDLE, NULL);
			pgstat_report_stat(false);
			MemoryContextSwitchTo(TopMemoryContext);
			MemoryContextReset(job_context);
			shape_sync_wake_worker();	/* the next job may be queued */
			idle_since = GetCurrentTimestamp();
			continue;
		}
		snap_in_job = false;
		idle_ms = SNAPSHOT_WORKER_IDLE_MS -
			(long) ((GetCurrentTimestamp() - idle_since) / 1000);
		if (idle_ms <= 0)
			break;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 idle_ms, PG_WAIT_EXTENSION);
	}
	snapshot_worker_release(q, snap_entry);
	snap_entry = -1;
	/* the entry given back before, the queue after: see snapshot_jobs.c */
	atomic_thread_fence(memory_order_seq_cst);
	if (snapshot_jobs_queued(q) > 0)
		shape_sync_wake_worker();
	proc_exit(0);
}
