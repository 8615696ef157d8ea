/*-------------------------------------------------------------------------
 *
 * log_flusher.c
 *		The thread that makes shape log files durable, off the decoder's
 *		path.
 *
 * The worker's main thread writes shape logs to files as it decodes
 * (pg/worker/log_files.c), into the page cache.  Making them durable takes
 * what each file gained since the last round copied into the journal and
 * one fsync of it (log_journal.c; a file that gained much, or every file
 * journaled since the last reset when the journal is to be emptied, is
 * fsynced itself instead), then the round's bytes of the value sets file
 * (subquery shapes, pg/worker/shape_stream_sets_disk.c) written and
 * fsynced, since the manifest names them, then the manifest: a delta
 * appended to it and fsynced, or a whole one written aside, fsynced,
 * renamed, the directory fsynced (manifest_listing.c says which): milliseconds to
 * tens of milliseconds on real disks, which the main thread must not
 * spend, since every live change waits behind it.  So a round is handed to
 * this thread: the files' paths (it opens each for its fsync, one at a
 * time, so that a round of thousands of files needs one descriptor, and
 * none that PostgreSQL's file descriptor cache would have to know about),
 * the manifest's bytes, the position it makes durable.  A file removed
 * meanwhile (its shape is gone) is skipped: a manifest that still names it
 * makes the next start drop that shape, which is gone anyway.  The thread does
 * the round and leaves it for the main thread to collect, which only then
 * lets the replication slot pass that position.  A failed fsync of a
 * file, or a data file that cannot be read for the journal, installs no
 * manifest: the previous one holds, and the main thread says which file
 * failed; so does a value sets file that could not be written or fsynced
 * (failed_sets).  A journal that could not be written or fsynced may end in a
 * record cut short, after which a replay would stop: the round says so,
 * and the main thread's next round empties it, fsyncing its files first.  (A failed fsync of the directory, after the
 * rename, leaves the new manifest in place but reports failure: the slot
 * then waits, as after a crash between the two.)  One round at a time: the next is built once the last is
 * collected, so rounds never overlap and a slow disk makes them rarer, not
 * more numerous.
 *
 * log_flush_round_run is the round itself; shape_sync.log_fsync = commit
 * runs it inline on the main thread, where the clients of a change wait
 * for it anyway.
 *
 * The thread is created with every signal blocked (the worker's signals are
 * the main thread's), and calls nothing of PostgreSQL: plain system calls.
 *
 * Notes on synchronization
 * ------------------------
 * - `pending`, `running`, `done` and `stop` are guarded by `lock`; `cond`
 *   is signalled when a round is handed in, when one is done, and at stop.
 * - A round belongs to the submitter until log_flusher_submit, to the
 *   thread from then until it is stored in `done`, and to the collector
 *   after log_flusher_collect; the mutex orders each hand-over, so the
 *   round's fields need no atomics.
 *
 * IDENTIFICATION
 *	  src/contract/log_flusher.c
 *
 *-------------------------------------------------------------------------
 */
#include "log_flusher.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "file_io.h"
#include "log_journal.h"

#ifdef POSTGRES_H
#error "log_flusher.c runs on a thread and must not include postgres.h"
#endif

/* fsync (or fdatasync) of a file by its path; `missing_ok`: true when it is gone */
static bool
fsync_path(const char *path, bool data_only, bool missing_ok)
{
	int			fd = open(path, O_RDONLY);
	int			rc;
	int			saved;

	if (fd < 0)
		return missing_ok && errno == ENOENT;
	rc = data_only ? fdatasync(fd) : fsync(fd);
	saved = errno;
	close(fd);
	errno = saved;
	return rc == 0;
}

static void
round_fail(LogFlushRound *round, const char *step, int path_index)
{
	round->ok = false;
	round->error = errno;
	round->failed_step = step;
	round->failed_path = path_index;
}

/* The journal emptied (its files are fsynced by now); false on failure. */
static bool
round_reset_journal(LogFlushRound *round)
{
	int			fd = open(round->journal_path, O_WRONLY | O_CREAT, 0600);
	bool		ok;

	if (fd < 0)
		return false;
	ok = ftruncate(fd, 0) == 0;
	if (ok && round->sync)
	{
		round->fsyncs++;
		ok = fsync(fd) == 0;
	}
	if (close(fd) != 0)
		ok = false;
	return ok;
}

