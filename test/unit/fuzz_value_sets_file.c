/*
 * fuzz_value_sets_file.c
 *		The value sets file's reader (value_sets_file.c) on arbitrary bytes.
 *
 * Each input is read record by record, to its end or its first refusal,
 * as it is; again after each of its records is resealed in place (its
 * length, or what is left when it claims more, and its checksum written to
 * match its bytes), so that mutations reach the payload parser instead of
 * stopping at the checksum; and once more as the payload of one record
 * after a good header.
 *
 * Oracles: a refusal comes with a sentence and leaves the position where
 * it was and the record zeroed; the end is reported only at the end; an
 * accepted record re-encodes, through the writers, to exactly the bytes it
 * was read from (the encoding is canonical), has only its kind's fields
 * set, and any shorter prefix of it is refused.
 *
 * The seeds in corpus/fuzz_value_sets_file/ are files that the writers
 * write; built with -DFUZZ_VALUE_SETS_FILE_SEEDS this file is a program
 * that writes them again into the folder it is given.
 */
#include "fuzz_common.h"

#include "fnv_hash.h"
#include "value_sets_file.h"

#define HEAD		4
#define TAIL		8
#define ERROR_LEN	160

/* Exactly n bytes in their own allocation, so that ASan sees an overread. */
static char *
exact_copy(const void *p, size_t n)
{
	char	   *c = malloc(n ? n : 1);

	FUZZ_ASSERT(c != NULL);
	if (n > 0)
		memcpy(c, p, n);
	else
		c[0] = '\0';			/* never read: quiets gcc */
	return c;
}

static bool
record_is_clean(const ValueSetsRecord *rec)
{
	static const ValueSetsRecord zero;

	return memcmp(rec, &zero, sizeof(zero)) == 0;
}

/* (attnum, type) words into the writer's arrays; malloc'd, to be freed */
static void
unpack_pairs(const unsigned char *words, uint32_t n, int16_t **attnums, uint32_t **types)
{
	*attnums = malloc(sizeof(int16_t) * (n ? n : 1));
	*types = malloc(sizeof(uint32_t) * (n ? n : 1));
	FUZZ_ASSERT(*attnums != NULL && *types != NULL);
	for (uint32_t i = 0; i < n; i++)
	{
		(*attnums)[i] = (int16_t) (uint16_t) value_sets_word(words, i * 2);
		(*types)[i] = value_sets_word(words, i * 2 + 1);
	}
}

/* Writes `rec` again, as its kind's writer does. */
static void
encode_again(ValueSetsBuffer *buf, const ValueSetsRecord *rec)
{
	switch (rec->kind)
	{
		case VALUE_SETS_HEADER:
			value_sets_write_header(buf, rec->generation);
			break;
		case VALUE_SETS_SET:
			{
				ValueSetsSetInfo s;
				int16_t    *attnums;
				uint32_t   *types;
				int16_t    *read_attnums;
				uint32_t   *read_types;
				uint32_t   *partitions;
				char	   *identity;

				/* an identity is a string: the reader refuses a NUL inside */
				FUZZ_ASSERT(rec->identity != NULL);
				FUZZ_ASSERT(memchr(rec->identity, '\0', rec->identity_len) == NULL);
				identity = malloc((size_t) rec->identity_len + 1);
				FUZZ_ASSERT(identity != NULL);
				memcpy(identity, rec->identity, rec->identity_len);
				identity[rec->identity_len] = '\0';
				unpack_pairs(rec->columns, rec->ncolumns, &attnums, &types);
				unpack_pairs(rec->read, rec->nread, &read_attnums, &read_types);
				partitions = malloc(sizeof(uint32_t) * (rec->npartitions ? rec->npartitions : 1));
				FUZZ_ASSERT(partitions != NULL);
				for (uint32_t i = 0; i < rec->npartitions; i++)
					partitions[i] = value_sets_word(rec->partitions, i);
				memset(&s, 0, sizeof(s));
				s.uid = rec->uid;
				s.parent = rec->parent;
				s.dependency = rec->dependency;
				s.level = rec->level;
				s.role = rec->role;
				s.relid = rec->relid;
				s.identity = identity;
				s.ncolumns = rec->ncolumns;
				s.attnums = attnums;
				s.types = types;
				s.nread = rec->nread;
				s.read_attnums = read_attnums;
				s.read_types = read_types;
				s.npartitions = rec->npartitions;
				s.partitions = partitions;
				s.null_rows = rec->null_rows;
				value_sets_write_set(buf, &s);
				free(identity);
				free(attnums);
				free(types);
				free(read_attnums);
				free(read_types);
				free(partitions);
				break;
			}
		case VALUE_SETS_VALUE:
			value_sets_write_value(buf, rec->uid, rec->key, rec->key_len, rec->count);
			break;
		case VALUE_SETS_KEPT_ROW:
			value_sets_write_kept_row(buf, rec->uid, rec->key, rec->key_len, rec->count);
			break;
		case VALUE_SETS_NULL_ROWS:
			value_sets_write_null_rows(buf, rec->uid, rec->null_rows);
			break;
		case VALUE_SETS_DROP:
			value_sets_write_drop(buf, rec->uid);
			break;
		default:
			FUZZ_ASSERT(!"a record of no known kind was read");
	}
}

