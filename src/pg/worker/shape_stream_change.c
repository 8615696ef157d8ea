/*-------------------------------------------------------------------------
 *
 * shape_stream_change.c
 *		A decoded change, into the logs of the shapes it concerns.
 *
 * The decoding callbacks (output_plugin.c) call in here.  A change visits
 * the streams of its table that it may concern (SsRelation in
 * shape_stream_internal.h says which checks each visit skips), of its
 * partitioned ancestors too, is matched against each shape's where clause
 * on the old and the new row, and becomes Electric's insert, update or
 * delete, encoded once per shape (row_encoder.c).  Privileges are checked
 * again at commit where an invalidation asked for it; shape_stream.c's
 * header explains rotation, partitions and privileges.
 *
 * Everything here runs on the worker's main thread.
 *
 * IDENTIFICATION
 *	  src/pg/worker/shape_stream_change.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "eval_deadline.h"
#include "partition_route.h"
#include "guc.h"
#include "log_record.h"
#include "shape_role.h"

#include "shape_stream_internal.h"

/* ------------------------------------------------------------- decoding */

static void ss_change_for_shape(ShapeStream *s, ReorderBufferChangeType action,
								TupleTableSlot *newslot, TupleTableSlot *oldslot, uint64 op);
static void ss_apply_change(ShapeStream *s, ReorderBufferChangeType action,
							TupleTableSlot *newslot, TupleTableSlot *oldslot, uint64 op);

void
shape_stream_begin(TransactionId xid, XLogRecPtr commit_lsn)
{
	ss_xid = xid;
	ss_lsn = commit_lsn;
	ss_op = 0;
	ss_touched = NIL;
	ss_in_txn = true;
	ss_sets_begin();
}

static MemoryContext ss_tags_context = NULL;	/* a change's tags */

void
ss_econtext_ensure(void)
{
	if (ss_econtext == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(ss_context);

		ss_econtext = CreateStandaloneExprContext();
		MemoryContextSwitchTo(old);
	}
}

/* Code that never looked at interrupts ran past the deadline of a match. */
void
ss_evaluation_too_slow(void)
{
	ss_eval_too_slow = true;
	ereport(ERROR,
			(errcode(ERRCODE_QUERY_CANCELED),
			 errmsg("a shape's where clause took longer than \"%s\" allows",
					"shape_sync.where_evaluation_timeout")));
}

/* Whether the row in values/nulls satisfies the shape's where clause. */
static bool
ss_matches(ShapeStream *s, TupleTableSlot *slot)
{
	bool		isnull;
	Datum		result;

	if (s->where == NULL)
		return true;
	ss_econtext_ensure();
	ss_econtext->ecxt_scantuple = slot;
	eval_deadline_begin();
	result = ExecEvalExprSwitchContext(s->where, ss_econtext, &isnull);
	if (eval_deadline_end())
		ss_evaluation_too_slow();
	ResetExprContext(ss_econtext);
	return !isnull && DatumGetBool(result);
}

/* Fills a virtual slot from a decoded tuple. */
static void
ss_fill_slot(TupleTableSlot *slot, HeapTuple tuple)
{
	ExecClearTuple(slot);
	heap_deform_tuple(tuple, slot->tts_tupleDescriptor, slot->tts_values, slot->tts_isnull);
	ExecStoreVirtualTuple(slot);
}

/*
 * Values of unchanged TOAST columns are not in the new tuple's WAL record;
 * take them from the old tuple, which REPLICA IDENTITY FULL logs in full.
 */
static void
ss_patch_unchanged_toast(TupleTableSlot *newslot, TupleTableSlot *oldslot)
{
	TupleDesc	desc = newslot->tts_tupleDescriptor;

	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		if (att->attisdropped || att->attlen != -1 || newslot->tts_isnull[i])
			continue;
		if (VARATT_IS_EXTERNAL_ONDISK(DatumGetPointer(newslot->tts_values[i])))
		{
			newslot->tts_values[i] = oldslot ? oldslot->tts_values[i] : (Datum) 0;
			newslot->tts_isnull[i] = oldslot ? oldslot->tts_isnull[i] : true;
		}
	}
}

