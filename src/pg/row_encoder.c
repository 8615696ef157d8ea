/*-------------------------------------------------------------------------
 *
 * row_encoder.c
 *		Rows to Electric JSON change messages, encoded once.
 *
 * Every message a client receives is produced here, once, when the row
 * enters a shape log; serving is copying bytes.  A message looks like
 *
 *	{"key":"\"public\".\"items\"/\"1\"","value":{"id":"1","title":"a"},
 *	 "headers":{"operation":"insert","relation":["public","items"]}}
 *
 * Values are PostgreSQL's text output under the display settings Electric
 * uses (row_encoder_set_display_settings), as JSON strings, or null.  The
 * key is the quoted relation followed by /"<value>" for each key column,
 * with "/" doubled inside values and NULL written as /_ ; the same encoder
 * will serve the decoded WAL, so snapshot and stream keys always agree.
 *
 * Output functions are looked up once per encoder; each row's scratch
 * memory lives in a context reset after the row.  Strings are escaped by
 * renc_escape_json, which writes what PostgreSQL's escape_json writes, but
 * copies the runs between characters that need escaping whole instead of
 * appending byte by byte: escaping was the snapshot's largest cost.
 *
 * IDENTIFICATION
 *	  src/pg/row_encoder.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/json.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"

#include "json_text.h"
#include "row_encoder.h"

/* escape_json(), byte for byte, in runs (json_escape_byte says how). */
static void
renc_escape_json(StringInfo out, const char *str)
{
	const char *run = str;

	appendStringInfoCharMacro(out, '"');
	for (const char *p = str;; p++)
	{
		char		tmp[JSON_ESCAPE_MAX];
		const char *escape = *p ? json_escape_byte((unsigned char) *p, tmp) : NULL;

		if (*p && escape == NULL)
			continue;
		if (p > run)
			appendBinaryStringInfo(out, run, (int) (p - run));
		if (*p == '\0')
			break;
		appendStringInfoString(out, escape);
		run = p + 1;
	}
	appendStringInfoCharMacro(out, '"');
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
	getTypeOutputInfo(typid, &output, &varlena);
	fmgr_info(output, &col->output);
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
	appendStringInfoChar(&buf, '[');
	escape_json(&buf, rel->schema);
	appendStringInfoChar(&buf, ',');
	escape_json(&buf, rel->table);
	appendStringInfoChar(&buf, ']');
	enc->relation_json = buf.data;
	enc->insert_headers = psprintf(",\"headers\":{\"operation\":\"insert\",\"relation\":%s}}",
								   enc->relation_json);

	initStringInfo(&enc->key);
	enc->row_context = AllocSetContextCreate(CurrentMemoryContext,
											 "shape_sync row encoder",
											 ALLOCSET_DEFAULT_SIZES);
}

static char *
renc_output(RowEncoderColumn *col, Datum value)
{
	return OutputFunctionCall(&col->output, value);
}

/* Builds the key of the row in `values` into enc->key. */
static void
renc_key(RowEncoder *enc, const Datum *values, const bool *nulls)
{
	resetStringInfo(&enc->key);
	appendStringInfoString(&enc->key, enc->key_prefix);
	for (int i = 0; i < enc->rel->nkeys; i++)
	{
		RowEncoderColumn *col = &enc->keys[i];
		int			idx = col->attnum - 1;

		if (nulls[idx])
		{
			appendStringInfoString(&enc->key, "/_");
			continue;
		}
		appendStringInfoString(&enc->key, "/\"");
		{
			const char *run = renc_output(col, values[idx]);
			const char *slash;

			/* each "/" doubled */
			while ((slash = strchr(run, '/')) != NULL)
			{
				appendBinaryStringInfo(&enc->key, run, (int) (slash - run) + 1);
				appendStringInfoChar(&enc->key, '/');
				run = slash + 1;
			}
			appendStringInfoString(&enc->key, run);
		}
		appendStringInfoChar(&enc->key, '"');
	}
}

char *
row_encoder_key(RowEncoder *enc, const Datum *values, const bool *nulls)
{
	MemoryContext old = MemoryContextSwitchTo(enc->row_context);
	char	   *key;

	/* output functions' scratch goes with the row; the key to the caller */
	renc_key(enc, values, nulls);
	MemoryContextSwitchTo(old);
	key = pstrdup(enc->key.data);
	MemoryContextReset(enc->row_context);
	return key;
}

