/*-------------------------------------------------------------------------
 *
 * row_encoder.c
 *		Rows to Electric JSON change messages, encoded once.
 *
 * Every message a client receives is produced here, once, when the row
 * enters a shape log; serving is copying bytes.  The layout, member by
 * member, is log_record.h's, whose constants write it here and with which
 * compaction (log_compact.c) reads it.  A message looks like
 *
 *	{"key":"\"public\".\"items\"/\"1\"","value":{"id":"1","title":"a"},
 *	 "headers":{"operation":"insert","relation":["public","items"]}}
 *
 * Values are PostgreSQL's text output under the display settings Electric
 * uses (row_encoder_set_display_settings), as JSON strings, or null.  The
 * key is the quoted relation followed by /"<value>" for each key column,
 * with "/" doubled inside values and NULL written as /_ ; the same encoder
 * serves the snapshot and the decoded WAL, so their keys always agree.
 *
 * Output functions are looked up once per encoder; each row's scratch
 * memory lives in a context reset after the row.  Encoding is the
 * snapshot's largest cost after the scan itself, so the hot path avoids
 * work that changes nothing in the bytes: text and integer columns skip
 * their output functions (renc_output_kind), strings are escaped as
 * PostgreSQL's escape_json escapes them but in runs, copied whole between
 * the rare bytes that need an escape (renc_put_escaped), and the key is
 * written escaped in one pass, with its relation prefix escaped once per
 * encoder.
 *
 * IDENTIFICATION
 *	  src/pg/shape/row_encoder.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/json.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"

#include "json_text.h"
#include "log_record.h"
#include "row_encoder.h"

/* appendBinaryStringInfo, inlined: the encoder appends a few bytes at a time */
static inline void
renc_put(StringInfo out, const char *data, int len)
{
	if (unlikely(out->len + len >= out->maxlen))
		enlargeStringInfo(out, len);
	memcpy(out->data + out->len, data, len);
	out->len += len;
	out->data[out->len] = '\0';
}

#define RENC_BYTES(c)	(~UINT64CONST(0) / 255 * (uint64) (c))

/*
 * Whether any of the 8 bytes of w must be escaped (json_byte_needs_escape),
 * or is a "/" when double_slash: exact, as the word tests of "has a zero
 * byte" and "has a byte less than n" are.
 */
static inline bool
renc_word_needs_escape(uint64 w, bool double_slash)
{
	uint64		high = RENC_BYTES(0x80);
	uint64		quote = w ^ RENC_BYTES('"');
	uint64		backslash = w ^ RENC_BYTES('\\');
	uint64		found = ((w - RENC_BYTES(0x20)) & ~w) |
		((quote - RENC_BYTES(1)) & ~quote) |
		((backslash - RENC_BYTES(1)) & ~backslash);

	if (double_slash)
	{
		uint64		slash = w ^ RENC_BYTES('/');

		found |= (slash - RENC_BYTES(1)) & ~slash;
	}
	return (found & high) != 0;
}

/*
 * Appends s[0, len) as the inside of a JSON string, as escape_json writes
 * it (json_escape_byte says how), copying the runs between escapes whole
 * and testing 8 bytes at a time for one that needs an escape; with
 * double_slash, each "/" is written twice, as inside a key.
 */
