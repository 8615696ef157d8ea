/*-------------------------------------------------------------------------
 *
 * subset_jobs.c
 *		The main thread's side of subset queries: queued, watched, answered.
 *
 * A subset request is resolved like any shape request (registry.c): its
 * shape is found or made, its handle checked.  Then, instead of answering
 * at once, the main thread keeps the request (its connection stays
 * suspended) and queues a job for the snapshot pool, which runs the query
 * in a worker, never on this thread.  Subset jobs wait here in FIFO order
 * and go to the pool's queue behind the same limit as shape snapshots (at
 * most shape_sync.max_snapshot_workers jobs in it at a time), and at most
 * max_snapshot_workers - 1 of them at once (queued or running), so that
 * subsets never starve the snapshots of new shapes (with a pool of one
 * worker, subsets and snapshots take turns in it).  The shape's
 * definition and the client's subset inputs go into a DSM segment
 * (subset_query.c) only when the job goes to the pool: waiting requests
 * hold none, and a segment that cannot be had answers 503, never an error
 * of the main thread.
 *
 * A job waits, too, while its shape's own snapshot is being taken: the
 * subset's snapshot must be no older than the shape's.  The shape's log
 * holds exactly the transactions its snapshot does not see, and the
 * client reads that log from the offset its subset request was sent at,
 * dropping the changes the subset's snapshot already saw (the official
 * client's snapshot tracker).  A transaction the subset does not see was
 * not committed when the subset's snapshot was taken, so not when the
 * shape's was, taken before: its changes are in the log.  Were the
 * subset's snapshot the older, a transaction committed between the two
 * would be in neither.  This happens: a shape's first snapshot of a table
 * sets REPLICA IDENTITY FULL, which waits for the lock of a transaction
 * writing to it, while the subset query runs at once; the subset answered
 * the row as it was, the writer committed, the shape's snapshot saw the
 * commit and its log never carried it.  A shape whose snapshot failed
 * answers its waiting subsets 503, as a dropped one does: their retry gets
 * the failure the registry keeps for a while.
 *
 * The worker leaves the answer in the request's SubsetResults cell
 * (subset_results.c) and wakes this thread, which hands the request back
 * to its HTTP thread; that thread sends what the cell holds.  A request
 * that waits longer than shape_sync.snapshot_wait_timeout is answered 503
 * with retry-after; a job still waiting here is dropped, one in the pool is
 * marked abandoned in its cell (a worker skips it, or stops at its next
 * row) and its worker sent SIGINT.  The cell's two holds see to its memory
 * whichever ends first, and the entry lets go of the definition once the
 * job did (subset_job_gone).
 *
 * Jobs are tracked by cell (at most SUBSET_RESULTS_MAX, a fixed bound): a
 * turn of the main loop with jobs in flight looks at each cell's entry,
 * and costs nothing otherwise, whatever else the server holds.
 *
 * IDENTIFICATION
 *	  src/pg/worker/subset_jobs.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <stdatomic.h>

#include "miscadmin.h"
#include "storage/dsm.h"
#include "storage/latch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "guc.h"
#include "registry.h"
#include "shape_stream.h"
#include "shared_state.h"
#include "snapshot_pool.h"
#include "subset_jobs.h"
#include "subset_query.h"

typedef struct SubsetJobEntry
{
	bool		in_use;
	ShapeRequest *req;			/* NULL once answered (gave up) */
	bool		move_in;		/* the main thread's, for a shape's move-in: */
	bool		main_hold;		/* ... which holds the cell (as a request would) */
	uint32		slot;			/* its shape, */
	uint32		generation;
	SubsetRequest *move_in_request; /* its filter (shape_stream_subquery.c) */
	dsm_segment *definition;	/* until the job is done */
	uint32		ticket;
	bool		queued;			/* handed to the pool */
	TimestampTz deadline;		/* 0: none */
} SubsetJobEntry;

static SubsetJobEntry subset_entries[SUBSET_RESULTS_MAX];
static int	subset_waiting[SUBSET_RESULTS_MAX];	/* cells not queued yet, FIFO */
static int	subset_waiting_head = 0;
static int	subset_waiting_len = 0;
static int	subset_in_flight = 0;	/* entries in use */
static int	subset_in_pool = 0;	/* ... whose job was queued, until it let go */

static SubsetResults *
subset_results(void)
{
	return &shape_sync_shared->subsets;
}

/* The shape of an entry: its request's, or its move-in's. */
static uint32
subset_entry_slot(const SubsetJobEntry *e)
{
	return e->move_in ? e->slot : e->req->result.slot;
}