/* What a record read says, within what the reader promises. */
static void
check_record(const ValueSetsRecord *rec, size_t at)
{
	bool		counted = rec->kind == VALUE_SETS_VALUE || rec->kind == VALUE_SETS_KEPT_ROW;
	bool		set = rec->kind == VALUE_SETS_SET;

	FUZZ_ASSERT((rec->kind == VALUE_SETS_HEADER) == (at == 0));
	if (rec->kind == VALUE_SETS_HEADER)
		FUZZ_ASSERT(rec->uid == 0);
	else
		FUZZ_ASSERT(rec->uid != 0 && rec->generation == 0);
	if (set)
	{
		FUZZ_ASSERT(rec->level <= VALUE_SETS_MAX_LEVEL);
		FUZZ_ASSERT((rec->level == 0) == (rec->parent == 0));
		FUZZ_ASSERT(rec->ncolumns >= 1 && rec->ncolumns <= VALUE_SETS_MAX_COLUMNS);
		FUZZ_ASSERT(rec->nread <= VALUE_SETS_MAX_COLUMNS);
		FUZZ_ASSERT(rec->columns != NULL && rec->read != NULL && rec->partitions != NULL);
	}
	else
		FUZZ_ASSERT(rec->parent == 0 && rec->dependency == 0 && rec->level == 0 &&
					rec->role == 0 && rec->relid == 0 && rec->identity == NULL &&
					rec->identity_len == 0 && rec->ncolumns == 0 && rec->columns == NULL &&
					rec->nread == 0 && rec->read == NULL && rec->npartitions == 0 &&
					rec->partitions == NULL);
	if (counted)
		FUZZ_ASSERT(rec->key != NULL && rec->count >= 0 && rec->null_rows == 0);
	else
		FUZZ_ASSERT(rec->key == NULL && rec->key_len == 0 && rec->count == 0);
	if (set || rec->kind == VALUE_SETS_NULL_ROWS)
		FUZZ_ASSERT(rec->null_rows >= 0);
	else if (!counted)
		FUZZ_ASSERT(rec->null_rows == 0);
}

/* Reads bytes[0, len) to its end or its first refusal, checking each step. */
static void
check_file(const char *bytes, size_t len)
{
	size_t		pos = 0;
	ValueSetsBuffer again = {0};

	for (;;)
	{
		size_t		at = pos;
		ValueSetsRecord rec;
		char		error[ERROR_LEN];
		int			rc;

		memset(&rec, 0x5a, sizeof(rec));
		error[0] = '\0';
		rc = value_sets_read(bytes, len, &pos, &rec, error, sizeof(error));
		if (rc < 0)
		{
			FUZZ_ASSERT(rc == -1);
			FUZZ_ASSERT(error[0] != '\0' && strlen(error) < sizeof(error));
			FUZZ_ASSERT(pos == at);
			FUZZ_ASSERT(record_is_clean(&rec));
			break;
		}
		if (rc == 0)
		{
			FUZZ_ASSERT(pos == len && at == len);
			FUZZ_ASSERT(record_is_clean(&rec));
			break;
		}
		FUZZ_ASSERT(rc == 1);
		FUZZ_ASSERT(pos > at && pos - at >= HEAD + 1 + TAIL && pos <= len);
		check_record(&rec, at);

		/* canonical: the writer writes exactly these bytes */
		value_sets_buffer_reset(&again);
		encode_again(&again, &rec);
		FUZZ_ASSERT(!again.failed);
		FUZZ_ASSERT(again.len == pos - at);
		FUZZ_ASSERT(memcmp(again.data, bytes + at, again.len) == 0);

		/* the record cut short anywhere is refused, and moves nothing */
		{
			size_t		n = pos - at;
			size_t		cuts[3] = {n - 1, n / 2, HEAD};

			for (int i = 0; i < 3; i++)
			{
				size_t		cut_pos = at == 0 ? 0 : 1;
				char	   *cut;
				ValueSetsRecord r2;

				/* the record alone, after a byte when it is not a header */
				cut = malloc(cut_pos + cuts[i]);
				FUZZ_ASSERT(cut != NULL);
				cut[0] = 0;
				memcpy(cut + cut_pos, bytes + at, cuts[i]);
				FUZZ_ASSERT(value_sets_read(cut, cut_pos + cuts[i], &cut_pos, &r2, error,
											sizeof(error)) == -1);
				FUZZ_ASSERT(cut_pos == (at == 0 ? 0 : 1));
				free(cut);
			}
		}
	}
	value_sets_buffer_free(&again);
}

