/*-------------------------------------------------------------------------
 *
 * log_journal.c
 *		One file that makes the bytes many shape logs gained durable with
 *		one fsync.
 *
 * Each shape's log is a data file of its own (pg/worker/log_files.c), and
 * a change of a table that many shapes follow grows many of them at once.
 * Making each durable with its own fsync would cost one fsync per shape per
 * round: a hundred shapes of one table, a hundred a second.  Instead a
 * round copies what each file gained since the last round into this
 * journal, $PGDATA/pg_shape_sync/journal, and fsyncs the journal once; the
 * data files themselves are fsynced at a journal reset, when the journal
 * has grown past a bound or aged (log_rounds.c decides), and the journal is
 * emptied after them.  A start replays the journal into the data files
 * before anything reads them (pg/worker/log_restore.c).
 *
 * Replaying is safe at any time: a data file is append-only (a compaction
 * writes the next generation under another name), so the bytes a record
 * holds for a file at an offset are the bytes that file has there, or lost
 * after an operating system crash.  A record for a file that is gone is
 * skipped, never recreated.  Bytes past what the manifest lists are cut by
 * the restore afterwards, as before.
 *
 * The format: records, one after another, each
 *
 *	 u32 magic, u16 name length, u16 0, u32 data length, u32 0,
 *	 u64 offset, u64 FNV-1a over the 24 bytes before it, the name and the
 *	 data; then the name (the data file's, in the same directory) and the
 *	 data,
 *
 * little-endian as the machine writes it (the store is never moved to
 * another machine: its header names the cluster).  A round's records are
 * whole before the journal's fsync, which comes before the manifest that
 * relies on them, so a record cut short or damaged can only belong to a
 * round that never finished: replay stops there.
 *
 * Plain system calls only: it runs on the flusher thread
 * (log_flusher.c) and in the worker before it serves.
 *
 * IDENTIFICATION
 *	  src/contract/log_journal.c
 *
 *-------------------------------------------------------------------------
 */
#include "log_journal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "file_io.h"
#include "fnv_hash.h"

#ifdef POSTGRES_H
#error "log_journal.c runs on a thread and must not include postgres.h"
#endif

#define JOURNAL_MAGIC	0x4a4c5353u	/* "SSLJ" */

typedef struct JournalHeader
{
	uint32_t	magic;
	uint16_t	name_len;
	uint16_t	zero1;
	uint32_t	data_len;
	uint32_t	zero2;
	uint64_t	offset;
	uint64_t	checksum;
} JournalHeader;

_Static_assert(sizeof(JournalHeader) == LOG_JOURNAL_RECORD_HEADER,
			   "a journal record's header is 32 bytes");

static uint64_t
journal_checksum(const JournalHeader *h, const char *name, const char *data)
{
	uint64_t	sum = fnv_hash_bytes(FNV_HASH_START, h, offsetof(JournalHeader, checksum));

	sum = fnv_hash_bytes(sum, name, h->name_len);
	return fnv_hash_bytes(sum, data, h->data_len);
}

/* the name of a data file ("<handle>.<generation>.log") directly in the directory */
static bool
journal_name_ok(const char *name, size_t len)
{
	if (len < 5 || len > LOG_JOURNAL_NAME_MAX || name[0] == '.' ||
		memcmp(name + len - 4, ".log", 4) != 0)
		return false;
	return memchr(name, '/', len) == NULL && memchr(name, '\0', len) == NULL;
}

int
log_journal_append(int journal_fd, const char *dir, const char *name,
				   uint64_t from, uint64_t to, char *buffer, uint64_t *journal_bytes)
{
	char		path[4096];
	size_t		name_len = strlen(name);
	int			fd;

	if (!journal_name_ok(name, name_len) ||
		snprintf(path, sizeof(path), "%s/%s", dir, name) >= (int) sizeof(path))
	{
		errno = ENAMETOOLONG;
		return -1;
	}
	fd = open(path, O_RDONLY);
	if (fd < 0)
		return errno == ENOENT ? 1 : -1;
	while (from < to)
	{
		JournalHeader h;
		size_t		n = to - from > LOG_JOURNAL_RECORD_DATA_MAX ?
			LOG_JOURNAL_RECORD_DATA_MAX : (size_t) (to - from);

		if (!fd_pread_all(fd, buffer, n, from))
		{
			int			saved = errno;

			close(fd);
			errno = saved;
			return -1;
		}
		memset(&h, 0, sizeof(h));
		h.magic = JOURNAL_MAGIC;
		h.name_len = (uint16_t) name_len;
		h.data_len = (uint32_t) n;
		h.offset = from;
		h.checksum = journal_checksum(&h, name, buffer);
		if (!fd_write_all(journal_fd, &h, sizeof(h)) ||
			!fd_write_all(journal_fd, name, name_len) ||
			!fd_write_all(journal_fd, buffer, n))
		{
			int			saved = errno;

			close(fd);
			errno = saved;
			return -2;
		}
		*journal_bytes += sizeof(h) + name_len + n;
		from += n;
	}
	close(fd);
	return 0;
}

