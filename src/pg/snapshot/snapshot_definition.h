/*-------------------------------------------------------------------------
 *
 * snapshot_definition.h
 *		A shape's snapshot job in its DSM segment: the definition the main
 *		thread hands to a snapshot worker, and the snapshot's visibility the
 *		worker hands back.
 *
 * IDENTIFICATION
 *	  src/pg/snapshot/snapshot_definition.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SHAPE_SYNC_SNAPSHOT_DEFINITION_H
#define SHAPE_SYNC_SNAPSHOT_DEFINITION_H

#include "postgres.h"

#include "storage/dsm.h"

#include "shape_def.h"

/*
 * Which transactions a snapshot sees, as pg_current_snapshot() gives them
 * (64-bit xids): those before xmin, and those before xmax not in xip.  The
 * stream stitches its kept transactions onto the snapshot with it
 * (shape_stream_log.c).
 */
typedef struct SnapshotVisibility
{
	uint64		xmin;
	uint64		xmax;
	int32		nxip;
	uint64		xip[FLEXIBLE_ARRAY_MEMBER];
} SnapshotVisibility;

/*
 * Main thread: the definition in a new DSM segment, mapped until the
 * caller detaches it, with room for the visibility.
 */
extern dsm_segment *snapshot_definition_create(const ShapeSpec *spec, const char *fingerprint,
											   int chunk_threshold);

/* Worker: the definition, copied into the current memory context. */
extern void snapshot_definition_read(dsm_segment *seg, ShapeSpec *spec, char **fingerprint,
									 int32 *chunk_threshold);

/*
 * Worker, before the shape leaves SNAPSHOTTING: the visibility of its
 * snapshot, from pg_current_snapshot()'s text "xmin:xmax:xip,...".
 */
extern void snapshot_definition_set_visibility(dsm_segment *seg, const char *snapshot_text);

/*
 * Main thread, once the shape is READY: a palloc'd copy of the visibility,
 * or NULL if the worker set none.
 */
extern SnapshotVisibility *snapshot_definition_visibility(dsm_segment *seg);
extern SnapshotVisibility *snapshot_visibility_parse(const char *snapshot_text);

#endif							/* SHAPE_SYNC_SNAPSHOT_DEFINITION_H */