/*
 * Makes each record whole again in place: its length as it says, or what
 * is left when it says more (or 0), and its checksum from its bytes.
 */
static void
reseal_all(unsigned char *b, size_t len)
{
	for (size_t pos = 0; len - pos >= HEAD + 1 + TAIL;)
	{
		uint64_t	payload = (uint64_t) b[pos] | (uint64_t) b[pos + 1] << 8 |
			(uint64_t) b[pos + 2] << 16 | (uint64_t) b[pos + 3] << 24;
		uint64_t	sum;

		if (payload == 0 || payload + HEAD + TAIL > len - pos)
		{
			payload = len - pos - HEAD - TAIL;
			for (int i = 0; i < 4; i++)
				b[pos + i] = (unsigned char) (payload >> (8 * i));
		}
		sum = fnv_hash_bytes(FNV_HASH_START, b + pos, HEAD + (size_t) payload);
		for (int i = 0; i < 8; i++)
			b[pos + HEAD + payload + i] = (unsigned char) (sum >> (8 * i));
		pos += HEAD + (size_t) payload + TAIL;
	}
}

/* A good header, then the bytes as one record's payload. */
static void
check_as_payload(const uint8_t *data, size_t size)
{
	ValueSetsBuffer buf = {0};
	char	   *f;
	size_t		len;
	uint64_t	sum;

	value_sets_write_header(&buf, 1);
	FUZZ_ASSERT(!buf.failed);
	len = buf.len + HEAD + size + TAIL;
	f = malloc(len);
	FUZZ_ASSERT(f != NULL);
	memcpy(f, buf.data, buf.len);
	for (int i = 0; i < 4; i++)
		f[buf.len + i] = (char) (size >> (8 * i));
	memcpy(f + buf.len + HEAD, data, size);
	sum = fnv_hash_bytes(FNV_HASH_START, f + buf.len, HEAD + size);
	for (int i = 0; i < 8; i++)
		f[len - 8 + i] = (char) (sum >> (8 * i));
	check_file(f, len);
	free(f);
	value_sets_buffer_free(&buf);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char	   *raw = exact_copy(data, size);

	/* the bytes as they are: the frame checks */
	check_file(raw, size);

	/* each record made whole again: the payload parser */
	reseal_all((unsigned char *) raw, size);
	check_file(raw, size);
	free(raw);

	/* the bytes as a record's payload */
	if (size > 0 && size < (1u << 20))
		check_as_payload(data, size);
	return 0;
}

#ifdef FUZZ_VALUE_SETS_FILE_SEEDS
/*
 *	gcc -DFUZZ_VALUE_SETS_FILE_SEEDS -I../../src/contract -I. \
 *		fuzz_value_sets_file.c ../../src/contract/value_sets_file.c -o /tmp/seeds &&
 *	/tmp/seeds corpus/fuzz_value_sets_file
 */

