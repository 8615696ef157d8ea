/*-------------------------------------------------------------------------
 *
 * shape_stream.c
 *		Decoded changes into shape logs: matching, stitching, appending.
 *
 * The output plugin hands every decoded change of a table that has shapes
 * to shape_stream_change().  The change visits the shapes of its table that
 * it may concern: those its old or new column values find in the table's
 * equality index (equality_index.c), and those whose clauses the index
 * cannot route (SsRelation says which checks each visit skips).  For each,
 * the change is matched against the shape's where clause, evaluated by the
 * executor on the old and the new tuple as pgoutput's row filter does, and
 * turned into Electric's operation: an update that moves a row into the shape becomes
 * an insert, out of it a delete; one that changes the key becomes a delete
 * and an insert.  The message is encoded once (row_encoder.c) and appended
 * to the shape's log at offset <commit LSN>_<op position>; the transaction
 * becomes visible to readers, in one publish, at its commit.  The last
 * message of a transaction for a shape carries "last": true, so each
 * shape's latest message is held back until the next one, or the commit,
 * says whether it is the last.
 *
 * Stitching (shape_stream_log.c).  While a shape's snapshot is being written, its
 * transactions are kept; once it is done, those the snapshot did not see
 * are appended and the stream writes the log itself.
 *
 * Rotation.  A TRUNCATE of a shape's table, a change of the table that
 * does not log its old row in full, or a relcache invalidation after
 * which the table is gone, renamed, or its columns, types, key or
 * partitions differ from the shape's, rotates the shape: the registry
 * retires it and its clients get 409 must-refetch.  A shape whose log
 * runs out of memory is rotated too.  After an invalidation, the table is
 * compared as decoding sees it at its next change, so a transaction that
 * altered it is not published; and again as the catalog says now, between
 * batches.  A shape marked for rotation publishes nothing of the
 * transaction being decoded.  Rotations are applied between decoding
 * batches.  None of this applies to a transaction the shape's snapshot
 * already has: decoding can be far behind the catalog the shape was made
 * from (after a restart, behind a synchronous standby), and reach its
 * table's creation, older columns or a TRUNCATE after the shape exists.
 * While the snapshot is being taken that is known only for transactions
 * the snapshot of the shape's making saw (shape_stream_log.c), which are
 * not kept; for the others the reason waits with the kept transaction
 * (PendingTxn.problem) and counts only if the snapshot turns out not to
 * have it.
 *
 * Partitions.  A change of a partition is also a change of the
 * partitioned tables above it (partition_route.c gives them, with the map
 * of columns).  A shape on a partitioned table keeps the list of
 * partitions its table had when it was made: a change of a partition not
 * on the list, or of a listed one that is no longer a partition of the
 * table, rotates it, since rows came or went without a change.
 *
 * Privileges.  Each shape is read as the role it was validated as
 * (shape_sync.role, shape_role.c): its where clause and its encoder run as
 * that role on every change, each evaluation within
 * shape_sync.where_evaluation_timeout (a shape whose clause takes longer
 * fails).  A GRANT or REVOKE on its table or columns, a row-level security
 * change, or a change of its role, of memberships or of its schema
 * invalidates caches, in decoding order.  A shape touched by a transaction
 * after such an invalidation checks its privileges again, as of that
 * commit, before anything of the transaction is published; and the batch
 * being decoded ends at the record that carried the invalidation, so that
 * every shape concerned is checked against the current catalog before
 * decoding goes on.  A shape its role can no longer read is rotated, and
 * its clients' new requests get 403.  A change of shape_sync.role rotates
 * the shapes read as the old one.
 *
 * The stream is four files (shape_stream_internal.h): this one holds the
 * set-up, the catalog watch (cache callbacks) and the streams of each
 * table; shape_stream_change.c the change path, shape_stream_log.c the log's writing,
 * shape_stream_maintain.c the checks between batches.  Everything runs on the
 * worker's main thread.
 *
 * IDENTIFICATION
 *	  src/pg/worker/shape_stream.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_inherits.h"
#include "miscadmin.h"
#include "optimizer/optimizer.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"

#include "catalog_use.h"
#include "shape_relation.h"
#include "shared_state.h"

#include "shape_subquery.h"
#include "shape_stream_internal.h"

ShapeStream *ss_streams;	/* by slot */
uint64 ss_pending_total = 0; /* pending_bytes of every stream */
uint64 ss_freed_bytes = 0;	/* held by streams removed (take_freed) */
MemoryContext ss_context;
List *ss_touched;		/* streams touched by the current txn */
TransactionId ss_xid;
bool ss_in_txn;			/* between shape_stream_begin and _commit */
uint64 ss_lsn;
uint64 ss_op;			/* the next op position */
ExprContext *ss_econtext;
List *ss_changed_relids; /* relcache invalidations seen */
List *ss_check_slots;	/* int list: streams that took over from
								 * their snapshot, to check once */