static inline void
renc_put_escaped(StringInfo out, const char *s, int len, bool double_slash)
{
	const char *end = s + len;

	if (unlikely(out->len + len >= out->maxlen))
		enlargeStringInfo(out, len);
	while (s < end)
	{
		const char *run = s;
		char		tmp[JSON_ESCAPE_MAX];
		const char *escape;
		int			escape_len;
		uint64		word;

		while (end - s >= (ptrdiff_t) sizeof(word))
		{
			memcpy(&word, s, sizeof(word));
			if (renc_word_needs_escape(word, double_slash))
				break;
			s += sizeof(word);
		}
		/* in the word that has one, or the tail: byte by byte */
		while (s < end && !json_byte_needs_escape((unsigned char) *s) &&
			   !(double_slash && *s == '/'))
			s++;
		memcpy(out->data + out->len, run, s - run);
		out->len += s - run;
		if (s == end)
			break;
		escape = *s == '/' ? "//" : json_escape_byte((unsigned char) *s, tmp);
		escape_len = strlen(escape);
		s++;
		enlargeStringInfo(out, escape_len + (end - s));
		memcpy(out->data + out->len, escape, escape_len);
		out->len += escape_len;
	}
	out->data[out->len] = '\0';
}

/* escape_json(str), quotes included */
static void
renc_escape_json(StringInfo out, const char *str)
{
	appendStringInfoCharMacro(out, '"');
	renc_put_escaped(out, str, strlen(str), false);
	appendStringInfoCharMacro(out, '"');
}

/*
 * How a column's value becomes text.  Text-like and integer columns skip
 * their output function (and its palloc and copy) and write the very bytes
 * it would return: textout, varcharout and bpcharout return the string as
 * stored, int2out, int4out and int8out what pg_itoa, pg_ltoa and pg_lltoa
 * write.  tap/05_value_text.sql compares both paths.
 */
static RowEncoderOutput
renc_output_kind(Oid output)
{
	switch (output)
	{
		case F_TEXTOUT:
		case F_VARCHAROUT:
		case F_BPCHAROUT:
			return RENC_OUTPUT_VARLENA_TEXT;
		case F_INT2OUT:
			return RENC_OUTPUT_INT2;
		case F_INT4OUT:
			return RENC_OUTPUT_INT4;
		case F_INT8OUT:
			return RENC_OUTPUT_INT8;
		default:
			return RENC_OUTPUT_FUNCTION;
	}
}

static void
renc_column(RowEncoderColumn *col, const ShapeRelation *rel, AttrNumber attnum)
{
	StringInfoData name;
	Oid			typid = InvalidOid;
	const char *attname = NULL;
	Oid			output;
	bool		varlena;

	for (int i = 0; i < rel->ncolumns; i++)
		if (rel->columns[i].attnum == attnum)
		{
			typid = rel->columns[i].typid;
			attname = rel->columns[i].name;
		}
	if (!OidIsValid(typid))
	{
		/* a key column the client did not select */
		typid = get_atttype(rel->relid, attnum);
		attname = get_attname(rel->relid, attnum, false);
	}
	initStringInfo(&name);
	escape_json(&name, attname);
	col->attnum = attnum;
	col->json_name = name.data;
	col->json_name_len = name.len;
	getTypeOutputInfo(typid, &output, &varlena);
	fmgr_info(output, &col->output);
	col->output_kind = renc_output_kind(output);
}

/*
 * The scratch memory of the row being encoded, reset after each row, and
 * before each (a row whose encoding failed left its scratch there; a reset
 * context costs nothing to reset again): one context per process, since a
 * process encodes one row at a time, and not one per encoder (8 kB for each
 * of thousands of shapes).
 */
static MemoryContext
renc_row_context(void)
{
	static MemoryContext context = NULL;

	if (context == NULL)
		context = AllocSetContextCreate(TopMemoryContext, "shape_sync row encoder",
										ALLOCSET_DEFAULT_SIZES);
	return context;
}

/* Resets the row scratch and makes it current; returns what was. */
static MemoryContext
renc_row_begin(RowEncoder *enc)
{
	MemoryContextReset(enc->row_context);
	return MemoryContextSwitchTo(enc->row_context);
}

