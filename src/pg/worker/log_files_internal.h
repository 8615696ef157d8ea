/*-------------------------------------------------------------------------
 *
 * log_files_internal.h
 *		What the files of the shape logs on disk share: each slot's files,
 *		their paths, and what the restore hands over to the writing side.
 *
 * The shape logs on disk (log_files.c explains the store) are three files:
 *	 log_files.c     writing behind memory, failures, removal
 *	 log_rounds.c    rounds: the journal, the manifest, the slot's confirmation
 *	 log_restore.c   at start: the manifest checked, the files read back
 * Everything declared here is used on the worker's main thread only: the
 * flusher thread gets a round's paths and manifest as copies of its own.
 *
 * IDENTIFICATION
 *	  src/pg/worker/log_files_internal.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef LOG_FILES_INTERNAL_H
#define LOG_FILES_INTERNAL_H

#include "postgres.h"

#include "access/xlogdefs.h"
#include "nodes/pg_list.h"
#include "storage/fd.h"

#include "log_files.h"
#include "log_manifest.h"
#include "shape_table.h"

#define LOG_FILES_BUFFER			((size_t) 256 * 1024)
#define MANIFEST_PATH				LOG_FILES_DIR "/manifest"
#define JOURNAL_PATH				LOG_FILES_DIR "/journal"

typedef struct FileShape
{
	bool		in_use;			/* it has a shape file */
	bool		listed;			/* its file is complete: in every manifest */
	bool		caught_up;		/* its file has held all it published (a new
								 * shape's is written in pieces at first) */
	bool		dirty;			/* on lf_dirty */
	bool		unsynced;		/* on lf_unsynced */
	bool		shape_file_synced;
	bool		failed;			/* a write failed: in memory only from now on */
	bool		in_round;		/* in the round in flight */
	uint64		incarnation;	/* tells this shape from a later one in the slot */
	char		handle[LOG_STORE_HANDLE_LEN];
	uint32		generation;
	File		file;			/* its data file, or -1 */
	uint64		written;
	uint64		synced;			/* durable: fsynced, or in the journal */
	uint32		journaled_generation;	/* the generation whose file has records in
										 * the journal since it was emptied; 0: none */
} FileShape;

/* One per slot; NULL when shape_sync.durable_logs is off or has no directory. */
extern FileShape *lf_shapes;
extern uint32 lf_nslots;
extern char *lf_buffer;			/* LOG_FILES_BUFFER bytes on their way */

/*
 * What the writing side (log_files.c) and the rounds (log_rounds.c) share:
 * the memory context of both, the slots written since the last round, the
 * paths a round is to remove after it, and what the manifest on disk says.
 */
extern MemoryContext lf_context;
extern uint32 *lf_unsynced;
extern uint32 lf_nunsynced;
extern List *lf_obsolete;		/* LfHeldFile *: compacted generations */

/*
 * A data file that goes later: a forgotten shape's whose log left memory
 * for it (readers that still hold the log read it) or whose snapshot worker
 * may still write it, once the slot is free or claimed again; a compacted
 * generation once no manifest names it and, when its log had left memory,
 * once the slot's previous log is no longer read (or was compacted again).
 */
typedef struct LfHeldFile
{
	uint32		slot;
	uint32		generation;		/* the slot's claim, when the file was let go */
	bool		read_from_disk; /* a compacted generation that readers may read */
	uint64		compactions;	/* ... and the slot's compactions then */
	char		path[MAXPGPATH];
} LfHeldFile;

extern LfHeldFile *lf_held_file_new(uint32 slot, const char *path);
extern void lf_hold_file(LfHeldFile *held);
extern bool lf_manifest_stale;	/* it lists a shape that is gone */
extern bool lf_unsynced_under_off;	/* files written with log_fsync = off
									 * since they were last all fsynced */
extern bool lf_lists_shapes;	/* the manifest on disk lists a shape */
extern XLogRecPtr lf_durable;	/* ... and its durable_lsn */

extern ShapeTable *lf_table(void);
extern bool lf_may_warn(void);	/* a warning about the store, once a minute */
extern void lf_note_unsynced(uint32 slot);

/*
 * The slot's shape is kept in memory only from now on: `what` of file
 * `path` failed (errno says why); its files go and it leaves the manifest.
 */
extern void lf_fail(uint32 slot, const char *what, const char *path);

/* log_rounds.c: started with the files, a step after each of theirs, the last round at stop */
extern void lf_rounds_start(uint32 nslots);
extern bool lf_round_due(bool wrote);
extern void lf_rounds_step(XLogRecPtr decoded, bool due);
extern void lf_rounds_stop(XLogRecPtr decoded);

/* The data file `name` (no directory) is removed: the journal lets go of it. */
extern void lf_journaled_forget(const char *name);

static inline void
lf_data_path(const char *handle, uint32 generation, char *path)
{
	log_files_data_path(handle, generation, path);
}

static inline void
lf_shape_path(const char *handle, char *path)
{
	snprintf(path, MAXPGPATH, "%s/%s.shape", LOG_FILES_DIR, handle);
}

/* The value sets file of a generation (shape_stream_sets_disk.c). */
static inline void
lf_sets_path(uint32 generation, char *path)
{
	snprintf(path, MAXPGPATH, "%s/sets.%u", LOG_FILES_DIR, generation);
}

/* Removes every file of the store but those `keep` says to keep; how many went. */
extern int	lf_remove_files(bool (*keep) (const char *name));

/* The header that describes this cluster, slot and database now. */
extern void lf_header_now(LogStoreHeader *h, XLogRecPtr durable);

/*
 * What the restore hands over to the writing side: the header of the
 * manifest it restores from (no round says less than its durable_lsn, and
 * files written under shape_sync.log_fsync = off are fsynced again), each
 * shape it restored (its data file open and `extent->length` bytes long,
 * listed from now on), and that the manifest on disk may name shapes that
 * were not restored (the next round replaces it).
 */
extern void lf_resume_from(const LogStoreHeader *stored);
extern void lf_restored(uint32 slot, const LogStoreExtent *extent, File file);
extern void lf_manifest_outdated(void);

#endif							/* LOG_FILES_INTERNAL_H */