List *ss_snapshotting;	/* int list: streams whose snapshot is not
								 * done, oldest first */
List *ss_rotating;		/* int list: streams marked for rotation */
bool ss_all_changed;
bool ss_recheck_now;		/* end the decoding batch: check first */
bool ss_eval_too_slow;	/* ss_matches ran past its deadline */
bool ss_callback_registered;
HTAB *ss_relids;			/* relid -> SsRelation */
HTAB *ss_partitions;		/* partition relid -> the partitioned streams
								 * that had it when they were made */
int	ss_npartitioned;	/* streams on partitioned tables */
uint64 ss_visits;		/* one per change and relation visited */

/* ------------------------------------------------------------ set-up */

ShapeTable *
ss_table(void)
{
	return shape_sync_shared->table;
}

/* Every table's streams are to be checked at their next change. */
static void
ss_unverify_all(void)
{
	HASH_SEQ_STATUS seq;
	SsRelation *r;

	if (ss_relids == NULL)
		return;
	hash_seq_init(&seq, ss_relids);
	while ((r = hash_seq_search(&seq)) != NULL)
		r->verified = false;
}

/* Every stream's table and privileges are to be checked again. */
static void
ss_mark_all_for_check(void)
{
	ShapeTable *table = ss_table();

	ss_unverify_all();
	for (uint32 i = 0; i < table->nslots; i++)
		if (ss_streams[i].in_use)
			ss_streams[i].needs_check = ss_streams[i].needs_definition_check = true;
	ss_all_changed = true;
	ss_recheck_now = true;
}

/*
 * The streams of `relid` are to check their privileges before their next
 * commit is published (shape_stream_commit), and the table is checked in
 * full, against the current catalog, at the next maintain, before
 * decoding goes on.
 */
static void
ss_mark_relation_for_check(Oid relid)
{
	SsRelation *r = hash_search(ss_relids, &relid, HASH_FIND, NULL);
	MemoryContext old;

	if (r == NULL)
		return;
	for (int i = 0; i < r->nslots; i++)
		ss_streams[r->slots[i]].needs_check =
			ss_streams[r->slots[i]].needs_definition_check = true;
	r->verified = false;
	ss_recheck_now = true;
	if (list_member_oid(ss_changed_relids, relid))
		return;
	old = MemoryContextSwitchTo(ss_context);
	ss_changed_relids = lappend_oid(ss_changed_relids, relid);
	MemoryContextSwitchTo(old);
}

/*
 * A relcache invalidation: a table's definition, privileges or row-level
 * security may have changed.  It may come in the middle of decoding, at
 * the point of the WAL where the change was committed (or, within a
 * transaction, made).
 */
static void
ss_relcache_callback(Datum arg, Oid relid)
{
	bool		sets;

	if (ss_streams == NULL)
		return;
	if (catalog_use_resetting_caches)
	{
		/*
		 * Nothing changed, but the tuple descriptors are built again: a
		 * change after this checks its streams' column types again (once
		 * per table), so that no cached verdict outlives what it checked.
		 */
		ss_unverify_all();
		return;
	}
	/* a table sets read, or a partition of one at any level (attached, detached) */
	sets = OidIsValid(relid) && (ss_sets_on(relid) || ss_sets_partition_roots(relid) != NIL);
	if (!OidIsValid(relid) || hash_search(ss_relids, &relid, HASH_FIND, NULL) != NULL ||
		hash_search(ss_partitions, &relid, HASH_FIND, NULL) != NULL || sets)
		shape_stream_catalog_changed();
	if (!OidIsValid(relid))
		ss_mark_all_for_check();
	else
	{
		List	   *dependents = sets ? ss_sets_dependents_on(relid) : NIL;
		ListCell   *lc;

		ss_mark_relation_for_check(relid);
		/* a table a subquery reads: its shapes are checked, each over its own table */
		foreach(lc, dependents)
			ss_mark_relation_for_check(ss_streams[lfirst_int(lc)].relid);
		list_free(dependents);
	}
}

