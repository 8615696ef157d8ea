/*-------------------------------------------------------------------------
 *
 * log_prefault.h
 *		Making the shape log arena resident ahead of use.
 *
 * IDENTIFICATION
 *	  src/pg/worker/log_prefault.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef LOG_PREFAULT_H
#define LOG_PREFAULT_H

/*
 * One step, on the main thread at each turn of its loop: returns whether
 * it made a slice resident and more is left (then the loop turns again at
 * once).
 */
extern bool log_prefault_step(bool idle);

#endif							/* LOG_PREFAULT_H */
