/*-------------------------------------------------------------------------
 *
 * log_files.c
 *		Shape logs on disk: written behind the shared-memory logs and made
 *		durable in rounds (log_restore.c reads them back at start).
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
 * live change.  A shape whose snapshot just finished is written in pieces
 * of LOG_FILES_WRITE_PER_STEP per step, and enters the manifest once its
 * file holds all of its log.
 *
 * Rounds.  Every LOG_FILES_ROUND_MS (shape_sync.log_fsync = batch), a
 * round makes the files written since the last one durable and brings
 * the manifest up to date, with durable_lsn the decoder's position when
 * the round was built: a delta of the extents that changed appended to it
 * and fsynced, or now and then the whole manifest written aside, fsynced,
 * renamed, the directory fsynced (manifest_listing.c), so that a round
 * writes what changed, not every shape's extent.  What
 * each file gained (up to LOG_FILES_JOURNAL_PIECE_MAX) is copied into the
 * journal, fsynced once for them all (log_journal.c): a change of a table
 * that many shapes follow costs one fsync, not one per shape.  A file that
 * gained more, or whose gain the journal has no room for (it keeps within
 * log_files_journal_limit, part of the disk budget), is fsynced itself.
 * Every file with records in the journal is fsynced, once, when the
 * journal is emptied (when full, after LOG_FILES_JOURNAL_RESET_MS, or
 * after a journal write failed and may have cut a record short), and held
 * open until then, so that a writeback error meanwhile is not lost with
 * its inode (lf_journaled_add); a start replays the journal first
 * (log_restore.c).  The main
 * thread builds it (which files, the manifest's bytes) and the flusher
 * thread does it (log_flusher.c), so that no fsync delays decoding; one
 * round is in flight at a time, and its outcome is applied at the next
 * step.  With commit, a round runs here after every batch that decoded
 * something, before its clients are woken.  Only once a round succeeded
 * does log_files_confirmable let the slot be confirmed up to its position, so
 * the slot never passes what the files hold: after any crash, decoding
 * starts at or before durable_lsn, each restored shape skips the commits
 * before it (shape_stream_resume_after) and gets those after it again,
 * with the same offsets, since offsets are commit positions.  With
 * shape_sync.log_fsync = off the rounds write but never fsync: the files
 * survive a crash of PostgreSQL (the page cache keeps them) but not one of
 * the operating system, so the header keeps the kernel's boot id and a
 * store written so is purged after a reboot.  Files a round makes obsolete
 * (a compacted shape's previous generation) are removed after it.
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
 * thousands of open files; only a round's fsyncs and manifest run on the
 * flusher thread, which opens each file by its path.  A round's shapes are
 * told apart from later shapes of the same slot by their incarnation, and
 * from a compaction's next file by their generation.
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
#include "log_flusher.h"
#include "log_journal.h"
#include "log_record.h"
#include "manifest_listing.h"
#include "reader_files.h"
#include "shape_stream.h"
#include "shared_state.h"

#define LOG_FILES_ROUND_MS			1000
#define LOG_FILES_WRITE_PER_STEP	((uint64) 8 << 20)
#define LOG_FILES_WARN_INTERVAL_MS	60000
/* a file that gained more in a round is fsynced itself, not journaled */
#define LOG_FILES_JOURNAL_PIECE_MAX	((uint64) 1 << 20)
/* a piece is one journal record: journal_room counts one header for it */
StaticAssertDecl(LOG_FILES_JOURNAL_PIECE_MAX <= LOG_JOURNAL_RECORD_DATA_MAX,
				 "a journaled piece is one record");
/* the journal is emptied (its files fsynced) past this size or age */
#define LOG_FILES_JOURNAL_RESET_BYTES	((uint64) 64 << 20)
#define LOG_FILES_JOURNAL_RESET_MS	(5 * 60 * 1000)
#define MANIFEST_TMP_PATH			LOG_FILES_DIR "/manifest.tmp"

static MemoryContext lf_context;
FileShape  *lf_shapes;
uint32		lf_nslots;
static uint32 *lf_dirty;		/* slots whose logs grew since written */
static uint32 lf_ndirty;
static uint32 *lf_unsynced;		/* slots written since the last round */
static uint32 lf_nunsynced;
static List *lf_obsolete;		/* paths to remove after the next round */
static uint64 lf_disk_bytes;	/* what the data files of the shapes hold */

