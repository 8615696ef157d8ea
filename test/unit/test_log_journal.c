/*
 * test_log_journal.c
 *		The journal of the shape log files (src/contract/log_journal.c):
 *		what a round appends comes back into data files that lost it, a
 *		record cut short or damaged ends the replay, files that are gone are
 *		skipped and never made, and a replayed journal is empty.
 *
 * "Lost" is made by hand: a data file cut back (or overwritten) after its
 * bytes went to the journal, as an operating system crash would leave a
 * file whose pages never reached the disk.
 */
#include "unit.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log_journal.h"

static char dir[256];
static char journal[300];
static char *buffer;

static void
write_file(const char *name, const char *bytes, size_t n)
{
	char		path[512];
	int			fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd < 0 || write(fd, bytes, n) != (ssize_t) n)
		abort();
	close(fd);
}

/* the file's bytes (malloc'd, NUL-terminated), its length in *n; NULL when absent */
static char *
read_file(const char *path, size_t *n)
{
	struct stat st;
	char	   *bytes;
	int			fd = open(path, O_RDONLY);

	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) != 0 || (bytes = malloc((size_t) st.st_size + 1)) == NULL)
		abort();
	if (read(fd, bytes, (size_t) st.st_size) != st.st_size)
		abort();
	close(fd);
	bytes[st.st_size] = '\0';
	*n = (size_t) st.st_size;
	return bytes;
}

static char *
read_data(const char *name, size_t *n)
{
	char		path[512];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return read_file(path, n);
}

static void
cut_file(const char *name, off_t length)
{
	char		path[512];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	if (truncate(path, length) != 0)
		abort();
}

static int
open_journal(void)
{
	return open(journal, O_WRONLY | O_CREAT | O_APPEND, 0600);
}

static uint64_t
journal_length(void)
{
	struct stat st;

	return stat(journal, &st) == 0 ? (uint64_t) st.st_size : 0;
}

TEST(setup)
{
	snprintf(dir, sizeof(dir), "/tmp/test_log_journal.XXXXXX");
	REQUIRE(mkdtemp(dir) != NULL);
	snprintf(journal, sizeof(journal), "%s/journal", dir);
	buffer = malloc(LOG_JOURNAL_RECORD_DATA_MAX);
	REQUIRE(buffer != NULL);
}

/* two files grow over two rounds; they lose their tails; the replay gives them back */
TEST(replay_gives_back_what_files_lost)
{
	int			fd = open_journal();
	uint64_t	bytes = 0;
	LogJournalReplay r;
	char		failed[256] = "";
	size_t		n;
	char	   *a;
	char	   *b;

	REQUIRE(fd >= 0);
	write_file("a.1.log", "[one]", 5);
	write_file("b.1.log", "[uno]", 5);
	CHECK_EQ(log_journal_append(fd, dir, "a.1.log", 0, 5, buffer, &bytes), 0);
	CHECK_EQ(log_journal_append(fd, dir, "b.1.log", 0, 5, buffer, &bytes), 0);
	write_file("a.1.log", "[one][two]", 10);
	CHECK_EQ(log_journal_append(fd, dir, "a.1.log", 5, 10, buffer, &bytes), 0);
	close(fd);
	CHECK_EQ(bytes, journal_length());
	CHECK_EQ(bytes, 3 * LOG_JOURNAL_RECORD_HEADER + 3 * 7 + 15);

	cut_file("a.1.log", 3);
	cut_file("b.1.log", 0);
	CHECK_EQ(log_journal_replay(journal, dir, &r, failed, sizeof(failed)), 0);
	CHECK_EQ(r.records, 3);
	CHECK_EQ(r.files, 2);
	CHECK_EQ(r.skipped, 0);
	CHECK(!r.torn);
	a = read_data("a.1.log", &n);
	CHECK(a != NULL && n == 10 && memcmp(a, "[one][two]", 10) == 0);
	free(a);
	b = read_data("b.1.log", &n);
	CHECK(b != NULL && n == 5 && memcmp(b, "[uno]", 5) == 0);
	free(b);
	CHECK_EQ(journal_length(), 0);
	/* again: nothing to do */
	CHECK_EQ(log_journal_replay(journal, dir, &r, failed, sizeof(failed)), 0);
	CHECK_EQ(r.records, 0);
}

/* a file larger than a record: several records, in order */
TEST(large_pieces_take_several_records)
{
	size_t		len = LOG_JOURNAL_RECORD_DATA_MAX * 2 + 12345;
	char	   *big = malloc(len);
	char	   *back;
	size_t		n;
	uint64_t	bytes = 0;
	LogJournalReplay r;
	char		failed[256];
	int			fd = open_journal();

	REQUIRE(big != NULL && fd >= 0);
	for (size_t i = 0; i < len; i++)
		big[i] = (char) ('a' + (i * 7) % 26);
	write_file("big.1.log", big, len);
	CHECK_EQ(log_journal_append(fd, dir, "big.1.log", 100, len, buffer, &bytes), 0);
	close(fd);
	CHECK_EQ(bytes, 3 * (LOG_JOURNAL_RECORD_HEADER + 9) + len - 100);
	/* the file loses all but its first 100 bytes, and its middle is scribbled over */
	cut_file("big.1.log", 100);
	CHECK_EQ(log_journal_replay(journal, dir, &r, failed, sizeof(failed)), 0);
	CHECK_EQ(r.records, 3);
	back = read_data("big.1.log", &n);
	CHECK(back != NULL && n == len && memcmp(back, big, len) == 0);
	free(back);
	free(big);
}

