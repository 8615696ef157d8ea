/*-------------------------------------------------------------------------
 *
 * eval_deadline.h
 *		The deadline on evaluating a where clause
 *		(shape_sync.where_evaluation_timeout).
 *
 * IDENTIFICATION
 *	  src/pg/shape/eval_deadline.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef EVAL_DEADLINE_H
#define EVAL_DEADLINE_H

/* Gives this process (a worker) the deadline; elsewhere it is never armed. */
extern void eval_deadline_enable(void);

/*
 * Brackets a stretch of work that evaluates where clauses (a decoding
 * batch, a validation); calls nest.  The deadline's tick runs only inside
 * one, from its first evaluation on.
 */
extern void eval_deadline_watch(void);
extern void eval_deadline_unwatch(void);

/*
 * Bracket one evaluation.  eval_deadline_end must be called on every path,
 * also after an error; it returns whether the deadline cancelled the
 * evaluation (a cancel of pg_cancel_backend's is not), and drops a cancel
 * that the evaluation left pending.
 */
extern void eval_deadline_begin(void);
extern bool eval_deadline_end(void);

#endif							/* EVAL_DEADLINE_H */