void
row_encoder_init(RowEncoder *enc, const ShapeRelation *rel)
{
	StringInfoData buf;

	enc->rel = rel;
	enc->values = palloc(sizeof(RowEncoderColumn) * Max(rel->ncolumns, 1));
	for (int i = 0; i < rel->ncolumns; i++)
		renc_column(&enc->values[i], rel, rel->columns[i].attnum);
	enc->keys = palloc(sizeof(RowEncoderColumn) * Max(rel->nkeys, 1));
	for (int i = 0; i < rel->nkeys; i++)
		renc_column(&enc->keys[i], rel, rel->keys[i]);

	enc->key_prefix = shape_quoted_relation(rel);
	initStringInfo(&buf);
	renc_put_escaped(&buf, enc->key_prefix, strlen(enc->key_prefix), false);
	enc->key_prefix_json = buf.data;
	enc->key_prefix_json_len = buf.len;

	initStringInfo(&buf);
	appendStringInfoChar(&buf, '[');
	escape_json(&buf, rel->schema);
	appendStringInfoChar(&buf, ',');
	escape_json(&buf, rel->table);
	appendStringInfoChar(&buf, ']');
	enc->relation_json = buf.data;
	enc->insert_headers = psprintf(LOG_RECORD_HEADERS LOG_RECORD_OPERATION(LOG_RECORD_INSERT)
								   LOG_RECORD_RELATION "%s" LOG_RECORD_END,
								   enc->relation_json);
	enc->insert_headers_len = strlen(enc->insert_headers);

	enc->row_context = renc_row_context();
}

/* A subset query's rows carry its snapshot_mark in their headers. */
void
row_encoder_set_snapshot_mark(RowEncoder *enc, uint32 snapshot_mark)
{
	enc->insert_headers = psprintf(LOG_RECORD_HEADERS LOG_RECORD_OPERATION(LOG_RECORD_INSERT)
								   LOG_RECORD_RELATION "%s" LOG_RECORD_SNAPSHOT_MARK "%u"
								   LOG_RECORD_END,
								   enc->relation_json, snapshot_mark);
	enc->insert_headers_len = strlen(enc->insert_headers);
}

/* A move-in's rows (shape_stream_subquery.c) say so in their headers. */
void
row_encoder_set_move_in(RowEncoder *enc)
{
	enc->insert_headers = psprintf(LOG_RECORD_HEADERS LOG_RECORD_OPERATION(LOG_RECORD_INSERT)
								   LOG_RECORD_RELATION "%s" LOG_RECORD_IS_MOVE_IN LOG_RECORD_END,
								   enc->relation_json);
	enc->insert_headers_len = strlen(enc->insert_headers);
}

/*
 * A column's value as text: data NULL for SQL NULL, else in the row
 * context, in the stored value, or in digits.
 */
typedef struct RowEncoderText
{
	const char *data;
	int			len;
	bool		plain;			/* digits and '-' only: nothing to escape */
	char		digits[MAXINT8LEN + 1];
} RowEncoderText;

static void
renc_text(RowEncoderColumn *col, const Datum *values, const bool *nulls, RowEncoderText *text)
{
	int			idx = col->attnum - 1;
	Datum		value = values[idx];

	text->data = NULL;
	text->len = 0;
	text->plain = false;
	if (nulls[idx])
		return;
	switch (col->output_kind)
	{
		case RENC_OUTPUT_VARLENA_TEXT:
			{
				struct varlena *v = (struct varlena *) DatumGetPointer(value);

				/* short and 4-byte headers are read in place */
				if (VARATT_IS_EXTERNAL(v) || VARATT_IS_COMPRESSED(v))
					v = pg_detoast_datum_packed(v);

				text->data = VARDATA_ANY(v);
				text->len = VARSIZE_ANY_EXHDR(v);
				return;
			}
		case RENC_OUTPUT_INT2:
			text->len = pg_itoa(DatumGetInt16(value), text->digits);
			break;
		case RENC_OUTPUT_INT4:
			text->len = pg_ltoa(DatumGetInt32(value), text->digits);
			break;
		case RENC_OUTPUT_INT8:
			text->len = pg_lltoa(DatumGetInt64(value), text->digits);
			break;
		case RENC_OUTPUT_FUNCTION:
		default:
			text->data = OutputFunctionCall(&col->output, value);
			text->len = strlen(text->data);
			return;
	}
	text->data = text->digits;
	text->plain = true;
}

