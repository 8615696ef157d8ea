/*-------------------------------------------------------------------------
 *
 * subset_jobs.h
 *		The main thread's side of subset queries: queued, watched, answered.
 *
 * IDENTIFICATION
 *	  src/pg/worker/subset_jobs.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SUBSET_JOBS_H
#define SUBSET_JOBS_H

#include "shape_request.h"

/*
 * A resolved request: true when it is a subset query now queued here (its
 * answer comes later), false when it is to be answered now.
 */
extern bool subset_jobs_take(ShapeRequest *req);
extern void subset_jobs_launch(void);
extern void subset_jobs_reap(void);
extern void subset_jobs_stop(void);

/* Main thread: a shape's move-in query (shape_stream_subquery.c). */
extern bool subset_jobs_move_in(uint32 slot, uint32 generation, SubsetRequest *request);

#endif							/* SUBSET_JOBS_H */
