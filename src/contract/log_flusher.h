/*-------------------------------------------------------------------------
 *
 * log_flusher.h
 *		The thread that makes shape log files durable, off the decoder's
 *		path.
 *
 * See log_flusher.c for the design and the notes on synchronization.
 *
 * IDENTIFICATION
 *	  src/contract/log_flusher.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef LOG_FLUSHER_H
#define LOG_FLUSHER_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Bytes [from, to) of a data file, to be copied into the journal. */
typedef struct LogJournalPiece
{
	char	   *name;			/* the data file's name in dir_path */
	uint64_t	from;
	uint64_t	to;
} LogJournalPiece;

/*
 * One round: files to fsync, pieces of files copied into the journal and
 * it fsynced, bytes of the value sets file written and fsynced, a manifest
 * to put in place, then, when asked, the journal emptied (the files it
 * held records of are among those fsynced).  Built by the caller with
 * malloc'd arrays and strings; the flusher fills in the outcome;
 * log_flush_round_free releases them.
 */
typedef struct LogFlushRound
{
	/* handed in */
	char	  **paths;			/* files to fsync (a file gone meanwhile is skipped) */
	uint32_t	npaths;
	bool		reset_journal;	/* empty the journal once the manifest is in place */
	LogJournalPiece *pieces;	/* then into the journal, one fsync for them all */
	uint32_t	npieces;
	const char *journal_path;	/* e.g. "pg_shape_sync/journal" */
	char	   *manifest;		/* its bytes, or NULL: no manifest this round */
	size_t		manifest_len;
	const char *manifest_path;	/* e.g. "pg_shape_sync/manifest" */
	const char *manifest_tmp_path;	/* written there first, then renamed */
	bool		manifest_append;	/* a delta: written at manifest_at, fsynced */
	uint64_t	manifest_at;
	const char *sets_path;		/* the value sets file, or NULL: nothing to write */
	char	   *sets;			/* its bytes this round (malloc'd) */
	size_t		sets_len;
	uint64_t	sets_at;		/* written at this offset, fdatasynced, before
								 * the manifest that names them */
	bool		sets_create;	/* a new generation: the file created or
								 * truncated first, the directory fsynced after */
	const char *dir_path;		/* the directory of them all, fsynced after */
	bool		sync;			/* false: write and rename, never fsync */
	uint64_t	durable_lsn;	/* what the manifest makes durable */

	/* the outcome */
	bool		ok;				/* every fsync and the manifest succeeded */
	int			failed_path;	/* index in paths of a file that failed, or -1 */
	int			failed_piece;	/* index in pieces of a file that could not be read, or -1 */
	bool		failed_journal; /* what failed was the journal (else the value
								 * sets file or the manifest) */
	bool		failed_sets;	/* what failed was the value sets file: no manifest */
	bool		journal_torn;	/* writing or fsyncing the journal failed: it may end
								 * in a record cut short, so it is to be emptied */
	bool		journal_reset_failed;	/* ok, but the journal could not be emptied */
	uint64_t	journal_bytes;	/* what the round added to the journal */
	uint32_t	fsyncs;			/* fsync calls it made */
	int			error;			/* its errno, or the manifest's */
	const char *failed_step;	/* "fsync", "write", "rename": what failed */
} LogFlushRound;

typedef struct LogFlusher
{
	pthread_t	thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	LogFlushRound *pending;		/* handed to the thread, not yet taken */
	LogFlushRound *running;		/* the thread works on it */
	LogFlushRound *done;		/* finished, not yet collected */
	bool		stop;
	bool		started;
} LogFlusher;

/* Does one round where the caller is: the thread's work, also run inline. */
extern void log_flush_round_run(LogFlushRound *round);
extern void log_flush_round_free(LogFlushRound *round);

/* 0, or an errno from pthread_create. */
extern int	log_flusher_start(LogFlusher *flusher);

/* Hands a round over; false when one is still pending, running or uncollected. */
extern bool log_flusher_submit(LogFlusher *flusher, LogFlushRound *round);

/* The finished round, or NULL; with `wait`, waits for the one in flight. */
extern LogFlushRound *log_flusher_collect(LogFlusher *flusher, bool wait);

/* Whether a round is pending or running.  Submit, collect and busy on a
 * flusher that is not started refuse, find nothing, and say no. */
extern bool log_flusher_busy(LogFlusher *flusher);

/* Finishes the round in flight, ends the thread; what it finished is freed. */
extern void log_flusher_stop(LogFlusher *flusher);

#endif							/* LOG_FLUSHER_H */