static void
ss_message_sink(void *arg, uint64 op_position, StringInfo msg)
{
	ss_message(arg, op_position, msg);
}

/*
 * One message of `operation`, or for an update of a row that stays in the
 * shape one or two (a key change: row_encoder_update).
 */
static void
ss_encode(ShapeStream *s, const char *operation, TupleTableSlot *newslot,
		  TupleTableSlot *oldslot, uint64 op, const char *headers, const char *old_headers)
{
	StringInfoData msg;
	RowChange	ch = {0};
	MemoryContext old = MemoryContextSwitchTo(s->context);

	ch.operation = operation;
	if (newslot)
	{
		ch.new_values = newslot->tts_values;
		ch.new_nulls = newslot->tts_isnull;
	}
	if (oldslot)
	{
		ch.old_values = oldslot->tts_values;
		ch.old_nulls = oldslot->tts_isnull;
	}
	ch.lsn = ss_lsn;
	ch.op_position = op;
	ch.xid = ss_xid;
	ch.extra_headers = headers;
	ch.extra_headers_old = old_headers;
	if (strcmp(operation, LOG_RECORD_UPDATE) == 0)
		row_encoder_update(&s->enc, &ch, s->replica_full, ss_message_sink, s);
	else
	{
		initStringInfo(&msg);
		if (row_encoder_change(&s->enc, &ch, s->replica_full, &msg))
			ss_message(s, op, &msg);
		pfree(msg.data);
	}
	MemoryContextSwitchTo(old);
}

/*
 * The current transaction, which the shape's snapshot does not have as far
 * as is known (ss_touch said so), cannot be applied to the shape: it is
 * rotated.  While the snapshot is being taken, whether it has the
 * transaction is known only when it is done, so the reason waits with the
 * transaction (ss_take_over).  What a snapshot already has never rotates
 * a shape: decoding can be far behind, and reach a table's creation, its
 * old columns or a TRUNCATE after the shape was made from the table as it
 * is now.
 */
void
ss_rotate_unless_in_snapshot(ShapeStream *s, SmRotationCause cause, const char *why)
{
	Assert(s->touched && !s->skip_txn);
	if (s->ready)
		ss_rotate_later(s, cause, why);
	else if (s->txn_pending->problem == NULL)
	{
		s->txn_pending->problem = MemoryContextStrdup(s->context, why);
		s->txn_pending->problem_cause = cause;
	}
}

/*
 * Whether the shape still takes changes of the current transaction: it
 * is touched (ss_touch) for it, so call it only for a change that
 * concerns the shape, never for every shape of a table.
 */
static bool
ss_takes_transaction(ShapeStream *s)
{
	if (s->rotate || !ss_touch(s))
		return false;			/* rotating, or in the snapshot */
	return s->ready || s->txn_pending->problem == NULL;
}

/* One decoded change, as the streams of one table see it. */
typedef struct SsChange
{
	Relation	leaf;			/* the table changed */
	Oid			relid;			/* the leaf, or a partitioned table above it */
	TupleDesc	desc;			/* relid's columns, which the slots hold */
	ReorderBufferChangeType action;
	TupleTableSlot *newslot;
	TupleTableSlot *oldslot;
	uint64		op;
	bool		old_row_complete;	/* an update or a delete logs the whole
									 * old row only under FULL */
	uint64		visit;			/* this change's ss_visits */
} SsChange;

typedef enum SsCheck
{
	SS_CHECK_PASSED,			/* the stream can take the change */
	SS_CHECK_SKIPPED,			/* rotating, in the snapshot, or doomed */
	SS_CHECK_FAILED				/* it cannot: dealt with (rotated, or the
								 * reason kept with its pending transaction) */
} SsCheck;

