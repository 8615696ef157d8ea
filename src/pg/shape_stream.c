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
 * Stitching.  While a shape's snapshot is being written (by the snapshot
 * worker, the log's writer until then), its transactions are kept in
 * memory.  When the snapshot is done, the stream reads the snapshot's
 * xmin, xmax and xip list from its snapshot-end message, drops the
 * transactions the snapshot already saw, and appends the others; from
 * then on it writes the log itself, still dropping transactions visible
 * to the snapshot until a commit at or past the WAL insert position read
 * just after the snapshot was taken (commit order is not visibility
 * order, so xmax cannot end the check).  Nothing is lost or doubled: a
 * transaction is in the snapshot exactly when it is visible to it, and
 * every transaction decoded before the stream began is visible to the
 * snapshot, because decoder.c decodes a commit only once its transaction
 * has left the proc array.
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
 * While the snapshot is being taken that is not known yet, so the reason
 * waits with the kept transaction (PendingTxn.problem) and counts only if
 * the snapshot turns out not to have it.
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
 * Everything here runs on the worker's main thread.
 *
 * IDENTIFICATION
 *	  src/pg/shape_stream.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <stdatomic.h>

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tupconvert.h"
#include "access/transam.h"
#include "access/xact.h"
#include "catalog/pg_class.h"
#include "catalog/pg_inherits.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/optimizer.h"
#include "access/sysattr.h"
#include "storage/lmgr.h"
#include "utils/hsearch.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "catalog_use.h"
#include "equality_index.h"
#include "eval_deadline.h"
#include "partition_route.h"
#include "guc.h"
#include "log_compact.h"
#include "row_encoder.h"
#include "shape_role.h"
#include "server_metrics.h"
#include "shape_stream.h"
#include "shared_state.h"

/* A transaction kept while its shape's snapshot is still being taken. */
typedef struct PendingTxn
{
	TransactionId xid;
	char	   *problem;		/* why the shape must rotate, unless the
								 * snapshot has this transaction */
	SmRotationCause problem_cause;	/* and what kind of why, for the metrics */
	StringInfoData records;		/* (LogOffset, uint32 len, bytes)* */
} PendingTxn;

typedef struct ShapeStream
{
	bool		in_use;
	uint32		slot;
	uint32		generation;
	Oid			relid;
	Oid			role;			/* read as this role (shape_sync.role) */
	Oid			nsp;			/* the schema of its table */
	bool		replica_full;
	bool		all_columns;	/* no column list: new columns count too */
	int			threshold;
	MemoryContext context;		/* everything below lives here */
	ShapeRelation *rel;
	RowEncoder	enc;
	ExprState  *where;			/* NULL: every row matches */
	int			nused;			/* columns the shape reads: selected, key, where */
	AttrNumber *used_attnums;
	Oid		   *used_types;		/* their types when the shape was made */
	char	   *schema_json;	/* to notice a changed table */

	bool		ready;			/* snapshot done: this stream writes the log */
	bool		filtering;		/* commits before snap_lsn: drop those visible */
	uint64		snap_lsn;		/* commits from here on are not in the snapshot */
	uint64		snap_xmin;
	uint64		snap_xmax;
	int			snap_nxip;
	uint64	   *snap_xip;
	List	   *pending;		/* PendingTxn *, until ready */
	uint64		pending_bytes;	/* their records, bounded (ss_emit) */
	LogOffset	last;			/* the log's last offset */
	uint64		compacted_bytes;	/* the log's size after its snapshot or
									 * its last compaction; 0: never compact */

	/* the transaction being decoded */
	bool		touched;
	bool		skip_txn;
	PendingTxn *txn_pending;
	bool		has_held;
	LogOffset	held_offset;
	StringInfoData held;		/* the latest message, without its "}}" */
	bool		appended;
	bool		rotate;			/* rotate at the next maintain */
	SmRotationCause rotate_cause;	/* why, for the metrics */
	bool		needs_check;	/* privileges changed maybe: check at commit */
	bool		needs_definition_check; /* the table changed maybe: check
										 * at its next change */
	bool		counted;		/* on its table's SsRelation */
	int			relation_pos;	/* where, in its slots */
	EqualityRoute route;		/* how changes find it (equality_index.c) */
	uint64		visited;		/* the change that last visited it */
	bool		partitioned;	/* on a partitioned table: */
	int			npartitions;	/* the partitions it had when the shape */
	Oid		   *partitions;		/* was made, sorted (in ss_partitions) */
} ShapeStream;

