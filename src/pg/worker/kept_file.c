/*-------------------------------------------------------------------------
 *
 * kept_file.c
 *		The transactions a snapshotting shape keeps, on disk once memory's
 *		bound is reached: an unnamed, append-only file.
 *
 * While a shape's snapshot is taken, the transactions decoded meanwhile
 * that it may not have are kept until it is done (shape_stream_log.c).
 * Memory keeps a quarter of shape_sync.log_memory of them, for all such
 * shapes; with durable logs, committed ones past that go to a file of the
 * shape's, and are read back, in order, when the stream takes the log over.
 *
 * The file is made in the store's directory (log_files.h) under a name of
 * its own and unlinked at once: it has no name to clean up after a crash
 * or to be listed as a shape's, and it goes when its descriptor is closed
 * (by kept_file_close, or with the process).  The descriptor is an
 * external one of fd.c's accounting (AcquireExternalFD), as a snapshot
 * spill's is: it lives across transactions.  Nothing here raises an error:
 * a failure (a full disk, no descriptor left) returns false with errno
 * set, and the caller decides.
 *
 * Everything here runs on the worker's main thread.
 *
 * IDENTIFICATION
 *	  src/pg/worker/kept_file.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <unistd.h>

#include "common/file_perm.h"
#include "miscadmin.h"
#include "storage/fd.h"
#include "utils/wait_event.h"

#include "kept_file.h"
#include "log_files.h"

static bool
kf_open(KeptFile *kf)
{
	static uint32 made = 0;
	char		path[MAXPGPATH];

	if (!AcquireExternalFD())
	{
		errno = EMFILE;
		return false;
	}
	snprintf(path, sizeof(path), "%s/kept.%d.%u.tmp", LOG_FILES_DIR, MyProcPid, made++);
	kf->fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | PG_BINARY, pg_file_create_mode);
	if (kf->fd < 0)
	{
		int			saved = errno;

		ReleaseExternalFD();
		errno = saved;
		return false;
	}
	(void) unlink(path);
	kf->size = 0;
	return true;
}

bool
kept_file_append(KeptFile *kf, const void *const *parts, const size_t *lens, int nparts)
{
	uint64		at;

	if (kf->fd < 0 && !kf_open(kf))
		return false;
	at = kf->size;
	for (int i = 0; i < nparts; i++)
	{
		const char *p = parts[i];
		size_t		len = lens[i];

		while (len > 0)
		{
			ssize_t		done;

			pgstat_report_wait_start(WAIT_EVENT_DATA_FILE_WRITE);
			done = pwrite(kf->fd, p, len, (off_t) at);
			pgstat_report_wait_end();
			if (done < 0 && errno == EINTR)
				continue;
			if (done <= 0)
			{
				if (done == 0)
					errno = ENOSPC;
				return false;	/* kf->size did not move: the next entry overwrites this one */
			}
			p += done;
			at += (uint64) done;
			len -= (size_t) done;
		}
	}
	kf->size = at;
	return true;
}

bool
kept_file_read(const KeptFile *kf, uint64 pos, void *buf, size_t len)
{
	char	   *p = buf;

	if (kf->fd < 0 || pos + len > kf->size)
	{
		errno = EINVAL;
		return false;
	}
	while (len > 0)
	{
		ssize_t		done;

		pgstat_report_wait_start(WAIT_EVENT_DATA_FILE_READ);
		done = pread(kf->fd, p, len, (off_t) pos);
		pgstat_report_wait_end();
		if (done < 0 && errno == EINTR)
			continue;
		if (done <= 0)
		{
			if (done == 0)
				errno = EIO;	/* shorter than written: cannot be */
			return false;
		}
		p += done;
		pos += (uint64) done;
		len -= (size_t) done;
	}
	return true;
}

void
kept_file_close(KeptFile *kf)
{
	if (kf->fd < 0)
		return;
	(void) close(kf->fd);
	ReleaseExternalFD();
	kf->fd = -1;
	kf->size = 0;
}
