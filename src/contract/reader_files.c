/*-------------------------------------------------------------------------
 *
 * reader_files.c
 *		The shape log file each reading thread keeps open between its
 *		reader calls, and letting go of them when files are removed.
 *
 * A response for a chunk that left memory is copied out of its shape's
 * data file one piece at a time, one reader call a piece
 * (shape_log_read.c).  Opening and closing the file in every call cost a
 * tenth of the server's time for a 10 MB chunk (two system calls and a
 * path walk per 64 kB).  So each thread keeps the last file it read open:
 * its slot here holds the descriptor and its path between calls, and a
 * call takes it out of the slot while it reads, so that nothing closes it
 * under the call.
 *
 * A kept descriptor of a removed file would hold the file's space on disk
 * for as long as its thread is idle.  So whoever removes a log file calls
 * reader_files_forget afterwards: it closes every descriptor kept in a
 * slot, and marks the slots, so that a descriptor a call has taken out is
 * closed when that call hands it back instead of kept (also when calls
 * nest: the mark is cleared only by a call that starts with none out).  A descriptor
 * opened after the removal is of a file that exists (or fails), so it may
 * be kept.  That is O(threads) per removal; removals are rare (a shape
 * dropped or evicted, a compacted generation), calls are not, and a call
 * costs one uncontended lock of its own thread's slot.
 *
 * Only a process that enabled it keeps descriptors (the worker, whose main
 * thread removes the files and calls reader_files_forget); in any other,
 * a call opens its file and closes it.  A thread's slot goes back when the
 * thread ends.
 *
 * Notes on synchronization
 * ------------------------
 * - A slot's fd, path, `taken` and `forgotten` are guarded by its `lock`,
 *   which its thread takes at the start and end of a call and in
 *   reader_files_let_go_mine, and reader_files_forget for each slot in turn.
 * - Claiming and releasing slots is guarded by rf_claim_lock; `high` only
 *   grows and is atomic, so that reader_files_forget reads it without
 *   that lock (a slot claimed after it read `high` holds nothing yet).
 * - The descriptor a call took out belongs to that call alone until it is
 *   handed back.
 *
 * IDENTIFICATION
 *	  src/contract/reader_files.c
 *
 *-------------------------------------------------------------------------
 */
#include "reader_files.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#ifdef POSTGRES_H
#error "reader_files.c is shared by threads and must not include postgres.h"
#endif

#define READER_FILE_SLOTS		1024
#define READER_FILE_PATH_MAX	256

typedef struct ReaderFile
{
	pthread_mutex_t lock;
	bool		claimed;		/* by a live thread (rf_claim_lock) */
	int			fd;				/* kept between calls, or -1 */
	uint32_t	taken;			/* descriptors its calls have out now */
	bool		forgotten;		/* ... which are not to be kept */
	char		path[READER_FILE_PATH_MAX];
} ReaderFile;

static ReaderFile rf_slots[READER_FILE_SLOTS];
static _Atomic uint32_t rf_high;	/* slots ever claimed: [0, high) */
static pthread_mutex_t rf_claim_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic bool rf_enabled;
static pthread_once_t rf_once = PTHREAD_ONCE_INIT;
static pthread_key_t rf_key;

static _Thread_local ReaderFile *rf_mine;
static _Thread_local bool rf_no_slot;	/* none was free: open and close */

/* At a thread's end: its descriptor closed, its slot free. */
static void
rf_thread_ends(void *arg)
{
	ReaderFile *slot = arg;

	pthread_mutex_lock(&slot->lock);
	if (slot->fd >= 0)
		close(slot->fd);
	slot->fd = -1;
	slot->taken = 0;
	pthread_mutex_unlock(&slot->lock);
	pthread_mutex_lock(&rf_claim_lock);
	slot->claimed = false;
	pthread_mutex_unlock(&rf_claim_lock);
	/* a later call of this thread (another destructor's) opens and closes */
	rf_mine = NULL;
	rf_no_slot = true;
}

static void
rf_init_once(void)
{
	for (uint32_t i = 0; i < READER_FILE_SLOTS; i++)
	{
		pthread_mutex_init(&rf_slots[i].lock, NULL);
		rf_slots[i].fd = -1;
	}
	(void) pthread_key_create(&rf_key, rf_thread_ends);
}