/* The pieces into the journal, and one fsync for them all. */
static void
round_write_journal(LogFlushRound *round)
{
	char	   *buffer = malloc(LOG_JOURNAL_RECORD_DATA_MAX);
	int			fd;

	if (buffer == NULL)
	{
		errno = ENOMEM;
		round_fail(round, "write", -1);
		round->failed_journal = true;
		return;
	}
	fd = open(round->journal_path, O_WRONLY | O_CREAT | O_APPEND, 0600);
	if (fd < 0)
	{
		free(buffer);
		round_fail(round, "write", -1);
		round->failed_journal = true;
		return;
	}
	for (uint32_t i = 0; i < round->npieces; i++)
	{
		const LogJournalPiece *p = &round->pieces[i];
		int			rc = log_journal_append(fd, round->dir_path, p->name, p->from, p->to,
											buffer, &round->journal_bytes);

		if (rc == -1)
		{
			round_fail(round, "read", -1);
			round->failed_piece = (int) i;
			break;
		}
		if (rc == -2)
		{
			round_fail(round, "write", -1);
			round->failed_journal = true;
			round->journal_torn = true;
			break;
		}
	}
	if (round->ok && round->sync)
	{
		round->fsyncs++;
		if (fsync(fd) != 0)
		{
			round_fail(round, "fsync", -1);
			round->failed_journal = true;
			round->journal_torn = true;
		}
	}
	if (close(fd) != 0 && round->ok)
	{
		round_fail(round, "write", -1);
		round->failed_journal = true;
		round->journal_torn = true;
	}
	free(buffer);
}

/* A delta written at the manifest's end, the file fsynced (its length with it). */
static void
round_append_manifest(LogFlushRound *round)
{
	int			fd = open(round->manifest_path, O_WRONLY);

	if (fd < 0)
	{
		round_fail(round, "write", -1);
		return;
	}
	if (lseek(fd, (off_t) round->manifest_at, SEEK_SET) != (off_t) round->manifest_at ||
		!fd_write_all(fd, round->manifest, round->manifest_len))
		round_fail(round, "write", -1);
	else if (round->sync && (round->fsyncs++, fdatasync(fd) != 0))
		round_fail(round, "fsync", -1);
	if (close(fd) != 0 && round->ok)
		round_fail(round, "write", -1);
}

/*
 * The value sets file's bytes of the round, at sets_at, fdatasynced; a new
 * generation creates or truncates the file first and fsyncs the directory
 * after.  Before the manifest, which names them.
 */
static void
round_write_sets(LogFlushRound *round)
{
	/* an append to a file that is gone fails: bytes past its start are no file */
	int			fd = open(round->sets_path,
						  O_WRONLY | (round->sets_create ? O_CREAT | O_TRUNC : 0), 0600);

	if (fd < 0)
	{
		round_fail(round, "write", -1);
		round->failed_sets = true;
		return;
	}
	if (lseek(fd, (off_t) round->sets_at, SEEK_SET) != (off_t) round->sets_at ||
		!fd_write_all(fd, round->sets, round->sets_len))
		round_fail(round, "write", -1);
	else if (round->sync && (round->fsyncs++, fdatasync(fd) != 0))
		round_fail(round, "fsync", -1);
	if (close(fd) != 0 && round->ok)
		round_fail(round, "write", -1);
	if (round->ok && round->sets_create && round->sync &&
		(round->fsyncs++, !fsync_path(round->dir_path, false, false)))
		round_fail(round, "fsync", -1);
	if (!round->ok)
		round->failed_sets = true;
}

/*
 * A whole manifest written aside, fsynced, renamed over the old one, the
 * directory fsynced; a delta appended.
 */
static void
round_install_manifest(LogFlushRound *round)
{
	int			fd;

	if (round->manifest_append)
	{
		round_append_manifest(round);
		return;
	}
	fd = open(round->manifest_tmp_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);

	if (fd < 0)
	{
		round_fail(round, "write", -1);
		return;
	}
	if (!fd_write_all(fd, round->manifest, round->manifest_len))
		round_fail(round, "write", -1);
	else if (round->sync && (round->fsyncs++, fsync(fd) != 0))
		round_fail(round, "fsync", -1);
	if (close(fd) != 0 && round->ok)
		round_fail(round, "write", -1);
	if (!round->ok)
		return;
	if (rename(round->manifest_tmp_path, round->manifest_path) != 0)
		round_fail(round, "rename", -1);
	else if (round->sync && (round->fsyncs++, !fsync_path(round->dir_path, false, false)))
		round_fail(round, "fsync", -1);
}

