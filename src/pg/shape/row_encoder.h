/*-------------------------------------------------------------------------
 *
 * row_encoder.h
 *		Rows to Electric JSON change messages, encoded once.
 *
 * IDENTIFICATION
 *	  src/pg/shape/row_encoder.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef ROW_ENCODER_H
#define ROW_ENCODER_H

#include "postgres.h"

#include "fmgr.h"
#include "lib/stringinfo.h"
#include "utils/guc.h"

#include "shape_relation.h"

/* How a column's value becomes text (renc_output_kind) */
typedef enum RowEncoderOutput
{
	RENC_OUTPUT_FUNCTION,		/* its type's output function */
	RENC_OUTPUT_VARLENA_TEXT,	/* text, varchar, bpchar: the stored bytes */
	RENC_OUTPUT_INT2,
	RENC_OUTPUT_INT4,
	RENC_OUTPUT_INT8,
} RowEncoderOutput;

typedef struct RowEncoderColumn
{
	AttrNumber	attnum;
	char	   *json_name;		/* the column name as a JSON string, quoted */
	int			json_name_len;
	RowEncoderOutput output_kind;
	FmgrInfo	output;
} RowEncoderColumn;

typedef struct RowEncoder
{
	const ShapeRelation *rel;
	RowEncoderColumn *values;	/* the selected columns */
	RowEncoderColumn *keys;		/* the key columns, in key order */
	char	   *key_prefix;		/* "schema"."table" as it starts each key */
	char	   *key_prefix_json;	/* the same, escaped for a JSON string */
	int			key_prefix_json_len;
	char	   *relation_json;	/* ["schema","table"] */
	char	   *insert_headers; /* ,"headers":{...}} of a snapshot row */
	int			insert_headers_len;
	MemoryContext row_context;	/* reset after every row; one per process */
} RowEncoder;

extern void row_encoder_init(RowEncoder *enc, const ShapeRelation *rel);
extern void row_encoder_set_snapshot_mark(RowEncoder *enc, uint32 snapshot_mark);
extern void row_encoder_set_move_in(RowEncoder *enc);

/*
 * Appends the snapshot message of one row to `out`.  `values` and `nulls`
 * are indexed by attnum - 1 and must hold the selected and key columns.
 */
extern void row_encoder_snapshot_row(RowEncoder *enc, const Datum *values,
									 const bool *nulls, StringInfo out);

/* The same, with `extra_headers` (",\"tags\":..." of row_tags.c) in its headers. */
extern void row_encoder_snapshot_row_with(RowEncoder *enc, const Datum *values,
										  const bool *nulls, const char *extra_headers,
										  StringInfo out);

/* A replicated change, as the decoder hands it to the encoder. */
typedef struct RowChange
{
	const char *operation;		/* "insert", "update" or "delete" */
	const Datum *new_values;	/* insert, update; by attnum - 1 */
	const bool *new_nulls;
	const Datum *old_values;	/* delete, and update when known */
	const bool *old_nulls;
	uint64		lsn;			/* the transaction's commit LSN */
	uint64		op_position;
	uint32		xid;
	const char *key_change_to;	/* the delete half of a key change */
	const char *key_change_from;	/* the insert half of a key change */
	const char *extra_headers;	/* NULL, or headers of the new row (tags) */
	const char *extra_headers_old;	/* NULL, or a delete's (of the old row) */
} RowChange;

extern bool row_encoder_change(RowEncoder *enc, const RowChange *change,
							   bool replica_full, StringInfo out);

/* receives each message of row_encoder_update, at its op position */
typedef void (*RowMessageSink) (void *arg, uint64 op_position, StringInfo msg);

extern void row_encoder_update(RowEncoder *enc, const RowChange *update, bool replica_full,
							   RowMessageSink sink, void *arg);
extern char *row_encoder_key(RowEncoder *enc, const Datum *values, const bool *nulls);

/* Sets the display settings Electric uses for values, for this session. */
extern void row_encoder_set_display_settings(GucContext context, GucSource source,
											 GucAction action);

#endif							/* ROW_ENCODER_H */