static uint32
subset_entry_generation(const SubsetJobEntry *e)
{
	return e->move_in ? e->generation : e->req->result.generation;
}

/*
 * The request gets its answer: the cell's (REFUSAL_NONE), or a refusal
 * for `reason` (503s all, see refusal_render.c).
 */
static void
subset_answer(SubsetJobEntry *e, RefusalReason reason)
{
	ShapeRequest *req = e->req;

	if (e->move_in && reason != REFUSAL_NONE)
	{
		/* its shape rotates: the rows that moved in cannot be had */
		shape_stream_move_in_failed(e->slot, e->generation);
		return;
	}
	if (req == NULL)
		return;
	e->req = NULL;
	if (reason != REFUSAL_NONE)
	{
		shape_resolution_free(&req->result);
		req->result.status = SHAPE_RESOLVE_REFUSED;
		req->result.refusal.reason = reason;
	}
	req->done(req);
}

/* A move-in's cell: the main thread lets go of it (the job's hold may stay). */
static void
subset_drop_main_hold(SubsetJobEntry *e, int cell)
{
	if (!e->main_hold)
		return;
	e->main_hold = false;
	subset_release(subset_results(), shape_sync_shared->table->arena, cell);
}

static void
subset_forget(int cell)
{
	SubsetJobEntry *e = &subset_entries[cell];

	subset_drop_main_hold(e, cell);	/* on every path a move-in ends by */
	if (e->definition != NULL)
		dsm_detach(e->definition);
	if (e->queued)
		subset_in_pool--;
	if (e->move_in_request != NULL)
	{
		pfree(e->move_in_request->move_in_where);
		pfree(e->move_in_request->move_in_handle);
		pfree(e->move_in_request);
	}
	memset(e, 0, sizeof(*e));
	subset_in_flight--;
}

/* Takes a job that was never queued off the waiting list. */
static void
subset_unwait(int cell)
{
	int			kept = 0;

	for (int i = 0; i < subset_waiting_len; i++)
	{
		int			c = subset_waiting[(subset_waiting_head + i) % SUBSET_RESULTS_MAX];

		if (c != cell)
			subset_waiting[(subset_waiting_head + kept++) % SUBSET_RESULTS_MAX] = c;
	}
	subset_waiting_len = kept;
}

bool
subset_jobs_take(ShapeRequest *req)
{
	SubsetRequest *in = req->subset;
	SubsetJobEntry *e;
	const ShapeSpec *spec;
	const char *fingerprint;
	Oid			role;

	if (in == NULL || req->result.status != SHAPE_RESOLVE_OK)
		return false;
	/* the client's handle is not the shape's: it gets 409 before any query */
	if (in->handle != NULL && strcmp(in->handle, req->result.handle) != 0)
		return false;
	if (!registry_shape(req->result.slot, req->result.generation, &spec, &fingerprint, &role))
		return false;			/* cannot happen: the HTTP side answers 503 */
	if (in->offset_now)
	{
		SlogPublished pub;

		/* before the snapshot's end is published, the log's end is that end */
		slog_read_published(shape_table_log(shape_sync_shared->table, req->result.slot), &pub);
		log_offset_format((pub.flags & SLOG_SNAPSHOT_DONE) ? pub.last : LOG_OFFSET_SNAPSHOT_END,
						  in->log_end, sizeof(in->log_end));
	}

	e = &subset_entries[in->cell];
	if (e->in_use)
	{
		/*
		 * The cell's previous request was answered before its job ended, and
		 * the job let go since (the cell could not be claimed again
		 * otherwise): what is left of it goes now.
		 */
		Assert(e->req == NULL && e->queued);
		subset_forget(in->cell);
	}
	e->in_use = true;
	e->req = req;
	e->ticket = in->ticket;
	e->queued = false;
	e->deadline = shape_sync_snapshot_wait_timeout > 0 ?
		TimestampTzPlusMilliseconds(GetCurrentTimestamp(), shape_sync_snapshot_wait_timeout) : 0;
	subset_waiting[(subset_waiting_head + subset_waiting_len) % SUBSET_RESULTS_MAX] = in->cell;
	subset_waiting_len++;
	subset_in_flight++;
	return true;
}

/*
 * The definition of a waiting job, in a new DSM segment (subset_query.c);
 * NULL, with the request answered 503, when the shape is gone or no
 * segment can be had now.  Made only when the job is queued, so that
 * waiting requests hold none.
 */
