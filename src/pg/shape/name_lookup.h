/*-------------------------------------------------------------------------
 *
 * name_lookup.h
 *		Keeps names that do not exist from filling the catalog caches.
 *
 * IDENTIFICATION
 *	  src/pg/shape/name_lookup.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef NAME_LOOKUP_H
#define NAME_LOOKUP_H

/*
 * Counts a failed resolution (a shape definition, a subset query) of this
 * process; every NAME_LOOKUP_FAILURES_BOUND of them, empties its catalog
 * caches.  Call it outside the failed subtransaction, once per failure.
 */
extern void name_lookup_failed(void);

#endif							/* NAME_LOOKUP_H */
