/*-------------------------------------------------------------------------
 *
 * subset_results.h
 *		Where subset snapshots leave their answers, in shared memory.
 *
 * See subset_results.c for the lifecycle and the notes on synchronization.
 *
 * IDENTIFICATION
 *	  src/contract/subset_results.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SUBSET_RESULTS_H
#define SUBSET_RESULTS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "shape_log.h"

/* Subset queries in flight at once; one more is answered 503. */
#define SUBSET_RESULTS_MAX		64
/*
 * ... of them for one client (its address, an IPv6 /64, or the one a trusted
 * proxy forwards for): the rest stay for others
 */
#define SUBSET_PER_CLIENT_MAX	16

/* subset_claim's answers besides a cell */
#define SUBSET_CLAIM_FULL		(-1)
#define SUBSET_CLAIM_CLIENT_FULL (-2)

/*
 * A subset job's slot in the snapshot queue is its cell with this bit set,
 * so that its job key never equals a shape snapshot's.
 */
#define SUBSET_JOB_SLOT_BIT		0x80000000u

/*
 * How a subset query ended, beside its log: nothing (the rows), or a
 * refusal's reason and the facts that fit here (refusal.h); the refusal's
 * text, when it has one, is the log's record 0.
 */
#define SUBSET_FIELD_LEN		32

typedef struct SubsetOutcome
{
	uint32_t	reason;			/* RefusalReason; REFUSAL_NONE: the rows */
	uint32_t	paging;			/* Refusal.paging */
	int64_t		number;			/* Refusal.number */
	char		field[SUBSET_FIELD_LEN];	/* Refusal.field, or "" */
} SubsetOutcome;

typedef struct SubsetCell
{
	_Atomic uint32_t refs;		/* 0: free; the request's, and the job's */
	_Atomic uint32_t ticket;	/* which use of the cell: moves on at each claim */
	_Atomic uint32_t done;		/* the ticket the worker finished, or 0 */
	_Atomic uint32_t abandoned; /* a ticket nobody waits for any more, or 0 */
	_Atomic uint64_t client;	/* who claimed it (ShapeRequest.client_key), or 0 */
	SubsetOutcome outcome;		/* set before `done` */
	/*
	 * The answer, written by the job before `done`: record 0 is the
	 * metadata object, then the rows; or, for a refusal with a text, that
	 * text alone.
	 */
	ShapeLog	log;
} SubsetCell;

typedef struct SubsetResults
{
	_Atomic uint32_t next_claim;	/* where the next claim starts looking */
	SubsetCell	cells[SUBSET_RESULTS_MAX];
} SubsetResults;

extern void subset_results_init(SubsetResults *r);

/*
 * HTTP thread: a free cell, held by the request; SUBSET_CLAIM_FULL when all
 * are in use, SUBSET_CLAIM_CLIENT_FULL when `client` (0: unknown, no
 * limit) holds SUBSET_PER_CLIENT_MAX of them.
 */
extern int	subset_claim(SubsetResults *r, uint64_t client, uint32_t *ticket);

/* Main thread, before it queues the job: the job holds the cell too. */
extern void subset_hold_for_job(SubsetResults *r, int cell);

/*
 * The job: the answer is in the cell's log, and `outcome` says what it is
 * (NULL: the rows); the cell is still held.
 */
extern void subset_finish(SubsetResults *r, int cell, uint32_t ticket,
						  const SubsetOutcome *outcome);

/* Main thread: nobody waits for this use's answer; the job may stop. */
extern void subset_abandon_job(SubsetResults *r, int cell, uint32_t ticket);

/* The job: whether its answer is still wanted. */
extern bool subset_abandoned(SubsetResults *r, int cell, uint32_t ticket);

/* Whether the job of this use finished; its outcome then. */
extern bool subset_finished(SubsetResults *r, int cell, uint32_t ticket,
							SubsetOutcome *outcome);

/* For a caller that no longer holds the cell: the job of this use let go of it. */
extern bool subset_job_gone(SubsetResults *r, int cell, uint32_t ticket);

/* Lets go of a hold; the last one gives the log's blocks back and frees the cell. */
extern void subset_release(SubsetResults *r, ShapeLogArena *arena, int cell);

/* Cells held now (for SQL and tests). */
extern uint32_t subset_cells_in_use(SubsetResults *r);

#endif							/* SUBSET_RESULTS_H */
