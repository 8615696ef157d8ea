/*
 * test_reader_files.c
 *		The log file each reading thread keeps open between its reader calls
 *		(src/contract/reader_files.c): kept and reused, one per thread, let
 *		go of when a file is removed, also by a thread that sits idle, and
 *		closed when its thread ends; and the shape log's readers through it.
 */
#include "unit.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "reader_epochs.h"
#include "reader_files.h"
#include "shape_log.h"

static char dir[] = "/tmp/test_reader_files.XXXXXX";

static void
make_file(const char *name, const char *text, char *path, size_t len)
{
	FILE	   *f;

	snprintf(path, len, "%s/%s", dir, name);
	f = fopen(path, "w");
	if (f == NULL)
		return;
	fputs(text, f);
	fclose(f);
}

/* Descriptors of this process open on `path`, or on it removed ("... (deleted)"). */
static int
open_on(const char *path)
{
	DIR		   *d = opendir("/proc/self/fd");
	struct dirent *de;
	int			n = 0;

	if (d == NULL)
		return -1;
	while ((de = readdir(d)) != NULL)
	{
		char		link[300];
		char		target[512];
		ssize_t		len;

		snprintf(link, sizeof(link), "/proc/self/fd/%s", de->d_name);
		len = readlink(link, target, sizeof(target) - 1);
		if (len <= 0)
			continue;
		target[len] = '\0';
		if (strncmp(target, path, strlen(path)) == 0)
			n++;
	}
	closedir(d);
	return n;
}

/* One reader call's worth: open, read the first bytes, hand back. */
static bool
read_call(const char *path, char *out, size_t len)
{
	int			fd = reader_file_open(path);
	ssize_t		got;

	if (fd < 0)
		return false;
	got = pread(fd, out, len - 1, 0);
	reader_file_done(fd, path);
	if (got < 0)
		return false;
	out[got] = '\0';
	return true;
}

TEST(setup)
{
	REQUIRE(mkdtemp(dir) != NULL);
	reader_files_enable();
}

TEST(a_thread_keeps_its_last_file)
{
	char		a[256];
	char		b[256];
	char		text[64];
	int			fd1;
	int			fd2;
	struct stat st_a;
	struct stat st;

	make_file("a.log", "aaaa", a, sizeof(a));
	make_file("b.log", "bbbb", b, sizeof(b));
	REQUIRE(stat(a, &st_a) == 0);
	fd1 = reader_file_open(a);
	REQUIRE(fd1 >= 0);
	reader_file_done(fd1, a);
	CHECK_EQ(reader_files_kept(), 1);
	CHECK_EQ(open_on(a), 1);
	/* the next call on the same file gets the same descriptor */
	fd2 = reader_file_open(a);
	CHECK_EQ(fd2, fd1);
	CHECK(fstat(fd2, &st) == 0 && st.st_ino == st_a.st_ino);
	reader_file_done(fd2, a);
	/* another file: the first is closed, one kept at a time */
	CHECK(read_call(b, text, sizeof(text)) && strcmp(text, "bbbb") == 0);
	CHECK_EQ(open_on(a), 0);
	CHECK_EQ(open_on(b), 1);
	CHECK_EQ(reader_files_kept(), 1);
	reader_files_forget();
	CHECK_EQ(reader_files_kept(), 0);
	CHECK_EQ(open_on(b), 0);
	unlink(a);
	unlink(b);
}

/* A thread that reads once, then waits without reading until told to end. */
typedef struct IdleReader
{
	const char *path;
	_Atomic int stage;			/* 1: it read; 2: it may end */
	bool		ok;
} IdleReader;

static void *
idle_reader(void *arg)
{
	IdleReader *r = arg;
	char		text[64];

	r->ok = read_call(r->path, text, sizeof(text));
	atomic_store(&r->stage, 1);
	while (atomic_load(&r->stage) != 2)
		usleep(1000);
	return NULL;
}

/* A thread lets go of the file it keeps, and keeps the next it reads. */
TEST(a_thread_lets_go_of_its_own_file)
{
	char		a[256];
	char		text[64];

	make_file("own.log", "oooo", a, sizeof(a));
	CHECK(read_call(a, text, sizeof(text)) && strcmp(text, "oooo") == 0);
	CHECK_EQ(open_on(a), 1);
	reader_files_let_go_mine();
	CHECK_EQ(open_on(a), 0);
	CHECK_EQ(reader_files_kept(), 0);
	/* read again, it is kept again */
	CHECK(read_call(a, text, sizeof(text)) && strcmp(text, "oooo") == 0);
	CHECK_EQ(reader_files_kept(), 1);
	reader_files_forget();
	unlink(a);
}

