/*
 * log_file_fixture.h
 *		A shape log on disk for the tests of code that reads logs whose
 *		closed chunks left memory (test_shape_log.c, test_log_compact.c):
 *		the log's bytes written to a file as log_files.c writes them, and
 *		its blocks below a position taken out of memory as log_trim.c does.
 *		Everything here is static: each test program has its own copy.
 */
#ifndef LOG_FILE_FIXTURE_H
#define LOG_FILE_FIXTURE_H

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "reader_epochs.h"
#include "shape_log.h"

/* Writes the log's published bytes to `path`, as log_files.c does. */
static inline bool
write_log_file(const ShapeLogArena *arena, const ShapeLog *log, const char *path)
{
	SlogPublished pub;
	char	   *buf;
	int			fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	bool		ok;

	slog_read_published(log, &pub);
	buf = malloc(pub.data_end + 1);
	ok = fd >= 0 && buf != NULL && slog_copy_out(arena, log, 0, buf, pub.data_end) &&
		write(fd, buf, pub.data_end) == (ssize_t) pub.data_end;
	if (fd >= 0)
		close(fd);
	free(buf);
	return ok;
}

/*
 * Takes the log's blocks below `upto` out of memory, its file being `path`
 * (written already), and gives them back to the arena at once: the caller
 * has no reader in flight.  How many blocks left.
 */
static inline uint32_t
trim_log_to_file(ShapeLogArena *arena, ShapeLog *log, const char *path, uint64_t upto)
{
	uint32_t	blocks[1024];
	uint32_t	n,
				total = 0;

	if (!slog_set_file(log, path))
		return 0;
	do
	{
		n = slog_trim(log, upto, arena, blocks, 1024);
		if (!reader_epoch_passed(reader_epoch_retire()))
			abort();			/* no reader here */
		slog_arena_give_back(arena, blocks, n);
		total += n;
	} while (n == 1024);
	return total;
}

#endif							/* LOG_FILE_FIXTURE_H */