/*
 * A role, a membership or a schema changed.  A membership may matter to
 * any role, through the roles it is a member of: every shape is checked.
 * A role or a schema matters only to the shapes read as that role or over
 * a table of that schema (any role may change its own password, any user
 * with CREATE make a schema: that must not recheck every shape).
 */
static void
ss_syscache_callback(Datum arg, int cacheid, uint32 hashvalue)
{
	ShapeTable *table;

	if (ss_streams == NULL || ss_relids == NULL || hash_get_num_entries(ss_relids) == 0 ||
		catalog_use_resetting_caches)
		return;
	shape_stream_catalog_changed();	/* roles, memberships and schemas are few */
	if (cacheid == AUTHMEMROLEMEM || hashvalue == 0)
	{
		ss_mark_all_for_check();
		return;
	}
	table = ss_table();
	for (uint32 i = 0; i < table->nslots; i++)
	{
		ShapeStream *s = &ss_streams[i];
		Oid			key = cacheid == AUTHOID ? s->role : s->nsp;

		if (s->in_use && !s->needs_check &&
			GetSysCacheHashValue1(cacheid, ObjectIdGetDatum(key)) == hashvalue)
			ss_mark_relation_for_check(s->relid);
	}
}

/*
 * Something a request's resolution depends on may have changed: the
 * resolutions HTTP threads kept are not reused past this
 * (resolved_shapes.c).
 */
void
shape_stream_catalog_changed(void)
{
	atomic_fetch_add(&ss_table()->catalog_epoch, 1);
}

void
shape_stream_recheck_all(void)
{
	if (ss_streams != NULL)
		ss_mark_all_for_check();
}

bool
shape_stream_recheck_pending(void)
{
	return ss_recheck_now;
}

static void
ss_ensure_init(void)
{
	ShapeTable *table = ss_table();

	if (ss_streams != NULL)
		return;
	ss_context = AllocSetContextCreate(TopMemoryContext, "shape_sync streams",
									   ALLOCSET_DEFAULT_SIZES);
	ss_streams = MemoryContextAllocZero(ss_context, sizeof(ShapeStream) * table->nslots);
	ss_relids = ss_oid_hash("shape_sync relations", sizeof(SsRelation), 64);
	ss_partitions = ss_oid_hash("shape_sync partitions", sizeof(SsRelidEntry), 64);
	if (!ss_callback_registered)
	{
		CacheRegisterRelcacheCallback(ss_relcache_callback, (Datum) 0);
		CacheRegisterSyscacheCallback(AUTHOID, ss_syscache_callback, (Datum) 0);
		CacheRegisterSyscacheCallback(AUTHMEMROLEMEM, ss_syscache_callback, (Datum) 0);
		CacheRegisterSyscacheCallback(NAMESPACEOID, ss_syscache_callback, (Datum) 0);
		ss_callback_registered = true;
	}
}

static void
ss_use_column(ShapeStream *s, AttrNumber attnum)
{
	for (int i = 0; i < s->nused; i++)
		if (s->used_attnums[i] == attnum)
			return;
	s->used_attnums[s->nused] = attnum;
	s->used_types[s->nused] = get_atttype(s->relid, attnum);
	s->nused++;
}

/*
 * Records the columns the shape reads from decoded tuples, with their
 * types, so that a change decoded after an ALTER TABLE that changed one of
 * them is never fed to an encoder or a where clause built for the old type.
 */
static void
ss_note_used_columns(ShapeStream *s, Node *where)
{
	Bitmapset  *vars = NULL;
	int			max = s->rel->ncolumns + s->rel->nkeys;
	int			x = -1;

	if (where != NULL)
	{
		pull_varattnos(where, 1, &vars);
		max += bms_num_members(vars);
	}
	s->used_attnums = palloc(sizeof(AttrNumber) * Max(max, 1));
	s->used_types = palloc(sizeof(Oid) * Max(max, 1));
	for (int i = 0; i < s->rel->ncolumns; i++)
		ss_use_column(s, s->rel->columns[i].attnum);
	for (int i = 0; i < s->rel->nkeys; i++)
		ss_use_column(s, s->rel->keys[i]);
	while ((x = bms_next_member(vars, x)) >= 0)
		ss_use_column(s, (AttrNumber) (x + FirstLowInvalidHeapAttributeNumber));
}

