/*-------------------------------------------------------------------------
 *
 * value_sets_file.c
 *		The file that keeps the value sets of subqueries across restarts:
 *		its records, how they are written and how they are checked.
 *
 * The value sets file (pg_shape_sync/sets.<generation>, written by
 * pg/worker/shape_stream_sets_disk.c) is a log: each change of a set is
 * appended to it as a record, and reading the records in order, each one
 * the state from then on of what it names, gives the sets back.  The
 * manifest (log_manifest.c) names the file's generation and how many of
 * its bytes belong to the state it describes (sets_length); the bytes
 * after them (written after the last manifest) are cut at start, so every
 * record that is read is one that was whole on disk when the manifest was:
 * a record refused here is damage, never a crash's torn append.
 *
 * A file is a sequence of records, each
 *
 *		payload length (4) | payload | FNV-1a 64 of length and payload (8)
 *
 * with every integer little-endian and the payload's first byte its kind
 * (ValueSetsRecordKind).  The payloads, after the kind:
 *
 *		HEADER 'H'		magic "SSYNCVST" (8), version (4), generation (4)
 *		SET 'S'			uid (8), parent (8), dependency (4), level (4),
 *						role (4), relid (4), identity length (4) and bytes,
 *						ncolumns (4) and ncolumns x (attnum (4), type (4)),
 *						nread (4) and nread x (attnum (4), type (4)),
 *						npartitions (4) and npartitions x oid (4),
 *						null_rows (8)
 *		VALUE 'V'		uid (8), key length (4) and bytes, count (8)
 *		KEPT_ROW 'K'	uid (8), key length (4) and bytes, count (8)
 *		NULL_ROWS 'N'	uid (8), null_rows (8)
 *		DROP 'D'		uid (8)
 *
 * An attnum (int16) is written as the 32-bit word (uint32_t) (uint16_t)
 * attnum; counts and null_rows (int64) as their 64-bit two's complement.
 *
 * The encoding is canonical: value_sets_read accepts only the bytes that
 * the writers would write for the values it returns, and only values that
 * a writer of a sound set writes: a file starts with its header (the
 * right magic and version), and has no other; each record is whole, its
 * checksum matches, its kind is known and its fields fill its payload
 * exactly; every other record names a set (uid not 0); a set lists 1 to
 * VALUE_SETS_MAX_COLUMNS columns, at most that many read, sits at a level
 * of at most VALUE_SETS_MAX_LEVEL, has a parent exactly when its level is
 * not 0, and an identity without NUL (the writer takes a C string); an
 * attnum word holds 16 bits; no count is negative.  The magic and version
 * are checked before the header's length, so that a file of another
 * version (whose header may be longer) is named as such.  Whether a
 * record fits the ones before it (a set named before its values, a parent
 * before its children) is for the caller, which knows the sets.
 *
 * The reader never allocates: a record read points into the bytes.  The
 * writers append whole records to a ValueSetsBuffer; when memory runs out,
 * or a record would be longer than a reader takes, the buffer keeps the
 * records before it, is marked failed, and takes no more until reset.
 *
 * Plain C: the worker calls it, and test/unit/ tests it without a server.
 *
 * IDENTIFICATION
 *	  src/contract/value_sets_file.c
 *
 *-------------------------------------------------------------------------
 */
#include "value_sets_file.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fnv_hash.h"

#ifdef POSTGRES_H
#error "value_sets_file.c is plain C and must not include postgres.h"
#endif

#define VALUE_SETS_MAGIC	"SSYNCVST"
#define RECORD_HEAD			4	/* the payload's length */
#define RECORD_TAIL			8	/* the checksum */
#define MAX_PAYLOAD			((uint32_t) 1 << 30)

/* ------------------------------------------------------------- writing */

/* n bytes, after their length; longer than a payload may be: failed */
static void
w_lenbytes(ValueSetsBuffer *w, const void *p, size_t n)
{
	if (n >= MAX_PAYLOAD)
	{
		w->failed = true;
		return;
	}
	byte_put_u32(w, (uint32_t) n);
	byte_put(w, p, n);
}

