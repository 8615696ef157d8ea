/*-------------------------------------------------------------------------
 *
 * shape_stream_internal.h
 *		What the files of the shape stream share: the stream, the kept
 *		transactions, the streams of a table, and the stream's state.
 *
 * The shape stream (shape_stream.c explains its design) is eight files:
 *	 shape_stream.c           set-up, the catalog watch, the streams of a table
 *	 shape_stream_change.c    the change path: routing, matching, encoding
 *	 shape_stream_log.c       stitching a finished snapshot or a move-in,
 *	                          appending, compaction
 *	 shape_stream_maintain.c  between batches: checks against the catalog,
 *	                          rotations
 *	 shape_stream_subquery.c  shapes with subqueries: their rows, routes, moves
 *	 shape_stream_values.c    the value sets of their subqueries
 *	 shape_stream_nested.c    value sets whose select has subqueries itself
 *	 shape_stream_sets_disk.c value sets kept on disk, read back at start
 * All of it runs on the worker's main thread; nothing here is shared with
 * another thread or process.
 *
 * IDENTIFICATION
 *	  src/pg/worker/shape_stream_internal.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SHAPE_STREAM_INTERNAL_H
#define SHAPE_STREAM_INTERNAL_H

#include "postgres.h"

#include "executor/executor.h"
#include "replication/reorderbuffer.h"
#include "lib/ilist.h"
#include "lib/stringinfo.h"
#include "nodes/pg_list.h"
#include "utils/hsearch.h"

#include "equality_index.h"
#include "kept_file.h"
#include "row_encoder.h"
#include "row_tags.h"
#include "server_metrics.h"
#include "shape_relation.h"
#include "shape_stream.h"
#include "shape_table.h"
#include "value_sets_file.h"

/*
 * A stream whose where clause has subqueries (shape_stream_subquery.c):
 * its plan, how its rows are tagged, and its value sets.
 */
typedef struct SsSubquery
{
	SubqueryPlan *plan;
	RowTagger	tagger;
	ExprState  *where;			/* plan->where_params */
	ExprState **conditions;		/* by position: the plain conditions */
	ParamExecData *params;		/* by sublink: each one's result for a row */
	int		   *sets;			/* by dependency: its value set */
	Node	   *where_tree;		/* the where clause the plan was made from */
	int			route_sublink;	/* the subquery whose values route changes to
								 * it (see ss_subquery_route), or -1 */
	FmgrInfo	route_hash;		/* the hash of that subquery's values */
	FmgrInfo	route_input;	/* ... read with this input function (looked up
								 * once: streams go outside transactions too) */
	Oid			route_ioparam;
	Oid			route_collation;
} SsSubquery;

/*
 * A move-in in flight (shape_stream_subquery.c): the rows that a
 * transaction's values brought into the shape are read by a query of their
 * own; meanwhile the stream keeps its transactions, as while its snapshot
 * is taken, and the rows are spliced in when they come (ss_move_in_splice).
 */
typedef struct SsMoveIn
{
	MemoryContext context;		/* the move-in and everything below */
	int			dependency;
	List	   *values;			/* char ** (texts by column) of each value */
	List	   *keys;			/* StringInfo: the same values as set keys */
	HTAB	   *key_set;		/* the same keys, to look one up (ss_key_set) */
	int			nxids;			/* the transactions that moved them in: the */
	TransactionId *xids;		/* first, and those whose values joined it */
	char	   *stale;			/* values joined while its query ran: the
								 * filter to read them all again with, when
								 * it ends */
	bool		requery;		/* ... which it did: at the next maintain */
	int			rereads;		/* queries made again for values that joined */
	LogOffset	after;			/* past its records: where the rows may go */
	bool		holding;		/* from the transaction after the moving one on:
								 * the stream keeps its transactions */
	bool		answered;
	uint64		database_lsn;	/* past every commit its snapshot sees */
	SnapshotVisibility *visibility;
	StringInfoData answer;		/* (uint32 len, bytes)*: rows, snapshot-end */
} SsMoveIn;

