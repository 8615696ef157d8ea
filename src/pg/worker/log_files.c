/*-------------------------------------------------------------------------
 *
 * log_files.c
 *		Shape logs on disk: written behind the shared-memory logs
 *		(log_rounds.c makes them durable, log_restore.c reads them back
 *		at start).
 *
 * Every shape whose snapshot is done has, in $PGDATA/pg_shape_sync, a
 * data file that is its log's bytes exactly (<handle>.<generation>.log:
 * compaction writes the next generation) and a shape file written once
 * (<handle>.shape: the definition, the texts it must validate to again,
 * the snapshot's visibility; log_manifest.c has the format).  One manifest
 * lists the shapes whose files are complete, each with its durable length,
 * chunks and last offset, under a header that names the cluster and slot,
 * and the position `durable_lsn` before which every decoded commit is in
 * those lengths.
 *
 * Writing.  After each decoding batch the main loop hands over the shapes
 * whose logs grew (log_files_appended); log_files_step writes the bytes
 * they gained (from the published log, so whole transactions) to the page
 * cache, after their clients were woken: the disk is not on the path of a
 * live change.  A listed log that gained less than LOG_FILES_WAIT_MAX
 * waits for the step that builds the next round, unless memory runs short
 * (lf_may_wait): a round lists only what the files hold, so it writes every
 * log that grew first, and a shape is written once a round rather than
 * once a batch.  A shape whose snapshot just finished is written in pieces
 * of LOG_FILES_WRITE_PER_STEP per step, and enters the manifest once its
 * file holds all of its log.  A shape whose log cannot be listed for now
 * (one with subqueries, while a move-in is in flight or its value sets
 * are still to be written: shape_stream_durable) is written all the same,
 * and listed again once it can be.
 *
 * Rounds (log_rounds.c) make what the files gained durable, about once a
 * second, and bring the manifest up to date; only then may the slot be
 * confirmed up to the round's position.
 *
 * A write or fsync that fails (the disk is full, an I/O error) leaves the
 * shape it was for in memory only: it is served as before, its files are
 * removed and it leaves the manifest, so that a restart drops it (its
 * clients then get 409), with a warning; the others go on.  A manifest
 * that cannot be written keeps the previous one, and the slot's
 * confirmation waits.  Nothing here raises an error.
 *
 * Everything here runs on the worker's main thread, through PostgreSQL's
 * virtual file descriptors (fd.c), so that thousands of shapes do not need
 * thousands of open files.  A shape is told apart from a later shape of
 * the same slot by its incarnation, and from a compaction's next file by
 * its generation.
 *
 * IDENTIFICATION
 *	  src/pg/worker/log_files.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include "access/xlog.h"
#include "miscadmin.h"
#include "replication/slot.h"
#include "storage/fd.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "guc.h"
#include "log_files_internal.h"
#include "reader_files.h"
#include "shared_state.h"

#define LOG_FILES_WRITE_PER_STEP	((uint64) 8 << 20)
/* a log that gained this much is written at the step, not with the next round */
#define LOG_FILES_WAIT_MAX			((uint64) 256 << 10)
#define LOG_FILES_WARN_INTERVAL_MS	60000
/* the journal is emptied (its files fsynced) past this size or age */
#define LOG_FILES_JOURNAL_RESET_BYTES	((uint64) 64 << 20)

MemoryContext lf_context;
FileShape  *lf_shapes;
uint32		lf_nslots;
static uint32 *lf_dirty;		/* slots whose logs grew since written */
static uint32 lf_ndirty;
static bool lf_writing_pieces;	/* a new shape's file is written in pieces */
uint32	   *lf_unsynced;
uint32		lf_nunsynced;
List	   *lf_obsolete;
static uint64 lf_disk_bytes;	/* what the data files of the shapes hold */

static List *lf_held_files;	/* LfHeldFile *, see log_files_internal.h */

static uint64 lf_incarnations;
bool		lf_manifest_stale;
bool		lf_unsynced_under_off;
bool		lf_lists_shapes;
XLogRecPtr	lf_durable;
static TimestampTz lf_warned_at;
char	   *lf_buffer;

ShapeTable *
lf_table(void)
{
	return shape_sync_shared->table;
}


/*
 * Clears a slot's state, but not whether it is on lf_dirty or lf_unsynced:
 * an entry there stays until a step or round passes it, so that a slot
 * forgotten and taken again meanwhile is never listed twice.
 */