/* logs smaller than this are not worth compacting */
#define COMPACTION_MIN_BYTES	(64 * 1024)

static void ss_maybe_compact(ShapeStream *s);
static void ss_pending_forget(ShapeStream *s);

static ShapeStream *ss_streams;	/* by slot */
static uint64 ss_pending_total = 0; /* pending_bytes of every stream */
static uint64 ss_freed_bytes = 0;	/* held by streams removed (take_freed) */
static MemoryContext ss_context;
static List *ss_touched;		/* streams touched by the current txn */
static TransactionId ss_xid;
static bool ss_in_txn;			/* between shape_stream_begin and _commit */
static uint64 ss_lsn;
static uint64 ss_op;			/* the next op position */
static ExprContext *ss_econtext;
static List *ss_changed_relids; /* relcache invalidations seen */
static List *ss_check_slots;	/* int list: streams that took over from
								 * their snapshot, to check once */
static List *ss_snapshotting;	/* int list: streams whose snapshot is not
								 * done, oldest first */
static List *ss_rotating;		/* int list: streams marked for rotation */
static bool ss_all_changed;
static bool ss_recheck_now;		/* end the decoding batch: check first */
static bool ss_eval_too_slow;	/* ss_matches ran past its deadline */
static bool ss_callback_registered;
static HTAB *ss_relids;			/* relid -> SsRelation */
static HTAB *ss_partitions;		/* partition relid -> the partitioned streams
								 * that had it when they were made */
static int	ss_npartitioned;	/* streams on partitioned tables */

typedef struct SsRelidEntry
{
	Oid			relid;
	List	   *slots;			/* int list: the streams on this relation */
} SsRelidEntry;

/*
 * The streams on one table, and how a change of it finds the ones it may
 * concern.  A stream is "verified" when, since the last invalidation that
 * could concern the table (or cache reset, or the stream's arrival), a
 * change of the table found nothing wrong with it: its columns have the
 * types it was made with, its table's definition was checked, and, for a
 * partitioned table, its partitions include the change's.  Once every
 * stream of the table but the `flagged` ones is verified, a change visits
 * only the flagged streams (all checks again, until one finds nothing
 * wrong), the streams its index returns and those it cannot route; none of
 * them is checked again.  Until then, and for a change without its whole
 * old row (every stream must hear of it), every stream is visited and
 * checked, as each change once did.
 */
typedef struct SsRelation
{
	Oid			relid;			/* hash key */
	int			nslots;
	int			capacity;
	uint32	   *slots;			/* the streams on this relation */
	EqualityIndex *index;		/* the same streams, by their constants */
	bool		verified;
	List	   *flagged;		/* int list: streams checked on every change */
	List	   *verified_leaves;	/* OIDs: partitions whose changes were
									 * checked with every stream */
} SsRelation;

static uint64 ss_visits;		/* one per change and relation visited */

/* ------------------------------------------------------------ set-up */

