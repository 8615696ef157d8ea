/*-------------------------------------------------------------------------
 *
 * log_prefault.c
 *		Making the shape log arena resident ahead of use.
 *
 * The kernel allocates and zeroes a page of shared memory the first time a
 * process touches it; a snapshot that grows its log into fresh pages pays
 * that on its hot path (under a hypervisor, half the time of the first
 * client of a big table).  After a start, the main thread makes the whole
 * arena resident in the background (slog_arena_prefault: MADV_POPULATE_WRITE,
 * which changes no byte, so it is safe while writers fill blocks), one 1 MB
 * slice per idle turn of its loop, while shape_sync.prefault_log_memory is
 * on.  It pauses while requests or WAL keep the loop busy.  It does not
 * start when the arena is more than half of what the machine, or the
 * server's cgroup (v2), has available: memory made resident that the
 * machine cannot hold would have the kernel kill a process, likely the
 * worker, at each of its starts.
 *
 * Only the main thread calls this file; its state is that thread's.
 *
 * IDENTIFICATION
 *	  src/pg/worker/log_prefault.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "storage/fd.h"
#include "utils/builtins.h"

#include "guc.h"
#include "log_prefault.h"
#include "shared_state.h"

#define PREFAULT_SLICE_BLOCKS	(1024 * 1024 / SLOG_BLOCK_SIZE)

static uint32 prefault_next = 0; /* the first block not yet resident */

/* A "Name:   N kB" line of a /proc file, in bytes; -1 when missing. */
static int64
prefault_proc_bytes(const char *path, const char *name)
{
	FILE	   *f = AllocateFile(path, "r");
	char		line[256];
	int64		result = -1;
	size_t		len = strlen(name);

	if (f == NULL)
		return -1;
	while (fgets(line, sizeof(line), f) != NULL)
		if (strncmp(line, name, len) == 0 && line[len] == ':')
		{
			result = strtoi64(line + len + 1, NULL, 10) * 1024;
			break;
		}
	FreeFile(f);
	return result;
}

/* A cgroup v2 file of this process's cgroup holding a number; -1: none, or "max". */
static int64
prefault_cgroup_bytes(const char *file)
{
	FILE	   *f = AllocateFile("/proc/self/cgroup", "r");
	char		line[MAXPGPATH];
	char		path[MAXPGPATH * 2];
	int64		result = -1;

	if (f == NULL)
		return -1;
	path[0] = '\0';
	while (fgets(line, sizeof(line), f) != NULL)
		if (strncmp(line, "0::", 3) == 0)
		{
			line[strcspn(line, "\n")] = '\0';
			snprintf(path, sizeof(path), "/sys/fs/cgroup%s/%s", line + 3, file);
		}
	FreeFile(f);
	if (path[0] != '\0' && (f = AllocateFile(path, "r")) != NULL)
	{
		if (fgets(line, sizeof(line), f) != NULL && strncmp(line, "max", 3) != 0)
			result = strtoi64(line, NULL, 10);
		FreeFile(f);
	}
	return result;
}

/*
 * Whether the machine has room to make `bytes` resident now: at most half
 * of what the kernel says is available, and of what this process's cgroup
 * may still take.  Memory made resident that the machine cannot hold would
 * have the kernel kill a process, likely this one, at each start.
 */
static bool
prefault_room_for(int64 bytes, int64 *room)
{
	int64		available = prefault_proc_bytes("/proc/meminfo", "MemAvailable");
	int64		limit = prefault_cgroup_bytes("memory.max");
	int64		used = prefault_cgroup_bytes("memory.current");

	*room = available;
	if (limit >= 0 && used >= 0 && (*room < 0 || limit - used < *room))
		*room = limit - used;
	return *room < 0 || bytes <= *room / 2;
}

/*
 * Makes the next slice of the log memory resident, when the loop is idle
 * (nothing woke it, nothing was resolved or decoded) and one slice (1 MB,
 * about a millisecond) per turn, so that neither decoding nor a burst of
 * new shapes waits behind it.  Returns whether it made a slice resident
 * and more is left: then the loop turns again at once; otherwise it sleeps
 * as usual (a busy loop that only waits for idleness would take a CPU from
 * the burst it waits for).
 */
bool
log_prefault_step(bool idle)
{
	ShapeLogArena *arena = shape_sync_shared->table->arena;
	uint32		done;

	if (!shape_sync_prefault_log_memory || prefault_next >= arena->nblocks)
		return false;
	if (!idle)
		return false;
	if (prefault_next == 0)
	{
		int64		bytes = (int64) arena->nblocks * SLOG_BLOCK_SIZE;
		int64		room;

		if (!prefault_room_for(bytes, &room))
		{
			ereport(LOG,
					(errmsg("shape_sync does not make its log memory resident ahead of use"),
					 errdetail("Its %lld MB are more than half of the %lld MB the machine has available now.",
							   (long long) (bytes >> 20), (long long) (room >> 20)),
					 errhint("Log memory is allocated as shapes first use it; lower \"%s\" or turn \"%s\" off to silence this.",
							 "shape_sync.log_memory", "shape_sync.prefault_log_memory")));
			prefault_next = arena->nblocks;
			return false;
		}
	}
	done = slog_arena_prefault(arena, prefault_next, PREFAULT_SLICE_BLOCKS);
	if (done == 0)
	{
		ereport(LOG,
				(errmsg("shape_sync could not make its log memory resident ahead of use: %m"),
				 errdetail("Log memory is allocated as shapes first use it."),
				 errhint("Lower \"%s\", or turn \"%s\" off.",
						 "shape_sync.log_memory", "shape_sync.prefault_log_memory")));
		prefault_next = arena->nblocks;
		return false;
	}
	prefault_next += done;
	if (prefault_next >= arena->nblocks)
		elog(DEBUG1, "shape_sync log memory is resident (%u blocks)", arena->nblocks);
	return prefault_next < arena->nblocks;
}