/* Whether the stream can take the change: its columns, partitions, table. */
static SsCheck
ss_check_stream_for_change(ShapeStream *s, SsChange *c)
{
	const char *problem = NULL;

	if (s->rotate || (s->touched && !ss_takes_transaction(s)))
		return SS_CHECK_SKIPPED;
	if (!c->old_row_complete)
		/*
		 * Whether the row was in the shape, which row a delete removed,
		 * and the values of unchanged TOASTed columns are unknown: never
		 * guess, never drop it.
		 */
		problem = "a change of its table came without the old row: its replica identity is no longer FULL";
	else if (!ss_types_match(s, c->desc))
		problem = "a column it reads was dropped or changed type";
	else if (s->partitioned && !ss_has_partition(s, RelationGetRelid(c->leaf)))
		/* its rows were not in the table when the shape was made */
		problem = "a partition was attached to its table";
	else if (s->needs_definition_check)
	{
		/* the table as of this change, before any of it is published */
		Relation	table = c->relid == RelationGetRelid(c->leaf) ? c->leaf :
			RelationIdGetRelation(c->relid);

		s->needs_definition_check = false;
		problem = RelationIsValid(table) ? ss_definition_problem_guarded(s, table)
			: "its table was dropped";
		if (table != c->leaf && RelationIsValid(table))
			RelationClose(table);
	}
	if (problem == NULL)
		return SS_CHECK_PASSED;
	/* only now is it worth asking whether the snapshot has the transaction */
	if (ss_takes_transaction(s))
		ss_rotate_unless_in_snapshot(s, SM_ROTATION_TABLE_CHANGED, problem);
	return SS_CHECK_FAILED;
}

static void
ss_feed(ShapeStream *s, SsChange *c)
{
	ShapeRoleSaved saved;

	shape_role_become(s->role, &saved);
	ss_change_for_shape(s, c->action, c->newslot, c->oldslot, c->op);
	shape_role_restore(&saved);
}

/*
 * The change for one stream, after checking that the stream can take it.
 * Returns whether the checks ran and found nothing wrong.
 */
static bool
ss_change_checked(ShapeStream *s, SsChange *c)
{
	if (ss_check_stream_for_change(s, c) != SS_CHECK_PASSED)
		return false;
	ss_feed(s, c);
	return true;
}

/* The change for a verified stream, once per change (EqualityVisit). */
static void
ss_change_verified(uint32 slot, void *arg)
{
	ShapeStream *s = &ss_streams[slot];
	SsChange   *c = arg;

	if (s->visited == c->visit)
		return;
	s->visited = c->visit;
	if (s->rotate || (s->touched && !ss_takes_transaction(s)))
		return;
	ss_feed(s, c);
}

/*
 * Checks every stream of `r` (after an invalidation, a cache reset, a new
 * stream, or a change from a partition not seen since): those the change
 * cannot go to are flagged, and checked on every change until one passes;
 * the others take changes from the index without checks.  Only checks: the
 * change itself goes through the index after this, as any other.
 */
static void
ss_verify_relation(SsRelation *r, SsChange *c, Oid leaf_relid)
{
	MemoryContext old;
	List	   *flagged = NIL;
	bool		fresh = !r->verified;

	/* an invalidation taken in during the checks makes it unverified again */
	r->verified = true;
	for (int i = 0; i < r->nslots; i++)
	{
		ShapeStream *s = &ss_streams[r->slots[i]];

		if (ss_check_stream_for_change(s, c) == SS_CHECK_PASSED)
			continue;
		s->visited = c->visit;	/* dealt with, for this change */
		if (!s->rotate)
			flagged = lappend_int(flagged, (int) s->slot);
	}
	old = MemoryContextSwitchTo(ss_context);
	if (fresh)
	{
		list_free(r->flagged);
		r->flagged = list_copy(flagged);
		list_free(r->verified_leaves);
		r->verified_leaves = NIL;
	}
	else
		r->flagged = list_concat_unique_int(r->flagged, flagged);	/* a new leaf */
	if (leaf_relid != c->relid)
		r->verified_leaves = lappend_oid(r->verified_leaves, leaf_relid);
	MemoryContextSwitchTo(old);
	list_free(flagged);
}

/*
 * The streams the index returns for the change's old and new rows.  A
 * hash function that fails (it should not, on valid data) sends the change
 * to every stream of the table, checked, as before the index.
 */
