/*
 * test_value_sets_file.c
 *		The value sets file (src/contract/value_sets_file.c): round trips of
 *		every record kind, the byte layout, and refusal of every record that
 *		is not one whole, unchanged record of this version that a writer of
 *		a sound set writes.
 *
 * Records that the writers would never write (uid 0, absurd counts, a
 * second header) are built here by hand, with a correct length and
 * checksum, so that the payload parser itself is what refuses them.
 *
 * Inputs are always handed to the reader in malloc'd buffers of exactly
 * their length, so that ASan reports a read past the end.
 */
#include "unit.h"

#include "fnv_hash.h"
#include "hand_bytes.h"
#include "value_sets_file.h"

#define ERROR_LEN		160
#define MAX_PAYLOAD		((uint32_t) 1 << 30)

/* ------------------------------------------------- building bytes by hand */

static uint32_t
get_u32(const unsigned char *p)
{
	return (uint32_t) p[0] | (uint32_t) p[1] << 8 | (uint32_t) p[2] << 16 |
		(uint32_t) p[3] << 24;
}

static uint64_t
get_u64(const unsigned char *p)
{
	return (uint64_t) get_u32(p) | (uint64_t) get_u32(p + 4) << 32;
}

/* Appends to `file` a record around `payload`, sealed: length and checksum. */
static void
put_record(Buf *file, const Buf *payload)
{
	size_t		start = file->len;

	put_u32(file, (uint32_t) payload->len);
	put(file, payload->d, payload->len);
	put_u64(file, fnv_hash_bytes(FNV_HASH_START, file->d + start, file->len - start));
}

/* A header record's payload, of that magic, version and generation. */
static void
put_header_payload(Buf *p, const char *magic, uint32_t version, uint32_t generation)
{
	put_u8(p, 'H');
	put(p, magic, 8);
	put_u32(p, version);
	put_u32(p, generation);
}

/* A whole, good header record. */
static void
put_header(Buf *file, uint32_t generation)
{
	Buf			p = {0};

	put_header_payload(&p, "SSYNCVST", VALUE_SETS_FILE_VERSION, generation);
	put_record(file, &p);
	buf_free(&p);
}

/* A set record's payload, field by field. */
typedef struct RawSet
{
	uint64_t	uid;
	uint64_t	parent;
	uint32_t	dependency;
	uint32_t	level;
	uint32_t	role;
	uint32_t	relid;
	const char *identity;
	uint32_t	identity_len;
	uint32_t	ncolumns;		/* pairs (i + 1, 23) */
	uint32_t	nread;			/* pairs (i + 1, 25) */
	uint32_t	npartitions;	/* 16384 + i */
	int64_t		null_rows;
	uint32_t	attnum_word;	/* the first column's attnum word, when not 0 */
} RawSet;

static void
raw_set_sample(RawSet *s)
{
	memset(s, 0, sizeof(*s));
	s->uid = 42;
	s->role = 10;
	s->relid = 16400;
	s->identity = "select id from items";
	s->identity_len = (uint32_t) strlen(s->identity);
	s->ncolumns = 1;
}

static void
put_set_payload(Buf *p, const RawSet *s)
{
	put_u8(p, 'S');
	put_u64(p, s->uid);
	put_u64(p, s->parent);
	put_u32(p, s->dependency);
	put_u32(p, s->level);
	put_u32(p, s->role);
	put_u32(p, s->relid);
	put_u32(p, s->identity_len);
	put(p, s->identity, s->identity_len);
	put_u32(p, s->ncolumns);
	for (uint32_t i = 0; i < s->ncolumns; i++)
	{
		put_u32(p, i == 0 && s->attnum_word != 0 ? s->attnum_word : i + 1);
		put_u32(p, 23);
	}
	put_u32(p, s->nread);
	for (uint32_t i = 0; i < s->nread; i++)
	{
		put_u32(p, i + 1);
		put_u32(p, 25);
	}
	put_u32(p, s->npartitions);
	for (uint32_t i = 0; i < s->npartitions; i++)
		put_u32(p, 16384 + i);
	put_u64(p, (uint64_t) s->null_rows);
}

/* ------------------------------------------------------------- reading */

/* A record all zero, as the reader leaves one it refuses or the end. */
static bool
record_is_clean(const ValueSetsRecord *rec)
{
	static const ValueSetsRecord zero;

	return memcmp(rec, &zero, sizeof(zero)) == 0;
}

/*
 * Reads the record at *pos of a copy of exactly `len` bytes (the copy is
 * kept in *copy for the pointers: the caller frees it).  A refusal must
 * come with a sentence, leave *pos where it was and the record zeroed.
 */
static int
read_at(const char *file, int line, const void *bytes, size_t len, size_t *pos,
		ValueSetsRecord *rec, char *error, char **copy)
{
	size_t		before = *pos;
	int			rc;

	*copy = copy_of(bytes, len);
	memset(rec, 0xa5, sizeof(*rec));
	strcpy(error, "");
	rc = value_sets_read(*copy, len, pos, rec, error, ERROR_LEN);
	if (rc < 0)
	{
		if (strlen(error) < 10)
			unit_fail(file, line, "a refused record came with the error \"%s\"", error);
		if (error[0] < 'a' || error[0] > 'z' || error[strlen(error) - 1] == '.')
			unit_fail(file, line, "the error \"%s\" is not a sentence of the style", error);
		if (*pos != before)
			unit_fail(file, line, "a refused record moved the position from %zu to %zu",
					  before, *pos);
		if (!record_is_clean(rec))
			unit_fail(file, line, "a refused record left fields set");
	}
	else if (rc == 0)
	{
		if (*pos != before || before != len)
			unit_fail(file, line, "the end reported at %zu of %zu (from %zu)", *pos, len, before);
		if (!record_is_clean(rec))
			unit_fail(file, line, "the end left fields set");
	}
	else if (rc != 1)
		unit_fail(file, line, "value_sets_read returned %d", rc);
	else if (*pos <= before || *pos > len)
		unit_fail(file, line, "a record read moved the position from %zu to %zu of %zu",
				  before, *pos, len);
	return rc;
}

/*
 * The file's first record is a good header; the record after it is refused
 * with an error that contains `phrase`.
 */
static void
refused_after_header_at(const char *file, int line, const Buf *bytes, const char *phrase)
{
	size_t		pos = 0;
	ValueSetsRecord rec;
	char		error[ERROR_LEN];
	char	   *copy;
	int			rc;

	rc = read_at(file, line, bytes->d, bytes->len, &pos, &rec, error, &copy);
	free(copy);
	if (rc != 1 || rec.kind != VALUE_SETS_HEADER)
	{
		unit_fail(file, line, "the header was not read (%d: %s)", rc, error);
		return;
	}
	rc = read_at(file, line, bytes->d, bytes->len, &pos, &rec, error, &copy);
	free(copy);
	if (rc != -1)
		unit_fail(file, line, "a record that should be refused was read (%d)", rc);
	else if (phrase != NULL && strstr(error, phrase) == NULL)
		unit_fail(file, line, "error \"%s\" does not mention \"%s\"", error, phrase);
}