static bool
renc_same(const RowEncoderText *a, const RowEncoderText *b)
{
	if (a->data == NULL || b->data == NULL)
		return a->data == b->data;
	return a->len == b->len && memcmp(a->data, b->data, a->len) == 0;
}

/*
 * Appends the key of the row in `values` as a JSON string, quotes included:
 * the escaped relation prefix, then /"<value>" per key column with "/"
 * doubled, or /_ for NULL.
 */
static void
renc_put_key(RowEncoder *enc, StringInfo out, const Datum *values, const bool *nulls)
{
	appendStringInfoCharMacro(out, '"');
	renc_put(out, enc->key_prefix_json, enc->key_prefix_json_len);
	for (int i = 0; i < enc->rel->nkeys; i++)
	{
		RowEncoderText text;

		renc_text(&enc->keys[i], values, nulls, &text);
		if (text.data == NULL)
		{
			renc_put(out, "/_", 2);
			continue;
		}
		renc_put(out, "/\\\"", 3);
		if (text.plain)
			renc_put(out, text.data, text.len);
		else
			renc_put_escaped(out, text.data, text.len, true);
		renc_put(out, "\\\"", 2);
	}
	appendStringInfoCharMacro(out, '"');
}

/* Builds the raw key of the row in `values` into `key`. */
static void
renc_key(RowEncoder *enc, const Datum *values, const bool *nulls, StringInfo key)
{
	appendStringInfoString(key, enc->key_prefix);
	for (int i = 0; i < enc->rel->nkeys; i++)
	{
		RowEncoderText text;
		const char *run;
		const char *end;
		const char *slash;

		renc_text(&enc->keys[i], values, nulls, &text);
		if (text.data == NULL)
		{
			appendStringInfoString(key, "/_");
			continue;
		}
		run = text.data;
		end = run + text.len;
		appendStringInfoString(key, "/\"");
		/* each "/" doubled */
		while ((slash = memchr(run, '/', end - run)) != NULL)
		{
			appendBinaryStringInfo(key, run, (int) (slash - run) + 1);
			appendStringInfoChar(key, '/');
			run = slash + 1;
		}
		appendBinaryStringInfo(key, run, (int) (end - run));
		appendStringInfoChar(key, '"');
	}
}

char *
row_encoder_key(RowEncoder *enc, const Datum *values, const bool *nulls)
{
	MemoryContext old = renc_row_begin(enc);
	StringInfoData raw;
	char	   *key;

	/* output functions' scratch goes with the row; the key to the caller */
	initStringInfo(&raw);
	renc_key(enc, values, nulls, &raw);
	MemoryContextSwitchTo(old);
	key = pstrdup(raw.data);
	MemoryContextReset(enc->row_context);
	return key;
}

/* Appends "name":value for one column. */
static void
renc_value(StringInfo out, RowEncoderColumn *col, const RowEncoderText *text, bool *first)
{
	if (!*first)
		appendStringInfoCharMacro(out, ',');
	*first = false;
	renc_put(out, col->json_name, col->json_name_len);
	appendStringInfoCharMacro(out, ':');
	if (text->data == NULL)
		renc_put(out, "null", 4);
	else
	{
		appendStringInfoCharMacro(out, '"');
		if (text->plain)
			renc_put(out, text->data, text->len);
		else
			renc_put_escaped(out, text->data, text->len, false);
		appendStringInfoCharMacro(out, '"');
	}
}

void
row_encoder_snapshot_row(RowEncoder *enc, const Datum *values, const bool *nulls,
						 StringInfo out)
{
	row_encoder_snapshot_row_with(enc, values, nulls, NULL, out);
}