static void
lf_reset(FileShape *fs)
{
	bool		dirty = fs->dirty;
	bool		unsynced = fs->unsynced;

	lf_disk_bytes -= fs->written;
	memset(fs, 0, sizeof(*fs));
	fs->file = -1;
	fs->dirty = dirty;
	fs->unsynced = unsynced;
}

/* The shape's data file holds `bytes` of its log now. */
static void
lf_set_written(FileShape *fs, uint64 bytes)
{
	lf_disk_bytes = lf_disk_bytes - fs->written + bytes;
	fs->written = bytes;
}

uint64
log_files_disk_bytes(void)
{
	return lf_disk_bytes;
}

uint64
log_files_shape_disk_bytes(uint32 slot)
{
	return lf_shapes != NULL && lf_shapes[slot].in_use ? lf_shapes[slot].written : 0;
}

/*
 * The journal is emptied at LOG_FILES_JOURNAL_RESET_BYTES, or at an eighth
 * of the disk budget when that is less; a round journals no piece that
 * would take it past that (the file is fsynced itself instead), so the
 * journal and the data files together keep within the budget.
 */
uint64
log_files_journal_limit(void)
{
	uint64		budget = (uint64) shape_sync_log_disk_budget * 1024 * 1024;

	return budget > 0 ? Min(LOG_FILES_JOURNAL_RESET_BYTES, budget / 8) :
		LOG_FILES_JOURNAL_RESET_BYTES;
}

uint64
log_files_data_budget(void)
{
	uint64		budget = (uint64) shape_sync_log_disk_budget * 1024 * 1024;

	return budget > 0 ? budget - log_files_journal_limit() : 0;
}

/* A warning about the store as a whole, at most once a minute. */
bool
lf_may_warn(void)
{
	TimestampTz now = GetCurrentTimestamp();

	if (lf_warned_at != 0 &&
		!TimestampDifferenceExceeds(lf_warned_at, now, LOG_FILES_WARN_INTERVAL_MS))
		return false;
	lf_warned_at = now;
	return true;
}

/* The header that describes this cluster, slot and database now. */
void
lf_header_now(LogStoreHeader *h, XLogRecPtr durable)
{
	char		slot[NAMEDATALEN];
	int			fd;

	memset(h, 0, sizeof(*h));
	h->system_id = GetSystemIdentifier();
	h->timeline = GetWALInsertionTimeLine();
	h->database_oid = MyDatabaseId;
	snprintf(slot, sizeof(slot), "shape_sync_%u", MyDatabaseId);
	strlcpy(h->slot, slot, sizeof(h->slot));
	h->fsync_policy = (uint32) shape_sync_log_fsync;
	h->durable_lsn = durable;
	fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY);
	if (fd >= 0)
	{
		ssize_t		n = read(fd, h->boot_id, sizeof(h->boot_id) - 1);

		close(fd);
		h->boot_id[n > 0 ? n : 0] = '\0';
		h->boot_id[strcspn(h->boot_id, "\n")] = '\0';
	}
}

/* ---------------------------------------------------------------- start */

void
log_files_start(uint32 nslots)
{
	if (MakePGDirectory(LOG_FILES_DIR) != 0 && errno != EEXIST)
	{
		ereport(WARNING,
				(errcode_for_file_access(),
				 errmsg("could not create directory \"%s\": %m", LOG_FILES_DIR),
				 errdetail("Shape logs are kept in shared memory only until the worker starts again.")));
		return;
	}
	if (!shape_sync_durable_logs)
	{
		/* what an earlier life stored is stale once the slot moves without it */
		lf_remove_files(NULL);
		return;
	}
	lf_context = AllocSetContextCreate(TopMemoryContext, "shape_sync log files",
									   ALLOCSET_DEFAULT_SIZES);
	lf_nslots = nslots;
	lf_shapes = MemoryContextAllocZero(lf_context, sizeof(FileShape) * nslots);
	for (uint32 i = 0; i < nslots; i++)
		lf_shapes[i].file = -1;
	lf_dirty = MemoryContextAlloc(lf_context, sizeof(uint32) * nslots);
	lf_unsynced = MemoryContextAlloc(lf_context, sizeof(uint32) * nslots);
	lf_buffer = MemoryContextAlloc(lf_context, LOG_FILES_BUFFER);
	lf_rounds_start(nslots);
}