void
log_flush_round_run(LogFlushRound *round)
{
	round->ok = true;
	round->failed_path = -1;
	round->failed_piece = -1;
	round->failed_journal = false;
	round->failed_sets = false;
	round->journal_torn = false;
	round->journal_reset_failed = false;
	round->journal_bytes = 0;
	round->fsyncs = 0;
	round->error = 0;
	round->failed_step = NULL;
	for (uint32_t i = 0; round->sync && round->ok && i < round->npaths; i++)
	{
		round->fsyncs++;
		if (!fsync_path(round->paths[i], true, true))
			round_fail(round, "fsync", (int) i);
	}
	if (round->ok && round->npieces > 0)
		round_write_journal(round);
	if (round->ok && round->sets_path != NULL)
		round_write_sets(round);
	if (round->ok && round->manifest != NULL)
		round_install_manifest(round);

	/*
	 * Emptied last: until the manifest of this round is in place, the one
	 * before may list lengths only the journal holds (a file whose fsync
	 * failed is no longer listed in this one).  Failing here undoes
	 * nothing: the journal's records are whole or gone, and the next round
	 * empties it again.
	 */
	if (round->ok && round->reset_journal && !round_reset_journal(round))
	{
		round->journal_reset_failed = true;
		round->error = errno;
	}
}

void
log_flush_round_free(LogFlushRound *round)
{
	if (round == NULL)
		return;
	for (uint32_t i = 0; i < round->npaths; i++)
		free(round->paths[i]);
	free(round->paths);
	for (uint32_t i = 0; i < round->npieces; i++)
		free(round->pieces[i].name);
	free(round->pieces);
	free(round->sets);
	free(round->manifest);
	free(round);
}

static void *
flusher_main(void *arg)
{
	LogFlusher *f = arg;

	pthread_mutex_lock(&f->lock);
	for (;;)
	{
		LogFlushRound *round;

		while (f->pending == NULL && !f->stop)
			pthread_cond_wait(&f->cond, &f->lock);
		if (f->pending == NULL)
			break;				/* stopping, nothing left */
		round = f->pending;
		f->pending = NULL;
		f->running = round;
		pthread_mutex_unlock(&f->lock);
		log_flush_round_run(round);
		pthread_mutex_lock(&f->lock);
		f->running = NULL;
		f->done = round;
		pthread_cond_broadcast(&f->cond);
	}
	pthread_mutex_unlock(&f->lock);
	return NULL;
}

int
log_flusher_start(LogFlusher *f)
{
	sigset_t	all;
	sigset_t	old;
	int			rc;

	f->pending = f->running = f->done = NULL;
	f->stop = false;
	f->started = false;
	pthread_mutex_init(&f->lock, NULL);
	pthread_cond_init(&f->cond, NULL);
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	rc = pthread_create(&f->thread, NULL, flusher_main, f);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc == 0)
		f->started = true;
	else
	{
		pthread_mutex_destroy(&f->lock);
		pthread_cond_destroy(&f->cond);
	}
	return rc;
}

bool
log_flusher_submit(LogFlusher *f, LogFlushRound *round)
{
	bool		taken = false;

	if (!f->started)
		return false;
	pthread_mutex_lock(&f->lock);
	if (f->pending == NULL && f->running == NULL && f->done == NULL && !f->stop)
	{
		f->pending = round;
		taken = true;
		pthread_cond_broadcast(&f->cond);
	}
	pthread_mutex_unlock(&f->lock);
	return taken;
}

LogFlushRound *
log_flusher_collect(LogFlusher *f, bool wait)
{
	LogFlushRound *round;

	if (!f->started)
		return NULL;
	pthread_mutex_lock(&f->lock);
	while (wait && f->done == NULL && (f->pending != NULL || f->running != NULL))
		pthread_cond_wait(&f->cond, &f->lock);
	round = f->done;
	f->done = NULL;
	pthread_mutex_unlock(&f->lock);
	return round;
}

bool
log_flusher_busy(LogFlusher *f)
{
	bool		busy;

	if (!f->started)
		return false;
	pthread_mutex_lock(&f->lock);
	busy = f->pending != NULL || f->running != NULL;
	pthread_mutex_unlock(&f->lock);
	return busy;
}

void
log_flusher_stop(LogFlusher *f)
{
	if (!f->started)
		return;
	pthread_mutex_lock(&f->lock);
	f->stop = true;
	pthread_cond_broadcast(&f->cond);
	pthread_mutex_unlock(&f->lock);
	pthread_join(f->thread, NULL);
	log_flush_round_free(f->done);
	f->done = NULL;
	f->started = false;
	pthread_mutex_destroy(&f->lock);
	pthread_cond_destroy(&f->cond);
}