/* read(2) of up to n bytes until done or the end; the count, or -1 */
static ssize_t
journal_read_some(int fd, void *dst, size_t n)
{
	size_t		got = 0;

	while (got < n)
	{
		ssize_t		r = read(fd, (char *) dst + got, n - got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -1;
		if (r == 0)
			break;
		got += (size_t) r;
	}
	return (ssize_t) got;
}

/* the distinct data files a replay wrote, to fsync at its end */
typedef struct ReplayFiles
{
	char	  **names;
	uint32_t	n;
	uint32_t	cap;
} ReplayFiles;

static bool
replay_note_file(ReplayFiles *files, const char *name)
{
	for (uint32_t i = 0; i < files->n; i++)
		if (strcmp(files->names[i], name) == 0)
			return true;
	if (files->n == files->cap)
	{
		uint32_t	cap = files->cap ? files->cap * 2 : 16;
		char	  **names = realloc(files->names, cap * sizeof(char *));

		if (names == NULL)
			return false;
		files->names = names;
		files->cap = cap;
	}
	if ((files->names[files->n] = strdup(name)) == NULL)
		return false;
	files->n++;
	return true;
}

static void
replay_files_free(ReplayFiles *files)
{
	for (uint32_t i = 0; i < files->n; i++)
		free(files->names[i]);
	free(files->names);
}

static void
replay_failed(char *failed, size_t failed_len, const char *dir, const char *name)
{
	if (failed_len == 0)
		return;
	if (name != NULL)
		snprintf(failed, failed_len, "%s/%s", dir, name);
	else
		snprintf(failed, failed_len, "%s", dir);
}

/* Writes one record's data into its file; 1 when the file is gone. */
static int
replay_apply(const char *dir, const char *name, const char *data, size_t len, uint64_t offset)
{
	char		path[4096];
	int			fd;
	int			saved;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_WRONLY);
	if (fd < 0)
		return errno == ENOENT ? 1 : -1;
	while (len > 0)
	{
		ssize_t		w = pwrite(fd, data, len, (off_t) offset);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
		{
			saved = w == 0 ? ENOSPC : errno;
			close(fd);
			errno = saved;
			return -1;
		}
		data += w;
		len -= (size_t) w;
		offset += (uint64_t) w;
	}
	if (close(fd) != 0)
		return -1;
	return 0;
}

int
log_journal_replay(const char *journal_path, const char *dir,
				   LogJournalReplay *result, char *failed, size_t failed_len)
{
	ReplayFiles files = {0};
	char	   *buffer = NULL;
	int			fd;
	int			rc = 0;

	memset(result, 0, sizeof(*result));
	fd = open(journal_path, O_RDWR);
	if (fd < 0)
	{
		if (errno == ENOENT)
			return 0;
		replay_failed(failed, failed_len, journal_path, NULL);
		return -1;
	}
	buffer = malloc(LOG_JOURNAL_NAME_MAX + 1 + LOG_JOURNAL_RECORD_DATA_MAX);
	if (buffer == NULL)
	{
		close(fd);
		replay_failed(failed, failed_len, journal_path, NULL);
		errno = ENOMEM;
		return -1;
	}
	for (;;)
	{
		JournalHeader h;
		ssize_t		got = journal_read_some(fd, &h, sizeof(h));
		char	   *name = buffer;
		char	   *data = buffer + LOG_JOURNAL_NAME_MAX + 1;
		int			applied;

		if (got < 0)
		{
			replay_failed(failed, failed_len, journal_path, NULL);
			rc = -1;
			break;
		}
		if (got == 0)
			break;				/* the end */
		if ((size_t) got < sizeof(h) || h.magic != JOURNAL_MAGIC || h.zero1 != 0 ||
			h.zero2 != 0 || h.data_len > LOG_JOURNAL_RECORD_DATA_MAX ||
			h.name_len == 0 || h.name_len > LOG_JOURNAL_NAME_MAX ||
			h.offset > (uint64_t) INT64_MAX - h.data_len)
		{
			result->torn = true;
			break;
		}
		got = journal_read_some(fd, name, h.name_len);
		if (got == h.name_len)
		{
			ssize_t		data_got = journal_read_some(fd, data, h.data_len);

			got = data_got < 0 ? -1 : data_got == (ssize_t) h.data_len;
		}
		else if (got >= 0)
			got = 0;
		if (got < 0)
		{
			replay_failed(failed, failed_len, journal_path, NULL);
			rc = -1;
			break;
		}
		if (got == 0 || journal_checksum(&h, name, data) != h.checksum ||
			!journal_name_ok(name, h.name_len))
		{
			result->torn = true;
			break;
		}
		name[h.name_len] = '\0';
		applied = replay_apply(dir, name, data, h.data_len, h.offset);
		if (applied < 0)
		{
			replay_failed(failed, failed_len, dir, name);
			rc = -1;
			break;
		}
		if (applied == 1)
		{
			result->skipped++;
			continue;
		}
		result->records++;
		if (!replay_note_file(&files, name))
		{
			errno = ENOMEM;
			replay_failed(failed, failed_len, journal_path, NULL);
			rc = -1;
			break;
		}
	}
	free(buffer);
	/* what it wrote is durable before the journal that held it is emptied */
	for (uint32_t i = 0; rc == 0 && i < files.n; i++)
	{
		char		path[4096];
		int			file;

		snprintf(path, sizeof(path), "%s/%s", dir, files.names[i]);
		file = open(path, O_WRONLY);
		if (file < 0 || fsync(file) != 0)
		{
			int			saved = errno;

			if (file >= 0)
				close(file);
			errno = saved;
			replay_failed(failed, failed_len, dir, files.names[i]);
			rc = -1;
			break;
		}
		close(file);
	}
	result->files = files.n;
	replay_files_free(&files);
	if (rc == 0 && (ftruncate(fd, 0) != 0 || fsync(fd) != 0))
	{
		replay_failed(failed, failed_len, journal_path, NULL);
		rc = -1;
	}
	{
		int			saved = errno;

		close(fd);
		errno = saved;
	}
	return rc;
}
