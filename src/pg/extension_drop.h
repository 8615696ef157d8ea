/*-------------------------------------------------------------------------
 *
 * extension_drop.h
 *		DROP EXTENSION shape_sync tells the worker to let go of every shape.
 *
 * IDENTIFICATION
 *	  src/pg/extension_drop.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef EXTENSION_DROP_H
#define EXTENSION_DROP_H

/* In _PG_init: the hook and transaction callbacks of every backend. */
extern void extension_drop_install_hooks(void);

/* The main worker: whether a drop committed since it last asked. */
extern bool extension_drop_take(void);

#endif							/* EXTENSION_DROP_H */