/* Whether a decoded tuple's descriptor still has the shape's column types. */
bool
ss_types_match(ShapeStream *s, TupleDesc desc)
{
	for (int i = 0; i < s->nused; i++)
	{
		AttrNumber	attnum = s->used_attnums[i];
		Form_pg_attribute att;

		if (attnum < 1 || attnum > desc->natts)
			return false;
		att = TupleDescAttr(desc, attnum - 1);
		if (att->attisdropped || att->atttypid != s->used_types[i])
			return false;
	}
	return true;
}

static int
ss_oid_cmp(const void *a, const void *b)
{
	Oid			x = *(const Oid *) a;
	Oid			y = *(const Oid *) b;

	return x < y ? -1 : x > y ? 1 : 0;
}

/* The partitions below a partitioned table, at every level, sorted. */
Oid *
ss_list_partitions(Oid relid, int *n)
{
	List	   *all = find_all_inheritors(relid, NoLock, NULL);
	Oid		   *oids = palloc(sizeof(Oid) * Max(list_length(all), 1));
	ListCell   *lc;

	*n = 0;
	foreach(lc, all)
		if (lfirst_oid(lc) != relid)
			oids[(*n)++] = lfirst_oid(lc);
	qsort(oids, *n, sizeof(Oid), ss_oid_cmp);
	return oids;
}

bool
ss_has_partition(ShapeStream *s, Oid relid)
{
	return ss_oid_in(relid, s->partitions, s->npartitions);
}