static void
ss_visit_routed(SsRelation *r, SsChange *c)
{
	MemoryContext old = CurrentMemoryContext;

	PG_TRY();
	{
		if (c->newslot != NULL)
			equality_index_visit(r->index, c->newslot, ss_change_verified, c);
		if (c->oldslot != NULL)
			equality_index_visit(r->index, c->oldslot, ss_change_verified, c);
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(old);
		FlushErrorState();
		for (int i = 0; i < r->nslots; i++)
		{
			ShapeStream *s = &ss_streams[r->slots[i]];

			if (s->visited == c->visit)
				continue;
			s->visited = c->visit;
			(void) ss_change_checked(s, c);
		}
	}
	PG_END_TRY();
}

/*
 * One change of `leaf` for the streams of `r`, on table `relid` (the leaf
 * itself, or a partitioned table above it, whose columns `desc` describes
 * and the slots hold).
 */
static void
ss_change_for_relation(SsRelation *r, Relation leaf, Oid relid, TupleDesc desc,
					   ReorderBufferChangeType action, TupleTableSlot *newslot,
					   TupleTableSlot *oldslot, uint64 op)
{
	Oid			leaf_relid = RelationGetRelid(leaf);
	SsChange	c;
	ListCell   *lc;

	c.leaf = leaf;
	c.relid = relid;
	c.desc = desc;
	c.action = action;
	c.newslot = newslot;
	c.oldslot = oldslot;
	c.op = op;
	c.old_row_complete = action == REORDER_BUFFER_CHANGE_INSERT ||
		(oldslot != NULL && leaf->rd_rel->relreplident == REPLICA_IDENTITY_FULL);
	c.visit = ++ss_visits;

	if (!c.old_row_complete)
	{
		/* every stream must hear of it (it rotates them) */
		for (int i = 0; i < r->nslots; i++)
			(void) ss_change_checked(&ss_streams[r->slots[i]], &c);
		return;
	}
	if (!r->verified || (leaf_relid != relid && !list_member_oid(r->verified_leaves, leaf_relid)))
		ss_verify_relation(r, &c, leaf_relid);

	foreach(lc, r->flagged)
	{
		ShapeStream *s = &ss_streams[lfirst_int(lc)];

		if (s->visited == c.visit)
			continue;			/* checked by ss_verify_relation just now */
		s->visited = c.visit;
		if (ss_change_checked(s, &c))
			r->flagged = foreach_delete_current(r->flagged, lc);
	}
	equality_index_visit_unrouted(r->index, ss_change_verified, &c);
	ss_visit_routed(r, &c);
}

/* A slot with the same row in the columns of `desc`, through `map`. */
static TupleTableSlot *
ss_convert_slot(TupleTableSlot *slot, AttrMap *map, TupleDesc desc)
{
	if (slot == NULL)
		return NULL;
	return execute_attr_map_slot(map, slot, MakeSingleTupleTableSlot(desc, &TTSOpsVirtual));
}

/*
 * A change of a partition, for the shapes on the partitioned tables above
 * it, as a row of each (partition_route.c).  A shape whose table had the
 * partition when the shape was made, and no longer has it (detached, as
 * of this change), is rotated: the partition's rows left the table
 * without a change in the WAL.
 */
static void
ss_change_for_ancestors(Relation leaf, ReorderBufferChangeType action,
						TupleTableSlot *newslot, TupleTableSlot *oldslot, uint64 op)
{
	Oid			leaf_relid = RelationGetRelid(leaf);
	const PartitionRoute *route = partition_route_of(leaf);
	SsRelidEntry *expecting = hash_search(ss_partitions, &leaf_relid, HASH_FIND, NULL);
	ListCell   *lc;

	if (expecting != NULL)
		foreach(lc, expecting->slots)
		{
			ShapeStream *s = &ss_streams[lfirst_int(lc)];
			bool		reached = false;

			for (int i = 0; i < route->nancestors && !reached; i++)
				reached = route->ancestors[i].relid == s->relid;
			if (!reached && ss_takes_transaction(s))
				ss_rotate_unless_in_snapshot(s, SM_ROTATION_TABLE_CHANGED, "a partition was detached from its table");
		}
	for (int i = 0; i < route->nancestors; i++)
	{
		const PartitionAncestor *a = &route->ancestors[i];
		SsRelation *r = hash_search(ss_relids, &a->relid, HASH_FIND, NULL);
		TupleTableSlot *anew;
		TupleTableSlot *aold;

		if (r == NULL)
			continue;
		if (a->map == NULL)
		{
			ss_change_for_relation(r, leaf, a->relid, a->desc, action,
								   newslot, oldslot, op);
			continue;
		}
		anew = ss_convert_slot(newslot, a->map, a->desc);
		aold = ss_convert_slot(oldslot, a->map, a->desc);
		ss_change_for_relation(r, leaf, a->relid, a->desc, action, anew, aold, op);
		if (anew)
			ExecDropSingleTupleTableSlot(anew);
		if (aold)
			ExecDropSingleTupleTableSlot(aold);
	}
}

