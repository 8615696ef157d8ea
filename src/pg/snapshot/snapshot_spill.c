/*-------------------------------------------------------------------------
 *
 * snapshot_spill.c
 *		A snapshot larger than the log memory: written to its shape's data
 *		file as it is taken, its closed chunks leave the arena.
 *
 * With durable logs, a snapshot worker writes each chunk of the snapshot
 * to the shape's data file (<handle>.1.log, log_files.c's name) as soon as
 * it closes, and when the arena's free blocks fall under a quarter of it
 * (log_trim_wanted), or under what the next chunk needs, it takes the
 * blocks of the chunks it wrote back from memory (slog_trim): clients read those from the file (shape_log_read.c).
 * So a snapshot needs in memory its open chunk and the indexes of the rest,
 * not its size.  Clients may read a closed chunk while the snapshot goes
 * on, so trimmed blocks return to the arena only once the HTTP threads'
 * reader sections have passed (reader_epochs.c, whose slots are in shared
 * memory for this).
 *
 * At the end the worker hands the main thread the length its file holds
 * (ShapeSlot.snapshot_file_bytes, stored before the shape is READY):
 * log_files_shape_ready opens that file rather than a new one, and writes
 * on from there.  The worker never removes the file: a shape dropped
 * before it was taken over has its file removed by the main thread once
 * the worker let go of the slot (log_files_forget), so that a client still
 * reading a trimmed chunk finds it, and the worker cannot make it again
 * after its removal.  A file that cannot be written (a full disk) ends the
 * spilling, not the snapshot: it goes on in memory, as without durable
 * logs, and fails as those do when memory runs out; the chunks already
 * trimmed stay in the file.  A snapshot whose file alone passes
 * shape_sync.log_disk_budget fails with a 400 (eviction keeps the budget
 * for the others: shape_eviction.c).
 *
 * A trimmed batch is given back right away: the worker waits for the
 * readers' sections to pass (one call each), since blocks held meanwhile
 * would count as free for nobody.  The file descriptor is the worker's own
 * (an external one of fd.c's accounting: it lives across the snapshot's
 * transaction), closed at the end or in snapshot_spill_abort, which the
 * worker's error recovery and its exit callback call.
 *
 * IDENTIFICATION
 *	  src/pg/snapshot/snapshot_spill.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <fcntl.h>
#include <unistd.h>

#include "common/file_perm.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "guc.h"
#include "log_files.h"
#include "log_trim.h"
#include "reader_epochs.h"
#include "storage/fd.h"
#include "snapshot_spill.h"

#define SPILL_BUFFER		((size_t) 256 * 1024)
#define SPILL_MAX_BATCH		4096	/* blocks trimmed at a time */
#define SPILL_GIVE_BACK_WAIT_MS	5000

typedef struct SnapshotSpill
{
	bool		active;
	ShapeTable *table;
	uint32		slot;
	ShapeLog   *log;
	int			fd;				/* -1: not opened yet, or given up */
	bool		gave_up;		/* a write failed */
	uint64		written;		/* the file holds the log's [0, written) */
	char		path[MAXPGPATH];
	/* the last trim's blocks, until no reader can hold them */
	uint64		ticket;
	uint32		npending;
	uint32		pending[SPILL_MAX_BATCH];
} SnapshotSpill;

static SnapshotSpill spill;

void
snapshot_spill_begin(ShapeTable *table, uint32 slot, ShapeLog *log)
{
	memset(&spill, 0, sizeof(spill));
	spill.fd = -1;
	if (!shape_sync_durable_logs)
		return;
	spill.active = true;
	spill.table = table;
	spill.slot = slot;
	spill.log = log;
	log_files_data_path(table->slots[slot].handle, LOG_FILES_FIRST_GENERATION, spill.path);
}

/*
 * Gives the pending batch back once its readers are gone (waiting for
 * them: a reader section is one call, a copy or a walk of one chunk's
 * headers); true if it did.  `exiting`: on the way out (an error, or
 * proc_exit), where no interrupt is taken.  A reader that does not leave
 * within SPILL_GIVE_BACK_WAIT_MS belongs to a main worker that died in a
 * section (its next life resets the sections): the batch stays pending,
 * or, on the way out, is left to the arena's next layout.
 */
static bool
spill_give_back(bool exiting)
{
	TimestampTz since;

	if (spill.npending == 0)
		return false;
	since = GetCurrentTimestamp();
	while (!reader_epoch_passed(spill.ticket))
	{
		int			rc;

		if (TimestampDifferenceExceeds(since, GetCurrentTimestamp(), SPILL_GIVE_BACK_WAIT_MS))
			return false;
		rc = WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT |
					   (exiting ? WL_POSTMASTER_DEATH : WL_EXIT_ON_PM_DEATH), 1,
					   PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		if (rc & WL_POSTMASTER_DEATH)
			return false;		/* shared memory goes with the cluster */
		if (!exiting)
			CHECK_FOR_INTERRUPTS();
	}
	slog_arena_give_back(spill.table->arena, spill.pending, spill.npending);
	spill.npending = 0;
	return true;
}

