/*-------------------------------------------------------------------------
 *
 * log_restore.h
 *		Shape logs on disk read back when the worker starts: the manifest
 *		checked, each listed shape's files loaded into the arena.
 *
 * IDENTIFICATION
 *	  src/pg/worker/log_restore.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef LOG_RESTORE_H
#define LOG_RESTORE_H

#include "postgres.h"

#include "access/xlogdefs.h"

#include "log_manifest.h"

/*
 * The manifest of the previous life, checked against the cluster, the slot
 * (`slot_made_now`: created or replaced just now) and its confirmed position;
 * NULL when nothing may be restored (the reason is logged and the files are
 * gone).  Freed by log_restore_done.
 */
extern const LogStoreManifest *log_restore_check_header(bool slot_made_now,
														XLogRecPtr slot_confirmed);
extern LogStoreShape *log_restore_read_shape(const char *handle);
extern char *log_restore_read_sets(const LogStoreHeader *header, size_t *len);
extern bool log_restore_load(uint32 slot, const LogStoreExtent *extent, char *why, size_t why_len);
extern void log_restore_done(void);

#endif							/* LOG_RESTORE_H */
