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
 * memory lives in a context reset after the row.
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

#include "row_encoder.h"

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
	appendStringInfoString(&buf, ",\"headers\":{\"operation\":\"insert\",\"relation\":[");
	escape_json(&buf, rel->schema);
	appendStringInfoChar(&buf, ',');
	escape_json(&buf, rel->table);
	appendStringInfoString(&buf, "]}}");
	enc->insert_headers = buf.data;

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

void
row_encoder_snapshot_row(RowEncoder *enc, const Datum *values, const bool *nulls,
						 StringInfo out)
{
	MemoryContext old = MemoryContextSwitchTo(enc->row_context);

	/* key */
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
		for (const char *p = renc_output(col, values[idx]); *p; p++)
		{
			if (*p == '/')
				appendStringInfoChar(&enc->key, '/');
			appendStringInfoChar(&enc->key, *p);
		}
		appendStringInfoChar(&enc->key, '"');
	}
	appendStringInfoString(out, "{\"key\":");
	escape_json(out, enc->key.data);

	/* value */
	appendStringInfoString(out, ",\"value\":{");
	for (int i = 0; i < enc->rel->ncolumns; i++)
	{
		RowEncoderColumn *col = &enc->values[i];
		int			idx = col->attnum - 1;

		if (i > 0)
			appendStringInfoChar(out, ',');
		appendStringInfoString(out, col->json_name);
		appendStringInfoChar(out, ':');
		if (nulls[idx])
			appendStringInfoString(out, "null");
		else
			escape_json(out, renc_output(col, values[idx]));
	}
	appendStringInfoChar(out, '}');
	appendStringInfoString(out, enc->insert_headers);

	MemoryContextSwitchTo(old);
	MemoryContextReset(enc->row_context);
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