/* Appends "name":value for one column. */
static void
renc_value(StringInfo out, RowEncoderColumn *col, const char *text, bool *first)
{
	if (!*first)
		appendStringInfoChar(out, ',');
	*first = false;
	appendStringInfoString(out, col->json_name);
	appendStringInfoChar(out, ':');
	if (text == NULL)
		appendStringInfoString(out, "null");
	else
		renc_escape_json(out, text);
}

static const char *
renc_text(RowEncoderColumn *col, const Datum *values, const bool *nulls)
{
	int			idx = col->attnum - 1;

	return nulls[idx] ? NULL : renc_output(col, values[idx]);
}

static bool
renc_same(const char *a, const char *b)
{
	return (a == NULL && b == NULL) || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

void
row_encoder_snapshot_row(RowEncoder *enc, const Datum *values, const bool *nulls,
						 StringInfo out)
{
	MemoryContext old = MemoryContextSwitchTo(enc->row_context);
	bool		first = true;

	renc_key(enc, values, nulls);
	appendStringInfoString(out, "{\"key\":");
	renc_escape_json(out, enc->key.data);
	appendStringInfoString(out, ",\"value\":{");
	for (int i = 0; i < enc->rel->ncolumns; i++)
		renc_value(out, &enc->values[i], renc_text(&enc->values[i], values, nulls), &first);
	appendStringInfoChar(out, '}');
	appendStringInfoString(out, enc->insert_headers);

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
	MemoryContext old = MemoryContextSwitchTo(enc->row_context);
	bool		is_delete = strcmp(ch->operation, "delete") == 0;
	bool		is_update = strcmp(ch->operation, "update") == 0;
	const Datum *row_values = is_delete ? ch->old_values : ch->new_values;
	const bool *row_nulls = is_delete ? ch->old_nulls : ch->new_nulls;
	int			start = out->len;
	bool		changed = false;
	bool		first = true;

	renc_key(enc, row_values, row_nulls);
	appendStringInfoString(out, "{\"key\":");
	renc_escape_json(out, enc->key.data);
	appendStringInfoString(out, ",\"value\":{");
	for (int i = 0; i < enc->rel->ncolumns; i++)
	{
		RowEncoderColumn *col = &enc->values[i];
		const char *text = renc_text(col, row_values, row_nulls);
		bool		include = !is_update && (replica_full || !is_delete ||
											 enc->rel->columns[i].key_index >= 0);

		if (is_update)
		{
			bool		differs = ch->old_values == NULL ||
				!renc_same(text, renc_text(col, ch->old_values, ch->old_nulls));

			changed = changed || differs;
			include = replica_full || differs || enc->rel->columns[i].key_index >= 0;
		}
		if (include)
			renc_value(out, col, text, &first);
	}
	appendStringInfoChar(out, '}');
	if (is_update && !changed)
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
		appendStringInfoString(out, ",\"old_value\":{");
		for (int i = 0; i < enc->rel->ncolumns; i++)
		{
			RowEncoderColumn *col = &enc->values[i];
			const char *was = renc_text(col, ch->old_values, ch->old_nulls);

			if (!renc_same(was, renc_text(col, ch->new_values, ch->new_nulls)))
				renc_value(out, col, was, &first);
		}
		appendStringInfoChar(out, '}');
	}
	appendStringInfo(out, ",\"headers\":{\"operation\":\"%s\",\"relation\":%s",
					 ch->operation, enc->relation_json);
	if (ch->key_change_to)
	{
		appendStringInfoString(out, ",\"key_change_to\":");
		renc_escape_json(out, ch->key_change_to);
	}
	if (ch->key_change_from)
	{
		appendStringInfoString(out, ",\"key_change_from\":");
		renc_escape_json(out, ch->key_change_from);
	}
	appendStringInfo(out, ",\"lsn\":\"" UINT64_FORMAT "\",\"op_position\":" UINT64_FORMAT
					 ",\"txids\":[%u]",
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

		del.operation = "delete";
		del.new_values = NULL;
		del.new_nulls = NULL;
		del.key_change_to = new_key;
		if (row_encoder_change(enc, &del, replica_full, &msg))
			sink(arg, del.op_position, &msg);
		resetStringInfo(&msg);
		ins.operation = "insert";
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
