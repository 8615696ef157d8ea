/*-------------------------------------------------------------------------
 *
 * shape_stream_maintain.c
 *		Between decoding batches: finished snapshots taken over, streams checked, rotations handed on.
 *
 * The main loop calls shape_stream_maintain between batches, outside any
 * transaction: streams whose snapshot is done take over their logs
 * (shape_stream_log.c), streams of tables that an invalidation named are
 * checked against the current catalog and their role's privileges, and
 * the rotations decided are handed to the registry.  A table locked by a
 * user is never waited for: it is looked at again next time.
 *
 * Everything here runs on the worker's main thread.
 *
 * IDENTIFICATION
 *	  src/pg/worker/shape_stream_maintain.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/heapam.h"
#include "storage/lmgr.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "catalog_use.h"
#include "shape_role.h"

#include "shape_stream_internal.h"

/*
 * Checks a stream against the current catalog: its table, its definition
 * and its role's privileges; a stream that fails is rotated.  False when
 * the table is locked: look again at the next maintain.
 */
static bool
ss_check_stream(ShapeStream *s, Oid role)
{
	Oid			relid = s->relid;
	Relation	rel;
	const char *problem;

	if (!SearchSysCacheExists1(RELOID, ObjectIdGetDatum(relid)))
	{
		ss_rotate_later(s, SM_ROTATION_TABLE_CHANGED, "its table was dropped");
		return true;
	}
	if (!ConditionalLockRelationOid(relid, AccessShareLock))
		/*
		 * Never wait on a user's lock here: look again next time.  A shape
		 * made from a replay's catalog (shape_stream_check_when_replayed)
		 * stays unchecked until then, which is safe: its snapshot compares
		 * the table with the shape's definition and privileges under the
		 * current catalog (snapshot_query.c), and a change to the table decoded
		 * meanwhile marks it for a check of its own.  (A shape's own
		 * snapshot worker holds such a lock while it sets REPLICA IDENTITY
		 * FULL: rotating here rotated fresh shapes for nothing.)
		 */
		return false;
	s->needs_check = false;
	s->needs_definition_check = false;
	rel = table_open(relid, NoLock);
	problem = ss_definition_problem(s, rel);
	table_close(rel, NoLock);
	if (problem != NULL)
		ss_rotate_later(s, SM_ROTATION_TABLE_CHANGED, problem);
	else if (s->role != role)
		ss_rotate_later(s, SM_ROTATION_TABLE_CHANGED, "\"shape_sync.role\" changed or cannot be used");
	else
	{
		ShapeRoleSaved saved;
		const char *field;
		char	   *read_problem;

		shape_role_become(s->role, &saved);
		read_problem = shape_read_problem(relid, s->nused, s->used_attnums, &field);
		if (read_problem == NULL)
			read_problem = (char *) ss_subquery_problem(s);
		shape_role_restore(&saved);
		if (read_problem != NULL)
			ss_rotate_later(s, SM_ROTATION_TABLE_CHANGED, read_problem);
	}
	return true;
}

/* Checks every stream of a table (ss_check_stream). */
static void
ss_check_relation(Oid relid, Oid role)
{
	SsRelation *r = hash_search(ss_relids, &relid, HASH_FIND, NULL);

	if (r == NULL)
		return;
	for (int i = 0; i < r->nslots; i++)
	{
		ShapeStream *s = &ss_streams[r->slots[i]];

		if (s->rotate)
			continue;
		if (!ss_check_stream(s, role))
		{
			MemoryContext old = MemoryContextSwitchTo(ss_context);

			ss_changed_relids = list_append_unique_oid(ss_changed_relids, relid);
			MemoryContextSwitchTo(old);
			return;
		}
	}
}