/*
 * Data files of forgotten shapes whose logs left memory for them (readers
 * that still hold the log read them), or whose snapshot worker may still
 * write them: they go once the slot is free or claimed again.
 */
typedef struct LfHeldFile
{
	uint32		slot;
	uint32		generation;		/* the slot's, when its shape was forgotten */
	char		path[MAXPGPATH];
} LfHeldFile;

static List *lf_held_files;

/* A shape of the round in flight, and what the round saw of it. */
typedef struct LfRoundShape
{
	uint32		slot;
	uint64		incarnation;
	uint32		generation;
	uint64		length;			/* written when the round was built */
	uint32		first_path;		/* its files' first index in the round's paths */
	int32		piece;			/* its index in the round's journal pieces, or -1 */
} LfRoundShape;

static LogFlusher lf_flusher;	/* the thread that does rounds (log_flusher.c) */
static LfRoundShape *lf_round;	/* the round in flight */
static uint32 lf_nround;
static uint32 lf_round_lists;	/* shapes its manifest lists */
static List *lf_obsolete_in_round;	/* paths it makes obsolete */
static ManifestListing *lf_listing; /* what the manifest on disk lists */

/*
 * A data file with records in the journal since it was last emptied, and a
 * descriptor of it held until then (see lf_journaled_add).
 */
typedef struct LfJournaled
{
	char	   *name;
	int			pin;
} LfJournaled;

/*
 * The journal (log_journal.c): the data files with records in it since it
 * was last emptied (LfJournaled, in lf_context), how long it is, whether
 * it may end in a record cut short, when it was last emptied.
 */
static List *lf_journaled;
static uint64 lf_journal_bytes;
static bool lf_journal_reset_due;
static TimestampTz lf_journal_reset_at;
static uint32 lf_round_journaled_paths;	/* the round's first paths: files the
										 * journal it empties holds records of */
static uint64 lf_incarnations;
static bool lf_manifest_stale;	/* it lists a shape that is gone */
static bool lf_unsynced_under_off;	/* files written with log_fsync = off
									 * since they were last all fsynced */
static bool lf_lists_shapes;	/* the manifest on disk lists a shape */
static XLogRecPtr lf_durable;	/* ... and its durable_lsn */
static TimestampTz lf_last_round;
static TimestampTz lf_warned_at;
char	   *lf_buffer;

static ShapeTable *
lf_table(void)
{
	return shape_sync_shared->table;
}

static void lf_fail(uint32 slot, const char *what, const char *path);
static void lf_journaled_forget(const char *name);

/* Whether the next round is to empty the journal, its files fsynced first. */
static bool
lf_journal_reset_wanted(void)
{
	if (lf_journal_reset_due)
		return true;
	if (lf_journal_bytes == 0)
		return false;
	if (lf_journal_bytes >= log_files_journal_limit() ||
		TimestampDifferenceExceeds(lf_journal_reset_at, GetCurrentTimestamp(),
								   LOG_FILES_JOURNAL_RESET_MS))
		return true;
	/* with every shape gone, nothing of theirs stays behind in it */
	for (uint32 slot = 0; slot < lf_nslots; slot++)
		if (lf_shapes[slot].in_use)
			return false;
	return true;
}

/*
 * A file the journal holds records of could not be fsynced before the
 * journal is emptied.  A retry could succeed falsely (the kernel may drop
 * the pages it failed to write and report the error once), so its shape,
 * if it still has that file, is kept in memory only: the next manifest no
 * longer lists it, and only then is the journal emptied.  A file no live
 * shape has (forgotten, or an older generation) is not needed by that
 * manifest either, and is left out of the next try.
 */
static void
lf_journaled_fsync_failed(const char *path)
{
	const char *name = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
	char		own[MAXPGPATH];
	bool		owned = false;

	for (uint32 slot = 0; slot < lf_nslots && !owned; slot++)
	{
		FileShape  *fs = &lf_shapes[slot];

		if (!fs->in_use || fs->failed)
			continue;
		lf_data_path(fs->handle, fs->generation, own);
		if (strcmp(own, path) == 0)
		{
			lf_fail(slot, "fsync", path);
			owned = true;
		}
	}
	if (!owned)
		ereport(LOG,
				(errcode_for_file_access(),
				 errmsg("shape_sync could not fsync file \"%s\": %m", path),
				 errdetail("No shape needs the file any longer.")));
	lf_journaled_forget(name);
	lf_journal_reset_due = true;
}