/* (attnum, type) pairs */
static void
w_columns(ValueSetsBuffer *w, uint32_t n, const int16_t *attnums, const uint32_t *types)
{
	byte_put_u32(w, n);
	for (uint32_t i = 0; i < n; i++)
	{
		byte_put_u32(w, (uint32_t) (uint16_t) attnums[i]);
		byte_put_u32(w, types[i]);
	}
}

/* Starts a record of that kind: returns where it starts. */
static size_t
w_begin(ValueSetsBuffer *w, ValueSetsRecordKind kind)
{
	size_t		start = w->len;
	unsigned char k = (unsigned char) kind;

	byte_put_u32(w, 0);				/* the payload's length, set by w_finish */
	byte_put(w, &k, 1);
	return start;
}

/* Seals the record begun at `start`, or takes it back if it failed. */
static void
w_finish(ValueSetsBuffer *w, size_t start)
{
	uint64_t	payload;
	uint64_t	sum;

	if (w->failed)
	{
		w->len = start;
		return;
	}
	payload = w->len - start - RECORD_HEAD;
	if (payload > MAX_PAYLOAD)
	{
		w->failed = true;
		w->len = start;
		return;
	}
	for (int i = 0; i < 4; i++)
		w->data[start + i] = (char) (payload >> (8 * i));
	sum = fnv_hash_bytes(FNV_HASH_START, w->data + start, w->len - start);
	byte_put_u64(w, sum);
	if (w->failed)
		w->len = start;
}

void
value_sets_write_header(ValueSetsBuffer *buf, uint32_t generation)
{
	size_t		start = w_begin(buf, VALUE_SETS_HEADER);

	byte_put(buf, VALUE_SETS_MAGIC, 8);
	byte_put_u32(buf, VALUE_SETS_FILE_VERSION);
	byte_put_u32(buf, generation);
	w_finish(buf, start);
}

void
value_sets_write_set(ValueSetsBuffer *buf, const ValueSetsSetInfo *set)
{
	size_t		start = w_begin(buf, VALUE_SETS_SET);
	const char *identity = set->identity ? set->identity : "";

	byte_put_u64(buf, set->uid);
	byte_put_u64(buf, set->parent);
	byte_put_u32(buf, set->dependency);
	byte_put_u32(buf, set->level);
	byte_put_u32(buf, set->role);
	byte_put_u32(buf, set->relid);
	w_lenbytes(buf, identity, strlen(identity));
	w_columns(buf, set->ncolumns, set->attnums, set->types);
	w_columns(buf, set->nread, set->read_attnums, set->read_types);
	byte_put_u32(buf, set->npartitions);
	for (uint32_t i = 0; i < set->npartitions; i++)
		byte_put_u32(buf, set->partitions[i]);
	byte_put_u64(buf, (uint64_t) set->null_rows);
	w_finish(buf, start);
}

static void
write_counted(ValueSetsBuffer *buf, ValueSetsRecordKind kind, uint64_t uid,
			  const char *key, uint32_t key_len, int64_t count)
{
	size_t		start = w_begin(buf, kind);

	byte_put_u64(buf, uid);
	w_lenbytes(buf, key, key_len);
	byte_put_u64(buf, (uint64_t) count);
	w_finish(buf, start);
}

void
value_sets_write_value(ValueSetsBuffer *buf, uint64_t uid, const char *key,
					   uint32_t key_len, int64_t count)
{
	write_counted(buf, VALUE_SETS_VALUE, uid, key, key_len, count);
}

void
value_sets_write_kept_row(ValueSetsBuffer *buf, uint64_t uid, const char *key,
						  uint32_t key_len, int64_t count)
{
	write_counted(buf, VALUE_SETS_KEPT_ROW, uid, key, key_len, count);
}

