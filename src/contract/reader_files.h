/*-------------------------------------------------------------------------
 *
 * reader_files.h
 *		The shape log file each reading thread keeps open between its
 *		reader calls, and letting go of them when files are removed.
 *
 * See reader_files.c for the design and the notes on synchronization.
 *
 * IDENTIFICATION
 *	  src/contract/reader_files.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef READER_FILES_H
#define READER_FILES_H

#include <stdbool.h>
#include <stdint.h>

/*
 * Makes the threads of this process keep their last log file open
 * (the worker, before its HTTP threads read; and tests).  Without it, every
 * reader call opens its file and closes it.
 */
extern void reader_files_enable(void);

/*
 * A descriptor of `path` for one reader call: the thread's own when it is
 * of that path, else opened now.  -1 with errno set when it cannot be
 * opened.  Hand it back, with the same path, before the call returns.
 */
extern int	reader_file_open(const char *path);
extern void reader_file_done(int fd, const char *path);

/*
 * After a log file was removed: every thread's kept descriptor is closed,
 * now for those between calls, at the end of its call for one in a call,
 * so that no removed file's space stays held by an idle thread.
 */
extern void reader_files_forget(void);

/*
 * Closes the calling thread's kept descriptor, between its calls: a thread
 * that reads files only now and then (the worker's main thread, which
 * compacts logs that left memory) need not hold one for good.
 */
extern void reader_files_let_go_mine(void);

/* Descriptors kept between calls now (tests). */
extern uint32_t reader_files_kept(void);

#endif							/* READER_FILES_H */
