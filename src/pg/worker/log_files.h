/*-------------------------------------------------------------------------
 *
 * log_files.h
 *		Shape logs on disk: written behind the shared-memory logs and made
 *		durable in rounds (log_restore.h reads them back at start).
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
#include "shape_log.h"

#define LOG_FILES_DIR			"pg_shape_sync"
#define LOG_FILES_FIRST_GENERATION	1	/* a snapshot's data file */

/* A shape's data file of a generation, relative to the data directory. */
static inline void
log_files_data_path(const char *handle, uint32 generation, char *path)
{
	snprintf(path, MAXPGPATH, "%s/%s.%u.log", LOG_FILES_DIR, handle, generation);
}

/*
 * Start: the directory, and the flusher thread.  With
 * shape_sync.durable_logs off, the files of an earlier life are removed.
 */
extern void log_files_start(uint32 nslots);

/* The shape stream's notes. */
extern void log_files_shape_ready(uint32 slot, const LogStoreShape *shape);
extern void log_files_appended(uint32 slot);
/*
 * Compaction swapped the slot's log: its next generation is written whole.
 * `read_from_disk`: the previous log had left memory, so responses that
 * still read it read its file, which then stays until they are done.
 */
extern void log_files_replaced(uint32 slot, bool read_from_disk);

/*
 * Compaction of a log that left memory writes the copy it builds to the
 * shape's next generation as it goes: begin (false: the shape has no file,
 * or it could not be made, with a warning), then, as each chunk of the copy
 * closes, log_files_compaction_write: what the copy gained, to that file,
 * whose path it returns (NULL: a write failed, with a warning); then
 * log_files_replaced takes the file (or, should the shape have failed
 * meanwhile, holds it for the copy's readers), or
 * log_files_compaction_abandon removes it.
 */
extern bool log_files_compaction_begin(uint32 slot);
extern const char *log_files_compaction_write(ShapeLog *out);
extern void log_files_compaction_abandon(void);
extern void log_files_forget(uint32 slot);

/*
 * During a transaction's replay, memory short: the slot's log up to its
 * open chunk, published or not, to its file (false: not all of it there).
 */
extern bool log_files_write_ahead(uint32 slot);

/*
 * All the slot's published log to its file now (false: not all of it
 * there), so that write-ahead may follow (a take-over of kept transactions).
 */
extern bool log_files_catch_up(uint32 slot);

/*
 * Main loop, after decoding: writes what the logs gained, and every second
 * (or now, with shape_sync.log_fsync = commit) makes it durable up to
 * `decoded`, the position before which every commit is in the logs.
 * `memory_short` (log_trim_wanted): every log that grew is written now, so
 * that it may leave memory.
 */
extern void log_files_step(XLogRecPtr decoded, bool memory_short);
extern void log_files_shutdown(XLogRecPtr decoded);
extern bool log_files_writing(void);

/* What the shapes' data files hold, all of them and one shape's. */
extern uint64 log_files_disk_bytes(void);
extern uint64 log_files_shape_disk_bytes(uint32 slot);

/*
 * shape_sync.log_disk_budget split in two: what the journal may hold
 * before it is emptied, and what is left for the data files (0: no limit).
 */
extern uint64 log_files_journal_limit(void);
extern uint64 log_files_data_budget(void);

/* How far the slot may be confirmed: never past what the files hold. */
extern XLogRecPtr log_files_confirmable(XLogRecPtr lsn);

#endif							/* LOG_FILES_H */