/* A hash table in ss_context of entries of `entrysize` keyed by an Oid (their first field). */
HTAB *
ss_oid_hash(const char *name, Size entrysize, long nelem)
{
	HASHCTL		ctl;

	ctl.keysize = sizeof(Oid);
	ctl.entrysize = entrysize;
	ctl.hcxt = ss_context;
	return hash_create(name, nelem, &ctl, HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
}

/* Whether `relid` is one of the `n` sorted `oids` (ss_list_partitions). */
bool
ss_oid_in(Oid relid, const Oid *oids, int n)
{
	return bsearch(&relid, oids, n, sizeof(Oid), ss_oid_cmp) != NULL;
}

/* Adds or removes the stream in `slot` in the list of `relid` in `hash`. */
static void
ss_index_stream(HTAB *hash, Oid relid, uint32 slot, bool add)
{
	bool		found;
	SsRelidEntry *e = hash_search(hash, &relid, add ? HASH_ENTER : HASH_FIND, &found);
	MemoryContext old;

	if (!add)
	{
		if (e == NULL)
			return;
		e->slots = list_delete_int(e->slots, (int) slot);
		if (e->slots == NIL)
			hash_search(hash, &relid, HASH_REMOVE, NULL);
		return;
	}
	old = MemoryContextSwitchTo(ss_context);
	e->slots = lappend_int(found ? e->slots : NIL, (int) slot);
	MemoryContextSwitchTo(old);
}

/* Puts the stream in `slot` on its table's SsRelation. */
static void
ss_relation_add(ShapeStream *s)
{
	bool		found;
	SsRelation *r = hash_search(ss_relids, &s->relid, HASH_ENTER, &found);

	if (!found)
	{
		r->nslots = 0;
		r->capacity = 8;
		r->slots = MemoryContextAlloc(ss_context, sizeof(uint32) * r->capacity);
		r->index = equality_index_create(ss_context);
		r->flagged = NIL;
		r->verified_leaves = NIL;
	}
	if (r->nslots == r->capacity)
	{
		r->capacity *= 2;
		r->slots = repalloc(r->slots, sizeof(uint32) * r->capacity);
	}
	s->relation_pos = r->nslots;
	r->slots[r->nslots++] = s->slot;
	equality_index_add(r->index, s->slot, &s->route);
	r->verified = false;		/* its first change checks it */
	s->counted = true;
}

static void
ss_relation_remove(ShapeStream *s)
{
	SsRelation *r = hash_search(ss_relids, &s->relid, HASH_FIND, NULL);
	uint32		moved;

	Assert(r != NULL && r->slots[s->relation_pos] == s->slot);
	moved = r->slots[--r->nslots];
	r->slots[s->relation_pos] = moved;
	ss_streams[moved].relation_pos = s->relation_pos;
	equality_index_remove(r->index, s->slot, &s->route);
	r->flagged = list_delete_int(r->flagged, (int) s->slot);
	s->counted = false;
	if (r->nslots > 0)
		return;
	equality_index_destroy(r->index);
	pfree(r->slots);
	list_free(r->flagged);
	list_free(r->verified_leaves);
	hash_search(ss_relids, &s->relid, HASH_REMOVE, NULL);
}

/*
 * Why the shape can no longer be read from `rel` as it was made (NULL when
 * it can): the table was renamed or moved, its selected columns or its
 * key differ, or it no longer logs old rows in full.  `rel` is the table
 * as decoding sees it at a change, or as the catalog says now.
 */
const char *
ss_definition_problem(ShapeStream *s, Relation rel)
{
	ShapeRelation *now;
	AttrNumber *cols = NULL;

	/* until its snapshot worker has set FULL, the table need not be */
	if (s->ready && OidIsValid(shape_table_not_logged_in_full(RelationGetRelid(rel))))
		return "its table's replica identity is no longer FULL";
	if (strcmp(RelationGetRelationName(rel), s->rel->table) != 0 ||
		RelationGetNamespace(rel) != s->nsp)
		return "its table was renamed or moved to another schema";
	{
		/* the same schema under another name: its name now means another table */
		char	   *nsp_name = get_namespace_name(s->nsp);
		bool		renamed = nsp_name == NULL || strcmp(nsp_name, s->rel->schema) != 0;

		if (nsp_name != NULL)
			pfree(nsp_name);
		if (renamed)
			return "its table's schema was renamed";
	}
	if (!s->all_columns)
	{
		cols = palloc(sizeof(AttrNumber) * Max(s->rel->ncolumns, 1));
		for (int c = 0; c < s->rel->ncolumns; c++)
			cols[c] = s->rel->columns[c].attnum;
	}
	now = shape_relation_describe(rel, s->all_columns ? 0 : s->rel->ncolumns, cols);
	if (now->ncolumns != s->rel->ncolumns || now->nkeys != s->rel->nkeys ||
		memcmp(now->keys, s->rel->keys, sizeof(AttrNumber) * now->nkeys) != 0 ||
		strcmp(shape_schema_json(now), s->schema_json) != 0)
		return "its table's definition changed";
	if (s->partitioned)
	{
		int			n;
		Oid		   *partitions = ss_list_partitions(RelationGetRelid(rel), &n);

		if (n != s->npartitions || memcmp(partitions, s->partitions, sizeof(Oid) * n) != 0)
			return "partitions were attached to its table or detached from it";
	}
	if (OidIsValid(shape_table_not_logged(RelationGetRelid(rel))))
		return "its table, or a partition of it, is unlogged now";
	return NULL;
}

/*
 * ss_definition_problem while decoding: reading the catalog as of a
 * change can fail (an index dropped meanwhile), which says that the table
 * changed.  Like an evaluation, it holds nothing that needs a
 * subtransaction to clean up.
 */
const char *
ss_definition_problem_guarded(ShapeStream *s, Relation rel)
{
	MemoryContext old = CurrentMemoryContext;
	const char *problem = NULL;

	PG_TRY();
	{
		problem = ss_definition_problem(s, rel);
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(old);
		FlushErrorState();
		problem = "its table changed while being checked";
	}
	PG_END_TRY();
	return problem;
}

/*
 * Prepares the stream of a new shape: its encoder and its where clause,
 * ready to run on decoded tuples.  Called by the registry, in a
 * transaction, as the role the shape is read as.
 */
void
shape_stream_add(uint32 slot, uint32 generation, const ShapeSpec *spec, int chunk_threshold)
{
	ShapeStream *s;
	MemoryContext old;

	ss_ensure_init();
	s = &ss_streams[slot];
	Assert(!s->in_use);
	memset(s, 0, sizeof(*s));
	s->kept.fd = -1;
	s->context = AllocSetContextCreate(ss_context, "shape_sync stream",
									   ALLOCSET_SMALL_SIZES);
	s->in_use = true;			/* from here on, shape_stream_remove cleans up */
	old = MemoryContextSwitchTo(s->context);
	s->slot = slot;
	s->generation = generation;
	s->relid = spec->relid;
	s->role = GetUserId();
	s->nsp = get_rel_namespace(spec->relid);
	s->replica_full = (spec->flags & SHAPE_FLAG_REPLICA_FULL) != 0;
	s->all_columns = spec->ncolumns == 0;
	s->threshold = chunk_threshold;
	s->rel = shape_relation_load(spec->relid, spec->ncolumns, spec->columns);
	row_encoder_init(&s->enc, s->rel);
	s->schema_json = shape_schema_json(s->rel);
	if (spec->where_tree != NULL && subquery_in_where(stringToNode(spec->where_tree)))
	{
		/* matched against its value sets (shape_stream_subquery.c) */
		Node	   *expr = stringToNode(spec->where_tree);

		ss_subquery_add(s, expr, ss_table()->slots[slot].handle);
		equality_route_of(expression_planner((Expr *) s->subquery->plan->where_params),
						  &s->route);
		if (s->route.attnum == 0)
			(void) ss_subquery_route(s, &s->route); /* by its subquery's values */
		ss_note_used_columns(s, expr);
	}
	else if (spec->where_tree != NULL)
	{
		Node	   *expr = stringToNode(spec->where_tree);

		Expr	   *planned = expression_planner((Expr *) expr);

		s->where = ExecInitExpr(planned, NULL);
		equality_route_of(planned, &s->route);
		ss_note_used_columns(s, expr);
	}
	else
		ss_note_used_columns(s, NULL);
	initStringInfo(&s->held);
	MemoryContextSwitchTo(old);
	if (get_rel_relkind(spec->relid) == RELKIND_PARTITIONED_TABLE)
	{
		old = MemoryContextSwitchTo(s->context);
		s->partitions = ss_list_partitions(spec->relid, &s->npartitions);
		MemoryContextSwitchTo(old);
		s->partitioned = true;
		for (int i = 0; i < s->npartitions; i++)
			ss_index_stream(ss_partitions, s->partitions[i], slot, true);
		ss_npartitioned++;
	}
	ss_relation_add(s);
	if (s->subquery != NULL)
		ss_subquery_file_all(s, true);
	old = MemoryContextSwitchTo(ss_context);
	ss_snapshotting = lappend_int(ss_snapshotting, (int) slot);
	MemoryContextSwitchTo(old);
	atomic_store_explicit(&ss_table()->slots[slot].route_attnum,
						  s->route.keyno >= 0 ? s->route.attnum : 0, memory_order_relaxed);
	if (ss_in_txn)
	{
		/*
		 * Made during the replay of a transaction (registry.c): that
		 * transaction has left the proc array (decoder.c), so the shape's
		 * snapshot, taken later, has it.
		 */
		MemoryContext cxt = MemoryContextSwitchTo(ss_context);

		s->touched = true;
		s->skip_txn = true;
		ss_touched = lappend(ss_touched, s);
		MemoryContextSwitchTo(cxt);
	}
}

/*
 * A shape made during a replay, from the catalog as the replay saw it:
 * before decoding goes past the transaction being replayed, its table and
 * privileges are checked against the current catalog (shape_stream_maintain),
 * or, while another session holds the table locked, at a later maintain.
 */
void
shape_stream_check_when_replayed(uint32 slot)
{
	ss_mark_relation_for_check(ss_streams[slot].relid);
}

void
shape_stream_remove(uint32 slot)
{
	ShapeStream *s;

	if (ss_streams == NULL)
		return;
	s = &ss_streams[slot];
	if (!s->in_use)
		return;
	ss_pending_forget(s);
	kept_file_close(&s->kept);
	ss_subquery_remove(s);
	ss_touched = list_delete_ptr(ss_touched, s);
	if (!s->ready)
		ss_snapshotting = list_delete_int(ss_snapshotting, (int) slot);
	if (s->counted)
		ss_relation_remove(s);
	if (s->partitioned)
	{
		for (int i = 0; i < s->npartitions; i++)
			ss_index_stream(ss_partitions, s->partitions[i], slot, false);
		ss_npartitioned--;
	}
	ss_freed_bytes += MemoryContextMemAllocated(s->context, true);
	MemoryContextDelete(s->context);
	memset(s, 0, sizeof(*s));
	s->kept.fd = -1;
}

/*
 * The bytes the streams removed since the last call held: the worker
 * hands such memory back to the kernel now and then (http_server.c).
 */
uint64
shape_stream_take_freed_bytes(void)
{
	uint64		bytes = ss_freed_bytes;

	ss_freed_bytes = 0;
	return bytes;
}

/* Whether any shape is defined on `relid`: one hash probe. */
bool
shape_stream_wants(Oid relid)
{
	return ss_relids != NULL && hash_search(ss_relids, &relid, HASH_FIND, NULL) != NULL;
}