void
value_sets_write_null_rows(ValueSetsBuffer *buf, uint64_t uid, int64_t null_rows)
{
	size_t		start = w_begin(buf, VALUE_SETS_NULL_ROWS);

	byte_put_u64(buf, uid);
	byte_put_u64(buf, (uint64_t) null_rows);
	w_finish(buf, start);
}

void
value_sets_write_drop(ValueSetsBuffer *buf, uint64_t uid)
{
	size_t		start = w_begin(buf, VALUE_SETS_DROP);

	byte_put_u64(buf, uid);
	w_finish(buf, start);
}

void
value_sets_buffer_reset(ValueSetsBuffer *buf)
{
	buf->len = 0;
	buf->failed = false;
}

void
value_sets_buffer_free(ValueSetsBuffer *buf)
{
	free(buf->data);
	memset(buf, 0, sizeof(*buf));
}

/* ------------------------------------------------------------- reading */

/* A count of `width`-byte items, then the items: no count the bytes cannot hold. */
static const unsigned char *
r_array(ByteReader *r, uint32_t *count, size_t width)
{
	*count = byte_get_u32(r);
	if (r->failed || *count > r->left / width)
	{
		r->failed = true;
		*count = 0;
		return NULL;
	}
	return byte_take(r, (size_t) *count * width);
}

/* Whether each attnum word of n (attnum, type) pairs holds 16 bits. */
static bool
attnums_fit(const unsigned char *pairs, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		if (value_sets_word(pairs, i * 2) > UINT16_MAX)
			return false;
	return true;
}

__attribute__((format(printf, 3, 4)))
static int
refuse(char *error, size_t error_len, const char *fmt,...)
{
	va_list		ap;

	if (error != NULL && error_len > 0)
	{
		va_start(ap, fmt);
		vsnprintf(error, error_len, fmt, ap);
		va_end(ap);
	}
	return -1;
}

/*
 * A set record's payload, past its kind, into `rec`: NULL, or what makes
 * its fields (when they fill it: the caller checks) not a set's.
 */
static const char *
read_set(ByteReader *r, ValueSetsRecord *rec)
{
	uint32_t	n;
	const unsigned char *identity;

	rec->uid = byte_get_u64(r);
	rec->parent = byte_get_u64(r);
	rec->dependency = byte_get_u32(r);
	rec->level = byte_get_u32(r);
	rec->role = byte_get_u32(r);
	rec->relid = byte_get_u32(r);
	identity = r_array(r, &n, 1);
	rec->identity = (const char *) identity;
	rec->identity_len = n;
	rec->columns = r_array(r, &n, 8);
	rec->ncolumns = n;
	rec->read = r_array(r, &n, 8);
	rec->nread = n;
	rec->partitions = r_array(r, &n, 4);
	rec->npartitions = n;
	rec->null_rows = (int64_t) byte_get_u64(r);
	if (r->failed || r->left != 0)
		return NULL;
	if (rec->uid == 0)
		return "names set 0";
	if (rec->level > VALUE_SETS_MAX_LEVEL)
		return "is nested deeper than a set may be";
	if (rec->level == 0 && rec->parent != 0)
		return "is at level 0 yet has a parent";
	if (rec->level > 0 && rec->parent == 0)
		return "is nested yet has no parent";
	if (rec->ncolumns == 0 || rec->ncolumns > VALUE_SETS_MAX_COLUMNS)
		return "selects no columns, or more than a table has";
	if (rec->nread > VALUE_SETS_MAX_COLUMNS)
		return "reads more columns than a table has";
	if (!attnums_fit(rec->columns, rec->ncolumns) || !attnums_fit(rec->read, rec->nread))
		return "has a column number out of range";
	if (memchr(identity, '\0', rec->identity_len) != NULL)
		return "has a NUL in its identity";
	if (rec->null_rows < 0)
		return "has a negative number of null rows";
	return NULL;
}