static void
ss_check_guarded(Oid relid, ShapeStream *one, Oid role)
{
	MemoryContext oldcxt = CurrentMemoryContext;
	ResourceOwner oldowner = CurrentResourceOwner;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(oldcxt);
	PG_TRY();
	{
		if (one == NULL)
			ss_check_relation(relid, role);
		else if (!ss_check_stream(one, role))
		{
			MemoryContext old = MemoryContextSwitchTo(ss_context);

			ss_check_slots = lappend_int(ss_check_slots, (int) one->slot);
			MemoryContextSwitchTo(old);
		}
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcxt);
		CurrentResourceOwner = oldowner;
	}
	PG_CATCH();
	{
		SsRelation *r;

		MemoryContextSwitchTo(oldcxt);
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcxt);
		CurrentResourceOwner = oldowner;
		r = hash_search(ss_relids, &relid, HASH_FIND, NULL);
		if (one != NULL)
			ss_rotate_later(one, SM_ROTATION_TABLE_CHANGED, "its table changed while being checked");
		else if (r != NULL)
			for (int i = 0; i < r->nslots; i++)
				ss_rotate_later(&ss_streams[r->slots[i]], SM_ROTATION_TABLE_CHANGED,
								"its table changed while being checked");
	}
	PG_END_TRY();
}

/*
 * Takes over the streams whose snapshots are done.  During a replay
 * (`replaying`), only those the replayed transaction has not touched: its
 * changes to the others are kept as theirs, and are stitched on after it.
 * Taking over needs no catalog; the checks it asks for (ss_check_slots) run
 * at the next shape_stream_maintain.
 */
static void
ss_take_over_done(bool replaying)
{
	ShapeTable *table = ss_table();
	ListCell   *lc;

	foreach(lc, ss_snapshotting)
	{
		ShapeStream *s = &ss_streams[lfirst_int(lc)];

		if (s->in_use && s->snapshot_done && !s->ready && !s->rotate &&
			!(replaying && s->touched) && shape_table_state(table, s->slot) == SHAPE_READY)
		{
			ss_take_over(s);
			ss_snapshotting = foreach_delete_current(ss_snapshotting, lc);
		}
	}
}

/*
 * During the replay of a long transaction (decoder.c's hook): a shape whose
 * snapshot finished meanwhile goes live now, not after the replay.
 */
void
shape_stream_maintain_during_replay(void)
{
	if (ss_streams != NULL)
		ss_take_over_done(true);
}

void
shape_stream_maintain(ShapeStreamRotate rotate)
{
	ShapeTable *table;
	List	   *changed;
	ListCell   *lc;

	if (ss_streams == NULL)
		return;
	table = ss_table();
	ss_take_over_done(false);

	ss_recheck_now = false;
	ss_moves_maintain();		/* move-ins whose rows came */
	if (ss_changed_relids != NIL || ss_all_changed || ss_check_slots != NIL)
	{
		Oid			role;
		List	   *slots = ss_check_slots;

		changed = ss_changed_relids;
		ss_changed_relids = NIL;
		ss_check_slots = NIL;
		if (ss_all_changed)
		{
			list_free(changed);
			changed = NIL;
			for (uint32 i = 0; i < table->nslots; i++)
				if (ss_streams[i].in_use)
					changed = list_append_unique_oid(changed, ss_streams[i].relid);
			ss_all_changed = false;
		}
		catalog_use_current();
		SetCurrentStatementStartTimestamp();
		StartTransactionCommand();
		PushActiveSnapshot(GetTransactionSnapshot());
		role = shape_role_usable();
		foreach(lc, changed)
			ss_check_guarded(lfirst_oid(lc), NULL, role);
		foreach(lc, slots)
		{
			ShapeStream *s = &ss_streams[lfirst_int(lc)];

			/* gone, rotating, or checked with its whole table just now */
			if (s->in_use && !s->rotate && !list_member_oid(changed, s->relid))
				ss_check_guarded(s->relid, s, role);
		}
		PopActiveSnapshot();
		CommitTransactionCommand();
		list_free(changed);
		list_free(slots);
	}

	{
		List	   *rotating = ss_rotating;

		ss_rotating = NIL;
		foreach(lc, rotating)
		{
			ShapeStream *s = &ss_streams[lfirst_int(lc)];

			if (s->in_use && s->rotate)
				rotate(s->slot, s->rotate_cause);
		}
		list_free(rotating);
	}
}