/* The first record of the file is refused with an error containing `phrase`. */
static void
refused_first_at(const char *file, int line, const Buf *bytes, const char *phrase)
{
	size_t		pos = 0;
	ValueSetsRecord rec;
	char		error[ERROR_LEN];
	char	   *copy;
	int			rc;

	rc = read_at(file, line, bytes->d, bytes->len, &pos, &rec, error, &copy);
	free(copy);
	if (rc != -1)
		unit_fail(file, line, "a first record that should be refused was read (%d)", rc);
	else if (phrase != NULL && strstr(error, phrase) == NULL)
		unit_fail(file, line, "error \"%s\" does not mention \"%s\"", error, phrase);
}

#define READ(b, n, pos, rec, err, copy) read_at(__FILE__, __LINE__, b, n, pos, rec, err, copy)
#define REFUSED_AFTER_HEADER(bytes, phrase) \
	refused_after_header_at(__FILE__, __LINE__, bytes, phrase)
#define REFUSED_FIRST(bytes, phrase) refused_first_at(__FILE__, __LINE__, bytes, phrase)

/* A file of a good header and one record of that payload. */
static void
file_with(Buf *file, const Buf *payload)
{
	memset(file, 0, sizeof(*file));
	put_header(file, 1);
	put_record(file, payload);
}

/* The record of that payload, after a header, is refused with `phrase`. */
static void
payload_refused_at(const char *file, int line, const Buf *payload, const char *phrase)
{
	Buf			f;

	file_with(&f, payload);
	refused_after_header_at(file, line, &f, phrase);
	buf_free(&f);
}

#define PAYLOAD_REFUSED(payload, phrase) payload_refused_at(__FILE__, __LINE__, payload, phrase)

/* ------------------------------------------------------------- samples */

static const int16_t attnums3[3] = {1, -1, INT16_MAX};
static const uint32_t types3[3] = {23, 27, UINT32_MAX};
static const int16_t read_attnums2[2] = {INT16_MIN, 0};
static const uint32_t read_types2[2] = {0, 1043};
static const uint32_t partitions5[5] = {16500, 16501, 16502, 0, UINT32_MAX};

/* Every byte but NUL, for an identity. */
static char identity_bytes[256];

static const char *
all_bytes_identity(void)
{
	for (int i = 1; i < 256; i++)
		identity_bytes[i - 1] = (char) i;
	identity_bytes[255] = '\0';
	return identity_bytes;
}

/* A top set: three columns, nothing read, no partitions. */
static void
sample_top_set(ValueSetsSetInfo *s)
{
	memset(s, 0, sizeof(*s));
	s->uid = 1;
	s->parent = 0;
	s->dependency = 0;
	s->level = 0;
	s->role = 10;
	s->relid = 16400;
	s->identity = all_bytes_identity();
	s->ncolumns = 3;
	s->attnums = attnums3;
	s->types = types3;
	s->nread = 0;
	s->npartitions = 0;
	s->null_rows = 0;
}

/* A nested set at the deepest level, with read columns and partitions. */
static void
sample_nested_set(ValueSetsSetInfo *s)
{
	memset(s, 0, sizeof(*s));
	s->uid = UINT64_MAX;
	s->parent = 1;
	s->dependency = UINT32_MAX;
	s->level = VALUE_SETS_MAX_LEVEL;
	s->role = UINT32_MAX;
	s->relid = 1;
	s->identity = "";
	s->ncolumns = 1;
	s->attnums = attnums3 + 2;
	s->types = types3 + 2;
	s->nread = 2;
	s->read_attnums = read_attnums2;
	s->read_types = read_types2;
	s->npartitions = 5;
	s->partitions = partitions5;
	s->null_rows = INT64_MAX;
}

#define SET_EQ(rec, info) set_eq(__FILE__, __LINE__, rec, info)

static void
pairs_eq(const char *file, int line, const char *what, const unsigned char *words,
		 uint32_t n, const int16_t *attnums, const uint32_t *types)
{
	for (uint32_t i = 0; i < n; i++)
	{
		int16_t		attnum = (int16_t) (uint16_t) value_sets_word(words, i * 2);
		uint32_t	type = value_sets_word(words, i * 2 + 1);

		if (attnum != attnums[i] || type != types[i])
			unit_fail(file, line, "%s %u: got (%d, %u), want (%d, %u)", what, i,
					  attnum, type, attnums[i], types[i]);
	}
}

static void
set_eq(const char *file, int line, const ValueSetsRecord *rec, const ValueSetsSetInfo *s)
{
	size_t		identity_len = strlen(s->identity);

	if (rec->kind != VALUE_SETS_SET)
	{
		unit_fail(file, line, "kind: got '%c', want 'S'", (char) rec->kind);
		return;
	}
	if (rec->uid != s->uid || rec->parent != s->parent || rec->dependency != s->dependency ||
		rec->level != s->level || rec->role != s->role || rec->relid != s->relid)
		unit_fail(file, line, "set: got uid %llu parent %llu dep %u level %u role %u relid %u",
				  (unsigned long long) rec->uid, (unsigned long long) rec->parent,
				  rec->dependency, rec->level, rec->role, rec->relid);
	if (rec->identity_len != identity_len ||
		(identity_len > 0 && memcmp(rec->identity, s->identity, identity_len) != 0))
		unit_fail(file, line, "identity differs (%u bytes, want %zu)", rec->identity_len,
				  identity_len);
	if (rec->identity == NULL)
		unit_fail(file, line, "identity is NULL");
	if (rec->ncolumns != s->ncolumns || rec->nread != s->nread ||
		rec->npartitions != s->npartitions)
	{
		unit_fail(file, line, "counts: got %u/%u/%u, want %u/%u/%u", rec->ncolumns, rec->nread,
				  rec->npartitions, s->ncolumns, s->nread, s->npartitions);
		return;
	}
	pairs_eq(file, line, "column", rec->columns, rec->ncolumns, s->attnums, s->types);
	pairs_eq(file, line, "read column", rec->read, rec->nread, s->read_attnums, s->read_types);
	for (uint32_t i = 0; i < rec->npartitions; i++)
		if (value_sets_word(rec->partitions, i) != s->partitions[i])
			unit_fail(file, line, "partition %u: got %u, want %u", i,
					  value_sets_word(rec->partitions, i), s->partitions[i]);
	if (rec->null_rows != s->null_rows)
		unit_fail(file, line, "null_rows: got %lld, want %lld", (long long) rec->null_rows,
				  (long long) s->null_rows);
	if (rec->generation != 0 || rec->key != NULL || rec->key_len != 0 || rec->count != 0)
		unit_fail(file, line, "a set record has fields of other kinds set");
}

