/*
 * test_log_flusher.c
 *		The round that makes shape log files durable and the thread that
 *		runs it (src/contract/log_flusher.c).
 *
 * Every test works in its own directory, made with mkdtemp under /tmp and
 * removed at its end.  An fsync cannot be observed from here; what is
 * checked is the outcome a round reports and the files it leaves.
 *
 * Failures are produced with what root cannot bypass (the tests run as
 * root, so a file of mode 000 opens anyway):
 *	- a file that cannot be opened: a loop of symbolic links (ELOOP), a
 *	  bound Unix socket (ENXIO), a path through a regular file (ENOTDIR);
 *	- a file that opens but whose fsync fails: a symbolic link to
 *	  /dev/null (fdatasync and fsync of a character device without a sync
 *	  operation answer EINVAL);
 *	- a manifest that cannot be written: its temporary path a symbolic
 *	  link to /dev/full (write answers ENOSPC).
 * A dangling symbolic link is ENOENT, so a round skips it like a file that
 * is gone.  A close(2) that fails is not produced.
 *
 * The thread is held inside a round with a FIFO: open(2) of a FIFO blocks
 * until its other end is opened, so a round whose file is a FIFO stays
 * running until the test opens the FIFO itself.
 */
#define _GNU_SOURCE
#include "unit.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "log_flusher.h"
#include "log_journal.h"

/* ------------------------------------------------------------ fixture */

typedef struct Fx
{
	char		dir[64];
	char		manifest[128];
	char		tmp[128];
	char		journal[128];
} Fx;

static bool
fx_init(Fx *fx)
{
	strcpy(fx->dir, "/tmp/test_log_flusher.XXXXXX");
	if (mkdtemp(fx->dir) == NULL)
		return false;
	snprintf(fx->manifest, sizeof(fx->manifest), "%s/manifest", fx->dir);
	snprintf(fx->tmp, sizeof(fx->tmp), "%s/manifest.tmp", fx->dir);
	snprintf(fx->journal, sizeof(fx->journal), "%s/journal", fx->dir);
	return true;
}

static int
rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void) st;
	(void) flag;
	(void) ftw;
	if (remove(path) != 0)
		fprintf(stderr, "  could not remove %s: %s\n", path, strerror(errno));
	return 0;
}