void
reader_files_enable(void)
{
	pthread_once(&rf_once, rf_init_once);
	atomic_store(&rf_enabled, true);
}

/* The calling thread's slot, claimed on its first call; NULL: none. */
static ReaderFile *
rf_slot(void)
{
	if (rf_mine != NULL || rf_no_slot)
		return rf_mine;
	pthread_mutex_lock(&rf_claim_lock);
	for (uint32_t i = 0; i < READER_FILE_SLOTS; i++)
	{
		if (rf_slots[i].claimed)
			continue;
		rf_slots[i].claimed = true;
		if (i >= atomic_load(&rf_high))
			atomic_store(&rf_high, i + 1);
		rf_mine = &rf_slots[i];
		break;
	}
	pthread_mutex_unlock(&rf_claim_lock);
	if (rf_mine == NULL || pthread_setspecific(rf_key, rf_mine) != 0)
	{
		if (rf_mine != NULL)
		{
			pthread_mutex_lock(&rf_claim_lock);
			rf_mine->claimed = false;
			pthread_mutex_unlock(&rf_claim_lock);
			rf_mine = NULL;
		}
		rf_no_slot = true;
	}
	return rf_mine;
}

int
reader_file_open(const char *path)
{
	ReaderFile *slot;
	int			fd = -1;

	if (!atomic_load_explicit(&rf_enabled, memory_order_relaxed) ||
		strlen(path) >= READER_FILE_PATH_MAX || (slot = rf_slot()) == NULL)
		return open(path, O_RDONLY | O_CLOEXEC);
	pthread_mutex_lock(&slot->lock);
	if (slot->taken++ == 0)
		slot->forgotten = false;	/* what forget closed is closed */
	if (slot->fd >= 0 && strcmp(slot->path, path) == 0)
		fd = slot->fd;
	else if (slot->fd >= 0)
		close(slot->fd);		/* one kept at a time: the last read */
	slot->fd = -1;
	pthread_mutex_unlock(&slot->lock);
	if (fd < 0)
		fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
	{
		int			saved = errno;

		pthread_mutex_lock(&slot->lock);
		slot->taken--;
		pthread_mutex_unlock(&slot->lock);
		errno = saved;
	}
	return fd;
}

void
reader_file_done(int fd, const char *path)
{
	ReaderFile *slot = rf_mine;
	int			saved = errno;

	if (fd < 0)
		return;
	if (slot == NULL || !atomic_load_explicit(&rf_enabled, memory_order_relaxed) ||
		strlen(path) >= READER_FILE_PATH_MAX)
	{
		close(fd);
		errno = saved;
		return;
	}
	pthread_mutex_lock(&slot->lock);
	slot->taken--;
	if (slot->forgotten || slot->fd >= 0)
		close(fd);				/* a file was removed meanwhile, or a nested call kept one */
	else
	{
		slot->fd = fd;
		strcpy(slot->path, path);
	}
	pthread_mutex_unlock(&slot->lock);
	errno = saved;
}

void
reader_files_forget(void)
{
	uint32_t	high = atomic_load(&rf_high);

	if (!atomic_load(&rf_enabled))
		return;
	for (uint32_t i = 0; i < high; i++)
	{
		ReaderFile *slot = &rf_slots[i];

		pthread_mutex_lock(&slot->lock);
		if (slot->fd >= 0)
			close(slot->fd);
		slot->fd = -1;
		slot->forgotten = true;
		pthread_mutex_unlock(&slot->lock);
	}
}

void
reader_files_let_go_mine(void)
{
	ReaderFile *slot = rf_mine;

	if (slot == NULL)
		return;
	pthread_mutex_lock(&slot->lock);
	if (slot->fd >= 0)
		close(slot->fd);
	slot->fd = -1;
	pthread_mutex_unlock(&slot->lock);
}

uint32_t
reader_files_kept(void)
{
	uint32_t	high = atomic_load(&rf_high);
	uint32_t	kept = 0;

	for (uint32_t i = 0; i < high; i++)
	{
		pthread_mutex_lock(&rf_slots[i].lock);
		kept += rf_slots[i].fd >= 0;
		pthread_mutex_unlock(&rf_slots[i].lock);
	}
	return kept;
}
