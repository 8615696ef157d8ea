/*-------------------------------------------------------------------------
 *
 * value_sets_file.h
 *		The file that keeps the value sets of subqueries across restarts:
 *		its records, how they are written and how they are checked.
 *
 * See value_sets_file.c for the format and why it is safe to trust.
 *
 * IDENTIFICATION
 *	  src/contract/value_sets_file.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef VALUE_SETS_FILE_H
#define VALUE_SETS_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "byte_codec.h"

/* Bumped whenever a record's layout changes. */
#define VALUE_SETS_FILE_VERSION		1
/* the most columns a set record may list (MaxHeapAttributeNumber) */
#define VALUE_SETS_MAX_COLUMNS		1600
/* the deepest level a set record may have */
#define VALUE_SETS_MAX_LEVEL		16

typedef enum ValueSetsRecordKind
{
	VALUE_SETS_HEADER = 'H',	/* first in a file, and only there */
	VALUE_SETS_SET = 'S',		/* a set, as it is from now on */
	VALUE_SETS_VALUE = 'V',		/* a value's count now (0: gone) */
	VALUE_SETS_NULL_ROWS = 'N', /* the rows whose value has a NULL, now */
	VALUE_SETS_KEPT_ROW = 'K',	/* a kept row's count now (0: gone) */
	VALUE_SETS_DROP = 'D'		/* the set and everything of it are gone */
} ValueSetsRecordKind;

/* What a set record says, for writing it: plain arrays. */
typedef struct ValueSetsSetInfo
{
	uint64_t	uid;			/* never 0 */
	uint64_t	parent;			/* the set whose where clause reads it, or 0 */
	uint32_t	dependency;		/* its place among its parent's subqueries */
	uint32_t	level;			/* 0, or its parent's + 1 */
	uint32_t	role;			/* read as this role */
	uint32_t	relid;			/* its table */
	const char *identity;		/* its select, as the planner names it */
	uint32_t	ncolumns;		/* the columns it selects */
	const int16_t *attnums;
	const uint32_t *types;
	uint32_t	nread;			/* the columns it reads */
	const int16_t *read_attnums;
	const uint32_t *read_types;
	uint32_t	npartitions;	/* its table's partitions when it was read */
	const uint32_t *partitions;
	int64_t		null_rows;
} ValueSetsSetInfo;

/*
 * A record read back.  Pointers point into the bytes decoded; the arrays
 * of a set record are little-endian 32-bit words, read with
 * value_sets_word(): `columns` and `read` hold (attnum, type) pairs.
 */
typedef struct ValueSetsRecord
{
	ValueSetsRecordKind kind;
	uint64_t	uid;			/* all but HEADER */
	uint32_t	generation;		/* HEADER */
	/* SET */
	uint64_t	parent;
	uint32_t	dependency;
	uint32_t	level;
	uint32_t	role;
	uint32_t	relid;
	const char *identity;		/* identity_len bytes, no terminator */
	uint32_t	identity_len;
	uint32_t	ncolumns;
	const unsigned char *columns;
	uint32_t	nread;
	const unsigned char *read;
	uint32_t	npartitions;
	const unsigned char *partitions;
	int64_t		null_rows;		/* SET, NULL_ROWS */
	/* VALUE, KEPT_ROW */
	const char *key;
	uint32_t	key_len;
	int64_t		count;
} ValueSetsRecord;

/* Word i of an array of a set record. */
static inline uint32_t
value_sets_word(const unsigned char *words, uint32_t i)
{
	return byte_le32(words + (size_t) i * 4);
}

/*
 * Records written so far, in malloc'd memory, whole ones only; `failed`:
 * out of memory, or a record longer than a reader takes (nothing more is
 * appended until reset).
 */
typedef ByteWriter ValueSetsBuffer;

extern void value_sets_write_header(ValueSetsBuffer *buf, uint32_t generation);
extern void value_sets_write_set(ValueSetsBuffer *buf, const ValueSetsSetInfo *set);
extern void value_sets_write_value(ValueSetsBuffer *buf, uint64_t uid, const char *key,
								   uint32_t key_len, int64_t count);
extern void value_sets_write_kept_row(ValueSetsBuffer *buf, uint64_t uid, const char *key,
									  uint32_t key_len, int64_t count);
extern void value_sets_write_null_rows(ValueSetsBuffer *buf, uint64_t uid, int64_t null_rows);
extern void value_sets_write_drop(ValueSetsBuffer *buf, uint64_t uid);
/* Empties the buffer (keeping its memory); _free releases it. */
extern void value_sets_buffer_reset(ValueSetsBuffer *buf);
extern void value_sets_buffer_free(ValueSetsBuffer *buf);

/*
 * Reads the record at *pos of bytes[0, len): 1, with *pos past it; 0 when
 * *pos is len; -1, with a sentence in `error`, when the bytes there are
 * not one whole record of this version (a file starts with its header
 * record, and has no other).
 */
extern int	value_sets_read(const char *bytes, size_t len, size_t *pos, ValueSetsRecord *rec,
							char *error, size_t error_len);

#endif							/* VALUE_SETS_FILE_H */