/*
 * A change of a table that sets of partitioned tables listed as one of
 * their partitions: one no longer below such a table (detached, as of
 * this change) fails its sets, since its rows left without a change.
 */
static void
ss_sets_check_partition(Relation rel, List *roots)
{
	const PartitionRoute *route = rel->rd_rel->relispartition ? partition_route_of(rel) : NULL;
	ListCell   *lc;

	foreach(lc, roots)
	{
		Oid			root = ((const SsPartitionRoot *) lfirst(lc))->relid;
		bool		reached = false;

		for (int i = 0; route != NULL && i < route->nancestors && !reached; i++)
			reached = route->ancestors[i].relid == root;
		if (!reached)
			ss_sets_partition_left(root, RelationGetRelid(rel),
								   "a partition was detached from its subquery's table");
	}
}

/* Whether sets read a partitioned table above the partition `leaf`. */
static bool
ss_sets_above(Relation leaf)
{
	const PartitionRoute *route = partition_route_of(leaf);

	for (int i = 0; i < route->nancestors; i++)
		if (ss_sets_on(route->ancestors[i].relid))
			return true;
	return false;
}

/*
 * A change of a partition, for the sets of the partitioned tables above
 * it, as a row of each.
 */
static void
ss_sets_change_above(Relation leaf, ReorderBufferChangeType action,
					 TupleTableSlot *newslot, TupleTableSlot *oldslot)
{
	const PartitionRoute *route = partition_route_of(leaf);

	for (int i = 0; i < route->nancestors; i++)
	{
		const PartitionAncestor *a = &route->ancestors[i];
		TupleTableSlot *anew;
		TupleTableSlot *aold;

		if (!ss_sets_on(a->relid))
			continue;
		if (a->map == NULL)
		{
			ss_sets_change(a->relid, a->desc, leaf, action, newslot, oldslot);
			continue;
		}
		anew = ss_convert_slot(newslot, a->map, a->desc);
		aold = ss_convert_slot(oldslot, a->map, a->desc);
		ss_sets_change(a->relid, a->desc, leaf, action, anew, aold);
		if (anew)
			ExecDropSingleTupleTableSlot(anew);
		if (aold)
			ExecDropSingleTupleTableSlot(aold);
	}
}