/* Reads a whole buffer: one record of each expected kind, then the end. */
static void
header_then(const char *file, int line, const ValueSetsBuffer *buf, uint32_t generation,
			ValueSetsRecord *rec, size_t *pos, char **copy)
{
	char		error[ERROR_LEN];

	*pos = 0;
	if (read_at(file, line, buf->data, buf->len, pos, rec, error, copy) != 1)
		unit_fail(file, line, "the header was refused: %s", error);
	else if (rec->kind != VALUE_SETS_HEADER || rec->generation != generation)
		unit_fail(file, line, "header: got kind '%c' generation %u", (char) rec->kind,
				  rec->generation);
	free(*copy);
	*copy = NULL;
}

/* ---------------------------------------------------------- round trips */

TEST(header_round_trips)
{
	ValueSetsBuffer buf = {0};
	ValueSetsRecord rec;
	char		error[ERROR_LEN];
	char	   *copy;
	size_t		pos = 0;

	value_sets_write_header(&buf, 0xdeadbeef);
	REQUIRE(!buf.failed);
	CHECK_EQ(buf.len, 4 + 17 + 8);
	REQUIRE_EQ(READ(buf.data, buf.len, &pos, &rec, error, &copy), 1);
	CHECK_EQ(rec.kind, VALUE_SETS_HEADER);
	CHECK_UEQ(rec.generation, 0xdeadbeef);
	CHECK_UEQ(rec.uid, 0);
	CHECK(rec.identity == NULL && rec.key == NULL && rec.columns == NULL);
	CHECK_EQ(pos, buf.len);
	free(copy);
	CHECK_EQ(READ(buf.data, buf.len, &pos, &rec, error, &copy), 0);
	free(copy);
	value_sets_buffer_free(&buf);
}

TEST(sets_round_trip)
{
	ValueSetsBuffer buf = {0};
	ValueSetsSetInfo top;
	ValueSetsSetInfo nested;
	ValueSetsRecord rec;
	char		error[ERROR_LEN];
	char	   *copy;
	size_t		pos;

	sample_top_set(&top);
	sample_nested_set(&nested);
	value_sets_write_header(&buf, 3);
	value_sets_write_set(&buf, &top);
	value_sets_write_set(&buf, &nested);
	REQUIRE(!buf.failed);
	header_then(__FILE__, __LINE__, &buf, 3, &rec, &pos, &copy);
	if (READ(buf.data, buf.len, &pos, &rec, error, &copy) == 1)
	{
		SET_EQ(&rec, &top);
		CHECK_EQ(rec.identity_len, 255);
		/* the pointers point into the bytes read */
		CHECK(rec.identity > copy && rec.identity < copy + buf.len);
	}
	else
		FAIL("the top set was refused: %s", error);
	free(copy);
	if (READ(buf.data, buf.len, &pos, &rec, error, &copy) == 1)
	{
		SET_EQ(&rec, &nested);
		CHECK_EQ(rec.identity_len, 0);
	}
	else
		FAIL("the nested set was refused: %s", error);
	free(copy);
	CHECK_EQ(READ(buf.data, buf.len, &pos, &rec, error, &copy), 0);
	free(copy);
	value_sets_buffer_free(&buf);
}

TEST(counted_records_round_trip)
{
	ValueSetsBuffer buf = {0};
	ValueSetsRecord rec;
	char		error[ERROR_LEN];
	char	   *copy;
	size_t		pos;
	const char	key[] = "\0a\0\xff\x01";
	struct
	{
		ValueSetsRecordKind kind;
		uint64_t	uid;
		const char *key;
		uint32_t	key_len;
		int64_t		count;
	}			want[] = {
		{VALUE_SETS_VALUE, 1, key, sizeof(key), 1},
		{VALUE_SETS_VALUE, 2, "", 0, 0},
		{VALUE_SETS_VALUE, UINT64_MAX, NULL, 0, INT64_MAX},
		{VALUE_SETS_KEPT_ROW, 7, key, 3, 0},
		{VALUE_SETS_KEPT_ROW, 8, "", 0, INT64_MAX},
		{VALUE_SETS_NULL_ROWS, 9, NULL, 0, 0},
		{VALUE_SETS_NULL_ROWS, 10, NULL, 0, INT64_MAX},
		{VALUE_SETS_DROP, 11, NULL, 0, 0},
		{VALUE_SETS_DROP, UINT64_MAX, NULL, 0, 0},
	};
	int			n = (int) (sizeof(want) / sizeof(want[0]));

	value_sets_write_header(&buf, 0);
	for (int i = 0; i < n; i++)
		switch (want[i].kind)
		{
			case VALUE_SETS_VALUE:
				value_sets_write_value(&buf, want[i].uid, want[i].key, want[i].key_len,
									   want[i].count);
				break;
			case VALUE_SETS_KEPT_ROW:
				value_sets_write_kept_row(&buf, want[i].uid, want[i].key, want[i].key_len,
										  want[i].count);
				break;
			case VALUE_SETS_NULL_ROWS:
				value_sets_write_null_rows(&buf, want[i].uid, want[i].count);
				break;
			default:
				value_sets_write_drop(&buf, want[i].uid);
				break;
		}
	REQUIRE(!buf.failed);
	header_then(__FILE__, __LINE__, &buf, 0, &rec, &pos, &copy);
	for (int i = 0; i < n; i++)
	{
		if (READ(buf.data, buf.len, &pos, &rec, error, &copy) != 1)
		{
			FAIL("record %d was refused: %s", i, error);
			free(copy);
			break;
		}
		CHECK_EQ(rec.kind, want[i].kind);
		CHECK_UEQ(rec.uid, want[i].uid);
		/* only the fields of its kind are set */
		CHECK(rec.identity == NULL && rec.columns == NULL && rec.read == NULL &&
			  rec.partitions == NULL && rec.parent == 0 && rec.level == 0 &&
			  rec.ncolumns == 0 && rec.generation == 0);
		if (want[i].kind == VALUE_SETS_VALUE || want[i].kind == VALUE_SETS_KEPT_ROW)
		{
			CHECK_EQ(rec.key_len, want[i].key_len);
			CHECK(rec.key != NULL);
			if (rec.key_len == want[i].key_len && rec.key_len > 0)
				CHECK_MEM_EQ(rec.key, want[i].key, rec.key_len);
			CHECK_EQ(rec.count, want[i].count);
			CHECK_EQ(rec.null_rows, 0);
		}
		else
		{
			CHECK(rec.key == NULL && rec.key_len == 0 && rec.count == 0);
			CHECK_EQ(rec.null_rows, want[i].kind == VALUE_SETS_NULL_ROWS ? want[i].count : 0);
		}
		free(copy);
	}
	CHECK_EQ(READ(buf.data, buf.len, &pos, &rec, error, &copy), 0);
	free(copy);
	value_sets_buffer_free(&buf);
}