TEST(a_removed_file_is_let_go_of_by_idle_threads)
{
	char		a[256];
	IdleReader	r = {.path = a};
	pthread_t	t;

	make_file("idle.log", "idle", a, sizeof(a));
	REQUIRE(pthread_create(&t, NULL, idle_reader, &r) == 0);
	while (atomic_load(&r.stage) != 1)
		usleep(1000);
	CHECK(r.ok);
	CHECK_EQ(open_on(a), 1);	/* kept by the idle thread */
	unlink(a);
	CHECK_EQ(open_on(a), 1);	/* "... (deleted)": its space is still held */
	reader_files_forget();
	CHECK_EQ(open_on(a), 0);	/* given back, the thread still idle */
	atomic_store(&r.stage, 2);
	pthread_join(t, NULL);
}

TEST(a_descriptor_in_use_is_closed_when_handed_back_after_a_removal)
{
	char		a[256];
	char		text[64];
	int			fd;

	make_file("busy.log", "old", a, sizeof(a));
	fd = reader_file_open(a);
	REQUIRE(fd >= 0);
	unlink(a);
	reader_files_forget();
	/* the call goes on reading what it opened */
	CHECK(pread(fd, text, 3, 0) == 3 && memcmp(text, "old", 3) == 0);
	reader_file_done(fd, a);
	CHECK_EQ(open_on(a), 0);
	CHECK_EQ(reader_files_kept(), 0);
	/* a new file of that name is read, not the removed one */
	make_file("busy.log", "new", a, sizeof(a));
	CHECK(read_call(a, text, sizeof(text)) && strcmp(text, "new") == 0);
	reader_files_forget();
	unlink(a);
}

/* A call within a call, after a removal: neither keeps what the removal let go of. */
TEST(nested_calls_after_a_removal_keep_nothing_removed)
{
	char		a[256];
	char		b[256];
	char		text[64];
	int			outer;

	make_file("outer.log", "outer", a, sizeof(a));
	make_file("inner.log", "inner", b, sizeof(b));
	outer = reader_file_open(a);
	REQUIRE(outer >= 0);
	unlink(a);
	reader_files_forget();
	/* an inner call on a file that is gone too, and one that is there */
	CHECK(!read_call(a, text, sizeof(text)));
	reader_file_done(outer, a);
	CHECK_EQ(open_on(a), 0);
	outer = reader_file_open(b);
	REQUIRE(outer >= 0);
	reader_files_forget();
	CHECK(read_call(b, text, sizeof(text)) && strcmp(text, "inner") == 0);
	reader_file_done(outer, b);
	CHECK_EQ(reader_files_kept(), 0);
	/* the next call, with none out, keeps again */
	CHECK(read_call(b, text, sizeof(text)));
	CHECK_EQ(reader_files_kept(), 1);
	reader_files_forget();
	unlink(b);
}

static void *
read_once(void *arg)
{
	char		text[64];

	return read_call(arg, text, sizeof(text)) ? arg : NULL;
}

TEST(a_thread_that_ends_closes_its_file_and_frees_its_slot)
{
	char		a[256];

	make_file("ends.log", "x", a, sizeof(a));
	/* more threads than there are slots, one after another */
	for (int i = 0; i < 1100; i++)
	{
		pthread_t	t;
		void	   *res = NULL;

		REQUIRE(pthread_create(&t, NULL, read_once, a) == 0);
		pthread_join(t, &res);
		if (res == NULL)
		{
			FAIL("thread %d could not read", i);
			break;
		}
	}
	CHECK_EQ(open_on(a), 0);
	CHECK_EQ(reader_files_kept(), 0);
	unlink(a);
}

/* Readers on two files while files are removed and made again: no descriptor is lost. */
typedef struct Churn
{
	const char *paths[2];
	_Atomic bool stop;
	_Atomic uint64_t reads;
	_Atomic uint64_t wrong;
} Churn;

static void *
churn_reader(void *arg)
{
	Churn	   *c = arg;
	unsigned	k = 0;

	while (!atomic_load(&c->stop))
	{
		const char *path = c->paths[k++ % 2];
		char		text[64];

		if (read_call(path, text, sizeof(text)))
		{
			atomic_fetch_add(&c->reads, 1);
			if (text[0] != '\0' && strncmp(text, strrchr(path, '/') + 1, 2) != 0)
				atomic_fetch_add(&c->wrong, 1);
		}
	}
	return NULL;
}