/* Writes a seed: read to its end (or, `torn`, to a refusal), then checked. */
static void
write_seed(const char *dir, const char *name, const ValueSetsBuffer *buf, size_t len,
		   bool torn)
{
	char		path[4096];
	FILE	   *f;
	char	   *bytes;
	size_t		pos = 0;
	ValueSetsRecord rec;
	char		error[ERROR_LEN];
	int			rc;

	FUZZ_ASSERT(!buf->failed && len <= buf->len);
	bytes = exact_copy(buf->data, len);
	while ((rc = value_sets_read(bytes, len, &pos, &rec, error, sizeof(error))) == 1)
		;
	FUZZ_ASSERT(rc == (torn ? -1 : 0));
	LLVMFuzzerTestOneInput((const uint8_t *) bytes, len);
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "wb");
	FUZZ_ASSERT(f != NULL);
	FUZZ_ASSERT(fwrite(bytes, 1, len, f) == len);
	fclose(f);
	free(bytes);
}

int
main(int argc, char **argv)
{
	ValueSetsBuffer buf = {0};
	ValueSetsSetInfo s;
	int16_t		attnums[20];
	uint32_t	types[20];
	int16_t		read_attnums[3] = {-1, 0, INT16_MIN};
	uint32_t	read_types[3] = {27, 0, UINT32_MAX};
	uint32_t	partitions[4] = {16500, 16501, 16502, 16503};
	/* keys as the worker writes them: per column, a length and the text */
	const char	key42[6] = {2, 0, 0, 0, '4', '2'};
	const char	key7[5] = {1, 0, 0, 0, '7'};
	const char	row[11] = {1, 0, 0, 0, '7', 2, 0, 0, 0, '4', '2'};
	size_t		torn;

	if (argc != 2)
		return 2;

	value_sets_write_header(&buf, 1);
	write_seed(argv[1], "header_only", &buf, buf.len, false);

	/* a set and its nested set, their values and kept rows, then changes */
	memset(&s, 0, sizeof(s));
	attnums[0] = 1;
	types[0] = 23;
	s.uid = 1;
	s.role = 10;
	s.relid = 16400;
	s.identity = "SELECT user_id FROM public.memberships WHERE team_id IN (SELECT id FROM public.teams)";
	s.ncolumns = 1;
	s.attnums = attnums;
	s.types = types;
	s.null_rows = 2;
	value_sets_write_set(&buf, &s);
	s.uid = 2;
	s.parent = 1;
	s.level = 1;
	s.dependency = 0;
	s.identity = "SELECT id FROM public.teams";
	s.null_rows = 0;
	value_sets_write_set(&buf, &s);
	value_sets_write_value(&buf, 1, key42, sizeof(key42), 3);
	value_sets_write_value(&buf, 2, key7, sizeof(key7), 1);
	value_sets_write_kept_row(&buf, 1, row, sizeof(row), 1);
	value_sets_write_value(&buf, 1, "", 0, 0);
	value_sets_write_null_rows(&buf, 1, 0);
	value_sets_write_kept_row(&buf, 1, row, sizeof(row), 0);
	value_sets_write_drop(&buf, 2);
	write_seed(argv[1], "sets_values_and_changes", &buf, buf.len, false);

	/* the same cut short in its last record: a torn append */
	torn = buf.len - 5;
	write_seed(argv[1], "cut_short", &buf, torn, true);

	/* a wide set: many columns, read columns, partitions */
	value_sets_buffer_reset(&buf);
	value_sets_write_header(&buf, UINT32_MAX);
	for (int i = 0; i < 20; i++)
	{
		attnums[i] = (int16_t) (i * 7 - 3);
		types[i] = (uint32_t) (i % 3 == 0 ? 25 : 1700 + i);
	}
	memset(&s, 0, sizeof(s));
	s.uid = UINT64_MAX;
	s.parent = 77;
	s.dependency = 3;
	s.level = VALUE_SETS_MAX_LEVEL;
	s.role = 16390;
	s.relid = 16500;
	s.identity = "";
	s.ncolumns = 20;
	s.attnums = attnums;
	s.types = types;
	s.nread = 3;
	s.read_attnums = read_attnums;
	s.read_types = read_types;
	s.npartitions = 4;
	s.partitions = partitions;
	s.null_rows = INT64_MAX;
	value_sets_write_set(&buf, &s);
	value_sets_write_kept_row(&buf, UINT64_MAX, "row", 3, INT64_MAX);
	write_seed(argv[1], "wide_set", &buf, buf.len, false);
	value_sets_buffer_free(&buf);
	return 0;
}
#endif