TEST(layout_is_the_documented_one)
{
	ValueSetsBuffer buf = {0};
	ValueSetsSetInfo s;
	const unsigned char *b;
	size_t		at;

	value_sets_write_header(&buf, 0x01020304);
	value_sets_write_drop(&buf, 0x1112131415161718ULL);
	value_sets_write_value(&buf, 5, "ab", 2, -2);	/* the writer writes what it is given */
	sample_nested_set(&s);
	s.identity = "q";
	value_sets_write_set(&buf, &s);
	REQUIRE(!buf.failed);
	b = (const unsigned char *) buf.data;

	/* header: 17 bytes of payload */
	CHECK_EQ(get_u32(b), 17);
	CHECK_EQ(b[4], 'H');
	CHECK_MEM_EQ(b + 5, "SSYNCVST", 8);
	CHECK_EQ(get_u32(b + 13), VALUE_SETS_FILE_VERSION);
	CHECK_EQ(get_u32(b + 17), 0x01020304);
	CHECK_UEQ(get_u64(b + 21), fnv_hash_bytes(FNV_HASH_START, b, 21));
	at = 29;

	/* drop: 9 bytes */
	CHECK_EQ(get_u32(b + at), 9);
	CHECK_EQ(b[at + 4], 'D');
	CHECK_UEQ(get_u64(b + at + 5), 0x1112131415161718ULL);
	CHECK_UEQ(get_u64(b + at + 13), fnv_hash_bytes(FNV_HASH_START, b + at, 13));
	at += 21;

	/* value: kind, uid, key length and bytes, count */
	CHECK_EQ(get_u32(b + at), 1 + 8 + 4 + 2 + 8);
	CHECK_EQ(b[at + 4], 'V');
	CHECK_UEQ(get_u64(b + at + 5), 5);
	CHECK_EQ(get_u32(b + at + 13), 2);
	CHECK_MEM_EQ(b + at + 17, "ab", 2);
	CHECK_UEQ(get_u64(b + at + 19), (uint64_t) -2);
	at += 4 + 23 + 8;

	/* set */
	CHECK_EQ(get_u32(b + at), 1 + 8 + 8 + 4 * 4 + 4 + 1 + 4 + 8 + 4 + 16 + 4 + 20 + 8);
	CHECK_EQ(b[at + 4], 'S');
	at += 5;
	CHECK_UEQ(get_u64(b + at), UINT64_MAX);
	CHECK_UEQ(get_u64(b + at + 8), 1);
	CHECK_UEQ(get_u32(b + at + 16), UINT32_MAX);	/* dependency */
	CHECK_UEQ(get_u32(b + at + 20), VALUE_SETS_MAX_LEVEL);
	CHECK_UEQ(get_u32(b + at + 24), UINT32_MAX);	/* role */
	CHECK_UEQ(get_u32(b + at + 28), 1);	/* relid */
	CHECK_UEQ(get_u32(b + at + 32), 1);
	CHECK_EQ(b[at + 36], 'q');
	at += 37;
	CHECK_UEQ(get_u32(b + at), 1);
	CHECK_UEQ(get_u32(b + at + 4), 0x7fff);
	CHECK_UEQ(get_u32(b + at + 8), UINT32_MAX);
	at += 12;
	CHECK_UEQ(get_u32(b + at), 2);
	CHECK_UEQ(get_u32(b + at + 4), 0x8000);	/* INT16_MIN: 16 bits, not sign-extended */
	CHECK_UEQ(get_u32(b + at + 8), 0);
	CHECK_UEQ(get_u32(b + at + 12), 0);
	CHECK_UEQ(get_u32(b + at + 16), 1043);
	at += 20;
	CHECK_UEQ(get_u32(b + at), 5);
	CHECK_UEQ(get_u32(b + at + 4), 16500);
	CHECK_UEQ(get_u32(b + at + 20), UINT32_MAX);
	at += 24;
	CHECK_UEQ(get_u64(b + at), INT64_MAX);
	at += 8 + 8;
	CHECK_EQ(at, buf.len);
	value_sets_buffer_free(&buf);
}

/* A long file of every kind, interleaved, read back in order to the end. */
TEST(many_records_read_back_in_order)
{
	ValueSetsBuffer buf = {0};
	ValueSetsRecord rec;
	char		error[ERROR_LEN];
	char	   *copy;
	size_t		pos;
	const uint32_t n = 5000;
	uint32_t	i;

	value_sets_write_header(&buf, 99);
	for (i = 0; i < n; i++)
	{
		char		key[32];
		uint64_t	uid = (uint64_t) i / 5 + 1;

		snprintf(key, sizeof(key), "key-%u", i);
		switch (i % 5)
		{
			case 0:
				{
					ValueSetsSetInfo s;

					sample_top_set(&s);
					s.uid = uid;
					s.null_rows = i;
					value_sets_write_set(&buf, &s);
					break;
				}
			case 1:
				value_sets_write_value(&buf, uid, key, (uint32_t) strlen(key), i);
				break;
			case 2:
				value_sets_write_kept_row(&buf, uid, key, (uint32_t) strlen(key), i);
				break;
			case 3:
				value_sets_write_null_rows(&buf, uid, i);
				break;
			case 4:
				value_sets_write_drop(&buf, uid);
				break;
		}
	}
	REQUIRE(!buf.failed);
	header_then(__FILE__, __LINE__, &buf, 99, &rec, &pos, &copy);
	copy = copy_of(buf.data, buf.len);
	for (i = 0; i < n; i++)
	{
		size_t		before = pos;
		static const ValueSetsRecordKind kinds[5] = {
			VALUE_SETS_SET, VALUE_SETS_VALUE, VALUE_SETS_KEPT_ROW, VALUE_SETS_NULL_ROWS,
			VALUE_SETS_DROP
		};
		char		key[32];

		snprintf(key, sizeof(key), "key-%u", i);
		if (value_sets_read(copy, buf.len, &pos, &rec, error, sizeof(error)) != 1)
		{
			FAIL("record %u at byte %zu was refused: %s", i, before, error);
			break;
		}
		CHECK_EQ(rec.kind, kinds[i % 5]);
		CHECK_UEQ(rec.uid, (uint64_t) i / 5 + 1);
		if (i % 5 == 1 || i % 5 == 2)
		{
			CHECK_EQ(rec.count, i);
			CHECK(rec.key_len == strlen(key) && memcmp(rec.key, key, rec.key_len) == 0);
		}
		if (i % 5 == 0 || i % 5 == 3)
			CHECK_EQ(rec.null_rows, i);
	}
	CHECK_EQ(i, n);
	CHECK_EQ(value_sets_read(copy, buf.len, &pos, &rec, error, sizeof(error)), 0);
	CHECK_EQ(pos, buf.len);
	free(copy);
	value_sets_buffer_free(&buf);
}

