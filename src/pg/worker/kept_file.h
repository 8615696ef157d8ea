/*-------------------------------------------------------------------------
 *
 * kept_file.h
 *		The transactions a snapshotting shape keeps, on disk once memory's
 *		bound is reached: an unnamed, append-only file.
 *
 * IDENTIFICATION
 *	  src/pg/worker/kept_file.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SHAPE_SYNC_KEPT_FILE_H
#define SHAPE_SYNC_KEPT_FILE_H

#include "postgres.h"

typedef struct KeptFile
{
	int			fd;				/* -1: none yet */
	uint64		size;			/* bytes written */
} KeptFile;

/*
 * Appends the `nparts` parts as one entry, making the file on first use:
 * all of them, or, false with errno set, none (the file then holds what
 * it held before).
 */
extern bool kept_file_append(KeptFile *kf, const void *const *parts, const size_t *lens,
							 int nparts);

/* Reads `len` bytes at `pos`; false, with errno set, when it cannot. */
extern bool kept_file_read(const KeptFile *kf, uint64 pos, void *buf, size_t len);

/* Closes the file, which goes with it; no-op without one. */
extern void kept_file_close(KeptFile *kf);

#endif							/* SHAPE_SYNC_KEPT_FILE_H */
