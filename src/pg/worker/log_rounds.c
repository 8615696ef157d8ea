/*-------------------------------------------------------------------------
 *
 * log_rounds.c
 *		Shape logs on disk made durable in rounds: the journal, the
 *		manifest, and how far the replication slot may be confirmed.
 *
 * log_files.c writes what the shape logs gain to their data files, in the
 * page cache.  Every LOG_FILES_ROUND_MS (shape_sync.log_fsync = batch), a
 * round makes the files written since the last one durable and brings the
 * manifest up to date, with durable_lsn the decoder's position when the
 * round was built: a delta of the extents that changed appended to it and
 * fsynced, or now and then the whole manifest written aside, fsynced,
 * renamed, the directory fsynced (manifest_listing.c), so that a round
 * writes what changed, not every shape's extent.  What each file gained
 * (up to LOG_FILES_JOURNAL_PIECE_MAX) is copied into the journal, fsynced
 * once for them all (log_journal.c): a change of a table that many shapes
 * follow costs one fsync, not one per shape.  A file that gained more, or
 * whose gain the journal has no room for (it keeps within
 * log_files_journal_limit, part of the disk budget), is fsynced itself.
 * Every file with records in the journal is fsynced, once, when the
 * journal is emptied (when full, after LOG_FILES_JOURNAL_RESET_MS, or
 * after a journal write failed and may have cut a record short), and held
 * open until then, so that a writeback error meanwhile is not lost with
 * its inode (lf_journaled_add); a start replays the journal first
 * (log_restore.c).  A round also writes what the value sets of
 * subqueries gained as of its position (shape_stream_sets_disk.c), fsynced
 * before the manifest, which names the file and its length.
 *
 * The main thread builds a round (which files, the manifest's bytes) and
 * the flusher thread does it (log_flusher.c), so that no fsync delays
 * decoding; one round is in flight at a time, and its outcome is applied
 * at the next step, before another is built.  With commit, a round runs
 * on the main thread after every batch that decoded something, before its
 * clients are woken.  Only once a round succeeded does
 * log_files_confirmable let the slot be confirmed up to its position, so
 * the slot never passes what the files hold: after any crash, decoding
 * starts at or before durable_lsn, each restored shape skips the commits
 * before it (shape_stream_resume_after) and gets those after it again,
 * with the same offsets, since offsets are commit positions.  With
 * shape_sync.log_fsync = off the rounds write but never fsync: the files
 * survive a crash of PostgreSQL (the page cache keeps them) but not one of
 * the operating system, so the header keeps the kernel's boot id and a
 * store written so is purged after a reboot.  Files a round makes obsolete
 * (a compacted shape's previous generation) are removed after it, or, when
 * that generation's log had left memory, once no response reads it.
 *
 * A round whose fsync of a file fails leaves that file's shape in memory
 * only (lf_fail); a manifest that cannot be written keeps the previous
 * one, and the slot's confirmation waits.  Nothing here raises an error.
 *
 * Everything here runs on the worker's main thread; the flusher thread
 * gets a round's paths and manifest bytes as copies of its own, and opens
 * each file by its path.  A round's shapes are told apart from later
 * shapes of the same slot by their incarnation, and from a compaction's
 * next file by their generation.
 *
 * IDENTIFICATION
 *	  src/pg/worker/log_rounds.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <unistd.h>

#include "storage/fd.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "guc.h"
#include "log_files_internal.h"
#include "log_flusher.h"
#include "log_journal.h"
#include "manifest_listing.h"
#include "server_metrics.h"
#include "shape_stream.h"

#define LOG_FILES_ROUND_MS			1000
/* a file that gained more in a round is fsynced itself, not journaled */
#define LOG_FILES_JOURNAL_PIECE_MAX	((uint64) 1 << 20)
/* a piece is one journal record: journal_room counts one header for it */
StaticAssertDecl(LOG_FILES_JOURNAL_PIECE_MAX <= LOG_JOURNAL_RECORD_DATA_MAX,
				 "a journaled piece is one record");
/* the journal is emptied (its files fsynced) past log_files_journal_limit or this age */
#define LOG_FILES_JOURNAL_RESET_MS	(5 * 60 * 1000)
#define MANIFEST_TMP_PATH			LOG_FILES_DIR "/manifest.tmp"

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
static char lf_round_sets_path[MAXPGPATH];	/* its value sets file */
static LfRoundShape *lf_round;	/* the round in flight */
static uint32 lf_nround;
static uint32 lf_round_lists;	/* shapes its manifest lists */
static List *lf_obsolete_in_round;	/* the files it makes obsolete (LfHeldFile *) */
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
static TimestampTz lf_last_round;

/* Whether the next round is to empty the journal, its files fsynced first. */
static bool
lf_journal_reset_wanted(void)
{
	if (lf_journal_reset_due)
		return true;
	if (lf_journal_bytes == 0 && lf_journaled == NIL)
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
 * fsynced then, and held open until then.  Its data reaches the disk only
 * when the journal is emptied, up to LOG_FILES_JOURNAL_RESET_MS later; a
 * writeback error meanwhile is kept by its inode and reported by the fsync
 * then (to any descriptor, on Linux since 4.14), but only while the inode
 * stays in memory: an open descriptor keeps it there.  The descriptors
 * count against the process's (AcquireExternalFD: about a third of
 * max_files_per_process); a file journaled when none is left is not held
 * (pin -1), and an error on it is reported only if its inode stayed in
 * memory, as for PostgreSQL's own files between checkpoints.  Fsyncing
 * those files each round instead would bring back one fsync per shape.
 */