/* Removes every file of the store but those `keep` says to keep; how many went. */
int
lf_remove_files(bool (*keep) (const char *name))
{
	DIR		   *dir = AllocateDir(LOG_FILES_DIR);
	struct dirent *de;
	char		path[MAXPGPATH];
	int			removed = 0;

	while ((de = ReadDir(dir, LOG_FILES_DIR)) != NULL)
	{
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (keep != NULL && keep(de->d_name))
			continue;
		snprintf(path, sizeof(path), "%s/%s", LOG_FILES_DIR, de->d_name);
		if (unlink(path) == 0)
			removed++;
		else if (errno != ENOENT)
			ereport(LOG,
					(errcode_for_file_access(),
					 errmsg("could not remove file \"%s\": %m", path)));
	}
	FreeDir(dir);
	if (removed > 0)
		reader_files_forget();
	return removed;
}

/* ---------------------------------------------- the restore's hand-over */

void
lf_resume_from(const LogStoreHeader *stored)
{
	lf_durable = stored->durable_lsn;
	lf_unsynced_under_off = stored->fsync_policy == LOG_FSYNC_OFF;
}

void
lf_restored(uint32 slot, const LogStoreExtent *extent, File file)
{
	FileShape  *fs = &lf_shapes[slot];

	lf_reset(fs);
	fs->in_use = true;
	fs->incarnation = ++lf_incarnations;
	fs->listed = true;
	fs->caught_up = true;
	fs->shape_file_synced = true;
	strlcpy(fs->handle, extent->handle, sizeof(fs->handle));
	fs->generation = extent->generation;
	fs->file = file;
	lf_set_written(fs, extent->length);
	fs->synced = extent->length;
	lf_lists_shapes = true;
}

void
lf_manifest_outdated(void)
{
	lf_manifest_stale = true;
}

/* -------------------------------------------------------------- writing */

/*
 * Removes a data file, and makes the HTTP threads close what they kept of
 * it (reader_files.c), so that its space is given back now.
 */
static void
lf_unlink_data(const char *path)
{
	(void) unlink(path);
	lf_journaled_forget(strrchr(path, '/') + 1);
	reader_files_forget();
}

void
lf_fail(uint32 slot, const char *what, const char *path)
{
	FileShape  *fs = &lf_shapes[slot];
	char		other[MAXPGPATH];

	/* one warning a minute: a full disk fails every shape written */
	ereport(lf_may_warn() ? WARNING : DEBUG1,
			(errcode_for_file_access(),
			 errmsg("shape %s is kept in memory only: could not %s file \"%s\": %m",
					fs->handle, what, path),
			 errdetail("It is served as before, but a restart drops it: its clients then get 409 and fetch it again.")));
	if (fs->listed || fs->in_round)
		lf_manifest_stale = true;
	fs->failed = true;
	fs->listed = false;
	if (fs->file >= 0)
		FileClose(fs->file);
	fs->file = -1;
	lf_data_path(fs->handle, fs->generation, other);
	/* a log that left memory is read from its file: it goes with the shape */
	if (slog_mem_start(shape_table_log(lf_table(), slot)) == 0)
		lf_unlink_data(other);
	lf_shape_path(fs->handle, other);
	(void) unlink(other);
}

void
lf_note_unsynced(uint32 slot)
{
	FileShape  *fs = &lf_shapes[slot];

	if (!fs->unsynced)
	{
		fs->unsynced = true;
		lf_unsynced[lf_nunsynced++] = slot;
	}
}

/*
 * Opens the slot's first data file with `flags`, which its snapshot worker
 * may have written the snapshot's first chunks to already
 * (snapshot_spill.c), and counts them; false when it could not (lf_fail).
 */
static bool
lf_open_first(uint32 slot, int flags)
{
	FileShape  *fs = &lf_shapes[slot];
	uint64		spilled = lf_table()->slots[slot].snapshot_file_bytes;
	char		path[MAXPGPATH];
	off_t		size;

	lf_data_path(fs->handle, fs->generation, path);
	fs->file = PathNameOpenFile(path, flags | (spilled > 0 ? 0 : O_TRUNC) | PG_BINARY);
	if (fs->file < 0)
	{
		lf_fail(slot, (flags & O_CREAT) ? "create" : "open", path);
		return false;
	}
	if (spilled == 0)
		return true;
	size = FileSize(fs->file);
	if (size < 0 || (uint64) size < spilled)
	{
		if (size >= 0)
			errno = ENODATA;	/* shorter than the snapshot worker wrote */
		lf_fail(slot, "read", path);
		return false;
	}
	lf_set_written(fs, spilled);
	return true;
}