void
shape_stream_change(Relation rel, ReorderBufferChange *change)
{
	Oid			relid = RelationGetRelid(rel);
	SsRelation *r;
	bool		routed;
	bool		sets;
	bool		sets_above;
	TupleDesc	desc = RelationGetDescr(rel);
	TupleTableSlot *newslot = NULL;
	TupleTableSlot *oldslot = NULL;
	uint64		op = ss_op;

	if (change->action != REORDER_BUFFER_CHANGE_INSERT &&
		change->action != REORDER_BUFFER_CHANGE_UPDATE &&
		change->action != REORDER_BUFFER_CHANGE_DELETE)
		return;
	ss_op += 2;
	r = ss_relids ? hash_search(ss_relids, &relid, HASH_FIND, NULL) : NULL;
	/* a partition, or a table that was one, matters to partitioned shapes */
	routed = ss_npartitioned > 0 &&
		(rel->rd_rel->relispartition ||
		 hash_search(ss_partitions, &relid, HASH_FIND, NULL) != NULL);
	sets = ss_sets_on(relid);
	sets_above = ss_npartitioned_sets > 0 && rel->rd_rel->relispartition && ss_sets_above(rel);
	if (ss_npartitioned_sets > 0)
	{
		List	   *roots = ss_sets_partition_roots(relid);

		if (roots != NIL)
			ss_sets_check_partition(rel, roots);
	}
	if (r == NULL && !routed && !sets && !sets_above)
		return;					/* no shape on this table: one hash probe */

	if (change->data.tp.newtuple)
	{
		newslot = MakeSingleTupleTableSlot(desc, &TTSOpsVirtual);
		ss_fill_slot(newslot, &change->data.tp.newtuple->tuple);
	}
	if (change->data.tp.oldtuple)
	{
		oldslot = MakeSingleTupleTableSlot(desc, &TTSOpsVirtual);
		ss_fill_slot(oldslot, &change->data.tp.oldtuple->tuple);
	}
	if (newslot && change->action == REORDER_BUFFER_CHANGE_UPDATE)
		ss_patch_unchanged_toast(newslot, oldslot);

	/* a subquery's values first: its shapes match against them as of this change */
	if (sets)
		ss_sets_change(relid, desc, rel, change->action, newslot, oldslot);
	if (sets_above)
		ss_sets_change_above(rel, change->action, newslot, oldslot);
	if (r != NULL)
		ss_change_for_relation(r, rel, relid, desc, change->action,
							   newslot, oldslot, op);
	if (routed)
		ss_change_for_ancestors(rel, change->action, newslot, oldslot, op);
	if (newslot)
		ExecDropSingleTupleTableSlot(newslot);
	if (oldslot)
		ExecDropSingleTupleTableSlot(oldslot);
}

/*
 * One change for one shape.  An error here (a where clause that divides by
 * zero on this row, an output function that fails) must not take the
 * worker down with every other shape: it rotates this shape only.  What
 * can fail here is expression evaluation and type output, which hold no
 * resources to clean up, so the error is caught without a subtransaction.
 */
static void
ss_change_for_shape(ShapeStream *s, ReorderBufferChangeType action,
					TupleTableSlot *newslot, TupleTableSlot *oldslot, uint64 op)
{
	MemoryContext old = CurrentMemoryContext;

	PG_TRY();
	{
		ss_apply_change(s, action, newslot, oldslot, op);
	}
	PG_CATCH();
	{
		ErrorData  *edata;
		bool		too_slow = eval_deadline_end() || ss_eval_too_slow;

		ss_eval_too_slow = false;
		ss_old_view = false;
		MemoryContextSwitchTo(old);
		/* what the failed evaluation held goes now, not at the next match */
		if (ss_econtext != NULL)
			ResetExprContext(ss_econtext);
		edata = CopyErrorData();
		FlushErrorState();
		if (too_slow)
			ss_fail_later(s, REFUSAL_STREAM_CHANGE_TOO_SLOW, shape_sync_where_evaluation_timeout,
						  NULL);
		else if (ss_takes_transaction(s))
			ss_rotate_unless_in_snapshot(s, SM_ROTATION_FAILED, psprintf("a change could not be processed: %s",
													 edata->message));
		FreeErrorData(edata);
	}
	PG_END_TRY();
}

/*
 * A change for a shape with subqueries, in one view: matched against its
 * value sets as they were before the transaction (the transaction's own
 * moves follow its changes, at its commit: shape_stream_subquery.c), its
 * messages tagged (row_tags.c); an update's lists the old row's tags the
 * new one lost.  With `old_view`, as if the stream's move-in in flight had
 * not happened, into the records a move-in's snapshot may need instead.
 */