void
row_encoder_snapshot_row_with(RowEncoder *enc, const Datum *values, const bool *nulls,
							  const char *extra_headers, StringInfo out)
{
	MemoryContext old = renc_row_begin(enc);
	bool		first = true;

	renc_put(out, LOG_RECORD_KEY, sizeof(LOG_RECORD_KEY) - 1);
	renc_put_key(enc, out, values, nulls);
	renc_put(out, LOG_RECORD_VALUE "{", sizeof(LOG_RECORD_VALUE "{") - 1);
	for (int i = 0; i < enc->rel->ncolumns; i++)
	{
		RowEncoderText text;

		renc_text(&enc->values[i], values, nulls, &text);
		renc_value(out, &enc->values[i], &text, &first);
	}
	appendStringInfoCharMacro(out, '}');
	if (extra_headers == NULL)
		renc_put(out, enc->insert_headers, enc->insert_headers_len);
	else
	{
		/* before the closing braces of the headers and of the message */
		renc_put(out, enc->insert_headers, enc->insert_headers_len - 2);
		appendStringInfoString(out, extra_headers);
		renc_put(out, LOG_RECORD_END, 2);
	}

	MemoryContextSwitchTo(old);
	MemoryContextReset(enc->row_context);
}

/*
 * Appends the message of a replicated change, without its last two closing
 * braces: the caller ends it with "}}" or ",\"last\":true}}" once it knows
 * whether the message is the transaction's last for this shape.
 *
 * insert: the full row.  update: with replica full, the full new row plus
 * the old values of the changed columns; with replica default, the key
 * columns plus the changed ones.  delete: the full old row, or its key
 * columns.  Returns false, appending nothing, for an update that changes
 * none of the shape's columns.
 */
bool
row_encoder_change(RowEncoder *enc, const RowChange *ch, bool replica_full, StringInfo out)
{
	MemoryContext old = renc_row_begin(enc);
	bool		is_delete = strcmp(ch->operation, LOG_RECORD_DELETE) == 0;
	bool		is_update = strcmp(ch->operation, LOG_RECORD_UPDATE) == 0;
	const Datum *row_values = is_delete ? ch->old_values : ch->new_values;
	const bool *row_nulls = is_delete ? ch->old_nulls : ch->new_nulls;
	int			start = out->len;
	bool		changed = false;
	bool		first = true;

	renc_put(out, LOG_RECORD_KEY, sizeof(LOG_RECORD_KEY) - 1);
	renc_put_key(enc, out, row_values, row_nulls);
	renc_put(out, LOG_RECORD_VALUE "{", sizeof(LOG_RECORD_VALUE "{") - 1);
	for (int i = 0; i < enc->rel->ncolumns; i++)
	{
		RowEncoderColumn *col = &enc->values[i];
		RowEncoderText text;
		bool		include = !is_update && (replica_full || !is_delete ||
											 enc->rel->columns[i].key_index >= 0);

		renc_text(col, row_values, row_nulls, &text);
		if (is_update)
		{
			RowEncoderText was;
			bool		differs = ch->old_values == NULL;

			if (!differs)
			{
				renc_text(col, ch->old_values, ch->old_nulls, &was);
				differs = !renc_same(&text, &was);
			}

			changed = changed || differs;
			include = replica_full || differs || enc->rel->columns[i].key_index >= 0;
		}
		if (include)
			renc_value(out, col, &text, &first);
	}
	appendStringInfoChar(out, '}');
	/* a shape with subqueries is told of every update: its tags may have changed */
	if (is_update && !changed && ch->extra_headers == NULL)
	{
		out->len = start;
		out->data[start] = '\0';
		MemoryContextSwitchTo(old);
		MemoryContextReset(enc->row_context);
		return false;
	}
	if (is_update && replica_full && ch->old_values != NULL)
	{
		first = true;
		appendStringInfoString(out, LOG_RECORD_OLD_VALUE "{");
		for (int i = 0; i < enc->rel->ncolumns; i++)
		{
			RowEncoderColumn *col = &enc->values[i];
			RowEncoderText was;
			RowEncoderText now;

			renc_text(col, ch->old_values, ch->old_nulls, &was);
			renc_text(col, ch->new_values, ch->new_nulls, &now);
			if (!renc_same(&was, &now))
				renc_value(out, col, &was, &first);
		}
		appendStringInfoChar(out, '}');
	}
	appendStringInfo(out, LOG_RECORD_HEADERS LOG_RECORD_OPERATION("%s") LOG_RECORD_RELATION "%s",
					 ch->operation, enc->relation_json);
	if (ch->key_change_to)
	{
		appendStringInfoString(out, LOG_RECORD_KEY_CHANGE_TO);
		renc_escape_json(out, ch->key_change_to);
	}
	if (ch->key_change_from)
	{
		appendStringInfoString(out, LOG_RECORD_KEY_CHANGE_FROM);
		renc_escape_json(out, ch->key_change_from);
	}
	if ((is_delete ? ch->extra_headers_old : ch->extra_headers) != NULL)
		appendStringInfoString(out, is_delete ? ch->extra_headers_old : ch->extra_headers);
	appendStringInfo(out, LOG_RECORD_LSN "\"" UINT64_FORMAT "\"" LOG_RECORD_OP_POSITION UINT64_FORMAT
					 LOG_RECORD_TXIDS "%u]",
					 ch->lsn, ch->op_position, ch->xid);
	MemoryContextSwitchTo(old);
	MemoryContextReset(enc->row_context);
	return true;
}