/* A transaction kept while its shape's snapshot is still being taken. */
typedef struct PendingTxn
{
	TransactionId xid;
	char	   *problem;		/* why the shape must rotate, unless the
								 * snapshot has this transaction */
	SmRotationCause problem_cause;	/* and what kind of why, for the metrics */
	StringInfoData records;		/* (LogOffset, uint32 len, bytes)* */
	StringInfoData records_before;	/* the same, as if the stream's move-in
									 * had not happened (data NULL: none) */
	List	   *moved_out;		/* StringInfo: keys of the move-in's values
								 * this transaction moved out again */
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
	ExprState  *where;			/* NULL: every row matches, or subquery */
	SsSubquery *subquery;		/* NULL: the where clause has none */
	SsMoveIn   *moving;			/* a move-in in flight: transactions are kept */
	bool		has_held_before;	/* the latest message of the transaction */
	LogOffset	held_before_offset; /* as if the move-in had not happened */
	StringInfoData held_before; /* (ss_old_view) */
	int			nused;			/* columns the shape reads: selected, key, where */
	AttrNumber *used_attnums;
	Oid		   *used_types;		/* their types when the shape was made */
	char	   *schema_json;	/* to notice a changed table */

	bool		snapshot_done;	/* READY, with snap_visibility set */
	bool		ready;			/* taken over: this stream writes the log */
	bool		filtering;		/* commits before snap_lsn: drop those visible */
	uint64		snap_lsn;		/* commits from here on are not in the snapshot */
	uint64		resume_lsn;		/* restored: commits before it are in the log */
	SnapshotVisibility *snap_visibility;	/* what the snapshot saw */
	SnapshotVisibility *creating_visibility;	/* what the snapshot of the
												 * transaction that made the
												 * shape saw; NULL: unknown */
	List	   *pending;		/* PendingTxn *, until ready */
	uint64		pending_bytes;	/* their records, bounded (ss_emit) */
	KeptFile	kept;			/* committed ones past the bound, before those
								 * in pending (ss_spill_kept) */
	LogOffset	last;			/* the log's last offset */
	uint64		compacted_bytes;	/* the log's size after its snapshot or
									 * its last compaction; 0: never compact */
	bool		compaction_refused; /* logged that it was too large once */

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


extern ShapeStream *ss_streams;	/* by slot */
extern uint64 ss_pending_total; /* pending_bytes of every stream */
extern uint64 ss_freed_bytes;	/* held by streams removed (take_freed) */
extern MemoryContext ss_context;
extern List *ss_touched;		/* streams touched by the current txn */
extern TransactionId ss_xid;
extern bool ss_in_txn;			/* between shape_stream_begin and _commit */
extern uint64 ss_lsn;
extern uint64 ss_op;			/* the next op position */
extern ExprContext *ss_econtext;
extern List *ss_changed_relids; /* relcache invalidations seen */
extern List *ss_check_slots;	/* int list: streams that took over from
								 * their snapshot, to check once */
extern List *ss_snapshotting;	/* int list: streams whose snapshot is not
								 * done, oldest first */
extern List *ss_rotating;		/* int list: streams marked for rotation */
extern bool ss_all_changed;
extern bool ss_recheck_now;		/* end the decoding batch: check first */
extern bool ss_eval_too_slow;	/* ss_matches ran past its deadline */
extern bool ss_callback_registered;
extern HTAB *ss_relids;			/* relid -> SsRelation */
extern HTAB *ss_partitions;		/* partition relid -> the partitioned streams
								 * that had it when they were made */
extern int	ss_npartitioned;	/* streams on partitioned tables */

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

extern uint64 ss_visits;		/* one per change and relation visited */

/* shared between the files of the stream */
extern const char *ss_definition_problem(ShapeStream *s, Relation rel);
extern const char *ss_definition_problem_guarded(ShapeStream *s, Relation rel);
extern void ss_fail_later(ShapeStream *s, RefusalReason reason, int64 number,
						  const char *text);
extern void ss_free_pending(PendingTxn *txn);
extern bool ss_has_partition(ShapeStream *s, Oid relid);
extern Oid *ss_list_partitions(Oid relid, int *n);
extern HTAB *ss_oid_hash(const char *name, Size entrysize, long nelem);
extern bool ss_oid_in(Oid relid, const Oid *oids, int n);
extern void ss_message(ShapeStream *s, uint64 op, StringInfo msg);
extern void ss_pending_forget(ShapeStream *s);
extern void ss_publish_commit(ShapeStream *s);
extern void ss_release_held(ShapeStream *s, bool last);
extern void ss_rotate_later(ShapeStream *s, SmRotationCause cause, const char *why);
extern ShapeTable *ss_table(void);
extern void ss_take_over(ShapeStream *s);
extern bool ss_touch(ShapeStream *s);
extern bool ss_types_match(ShapeStream *s, TupleDesc desc);
extern void ss_rotate_unless_in_snapshot(ShapeStream *s, SmRotationCause cause,
										 const char *why);
extern void ss_emit(ShapeStream *s, LogOffset offset, const char *data, uint32 len);
extern void ss_econtext_ensure(void);
extern void ss_evaluation_too_slow(void) pg_attribute_noreturn();
extern bool ss_visible(const SnapshotVisibility *vis, TransactionId xid);
extern SnapshotVisibility *ss_visibility_of(Snapshot snapshot, FullTransactionId next,
											MemoryContext context);


/*
 * The value sets of subqueries (shape_stream_values.c): what the stream's
 * subquery file (shape_stream_subquery.c) reads of them.
 */
/* A value's text, as the key of a set: per column, a length and the bytes. */
typedef struct SsValueKey
{
	int			set;			/* the set's id: one table holds every set's */
	uint32		len;
	const char *data;
} SsValueKey;

typedef struct SsValue
{
	SsValueKey	key;			/* hash key; data in the set's context */
	int64		count;			/* rows of the inner table with it */
	uint64		txn;			/* the transaction that last counted it */
	int64		before;			/* its count before that transaction */
	dlist_node	in_set;			/* on its set's list */
} SsValue;

/* A set whose select's where clause has subqueries (shape_stream_nested.c). */
typedef struct SsNested SsNested;

typedef struct SsValueSet
{
	bool		in_use;
	bool		findable;		/* new shapes may use it */
	int			parent;			/* the set whose where clause reads this
								 * one (its own, never shared), or -1 */
	int			level;			/* 0, or its parent's + 1 */
	SsNested   *nested;			/* NULL: its where clause has no subquery */
	char	   *identity;
	Oid			role;
	Oid			relid;
	int			ncolumns;
	AttrNumber *attnums;
	Oid		   *types;
	int			nread;			/* the columns the select reads, and their */
	AttrNumber *read_attnums;	/* types: a change of one fails the set */
	Oid		   *read_types;
	FmgrInfo   *outputs;
	ExprState  *where;			/* NULL: every row */
	EqualityRoute route;
	bool		partitioned;	/* its table is */
	int			npartitions;	/* its partitions when it was read (sorted): */
	Oid		   *partitions;		/* its changes come from them */
	int			id;
	bool		indexed;		/* read, and in its table's index */
	dlist_head	values;			/* SsValue, each in ss_values by key */
	int64		nvalues;		/* with count > 0 */
	int64		null_rows;		/* rows whose value has a NULL */
	int			refcount;
	List	   *dependents;		/* int list: streams using it, once each */
	MemoryContext context;
	uint64		uid;			/* its id in the value sets file, or 0: its
								 * changes are not written there (not settled
								 * yet, or failed; shape_stream_sets_disk.c) */
	uint64		resume_lsn;		/* restored: commits before it are counted */

	/* its reading, until decoding reaches it */
	bool		filtering;
	SnapshotVisibility *seen;
	uint64		seen_lsn;
	bool		applied_unseen;

	/* the transaction being decoded */
	uint64		txn;
	bool		skip_txn;
	List	   *txn_values;		/* SsValue *, counted in it */
	int64		null_rows_before;
	int64		nvalues_before;
	uint64		visited;
	char	   *problem;		/* its shapes rotate, for this reason */
} SsValueSet;

extern SsValueSet **ss_sets;	/* by id */
extern int	ss_nsets;
extern List *ss_sets_touched;	/* SsValueSet *, in the current transaction */
extern uint64 ss_txn_number;	/* the transaction being decoded */
extern char **ss_key_texts(const SsValueKey *key, int ncolumns);
extern bool ss_row_key(TupleTableSlot *slot, int ncolumns, const AttrNumber *attnums,
					   FmgrInfo *outputs, StringInfo key);
extern int	ss_set_id(SsValueSet *set);
extern SsValue *ss_value_find(SsValueSet *set, const char *data, uint32 len);
/* dynahash functions of SsValueKey: by set and bytes */
extern uint32 ss_value_hash(const void *key, Size keysize);
extern int	ss_value_match(const void *a, const void *b, Size keysize);
extern void ss_value_remove(SsValueSet *set, SsValue *v);
extern void ss_set_count(SsValueSet *set, StringInfo key, bool has_value, int64 delta);
extern void ss_set_fail(SsValueSet *set, const char *problem);
extern void ss_set_fail_caught(SsValueSet *set, MemoryContext context);
extern bool ss_set_touch(SsValueSet *set);
extern SsValueSet *ss_set_top(SsValueSet *set);
extern SsValueSet *ss_set_make(const SubqueryDependency *dep, int parent, int level);
extern void ss_set_indexed(SsValueSet *set);
extern SsValueSet *ss_set_create(const SubqueryDependency *dep, int parent, int level);
extern void ss_set_destroy(SsValueSet *set);
extern int	ss_set_evaluate(SsValueSet *set, TupleTableSlot *slot, bool timed);
extern int64 ss_set_null_rows(const SsValueSet *set, bool before);
extern bool ss_sublink_result(SsValueSet *set, TupleTableSlot *slot, const AttrNumber *attnums,
							  FmgrInfo *outputs, bool before, StringInfo key,
							  ParamExecData *param);

/* shape_stream_nested.c */
extern int	ss_nnested;			/* sets with an SsNested */
extern void ss_nested_init(SsValueSet *set, const SubqueryDependency *dep);
extern void ss_nested_read_children(SsValueSet *set, const SubqueryDependency *dep);
extern void ss_nested_read_done(SsValueSet *set);
extern Query *ss_nested_query(SsValueSet *set, const SubqueryDependency *dep);
extern TupleTableSlot *ss_nested_read_row(SsValueSet *set, TupleTableSlot *slot);
extern ParamExecData *ss_nested_params(SsValueSet *set);
extern void ss_nested_params_set(SsValueSet *set, TupleTableSlot *slot, bool before);
extern void ss_nested_keep(SsValueSet *set, TupleTableSlot *slot, int delta, bool timed);
extern void ss_nested_cascade(void);
extern const char *ss_nested_partitions_problem(SsValueSet *set);
extern void ss_nested_destroy(SsValueSet *set);
extern int	ss_nested_nchildren(const SsValueSet *set);
extern int	ss_nested_child(const SsValueSet *set, int dependency);
extern void ss_nested_set_child(SsValueSet *set, int dependency, int child);
extern void ss_nested_write_kept(SsValueSet *set, ValueSetsBuffer *buf);
extern void ss_nested_restore_row(SsValueSet *set, const char *key, uint32 len, int64 count);

/*
 * shape_stream_sets_disk.c: value sets kept on disk, as their changes come
 * (each a no-op for a set not kept there), and read back at start.
 */
extern void ss_disk_value(SsValueSet *set, const SsValue *v);
extern void ss_disk_null_rows(SsValueSet *set);
extern void ss_disk_kept_row(SsValueSet *set, const char *key, uint32 len, int64 count);
extern void ss_disk_drop(SsValueSet *set);
extern void ss_disk_unsettled(SsValueSet *set, bool add);
extern bool ss_disk_restoring(void);
extern SsValueSet *ss_disk_restore_set(const SubqueryDependency *dep);
extern bool ss_subquery_kept_on_disk(const ShapeStream *s);

/* Whether the stream keeps its transactions for a move-in in flight. */
static inline bool
ss_holding(const ShapeStream *s)
{
	return s->moving != NULL && s->moving->holding;
}

/* shape_stream_subquery.c and shape_stream_values.c */
extern void ss_subquery_add(ShapeStream *s, Node *where, const char *handle);
extern void ss_subquery_remove(ShapeStream *s);
extern bool ss_subquery_route(ShapeStream *s, EqualityRoute *route);
extern void ss_subquery_file_all(ShapeStream *s, bool add);
extern bool ss_subquery_row(ShapeStream *s, TupleTableSlot *slot, bool *active, bool old_view);
extern int	ss_set_acquire(const SubqueryDependency *dep, uint32 slot);
extern void ss_set_release(int id, uint32 slot);
extern int	ss_npartitioned_sets;
extern bool ss_sets_on(Oid relid);
extern const char *ss_set_partitions_problem(SsValueSet *set);
/* A partitioned table that sets read, as a partition's entry lists it. */
typedef struct SsPartitionRoot
{
	Oid			relid;
	int			nsets;			/* the sets that listed the partition */
} SsPartitionRoot;
extern List *ss_sets_partition_roots(Oid relid);
extern void ss_sets_partition_left(Oid relid, Oid partition, const char *why);
extern void ss_sets_change(Oid relid, TupleDesc desc, Relation stored_in,
						   ReorderBufferChangeType action,
						   TupleTableSlot *newslot, TupleTableSlot *oldslot);
extern void ss_sets_truncated(Oid relid);
extern List *ss_sets_dependents_on(Oid relid);
extern void ss_sets_begin(void);
extern void ss_sets_commit(void);
extern void ss_sets_count(int64 *nsets, int64 *nvalues);
extern void ss_moves_maintain(void);
extern void ss_move_in_forget(ShapeStream *s);
extern void ss_move_in_splice(ShapeStream *s);
extern void ss_move_in_event(ShapeStream *s, List *gone, StringInfo msg);
extern bool ss_old_view;		/* encoding as if the move-in had not happened */
extern void ss_release_held_before(ShapeStream *s, bool last);
extern void ss_emit_before(ShapeStream *s, LogOffset offset, const char *data, uint32 len);
extern const char *ss_subquery_problem(ShapeStream *s);

#endif							/* SHAPE_STREAM_INTERNAL_H */