TEST(concurrent_readers_and_removals)
{
	char		a[256];
	char		b[256];
	Churn		c = {.paths = {a, b}};
	pthread_t	t[6];

	make_file("c1.log", "c1", a, sizeof(a));
	make_file("c2.log", "c2", b, sizeof(b));
	for (int i = 0; i < 6; i++)
		REQUIRE(pthread_create(&t[i], NULL, churn_reader, &c) == 0);
	for (int i = 0; i < 300; i++)
	{
		char		path[256];

		unlink(i % 2 ? a : b);
		reader_files_forget();
		make_file(i % 2 ? "c1.log" : "c2.log", i % 2 ? "c1" : "c2", path, sizeof(path));
		usleep(200);
	}
	atomic_store(&c.stop, true);
	for (int i = 0; i < 6; i++)
		pthread_join(t[i], NULL);
	CHECK(atomic_load(&c.reads) > 0);
	CHECK_EQ(atomic_load(&c.wrong), 0);
	/* every descriptor still open is one a slot keeps */
	CHECK_EQ(reader_files_kept(), 0);	/* their threads ended */
	CHECK_EQ(open_on(dir), 0);
	unlink(a);
	unlink(b);
}

/*
 * The shape log's readers through it: a call on a chunk that left memory
 * keeps the log's file open; once the file is removed and the threads let
 * go, what is not in the thread's window fails to read, as it would have
 * without a kept descriptor.
 */
TEST(log_readers_keep_the_file_and_let_go)
{
	size_t		size = 8u << 20;
	void	   *mem = aligned_alloc(SLOG_BLOCK_SIZE, size);
	ShapeLogArena *arena;
	ShapeLog	log;
	char		path[SLOG_FILE_PATH_LEN];
	char		payload[3000];
	char		buf[64];
	uint32_t	blocks[512];
	uint32_t	n;
	int			fd;
	SlogPublished pub;
	char	   *bytes;

	REQUIRE(mem != NULL);
	arena = slog_arena_init(mem, size);
	REQUIRE(arena != NULL);
	slog_init(&log);
	memset(payload, 'p', sizeof(payload));
	for (int64_t tx = 1; tx <= 600; tx++)
	{
		LogOffset	o = {tx, 0};

		REQUIRE_EQ(slog_append(arena, &log, o, SLOG_RECORD_CHANGE, payload, sizeof(payload)),
				   SLOG_OK);
		if (tx % 100 == 0)
			REQUIRE_EQ(slog_close_chunk(arena, &log, o), SLOG_OK);
	}
	{
		LogOffset	last = {600, 0};

		slog_publish(&log, last, SLOG_SNAPSHOT_DONE);
	}
	slog_read_published(&log, &pub);
	snprintf(path, sizeof(path), "%s/h.1.log", dir);
	bytes = malloc(pub.data_end);
	REQUIRE(bytes != NULL && slog_copy_out(arena, &log, 0, bytes, pub.data_end));
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	REQUIRE(fd >= 0 && write(fd, bytes, pub.data_end) == (ssize_t) pub.data_end);
	close(fd);
	slog_set_file(&log, path);
	n = slog_trim(&log, (pub.data_end / 2) & ~(uint64_t) (SLOG_BLOCK_SIZE - 1), arena, blocks, 512);
	REQUIRE(n > 100);
	CHECK(reader_epoch_passed(reader_epoch_retire()));
	slog_arena_give_back(arena, blocks, n);

	CHECK(slog_copy_out(arena, &log, 100, buf, 16) && memcmp(buf, bytes + 100, 16) == 0);
	CHECK_EQ(open_on(path), 1);
	CHECK(slog_copy_out(arena, &log, 40 * SLOG_BLOCK_SIZE, buf, 16) &&
		  memcmp(buf, bytes + 40 * SLOG_BLOCK_SIZE, 16) == 0);
	CHECK_EQ(open_on(path), 1); /* one descriptor over the calls */
	unlink(path);
	reader_files_forget();
	CHECK_EQ(open_on(path), 0);
	/* past the window: the file is gone */
	CHECK(!slog_copy_out(arena, &log, 80 * SLOG_BLOCK_SIZE, buf, 16));

	slog_release(arena, &log);
	free(bytes);
	free(mem);
	rmdir(dir);
}

UNIT_MAIN()