/* ------------------------------------------------------------ the buffer */

TEST(reset_keeps_memory_and_free_zeroes)
{
	ValueSetsBuffer buf = {0};
	ValueSetsBuffer first = {0};
	char	   *data;
	size_t		cap;

	value_sets_write_header(&buf, 1);
	value_sets_write_drop(&buf, 1);
	value_sets_write_header(&first, 1);
	value_sets_write_drop(&first, 1);
	REQUIRE(!buf.failed && buf.len > 0);
	data = buf.data;
	cap = buf.cap;
	buf.failed = true;
	value_sets_buffer_reset(&buf);
	CHECK_EQ(buf.len, 0);
	CHECK(!buf.failed);
	CHECK(buf.data == data);
	CHECK_EQ(buf.cap, cap);
	/* written again, the same bytes */
	value_sets_write_header(&buf, 1);
	value_sets_write_drop(&buf, 1);
	REQUIRE_EQ(buf.len, first.len);
	CHECK_MEM_EQ(buf.data, first.data, buf.len);
	value_sets_buffer_free(&buf);
	CHECK(buf.data == NULL && buf.len == 0 && buf.cap == 0 && !buf.failed);
	value_sets_buffer_free(&buf);	/* harmless */
	value_sets_buffer_free(&first);
}

TEST(growth_keeps_what_was_written)
{
	ValueSetsBuffer buf = {0};
	ValueSetsBuffer one = {0};
	char		big[5000];

	memset(big, 'x', sizeof(big));
	value_sets_write_header(&buf, 1);
	value_sets_write_value(&buf, 1, big, sizeof(big), 1);
	value_sets_write_value(&buf, 1, big, 3, 1);
	REQUIRE(!buf.failed);
	CHECK(buf.cap >= buf.len);
	value_sets_write_header(&one, 1);
	value_sets_write_value(&one, 1, big, sizeof(big), 1);
	value_sets_write_value(&one, 1, big, 3, 1);
	REQUIRE_EQ(one.len, buf.len);
	CHECK_MEM_EQ(one.data, buf.data, buf.len);
	value_sets_buffer_free(&buf);
	value_sets_buffer_free(&one);
}

TEST(a_failed_buffer_takes_nothing_more)
{
	ValueSetsBuffer buf = {0};
	ValueSetsSetInfo s;
	size_t		len;

	value_sets_write_header(&buf, 1);
	len = buf.len;
	buf.failed = true;
	value_sets_write_drop(&buf, 1);
	value_sets_write_value(&buf, 1, "a", 1, 1);
	value_sets_write_kept_row(&buf, 1, "a", 1, 1);
	value_sets_write_null_rows(&buf, 1, 1);
	sample_top_set(&s);
	value_sets_write_set(&buf, &s);
	value_sets_write_header(&buf, 2);
	CHECK_EQ(buf.len, len);
	CHECK(buf.failed);
	value_sets_buffer_free(&buf);
}

/* A record longer than a reader takes fails the buffer, keeping what was before. */
TEST(a_record_too_long_fails_the_buffer)
{
	ValueSetsBuffer buf = {0};
	char		tiny[1] = {'k'};
	size_t		len;

	value_sets_write_header(&buf, 1);
	value_sets_write_drop(&buf, 1);
	len = buf.len;
	/* the length alone fails it: the bytes are never read */
	value_sets_write_value(&buf, 1, tiny, MAX_PAYLOAD, 1);
	CHECK(buf.failed);
	CHECK_EQ(buf.len, len);
	value_sets_buffer_reset(&buf);
	value_sets_write_kept_row(&buf, 1, tiny, UINT32_MAX, 1);
	CHECK(buf.failed);
	CHECK_EQ(buf.len, 0);
	value_sets_buffer_free(&buf);
}

/* --------------------------------------------------------- truncations */

/* A file of every kind of record, and where each record starts. */
static void
sample_file(ValueSetsBuffer *buf, size_t *bounds, int *nbounds)
{
	ValueSetsSetInfo s;

	memset(buf, 0, sizeof(*buf));
	*nbounds = 0;
#define MARK() (bounds[(*nbounds)++] = buf->len)
	MARK();
	value_sets_write_header(buf, 5);
	MARK();
	sample_top_set(&s);
	value_sets_write_set(buf, &s);
	MARK();
	sample_nested_set(&s);
	value_sets_write_set(buf, &s);
	MARK();
	value_sets_write_value(buf, 1, "abc", 3, 2);
	MARK();
	value_sets_write_value(buf, 1, "", 0, 0);
	MARK();
	value_sets_write_kept_row(buf, UINT64_MAX, "\0\0", 2, 1);
	MARK();
	value_sets_write_null_rows(buf, 1, 4);
	MARK();
	value_sets_write_drop(buf, UINT64_MAX);
	MARK();
#undef MARK
}

TEST(every_truncation_is_refused_or_ends_at_a_record)
{
	ValueSetsBuffer buf;
	size_t		bounds[16];
	int			nbounds;
	ValueSetsRecord rec;
	char		error[ERROR_LEN];

	sample_file(&buf, bounds, &nbounds);
	REQUIRE(!buf.failed);
	REQUIRE_EQ(bounds[nbounds - 1], buf.len);
	for (size_t cut = 0; cut <= buf.len; cut++)
	{
		char	   *copy = copy_of(buf.data, cut);
		size_t		pos = 0;
		size_t		last = 0;	/* the last boundary at or before the cut */
		int			rc;
		int			nread = 0;

		for (int i = 0; i < nbounds; i++)
			if (bounds[i] <= cut)
				last = bounds[i];
		while ((rc = value_sets_read(copy, cut, &pos, &rec, error, sizeof(error))) == 1)
			nread++;
		if (last == cut)
		{
			if (rc != 0)
				FAIL("a file cut at record boundary %zu was refused: %s", cut, error);
		}
		else
		{
			if (rc != -1)
				FAIL("a file cut at byte %zu, inside a record, ended without an error", cut);
			else if (strstr(error, "cut short") == NULL)
				FAIL("a file cut at byte %zu: error \"%s\"", cut, error);
			if (pos != last)
				FAIL("a file cut at byte %zu stopped at %zu, not %zu", cut, pos, last);
			CHECK(record_is_clean(&rec));
		}
		free(copy);
	}
	value_sets_buffer_free(&buf);
}