static void
ss_apply_subquery_view(ShapeStream *s, ReorderBufferChangeType action,
					   TupleTableSlot *newslot, TupleTableSlot *oldslot, uint64 op,
					   bool old_view)
{
	bool		new_active[SUBQUERY_MAX_TAG_SLOTS];
	bool		old_active[SUBQUERY_MAX_TAG_SLOTS];
	bool		new_in = newslot && ss_subquery_row(s, newslot, new_active, old_view);
	bool		old_in = oldslot && ss_subquery_row(s, oldslot, old_active, old_view);
	RowTags		new_tags;
	RowTags		old_tags;
	StringInfoData new_headers;
	StringInfoData old_headers;
	MemoryContext old;

	if ((!new_in && !old_in) || !ss_touch(s))
		return;
	/* the tags live until the messages are encoded: a context of their own */
	if (ss_tags_context == NULL)
		ss_tags_context = AllocSetContextCreate(ss_context, "shape_sync tags",
												ALLOCSET_DEFAULT_SIZES);
	old = MemoryContextSwitchTo(ss_tags_context);
	initStringInfo(&new_headers);
	initStringInfo(&old_headers);
	if (new_in)
		row_tags_make(&s->subquery->tagger, newslot->tts_values, newslot->tts_isnull,
					  new_active, &new_tags);
	if (old_in)
	{
		row_tags_make(&s->subquery->tagger, oldslot->tts_values, oldslot->tts_isnull,
					  old_active, &old_tags);
		row_tags_json(&s->subquery->tagger, &old_tags, NULL, &old_headers);
	}
	if (new_in)
		row_tags_json(&s->subquery->tagger, &new_tags, old_in ? &old_tags : NULL,
					  &new_headers);
	MemoryContextSwitchTo(old);
	ss_old_view = old_view;
	if (action == REORDER_BUFFER_CHANGE_INSERT || (new_in && !old_in))
		ss_encode(s, LOG_RECORD_INSERT, newslot, NULL, op, new_headers.data, NULL);
	else if (action == REORDER_BUFFER_CHANGE_DELETE || (!new_in && old_in))
		ss_encode(s, LOG_RECORD_DELETE, NULL, oldslot, op, NULL, old_headers.data);
	else
		ss_encode(s, LOG_RECORD_UPDATE, newslot, oldslot, op, new_headers.data,
				  old_headers.data);
	ss_old_view = false;
	MemoryContextReset(ss_tags_context);
}

static void
ss_apply_subquery_change(ShapeStream *s, ReorderBufferChangeType action,
						 TupleTableSlot *newslot, TupleTableSlot *oldslot, uint64 op)
{
	ss_apply_subquery_view(s, action, newslot, oldslot, op, false);
	if (ss_holding(s) && !s->rotate)
		ss_apply_subquery_view(s, action, newslot, oldslot, op, true);
}

static void
ss_apply_change(ShapeStream *s, ReorderBufferChangeType action,
				TupleTableSlot *newslot, TupleTableSlot *oldslot, uint64 op)
{
	bool		new_in;
	bool		old_in;

	if (s->subquery != NULL)
	{
		ss_apply_subquery_change(s, action, newslot, oldslot, op);
		return;
	}
	new_in = newslot && ss_matches(s, newslot);
	old_in = oldslot && ss_matches(s, oldslot);

	if (!new_in && !old_in)
		return;
	if (!ss_touch(s))
		return;
	{
		switch (action)
		{
			case REORDER_BUFFER_CHANGE_INSERT:
				ss_encode(s, LOG_RECORD_INSERT, newslot, NULL, op, NULL, NULL);
				break;
			case REORDER_BUFFER_CHANGE_DELETE:
				ss_encode(s, LOG_RECORD_DELETE, NULL, oldslot, op, NULL, NULL);
				break;
			case REORDER_BUFFER_CHANGE_UPDATE:
				if (new_in && !old_in)
					ss_encode(s, LOG_RECORD_INSERT, newslot, NULL, op, NULL, NULL);
				else if (!new_in && old_in)
					ss_encode(s, LOG_RECORD_DELETE, NULL, oldslot, op, NULL, NULL);
				else
					ss_encode(s, LOG_RECORD_UPDATE, newslot, oldslot, op, NULL, NULL);
				break;
			default:
				break;
		}
	}
}

