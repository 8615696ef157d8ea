/*-------------------------------------------------------------------------
 *
 * sql_api.c
 *		SQL functions: validate and preview shapes.
 *
 * validate_shape() and encode_rows() run the very code the HTTP path runs
 * (shape_def.c, shape_where.c, snapshot_query.c, row_encoder.c) in the
 * caller's backend, so a definition can be checked, and its messages seen,
 * from psql.  They run with the caller's privileges, not shape_sync.role's:
 * a role that may call encode_rows() reads no more than it could with
 * SELECT.  To see what the HTTP path would allow, call them after SET ROLE
 * to shape_sync.role.
 * What the server holds and does is shown by sql_monitor.c.
 *
 * In SQL, names follow PostgreSQL's own rules (the table argument is a
 * possibly qualified name, the columns a comma-separated list), so the
 * same identifiers are written the same way as in the HTTP API.
 *
 * IDENTIFICATION
 *	  src/pg/sql/sql_api.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <stdatomic.h>

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"
#include "utils/varlena.h"

#include "row_encoder.h"
#include "shape_def.h"
#include "shape_relation.h"
#include "shared_state.h"
#include "snapshot_query.h"

PG_FUNCTION_INFO_V1(shape_sync_validate_shape);
PG_FUNCTION_INFO_V1(shape_sync_encode_rows);

/* Builds a ShapeDefinition from SQL arguments (palloc'd). */
static void
sql_definition(FunctionCallInfo fcinfo, ShapeDefinition *def, bool with_replica)
{
	List	   *names;

	memset(def, 0, sizeof(*def));
	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("a shape needs a table")));
	names = textToQualifiedNameList(PG_GETARG_TEXT_PP(0));
	if (list_length(names) == 1)
		def->table = strVal(linitial(names));
	else if (list_length(names) == 2)
	{
		def->schema = strVal(linitial(names));
		def->table = strVal(lsecond(names));
	}
	else
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_NAME),
				 errmsg("improper table name: \"%s\"", text_to_cstring(PG_GETARG_TEXT_PP(0))),
				 errhint("Write the table as \"name\" or \"schema.name\".")));

	if (!PG_ARGISNULL(1))
		def->where = text_to_cstring(PG_GETARG_TEXT_PP(1));

	if (!PG_ARGISNULL(2))
	{
		ArrayType  *arr = PG_GETARG_ARRAYTYPE_P(2);
		Datum	   *elems;
		bool	   *nulls;
		int			n;

		if (ARR_NDIM(arr) > 1)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("params must be a one-dimensional array")));
		deconstruct_array(arr, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
		def->nparams = n;
		def->params = palloc0(sizeof(char *) * Max(n, 1));
		for (int i = 0; i < n; i++)
			def->params[i] = nulls[i] ? NULL : TextDatumGetCString(elems[i]);
	}

	if (!PG_ARGISNULL(3))
	{
		char	   *raw = text_to_cstring(PG_GETARG_TEXT_PP(3));
		List	   *cols;
		ListCell   *lc;
		int			i = 0;

		if (!SplitIdentifierString(raw, ',', &cols) || cols == NIL)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid column list: \"%s\"",
							text_to_cstring(PG_GETARG_TEXT_PP(3))),
					 errhint("List column names separated by commas; quote names with special characters.")));
		def->ncolumns = list_length(cols);
		def->columns = palloc(sizeof(char *) * def->ncolumns);
		foreach(lc, cols)
			def->columns[i++] = (char *) lfirst(lc);
	}

	if (with_replica && !PG_ARGISNULL(4))
	{
		char	   *replica = text_to_cstring(PG_GETARG_TEXT_PP(4));

		if (strcmp(replica, "full") == 0)
			def->replica_full = true;
		else if (strcmp(replica, "default") != 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("invalid replica mode: \"%s\"", replica),
					 errhint("Use \"default\" or \"full\".")));
	}
}

Datum
shape_sync_validate_shape(PG_FUNCTION_ARGS)
{
	ShapeDefinition def;
	ShapeSpec	spec;
	ShapeRelation *rel;
	StringInfoData buf;

	sql_definition(fcinfo, &def, true);
	shape_def_validate(&def, &spec, false);
	rel = shape_relation_load(spec.relid, spec.ncolumns, spec.columns);

	initStringInfo(&buf);
	appendStringInfoString(&buf, "{\"relation\":");
	escape_json(&buf, shape_quoted_relation(rel));
	appendStringInfoString(&buf, ",\"columns\":[");
	for (int i = 0; i < rel->ncolumns; i++)
	{
		if (i > 0)
			appendStringInfoChar(&buf, ',');
		escape_json(&buf, rel->columns[i].name);
	}
	appendStringInfoString(&buf, "],\"where\":");
	if (spec.where_sql)
		escape_json(&buf, spec.where_sql);
	else
		appendStringInfoString(&buf, "null");
	appendStringInfo(&buf, ",\"replica\":\"%s\",\"schema\":%s}",
					 def.replica_full ? "full" : "default", shape_schema_json(rel));
	PG_RETURN_DATUM(DirectFunctionCall1(jsonb_in, CStringGetDatum(buf.data)));
}

static void
sql_emit_row(void *arg, const char *message, int len)
{
	ReturnSetInfo *rsinfo = arg;
	Datum		value = PointerGetDatum(cstring_to_text_with_len(message, len));
	bool		isnull = false;

	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, &value, &isnull);
}

Datum
shape_sync_encode_rows(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	ShapeDefinition def;
	ShapeSpec	spec;
	int			nestlevel;

	sql_definition(fcinfo, &def, false);
	InitMaterializedSRF(fcinfo, MAT_SRF_USE_EXPECTED_DESC);
	shape_def_validate(&def, &spec, false);

	nestlevel = NewGUCNestLevel();
	row_encoder_set_display_settings(PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE);
	snapshot_scan(&spec, NULL, NULL, sql_emit_row, rsinfo);
	AtEOXact_GUC(true, nestlevel);
	return (Datum) 0;
}