static dsm_segment *
subset_definition(SubsetJobEntry *e, Oid *role)
{
	const ShapeSpec *spec;
	const char *fingerprint;
	MemoryContext oldcxt = CurrentMemoryContext;
	dsm_segment *volatile seg = NULL;

	if (!registry_shape(subset_entry_slot(e), subset_entry_generation(e), &spec, &fingerprint,
						role))
	{
		subset_answer(e, REFUSAL_SUBSET_SHAPE_DROPPED);
		return NULL;
	}
	PG_TRY();
	{
		MemoryContextSwitchTo(TopMemoryContext);
		seg = subset_definition_create(spec, fingerprint,
									   e->move_in ? e->move_in_request : e->req->subset,
									   e->move_in ? NULL : e->req->result.handle);
		MemoryContextSwitchTo(oldcxt);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(oldcxt);
		edata = CopyErrorData();
		FlushErrorState();
		ereport(LOG,
				(errmsg("a subset query could not be queued: %s", edata->message)));
		FreeErrorData(edata);
		seg = NULL;
	}
	PG_END_TRY();
	if (seg == NULL)
		subset_answer(e, REFUSAL_SUBSET_BUSY);
	return seg;
}

/*
 * Where a waiting job's shape is: its own snapshot still being taken (the
 * job waits, see the header), failed, or taken (or the shape gone, which
 * subset_definition answers).
 */
typedef enum SubsetShapeWait
{
	SUBSET_SHAPE_TAKEN,
	SUBSET_SHAPE_SNAPSHOTTING,
	SUBSET_SHAPE_FAILED
} SubsetShapeWait;

static SubsetShapeWait
subset_shape_wait(const SubsetJobEntry *e)
{
	const ShapeSpec *spec;
	const char *fingerprint;
	Oid			role;

	if (!registry_shape(subset_entry_slot(e), subset_entry_generation(e), &spec, &fingerprint,
						&role))
		return SUBSET_SHAPE_TAKEN;
	switch (shape_table_state(shape_sync_shared->table, subset_entry_slot(e)))
	{
		case SHAPE_SNAPSHOTTING:
			return SUBSET_SHAPE_SNAPSHOTTING;
		case SHAPE_FAILED:
			return SUBSET_SHAPE_FAILED;
		default:
			return SUBSET_SHAPE_TAKEN;
	}
}

/*
 * Queues waiting jobs, oldest first, while fewer than
 * shape_sync.max_snapshot_workers jobs sit in the pool's queue (shape
 * snapshots count too: registry_maintain queues those first, through
 * snapshot_pool_launch), and while subset
 * jobs, queued or running, leave at least one of the pool's workers to
 * shape snapshots: subsets never starve new shapes.  A job whose shape is
 * still taking its snapshot stays on the list, in its place, and those
 * behind it go on (see the header).
 */
void
subset_jobs_launch(void)
{
	SnapshotJobs *jobs = &shape_sync_shared->snapshot_jobs;
	int			share = Max(shape_sync_max_snapshot_workers - 1, 1);
	bool		pushed = false;
	bool		full = false;
	int			waiting = subset_waiting_len;
	int			kept = 0;

	for (int i = 0; i < waiting; i++)
	{
		int			cell = subset_waiting[(subset_waiting_head + i) % SUBSET_RESULTS_MAX];
		SubsetJobEntry *e = &subset_entries[cell];
		SnapshotJob job;
		Oid			role;

		if (!e->in_use || (e->req == NULL && !e->move_in) || e->queued)
			continue;			/* answered meanwhile: off the list */
		if (full || subset_in_pool >= share ||
			snapshot_jobs_queued(jobs) >= (uint32) shape_sync_max_snapshot_workers)
		{
			full = true;
			subset_waiting[(subset_waiting_head + kept++) % SUBSET_RESULTS_MAX] = cell;
			continue;
		}
		switch (subset_shape_wait(e))
		{
			case SUBSET_SHAPE_SNAPSHOTTING:
				subset_waiting[(subset_waiting_head + kept++) % SUBSET_RESULTS_MAX] = cell;
				continue;
			case SUBSET_SHAPE_FAILED:
				/* as a dropped shape: the retry gets the failure the registry keeps */
				subset_answer(e, REFUSAL_SUBSET_SHAPE_FAILED);
				subset_forget(cell);
				continue;
			case SUBSET_SHAPE_TAKEN:
				break;
		}
		e->definition = subset_definition(e, &role);
		if (e->definition == NULL)
		{
			subset_forget(cell);
			continue;
		}
		job.slot = SUBSET_JOB_SLOT_BIT | (uint32) cell;
		job.generation = e->ticket;
		job.role = (uint32) role;
		job.definition = (uint32) dsm_segment_handle(e->definition);
		job.flags = 0;
		/* the job holds the cell from now on, until its worker is done */
		subset_hold_for_job(subset_results(), cell);
		if (!snapshot_jobs_push(jobs, &job))
		{
			subset_release(subset_results(), shape_sync_shared->table->arena, cell);
			dsm_detach(e->definition);
			e->definition = NULL;
			full = true;		/* a worker is still reading a cell */
			subset_waiting[(subset_waiting_head + kept++) % SUBSET_RESULTS_MAX] = cell;
			continue;
		}
		e->queued = true;
		subset_in_pool++;
		pushed = true;
	}
	subset_waiting_len = kept;
	if (pushed)
		snapshot_pool_staff();
}

