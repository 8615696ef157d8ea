/*-------------------------------------------------------------------------
 *
 * eval_deadline.c
 *		The deadline on evaluating a where clause
 *		(shape_sync.where_evaluation_timeout).
 *
 * A client's where clause is evaluated by the worker's main thread: folded
 * once at validation, and matched against every decoded row of its table.
 * One slow clause must not hold up decoding for every other shape, so each
 * evaluation may take at most shape_sync.where_evaluation_timeout; past it,
 * the evaluation is cancelled (CHECK_FOR_INTERRUPTS and the regex engine
 * raise "canceling statement") and its shape fails.  A snapshot worker
 * holds each row of a snapshot or subset scan to the same deadline
 * (snapshot_query.c).
 *
 * The cost of the deadline grows with evaluations that run long, not with
 * evaluations: a decoded change may be matched against hundreds of shapes,
 * and arming and disarming a timer around each match (clock reads, timer
 * list updates) cost more than the match itself (bench/decode.sh).  So a
 * match only bumps a sequence number and raises a flag, and a periodic
 * tick (a timeout of PostgreSQL's timeout.c, every quarter of the
 * deadline) watches them: an evaluation still running with the same
 * number at k ticks in a row has run for k - 1 tick periods at least and
 * k at most, so it is cancelled at the first k whose k - 1 periods make
 * the deadline: between the deadline and one and a half times it (for a
 * deadline under 4 ms, where the period is 1 ms, one millisecond more).
 * The tick runs only while the process is in a stretch of work that
 * evaluates clauses (a decoding batch, a validation, a scan: between
 * eval_deadline_watch and eval_deadline_unwatch), from its first
 * evaluation on.
 *
 * A cancel the tick raised is told apart from pg_cancel_backend's by its
 * own flag, and one left pending by code that never checks for interrupts
 * is dropped when the evaluation ends, never left for later code.  Only
 * the main worker and the snapshot workers enable the deadline: SQL
 * callers of validate_shape() and encode_rows() keep their own
 * statement_timeout.
 *
 * Notes on synchronization: everything here belongs to the one thread of
 * the process that calls PostgreSQL (in the main worker, its main
 * thread), and the tick runs in its SIGALRM handler (the HTTP threads block
 * every signal).  The handler reads ed_running and ed_sequence and writes
 * ed_expired, QueryCancelPending and InterruptPending; those are volatile
 * sig_atomic_t.  eval_deadline_end lowers ed_running before it reads
 * ed_expired, so once it has read it the handler can no longer set it for
 * the evaluation that ended.  ed_seen_sequence and ed_seen_ticks are the
 * handler's alone; they and ed_ticks_to_expire are set before the tick
 * starts, never while it runs.
 *
 * IDENTIFICATION
 *	  src/pg/shape/eval_deadline.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>

#include "miscadmin.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"

#include "eval_deadline.h"
#include "guc.h"

static bool ed_enabled = false;
static TimeoutId ed_timeout_id;
static int	ed_watchers = 0;	/* nested eval_deadline_watch calls */
static bool ed_ticking = false;
static volatile sig_atomic_t ed_ticks_to_expire;	/* set before the tick starts */

static volatile sig_atomic_t ed_running = false;
static volatile sig_atomic_t ed_sequence = 0;
static volatile sig_atomic_t ed_expired = false;

/* the handler's own */
static sig_atomic_t ed_seen_sequence;
static int	ed_seen_ticks;

static void
ed_tick(void)
{
	if (!ed_running)
	{
		ed_seen_ticks = 0;
		return;
	}
	if (ed_seen_ticks == 0 || ed_sequence != ed_seen_sequence)
	{
		ed_seen_sequence = ed_sequence;
		ed_seen_ticks = 1;
		return;
	}
	if (++ed_seen_ticks >= ed_ticks_to_expire && !ed_expired)
	{
		ed_expired = true;
		QueryCancelPending = true;
		InterruptPending = true;
		/* handle_sig_alarm sets the latch */
	}
}

void
eval_deadline_enable(void)
{
	if (ed_enabled)
		return;
	ed_timeout_id = RegisterTimeout(USER_TIMEOUT, ed_tick);
	ed_enabled = true;
}

void
eval_deadline_watch(void)
{
	ed_watchers++;
}

void
eval_deadline_unwatch(void)
{
	Assert(ed_watchers > 0);
	if (--ed_watchers > 0)
		return;
	if (ed_ticking)
	{
		disable_timeout(ed_timeout_id, false);
		ed_ticking = false;
	}
	ed_running = false;
	ed_expired = false;
}

void
eval_deadline_begin(void)
{
	ed_sequence = (sig_atomic_t) ((unsigned int) ed_sequence + 1);
	ed_running = true;
	if (unlikely(!ed_ticking) && ed_enabled && ed_watchers > 0 &&
		shape_sync_where_evaluation_timeout > 0)
	{
		int			timeout = shape_sync_where_evaluation_timeout;
		int			period = Max(1, timeout / 4);

		/* seen at k ticks in a row: it ran (k - 1) periods at least, k at most */
		ed_ticks_to_expire = (timeout + period - 1) / period + 1;
		ed_seen_ticks = 0;
		ed_ticking = true;
		enable_timeout_every(ed_timeout_id,
							 TimestampTzPlusMilliseconds(GetCurrentTimestamp(), period),
							 period);
	}
}

bool
eval_deadline_end(void)
{
	ed_running = false;
	if (likely(!ed_expired))
		return false;
	ed_expired = false;
	QueryCancelPending = false;	/* if the evaluation never looked at it */
	return true;
}