/*
 * A data file's first record in the journal since it was emptied: it is
 * held open until then.  Its data reaches the disk only when the journal
 * is emptied, up to LOG_FILES_JOURNAL_RESET_MS later; a writeback error
 * meanwhile is kept by its inode and reported by the fsync then (to any
 * descriptor, on Linux since 4.14), but only while the inode stays in
 * memory: an open descriptor keeps it there.  Counted against the
 * process's descriptors (AcquireExternalFD); false when none is left,
 * and the file is then fsynced itself, not journaled.
 */
static bool
lf_journaled_add(const char *path)
{
	LfJournaled *j;
	MemoryContext old;
	int			fd;

	if (!AcquireExternalFD())
		return false;
	fd = open(path, O_RDONLY | PG_BINARY);
	if (fd < 0)
	{
		ReleaseExternalFD();
		return false;
	}
	old = MemoryContextSwitchTo(lf_context);
	j = palloc(sizeof(LfJournaled));
	j->name = pstrdup(strrchr(path, '/') + 1);
	j->pin = fd;
	lf_journaled = lappend(lf_journaled, j);
	MemoryContextSwitchTo(old);
	return true;
}

static void
lf_journaled_free(LfJournaled *j)
{
	close(j->pin);
	ReleaseExternalFD();
	pfree(j->name);
	pfree(j);
}

/*
 * The data file `name` is removed (or no longer to be fsynced): its
 * descriptor goes, so that its space is given back now.
 */
static void
lf_journaled_forget(const char *name)
{
	ListCell   *lc;

	foreach(lc, lf_journaled)
	{
		LfJournaled *j = lfirst(lc);

		if (strcmp(j->name, name) == 0)
		{
			lf_journaled_free(j);
			lf_journaled = foreach_delete_current(lf_journaled, lc);
			break;
		}
	}
}

