/*-------------------------------------------------------------------------
 *
 * log_files.h
 *		Shape logs on disk: written behind the shared-memory logs, made
 *		durable in rounds, read back when the worker starts.
 *
 * IDENTIFICATION
 *	  src/pg/worker/log_files.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef LOG_FILES_H
#define LOG_FILES_H

#include "postgres.h"

#include "access/xlogdefs.h"

#include "log_manifest.h"

#define LOG_FILES_DIR			"pg_shape_sync"

/* Start: the directory, and what the last manifest says (or NULL). */
extern void log_files_start(uint32 nslots);

/*
 * The manifest of the previous life, checked against the cluster, the slot
 * (`slot_made_now`: created or replaced just now) and its confirmed position;
 * NULL when nothing may be restored (the reason is logged and the files are
 * gone).  Freed by log_files_restore_done.
 */
extern const LogStoreManifest *log_files_restorable(bool slot_made_now,
													XLogRecPtr slot_confirmed);
extern LogStoreShape *log_files_read_shape(const char *handle);
extern bool log_files_load(uint32 slot, const LogStoreExtent *extent, char *why, size_t why_len);
extern void log_files_restore_done(void);

/* The shape stream's notes. */
extern void log_files_shape_ready(uint32 slot, const LogStoreShape *shape);
extern void log_files_appended(uint32 slot);
extern void log_files_replaced(uint32 slot);
extern void log_files_forget(uint32 slot);

/*
 * Main loop, after decoding: writes what the logs gained, and every second
 * (or now, with shape_sync.log_fsync = commit) makes it durable up to
 * `decoded`, the position before which every commit is in the logs.
 */
extern void log_files_step(XLogRecPtr decoded);
extern void log_files_shutdown(XLogRecPtr decoded);
extern bool log_files_writing(void);

/* How far the slot may be confirmed: never past what the files hold. */
extern XLogRecPtr log_files_confirmable(XLogRecPtr lsn);

#endif							/* LOG_FILES_H */