/* Each record alone after a header, cut anywhere, is refused in place. */
TEST(each_record_cut_short_is_refused)
{
	ValueSetsBuffer buf;
	size_t		bounds[16];
	int			nbounds;

	sample_file(&buf, bounds, &nbounds);
	REQUIRE(!buf.failed);
	for (int i = 1; i + 1 < nbounds; i++)
	{
		size_t		start = bounds[i];
		size_t		end = bounds[i + 1];

		for (size_t cut = start + 1; cut < end; cut++)
		{
			size_t		pos = start;
			ValueSetsRecord rec;
			char		error[ERROR_LEN];
			char	   *copy;

			if (READ(buf.data, cut, &pos, &rec, error, &copy) != -1)
				FAIL("record %d cut at byte %zu of %zu..%zu was read", i, cut, start, end);
			free(copy);
		}
	}
	value_sets_buffer_free(&buf);
}

/* ------------------------------------------------------------- damage */

TEST(every_flipped_byte_is_refused)
{
	ValueSetsBuffer buf;
	size_t		bounds[16];
	int			nbounds;

	sample_file(&buf, bounds, &nbounds);
	REQUIRE(!buf.failed);
	for (int i = 0; i + 1 < nbounds; i++)
		for (size_t at = bounds[i]; at < bounds[i + 1]; at++)
		{
			unsigned char *copy = (unsigned char *) copy_of(buf.data, buf.len);
			size_t		pos = bounds[i];
			ValueSetsRecord rec;
			char		error[ERROR_LEN];
			char	   *again;

			copy[at] ^= 0x10;
			if (READ(copy, buf.len, &pos, &rec, error, &again) != -1)
				FAIL("a flip at byte %zu of record %d was read", at, i);
			/* in the payload or the checksum: the checksum catches it */
			else if (at >= bounds[i] + 4 && strstr(error, "checksum") == NULL)
				FAIL("a flip at byte %zu: error \"%s\"", at, error);
			free(again);
			free(copy);
		}
	value_sets_buffer_free(&buf);
}

TEST(impossible_lengths_are_refused)
{
	Buf			f = {0};
	Buf			p = {0};

	/* length 0 */
	put_header(&f, 1);
	put_u32(&f, 0);
	put_u64(&f, fnv_hash_bytes(FNV_HASH_START, f.d + f.len - 4, 4));
	REFUSED_AFTER_HEADER(&f, "impossible length");
	buf_free(&f);

	/* longer than any record: named so, not read as cut short */
	put_header(&f, 1);
	put_u32(&f, MAX_PAYLOAD + 1);
	put_u8(&f, 'D');
	put_u64(&f, 1);
	put_u64(&f, 0);
	REFUSED_AFTER_HEADER(&f, "impossible length");
	buf_free(&f);
	put_header(&f, 1);
	put_u32(&f, UINT32_MAX);
	REFUSED_AFTER_HEADER(&f, "impossible length");
	buf_free(&f);

	/* a length past the end: cut short */
	put_header(&f, 1);
	put_u8(&p, 'D');
	put_u64(&p, 1);
	put_record(&f, &p);
	f.d[f.len - 21] = 10;
	REFUSED_AFTER_HEADER(&f, "cut short");
	buf_free(&f);
	buf_free(&p);

	/* fewer bytes than a length */
	put_header(&f, 1);
	put_u8(&f, 1);
	put_u8(&f, 0);
	REFUSED_AFTER_HEADER(&f, "cut short");
	buf_free(&f);
}

TEST(an_unknown_kind_is_refused)
{
	const char	kinds[] = {'\0', 'h', 's', 'X', 'T', (char) 0xff};

	for (size_t i = 0; i < sizeof(kinds); i++)
	{
		Buf			p = {0};

		put_u8(&p, (unsigned char) kinds[i]);
		put_u64(&p, 1);
		PAYLOAD_REFUSED(&p, "no known kind");
		buf_free(&p);
	}
}

/* Each kind's payload one byte short, and one byte over. */
TEST(payloads_that_fields_do_not_fill_are_refused)
{
	for (int k = 0; k < 6; k++)
		for (int delta = -1; delta <= 1; delta += 2)
		{
			Buf			p = {0};
			Buf			f = {0};
			RawSet		s;

			switch (k)
			{
				case 0:
					raw_set_sample(&s);
					put_set_payload(&p, &s);
					break;
				case 1:
				case 2:
					put_u8(&p, k == 1 ? 'V' : 'K');
					put_u64(&p, 1);
					put_u32(&p, 2);
					put(&p, "ab", 2);
					put_u64(&p, 1);
					break;
				case 3:
					put_u8(&p, 'N');
					put_u64(&p, 1);
					put_u64(&p, 1);
					break;
				case 4:
					put_u8(&p, 'D');
					put_u64(&p, 1);
					break;
				case 5:
					put_header_payload(&p, "SSYNCVST", VALUE_SETS_FILE_VERSION, 1);
					break;
			}
			/* as it is, it is read */
			if (k == 5)
				put_record(&f, &p);
			else
				file_with(&f, &p);
			{
				size_t		pos = 0;
				ValueSetsRecord rec;
				char		error[ERROR_LEN];
				int			rc;
				char	   *copy = copy_of(f.d, f.len);

				while ((rc = value_sets_read(copy, f.len, &pos, &rec, error,
											 sizeof(error))) == 1)
					;
				if (rc != 0)
					FAIL("kind %d as written was refused: %s", k, error);
				free(copy);
			}
			buf_free(&f);
			if (delta < 0)
				p.len--;
			else
				put_u8(&p, 0);
			if (k == 5)
			{
				put_record(&f, &p);
				REFUSED_FIRST(&f, "does not decode");
				buf_free(&f);
			}
			else
				PAYLOAD_REFUSED(&p, "does not decode");
			buf_free(&p);
		}
}

TEST(counts_the_bytes_cannot_hold_are_refused)
{
	RawSet		s;
	Buf			p = {0};

	/* identity, columns, read columns, partitions: each count past the payload */
	for (int field = 0; field < 4; field++)
	{
		size_t		at;

		raw_set_sample(&s);
		put_set_payload(&p, &s);
		at = 1 + 8 + 8 + 16;	/* the identity's length */
		if (field >= 1)
			at += 4 + s.identity_len;
		if (field >= 2)
			at += 4 + 8 * s.ncolumns;
		if (field >= 3)
			at += 4 + 8 * s.nread;
		for (int i = 0; i < 4; i++)
			p.d[at + i] = 0xff;
		PAYLOAD_REFUSED(&p, "does not decode");
		p.d[at] = 0xfe;
		p.d[at + 3] = 0x0f;
		PAYLOAD_REFUSED(&p, "does not decode");
		buf_free(&p);
	}
	/* a key's length */
	put_u8(&p, 'V');
	put_u64(&p, 1);
	put_u32(&p, UINT32_MAX);
	put_u64(&p, 1);
	PAYLOAD_REFUSED(&p, "does not decode");
	buf_free(&p);
}