/* A round emptied the journal: no file has records in it now. */
static void
lf_journal_emptied(void)
{
	ListCell   *lc;

	foreach(lc, lf_journaled)
		lf_journaled_free(lfirst(lc));
	list_free(lf_journaled);
	lf_journaled = NIL;
	lf_journal_bytes = 0;
	lf_journal_reset_due = false;
	lf_journal_reset_at = GetCurrentTimestamp();
	for (uint32 slot = 0; slot < lf_nslots; slot++)
		lf_shapes[slot].journaled_generation = 0;
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
static bool
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
	lf_round = MemoryContextAlloc(lf_context, sizeof(LfRoundShape) * nslots);
	lf_listing = manifest_listing_create(nslots);
	if (lf_listing == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory")));
	if (log_flusher_start(&lf_flusher) != 0)
		ereport(LOG,
				(errmsg("shape_sync could not start its thread for fsync: %m"),
				 errdetail("Shape logs are made durable on the worker's main thread instead.")));
	lf_last_round = GetCurrentTimestamp();
	lf_journal_reset_at = lf_last_round;
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

static void
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

static void
lf_note_unsynced(uint32 slot)
{
	FileShape  *fs = &lf_shapes[slot];

	if (!fs->unsynced)
	{
		fs->unsynced = true;
		lf_unsynced[lf_nunsynced++] = slot;
	}
}

void
log_files_shape_ready(uint32 slot, const LogStoreShape *shape)
{
	FileShape  *fs;
	uint64		spilled;
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
	/* the snapshot worker may have written the snapshot's first chunks already */
	spilled = lf_table()->slots[slot].snapshot_file_bytes;
	lf_data_path(fs->handle, fs->generation, path);
	fs->file = PathNameOpenFile(path, O_RDWR | O_CREAT | (spilled > 0 ? 0 : O_TRUNC) | PG_BINARY);
	if (fs->file < 0)
	{
		lf_fail(slot, "create", path);
		return;
	}
	if (spilled > 0)
	{
		off_t		size = FileSize(fs->file);

		if (size < 0 || (uint64) size < spilled)
		{
			if (size >= 0)
				errno = ENODATA;	/* shorter than the snapshot worker wrote */
			lf_fail(slot, "read", path);
			return;
		}
		lf_set_written(fs, spilled);
	}
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
 * Writes what the slot's published log holds past what its file has, at
 * most `*budget` bytes (less what it wrote); false when more is left.
 */
static bool
lf_write(uint32 slot, uint64 *budget)
{
	ShapeTable *table = lf_table();
	FileShape  *fs = &lf_shapes[slot];
	const ShapeLog *log = shape_table_log(table, slot);
	SlogPublished pub;
	char		path[MAXPGPATH];

	if (!fs->in_use || fs->failed || fs->file < 0)
		return true;
	slog_read_published(log, &pub);
	while (fs->written < pub.data_end && *budget > 0)
	{
		size_t		n = (size_t) Min(Min(pub.data_end - fs->written, LOG_FILES_BUFFER), *budget);

		slog_copy_out(table->arena, log, fs->written, lf_buffer, n);
		if (FileWrite(fs->file, lf_buffer, n, (off_t) fs->written,
					  WAIT_EVENT_DATA_FILE_WRITE) != (int) n)
		{
			if (errno == 0)
				errno = ENOSPC;	/* a short write: the disk is full */
			lf_data_path(fs->handle, fs->generation, path);
			lf_fail(slot, "write", path);
			return true;
		}
		lf_set_written(fs, fs->written + n);
		*budget -= n;
		lf_note_unsynced(slot);
	}
	return fs->written >= pub.data_end;
}

/* Compaction swapped the slot's log: its next generation, written whole. */
void
log_files_replaced(uint32 slot)
{
	FileShape  *fs;
	char		path[MAXPGPATH];
	MemoryContext old;

	if (lf_shapes == NULL)
		return;
	fs = &lf_shapes[slot];
	if (!fs->in_use || fs->failed)
		return;
	lf_data_path(fs->handle, fs->generation, path);
	old = MemoryContextSwitchTo(lf_context);
	lf_obsolete = lappend(lf_obsolete, pstrdup(path));	/* once no manifest names it */
	MemoryContextSwitchTo(old);
	if (fs->file >= 0)
		FileClose(fs->file);
	fs->generation++;
	lf_set_written(fs, 0);
	fs->synced = 0;
	fs->listed = false;			/* listed again once written whole */
	lf_data_path(fs->handle, fs->generation, path);
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

/* The data file at `path` goes once the slot is free or another shape's. */
static void
lf_hold_file(uint32 slot, const char *path)
{
	MemoryContext old = MemoryContextSwitchTo(lf_context);
	LfHeldFile *held = palloc(sizeof(LfHeldFile));

	held->slot = slot;
	held->generation = atomic_load(&lf_table()->slots[slot].generation);
	strlcpy(held->path, path, sizeof(held->path));
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
		lf_hold_file(slot, path);
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
		lf_hold_file(slot, path);
	else
		lf_unlink_data(path);
	lf_shape_path(fs->handle, path);
	(void) unlink(path);
	lf_reset(fs);
}

/* The held data files whose readers are gone: their slot is free or another shape's. */
static void
lf_remove_held_files(void)
{
	ShapeTable *table = lf_table();
	ListCell   *lc;
	bool		removed = false;

	foreach(lc, lf_held_files)
	{
		LfHeldFile *held = lfirst(lc);

		if (shape_table_state(table, held->slot) != SHAPE_FREE &&
			atomic_load(&table->slots[held->slot].generation) == held->generation)
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

/* --------------------------------------------------------------- rounds */

/* Whether the slot's files hold its whole log now. */
static bool
lf_complete(uint32 slot)
{
	FileShape  *fs = &lf_shapes[slot];
	SlogPublished pub;

	if (!fs->in_use || fs->failed || fs->file < 0 || !shape_stream_durable(slot))
		return false;
	slog_read_published(shape_table_log(lf_table(), slot), &pub);
	return fs->written == pub.data_end;
}

/* The round's shapes go back on lf_unsynced, for the next one. */
static void
lf_requeue_round(void)
{
	for (uint32 i = 0; i < lf_nround; i++)
	{
		FileShape  *fs = &lf_shapes[lf_round[i].slot];

		if (fs->in_use && fs->incarnation == lf_round[i].incarnation)
		{
			fs->in_round = false;
			lf_note_unsynced(lf_round[i].slot);
		}
	}
	lf_nround = 0;
}

/*
 * Builds the next round: the files written since the last one (of shapes
 * that are complete, or already listed), and a manifest of every complete
 * shape, durable up to `decoded`, the position before which every commit
 * is in them.  What it covers stays in lf_round until its outcome is
 * applied (lf_apply_round).  NULL when out of memory.
 */
static LogFlushRound *
lf_build_round(XLogRecPtr decoded)
{
	ShapeTable *table = lf_table();
	LogFlushRound *round = calloc(1, sizeof(LogFlushRound));
	LogStoreHeader header;
	uint32		n = 0;
	uint32		kept = 0;
	char		path[MAXPGPATH];
	bool		out_of_memory = false;
	uint64		journal_room = log_files_journal_limit();

	if (round == NULL)
		return NULL;
	journal_room -= Min(journal_room, lf_journal_bytes);
	/*
	 * Never backwards: after a start decoding re-reads from the slot's
	 * restart_lsn, and what the restored files hold up to lf_durable is
	 * there, or in the snapshot of any shape made since.
	 */
	decoded = Max(decoded, lf_durable);
	round->paths = calloc((size_t) Max(lf_nunsynced, 1) * 2, sizeof(char *));
	if (round->paths == NULL)
	{
		free(round);
		return NULL;
	}
	round->sync = shape_sync_log_fsync != LOG_FSYNC_OFF;
	round->durable_lsn = decoded;
	round->manifest_path = MANIFEST_PATH;
	round->manifest_tmp_path = MANIFEST_TMP_PATH;
	round->dir_path = LOG_FILES_DIR;
	round->journal_path = JOURNAL_PATH;
	round->reset_journal = round->sync && lf_journal_reset_wanted();
	if (round->sync && !round->reset_journal && lf_nunsynced > 0)
	{
		round->pieces = calloc(lf_nunsynced, sizeof(LogJournalPiece));
		if (round->pieces == NULL)
		{
			log_flush_round_free(round);
			return NULL;
		}
	}
	if (round->reset_journal)
	{
		/* every file the journal holds records of is fsynced before it is emptied */
		char	  **more = realloc(round->paths, sizeof(char *) *
								   ((size_t) Max(lf_nunsynced, 1) * 2 + list_length(lf_journaled)));
		ListCell   *lc;

		if (more == NULL)
		{
			log_flush_round_free(round);
			return NULL;
		}
		round->paths = more;
		foreach(lc, lf_journaled)
		{
			snprintf(path, sizeof(path), "%s/%s", LOG_FILES_DIR,
					 ((LfJournaled *) lfirst(lc))->name);
			if ((round->paths[round->npaths++] = strdup(path)) == NULL)
				out_of_memory = true;
		}
	}
	lf_round_journaled_paths = round->npaths;

	lf_nround = 0;
	for (uint32 i = 0; i < lf_nunsynced; i++)
	{
		uint32		slot = lf_unsynced[i];
		FileShape  *fs = &lf_shapes[slot];
		LfRoundShape *r;
		uint64		journal_need = 0;	/* a record of what its file gained */

		fs->unsynced = false;
		if (!fs->in_use || fs->failed)
			continue;
		if (!fs->listed && !lf_complete(slot))
		{
			/* a snapshot still being written: looked at again next round */
			fs->unsynced = true;
			lf_unsynced[kept++] = slot;
			continue;
		}
		r = &lf_round[lf_nround++];
		r->slot = slot;
		r->incarnation = fs->incarnation;
		r->generation = fs->generation;
		r->length = fs->written;
		r->first_path = round->npaths;
		r->piece = -1;
		fs->in_round = true;
		if (fs->synced < fs->written)
		{
			lf_data_path(fs->handle, fs->generation, path);
			journal_need = LOG_JOURNAL_RECORD_HEADER + strlen(strrchr(path, '/') + 1) +
				(fs->written - fs->synced);
		}
		if (fs->synced < fs->written && round->pieces != NULL &&
			fs->written - fs->synced <= LOG_FILES_JOURNAL_PIECE_MAX &&
			journal_need <= journal_room &&
			(fs->journaled_generation == fs->generation || lf_journaled_add(path)))
		{
			/* a little more of it: into the journal, with the others' */
			LogJournalPiece *piece = &round->pieces[round->npieces];

			journal_room -= journal_need;
			piece->name = strdup(strrchr(path, '/') + 1);
			piece->from = fs->synced;
			piece->to = fs->written;
			if (piece->name == NULL)
				out_of_memory = true;
			r->piece = (int32) round->npieces++;
			fs->journaled_generation = fs->generation;
		}
		else if (fs->synced < fs->written)
		{
			/* much more, or no room left in the journal: fsynced itself */
			if (round->pieces != NULL && fs->written - fs->synced <= LOG_FILES_JOURNAL_PIECE_MAX &&
				lf_journal_bytes > 0 && journal_need <= log_files_journal_limit())
				lf_journal_reset_due = true;	/* full: emptied next round, it takes this again */
			if ((round->paths[round->npaths++] = strdup(path)) == NULL)
				out_of_memory = true;
		}
		if (!fs->shape_file_synced)
		{
			lf_shape_path(fs->handle, path);
			if ((round->paths[round->npaths++] = strdup(path)) == NULL)
				out_of_memory = true;
		}
	}
	lf_nunsynced = kept;
	if (out_of_memory)
	{
		/* no round this time: its shapes wait for the next */
		log_flush_round_free(round);
		lf_requeue_round();
		return NULL;
	}

	/* what the manifest is to list now; manifest_listing.c writes what changed */
	lf_header_now(&header, decoded);
	manifest_listing_begin(lf_listing);
	for (uint32 slot = 0; slot < lf_nslots; slot++)
	{
		FileShape  *fs = &lf_shapes[slot];
		const ShapeLog *log;
		SlogPublished pub;
		LogStoreExtent now;
		uint32		first_chunk;

		if (!(fs->listed || fs->in_round) || !lf_complete(slot))
		{
			(void) manifest_listing_offer(lf_listing, slot, NULL);
			continue;
		}
		log = shape_table_log(table, slot);
		slog_read_published(log, &pub);
		memset(&now, 0, sizeof(now));
		strlcpy(now.handle, fs->handle, sizeof(now.handle));
		now.generation = fs->generation;
		now.length = fs->written;
		now.last = pub.last;
		now.nchunks = pub.chunk_count;
		n++;
		first_chunk = manifest_listing_offer(lf_listing, slot, &now);
		for (uint32 c = first_chunk; first_chunk != UINT32_MAX && c < pub.chunk_count; c++)
		{
			SlogChunk	chunk;

			slog_chunk_read(table->arena, log, c, &chunk);
			if (!manifest_listing_chunk(lf_listing, &chunk))
				break;
		}
	}
	lf_round_lists = n;
	if (n > 0 && !lf_lists_shapes)
	{
		/*
		 * The first manifest that lists a shape: the slot must not pass its
		 * position from now on, not only once it is in place.
		 */
		lf_lists_shapes = true;
		lf_durable = decoded;
	}
	if (n > 0 || lf_lists_shapes)
	{
		ManifestWrite write;

		if (manifest_listing_encode(lf_listing, &header, &write))
		{
			round->manifest = write.bytes;
			round->manifest_len = write.len;
			round->manifest_append = write.append;
			round->manifest_at = write.at;
		}
		else
		{
			manifest_listing_cancel(lf_listing);
			log_flush_round_free(round);
			round = NULL;
		}
	}
	else
		manifest_listing_cancel(lf_listing);
	if (round == NULL)
		lf_requeue_round();
	return round;
}

/*
 * What a finished round means: the files it synced are durable up to the
 * lengths it saw, the shapes it listed are listed, the slot may pass its
 * position, the files it made obsolete go; or, when it failed, none of
 * that: its shapes are looked at again next round, and a shape whose file
 * failed is kept in memory only.  Frees the round.
 */
static void
lf_apply_round(LogFlushRound *round)
{
	ListCell   *lc;

	sm_add(SM_LOG_FSYNCS, 0, round->fsyncs);
	lf_journal_bytes += round->journal_bytes;
	if (round->journal_torn)
		lf_journal_reset_due = true;	/* a record may be cut short: empty it next */
	if (round->ok)
	{
		if (round->reset_journal && !round->journal_reset_failed)
			lf_journal_emptied();
		else if (round->reset_journal)
		{
			/* its files are fsynced and no manifest needs it, but it holds records still */
			errno = round->error;
			if (lf_may_warn())
				ereport(WARNING,
						(errcode_for_file_access(),
						 errmsg("shape_sync could not empty file \"%s\": %m", JOURNAL_PATH)));
			lf_journal_reset_due = true;
		}
		for (uint32 i = 0; i < lf_nround; i++)
		{
			FileShape  *fs = &lf_shapes[lf_round[i].slot];

			if (!fs->in_use || fs->incarnation != lf_round[i].incarnation)
				continue;		/* gone meanwhile */
			fs->in_round = false;
			if (fs->failed || fs->generation != lf_round[i].generation)
				continue;		/* compacted meanwhile: its new file is next */
			fs->synced = Max(fs->synced, lf_round[i].length);
			fs->shape_file_synced = true;
			fs->listed = true;
		}
		lf_nround = 0;
		if (round->manifest != NULL)
		{
			manifest_listing_written(lf_listing);
			lf_lists_shapes = lf_round_lists > 0;
		}
		lf_durable = Max(lf_durable, round->durable_lsn);
		/* a compacted generation: never read from disk (only logs in memory are compacted) */
		foreach(lc, lf_obsolete_in_round)
		{
			(void) unlink((char *) lfirst(lc));
			lf_journaled_forget(strrchr((char *) lfirst(lc), '/') + 1);
		}
		list_free_deep(lf_obsolete_in_round);
		lf_obsolete_in_round = NIL;
		log_flush_round_free(round);
		return;
	}
	/* the manifest may have been cut short: the next is written whole */
	if (round->manifest != NULL)
		manifest_listing_lost(lf_listing);
	errno = round->error;
	if (round->failed_piece >= 0 && (errno == EMFILE || errno == ENFILE || errno == ENOMEM))
	{
		/* short of descriptors or memory for a moment: the next round tries again */
		if (lf_may_warn())
			ereport(WARNING,
					(errcode_for_file_access(),
					 errmsg("shape_sync could not read file \"%s/%s\": %m", LOG_FILES_DIR,
							round->pieces[round->failed_piece].name)));
	}
	else if (round->failed_piece >= 0)
	{
		/* a data file that could not be read for the journal: its shape, if still that file */
		for (uint32 i = 0; i < lf_nround; i++)
		{
			FileShape  *fs = &lf_shapes[lf_round[i].slot];
			char		path[MAXPGPATH];

			if (lf_round[i].piece != round->failed_piece)
				continue;
			lf_data_path(fs->handle, fs->generation, path);
			if (fs->in_use && fs->incarnation == lf_round[i].incarnation && !fs->failed &&
				fs->generation == lf_round[i].generation)
				lf_fail(lf_round[i].slot, "read", path);
			break;
		}
	}
	else if (round->failed_path >= 0 && (errno == EMFILE || errno == ENFILE || errno == ENOMEM))
	{
		/* the file could not be opened for a moment: no write error was spent, try again */
		if (lf_may_warn())
			ereport(WARNING,
					(errcode_for_file_access(),
					 errmsg("shape_sync could not open file \"%s\": %m",
							round->paths[round->failed_path])));
		if ((uint32) round->failed_path < lf_round_journaled_paths)
			lf_journal_reset_due = true;
	}
	else if (round->failed_path >= 0 && (uint32) round->failed_path < lf_round_journaled_paths)
		lf_journaled_fsync_failed(round->paths[round->failed_path]);
	else if (round->failed_path >= 0)
	{
		/* the shape whose file it was: in memory only from now on */
		for (uint32 i = 0; i < lf_nround; i++)
		{
			uint32		next = i + 1 < lf_nround ? lf_round[i + 1].first_path : round->npaths;
			FileShape  *fs = &lf_shapes[lf_round[i].slot];

			if ((uint32) round->failed_path < lf_round[i].first_path ||
				(uint32) round->failed_path >= next)
				continue;
			if (fs->in_use && fs->incarnation == lf_round[i].incarnation && !fs->failed)
				lf_fail(lf_round[i].slot, round->failed_step, round->paths[round->failed_path]);
			break;
		}
	}
	else if (lf_may_warn())
		ereport(WARNING,
				(errcode_for_file_access(),
				 errmsg("shape_sync could not %s file \"%s\": %m", round->failed_step,
						round->failed_journal ? JOURNAL_PATH : MANIFEST_PATH),
				 errdetail("The replication slot keeps the WAL since the last manifest until one is written.")));
	lf_requeue_round();
	lf_manifest_stale = true;	/* what it would have said is still to say */
	/* what this round would have removed waits for one that succeeds */
	lf_obsolete = list_concat(lf_obsolete_in_round, lf_obsolete);
	lf_obsolete_in_round = NIL;
	log_flush_round_free(round);
}

/*
 * The round machinery's step: applies the round the flusher finished, and
 * starts the next one when `due`, on the flusher thread, or here when
 * `inline_round` (shape_sync.log_fsync = commit, or no thread), after
 * waiting for the one in flight.
 */
static void
lf_round_step(XLogRecPtr decoded, bool due, bool inline_round)
{
	LogFlushRound *round;
	bool		stale;

	if (lf_flusher.started)
	{
		round = log_flusher_collect(&lf_flusher, inline_round);
		if (round != NULL)
			lf_apply_round(round);
		if (log_flusher_busy(&lf_flusher))
			return;				/* one at a time */
		/* one that finished since the collect above: applied before the next is built */
		round = log_flusher_collect(&lf_flusher, false);
		if (round != NULL)
			lf_apply_round(round);
	}
	if (!due)
		return;
	lf_last_round = GetCurrentTimestamp();
	if (lf_nunsynced == 0 && lf_obsolete == NIL && !lf_manifest_stale &&
		(!lf_lists_shapes || Max(decoded, lf_durable) == lf_durable))
	{
		/* nothing to list, nothing new: no round (an idle server writes nothing) */
		if (!lf_lists_shapes)
			lf_durable = Max(lf_durable, decoded);
		return;
	}
	if (shape_sync_log_fsync != LOG_FSYNC_OFF && lf_unsynced_under_off)
	{
		/*
		 * Files written with fsync off become durable now, all of them, and
		 * the manifest is written whole (its directory entry was never
		 * fsynced).
		 */
		if (lf_listing != NULL)
			manifest_listing_lost(lf_listing);
		for (uint32 slot = 0; slot < lf_nslots; slot++)
		{
			if (!lf_shapes[slot].in_use || lf_shapes[slot].failed)
				continue;
			lf_shapes[slot].synced = 0;
			lf_shapes[slot].shape_file_synced = false;
			lf_note_unsynced(slot);
		}
	}
	lf_unsynced_under_off = shape_sync_log_fsync == LOG_FSYNC_OFF;
	stale = lf_manifest_stale;
	lf_manifest_stale = false;	/* the round lists what is here now */
	round = lf_build_round(decoded);
	if (round == NULL)
	{
		lf_manifest_stale = stale;	/* no round: still to say */
		return;
	}
	lf_obsolete_in_round = lf_obsolete;
	lf_obsolete = NIL;
	if (!inline_round && lf_flusher.started && log_flusher_submit(&lf_flusher, round))
		return;
	log_flush_round_run(round);
	lf_apply_round(round);
}

void
log_files_step(XLogRecPtr decoded)
{
	uint64		budget = LOG_FILES_WRITE_PER_STEP;
	uint64		unbounded = UINT64_MAX;
	uint32		kept = 0;
	bool		wrote = lf_ndirty > 0;

	if (lf_shapes == NULL)
		return;
	if (lf_held_files != NIL)
		lf_remove_held_files();
	for (uint32 i = 0; i < lf_ndirty; i++)
	{
		uint32		slot = lf_dirty[i];
		FileShape  *fs = &lf_shapes[slot];
		bool		done;

		if (!fs->in_use || fs->failed)
		{
			fs->dirty = false;
			continue;
		}
		/* listed logs (and those a round in flight lists) whole: a round lists only complete ones */
		unbounded = UINT64_MAX;
		done = lf_write(slot, fs->listed || fs->in_round ? &unbounded : &budget);
		if (done)
			fs->dirty = false;
		else
			lf_dirty[kept++] = slot;	/* a snapshot being written: more next step */
	}
	lf_ndirty = kept;
	/* with commit, after each batch that changed a log, and every second anyway */
	lf_round_step(decoded,
				  (shape_sync_log_fsync == LOG_FSYNC_COMMIT && wrote) ||
				  TimestampDifferenceExceeds(lf_last_round, GetCurrentTimestamp(),
											 LOG_FILES_ROUND_MS),
				  shape_sync_log_fsync == LOG_FSYNC_COMMIT);
}

/* Whether a new shape's file is still being written: the main loop should not sleep. */
bool
log_files_writing(void)
{
	return lf_shapes != NULL && lf_ndirty > 0;
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
	lf_round_step(decoded, true, true);
	log_flusher_stop(&lf_flusher);
}

XLogRecPtr
log_files_confirmable(XLogRecPtr lsn)
{
	if (!lf_lists_shapes)
		return lsn;
	return Min(lsn, lf_durable);
}
