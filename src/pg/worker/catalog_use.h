/*-------------------------------------------------------------------------
 *
 * catalog_use.h
 *		Which catalog the worker's caches were built from: as decoding
 *		sees it, or as it is now.
 *
 * IDENTIFICATION
 *	  src/pg/worker/catalog_use.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SHAPE_SYNC_CATALOG_USE_H
#define SHAPE_SYNC_CATALOG_USE_H

/* Before the worker reads the catalog as it is now, in a transaction of its own. */
extern void catalog_use_current(void);

/* Before decoding reads the catalog as of the transaction it decodes. */
extern void catalog_use_historic(void);

/* true while the caches are emptied on purpose: nothing changed */
extern bool catalog_use_resetting_caches;

#endif							/* SHAPE_SYNC_CATALOG_USE_H */