static ShapeTable *
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
	if (!OidIsValid(relid) || hash_search(ss_relids, &relid, HASH_FIND, NULL) != NULL ||
		hash_search(ss_partitions, &relid, HASH_FIND, NULL) != NULL)
		shape_stream_catalog_changed();
	if (!OidIsValid(relid))
		ss_mark_all_for_check();
	else
		ss_mark_relation_for_check(relid);
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
	{
		HASHCTL		ctl;

		ctl.keysize = sizeof(Oid);
		ctl.entrysize = sizeof(SsRelation);
		ctl.hcxt = ss_context;
		ss_relids = hash_create("shape_sync relations", 64, &ctl,
								HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
		ctl.entrysize = sizeof(SsRelidEntry);
		ss_partitions = hash_create("shape_sync partitions", 64, &ctl,
									HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
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
static bool
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
static Oid *
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

static bool
ss_has_partition(ShapeStream *s, Oid relid)
{
	return bsearch(&relid, s->partitions, s->npartitions, sizeof(Oid), ss_oid_cmp) != NULL;
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
static const char *
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
	return NULL;
}

/*
 * ss_definition_problem while decoding: reading the catalog as of a
 * change can fail (an index dropped meanwhile), which says that the table
 * changed.  Like an evaluation, it holds nothing that needs a
 * subtransaction to clean up.
 */
static const char *
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
	if (spec->where_tree != NULL)
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

/* ------------------------------------------------------------ stitching */

/* The 64-bit form of a recent xid, as pg_current_snapshot() shows it. */
static uint64
ss_full_xid(TransactionId xid)
{
	FullTransactionId next = ReadNextFullTransactionId();
	uint32		epoch = EpochFromFullTransactionId(next);

	if (xid > XidFromFullTransactionId(next) && epoch > 0)
		epoch--;				/* from before the last wraparound */
	return ((uint64) epoch << 32) | xid;
}

/* Whether transaction `xid` is visible to the shape's snapshot. */
static bool
ss_visible(ShapeStream *s, TransactionId xid)
{
	uint64		full = ss_full_xid(xid);

	if (full < s->snap_xmin)
		return true;
	if (full >= s->snap_xmax)
		return false;
	for (int i = 0; i < s->snap_nxip; i++)
		if (s->snap_xip[i] == full)
			return false;
	return true;
}

/* Reads "xmin", "xmax" and "xip_list" from the snapshot-end message. */
static void
ss_parse_snapshot_end(ShapeStream *s, const char *json)
{
	const char *p;
	MemoryContext old = MemoryContextSwitchTo(s->context);

	p = strstr(json, "\"xmin\":\"");
	s->snap_xmin = p ? strtou64(p + 8, NULL, 10) : 0;
	p = strstr(json, "\"xmax\":\"");
	s->snap_xmax = p ? strtou64(p + 8, NULL, 10) : 0;
	p = strstr(json, "\"xip_list\":[");
	s->snap_nxip = 0;
	s->snap_xip = NULL;
	if (p)
	{
		int			cap = 16;

		s->snap_xip = palloc(sizeof(uint64) * cap);
		for (p += 12; *p && *p != ']'; p++)
		{
			if (*p != '"')
				continue;
			if (s->snap_nxip == cap)
			{
				cap *= 2;
				s->snap_xip = repalloc(s->snap_xip, sizeof(uint64) * cap);
			}
			s->snap_xip[s->snap_nxip++] = strtou64(p + 1, (char **) &p, 10);
		}
	}
	MemoryContextSwitchTo(old);
}

/* ------------------------------------------------------------ appending */

static void
ss_rotate_later(ShapeStream *s, SmRotationCause cause, const char *why)
{
	if (!s->rotate)
	{
		MemoryContext old = MemoryContextSwitchTo(ss_context);

		ereport(LOG,
				(errmsg("shape %s will be rotated: %s", ss_table()->slots[s->slot].handle, why)));
		s->rotate_cause = cause;
		ss_rotating = lappend_int(ss_rotating, (int) s->slot);
		MemoryContextSwitchTo(old);
	}
	s->rotate = true;
}

/*
 * The shape cannot be served as defined: it fails, with `message` for its
 * clients (400), and the registry remembers the failure for a while, so
 * the same definition is not made again at once (the registry).
 */
static void
ss_fail_later(ShapeStream *s, const char *message)
{
	ShapeTable *table = ss_table();
	ShapeSlot  *slot = &table->slots[s->slot];

	ss_rotate_later(s, SM_ROTATION_FAILED, message);
	if (!s->ready)
		return;					/* the snapshot worker has the slot's state */
	slot->error_status = 400;
	strlcpy(slot->error, message, sizeof(slot->error));
	shape_table_set_state(table, s->slot, SHAPE_FAILED);
	shape_table_mark_dirty(table, s->slot);
}

/* Appends one finished message to the log, closing a chunk when full. */
static void
ss_append(ShapeStream *s, LogOffset offset, const char *data, uint32 len)
{
	ShapeTable *table = ss_table();
	ShapeLog   *log = shape_table_log(table, s->slot);
	SlogResult	res;

	if (s->rotate)
		return;
	res = slog_append(table->arena, log, offset, SLOG_RECORD_CHANGE, data, len);
	if (res == SLOG_OK && log->open_chunk_bytes >= (uint64) s->threshold)
		res = slog_close_chunk(table->arena, log, offset);
	if (res != SLOG_OK)
	{
		ss_rotate_later(s, SM_ROTATION_LOG_FULL, res == SLOG_FULL ? "the shape log memory (\"shape_sync.log_memory\") is full"
						: "the shape's log reached its size limit");
		return;
	}
	s->last = offset;
	s->appended = true;
	atomic_store_explicit(&table->slots[s->slot].changes,
						  atomic_load_explicit(&table->slots[s->slot].changes,
											   memory_order_relaxed) + 1,
						  memory_order_relaxed);
	sm_add(SM_SHAPE_CHANGES, 0, 1);
}

/*
 * The most the snapshotting shapes keep, together, of the transactions
 * decoded meanwhile (ss_pending_total): a quarter of the log memory, which
 * they would go to.
 */
static uint64
ss_pending_limit(void)
{
	/* and under what one allocation may hold: one transaction's buffer */
	return Min((uint64) shape_sync_log_memory * 1024 * 1024 / 4, (uint64) MaxAllocSize / 2);
}

/* A stream's kept changes are gone (used, freed, or not to be kept). */
static void
ss_pending_forget(ShapeStream *s)
{
	Assert(ss_pending_total >= s->pending_bytes);
	ss_pending_total -= s->pending_bytes;
	s->pending_bytes = 0;
}

/* A finished message goes to the log, or to the pending transaction. */
static void
ss_emit(ShapeStream *s, LogOffset offset, const char *data, uint32 len)
{
	if (s->ready)
	{
		ss_append(s, offset, data, len);
		return;
	}
	if (s->rotate)
		return;
	if (ss_pending_total + sizeof(offset) + sizeof(len) + len > ss_pending_limit())
	{
		/* bounded: the shape starts over once the changes have committed */
		ss_rotate_later(s, SM_ROTATION_LOG_FULL, psprintf("the changes kept while snapshots are taken exceed %llu MB (a quarter of \"shape_sync.log_memory\")",
									(unsigned long long) (ss_pending_limit() >> 20)));
		ss_pending_forget(s);
		return;
	}
	s->pending_bytes += sizeof(offset) + sizeof(len) + len;
	ss_pending_total += sizeof(offset) + sizeof(len) + len;
	appendBinaryStringInfo(&s->txn_pending->records, (const char *) &offset, sizeof(offset));
	appendBinaryStringInfo(&s->txn_pending->records, (const char *) &len, sizeof(len));
	appendBinaryStringInfo(&s->txn_pending->records, data, len);
}

/* Finishes the held message, as the transaction's last or not. */
static void
ss_release_held(ShapeStream *s, bool last)
{
	if (!s->has_held)
		return;
	appendStringInfoString(&s->held, last ? ",\"last\":true}}" : "}}");
	ss_emit(s, s->held_offset, s->held.data, (uint32) s->held.len);
	resetStringInfo(&s->held);
	s->has_held = false;
}

static void
ss_free_pending(PendingTxn *txn)
{
	pfree(txn->records.data);
	if (txn->problem != NULL)
		pfree(txn->problem);
	pfree(txn);
}

/* First change of the transaction for this shape. */
static bool
ss_touch(ShapeStream *s)
{
	MemoryContext old;

	if (s->touched)
		return !s->skip_txn;
	s->touched = true;
	s->skip_txn = false;
	s->appended = false;
	old = MemoryContextSwitchTo(ss_context);
	ss_touched = lappend(ss_touched, s);
	MemoryContextSwitchTo(old);
	if (s->ready && s->filtering)
	{
		/*
		 * Commit order is not visibility order (a commit record is written
		 * before its transaction becomes visible): every commit before
		 * the snapshot's insert position is checked, none after it.
		 */
		if (ss_lsn >= s->snap_lsn)
			s->filtering = false;
		else if (ss_visible(s, ss_xid))
			s->skip_txn = true;
	}
	if (!s->ready)
	{
		old = MemoryContextSwitchTo(s->context);
		s->txn_pending = palloc0(sizeof(PendingTxn));
		s->txn_pending->xid = ss_xid;
		initStringInfo(&s->txn_pending->records);
		MemoryContextSwitchTo(old);
	}
	return !s->skip_txn;
}

/* Queues a message (without its closing braces) at op position `op`. */
static void
ss_message(ShapeStream *s, uint64 op, StringInfo msg)
{
	LogOffset	offset = {(int64_t) ss_lsn, op};
	MemoryContext old = MemoryContextSwitchTo(s->context);

	ss_release_held(s, false);
	appendBinaryStringInfo(&s->held, msg->data, msg->len);
	s->held_offset = offset;
	s->has_held = true;
	MemoryContextSwitchTo(old);
}

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
}

/* Whether the row in values/nulls satisfies the shape's where clause. */
static bool
ss_matches(ShapeStream *s, TupleTableSlot *slot)
{
	bool		isnull;
	Datum		result;

	if (s->where == NULL)
		return true;
	if (ss_econtext == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(ss_context);

		ss_econtext = CreateStandaloneExprContext();
		MemoryContextSwitchTo(old);
	}
	ss_econtext->ecxt_scantuple = slot;
	eval_deadline_begin();
	result = ExecEvalExprSwitchContext(s->where, ss_econtext, &isnull);
	if (eval_deadline_end())
	{
		/* code that never looked at interrupts ran past the deadline */
		ss_eval_too_slow = true;
		ereport(ERROR,
				(errcode(ERRCODE_QUERY_CANCELED),
				 errmsg("a shape's where clause took longer than \"%s\" allows",
						"shape_sync.where_evaluation_timeout")));
	}
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
		  TupleTableSlot *oldslot, uint64 op)
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
	if (strcmp(operation, "update") == 0)
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
static void
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

void
shape_stream_change(Relation rel, ReorderBufferChange *change)
{
	Oid			relid = RelationGetRelid(rel);
	SsRelation *r;
	bool		routed;
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
	if (r == NULL && !routed)
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
		MemoryContextSwitchTo(old);
		/* what the failed evaluation held goes now, not at the next match */
		if (ss_econtext != NULL)
			ResetExprContext(ss_econtext);
		edata = CopyErrorData();
		FlushErrorState();
		if (too_slow)
			ss_fail_later(s, psprintf("The shape's where clause took longer than the %d ms that shape_sync.where_evaluation_timeout allows on one change of its table",
									  shape_sync_where_evaluation_timeout));
		else if (ss_takes_transaction(s))
			ss_rotate_unless_in_snapshot(s, SM_ROTATION_FAILED, psprintf("a change could not be processed: %s",
													 edata->message));
		FreeErrorData(edata);
	}
	PG_END_TRY();
}

static void
ss_apply_change(ShapeStream *s, ReorderBufferChangeType action,
				TupleTableSlot *newslot, TupleTableSlot *oldslot, uint64 op)
{
	bool		new_in = newslot && ss_matches(s, newslot);
	bool		old_in = oldslot && ss_matches(s, oldslot);

	if (!new_in && !old_in)
		return;
	if (!ss_touch(s))
		return;
	{
		switch (action)
		{
			case REORDER_BUFFER_CHANGE_INSERT:
				ss_encode(s, "insert", newslot, NULL, op);
				break;
			case REORDER_BUFFER_CHANGE_DELETE:
				ss_encode(s, "delete", NULL, oldslot, op);
				break;
			case REORDER_BUFFER_CHANGE_UPDATE:
				if (new_in && !old_in)
					ss_encode(s, "insert", newslot, NULL, op);
				else if (!new_in && old_in)
					ss_encode(s, "delete", NULL, oldslot, op);
				else
					ss_encode(s, "update", newslot, oldslot, op);
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

	foreach(lc, ss_touched)
	{
		ShapeStream *s = lfirst(lc);

		/* as of a transaction the snapshot has, the privileges do not matter */
		if (s->needs_check && !s->rotate && !s->skip_txn)
			ss_recheck_privileges(s);
		ss_release_held(s, true);
		if (s->rotate)
			;					/* retired at the next maintain */
		else if (!s->ready && s->txn_pending != NULL)
		{
			MemoryContext old = MemoryContextSwitchTo(s->context);

			if (s->txn_pending->records.len > 0 || s->txn_pending->problem != NULL)
				s->pending = lappend(s->pending, s->txn_pending);
			else
				ss_free_pending(s->txn_pending);
			MemoryContextSwitchTo(old);
		}
		else if (s->appended)
		{
			shape_table_note_published(table, s->slot);	/* covered by the publish */
			slog_publish(shape_table_log(table, s->slot), s->last, SLOG_SNAPSHOT_DONE);
			shape_table_mark_dirty(table, s->slot);
			ss_maybe_compact(s);
		}
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

/* ---------------------------------------------------------- maintenance */

/* The snapshot is done: stitch the kept transactions on, take the pen. */
static void
ss_take_over(ShapeStream *s)
{
	ShapeTable *table = ss_table();
	ShapeLog   *log = shape_table_log(table, s->slot);
	SlogPublished pub;
	SlogRange	range;
	SlogRecordHeader hdr;
	char	   *snapshot_end;
	uint64		pos;
	uint64		last_pos = 0;
	ListCell   *lc;

	/* the snapshot-end message is the last record of the last chunk */
	slog_read_published(log, &pub);
	if (pub.chunk_count > 1)
	{
		LogOffset	before_last = {0, pub.chunk_count - 2};

		slog_locate(table->arena, log, &pub, before_last, &range);
	}
	else
		slog_locate(table->arena, log, &pub, LOG_OFFSET_BEFORE_ALL, &range);
	for (pos = range.start; pos < range.end; pos += slog_record_span(hdr.len))
	{
		slog_read_header(table->arena, log, pos, &hdr);
		if (hdr.kind == SLOG_RECORD_CONTROL)
			last_pos = pos;
	}
	slog_read_header(table->arena, log, last_pos, &hdr);
	snapshot_end = palloc(hdr.len + 1);
	slog_copy_out(table->arena, log, last_pos + sizeof(hdr), snapshot_end, hdr.len);
	snapshot_end[hdr.len] = '\0';
	ss_parse_snapshot_end(s, snapshot_end);
	pfree(snapshot_end);
	s->snap_lsn = table->slots[s->slot].snapshot_lsn;

	s->ready = true;
	s->filtering = true;
	s->last = pub.last;
	s->appended = false;
	{
		/*
		 * Now its table must log old rows in full: look once, at this
		 * stream alone (checking every stream of the table for each new
		 * one made creating N shapes cost N^2 checks).
		 */
		MemoryContext old = MemoryContextSwitchTo(ss_context);

		ss_check_slots = lappend_int(ss_check_slots, (int) s->slot);
		MemoryContextSwitchTo(old);
	}
	foreach(lc, s->pending)
	{
		PendingTxn *txn = lfirst(lc);
		const char *p = txn->records.data;
		const char *end = p + txn->records.len;

		if (ss_visible(s, txn->xid))
			continue;
		if (txn->problem != NULL)
		{
			ss_rotate_later(s, txn->problem_cause, txn->problem);
			break;
		}
		while (p < end)
		{
			LogOffset	offset;
			uint32		len;

			memcpy(&offset, p, sizeof(offset));
			memcpy(&len, p + sizeof(offset), sizeof(len));
			ss_append(s, offset, p + sizeof(offset) + sizeof(len), len);
			p += sizeof(offset) + sizeof(len) + len;
		}
	}
	foreach(lc, s->pending)
		ss_free_pending(lfirst(lc));
	list_free(s->pending);
	s->pending = NIL;
	ss_pending_forget(s);
	if (s->appended)
		shape_table_note_published(table, s->slot);	/* covered by the publish */
	/*
	 * Readers past the snapshot waited for this (snapshot.c): wake them.  A
	 * stream that could not take its kept transactions is rotated instead
	 * (its readers then get 409), never published as complete.
	 */
	if (!s->rotate)
		slog_publish(log, s->last, SLOG_SNAPSHOT_DONE);
	shape_table_mark_dirty(table, s->slot);
	s->appended = false;
	s->compacted_bytes = Max(shape_table_log(table, s->slot)->write_pos, 1);
}

/*
 * Compacts the shape's log once it has grown to shape_sync.compaction_factor
 * times its size after the snapshot or the last compaction (log_compact.c):
 * each byte appended is rewritten a bounded number of times.  Between
 * transactions, on the main thread, the log's writer.
 */
static void
ss_maybe_compact(ShapeStream *s)
{
	ShapeTable *table = ss_table();
	ShapeLog   *log = shape_table_log(table, s->slot);
	ShapeLog   *spare;
	SlogCompactStats stats;
	SlogCompactResult res;
	TimestampTz started;

	if (shape_sync_compaction_factor <= 0 || s->compacted_bytes == 0 ||
		log->write_pos < COMPACTION_MIN_BYTES ||
		(double) log->write_pos < shape_sync_compaction_factor * (double) s->compacted_bytes)
		return;
	spare = shape_table_spare_log(table, s->slot);
	if (spare == NULL)
		return;					/* responses still read the previous one */
	started = GetCurrentTimestamp();
	res = slog_compact(table->arena, log, spare, (uint32) s->threshold, &stats);
	if (res != SLOG_COMPACT_OK)
	{
		shape_table_drop_spare_log(table, s->slot);
		if (res == SLOG_COMPACT_UNREADABLE)
		{
			ereport(WARNING,
					(errmsg("shape %s cannot be compacted: its log holds a record it did not expect",
							table->slots[s->slot].handle)));
			s->compacted_bytes = 0;
		}
		else
			s->compacted_bytes = log->write_pos;	/* try again after as much growth */
		return;
	}
	shape_table_swap_log(table, s->slot);
	atomic_fetch_add_explicit(&table->slots[s->slot].compactions, 1, memory_order_relaxed);
	sm_add(SM_COMPACTIONS, 0, 1);
	s->compacted_bytes = Max(stats.bytes_out, 1);
	ereport(DEBUG1,
			(errmsg_internal("shape %s compacted from %llu to %llu bytes (%llu of %llu records, %llu tombstones) in %lld ms",
							 table->slots[s->slot].handle,
							 (unsigned long long) stats.bytes_in,
							 (unsigned long long) stats.bytes_out,
							 (unsigned long long) stats.records_out,
							 (unsigned long long) stats.records_in,
							 (unsigned long long) stats.tombstones,
							 (long long) ((GetCurrentTimestamp() - started) / 1000))));
}

/*
 * Rotates the shapes of a relation that is gone, whose columns changed, or
 * that their role can no longer read.  `role` is what shape_sync.role
 * names now, or InvalidOid when it cannot be used.
 */
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
		 * current catalog (snapshot.c), and a change to the table decoded
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

		if (s->in_use && !s->ready && !s->rotate && !(replaying && s->touched) &&
			shape_table_state(table, s->slot) == SHAPE_READY)
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