static void
fx_done(Fx *fx)
{
	nftw(fx->dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* TEST with a fresh directory in `fx`, removed afterwards (also after a REQUIRE) */
#define FX_TEST(name) \
	static void fx_body_##name(Fx *fx); \
	TEST(name) \
	{ \
		Fx			fx_; \
		if (!fx_init(&fx_)) \
		{ \
			FAIL("mkdtemp: %s", strerror(errno)); \
			return; \
		} \
		fx_body_##name(&fx_); \
		fx_done(&fx_); \
	} \
	static void fx_body_##name(Fx *fx)

/* dir/name into buf */
static const char *
fx_path(const Fx *fx, const char *name, char *buf, size_t len)
{
	snprintf(buf, len, "%s/%s", fx->dir, name);
	return buf;
}

static bool
write_file(const char *path, const void *bytes, size_t len)
{
	FILE	   *f = fopen(path, "wb");
	bool		ok;

	if (f == NULL)
		return false;
	ok = fwrite(bytes, 1, len, f) == len;
	return fclose(f) == 0 && ok;
}

static bool
fx_file(const Fx *fx, const char *name, const char *content)
{
	char		path[256];

	return write_file(fx_path(fx, name, path, sizeof(path)), content, strlen(content));
}

static bool
fx_symlink(const Fx *fx, const char *target, const char *name)
{
	char		path[256];

	return symlink(target, fx_path(fx, name, path, sizeof(path))) == 0;
}

/* The whole file, malloc'd, or NULL (errno set) */
static char *
read_file(const char *path, size_t *len)
{
	FILE	   *f = fopen(path, "rb");
	char	   *buf = NULL;
	size_t		cap = 0;
	size_t		n = 0;

	if (f == NULL)
		return NULL;
	for (;;)
	{
		size_t		r;

		if (n == cap)
		{
			cap = cap ? cap * 2 : 4096;
			buf = realloc(buf, cap);
			if (buf == NULL)
				abort();
		}
		r = fread(buf + n, 1, cap - n, f);
		n += r;
		if (r == 0)
			break;
	}
	fclose(f);
	*len = n;
	return buf;
}

/* Whether `path` holds exactly `len` bytes `bytes`; says what differs */
#define CHECK_FILE(path, bytes, len) check_file(__FILE__, __LINE__, (path), (bytes), (len))

static void
check_file(const char *file, int line, const char *path, const void *bytes, size_t len)
{
	size_t		got_len = 0;
	char	   *got = read_file(path, &got_len);

	if (got == NULL)
		unit_fail(file, line, "%s: %s (expected %zu bytes)", path, strerror(errno), len);
	else if (got_len != len || memcmp(got, bytes, len) != 0)
	{
		char		a[1024],
					b[1024];

		unit_fail(file, line, "%s holds %zu bytes \"%s\", expected %zu bytes \"%s\"",
				  path, got_len, unit_show(got, got_len, a, sizeof(a)),
				  len, unit_show(bytes, len, b, sizeof(b)));
	}
	free(got);
}

#define CHECK_FILE_STR(path, s) CHECK_FILE((path), (s), strlen(s))

/* Whether nothing is at `path` (not even a dangling symbolic link) */
#define CHECK_ABSENT(path) \
	do { \
		struct stat unit_st_; \
		if (lstat((path), &unit_st_) == 0) \
			FAIL("%s exists (mode 0%o), expected nothing there", (path), \
				 (unsigned) unit_st_.st_mode); \
		else if (errno != ENOENT) \
			FAIL("lstat %s: %s", (path), strerror(errno)); \
	} while (0)

/*
 * A round as log_files.c builds one: malloc'd paths (a name relative to
 * the test's directory, or an absolute path), a malloc'd copy of
 * `manifest` (NULL: no manifest), the fixture's manifest, temporary path
 * and directory.  The outcome fields are filled with garbage, which the
 * run must overwrite.
 */
static LogFlushRound *
new_round_n(const Fx *fx, const char *const *names, uint32_t npaths,
			const void *manifest, size_t manifest_len, bool sync)
{
	LogFlushRound *round = calloc(1, sizeof(LogFlushRound));

	if (round == NULL)
		abort();
	if (npaths > 0)
	{
		round->paths = calloc(npaths, sizeof(char *));
		if (round->paths == NULL)
			abort();
	}
	for (uint32_t i = 0; i < npaths; i++)
	{
		char		path[256];

		if (names[i][0] == '/')
			round->paths[i] = strdup(names[i]);
		else
			round->paths[i] = strdup(fx_path(fx, names[i], path, sizeof(path)));
		if (round->paths[i] == NULL)
			abort();
	}
	round->npaths = npaths;
	if (manifest != NULL)
	{
		round->manifest = malloc(manifest_len > 0 ? manifest_len : 1);
		if (round->manifest == NULL)
			abort();
		memcpy(round->manifest, manifest, manifest_len);
		round->manifest_len = manifest_len;
	}
	round->manifest_path = fx->manifest;
	round->manifest_tmp_path = fx->tmp;
	round->dir_path = fx->dir;
	round->journal_path = fx->journal;
	round->sync = sync;
	round->durable_lsn = UINT64_C(0x16B3748);
	round->ok = false;
	round->failed_path = 12345;
	round->failed_sets = true;
	round->error = 9999;
	round->failed_step = "garbage";
	return round;
}

static LogFlushRound *
new_round(const Fx *fx, const char *const *names, uint32_t npaths, const char *manifest,
		  bool sync)
{
	return new_round_n(fx, names, npaths, manifest, manifest ? strlen(manifest) : 0, sync);
}

/* The outcome of a round that succeeded */
#define CHECK_ROUND_OK(round) \
	do { \
		CHECK((round)->ok); \
		CHECK_EQ((round)->failed_path, -1); \
		CHECK(!(round)->failed_sets); \
		CHECK_EQ((round)->error, 0); \
		CHECK_STR_EQ((round)->failed_step, NULL); \
	} while (0)

/* The outcome of a round that failed at `step`, path `index`, with `err` */
#define CHECK_ROUND_FAILED(round, step, index, err) \
	do { \
		CHECK(!(round)->ok); \
		CHECK_STR_EQ((round)->failed_step, (step)); \
		CHECK_EQ((round)->failed_path, (index)); \
		if ((round)->error != (err)) \
			FAIL("error %d (%s), expected %d (%s)", (round)->error, \
				 strerror((round)->error), (err), strerror(err)); \
	} while (0)

/* A bound Unix socket at dir/name: exists, but open(2) answers ENXIO */
static bool
fx_socket(const Fx *fx, const char *name)
{
	struct sockaddr_un addr;
	int			fd = socket(AF_UNIX, SOCK_STREAM, 0);
	bool		ok;

	if (fd < 0)
		return false;
	memset(&addr, 0, sizeof(addr));
	addr.sun_family = AF_UNIX;
	fx_path(fx, name, addr.sun_path, sizeof(addr.sun_path));
	ok = bind(fd, (struct sockaddr *) &addr, sizeof(addr)) == 0;
	close(fd);					/* the socket file stays */
	return ok;
}

/* ------------------------------------------------- the round, inline */

FX_TEST(run_sync_fsyncs_files_and_installs_manifest)
{
	static const char manifest[] = "new manifest\0with a NUL\xff";
	const char *names[] = {"a.log", "a.shape", "b.log"};
	LogFlushRound *round;

	REQUIRE(fx_file(fx, "a.log", "records of a"));
	REQUIRE(fx_file(fx, "a.shape", "shape a"));
	REQUIRE(fx_file(fx, "b.log", ""));
	REQUIRE(write_file(fx->manifest, "old manifest", 12));

	round = new_round_n(fx, names, 3, manifest, sizeof(manifest) - 1, true);
	log_flush_round_run(round);
	CHECK_ROUND_OK(round);
	CHECK_UEQ(round->durable_lsn, UINT64_C(0x16B3748));
	CHECK_FILE(fx->manifest, manifest, sizeof(manifest) - 1);
	CHECK_ABSENT(fx->tmp);
	/* the files are left as they were */
	{
		char		p[256];

		CHECK_FILE_STR(fx_path(fx, "a.log", p, sizeof(p)), "records of a");
		CHECK_FILE_STR(fx_path(fx, "b.log", p, sizeof(p)), "");
	}
	log_flush_round_free(round);
}

/*
 * A delta is written at the manifest's end as the round says (past bytes a
 * torn append left, which it overwrites), the file fsynced, no temporary
 * file, no rename; a manifest that is not there fails the round.
 */
FX_TEST(run_appends_a_delta_to_the_manifest)
{
	LogFlushRound *round;

	REQUIRE(write_file(fx->manifest, "whole manifest|torn", 19));
	round = new_round(fx, NULL, 0, "delta one", true);
	round->manifest_append = true;
	round->manifest_at = 15;
	log_flush_round_run(round);
	CHECK_ROUND_OK(round);
	CHECK_EQ(round->fsyncs, 1);
	CHECK_FILE_STR(fx->manifest, "whole manifest|delta one");
	CHECK_ABSENT(fx->tmp);
	log_flush_round_free(round);

	/* without fsync: written, no fsync */
	round = new_round(fx, NULL, 0, "+two", false);
	round->manifest_append = true;
	round->manifest_at = 24;
	log_flush_round_run(round);
	CHECK_ROUND_OK(round);
	CHECK_EQ(round->fsyncs, 0);
	CHECK_FILE_STR(fx->manifest, "whole manifest|delta one+two");
	log_flush_round_free(round);

	/* no manifest to append to: the round fails, nothing is created */
	REQUIRE(unlink(fx->manifest) == 0);
	round = new_round(fx, NULL, 0, "delta", true);
	round->manifest_append = true;
	round->manifest_at = 0;
	log_flush_round_run(round);
	CHECK_ROUND_FAILED(round, "write", -1, ENOENT);
	CHECK_ABSENT(fx->manifest);
	log_flush_round_free(round);
}

/* pieces of a round's pieces: `n` data files named names[i], bytes [from[i], to[i]) */
static void
round_set_pieces(LogFlushRound *round, const char *const *names, const uint64_t *from,
				 const uint64_t *to, uint32_t n)
{
	round->pieces = calloc(n, sizeof(LogJournalPiece));
	if (round->pieces == NULL)
		abort();
	for (uint32_t i = 0; i < n; i++)
	{
		if ((round->pieces[i].name = strdup(names[i])) == NULL)
			abort();
		round->pieces[i].from = from[i];
		round->pieces[i].to = to[i];
	}
	round->npieces = n;
}

static uint64_t
file_length(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 ? (uint64_t) st.st_size : UINT64_MAX;
}

/* what two files gained goes into the journal with one fsync, and a replay gives it back */
FX_TEST(run_journal_pieces_take_one_fsync)
{
	const char *names[] = {"a.1.log", "b.1.log"};
	const uint64_t from[] = {2, 0};
	const uint64_t to[] = {9, 4};
	LogFlushRound *round;
	LogJournalReplay replay;
	char		failed[256];
	char		p[256];

	REQUIRE(fx_file(fx, "a.1.log", "aaBBBBBBB"));
	REQUIRE(fx_file(fx, "b.1.log", "bbbb"));
	round = new_round_n(fx, NULL, 0, "m", 1, true);
	round_set_pieces(round, names, from, to, 2);
	log_flush_round_run(round);
	CHECK_ROUND_OK(round);
	CHECK_UEQ(round->fsyncs, 3);	/* the journal, the manifest, the directory */
	CHECK_UEQ(round->journal_bytes, file_length(fx->journal));
	CHECK_UEQ(round->journal_bytes, 2 * LOG_JOURNAL_RECORD_HEADER + 14 + 11);
	CHECK(!round->journal_torn);
	CHECK_FILE(fx->manifest, "m", 1);
	log_flush_round_free(round);
	/* the files lose what they gained; the journal gives it back */
	REQUIRE(truncate(fx_path(fx, "a.1.log", p, sizeof(p)), 2) == 0);
	REQUIRE(truncate(fx_path(fx, "b.1.log", p, sizeof(p)), 0) == 0);
	CHECK(log_journal_replay(fx->journal, fx->dir, &replay, failed, sizeof(failed)) == 0);
	CHECK_UEQ(replay.records, 2);
	CHECK_FILE_STR(fx_path(fx, "a.1.log", p, sizeof(p)), "aaBBBBBBB");
	CHECK_FILE_STR(fx_path(fx, "b.1.log", p, sizeof(p)), "bbbb");
}

/* a reset round fsyncs its files, then empties the journal, then adds nothing to it */
FX_TEST(run_reset_empties_the_journal_after_its_files)
{
	const char *paths[] = {"a.1.log"};
	LogFlushRound *round;

	REQUIRE(fx_file(fx, "a.1.log", "aaaa"));
	REQUIRE(write_file(fx->journal, "whatever the journal held", 25));
	round = new_round_n(fx, paths, 1, "m", 1, true);
	round->reset_journal = true;
	log_flush_round_run(round);
	CHECK_ROUND_OK(round);
	CHECK_UEQ(round->fsyncs, 4);	/* the file, the journal, the manifest, the directory */
	CHECK_UEQ(file_length(fx->journal), 0);
	log_flush_round_free(round);
	/* and when a file fails, the journal is left as it was */
	REQUIRE(write_file(fx->journal, "kept", 4));
	{
		char		p[256];

		REQUIRE(symlink("/dev/null", fx_path(fx, "null.log", p, sizeof(p))) == 0);
	}
	{
		const char *bad[] = {"null.log"};

		round = new_round_n(fx, bad, 1, "m2", 2, true);
	}
	round->reset_journal = true;
	log_flush_round_run(round);
	CHECK(!round->ok);
	CHECK_UEQ(round->failed_path, 0);
	CHECK_UEQ(file_length(fx->journal), 4);
	CHECK_FILE(fx->manifest, "m", 1);
	log_flush_round_free(round);
}

/* a journal that cannot be emptied: the round stands (its manifest is in place) and says so */
FX_TEST(run_reset_that_cannot_empty_the_journal_keeps_the_round)
{
	const char *paths[] = {"a.1.log"};
	LogFlushRound *round;

	REQUIRE(fx_file(fx, "a.1.log", "aaaa"));
	REQUIRE(mkdir(fx->journal, 0700) == 0);	/* opens for writing: EISDIR */
	round = new_round_n(fx, paths, 1, "m", 1, true);
	round->reset_journal = true;
	log_flush_round_run(round);
	CHECK(round->ok);
	CHECK(round->journal_reset_failed);
	CHECK_EQ(round->error, EISDIR);
	CHECK_FILE(fx->manifest, "m", 1);
	log_flush_round_free(round);
}

/* a data file that cannot be read for the journal: named, no manifest, the journal whole */
FX_TEST(run_journal_unreadable_piece_fails_the_round)
{
	const char *names[] = {"a.1.log", "loop.log"};
	const uint64_t from[] = {0, 0};
	const uint64_t to[] = {4, 4};
	LogFlushRound *round;
	char		p[256];
	char		q[256];

	REQUIRE(fx_file(fx, "a.1.log", "aaaa"));
	REQUIRE(symlink(fx_path(fx, "loop.log", q, sizeof(q)), fx_path(fx, "loop.log", p, sizeof(p))) == 0);
	round = new_round_n(fx, NULL, 0, "m", 1, true);
	round_set_pieces(round, names, from, to, 2);
	log_flush_round_run(round);
	CHECK(!round->ok);
	CHECK_UEQ(round->failed_piece, 1);
	CHECK(!round->journal_torn);
	CHECK_ABSENT(fx->manifest);
	CHECK_UEQ(file_length(fx->journal), LOG_JOURNAL_RECORD_HEADER + 7 + 4);
	log_flush_round_free(round);
}

/* a journal that cannot be written: the round fails and says the journal may be cut short */
FX_TEST(run_journal_unwritable_is_torn)
{
	const char *names[] = {"a.1.log"};
	const uint64_t from[] = {0};
	const uint64_t to[] = {4};
	LogFlushRound *round;

	REQUIRE(fx_file(fx, "a.1.log", "aaaa"));
	REQUIRE(symlink("/dev/full", fx->journal) == 0);
	round = new_round_n(fx, NULL, 0, "m", 1, true);
	round_set_pieces(round, names, from, to, 1);
	log_flush_round_run(round);
	CHECK(!round->ok);
	CHECK(round->journal_torn);
	CHECK_UEQ(round->failed_piece, -1);
	CHECK_ABSENT(fx->manifest);
	log_flush_round_free(round);
}

/* the round's value sets bytes: a malloc'd copy of `len` bytes, at `at`, to `path` */
static void
round_set_sets(LogFlushRound *round, const char *path, const void *bytes, size_t len,
			   uint64_t at, bool create)
{
	round->sets = malloc(len > 0 ? len : 1);
	if (round->sets == NULL)
		abort();
	memcpy(round->sets, bytes, len);
	round->sets_len = len;
	round->sets_path = path;
	round->sets_at = at;
	round->sets_create = create;
}

/*
 * A new generation creates the value sets file (the directory fsynced
 * after it), a later round writes at the offset it is given (over bytes
 * written after the last manifest), and a new generation again truncates.
 */
FX_TEST(run_writes_value_sets_at_their_offset)
{
	char		sets[256];
	LogFlushRound *round;

	fx_path(fx, "sets.1", sets, sizeof(sets));
	round = new_round(fx, NULL, 0, "m1", true);
	round_set_sets(round, sets, "first", 5, 0, true);
	log_flush_round_run(round);
	CHECK_ROUND_OK(round);
	/* the sets file, the directory, the manifest, the directory */
	CHECK_UEQ(round->fsyncs, 4);
	CHECK_FILE_STR(sets, "first");
	CHECK_FILE_STR(fx->manifest, "m1");
	log_flush_round_free(round);

	/* an append at the end: one fsync for it, no directory */
	round = new_round(fx, NULL, 0, "m2", true);
	round_set_sets(round, sets, "+second\0", 8, 5, false);
	log_flush_round_run(round);
	CHECK_ROUND_OK(round);
	CHECK_UEQ(round->fsyncs, 3);
	CHECK_FILE(sets, "first+second\0", 13);
	CHECK_FILE_STR(fx->manifest, "m2");
	log_flush_round_free(round);

	/* bytes written after the last manifest are overwritten where the round says */
	{
		int			fd = open(sets, O_WRONLY | O_APPEND);

		REQUIRE(fd >= 0);
		REQUIRE(write(fd, "junk", 4) == 4);
		close(fd);
	}
	round = new_round(fx, NULL, 0, NULL, true);
	round_set_sets(round, sets, "+3", 2, 13, false);
	log_flush_round_run(round);
	CHECK_ROUND_OK(round);
	CHECK_UEQ(round->fsyncs, 1);
	CHECK_FILE(sets, "first+second\0+3nk", 17);
	log_flush_round_free(round);

	/* a new generation over the same path starts it again */
	round = new_round(fx, NULL, 0, "m3", true);
	round_set_sets(round, sets, "new", 3, 0, true);
	log_flush_round_run(round);
	CHECK_ROUND_OK(round);
	CHECK_UEQ(round->fsyncs, 4);
	CHECK_FILE_STR(sets, "new");
	log_flush_round_free(round);

	/* nothing this round: the file is left alone */
	round = new_round(fx, NULL, 0, "m4", true);
	log_flush_round_run(round);
	CHECK_ROUND_OK(round);
	CHECK_UEQ(round->fsyncs, 2);
	CHECK_FILE_STR(sets, "new");
	log_flush_round_free(round);
}

/*
 * An append to a value sets file that is gone fails the round (it would
 * make a file whose first bytes are zeros), and no manifest is installed;
 * a new generation creates it.
 */
FX_TEST(run_refuses_an_append_to_a_missing_value_sets_file)
{
	char		sets[256];
	LogFlushRound *round;

	fx_path(fx, "sets.2", sets, sizeof(sets));
	round = new_round(fx, NULL, 0, "before", true);
	log_flush_round_run(round);
	CHECK_ROUND_OK(round);
	log_flush_round_free(round);

	round = new_round(fx, NULL, 0, "after", true);
	round_set_sets(round, sets, "tail", 4, 100, false);
	log_flush_round_run(round);
	CHECK(!round->ok);
	CHECK(round->failed_sets);
	CHECK_EQ(round->error, ENOENT);
	CHECK_ABSENT(sets);
	CHECK_FILE_STR(fx->manifest, "before");
	log_flush_round_free(round);

	round = new_round(fx, NULL, 0, "after", true);
	round_set_sets(round, sets, "whole", 5, 0, true);
	log_flush_round_run(round);
	CHECK_ROUND_OK(round);
	CHECK_FILE_STR(sets, "whole");
	CHECK_FILE_STR(fx->manifest, "after");
	log_flush_round_free(round);
}

/* with sync off the value sets file is written, nothing fsynced (not even a missing directory) */
FX_TEST(run_without_sync_writes_value_sets_unsynced)
{
	char		sets[256];
	char		missing[256];
	LogFlushRound *round;

	fx_path(fx, "sets.1", sets, sizeof(sets));
	round = new_round(fx, NULL, 0, "m", false);
	round_set_sets(round, sets, "abc", 3, 0, true);
	round->dir_path = fx_path(fx, "no-such-dir", missing, sizeof(missing));
	log_flush_round_run(round);
	CHECK_ROUND_OK(round);
	CHECK_UEQ(round->fsyncs, 0);
	CHECK_FILE_STR(sets, "abc");
	CHECK_FILE_STR(fx->manifest, "m");
	log_flush_round_free(round);

	round = new_round(fx, NULL, 0, "m2", false);
	round_set_sets(round, sets, "def", 3, 3, false);
	log_flush_round_run(round);
	CHECK_ROUND_OK(round);
	CHECK_UEQ(round->fsyncs, 0);
	CHECK_FILE_STR(sets, "abcdef");
	CHECK_FILE_STR(fx->manifest, "m2");
	log_flush_round_free(round);
}

/*
 * A value sets file that cannot be opened, written or fsynced fails the
 * round with failed_sets: no manifest is installed (the old one holds,
 * no temporary file), the journal is not emptied.
 */
FX_TEST(run_value_sets_failure_installs_no_manifest)
{
	char		sets[256];
	char		dir[256];
	LogFlushRound *round;

	REQUIRE(write_file(fx->manifest, "old manifest", 12));

	/* in a missing directory: cannot be opened, with or without sync */
	fx_path(fx, "no-dir/sets.1", sets, sizeof(sets));
	for (int sync = 0; sync <= 1; sync++)
	{
		round = new_round(fx, NULL, 0, "never installed", sync);
		round_set_sets(round, sets, "abc", 3, 0, true);
		round->reset_journal = true;
		REQUIRE(write_file(fx->journal, "kept", 4));
		log_flush_round_run(round);
		CHECK_ROUND_FAILED(round, "write", -1, ENOENT);
		CHECK(round->failed_sets);
		CHECK(!round->failed_journal);
		CHECK_UEQ(round->fsyncs, 0);
		CHECK_FILE_STR(fx->manifest, "old manifest");
		CHECK_ABSENT(fx->tmp);
		CHECK_UEQ(file_length(fx->journal), 4);
		log_flush_round_free(round);
	}

	/* a write that fails: /dev/full */
	REQUIRE(symlink("/dev/full", fx_path(fx, "full", sets, sizeof(sets))) == 0);
	round = new_round(fx, NULL, 0, "never installed", true);
	round_set_sets(round, sets, "abc", 3, 0, false);
	log_flush_round_run(round);
	CHECK_ROUND_FAILED(round, "write", -1, ENOSPC);
	CHECK(round->failed_sets);
	CHECK_FILE_STR(fx->manifest, "old manifest");
	log_flush_round_free(round);

	/* an fsync that fails: /dev/null; without sync the same round succeeds */
	REQUIRE(symlink("/dev/null", fx_path(fx, "null", sets, sizeof(sets))) == 0);
	round = new_round(fx, NULL, 0, "never installed", true);
	round_set_sets(round, sets, "abc", 3, 0, true);
	log_flush_round_run(round);
	CHECK_ROUND_FAILED(round, "fsync", -1, EINVAL);
	CHECK(round->failed_sets);
	CHECK_UEQ(round->fsyncs, 1);
	CHECK_FILE_STR(fx->manifest, "old manifest");
	round->sync = false;
	log_flush_round_run(round);
	CHECK_ROUND_OK(round);
	CHECK_FILE_STR(fx->manifest, "never installed");
	log_flush_round_free(round);
	REQUIRE(write_file(fx->manifest, "old manifest", 12));

	/* a new generation whose directory cannot be fsynced */
	fx_path(fx, "sets.2", sets, sizeof(sets));
	round = new_round(fx, NULL, 0, "never installed", true);
	round_set_sets(round, sets, "abc", 3, 0, true);
	round->dir_path = fx_path(fx, "no-such-dir", dir, sizeof(dir));
	log_flush_round_run(round);
	CHECK_ROUND_FAILED(round, "fsync", -1, ENOENT);
	CHECK(round->failed_sets);
	CHECK_UEQ(round->fsyncs, 2);
	CHECK_FILE_STR(sets, "abc");
	CHECK_FILE_STR(fx->manifest, "old manifest");
	log_flush_round_free(round);
}

/* a data file that fails comes first: the value sets file is not written, and not blamed */
FX_TEST(run_failed_file_writes_no_value_sets)
{
	const char *names[] = {"loop1"};
	char		sets[256];
	LogFlushRound *round;

	REQUIRE(fx_symlink(fx, "loop2", "loop1"));
	REQUIRE(fx_symlink(fx, "loop1", "loop2"));
	fx_path(fx, "sets.1", sets, sizeof(sets));
	round = new_round(fx, names, 1, "m", true);
	round_set_sets(round, sets, "abc", 3, 0, true);
	log_flush_round_run(round);
	CHECK_ROUND_FAILED(round, "fsync", 0, ELOOP);
	CHECK(!round->failed_sets);
	CHECK_ABSENT(sets);
	CHECK_ABSENT(fx->manifest);
	log_flush_round_free(round);
}

FX_TEST(run_sync_creates_first_manifest)
{
	const char *names[] = {"a.log"};
	LogFlushRound *round;

	REQUIRE(fx_file(fx, "a.log", "x"));
	round = new_round(fx, names, 1, "first", true);
	log_flush_round_run(round);
	CHECK_ROUND_OK(round);
	CHECK_FILE_STR(fx->manifest, "first");
	CHECK_ABSENT(fx->tmp);
	{
		struct stat st;

		/* written with mode 0600 (umask permitting) */
		CHECK(stat(fx->manifest, &st) == 0 && (st.st_mode & 077) == 0);
	}
	log_flush_round_free(round);
}

FX_TEST(run_replaces_stale_tmp)
{
	LogFlushRound *round;

	/* a temporary file left by a crash, longer than the new manifest */
	REQUIRE(write_file(fx->tmp, "a much longer stale temporary manifest", 38));
	REQUIRE(write_file(fx->manifest, "old", 3));
	round = new_round(fx, NULL, 0, "short", true);
	log_flush_round_run(round);
	CHECK_ROUND_OK(round);
	CHECK_FILE_STR(fx->manifest, "short");
	CHECK_ABSENT(fx->tmp);
	log_flush_round_free(round);
}

FX_TEST(run_without_sync_opens_no_file)
{
	/* with sync off the paths are not even opened: a loop of links does not fail */
	const char *names[] = {"a.log", "loop1", "gone.log"};
	LogFlushRound *round;

	REQUIRE(fx_file(fx, "a.log", "x"));
	REQUIRE(fx_symlink(fx, "loop2", "loop1"));
	REQUIRE(fx_symlink(fx, "loop1", "loop2"));
	REQUIRE(write_file(fx->manifest, "old", 3));

	round = new_round(fx, names, 3, "unsynced manifest", false);
	log_flush_round_run(round);
	CHECK_ROUND_OK(round);
	CHECK_FILE_STR(fx->manifest, "unsynced manifest");
	CHECK_ABSENT(fx->tmp);
	log_flush_round_free(round);
}

FX_TEST(run_without_sync_ignores_dir_path)
{
	char		missing[256];
	LogFlushRound *round;

	round = new_round(fx, NULL, 0, "m", false);
	round->dir_path = fx_path(fx, "no-such-dir", missing, sizeof(missing));
	log_flush_round_run(round);
	CHECK_ROUND_OK(round);
	CHECK_FILE_STR(fx->manifest, "m");
	log_flush_round_free(round);
}

FX_TEST(run_skips_missing_files)
{
	/* gone, a dangling link, a missing directory on the way: all ENOENT */
	const char *names[] = {"gone.log", "a.log", "dangling", "no-dir/x.log", "b.log"};
	LogFlushRound *round;

	REQUIRE(fx_file(fx, "a.log", "a"));
	REQUIRE(fx_file(fx, "b.log", "b"));
	REQUIRE(fx_symlink(fx, "nothing-here", "dangling"));

	round = new_round(fx, names, 5, "manifest after skips", true);
	log_flush_round_run(round);
	CHECK_ROUND_OK(round);
	CHECK_FILE_STR(fx->manifest, "manifest after skips");
	log_flush_round_free(round);
}

FX_TEST(run_only_missing_files_no_manifest)
{
	const char *names[] = {"gone1", "gone2"};
	LogFlushRound *round = new_round(fx, names, 2, NULL, true);

	log_flush_round_run(round);
	CHECK_ROUND_OK(round);
	CHECK_ABSENT(fx->manifest);
	CHECK_ABSENT(fx->tmp);
	log_flush_round_free(round);
}

FX_TEST(run_without_manifest_leaves_existing_one)
{
	const char *names[] = {"a.log"};
	LogFlushRound *round;

	REQUIRE(fx_file(fx, "a.log", "a"));
	REQUIRE(write_file(fx->manifest, "existing", 8));
	for (int sync = 0; sync <= 1; sync++)
	{
		round = new_round(fx, names, 1, NULL, sync);
		/* neither the temporary path nor the directory is looked at */
		round->manifest_tmp_path = "/nonexistent-dir/manifest.tmp";
		round->dir_path = "/nonexistent-dir";
		log_flush_round_run(round);
		CHECK_ROUND_OK(round);
		CHECK_FILE_STR(fx->manifest, "existing");
		CHECK_ABSENT(fx->tmp);
		log_flush_round_free(round);
	}
}

FX_TEST(run_nothing_at_all)
{
	/* no paths (NULL array), no manifest */
	LogFlushRound *round = new_round(fx, NULL, 0, NULL, true);

	CHECK(round->paths == NULL);
	log_flush_round_run(round);
	CHECK_ROUND_OK(round);
	CHECK_ABSENT(fx->manifest);
	log_flush_round_free(round);
}

FX_TEST(run_empty_manifest)
{
	LogFlushRound *round;

	REQUIRE(write_file(fx->manifest, "old", 3));
	round = new_round_n(fx, NULL, 0, "", 0, true);
	log_flush_round_run(round);
	CHECK_ROUND_OK(round);
	CHECK_FILE(fx->manifest, "", 0);
	log_flush_round_free(round);
}

FX_TEST(run_large_manifest_exact_bytes)
{
	size_t		len = 3 * 1024 * 1024 + 17;
	char	   *bytes = malloc(len);
	uint32_t	x = 2463534242u;
	LogFlushRound *round;

	REQUIRE(bytes != NULL);
	for (size_t i = 0; i < len; i++)
	{
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		bytes[i] = (char) x;
	}
	REQUIRE(write_file(fx->manifest, "old", 3));
	round = new_round_n(fx, NULL, 0, bytes, len, true);
	log_flush_round_run(round);
	CHECK_ROUND_OK(round);
	CHECK_FILE(fx->manifest, bytes, len);
	CHECK_ABSENT(fx->tmp);
	log_flush_round_free(round);
	free(bytes);
}

FX_TEST(run_tmp_in_missing_directory_fails_write)
{
	char		tmp[256];
	LogFlushRound *round;

	REQUIRE(write_file(fx->manifest, "existing", 8));
	for (int sync = 0; sync <= 1; sync++)
	{
		round = new_round(fx, NULL, 0, "never installed", sync);
		round->manifest_tmp_path = fx_path(fx, "no-dir/manifest.tmp", tmp, sizeof(tmp));
		log_flush_round_run(round);
		CHECK_ROUND_FAILED(round, "write", -1, ENOENT);
		CHECK_FILE_STR(fx->manifest, "existing");
		log_flush_round_free(round);
	}
}

FX_TEST(run_rename_into_missing_directory_fails)
{
	char		dest[256];
	LogFlushRound *round;

	REQUIRE(write_file(fx->manifest, "existing", 8));
	round = new_round(fx, NULL, 0, "renamed nowhere", true);
	round->manifest_path = fx_path(fx, "no-dir/manifest", dest, sizeof(dest));
	log_flush_round_run(round);
	CHECK_ROUND_FAILED(round, "rename", -1, ENOENT);
	CHECK_ABSENT(dest);
	/* the round leaves its temporary file; the next round truncates it */
	CHECK_FILE_STR(fx->tmp, "renamed nowhere");
	CHECK_FILE_STR(fx->manifest, "existing");
	log_flush_round_free(round);
}

FX_TEST(run_rename_onto_directory_fails)
{
	char		inner[256];
	LogFlushRound *round;

	/* manifest_path is a directory that is not empty: rename(2) answers EISDIR */
	REQUIRE(mkdir(fx->manifest, 0700) == 0);
	REQUIRE(fx_file(fx, "manifest/inner", "inner"));
	round = new_round(fx, NULL, 0, "not over a directory", false);
	log_flush_round_run(round);
	CHECK_ROUND_FAILED(round, "rename", -1, EISDIR);
	CHECK_FILE_STR(fx_path(fx, "manifest/inner", inner, sizeof(inner)), "inner");
	log_flush_round_free(round);
}

FX_TEST(run_unopenable_file_fails_and_stops)
{
	/*
	 * A loop of symbolic links exists but cannot be opened (ELOOP), even by
	 * root.  The round stops there: the socket after it (ENXIO) is not what
	 * it reports.
	 */
	const char *names[] = {"a.log", "loop1", "sock", "b.log"};
	LogFlushRound *round;

	REQUIRE(fx_file(fx, "a.log", "a"));
	REQUIRE(fx_file(fx, "b.log", "b"));
	REQUIRE(fx_symlink(fx, "loop2", "loop1"));
	REQUIRE(fx_symlink(fx, "loop1", "loop2"));
	REQUIRE(fx_socket(fx, "sock"));
	REQUIRE(write_file(fx->manifest, "existing", 8));

	round = new_round(fx, names, 4, "must not appear", true);
	log_flush_round_run(round);
	CHECK_ROUND_FAILED(round, "fsync", 1, ELOOP);
	CHECK_FILE_STR(fx->manifest, "existing");
	CHECK_ABSENT(fx->tmp);
	log_flush_round_free(round);
}

FX_TEST(run_socket_file_fails)
{
	/* a bound Unix socket: open(2) answers ENXIO */
	const char *names[] = {"a.log", "sock"};
	LogFlushRound *round;

	REQUIRE(fx_file(fx, "a.log", "a"));
	REQUIRE(fx_socket(fx, "sock"));
	round = new_round(fx, names, 2, "must not appear", true);
	log_flush_round_run(round);
	CHECK_ROUND_FAILED(round, "fsync", 1, ENXIO);
	CHECK_ABSENT(fx->manifest);
	CHECK_ABSENT(fx->tmp);
	log_flush_round_free(round);
}

FX_TEST(run_path_through_a_file_fails)
{
	/* a regular file on the way: ENOTDIR, which is not skipped like ENOENT */
	const char *names[] = {"a.log/x"};
	LogFlushRound *round;

	REQUIRE(fx_file(fx, "a.log", "a"));
	round = new_round(fx, names, 1, "must not appear", true);
	log_flush_round_run(round);
	CHECK_ROUND_FAILED(round, "fsync", 0, ENOTDIR);
	CHECK_ABSENT(fx->manifest);
	log_flush_round_free(round);
}

FX_TEST(run_fsync_failure_names_the_file)
{
	/* opens, but fdatasync of /dev/null answers EINVAL: a real fsync failure */
	const char *names[] = {"a.log", "b.log", "null"};
	LogFlushRound *round;

	REQUIRE(fx_file(fx, "a.log", "a"));
	REQUIRE(fx_file(fx, "b.log", "b"));
	REQUIRE(fx_symlink(fx, "/dev/null", "null"));
	REQUIRE(write_file(fx->manifest, "existing", 8));
	round = new_round(fx, names, 3, "must not appear", true);
	log_flush_round_run(round);
	CHECK_ROUND_FAILED(round, "fsync", 2, EINVAL);
	CHECK_FILE_STR(fx->manifest, "existing");
	CHECK_ABSENT(fx->tmp);
	log_flush_round_free(round);
}

FX_TEST(run_manifest_write_fails)
{
	/* the temporary path leads to /dev/full: write(2) answers ENOSPC */
	char		full[256];
	LogFlushRound *round;

	REQUIRE(fx_symlink(fx, "/dev/full", "full"));
	REQUIRE(write_file(fx->manifest, "existing", 8));
	for (int sync = 0; sync <= 1; sync++)
	{
		round = new_round(fx, NULL, 0, "does not fit", sync);
		round->manifest_tmp_path = fx_path(fx, "full", full, sizeof(full));
		log_flush_round_run(round);
		CHECK_ROUND_FAILED(round, "write", -1, ENOSPC);
		CHECK_FILE_STR(fx->manifest, "existing");
		log_flush_round_free(round);
	}
}

FX_TEST(run_manifest_write_fails_no_manifest_before)
{
	char		full[256];
	LogFlushRound *round;

	REQUIRE(fx_symlink(fx, "/dev/full", "full"));
	round = new_round(fx, NULL, 0, "does not fit", true);
	round->manifest_tmp_path = fx_path(fx, "full", full, sizeof(full));
	log_flush_round_run(round);
	CHECK_ROUND_FAILED(round, "write", -1, ENOSPC);
	CHECK_ABSENT(fx->manifest);
	log_flush_round_free(round);
}

FX_TEST(run_manifest_fsync_fails)
{
	/* the temporary path leads to /dev/null: written, but its fsync answers EINVAL */
	char		null[256];
	struct stat st;
	LogFlushRound *round;

	REQUIRE(fx_symlink(fx, "/dev/null", "null"));
	REQUIRE(write_file(fx->manifest, "existing", 8));
	round = new_round(fx, NULL, 0, "written, not synced", true);
	round->manifest_tmp_path = fx_path(fx, "null", null, sizeof(null));
	log_flush_round_run(round);
	CHECK_ROUND_FAILED(round, "fsync", -1, EINVAL);
	CHECK_FILE_STR(fx->manifest, "existing");
	/* not renamed: the link is still where it was */
	CHECK(lstat(null, &st) == 0 && S_ISLNK(st.st_mode));
	log_flush_round_free(round);
}

FX_TEST(run_dir_fsync_fails_after_rename)
{
	/*
	 * The directory's fsync comes after the rename: when it fails the round
	 * fails, but the new manifest is already in place (whole, not partial).
	 */
	char		dir[256];
	LogFlushRound *round;

	REQUIRE(write_file(fx->manifest, "existing", 8));
	round = new_round(fx, NULL, 0, "installed, dir not synced", true);
	round->dir_path = fx_path(fx, "no-such-dir", dir, sizeof(dir));
	log_flush_round_run(round);
	CHECK_ROUND_FAILED(round, "fsync", -1, ENOENT);
	CHECK_FILE_STR(fx->manifest, "installed, dir not synced");
	CHECK_ABSENT(fx->tmp);
	log_flush_round_free(round);
}

FX_TEST(run_outcome_is_reset_each_run)
{
	const char *names[] = {"loop1"};
	LogFlushRound *round;

	REQUIRE(fx_symlink(fx, "loop2", "loop1"));
	REQUIRE(fx_symlink(fx, "loop1", "loop2"));
	round = new_round(fx, names, 1, "second time", true);
	log_flush_round_run(round);
	CHECK_ROUND_FAILED(round, "fsync", 0, ELOOP);
	CHECK_ABSENT(fx->manifest);

	/* the loop is gone: the same round now succeeds and says so */
	{
		char		p[256];

		REQUIRE(unlink(fx_path(fx, "loop1", p, sizeof(p))) == 0);
	}
	log_flush_round_run(round);
	CHECK_ROUND_OK(round);
	CHECK_FILE_STR(fx->manifest, "second time");
	log_flush_round_free(round);
}

FX_TEST(round_free_releases_everything)
{
	/* under ASan a leak of a path, the array or the manifest is reported at exit */
	const char *names[] = {"a", "b", "c", "d"};

	log_flush_round_free(new_round(fx, names, 4, "manifest", true));
	log_flush_round_free(new_round(fx, names, 4, NULL, true));
	log_flush_round_free(new_round(fx, NULL, 0, "manifest", false));
	log_flush_round_free(new_round(fx, NULL, 0, NULL, false));
	{
		LogFlushRound *round = new_round(fx, names, 4, "manifest", true);

		round_set_sets(round, "/nowhere/sets.1", "sets", 4, 0, true);
		log_flush_round_free(round);
	}
	log_flush_round_free(NULL);
	/* after a run, too */
	{
		LogFlushRound *round = new_round(fx, names, 4, "manifest", true);

		log_flush_round_run(round);
		CHECK_ROUND_OK(round);
		log_flush_round_free(round);
	}
}

/* ------------------------------------------------------------ the thread */

/* A FIFO at dir/name, and a way to let a reader of it through */
static bool
fx_fifo(const Fx *fx, const char *name, char *path, size_t len)
{
	return mkfifo(fx_path(fx, name, path, len), 0600) == 0;
}

/*
 * Lets the flusher, blocked in open(2) of the FIFO for reading, go on: opens
 * the writing end (retrying while there is no reader yet) and closes it.
 * False after 10 s without a reader.
 */
static bool
fifo_release_reader(const char *path)
{
	double		deadline = unit_now() + 10.0;

	for (;;)
	{
		int			fd = open(path, O_WRONLY | O_NONBLOCK);

		if (fd >= 0)
		{
			close(fd);
			return true;
		}
		if (errno != ENXIO || unit_now() > deadline)
			return false;
		usleep(1000);
	}
}

/* Waits until the flusher is no longer busy; false after 10 s */
static bool
wait_not_busy(LogFlusher *f)
{
	double		deadline = unit_now() + 10.0;

	while (log_flusher_busy(f))
	{
		if (unit_now() > deadline)
			return false;
		usleep(100);
	}
	return true;
}

TEST(thread_stop_without_start)
{
	LogFlusher	f;

	memset(&f, 0, sizeof(f));
	log_flusher_stop(&f);
	CHECK(!f.started);
	log_flusher_stop(&f);
	CHECK(!f.started);
}

TEST(thread_start_idle_stop_twice)
{
	LogFlusher	f;

	memset(&f, 0, sizeof(f));
	REQUIRE_EQ(log_flusher_start(&f), 0);
	CHECK(f.started);
	CHECK(!log_flusher_busy(&f));
	CHECK(log_flusher_collect(&f, false) == NULL);
	/* nothing in flight: does not wait */
	CHECK(log_flusher_collect(&f, true) == NULL);
	log_flusher_stop(&f);
	CHECK(!f.started);
	log_flusher_stop(&f);
	CHECK(!f.started);
}

FX_TEST(thread_submit_collect)
{
	const char *names[] = {"a.log", "gone.log"};
	LogFlusher	f;
	LogFlushRound *round;
	LogFlushRound *got;

	REQUIRE(fx_file(fx, "a.log", "a"));
	REQUIRE(write_file(fx->manifest, "old", 3));
	memset(&f, 0, sizeof(f));
	REQUIRE_EQ(log_flusher_start(&f), 0);

	round = new_round(fx, names, 2, "from the thread", true);
	CHECK(log_flusher_submit(&f, round));
	got = log_flusher_collect(&f, false);
	CHECK(got == NULL || got == round);
	if (got == NULL)
		got = log_flusher_collect(&f, true);
	CHECK(got == round);
	if (got == round)
	{
		CHECK_ROUND_OK(round);
		CHECK_FILE_STR(fx->manifest, "from the thread");
		log_flush_round_free(round);
	}
	CHECK(!log_flusher_busy(&f));
	CHECK(log_flusher_collect(&f, false) == NULL);
	CHECK(log_flusher_collect(&f, true) == NULL);
	log_flusher_stop(&f);
}

FX_TEST(thread_failed_round_reports)
{
	const char *names[] = {"a.log", "null"};
	LogFlusher	f;
	LogFlushRound *round;

	REQUIRE(fx_file(fx, "a.log", "a"));
	REQUIRE(fx_symlink(fx, "/dev/null", "null"));
	memset(&f, 0, sizeof(f));
	REQUIRE_EQ(log_flusher_start(&f), 0);
	round = new_round(fx, names, 2, "must not appear", true);
	CHECK(log_flusher_submit(&f, round));
	if (log_flusher_collect(&f, true) != round)
		FAIL("the round was not collected");	/* stop frees it */
	else
	{
		CHECK_ROUND_FAILED(round, "fsync", 1, EINVAL);
		log_flush_round_free(round);
	}
	CHECK_ABSENT(fx->manifest);
	log_flusher_stop(&f);
}

FX_TEST(thread_refuses_while_in_flight)
{
	char		fifo[256];
	const char *gate[] = {"fifo"};
	LogFlusher	f;
	LogFlushRound *held;
	LogFlushRound *other;

	REQUIRE(fx_fifo(fx, "fifo", fifo, sizeof(fifo)));
	memset(&f, 0, sizeof(f));
	REQUIRE_EQ(log_flusher_start(&f), 0);

	/* pending, or running and blocked in open(2) of the FIFO */
	held = new_round(fx, gate, 1, "held", true);
	other = new_round(fx, NULL, 0, "other", true);
	CHECK(log_flusher_submit(&f, held));
	for (int i = 0; i < 50; i++)
	{
		CHECK(log_flusher_busy(&f));
		CHECK(!log_flusher_submit(&f, other));
		CHECK(log_flusher_collect(&f, false) == NULL);
		usleep(200);
	}
	CHECK(!log_flusher_submit(&f, held));

	/* let it through: fdatasync of a FIFO answers EINVAL */
	CHECK(fifo_release_reader(fifo));
	CHECK(log_flusher_collect(&f, true) == held);
	CHECK_ROUND_FAILED(held, "fsync", 0, EINVAL);
	CHECK_ABSENT(fx->manifest);
	CHECK(!log_flusher_busy(&f));

	/* collected: the next one is taken */
	CHECK(log_flusher_submit(&f, other));
	CHECK(log_flusher_collect(&f, true) == other);
	CHECK_ROUND_OK(other);
	CHECK_FILE_STR(fx->manifest, "other");
	log_flush_round_free(held);
	log_flush_round_free(other);
	log_flusher_stop(&f);
}

FX_TEST(thread_refuses_while_uncollected)
{
	LogFlusher	f;
	LogFlushRound *first;
	LogFlushRound *second;

	memset(&f, 0, sizeof(f));
	REQUIRE_EQ(log_flusher_start(&f), 0);
	first = new_round(fx, NULL, 0, "first", true);
	second = new_round(fx, NULL, 0, "second", true);
	CHECK(log_flusher_submit(&f, first));
	CHECK(wait_not_busy(&f));
	/* done, not collected: not busy, yet the next is refused */
	CHECK(!log_flusher_busy(&f));
	CHECK(!log_flusher_submit(&f, second));
	CHECK_FILE_STR(fx->manifest, "first");
	CHECK(log_flusher_collect(&f, false) == first);
	CHECK_ROUND_OK(first);
	CHECK(log_flusher_collect(&f, false) == NULL);
	CHECK(log_flusher_submit(&f, second));
	CHECK(log_flusher_collect(&f, true) == second);
	CHECK_ROUND_OK(second);
	CHECK_FILE_STR(fx->manifest, "second");
	log_flush_round_free(first);
	log_flush_round_free(second);
	log_flusher_stop(&f);
}

FX_TEST(thread_many_rounds)
{
	const char *names[] = {"f0", "f1", "f2", "f3", "gone"};
	char		fd_path[256];
	int			appender;
	LogFlusher	f;
	int			failed = 0;
	int			waited_polls = 0;

	for (int i = 0; i < 4; i++)
	{
		char		name[16];

		snprintf(name, sizeof(name), "f%d", i);
		REQUIRE(fx_file(fx, name, "start\n"));
	}
	appender = open(fx_path(fx, "f0", fd_path, sizeof(fd_path)), O_WRONLY | O_APPEND);
	REQUIRE(appender >= 0);
	memset(&f, 0, sizeof(f));
	REQUIRE_EQ(log_flusher_start(&f), 0);

	for (int i = 0; i < 2000 && failed == 0; i++)
	{
		char		manifest[64];
		LogFlushRound *round;
		LogFlushRound *got;

		/* the main thread keeps writing while the round runs */
		snprintf(manifest, sizeof(manifest), "manifest of round %d", i);
		round = new_round(fx, names, 5, manifest, i % 100 == 0);
		round->durable_lsn = (uint64_t) i;
		if (!log_flusher_submit(&f, round))
		{
			FAIL("round %d refused", i);
			log_flush_round_free(round);
			failed++;
			break;
		}
		if (write(appender, "line\n", 5) != 5)
			failed++;
		if (i % 2 == 0)
			got = log_flusher_collect(&f, true);
		else
		{
			/* poll, as the worker does between steps */
			double		deadline = unit_now() + 10.0;

			while ((got = log_flusher_collect(&f, false)) == NULL && unit_now() < deadline)
			{
				waited_polls++;
				sched_yield();
			}
		}
		if (got != round)
		{
			FAIL("round %d: collected %p, submitted %p", i, (void *) got, (void *) round);
			failed++;
			break;			/* the round may still be in flight: stop frees it */
		}
		if (!round->ok || round->durable_lsn != (uint64_t) i)
		{
			FAIL("round %d: ok %d step %s error %d", i, round->ok,
				 round->failed_step ? round->failed_step : "-", round->error);
			failed++;
		}
		else if (i % 250 == 0 || i == 1999)
			CHECK_FILE_STR(fx->manifest, manifest);
		log_flush_round_free(round);
	}
	CHECK_EQ(failed, 0);
	close(appender);
	log_flusher_stop(&f);
	CHECK_FILE_STR(fx->manifest, "manifest of round 1999");
	(void) waited_polls;
}

FX_TEST(thread_stop_finishes_pending_round)
{
	/*
	 * stop right after submit: the round is pending, running or done when
	 * stop takes the lock; in every case it is finished (its manifest is in
	 * place) and freed by stop (ASan reports a leak otherwise).
	 */
	for (int i = 0; i < 200; i++)
	{
		char		manifest[64];
		const char *names[] = {"gone"};
		LogFlusher	f;

		snprintf(manifest, sizeof(manifest), "pending round %d", i);
		memset(&f, 0, sizeof(f));
		REQUIRE_EQ(log_flusher_start(&f), 0);
		CHECK(log_flusher_submit(&f, new_round(fx, names, 1, manifest, i % 20 == 0)));
		log_flusher_stop(&f);
		CHECK(!f.started);
		CHECK_FILE_STR(fx->manifest, manifest);
		if (UNIT_FAILURES() > 0)
			break;
	}
}

typedef struct FifoReader
{
	char		path[256];
	char		got[256];
	ssize_t		len;
	int			error;
} FifoReader;

/* After 50 ms, reads the FIFO whole: the round writes its manifest into it */
static void *
fifo_reader(void *arg)
{
	FifoReader *r = arg;
	int			fd;

	usleep(50 * 1000);
	fd = open(r->path, O_RDONLY);
	if (fd < 0)
	{
		r->error = errno;
		return NULL;
	}
	r->len = 0;
	for (;;)
	{
		ssize_t		n = read(fd, r->got + r->len, sizeof(r->got) - 1 - (size_t) r->len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
		{
			if (n < 0)
				r->error = errno;
			break;
		}
		r->len += n;
	}
	close(fd);
	return NULL;
}

FX_TEST(thread_stop_waits_for_running_round)
{
	/*
	 * The manifest's temporary path is a FIFO: the thread blocks in open(2)
	 * until the reader opens it 50 ms later, writes the manifest into it,
	 * and renames the FIFO into place.  stop, called meanwhile, returns only
	 * after that.
	 */
	LogFlusher	f;
	FifoReader	reader;
	pthread_t	th;
	char		tmp[256];
	struct stat st;
	LogFlushRound *round;

	memset(&reader, 0, sizeof(reader));
	REQUIRE(fx_fifo(fx, "manifest.fifo", tmp, sizeof(tmp)));
	strcpy(reader.path, tmp);
	memset(&f, 0, sizeof(f));
	REQUIRE_EQ(log_flusher_start(&f), 0);
	round = new_round(fx, NULL, 0, "through the fifo", false);
	round->manifest_tmp_path = tmp;
	CHECK(log_flusher_submit(&f, round));
	REQUIRE_EQ(pthread_create(&th, NULL, fifo_reader, &reader), 0);
	usleep(10 * 1000);
	CHECK(log_flusher_busy(&f));
	log_flusher_stop(&f);		/* frees the round */
	CHECK(!f.started);
	pthread_join(th, NULL);
	CHECK_EQ(reader.error, 0);
	CHECK_EQ(reader.len, (ssize_t) strlen("through the fifo"));
	CHECK_STR_EQ(reader.got, "through the fifo");
	/* renamed into place: the round ran to its end */
	CHECK(lstat(fx->manifest, &st) == 0 && S_ISFIFO(st.st_mode));
	CHECK_ABSENT(tmp);
}

FX_TEST(thread_stop_frees_uncollected_round)
{
	const char *names[] = {"a", "b"};
	LogFlusher	f;

	memset(&f, 0, sizeof(f));
	REQUIRE_EQ(log_flusher_start(&f), 0);
	CHECK(log_flusher_submit(&f, new_round(fx, names, 2, "uncollected", true)));
	CHECK(wait_not_busy(&f));
	log_flusher_stop(&f);		/* ASan: no leak of the round it finished */
	CHECK(!f.started);
	CHECK_FILE_STR(fx->manifest, "uncollected");
}

FX_TEST(thread_start_again_after_stop)
{
	LogFlusher	f;

	memset(&f, 0, sizeof(f));
	for (int life = 0; life < 3; life++)
	{
		char		manifest[32];
		LogFlushRound *round;

		snprintf(manifest, sizeof(manifest), "life %d", life);
		REQUIRE_EQ(log_flusher_start(&f), 0);
		CHECK(f.started);
		CHECK(!log_flusher_busy(&f));
		CHECK(log_flusher_collect(&f, false) == NULL);
		round = new_round(fx, NULL, 0, manifest, false);
		CHECK(log_flusher_submit(&f, round));
		CHECK(log_flusher_collect(&f, true) == round);
		CHECK_ROUND_OK(round);
		CHECK_FILE_STR(fx->manifest, manifest);
		log_flush_round_free(round);
		log_flusher_stop(&f);
		CHECK(!f.started);
	}
}

/* The ids of this process's threads, sorted; their number */
static int
task_ids(long *ids, int max)
{
	DIR		   *d = opendir("/proc/self/task");
	struct dirent *e;
	int			n = 0;

	if (d == NULL)
		return -1;
	while ((e = readdir(d)) != NULL)
		if (e->d_name[0] != '.' && n < max)
			ids[n++] = atol(e->d_name);
	closedir(d);
	return n;
}

/* SigBlk of a thread, from /proc; false when unreadable */
static bool
task_blocked(long tid, unsigned long long *mask)
{
	char		path[64];
	char		line[256];
	FILE	   *f;
	bool		found = false;

	snprintf(path, sizeof(path), "/proc/self/task/%ld/status", tid);
	f = fopen(path, "r");
	if (f == NULL)
		return false;
	while (fgets(line, sizeof(line), f) != NULL)
		if (sscanf(line, "SigBlk: %llx", mask) == 1)
		{
			found = true;
			break;
		}
	fclose(f);
	return found;
}

TEST(thread_blocks_signals)
{
	static const int sigs[] = {SIGHUP, SIGINT, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE,
	SIGALRM, SIGTERM, SIGCHLD, SIGURG, SIGIO};
	long		before[64];
	long		after[64];
	int			nbefore;
	int			nafter;
	long		flusher_tid = -1;
	sigset_t	mask_before;
	sigset_t	mask_after;
	sigset_t	saved;
	LogFlusher	f;

	/* a known mask on the caller, whatever an earlier test left */
	sigemptyset(&mask_before);
	sigaddset(&mask_before, SIGUSR2);
	pthread_sigmask(SIG_SETMASK, &mask_before, &saved);
	nbefore = task_ids(before, 64);
	REQUIRE(nbefore > 0);
	memset(&f, 0, sizeof(f));
	REQUIRE_EQ(log_flusher_start(&f), 0);
	nafter = task_ids(after, 64);
	for (int i = 0; i < nafter; i++)
	{
		bool		known = false;

		for (int j = 0; j < nbefore; j++)
			known |= after[i] == before[j];
		if (!known)
		{
			if (flusher_tid != -1)
				FAIL("more than one new thread");
			flusher_tid = after[i];
		}
	}
	if (flusher_tid == -1)
		FAIL("no new thread in /proc/self/task");
	else
	{
		unsigned long long blocked = 0;

		CHECK(task_blocked(flusher_tid, &blocked));
		for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
			if (!(blocked & (1ULL << (sigs[i] - 1))))
				FAIL("signal %d (%s) not blocked on the flusher thread (SigBlk %llx)",
					 sigs[i], strsignal(sigs[i]), blocked);
	}
	/* the caller's mask is as it was */
	pthread_sigmask(SIG_BLOCK, NULL, &mask_after);
	for (int s = 1; s < 32; s++)
		CHECK_EQ(sigismember(&mask_after, s), sigismember(&mask_before, s));
	log_flusher_stop(&f);
	pthread_sigmask(SIG_SETMASK, &saved, NULL);
}

UNIT_MAIN()