/*
 * Hands back the requests whose answers are in, answers 503 to those past
 * their deadline, and lets go of the definitions of finished jobs.
 */
void
subset_jobs_reap(void)
{
	SubsetResults *results = subset_results();
	TimestampTz now;

	if (subset_in_flight == 0)
		return;
	now = GetCurrentTimestamp();
	for (int cell = 0; cell < SUBSET_RESULTS_MAX; cell++)
	{
		SubsetJobEntry *e = &subset_entries[cell];
		SubsetOutcome outcome;

		if (!e->in_use)
			continue;
		if (e->move_in && e->queued && subset_finished(results, cell, e->ticket, &outcome))
		{
			/* the stream reads the answer; then the main thread's hold goes */
			shape_stream_move_in_answered(e->slot, e->generation, &results->cells[cell].log,
										  &outcome);
			subset_forget(cell);
			continue;
		}
		if (e->queued && e->req != NULL && subset_finished(results, cell, e->ticket, &outcome))
		{
			subset_answer(e, REFUSAL_NONE);
			subset_forget(cell);
			continue;
		}
		if (e->queued && e->req == NULL && !e->move_in)
		{
			/* answered before its job ended: its definition goes once the job let go */
			if (subset_job_gone(results, cell, e->ticket))
				subset_forget(cell);
			continue;
		}
		if ((e->req == NULL && !e->move_in) || e->deadline == 0 || now < e->deadline)
			continue;
		subset_answer(e, REFUSAL_SUBSET_WAIT_TIMEOUT);
		if (!e->queued)
		{
			subset_unwait(cell);
			subset_forget(cell);
			continue;
		}
		if (e->move_in)
		{
			/* nobody reads it: the job's hold frees the cell, with ours gone */
			subset_drop_main_hold(e, cell);
			e->move_in = false;
		}
		/*
		 * The job stops: a worker that has not started it skips it, one that
		 * runs it stops at its next row or at this cancel; the job's hold
		 * frees the cell after.
		 */
		subset_abandon_job(results, cell, e->ticket);
		snapshot_pool_cancel(SUBSET_JOB_SLOT_BIT | (uint32) cell, e->ticket);
	}
}

/*
 * Main thread: queues the move-in of a shape with subqueries (its filter
 * and handle in `request`, palloc'd in TopMemoryContext, which this file
 * frees).  Returns false, freeing nothing, when no cell is free.
 */
bool
subset_jobs_move_in(uint32 slot, uint32 generation, SubsetRequest *request)
{
	uint32		ticket;
	int			cell = subset_claim(subset_results(), 0, &ticket);
	SubsetJobEntry *e;

	if (cell < 0)
		return false;
	e = &subset_entries[cell];
	if (e->in_use)
	{
		Assert(e->req == NULL && e->queued);
		subset_forget(cell);
	}
	e->in_use = true;
	e->move_in = true;
	e->main_hold = true;
	e->slot = slot;
	e->generation = generation;
	e->move_in_request = request;
	e->ticket = ticket;
	e->queued = false;
	e->deadline = shape_sync_snapshot_wait_timeout > 0 ?
		TimestampTzPlusMilliseconds(GetCurrentTimestamp(), shape_sync_snapshot_wait_timeout) : 0;
	subset_waiting[(subset_waiting_head + subset_waiting_len) % SUBSET_RESULTS_MAX] = cell;
	subset_waiting_len++;
	subset_in_flight++;
	SetLatch(MyLatch);			/* queued in a decoding batch: launched at the next turn */
	return true;
}

/* The worker stops: every request still kept here gets its 503 now. */
void
subset_jobs_stop(void)
{
	for (int cell = 0; cell < SUBSET_RESULTS_MAX; cell++)
	{
		SubsetJobEntry *e = &subset_entries[cell];

		if (!e->in_use)
			continue;
		subset_drop_main_hold(e, cell);
		e->move_in = false;
		subset_answer(e, REFUSAL_SUBSET_SHUTDOWN);
		if (e->queued)
			subset_abandon_job(subset_results(), cell, e->ticket);
		subset_forget(cell);
	}
	subset_waiting_len = 0;
}