void
shape_stream_truncate(int nrelations, Relation *relations)
{
	ShapeTable *table = ss_table();

	if (ss_streams == NULL)
		return;					/* no shape was ever made */

	for (int r = 0; r < nrelations; r++)
	{
		Oid			relid = RelationGetRelid(relations[r]);
		SsRelidEntry *partition_of = ss_partitions ?
			hash_search(ss_partitions, &relid, HASH_FIND, NULL) : NULL;
		ListCell   *lc;

		if (ss_sets_on(relid))
			ss_sets_truncated(relid);
		if (ss_npartitioned_sets > 0 && relations[r]->rd_rel->relispartition)
		{
			const PartitionRoute *route = partition_route_of(relations[r]);

			for (int i = 0; i < route->nancestors; i++)
				if (ss_sets_on(route->ancestors[i].relid))
					ss_sets_truncated(route->ancestors[i].relid);
		}
		if (ss_npartitioned_sets > 0)
		{
			/* one the sets listed, also while detached (and attached again) */
			ListCell   *rc;

			foreach(rc, ss_sets_partition_roots(relid))
				ss_sets_partition_left(((const SsPartitionRoot *) lfirst(rc))->relid, relid,
									   "a partition of its subquery's table was truncated");
		}

		for (uint32 i = 0; i < table->nslots; i++)
			if (ss_streams[i].in_use && ss_streams[i].relid == relid &&
				ss_takes_transaction(&ss_streams[i]))
				ss_rotate_unless_in_snapshot(&ss_streams[i], SM_ROTATION_TRUNCATED,
											 "its table was truncated");
		if (partition_of != NULL)
			foreach(lc, partition_of->slots)
				if (ss_takes_transaction(&ss_streams[lfirst_int(lc)]))
					ss_rotate_unless_in_snapshot(&ss_streams[lfirst_int(lc)], SM_ROTATION_TRUNCATED,
												 "a partition of its table was truncated");
	}
}

/*
 * An invalidation came since the stream's privileges were last checked:
 * check them again, as of this point of the WAL (decoding reads the
 * catalog as it was when the transaction committed).  A shape its role can
 * no longer read is rotated.
 */
static void
ss_recheck_privileges(ShapeStream *s)
{
	ShapeRoleSaved saved;
	const char *field;
	char	   *problem = NULL;
	MemoryContext old = CurrentMemoryContext;

	s->needs_check = false;
	shape_role_become(s->role, &saved);
	PG_TRY();
	{
		problem = shape_read_problem(s->relid, s->nused, s->used_attnums, &field);
		if (problem == NULL)
			problem = (char *) ss_subquery_problem(s);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(old);
		edata = CopyErrorData();
		FlushErrorState();
		problem = psprintf("its privileges could not be checked: %s", edata->message);
		FreeErrorData(edata);
	}
	PG_END_TRY();
	shape_role_restore(&saved);
	if (problem != NULL)
		ss_rotate_unless_in_snapshot(s, SM_ROTATION_TABLE_CHANGED, problem);
}

/*
 * The transaction reaches each shape's readers whole, in one publish, or
 * not at all: a shape marked for rotation during it (its role lost the
 * right to read it, its log ran out of memory, a change failed) publishes
 * nothing of it.
 */
void
shape_stream_commit(void)
{
	ShapeTable *table = ss_table();
	ListCell   *lc;

	/* the moves of the subqueries' values, after each shape's changes */
	ss_sets_commit();
	foreach(lc, ss_touched)
	{
		ShapeStream *s = lfirst(lc);

		/* as of a transaction the snapshot has, the privileges do not matter */
		if (s->needs_check && !s->rotate && !s->skip_txn)
			ss_recheck_privileges(s);
		ss_release_held(s, true);
		ss_release_held_before(s, true);
		if (s->rotate)
			;					/* retired at the next maintain */
		else if ((!s->ready || ss_holding(s)) && s->txn_pending != NULL)
		{
			MemoryContext old = MemoryContextSwitchTo(s->context);
			PendingTxn *txn = s->txn_pending;

			if (txn->records.len > 0 || txn->problem != NULL || txn->moved_out != NIL ||
				(txn->records_before.data != NULL && txn->records_before.len > 0))
				s->pending = lappend(s->pending, s->txn_pending);
			else
				ss_free_pending(s->txn_pending);
			MemoryContextSwitchTo(old);
		}
		else if (s->appended)
			ss_publish_commit(s);
		/* a move-in this transaction began: the next ones are kept */
		if (s->moving != NULL)
			s->moving->holding = true;
		s->txn_pending = NULL;
		s->touched = false;
		s->skip_txn = false;
		s->appended = false;

	}
	list_free(ss_touched);
	ss_touched = NIL;
	ss_in_txn = false;
	if (ss_lsn > 0)
		shape_table_note_lsn(table, ss_lsn);
}