TEST(uid_0_is_refused)
{
	RawSet		s;
	Buf			p = {0};

	raw_set_sample(&s);
	s.uid = 0;
	put_set_payload(&p, &s);
	PAYLOAD_REFUSED(&p, "names set 0");
	buf_free(&p);
	for (int k = 0; k < 4; k++)
	{
		put_u8(&p, "VKND"[k]);
		put_u64(&p, 0);
		if (k < 2)
		{
			put_u32(&p, 1);
			put_u8(&p, 'a');
		}
		if (k < 3)
			put_u64(&p, 1);
		PAYLOAD_REFUSED(&p, "names set 0");
		buf_free(&p);
	}
}

TEST(set_levels_and_parents_must_agree)
{
	RawSet		s;
	Buf			p = {0};
	Buf			f = {0};
	size_t		pos = 0;
	ValueSetsRecord rec;
	char		error[ERROR_LEN];
	char	   *copy;

	raw_set_sample(&s);
	s.level = VALUE_SETS_MAX_LEVEL + 1;
	s.parent = 7;
	put_set_payload(&p, &s);
	PAYLOAD_REFUSED(&p, "deeper");
	buf_free(&p);
	s.level = UINT32_MAX;
	put_set_payload(&p, &s);
	PAYLOAD_REFUSED(&p, "deeper");
	buf_free(&p);

	raw_set_sample(&s);
	s.level = 0;
	s.parent = 7;
	put_set_payload(&p, &s);
	PAYLOAD_REFUSED(&p, "level 0 yet has a parent");
	buf_free(&p);

	raw_set_sample(&s);
	s.level = 1;
	s.parent = 0;
	put_set_payload(&p, &s);
	PAYLOAD_REFUSED(&p, "no parent");
	buf_free(&p);

	/* the deepest level, with a parent, is read */
	raw_set_sample(&s);
	s.level = VALUE_SETS_MAX_LEVEL;
	s.parent = 7;
	put_set_payload(&p, &s);
	file_with(&f, &p);
	CHECK_EQ(READ(f.d, f.len, &pos, &rec, error, &copy), 1);
	free(copy);
	if (READ(f.d, f.len, &pos, &rec, error, &copy) == 1)
	{
		CHECK_EQ(rec.level, VALUE_SETS_MAX_LEVEL);
		CHECK_UEQ(rec.parent, 7);
	}
	else
		FAIL("a set at the deepest level was refused: %s", error);
	free(copy);
	buf_free(&f);
	buf_free(&p);
}

TEST(column_counts_are_bounded)
{
	RawSet		s;
	Buf			p = {0};
	Buf			f = {0};
	ValueSetsRecord rec;
	char		error[ERROR_LEN];
	char	   *copy;
	size_t		pos = 0;

	raw_set_sample(&s);
	s.ncolumns = 0;
	put_set_payload(&p, &s);
	PAYLOAD_REFUSED(&p, "selects no columns");
	buf_free(&p);

	s.ncolumns = VALUE_SETS_MAX_COLUMNS + 1;
	put_set_payload(&p, &s);
	PAYLOAD_REFUSED(&p, "more than a table has");
	buf_free(&p);

	s.ncolumns = 1;
	s.nread = VALUE_SETS_MAX_COLUMNS + 1;
	put_set_payload(&p, &s);
	PAYLOAD_REFUSED(&p, "reads more columns");
	buf_free(&p);

	/* as many as a table has, both: read */
	s.ncolumns = VALUE_SETS_MAX_COLUMNS;
	s.nread = VALUE_SETS_MAX_COLUMNS;
	s.npartitions = 1000;
	put_set_payload(&p, &s);
	file_with(&f, &p);
	CHECK_EQ(READ(f.d, f.len, &pos, &rec, error, &copy), 1);
	free(copy);
	if (READ(f.d, f.len, &pos, &rec, error, &copy) == 1)
	{
		CHECK_EQ(rec.ncolumns, VALUE_SETS_MAX_COLUMNS);
		CHECK_EQ(rec.nread, VALUE_SETS_MAX_COLUMNS);
		CHECK_EQ(rec.npartitions, 1000);
		CHECK_EQ(value_sets_word(rec.columns, (VALUE_SETS_MAX_COLUMNS - 1) * 2),
				 VALUE_SETS_MAX_COLUMNS);
		CHECK_EQ(value_sets_word(rec.read, (VALUE_SETS_MAX_COLUMNS - 1) * 2 + 1), 25);
		CHECK_EQ(value_sets_word(rec.partitions, 999), 16384 + 999);
	}
	else
		FAIL("a set of %d columns was refused: %s", VALUE_SETS_MAX_COLUMNS, error);
	free(copy);
	buf_free(&f);
	buf_free(&p);
}

/* Bytes no writer writes, for a canonical encoding. */
TEST(non_canonical_sets_are_refused)
{
	RawSet		s;
	Buf			p = {0};

	raw_set_sample(&s);
	s.attnum_word = 0x10000;
	put_set_payload(&p, &s);
	PAYLOAD_REFUSED(&p, "column number out of range");
	buf_free(&p);
	s.attnum_word = 0xffffffff;	/* -1 sign-extended: written as 0xffff */
	put_set_payload(&p, &s);
	PAYLOAD_REFUSED(&p, "column number out of range");
	buf_free(&p);

	raw_set_sample(&s);
	s.identity = "select\0id";
	s.identity_len = 9;
	put_set_payload(&p, &s);
	PAYLOAD_REFUSED(&p, "NUL");
	buf_free(&p);
}

TEST(negative_counts_are_refused)
{
	RawSet		s;
	Buf			p = {0};

	for (int k = 0; k < 2; k++)
	{
		put_u8(&p, "VK"[k]);
		put_u64(&p, 1);
		put_u32(&p, 1);
		put_u8(&p, 'a');
		put_u64(&p, (uint64_t) -1);
		PAYLOAD_REFUSED(&p, "negative count");
		buf_free(&p);
		put_u8(&p, "VK"[k]);
		put_u64(&p, 1);
		put_u32(&p, 0);
		put_u64(&p, (uint64_t) INT64_MIN);
		PAYLOAD_REFUSED(&p, "negative count");
		buf_free(&p);
	}
	put_u8(&p, 'N');
	put_u64(&p, 1);
	put_u64(&p, (uint64_t) -5);
	PAYLOAD_REFUSED(&p, "negative number of null rows");
	buf_free(&p);

	raw_set_sample(&s);
	s.null_rows = -1;
	put_set_payload(&p, &s);
	PAYLOAD_REFUSED(&p, "negative number of null rows");
	buf_free(&p);
}

/* ----------------------------------------------------------- the header */