/* a record cut short (a round that never finished) ends the replay; those before it hold */
TEST(torn_tail_ends_the_replay)
{
	int			fd = open_journal();
	uint64_t	bytes = 0;
	LogJournalReplay r;
	char		failed[256];
	char	   *c;
	size_t		n;

	REQUIRE(fd >= 0);
	write_file("c.1.log", "0123456789", 10);
	CHECK_EQ(log_journal_append(fd, dir, "c.1.log", 0, 4, buffer, &bytes), 0);
	CHECK_EQ(log_journal_append(fd, dir, "c.1.log", 4, 10, buffer, &bytes), 0);
	close(fd);
	/* the second record loses its last byte */
	REQUIRE(truncate(journal, (off_t) bytes - 1) == 0);
	cut_file("c.1.log", 0);
	CHECK_EQ(log_journal_replay(journal, dir, &r, failed, sizeof(failed)), 0);
	CHECK_EQ(r.records, 1);
	CHECK(r.torn);
	c = read_data("c.1.log", &n);
	CHECK(c != NULL && n == 4 && memcmp(c, "0123", 4) == 0);
	free(c);
	CHECK_EQ(journal_length(), 0);
}

/* a damaged byte in a record's data: its checksum fails, the replay stops there */
TEST(damaged_record_ends_the_replay)
{
	int			fd = open_journal();
	uint64_t	bytes = 0;
	uint64_t	first;
	LogJournalReplay r;
	char		failed[256];
	char	   *d;
	size_t		n;

	REQUIRE(fd >= 0);
	write_file("d.1.log", "abcdefgh", 8);
	CHECK_EQ(log_journal_append(fd, dir, "d.1.log", 0, 4, buffer, &bytes), 0);
	first = bytes;
	CHECK_EQ(log_journal_append(fd, dir, "d.1.log", 4, 8, buffer, &bytes), 0);
	close(fd);
	fd = open(journal, O_WRONLY);
	REQUIRE(fd >= 0);
	REQUIRE(pwrite(fd, "X", 1, (off_t) (first + LOG_JOURNAL_RECORD_HEADER + 7 + 1)) == 1);
	close(fd);
	write_file("d.1.log", "", 0);
	CHECK_EQ(log_journal_replay(journal, dir, &r, failed, sizeof(failed)), 0);
	CHECK_EQ(r.records, 1);
	CHECK(r.torn);
	d = read_data("d.1.log", &n);
	CHECK(d != NULL && n == 4 && memcmp(d, "abcd", 4) == 0);
	free(d);
}

/* a file removed since (its shape is gone): skipped, never made again */
TEST(files_gone_are_skipped_not_made)
{
	int			fd = open_journal();
	uint64_t	bytes = 0;
	LogJournalReplay r;
	char		failed[256];
	char		path[512];
	size_t		n;

	REQUIRE(fd >= 0);
	write_file("e.1.log", "gone", 4);
	CHECK_EQ(log_journal_append(fd, dir, "e.1.log", 0, 4, buffer, &bytes), 0);
	close(fd);
	snprintf(path, sizeof(path), "%s/e.1.log", dir);
	REQUIRE(unlink(path) == 0);
	CHECK_EQ(log_journal_replay(journal, dir, &r, failed, sizeof(failed)), 0);
	CHECK_EQ(r.skipped, 1);
	CHECK_EQ(r.records, 0);
	CHECK(read_file(path, &n) == NULL);
	/* and appending a file that is gone writes nothing */
	fd = open_journal();
	REQUIRE(fd >= 0);
	bytes = 0;
	CHECK_EQ(log_journal_append(fd, dir, "e.1.log", 0, 4, buffer, &bytes), 1);
	CHECK_EQ(bytes, 0);
	close(fd);
	CHECK_EQ(journal_length(), 0);
}

/* names that would leave the directory are refused when appending */
TEST(names_stay_in_the_directory)
{
	int			fd = open_journal();
	uint64_t	bytes = 0;

	REQUIRE(fd >= 0);
	CHECK_EQ(log_journal_append(fd, dir, "../x.log", 0, 1, buffer, &bytes), -1);
	CHECK_EQ(log_journal_append(fd, dir, "..", 0, 1, buffer, &bytes), -1);
	CHECK_EQ(log_journal_append(fd, dir, "", 0, 1, buffer, &bytes), -1);
	/* nor any file of the store but a data file */
	write_file("manifest", "m", 1);
	CHECK_EQ(log_journal_append(fd, dir, "manifest", 0, 1, buffer, &bytes), -1);
	CHECK_EQ(log_journal_append(fd, dir, ".log", 0, 1, buffer, &bytes), -1);
	close(fd);
	CHECK_EQ(journal_length(), 0);
}

/* no journal at all: nothing to replay */
TEST(no_journal_is_empty)
{
	LogJournalReplay r;
	char		failed[256];

	unlink(journal);
	CHECK_EQ(log_journal_replay(journal, dir, &r, failed, sizeof(failed)), 0);
	CHECK_EQ(r.records, 0);
	CHECK(!r.torn);
}

TEST(cleanup)
{
	char		cmd[300];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	CHECK_EQ(system(cmd), 0);
	free(buffer);
}

UNIT_MAIN()