/* Writes what the log holds past the file's end; false when it cannot. */
static bool
spill_write(void)
{
	char	   *buf;
	const char *what = "write";

	if (spill.gave_up)
		return false;
	if (spill.fd < 0)
	{
		if (!AcquireExternalFD())
		{
			errno = EMFILE;
			what = "create";
			goto fail;
		}
		spill.fd = open(spill.path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | PG_BINARY,
						pg_file_create_mode);
		if (spill.fd < 0)
		{
			ReleaseExternalFD();
			what = "create";
			goto fail;
		}
	}
	buf = palloc(SPILL_BUFFER);
	while (spill.written < spill.log->write_pos)
	{
		size_t		n = (size_t) Min(spill.log->write_pos - spill.written, SPILL_BUFFER);
		ssize_t		done;

		slog_writer_copy_out(spill.table->arena, spill.log, spill.written, buf, n);
		pgstat_report_wait_start(WAIT_EVENT_DATA_FILE_WRITE);
		done = pwrite(spill.fd, buf, n, (off_t) spill.written);
		pgstat_report_wait_end();
		if (done != (ssize_t) n)
		{
			if (done >= 0)
				errno = ENOSPC;
			pfree(buf);
			goto fail;
		}
		spill.written += n;
	}
	pfree(buf);
	return true;

fail:
	ereport(WARNING,
			(errcode_for_file_access(),
			 errmsg("could not %s file \"%s\": %m", what, spill.path),
			 errdetail("The snapshot of shape %s goes on in memory only.",
					   spill.table->slots[spill.slot].handle)));
	spill.gave_up = true;
	return false;
}

/* Takes the written closed chunks out of memory, as one pending batch. */
static void
spill_trim(void)
{
	SlogChunk	last;

	if (spill.npending > 0 || spill.log->chunk_count == 0)
		return;
	slog_chunk_read(spill.table->arena, spill.log, spill.log->chunk_count - 1, &last);
	slog_set_file(spill.log, spill.path);
	spill.npending = slog_trim(spill.log, Min(last.end_pos, spill.written), spill.table->arena,
							   spill.pending, SPILL_MAX_BATCH);
	if (spill.npending > 0)
		spill.ticket = reader_epoch_retire();
}

/* The descriptor goes (the file stays: the main thread owns it from here). */
static void
spill_close(void)
{
	if (spill.fd < 0)
		return;
	close(spill.fd);
	ReleaseExternalFD();
	spill.fd = -1;
}

/*
 * A snapshot alone larger than the data files' share of
 * shape_sync.log_disk_budget fails (400).
 */
static void
spill_check_budget(void)
{
	uint64		budget = log_files_data_budget();

	if (budget > 0 && spill.written > budget)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("shape is too large for the shape log disk budget"),
				 errdetail("The snapshot of relation \"%s\" needs more than the %llu MB that \"%s\" (%d MB) leaves for data files.",
						   spill.table->slots[spill.slot].relation,
						   (unsigned long long) (budget / (1024 * 1024)),
						   "shape_sync.log_disk_budget", shape_sync_log_disk_budget),
				 errhint("Increase \"%s\", or narrow the shape with a where clause or a column list.",
						 "shape_sync.log_disk_budget")));
}

/*
 * Whether memory is short: under a quarter of the arena free, or less than
 * the next chunk needs (`chunk_bytes` of messages, and their records'
 * headers: half as much again covers rows of 50 bytes and more), which
 * would otherwise take the arena under eviction's reserve and evict
 * bystanders that this snapshot could spare.
 */
static bool
spill_memory_short(int64 chunk_bytes)
{
	ShapeLogArena *arena = spill.table->arena;

	return log_trim_wanted() ||
		(int64) slog_arena_free_blocks(arena) * SLOG_BLOCK_SIZE < chunk_bytes + chunk_bytes / 2;
}

void
snapshot_spill_chunk(int64 chunk_bytes)
{
	if (!spill.active || !spill_write())
		return;
	spill_check_budget();
	if (!spill_memory_short(chunk_bytes))
		return;
	spill_trim();
	/* back at once: held, they would count for nobody (eviction would see less room) */
	(void) spill_give_back(false);
}

bool
snapshot_spill_make_room(void)
{
	if (!spill.active || !spill_write())
		return false;
	spill_trim();
	return spill_give_back(false);
}

void
snapshot_spill_finish(void)
{
	if (!spill.active)
		return;
	(void) spill_write();
	(void) spill_give_back(false);	/* a batch a reader held too long before */
	spill_close();
	/* what the main thread finds: the whole log, or its first bytes */
	spill.table->slots[spill.slot].snapshot_file_bytes = spill.written;
}

void
snapshot_spill_handed_over(void)
{
	spill.active = false;		/* the file is the main thread's now */
}

void
snapshot_spill_abort(void)
{
	if (!spill.active)
		return;
	(void) spill_give_back(true);
	spill_close();
	spill.active = false;
}