TEST(a_file_must_start_with_its_header)
{
	Buf			f = {0};
	Buf			p = {0};
	ValueSetsBuffer buf = {0};

	/* a record of another kind first */
	value_sets_write_drop(&buf, 1);
	value_sets_write_header(&buf, 1);
	REQUIRE(!buf.failed);
	put(&f, buf.data, buf.len);
	REFUSED_FIRST(&f, "does not start with a header");
	buf_free(&f);
	value_sets_buffer_free(&buf);

	/* another magic */
	put_header_payload(&p, "SSYNCVSX", VALUE_SETS_FILE_VERSION, 1);
	put_record(&f, &p);
	REFUSED_FIRST(&f, "not a shape_sync value sets file");
	buf_free(&f);
	buf_free(&p);

	/* too short for its magic */
	put_u8(&p, 'H');
	put(&p, "SSYNC", 5);
	put_record(&f, &p);
	REFUSED_FIRST(&f, "not a shape_sync value sets file");
	buf_free(&f);
	buf_free(&p);

	/* not a record at all */
	put(&f, "SSYNCVST\1\0\0\0", 12);
	REFUSED_FIRST(&f, NULL);
	buf_free(&f);

	/* an empty file is just the end */
	{
		size_t		pos = 0;
		ValueSetsRecord rec;
		char		error[ERROR_LEN];
		char	   *copy;

		CHECK_EQ(READ("", 0, &pos, &rec, error, &copy), 0);
		free(copy);
	}
}

TEST(another_version_is_refused_by_name)
{
	Buf			f = {0};
	Buf			p = {0};
	char		want[64];

	snprintf(want, sizeof(want), "format version %u, not %u", VALUE_SETS_FILE_VERSION + 1,
			 VALUE_SETS_FILE_VERSION);
	put_header_payload(&p, "SSYNCVST", VALUE_SETS_FILE_VERSION + 1, 1);
	put_record(&f, &p);
	REFUSED_FIRST(&f, want);
	buf_free(&f);

	/* a later version's header may be longer: still named by its version */
	put_u64(&p, 12345);
	put_record(&f, &p);
	REFUSED_FIRST(&f, want);
	buf_free(&f);
	buf_free(&p);

	put_header_payload(&p, "SSYNCVST", 0, 1);
	put_record(&f, &p);
	REFUSED_FIRST(&f, "format version 0, not");
	buf_free(&f);
	buf_free(&p);
}

TEST(a_second_header_is_refused)
{
	ValueSetsBuffer buf = {0};
	Buf			f = {0};

	value_sets_write_header(&buf, 1);
	value_sets_write_header(&buf, 2);
	put(&f, buf.data, buf.len);
	REFUSED_AFTER_HEADER(&f, "second header");
	buf_free(&f);
	value_sets_buffer_reset(&buf);

	value_sets_write_header(&buf, 1);
	value_sets_write_drop(&buf, 1);
	value_sets_write_header(&buf, 1);
	REQUIRE(!buf.failed);
	{
		size_t		pos = 0;
		ValueSetsRecord rec;
		char		error[ERROR_LEN];
		char	   *copy = copy_of(buf.data, buf.len);

		CHECK_EQ(value_sets_read(copy, buf.len, &pos, &rec, error, sizeof(error)), 1);
		CHECK_EQ(value_sets_read(copy, buf.len, &pos, &rec, error, sizeof(error)), 1);
		CHECK_EQ(value_sets_read(copy, buf.len, &pos, &rec, error, sizeof(error)), -1);
		CHECK(strstr(error, "second header") != NULL);
		CHECK_EQ(pos, buf.len - 29);
		free(copy);
	}
	value_sets_buffer_free(&buf);
}

/* ------------------------------------------------------------- errors */

TEST(a_refusal_changes_nothing)
{
	ValueSetsBuffer buf = {0};
	ValueSetsRecord rec;
	char		error[ERROR_LEN];
	unsigned char *copy;
	size_t		pos = 0;
	size_t		second;

	value_sets_write_header(&buf, 1);
	value_sets_write_value(&buf, 1, "k", 1, 3);
	REQUIRE(!buf.failed);
	copy = (unsigned char *) copy_of(buf.data, buf.len);
	REQUIRE_EQ(value_sets_read((char *) copy, buf.len, &pos, &rec, error, sizeof(error)), 1);
	second = pos;
	copy[buf.len - 1] ^= 1;
	memset(&rec, 0x5a, sizeof(rec));
	CHECK_EQ(value_sets_read((char *) copy, buf.len, &pos, &rec, error, sizeof(error)), -1);
	CHECK_EQ(pos, second);
	CHECK(record_is_clean(&rec));
	/* again: the same */
	CHECK_EQ(value_sets_read((char *) copy, buf.len, &pos, &rec, error, sizeof(error)), -1);
	CHECK_EQ(pos, second);
	/* mended, it reads */
	copy[buf.len - 1] ^= 1;
	CHECK_EQ(value_sets_read((char *) copy, buf.len, &pos, &rec, error, sizeof(error)), 1);
	CHECK_EQ(rec.count, 3);
	CHECK_EQ(pos, buf.len);
	free(copy);
	value_sets_buffer_free(&buf);
}

TEST(a_position_past_the_end_is_refused)
{
	ValueSetsBuffer buf = {0};
	ValueSetsRecord rec;
	char		error[ERROR_LEN];
	char	   *copy;
	size_t		pos;

	value_sets_write_header(&buf, 1);
	pos = buf.len + 1;
	CHECK_EQ(READ(buf.data, buf.len, &pos, &rec, error, &copy), -1);
	CHECK_EQ(pos, buf.len + 1);
	free(copy);
	value_sets_buffer_free(&buf);
}

TEST(a_short_error_buffer_is_respected)
{
	ValueSetsBuffer buf = {0};
	ValueSetsRecord rec;
	char		error[8];
	char	   *copy;
	size_t		pos = 0;

	value_sets_write_drop(&buf, 1);
	copy = copy_of(buf.data, buf.len);
	memset(error, 'x', sizeof(error));
	CHECK_EQ(value_sets_read(copy, buf.len, &pos, &rec, error, 5), -1);
	CHECK_EQ(strlen(error), 4);
	CHECK_EQ(error[5], 'x');
	/* no buffer at all */
	CHECK_EQ(value_sets_read(copy, buf.len, &pos, &rec, NULL, 0), -1);
	CHECK_EQ(pos, 0);
	free(copy);
	value_sets_buffer_free(&buf);
}

TEST(checksum_is_fnv1a_64_of_length_and_payload)
{
	ValueSetsBuffer buf = {0};
	const unsigned char *b;
	uint64_t	h = 0xcbf29ce484222325ULL;

	value_sets_write_drop(&buf, 0x0807060504030201ULL);
	REQUIRE_EQ(buf.len, 4 + 9 + 8);
	b = (const unsigned char *) buf.data;
	/* FNV-1a by hand, not through fnv_hash.h */
	for (int i = 0; i < 13; i++)
	{
		h ^= b[i];
		h *= 0x100000001b3ULL;
	}
	CHECK_UEQ(get_u64(b + 13), h);
	value_sets_buffer_free(&buf);
}

UNIT_MAIN()