static void
lf_journaled_add(const char *path)
{
	MemoryContext old = MemoryContextSwitchTo(lf_context);
	LfJournaled *j = palloc(sizeof(LfJournaled));

	j->name = pstrdup(strrchr(path, '/') + 1);
	j->pin = -1;
	lf_journaled = lappend(lf_journaled, j);
	MemoryContextSwitchTo(old);
	if (AcquireExternalFD())
	{
		j->pin = open(path, O_RDONLY | O_CLOEXEC | PG_BINARY);
		if (j->pin < 0)
			ReleaseExternalFD();
	}
}

static void
lf_journaled_free(LfJournaled *j)
{
	if (j->pin >= 0)
	{
		close(j->pin);
		ReleaseExternalFD();
	}
	pfree(j->name);
	pfree(j);
}

/*
 * The data file `name` is removed (or no longer to be fsynced): its
 * descriptor goes, so that its space is given back now.
 */
void
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

/* ------------------------------------------------------------- rounds */

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

/* Removes a generation of the value sets file (a later start would, too). */
static void
lf_remove_sets_file(uint32 generation)
{
	char		path[MAXPGPATH];

	lf_sets_path(generation, path);
	if (unlink(path) != 0 && errno != ENOENT && lf_may_warn())
		ereport(WARNING,
				(errcode_for_file_access(),
				 errmsg("could not remove file \"%s\": %m", path)));
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
	ShapeStreamSetsRound sets;
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

	/*
	 * The value sets of subqueries as of `decoded` first: which shapes
	 * with subqueries may be listed depends on them (shape_stream_durable).
	 */
	shape_stream_sets_settle(decoded);
	shape_stream_sets_round(&sets);

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
			journal_need <= journal_room)
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
			if (fs->journaled_generation != fs->generation)
				lf_journaled_add(path);
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
		shape_stream_sets_round_cancel(&sets);	/* its records wait too */
		log_flush_round_free(round);
		lf_requeue_round();
		return NULL;
	}

	/* what the manifest is to list now; manifest_listing.c writes what changed */
	lf_header_now(&header, decoded);
	header.sets_generation = sets.generation;
	header.sets_length = sets.length;
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
	if (round != NULL && round->manifest != NULL && sets.bytes != NULL)
	{
		/* written before the manifest that names them */
		lf_sets_path(sets.generation, lf_round_sets_path);
		round->sets_path = lf_round_sets_path;
		round->sets = sets.bytes;
		round->sets_len = sets.len;
		round->sets_at = sets.at;
		round->sets_create = sets.create;
	}
	else
		shape_stream_sets_round_cancel(&sets);	/* no manifest: they wait for one */
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
	uint32		obsolete_sets;

	sm_add(SM_LOG_FSYNCS, 0, round->fsyncs);
	/* the generations of the value sets file no manifest names now go */
	shape_stream_sets_round_done(round->ok,
								 round->failed_sets || round->failed_journal ||
								 round->failed_path >= 0 || round->failed_piece >= 0);
	while ((obsolete_sets = shape_stream_sets_take_obsolete()) != 0)
		lf_remove_sets_file(obsolete_sets);
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
		/*
		 * The compacted generations no manifest names now: removed, or,
		 * those of logs that had left memory, held until no response reads
		 * them (log_files.c).
		 */
		foreach(lc, lf_obsolete_in_round)
		{
			LfHeldFile *obsolete = lfirst(lc);

			if (obsolete->read_from_disk)
			{
				lf_hold_file(obsolete);
				continue;
			}
			(void) unlink(obsolete->path);
			lf_journaled_forget(strrchr(obsolete->path, '/') + 1);
			pfree(obsolete);
		}
		list_free(lf_obsolete_in_round);
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
						round->failed_journal ? JOURNAL_PATH :
						round->failed_sets ? round->sets_path : MANIFEST_PATH),
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
		shape_stream_sets_write_whole();
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


/* ---------------------------------------------------------- start, step */

void
lf_rounds_start(uint32 nslots)
{
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

/*
 * A step of the rounds: `due` (lf_round_due, asked once per step by the
 * writing side, which writes every log that grew when it is) builds one.
 */
void
lf_rounds_step(XLogRecPtr decoded, bool due)
{
	lf_round_step(decoded, due, shape_sync_log_fsync == LOG_FSYNC_COMMIT);
}

/*
 * Whether this step is to build a round: with commit, after each batch
 * that changed a log, and every second anyway.
 */
bool
lf_round_due(bool wrote)
{
	return (shape_sync_log_fsync == LOG_FSYNC_COMMIT && wrote) ||
		TimestampDifferenceExceeds(lf_last_round, GetCurrentTimestamp(), LOG_FILES_ROUND_MS);
}

void
lf_rounds_stop(XLogRecPtr decoded)
{
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
