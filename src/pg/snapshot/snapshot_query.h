/*-------------------------------------------------------------------------
 *
 * snapshot_query.h
 *		A snapshot's transaction and query: what a shape's snapshot and a
 *		subset query share.
 *
 * IDENTIFICATION
 *	  src/pg/snapshot/snapshot_query.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SHAPE_SYNC_SNAPSHOT_QUERY_H
#define SHAPE_SYNC_SNAPSHOT_QUERY_H

#include "postgres.h"

#include "lib/stringinfo.h"

#include "shape_def.h"
#include "shape_relation.h"
#include "shape_role.h"

/* Receives each encoded snapshot message. */
typedef void (*SnapshotEmit) (void *arg, const char *message, int len);

/* One sort key of a subset query. */
typedef struct SnapshotOrder
{
	AttrNumber	attnum;
	bool		descending;
	bool		nulls_first;
} SnapshotOrder;

/* What a subset query adds to its shape's query (subset_query.c). */
typedef struct SnapshotSubset
{
	Node	   *where;			/* ANDed with the shape's; NULL: none */
	int			norder;
	SnapshotOrder *order;
	int64		limit;			/* -1: none */
	int64		offset;			/* 0: none */
	uint32		snapshot_mark;	/* in every row's headers */
	bool		move_in;		/* a move-in's rows instead: is_move_in */
} SnapshotSubset;

/*
 * Runs the shape's query in the current transaction, encoding every row;
 * with `subset`, the subset's query instead.
 */
extern void snapshot_scan(const ShapeSpec *spec, const SnapshotSubset *subset,
						  const char *handle, SnapshotEmit emit, void *arg);

/* pg_current_snapshot()::text of the active snapshot, and as JSON members. */
extern char *snapshot_current_text(void);
extern void snapshot_visibility_json(StringInfo buf, const char *snapshot);

/* A snapshot's transaction, and what it checks of its shape. */
extern char *snapshot_begin(Oid relid, Oid role, const char *activity, int timeout_ms,
							ShapeRoleSaved *saved, uint64 *insert_lsn);
extern void snapshot_end(const ShapeRoleSaved *saved);

/*
 * First thing in a job's PG_CATCH: whether the per-row deadline on the
 * where clause (shape_sync.where_evaluation_timeout) ended the scan.
 */
extern bool snapshot_deadline_caught(void);
extern void snapshot_check_shape(const ShapeSpec *spec, const char *fingerprint, Oid role,
								 const char *relation);

/*
 * A shape is shared by all its clients: refuses a table whose row-level
 * security applies to the current role (with `force`, whatever the catalog
 * says).
 */
extern void snapshot_refuse_row_security(const ShapeRelation *rel, bool force);

/* After an error in a job: what a backend's error recovery does. */
extern void snapshot_worker_recover(void);

#endif							/* SHAPE_SYNC_SNAPSHOT_QUERY_H */