/*
 * An update of a row that both was and stays in the shape (old and new
 * values known): one "update" message, or, when the key changed, Electric's
 * pair, a delete of the old key that names the new one at the update's op
 * position and an insert of the new key that names the old one at the next.
 * Each message that says something goes to `sink`.
 */
void
row_encoder_update(RowEncoder *enc, const RowChange *update, bool replica_full,
				   RowMessageSink sink, void *arg)
{
	char	   *old_key = row_encoder_key(enc, update->old_values, update->old_nulls);
	char	   *new_key = row_encoder_key(enc, update->new_values, update->new_nulls);
	StringInfoData msg;

	initStringInfo(&msg);
	if (strcmp(old_key, new_key) == 0)
	{
		if (row_encoder_change(enc, update, replica_full, &msg))
			sink(arg, update->op_position, &msg);
	}
	else
	{
		RowChange	del = *update;
		RowChange	ins = *update;

		del.operation = LOG_RECORD_DELETE;
		del.new_values = NULL;
		del.new_nulls = NULL;
		del.key_change_to = new_key;
		if (row_encoder_change(enc, &del, replica_full, &msg))
			sink(arg, del.op_position, &msg);
		resetStringInfo(&msg);
		ins.operation = LOG_RECORD_INSERT;
		ins.old_values = NULL;
		ins.old_nulls = NULL;
		ins.op_position = update->op_position + 1;
		ins.key_change_from = old_key;
		if (row_encoder_change(enc, &ins, replica_full, &msg))
			sink(arg, ins.op_position, &msg);
	}
	pfree(msg.data);
	pfree(old_key);
	pfree(new_key);
}

void
row_encoder_set_display_settings(GucContext context, GucSource source, GucAction action)
{
	static const char *const settings[][2] = {
		{"DateStyle", "ISO, DMY"},
		{"TimeZone", "UTC"},
		{"extra_float_digits", "1"},
		{"bytea_output", "hex"},
		{"IntervalStyle", "iso_8601"},
	};

	for (size_t i = 0; i < lengthof(settings); i++)
		(void) set_config_option(settings[i][0], settings[i][1], context, source,
								 action, true, 0, false);
}