void
log_files_shape_ready(uint32 slot, const LogStoreShape *shape)
{
	FileShape  *fs;
	char		path[MAXPGPATH];
	char		tmp[MAXPGPATH];
	size_t		len;
	char	   *bytes;
	int			fd;
	bool		ok;

	if (lf_shapes == NULL || lf_shapes[slot].in_use)
		return;					/* durable logs are off, or it was restored */
	fs = &lf_shapes[slot];
	lf_reset(fs);
	strlcpy(fs->handle, shape->handle, sizeof(fs->handle));
	fs->generation = LOG_FILES_FIRST_GENERATION;
	fs->in_use = true;
	fs->incarnation = ++lf_incarnations;
	bytes = log_store_shape_encode(shape, &len);
	if (bytes == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory")));
	lf_shape_path(fs->handle, path);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	fd = OpenTransientFile(tmp, O_WRONLY | O_CREAT | O_TRUNC | PG_BINARY);
	ok = fd >= 0 && write(fd, bytes, len) == (ssize_t) len;
	if (fd >= 0 && CloseTransientFile(fd) != 0)
		ok = false;
	free(bytes);
	if (!ok || rename(tmp, path) != 0)
	{
		lf_fail(slot, "write", path);
		return;
	}
	if (!lf_open_first(slot, O_RDWR | O_CREAT))
		return;
	lf_note_unsynced(slot);		/* listed once complete, even when empty */
	log_files_appended(slot);
}

void
log_files_appended(uint32 slot)
{
	FileShape  *fs;

	if (lf_shapes == NULL)
		return;
	fs = &lf_shapes[slot];
	if (fs->in_use && !fs->dirty && !fs->failed)
	{
		fs->dirty = true;
		lf_dirty[lf_ndirty++] = slot;
	}
}

/*
 * Writes the slot's log from what its file has up to `upto`, at most
 * `*budget` bytes (less what it wrote), published bytes only unless
 * `unpublished` (the writer's own copy: this thread's); false when a write
 * failed (the shape is then in memory only: lf_fail).
 */
static bool
lf_write_upto(uint32 slot, uint64 upto, uint64 *budget, bool unpublished)
{
	ShapeTable *table = lf_table();
	FileShape  *fs = &lf_shapes[slot];
	const ShapeLog *log = shape_table_log(table, slot);
	char		path[MAXPGPATH];

	while (fs->written < upto && *budget > 0)
	{
		size_t		n = (size_t) Min(Min(upto - fs->written, LOG_FILES_BUFFER), *budget);

		if (unpublished)
			slog_writer_copy_out(table->arena, log, fs->written, lf_buffer, n);
		else
			slog_copy_out(table->arena, log, fs->written, lf_buffer, n);
		errno = 0;
		if (FileWrite(fs->file, lf_buffer, n, (off_t) fs->written,
					  WAIT_EVENT_DATA_FILE_WRITE) != (int) n)
		{
			if (errno == 0)
				errno = ENOSPC;	/* a short write: the disk is full */
			lf_data_path(fs->handle, fs->generation, path);
			lf_fail(slot, "write", path);
			return false;
		}
		lf_set_written(fs, fs->written + n);
		*budget -= n;
		lf_note_unsynced(slot);
	}
	return true;
}

/*
 * Writes what the slot's published log holds past what its file has, at
 * most `*budget` bytes (less what it wrote); false when more is left.
 */
static bool
lf_write(uint32 slot, uint64 *budget)
{
	FileShape  *fs = &lf_shapes[slot];
	SlogPublished pub;

	if (!fs->in_use || fs->failed || fs->file < 0)
		return true;
	slog_read_published(shape_table_log(lf_table(), slot), &pub);
	if (!lf_write_upto(slot, pub.data_end, budget, false))
		return true;			/* failed: nothing more to write */
	if (fs->written < pub.data_end)
		return false;
	fs->caught_up = true;
	return true;
}

/* The slot's shape, when it has a file to write; NULL otherwise. */
static FileShape *
lf_open_shape(uint32 slot)
{
	FileShape  *fs;

	if (lf_shapes == NULL || slot >= lf_nslots)
		return NULL;
	fs = &lf_shapes[slot];
	return fs->in_use && !fs->failed && fs->file >= 0 ? fs : NULL;
}

/*
 * All that the slot's published log holds past its file goes there now:
 * true when the file then holds it (caught_up), so that what is appended
 * next may be written ahead (a take-over of kept transactions: the file of
 * a new shape may still lack the end of its snapshot).
 */
bool
log_files_catch_up(uint32 slot)
{
	uint64		unbounded = UINT64_MAX;

	return lf_open_shape(slot) != NULL && lf_write(slot, &unbounded);
}

/*
 * In the middle of a transaction's replay, memory short: the slot's log,
 * up to its open chunk, goes to its file, what the transaction appended
 * included, ahead of the commit that publishes it, so that it may leave
 * memory (log_trim_ahead).  Not for a new shape whose file is still
 * written in pieces (caught_up).  A manifest lists a log only as long as
 * its file holds exactly what it published (lf_complete), and rounds are
 * built between transactions, so none lists these bytes before the commit
 * publishes them (a round after a transaction that rotated the shape may
 * make them durable, and no manifest names them); after a crash before
 * the commit, a start cuts the file back to its listed length.  False
 * when the file does not hold the log up to its open chunk.
 */
bool
log_files_write_ahead(uint32 slot)
{
	ShapeTable *table = lf_table();
	FileShape  *fs = lf_open_shape(slot);
	ShapeLog   *log;
	SlogPublished pub;
	uint64		unbounded = UINT64_MAX;

	if (fs == NULL)
		return false;
	log = shape_table_log(table, slot);
	slog_read_published(log, &pub);
	if (fs->written < pub.data_end && !fs->caught_up)
		return false;			/* a snapshot still being written: the step's */
	return lf_write_upto(slot, Max(pub.data_end, log->chunk_start), &unbounded, true);
}

/*
 * The next generation of the log being compacted, written as compaction
 * builds it when the log had left memory (log_files_compaction_begin): its
 * copy may not fit in memory either.  One compaction at a time, on the
 * main thread.
 */
static int32 lf_next_slot = -1;
static File lf_next_file = -1;
static uint64 lf_next_written;
static char lf_next_path[MAXPGPATH];

bool
log_files_compaction_begin(uint32 slot)
{
	FileShape  *fs;

	if (lf_shapes == NULL)
		return false;
	fs = &lf_shapes[slot];
	if (!fs->in_use || fs->failed || fs->file < 0)
		return false;
	Assert(lf_next_slot < 0);
	lf_data_path(fs->handle, fs->generation + 1, lf_next_path);
	lf_next_file = PathNameOpenFile(lf_next_path, O_RDWR | O_CREAT | O_TRUNC | PG_BINARY);
	if (lf_next_file < 0)
	{
		ereport(lf_may_warn() ? WARNING : DEBUG1,
				(errcode_for_file_access(),
				 errmsg("shape %s was not compacted: could not create file \"%s\": %m",
						fs->handle, lf_next_path)));
		return false;
	}
	lf_next_slot = (int32) slot;
	lf_next_written = 0;
	return true;
}

const char *
log_files_compaction_write(ShapeLog *out)
{
	ShapeLogArena *arena = lf_table()->arena;

	Assert(lf_next_slot >= 0);
	while (lf_next_written < out->write_pos)
	{
		size_t		n = (size_t) Min(out->write_pos - lf_next_written, LOG_FILES_BUFFER);

		slog_writer_copy_out(arena, out, lf_next_written, lf_buffer, n);
		errno = 0;
		if (FileWrite(lf_next_file, lf_buffer, n, (off_t) lf_next_written,
					  WAIT_EVENT_DATA_FILE_WRITE) != (int) n)
		{
			if (errno == 0)
				errno = ENOSPC; /* a short write: the disk is full */
			ereport(lf_may_warn() ? WARNING : DEBUG1,
					(errcode_for_file_access(),
					 errmsg("shape %s was not compacted: could not write file \"%s\": %m",
							lf_shapes[lf_next_slot].handle, lf_next_path),
					 errdetail("It is tried again once its log has grown as much again.")));
			return NULL;
		}
		lf_next_written += n;
		lf_disk_bytes += n;		/* the budget counts it as it is written */
	}
	return lf_next_path;
}

void
log_files_compaction_abandon(void)
{
	if (lf_next_slot < 0)
		return;
	FileClose(lf_next_file);
	(void) unlink(lf_next_path);
	lf_disk_bytes -= lf_next_written;
	lf_next_slot = -1;
	lf_next_file = -1;
}

void
log_files_replaced(uint32 slot, bool read_from_disk)
{
	FileShape  *fs;
	char		path[MAXPGPATH];
	LfHeldFile *obsolete;
	MemoryContext old;

	if (lf_shapes == NULL)
		return;
	fs = &lf_shapes[slot];
	if (!fs->in_use || fs->failed)
	{
		/* not after log_files_compaction_begin, but the copy would read that file */
		if (lf_next_slot == (int32) slot)
		{
			FileClose(lf_next_file);
			lf_disk_bytes -= lf_next_written;
			lf_hold_file(lf_held_file_new(slot, lf_next_path));
			lf_next_slot = -1;
			lf_next_file = -1;
		}
		return;
	}
	lf_data_path(fs->handle, fs->generation, path);
	obsolete = lf_held_file_new(slot, path);
	obsolete->read_from_disk = read_from_disk;
	old = MemoryContextSwitchTo(lf_context);
	lf_obsolete = lappend(lf_obsolete, obsolete);	/* once no manifest names it */
	MemoryContextSwitchTo(old);
	if (fs->file >= 0)
		FileClose(fs->file);
	fs->generation++;
	lf_set_written(fs, 0);
	fs->synced = 0;
	fs->listed = false;			/* listed again once written whole */
	lf_data_path(fs->handle, fs->generation, path);
	if (lf_next_slot == (int32) slot)
	{
		/* written as it was built: the rest (its open chunk) follows */
		fs->file = lf_next_file;
		lf_disk_bytes -= lf_next_written;	/* counted as the shape's now */
		lf_set_written(fs, lf_next_written);
		lf_next_slot = -1;
		lf_next_file = -1;
	}
	else
		fs->file = PathNameOpenFile(path, O_RDWR | O_CREAT | O_TRUNC | PG_BINARY);
	if (fs->file < 0)
	{
		lf_fail(slot, "create", path);
		return;
	}
	{
		uint64		unbounded = UINT64_MAX;

		lf_write(slot, &unbounded);
	}
	lf_note_unsynced(slot);		/* listed again once synced, even when empty */
}

/* A file of the slot's to let go of later (in lf_context). */
LfHeldFile *
lf_held_file_new(uint32 slot, const char *path)
{
	ShapeTable *table = lf_table();
	LfHeldFile *held = MemoryContextAllocZero(lf_context, sizeof(LfHeldFile));

	held->slot = slot;
	held->generation = atomic_load(&table->slots[slot].generation);
	held->compactions = atomic_load(&table->slots[slot].compactions);
	strlcpy(held->path, path, sizeof(held->path));
	return held;
}

/* The file goes once its readers are gone (lf_remove_held_files). */
void
lf_hold_file(LfHeldFile *held)
{
	MemoryContext old = MemoryContextSwitchTo(lf_context);

	lf_held_files = lappend(lf_held_files, held);
	MemoryContextSwitchTo(old);
}

void
log_files_forget(uint32 slot)
{
	FileShape  *fs;
	char		path[MAXPGPATH];

	if (lf_shapes == NULL)
		return;
	if (!lf_shapes[slot].in_use)
	{
		/*
		 * Not taken over: its snapshot worker may be writing its first data
		 * file (snapshot_spill.c), or have left it; it goes once the worker
		 * has let go of the slot.
		 */
		log_files_data_path(lf_table()->slots[slot].handle, LOG_FILES_FIRST_GENERATION, path);
		lf_hold_file(lf_held_file_new(slot, path));
		return;
	}
	fs = &lf_shapes[slot];
	if (fs->listed || fs->in_round)
		lf_manifest_stale = true;	/* the next round says it is gone */
	if (fs->file >= 0)
		FileClose(fs->file);
	/* a manifest that still names it: the next start finds no file and drops it */
	lf_data_path(fs->handle, fs->generation, path);
	if (slog_mem_start(shape_table_log(lf_table(), slot)) > 0)
		lf_hold_file(lf_held_file_new(slot, path));
	else
		lf_unlink_data(path);
	lf_shape_path(fs->handle, path);
	(void) unlink(path);
	lf_reset(fs);
}

/*
 * Whether a held file may still be read: its slot still holds its shape
 * and, for a compacted generation, the log it belonged to may still be
 * read (the slot's previous version is not free, and no compaction since
 * took it: one takes it only once free).
 */
static bool
lf_held_file_read(const LfHeldFile *held)
{
	ShapeTable *table = lf_table();

	if (shape_table_state(table, held->slot) == SHAPE_FREE ||
		atomic_load(&table->slots[held->slot].generation) != held->generation)
		return false;
	if (!held->read_from_disk)
		return true;
	return atomic_load(&table->slots[held->slot].compactions) == held->compactions &&
		!shape_table_previous_log_free(table, held->slot);
}

/* The held data files whose readers are gone. */
static void
lf_remove_held_files(void)
{
	ListCell   *lc;
	bool		removed = false;

	foreach(lc, lf_held_files)
	{
		LfHeldFile *held = lfirst(lc);

		if (lf_held_file_read(held))
			continue;
		(void) unlink(held->path);
		lf_journaled_forget(strrchr(held->path, '/') + 1);
		removed = true;
		lf_held_files = foreach_delete_current(lf_held_files, lc);
		pfree(held);
	}
	if (removed)
		reader_files_forget();	/* see lf_unlink_data */
}

/*
 * Whether a log that grew by `gained` may wait for the next round to be
 * written: what a round lists must be in the files, only written bytes may
 * leave memory, and with shape_sync.log_fsync = commit every batch is a
 * round.  A log written once a round rather than once a batch spares the
 * opening and closing of its file per batch when the shapes that change
 * are more than the files fd.c keeps open (10,000 per-user shapes).
 */
static bool
lf_may_wait(const FileShape *fs, uint64 gained, bool round_due, bool memory_short)
{
	return !round_due && !memory_short && shape_sync_log_fsync != LOG_FSYNC_COMMIT &&
		fs->listed && !fs->in_round && fs->caught_up && gained < LOG_FILES_WAIT_MAX;
}

void
log_files_step(XLogRecPtr decoded, bool memory_short)
{
	uint64		budget = LOG_FILES_WRITE_PER_STEP;
	uint64		unbounded = UINT64_MAX;
	uint32		kept = 0;
	bool		round_due;

	if (lf_shapes == NULL)
		return;
	if (lf_held_files != NIL)
		lf_remove_held_files();
	round_due = lf_round_due(lf_ndirty > 0);
	lf_writing_pieces = false;
	for (uint32 i = 0; i < lf_ndirty; i++)
	{
		uint32		slot = lf_dirty[i];
		FileShape  *fs = &lf_shapes[slot];
		SlogPublished pub;
		bool		done;

		if (!fs->in_use || fs->failed)
		{
			fs->dirty = false;
			continue;
		}
		slog_read_published(shape_table_log(lf_table(), slot), &pub);
		if (pub.data_end > fs->written &&
			lf_may_wait(fs, pub.data_end - fs->written, round_due, memory_short))
		{
			lf_dirty[kept++] = slot;	/* written with the next round */
			continue;
		}
		/* listed logs (and those a round in flight lists) whole: a round lists only complete ones */
		unbounded = UINT64_MAX;
		done = lf_write(slot, fs->listed || fs->in_round ? &unbounded : &budget);
		if (done)
			fs->dirty = false;
		else
		{
			lf_dirty[kept++] = slot;	/* a snapshot being written: more next step */
			lf_writing_pieces = true;
		}
	}
	lf_ndirty = kept;
	lf_rounds_step(decoded, round_due);
}

/* Whether a new shape's file is still being written: the main loop should not sleep. */
bool
log_files_writing(void)
{
	return lf_shapes != NULL && lf_writing_pieces;
}

void
log_files_shutdown(XLogRecPtr decoded)
{
	if (lf_shapes == NULL)
		return;
	for (uint32 i = 0; i < lf_ndirty; i++)
	{
		uint64		unbounded = UINT64_MAX;

		lf_write(lf_dirty[i], &unbounded);
	}
	lf_ndirty = 0;
	lf_rounds_stop(decoded);
}
