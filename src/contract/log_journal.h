/*-------------------------------------------------------------------------
 *
 * log_journal.h
 *		One file that makes the bytes many shape logs gained durable with
 *		one fsync.
 *
 * See log_journal.c for the design and the format.
 *
 * IDENTIFICATION
 *	  src/contract/log_journal.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef LOG_JOURNAL_H
#define LOG_JOURNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* the longest data file name a record carries */
#define LOG_JOURNAL_NAME_MAX	255

/* what one record carries at most: a longer piece takes several */
#define LOG_JOURNAL_RECORD_DATA_MAX	((size_t) 1 << 20)

/* each record's header, before its name and bytes */
#define LOG_JOURNAL_RECORD_HEADER	32

/*
 * Appends to the journal open as journal_fd (O_APPEND) the bytes
 * [from, to) of the file `name` in directory `dir`, read back from it
 * through `buffer` (LOG_JOURNAL_RECORD_DATA_MAX bytes).  Returns 0; 1 when
 * the data file is gone (nothing written); -1 when reading the data file
 * failed, -2 when writing the journal failed (a record may be cut short),
 * with errno set.  Adds what it wrote to *journal_bytes.
 */
extern int	log_journal_append(int journal_fd, const char *dir, const char *name,
							   uint64_t from, uint64_t to, char *buffer,
							   uint64_t *journal_bytes);

/*
 * What a replay did: records applied, the data files they went to (those
 * gone were skipped), and whether it stopped at a record cut short or
 * damaged (the rest of the file, from an unfinished round, is ignored).
 */
typedef struct LogJournalReplay
{
	uint32_t	records;
	uint32_t	skipped;		/* their data file is gone */
	uint32_t	files;			/* data files written and fsynced */
	bool		torn;
} LogJournalReplay;

/*
 * Writes every whole record of the journal at journal_path into its data
 * file in `dir` (never creating one), fsyncs each file written, then
 * empties the journal and fsyncs it.  A journal that does not exist is
 * empty.  Returns 0, or -1 with errno set and `failed` naming the file
 * (the journal is then left as it was, to be replayed again).
 */
extern int	log_journal_replay(const char *journal_path, const char *dir,
							   LogJournalReplay *result, char *failed, size_t failed_len);

#endif							/* LOG_JOURNAL_H */