int
value_sets_read(const char *bytes, size_t len, size_t *pos, ValueSetsRecord *rec,
				char *error, size_t error_len)
{
	const unsigned char *b = (const unsigned char *) bytes;
	size_t		at = *pos;
	uint32_t	payload;
	ByteReader		r;
	const char *problem = NULL;
	unsigned char kind;

	memset(rec, 0, sizeof(*rec));
	if (at == len)
		return 0;
	if (at > len)
		return refuse(error, error_len, "position %zu is past its end (%zu bytes)", at, len);

	/* the frame: whole, and unchanged */
	if (len - at < RECORD_HEAD)
		return refuse(error, error_len, "the record at byte %zu is cut short", at);
	payload = byte_le32(b + at);
	if (payload == 0 || payload > MAX_PAYLOAD)
		return refuse(error, error_len, "the record at byte %zu has an impossible length, %u",
					  at, payload);
	if (len - at - RECORD_HEAD < (size_t) payload + RECORD_TAIL)
		return refuse(error, error_len, "the record at byte %zu is cut short", at);
	if (byte_le64(b + at + RECORD_HEAD + payload) !=
		fnv_hash_bytes(FNV_HASH_START, b + at, RECORD_HEAD + (size_t) payload))
		return refuse(error, error_len,
					  "the checksum of the record at byte %zu does not match its contents", at);

	r.p = b + at + RECORD_HEAD;
	r.left = payload;
	r.failed = false;
	kind = *byte_take(&r, 1);
	if (at == 0 && kind != VALUE_SETS_HEADER)
		return refuse(error, error_len, "it does not start with a header record");
	rec->kind = (ValueSetsRecordKind) kind;
	switch (kind)
	{
		case VALUE_SETS_HEADER:
			{
				const unsigned char *magic = byte_take(&r, 8);
				uint32_t	version = byte_get_u32(&r);

				if (at != 0)
				{
					memset(rec, 0, sizeof(*rec));
					return refuse(error, error_len, "it has a second header record, at byte %zu",
								  at);
				}
				if (magic == NULL || memcmp(magic, VALUE_SETS_MAGIC, 8) != 0)
				{
					memset(rec, 0, sizeof(*rec));
					return refuse(error, error_len, "it is not a shape_sync value sets file");
				}
				if (!r.failed && version != VALUE_SETS_FILE_VERSION)
				{
					memset(rec, 0, sizeof(*rec));
					return refuse(error, error_len, "it has format version %u, not %u", version,
								  VALUE_SETS_FILE_VERSION);
				}
				rec->generation = byte_get_u32(&r);
				break;
			}
		case VALUE_SETS_SET:
			problem = read_set(&r, rec);
			break;
		case VALUE_SETS_VALUE:
		case VALUE_SETS_KEPT_ROW:
			{
				uint32_t	n;

				rec->uid = byte_get_u64(&r);
				rec->key = (const char *) r_array(&r, &n, 1);
				rec->key_len = n;
				rec->count = (int64_t) byte_get_u64(&r);
				if (rec->count < 0)
					problem = "has a negative count";
				break;
			}
		case VALUE_SETS_NULL_ROWS:
			rec->uid = byte_get_u64(&r);
			rec->null_rows = (int64_t) byte_get_u64(&r);
			if (rec->null_rows < 0)
				problem = "has a negative number of null rows";
			break;
		case VALUE_SETS_DROP:
			rec->uid = byte_get_u64(&r);
			break;
		default:
			memset(rec, 0, sizeof(*rec));
			return refuse(error, error_len, "the record at byte %zu is of no known kind (0x%02x)",
						  at, kind);
	}
	if (r.failed || r.left != 0)
	{
		memset(rec, 0, sizeof(*rec));
		return refuse(error, error_len, "the record at byte %zu does not decode", at);
	}
	if (problem == NULL && kind != VALUE_SETS_HEADER && rec->uid == 0)
		problem = "names set 0";
	if (problem != NULL)
	{
		memset(rec, 0, sizeof(*rec));
		return refuse(error, error_len, "the record at byte %zu %s", at, problem);
	}
	*pos = at + RECORD_HEAD + payload + RECORD_TAIL;
	return 1;
}
