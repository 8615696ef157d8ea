/*-------------------------------------------------------------------------
 *
 * file_io.h
 *		Whole reads and writes of a file descriptor, for the threads that
 *		call no PostgreSQL (plain system calls, EINTR retried).
 *
 * IDENTIFICATION
 *	  src/contract/file_io.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef FILE_IO_H
#define FILE_IO_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <unistd.h>

/* write(2) of all n bytes; false with errno set (ENOSPC when nothing more is taken) */
static inline bool
fd_write_all(int fd, const void *bytes, size_t n)
{
	const char *p = bytes;

	while (n > 0)
	{
		ssize_t		w = write(fd, p, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
		{
			if (w == 0)
				errno = ENOSPC;
			return false;
		}
		p += w;
		n -= (size_t) w;
	}
	return true;
}

/* pread(2) of all n bytes at `at`; false with errno set (ENODATA when the file ends first) */
static inline bool
fd_pread_all(int fd, void *dst, size_t n, uint64_t at)
{
	char	   *p = dst;

	while (n > 0)
	{
		ssize_t		got = pread(fd, p, n, (off_t) at);

		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
		{
			if (got == 0)
				errno = ENODATA;
			return false;
		}
		p += got;
		at += (uint64_t) got;
		n -= (size_t) got;
	}
	return true;
}

#endif							/* FILE_IO_H */
