/*-------------------------------------------------------------------------
 *
 * shape_def.c
 *		Validation of shape definitions against the catalog.
 *
 * A client's shape definition (table, where, params, columns, replica) is
 * turned here into a ShapeSpec: the relation's OID, the selected column
 * numbers, and the where clause as an analysed expression tree, deparsed
 * back to SQL with its parameters bound as typed constants.  The client's
 * text is only ever given to PostgreSQL's parser, as the where clause of
 * "SELECT 1 WHERE <where>"; the statement must come back as exactly that
 * shape, and the snapshot query is later built from the deparsed tree, so
 * no client text is spliced into SQL.
 *
 * The where clause is limited like a publication row filter, because it
 * will also be evaluated on decoded tuples: immutable functions and
 * operators of pg_catalog only, no subqueries, aggregates, window
 * functions, set-returning functions or system columns.  It is analysed
 * with search_path pinned to pg_catalog, its constants are folded once,
 * here, and the folded tree is what the snapshot and the stream evaluate,
 * so nothing resolves names again later.
 *
 * A client's clause must not be able to run anyone's code but PostgreSQL's,
 * nor to look up anything outside pg_catalog, nor to make much from
 * little.  Before analysis (which reads literals through their types' input
 * functions, and sizes an array by the largest $n), the raw tree is
 * checked: a $n past the parameters given; names qualified with another
 * schema (functions, operators, collations); column references that are
 * not plain columns, or name a column the user may not SELECT; casts to
 * types whose input runs a database user's or an extension's code, pads
 * (character(n), bit(n)) or looks names up (the object identifier types,
 * regclass, regconfig, ...), and calls of the functions that take or return
 * the latter (to_tsvector(regconfig, ...)).  After it: functions whose
 * output or time grows far beyond their input, jsonpaths (exponential).
 * Folding goes one node at a time and counts every constant it makes
 * against shape_sync.max_where_constant_size, within the worker's
 * evaluation deadline (eval_deadline.c), and then compiles every constant
 * pattern (regular expressions, LIKE) once, so that an invalid one is the
 * client's error now; and what one row's evaluation holds, counted in
 * column values, is bounded (WHERE_MAX_VALUE_COST).
 *
 * Validation runs as the current user (shape_sync.role in the worker, the
 * caller in SQL), and refuses what that user could not read with SELECT:
 * the schema without USAGE, the table or a column the shape reads (its
 * columns, key and where clause) without SELECT, and a table whose
 * row-level security applies to the user, because a shape is shared by all
 * its clients.  A user that may read nothing of the table is refused first,
 * before anything else is checked, so that all it learns is that the table
 * exists: no error about a column list, a where clause or the replica
 * identity tells it the table's columns, their types or its settings.  A
 * table without REPLICA IDENTITY FULL is refused, unless
 * shape_sync.manage_replica_identity lets the snapshot worker set it.  A
 * table without a primary key is keyed by all its columns, so a column list
 * must name them all.
 *
 * Failures are ordinary ereport(ERROR)s, so the SQL function
 * validate_shape() reports them the PostgreSQL way.  The HTTP path catches
 * them and needs two more facts, kept in shape_def_error_field and
 * shape_def_http_message: which request field failed, and, where Electric's
 * clients expect a particular sentence, that sentence.
 *
 * IDENTIFICATION
 *	  src/pg/shape_def.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/relation.h"
#include "access/table.h"
#include "catalog/catalog.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_constraint.h"
#include "catalog/pg_index.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_language.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_range.h"
#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/optimizer.h"
#include "parser/parse_coerce.h"
#include "parser/parse_collate.h"
#include "parser/parse_expr.h"
#include "parser/parse_node.h"
#include "parser/parse_param.h"
#include "parser/parse_relation.h"
#include "parser/parse_type.h"
#include "parser/parser.h"
#include "rewrite/rewriteManip.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/catcache.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/multirangetypes.h"
#include "utils/numeric.h"
#include "utils/rangetypes.h"
#include "utils/rel.h"
#include "utils/ruleutils.h"
#include "utils/syscache.h"
#include "utils/typcache.h"

#include "eval_deadline.h"
#include "guc.h"
#include "row_encoder.h"
#include "shape_def.h"
#include "shape_role.h"
#include "shape_table.h"
#include "table_code.h"

#define WHERE_PREFIX "SELECT 1 WHERE "

const char *shape_def_error_field = NULL;
char		shape_def_http_message[512];

static void sdef_check_readable(Relation rel, const ShapeSpec *spec);
static void sdef_check_may_read(Relation rel);

/* Records the field and Electric's wording for the error about to be raised. */
static void
sdef_failing(const char *field, const char *http_message)
{
	shape_def_error_field = field;
	if (http_message)
		strlcpy(shape_def_http_message, http_message, sizeof(shape_def_http_message));
	else
		shape_def_http_message[0] = '\0';
}

/* ---------------------------------------------------------------- names */

static int
sdef_column_name_cmp(const void *a, const void *b)
{
	const ShapeColumn *ca = a;
	const ShapeColumn *cb = b;

	return strcmp(ca->name, cb->name);
}

/* shape_relation_describe of a relation that this opens and locks for it */
ShapeRelation *
shape_relation_load(Oid relid, int ncolumns, const AttrNumber *columns)
{
	Relation	rel = table_open(relid, AccessShareLock);
	ShapeRelation *sr = shape_relation_describe(rel, ncolumns, columns);

	table_close(rel, AccessShareLock);
	return sr;
}

/*
 * Describes the relation and the selected columns (all when ncolumns is 0).
 * The key is the primary key, or every column by name when there is none.
 * Takes no lock: the caller holds one on the relation (which keeps its
 * primary key's index), or decodes, where the catalog is read as of the
 * change.
 */
ShapeRelation *
shape_relation_describe(Relation rel, int ncolumns, const AttrNumber *columns)
{
	ShapeRelation *sr = palloc0(sizeof(ShapeRelation));
	Oid			relid = RelationGetRelid(rel);
	TupleDesc	desc = RelationGetDescr(rel);
	Oid			pkoid = RelationGetPrimaryKeyIndex(rel);
	int			n = 0;

	sr->relid = relid;
	sr->natts = desc->natts;
	sr->schema = get_namespace_name(RelationGetNamespace(rel));
	sr->table = pstrdup(RelationGetRelationName(rel));
	sr->columns = palloc0(sizeof(ShapeColumn) * Max(desc->natts, 1));

	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);
		ShapeColumn *col;
		bool		selected = ncolumns == 0;

		if (att->attisdropped)
			continue;
		for (int j = 0; j < ncolumns && !selected; j++)
			selected = columns[j] == att->attnum;
		if (!selected)
			continue;
		col = &sr->columns[n++];
		col->attnum = att->attnum;
		col->name = pstrdup(NameStr(att->attname));
		col->typid = att->atttypid;
		col->typmod = att->atttypmod;
		col->ndims = att->attndims;
		if (col->ndims == 0 && OidIsValid(get_element_type(att->atttypid)))
			col->ndims = 1;
		col->not_null = att->attnotnull;
		col->key_index = -1;
	}
	sr->ncolumns = n;

	if (OidIsValid(pkoid))
	{
		Relation	idx = RelationIdGetRelation(pkoid);
		int			nkeys;

		if (!RelationIsValid(idx))
			elog(ERROR, "could not open the primary key index %u", pkoid);
		nkeys = idx->rd_index->indnkeyatts;

		sr->has_pk = true;
		sr->nkeys = nkeys;
		sr->keys = palloc(sizeof(AttrNumber) * nkeys);
		for (int k = 0; k < nkeys; k++)
		{
			sr->keys[k] = idx->rd_index->indkey.values[k];
			for (int c = 0; c < sr->ncolumns; c++)
				if (sr->columns[c].attnum == sr->keys[k])
					sr->columns[c].key_index = k;
		}
		RelationClose(idx);
	}
	else
	{
		/* no primary key: every column, ordered by name, is the key */
		ShapeColumn *all = palloc(sizeof(ShapeColumn) * Max(desc->natts, 1));
		int			nall = 0;

		for (int i = 0; i < desc->natts; i++)
		{
			Form_pg_attribute att = TupleDescAttr(desc, i);

			if (att->attisdropped)
				continue;
			all[nall].attnum = att->attnum;
			all[nall].name = NameStr(att->attname);
			nall++;
		}
		qsort(all, nall, sizeof(ShapeColumn), sdef_column_name_cmp);
		sr->nkeys = nall;
		sr->keys = palloc(sizeof(AttrNumber) * Max(nall, 1));
		for (int k = 0; k < nall; k++)
		{
			sr->keys[k] = all[k].attnum;
			for (int c = 0; c < sr->ncolumns; c++)
				if (sr->columns[c].attnum == sr->keys[k])
					sr->columns[c].key_index = k;
		}
		pfree(all);
	}
	return sr;
}

/*
 * A table that stores rows of `relid` (the table itself, or one of its
 * partitions) and does not log old rows in full, or InvalidOid when every
 * one does.  The replica identity of a partitioned table itself does not
 * matter: each partition logs its own rows.
 */
Oid
shape_table_not_logged_in_full(Oid relid)
{
	List	   *tables;
	ListCell   *lc;

	if (get_rel_relkind(relid) != RELKIND_PARTITIONED_TABLE)
		tables = list_make1_oid(relid);
	else
		tables = find_all_inheritors(relid, NoLock, NULL);
	foreach(lc, tables)
	{
		HeapTuple	tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(lfirst_oid(lc)));
		Form_pg_class form;
		bool		full;

		if (!HeapTupleIsValid(tuple))
			continue;			/* dropped meanwhile */
		form = (Form_pg_class) GETSTRUCT(tuple);
		full = form->relkind == RELKIND_PARTITIONED_TABLE ||
			form->relreplident == REPLICA_IDENTITY_FULL;
		ReleaseSysCache(tuple);
		if (!full)
			return lfirst_oid(lc);
	}
	return InvalidOid;
}

/* "schema"."table", each part quoted the PostgreSQL way, always. */
char *
shape_quoted_name(const char *schema, const char *table)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfoChar(&buf, '"');
	for (const char *p = schema; *p; p++)
	{
		if (*p == '"')
			appendStringInfoChar(&buf, '"');
		appendStringInfoChar(&buf, *p);
	}
	appendStringInfoString(&buf, "\".\"");
	for (const char *p = table; *p; p++)
	{
		if (*p == '"')
			appendStringInfoChar(&buf, '"');
		appendStringInfoChar(&buf, *p);
	}
	appendStringInfoChar(&buf, '"');
	return buf.data;
}

char *
shape_quoted_relation(const ShapeRelation *rel)
{
	return shape_quoted_name(rel->schema, rel->table);
}

/* --------------------------------------------------------- where clause */

typedef struct SdefParams
{
	const ShapeDefinition *def;
	Oid		   *types;
	int			ntypes;
} SdefParams;

/* Replaces each $n with a constant of the type the parser inferred. */
static Node *
sdef_bind_params(Node *node, SdefParams *params)
{
	if (node == NULL)
		return NULL;
	if (IsA(node, Param) && ((Param *) node)->paramkind == PARAM_EXTERN)
	{
		Param	   *param = (Param *) node;
		int			i = param->paramid - 1;
		Oid			type = param->paramtype;
		Oid			input;
		Oid			ioparam;
		int16		typlen;
		bool		typbyval;
		Datum		value;
		char		msg[128];

		if (i >= 0 && i < params->def->nparams && params->def->params[i] == NULL)
		{
			snprintf(msg, sizeof(msg), "Parameter $%d is null; use IS NULL in the where clause instead", i + 1);
			sdef_failing("params", msg);
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("parameter $%d of a shape's where clause is null", i + 1),
					 errhint("Write IS NULL in the where clause instead of binding a null value.")));
		}
		if (i < 0 || i >= params->def->nparams)
		{
			snprintf(msg, sizeof(msg), "Parameter $%d was not provided", i + 1);
			sdef_failing("params", msg);
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_PARAMETER),
					 errmsg("there is no value for parameter $%d", i + 1),
					 errhint("Pass the value as params[%d].", i + 1)));
		}
		if (type == UNKNOWNOID || !OidIsValid(type))
			type = TEXTOID;
		sdef_failing("params", NULL);
		getTypeInputInfo(type, &input, &ioparam);
		get_typlenbyval(type, &typlen, &typbyval);
		value = OidInputFunctionCall(input, params->def->params[i], ioparam, -1);
		sdef_failing("where", NULL);
		return (Node *) makeConst(type, -1, param->paramcollid, typlen, value,
								  false, typbyval);
	}
	return expression_tree_mutator(node, sdef_bind_params, params);
}

/*
 * pg_catalog functions whose output can grow far beyond their input
 * (repeat('x', 1e9)) or whose time can (factorial(1e5)): a client's
 * constants go through them at validation, and every row on every change.
 */
static const char *const sdef_unbounded_functions[] = {
	"repeat", "lpad", "rpad", "array_fill", "format", "replace", "regexp_replace",
	"factorial", "numeric_fac", "power", "pow", "numeric_power",
	/* output quadratic in the nesting of its input */
	"jsonb_pretty",
	/* lax mode wraps a scalar as an array: $[0,0][0,0]... makes 2^k items */
	"jsonb_path_query", "jsonb_path_query_array", "jsonb_path_query_first",
	"jsonb_path_query_tz", "jsonb_path_query_array_tz", "jsonb_path_query_first_tz",
	"jsonb_path_match", "jsonb_path_match_tz", "jsonb_path_match_opr",
	/* rewrites every occurrence of its pattern with a query as large */
	"ts_rewrite",
	/* wraps every word it selects in markers of up to 32 kB each */
	"ts_headline",
	/* numeric only: e^x of a six-digit x has 130,000 digits */
	"exp"
};

/* Of those, the names refused only when they return numeric (power of float8 is fine). */
static bool
sdef_numeric_only(const char *name)
{
	return strcmp(name, "power") == 0 || strcmp(name, "pow") == 0 || strcmp(name, "exp") == 0;
}

static bool
sdef_unbounded_function(Oid funcid, void *context)
{
	char	   *name = get_func_name(funcid);

	if (name == NULL)
		return false;
	for (size_t i = 0; i < lengthof(sdef_unbounded_functions); i++)
		if (strcmp(name, sdef_unbounded_functions[i]) == 0 &&
			(!sdef_numeric_only(name) || get_func_rettype(funcid) == NUMERICOID))
		{
			*(const char **) context = sdef_unbounded_functions[i];
			return true;
		}
	return false;
}

/* Functions a where clause may not call: all but pg_catalog's own. */
static bool
sdef_foreign_function(Oid funcid, void *context)
{
	return funcid >= FirstNormalObjectId ||
		get_func_namespace(funcid) != PG_CATALOG_NAMESPACE;
}

/*
 * The longest character(n) or bit(n) a where clause may read a value as:
 * reading pads the value to n, and n may be ten million, so that
 * '{a,a,...}'::character(10485760)[] would build a gigabyte from a few
 * bytes, at validation or, cast from a column, on every change.
 */
#define WHERE_MAX_PADDED_LENGTH	1024

static void sdef_refuse_padding(const char *what, const char *type);

/*
 * The length coercions that pad (character(n), bit(n)), called or made by
 * a cast of a column: the length, their second argument, must be a
 * constant of at most WHERE_MAX_PADDED_LENGTH.
 */
static int32
sdef_padding_limit(Oid funcid)
{
	switch (funcid)
	{
		case F_BPCHAR_BPCHAR_INT4_BOOL:
			return WHERE_MAX_PADDED_LENGTH + VARHDRSZ;
		case F_BIT_BIT_INT4_BOOL:
		case F_BIT_INT4_INT4:
		case F_BIT_INT8_INT4:
			return WHERE_MAX_PADDED_LENGTH;
		default:
			return -1;			/* it does not pad */
	}
}

static bool
sdef_contains_padding(Node *node, void *context)
{
	if (node == NULL)
		return false;
	if (IsA(node, FuncExpr) && sdef_padding_limit(((FuncExpr *) node)->funcid) >= 0)
		return true;
	return expression_tree_walker(node, sdef_contains_padding, context);
}

static void
sdef_check_padding(FuncExpr *func)
{
	int32		limit = sdef_padding_limit(func->funcid);
	Node	   *length;

	if (limit < 0)
		return;
	length = list_length(func->args) >= 2 ? lsecond(func->args) : NULL;
	if (length != NULL && IsA(length, Const) && !((Const *) length)->constisnull &&
		DatumGetInt32(((Const *) length)->constvalue) <= limit)
		return;
	sdef_refuse_padding(psprintf("%s()", get_func_name(func->funcid)),
						length != NULL && IsA(length, Const) && !((Const *) length)->constisnull ?
						format_type_with_typemod(func->funcresulttype,
												 DatumGetInt32(((Const *) length)->constvalue)) :
						psprintf("%s of a length it computes", format_type_be(func->funcresulttype)));
}

/* Refuses a system column or a whole-row reference (cursorpos 0: none known). */
static void
sdef_refuse_system_column(int cursorpos)
{
	sdef_failing("where", "System columns and whole-row references are not allowed in where clauses");
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("system columns and whole-row references are not allowed in a shape's where clause"),
			 errposition(cursorpos)));
}

/* Refuses a function or an operator that is not pg_catalog's. */
static void
sdef_refuse_foreign_function(void)
{
	sdef_failing("where", "Only functions and operators of pg_catalog are allowed in where clauses");
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("only functions and operators of pg_catalog are allowed in a shape's where clause"),
			 errdetail("The where clause is also evaluated while decoding the WAL, where only built-in functions are safe.")));
}

static bool sdef_type_names(Oid typid);
static bool sdef_function_names(HeapTuple proctup);
static void sdef_refuse_naming_function(const char *name, int cursorpos);
static void sdef_require_safe_type(Oid typid, int32 typmod, const char *what);

/* check_functions_in_node: a function that takes or returns an object identifier type */
static bool
sdef_naming_function(Oid funcid, void *context)
{
	HeapTuple	tup = SearchSysCache1(PROCOID, ObjectIdGetDatum(funcid));
	bool		found;

	if (!HeapTupleIsValid(tup))
		return false;
	found = sdef_function_names(tup);
	ReleaseSysCache(tup);
	if (found)
		*(Oid *) context = funcid;
	return found;
}

/*
 * check_functions_in_node: a function that evaluates a jsonpath (@?, @@,
 * the jsonb_path_* family).  In lax mode a path wraps each scalar as an
 * array, so '$[0,0][0,0]...' makes 2^k items from a path of 6k bytes, on
 * every row of every change; no bound on it is known short of evaluating
 * it, so jsonpaths are not evaluated at all.
 */
static bool
sdef_jsonpath_function(Oid funcid, void *context)
{
	HeapTuple	tup;
	bool		found = false;

	if (funcid == F_JSONPATH_OUT || funcid == F_JSONPATH_SEND)
		return false;			/* a jsonpath made text: nothing is evaluated */
	tup = SearchSysCache1(PROCOID, ObjectIdGetDatum(funcid));
	if (!HeapTupleIsValid(tup))
		return false;
	for (int i = 0; i < ((Form_pg_proc) GETSTRUCT(tup))->pronargs && !found; i++)
		found = ((Form_pg_proc) GETSTRUCT(tup))->proargtypes.values[i] == JSONPATHOID;
	ReleaseSysCache(tup);
	if (found)
		*(Oid *) context = funcid;
	return found;
}

/*
 * How a client's clause calls `funcid` in `node`, to begin a sentence:
 * "The operator @?" when an operator calls it, else "f()".
 */
static char *
sdef_call_text(Node *node, Oid funcid)
{
	Oid			opno = InvalidOid;

	if (IsA(node, OpExpr) || IsA(node, DistinctExpr) || IsA(node, NullIfExpr))
		opno = ((OpExpr *) node)->opno;
	else if (IsA(node, ScalarArrayOpExpr))
		opno = ((ScalarArrayOpExpr *) node)->opno;
	if (OidIsValid(opno) && get_opname(opno) != NULL)
		return psprintf("The operator %s", get_opname(opno));
	return psprintf("%s()", get_func_name(funcid));
}

/* Rejects what a row filter on decoded tuples cannot evaluate. */
static bool
sdef_check_node(Node *node, void *context)
{
	const char *unbounded = NULL;
	Oid			funcid = InvalidOid;

	if (node == NULL)
		return false;
	if (IsA(node, Var) && ((Var *) node)->varattno <= 0)
		sdef_refuse_system_column(0);
	/* (the raw tree's checks refuse these before analysis; this is in case) */
	if (check_functions_in_node(node, sdef_naming_function, &funcid))
		sdef_refuse_naming_function(get_func_name(funcid), 0);
	if (!IsA(node, List) && !IsA(node, CaseWhen) && sdef_type_names(exprType(node)))
		sdef_require_safe_type(exprType(node), -1, "an expression");
	if (check_functions_in_node(node, sdef_jsonpath_function, &funcid))
	{
		char	   *what = sdef_call_text(node, funcid);
		char		msg[256];

		snprintf(msg, sizeof(msg),
				 "%s is not allowed in where clauses: evaluating a jsonpath can take time and memory exponential in its length",
				 what);
		sdef_failing("where", msg);
		what[0] = pg_tolower((unsigned char) what[0]);
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("%s is not allowed in a shape's where clause", what),
				 errdetail("Evaluating a jsonpath can take time and memory exponential in its length (in lax mode, each step may double what it finds), and the clause runs on every change of the table.")));
	}
	if (check_functions_in_node(node, sdef_unbounded_function, &unbounded))
	{
		char		msg[256];

		snprintf(msg, sizeof(msg),
				 "%s() is not allowed in where clauses: its output or its time can grow far beyond its input",
				 unbounded);
		sdef_failing("where", msg);
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("%s() is not allowed in a shape's where clause", unbounded),
				 errdetail("Its output or its time can grow far beyond its input, and the clause runs on every change of the table.")));
	}
	if (IsA(node, FuncExpr))
		sdef_check_padding((FuncExpr *) node);
	if (!IsA(node, List) && !IsA(node, CaseWhen) &&
		(exprType(node) == XMLOID || exprType(node) == XMLARRAYOID))
	{
		/* xmlelement(), xpath(): libxml2 builds what it likes, outside PostgreSQL's memory */
		sdef_failing("where", "Values of type xml are not allowed in where clauses");
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("values of type xml are not allowed in a shape's where clause")));
	}
	if (check_functions_in_node(node, sdef_foreign_function, NULL))
		sdef_refuse_foreign_function();
	if (IsA(node, CoerceToDomain) &&
		((CoerceToDomain *) node)->resulttype >= FirstNormalObjectId)
	{
		/* a domain's CHECK constraints may call any function */
		sdef_failing("where", "Casts to user-defined domains are not allowed in where clauses");
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("casts to user-defined domains are not allowed in a shape's where clause"),
				 errdetail("A domain's check constraints may call functions that are not safe while decoding the WAL.")));
	}
	return expression_tree_walker(node, sdef_check_node, context);
}

/* Adds up the bytes of the constants in a (folded) expression. */
static bool
sdef_constant_bytes(Node *node, Size *total)
{
	if (node == NULL)
		return false;
	if (IsA(node, Const))
	{
		Const	   *c = (Const *) node;

		if (!c->constisnull)
			*total += c->constlen > 0 ? (Size) c->constlen :
				c->constlen == -1 ? VARSIZE_ANY(DatumGetPointer(c->constvalue)) :
				strlen(DatumGetCString(c->constvalue)) + 1;
		return false;
	}
	return expression_tree_walker(node, sdef_constant_bytes, total);
}

/* ------------------------------------------------------ type safety */

/*
 * Whether the domain has a CHECK constraint.  A domain's CHECK runs when a
 * value is read as the domain, whatever its expression calls: even a
 * pg_catalog function can run SQL (query_to_xml) or change the session
 * (set_config), so a domain a database user made with a CHECK is never
 * safe.  Domains of the system (information_schema's) are.
 */
static bool
sdef_domain_has_check(Oid domain)
{
	Relation	conrel = table_open(ConstraintRelationId, AccessShareLock);
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tup;
	bool		found = false;

	ScanKeyInit(&key, Anum_pg_constraint_contypid, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(domain));
	scan = systable_beginscan(conrel, ConstraintTypidIndexId, true, NULL, 1, &key);
	while (!found && HeapTupleIsValid(tup = systable_getnext(scan)))
		found = ((Form_pg_constraint) GETSTRUCT(tup))->contype == CONSTRAINT_CHECK;
	systable_endscan(scan);
	table_close(conrel, AccessShareLock);
	return found;
}

/* What reading a value of a type from text could do that a where clause must not. */
typedef enum SdefTypeProblem
{
	SDEF_TYPE_OK,
	SDEF_TYPE_RUNS_CODE,		/* code of a database user or an extension */
	SDEF_TYPE_PADS,				/* character(n) or bit(n) beyond the limit */
	SDEF_TYPE_NAMES				/* an object identifier type: names the catalog */
} SdefTypeProblem;

/*
 * The object identifier types (regclass, regconfig, ...): reading one from
 * text looks a name up in the catalog, in any schema (a qualified name) or
 * the session's path, and a value of one is a catalog object that the
 * functions taking it act on (to_tsvector(regconfig, t) runs the parser and
 * dictionaries of any text search configuration, an extension's included).
 * A where clause names nothing outside pg_catalog, so these are refused
 * wherever they would appear: casts, parameters, columns, and the
 * functions that take or return them.
 */
static bool
sdef_is_reg_type(Oid typid)
{
	switch (typid)
	{
		case REGPROCOID:
		case REGPROCEDUREOID:
		case REGOPEROID:
		case REGOPERATOROID:
		case REGCLASSOID:
		case REGCOLLATIONOID:
		case REGTYPEOID:
		case REGROLEOID:
		case REGNAMESPACEOID:
		case REGCONFIGOID:
		case REGDICTIONARYOID:
			return true;
		default:
			return false;
	}
}

/*
 * Whether reading a value of this type from text (with this typmod, -1 for
 * none) runs built-in code only, and builds nothing much larger than the
 * text: its input function, and those of its parts.  A where clause's
 * literals and parameters are read when it is validated, as
 * shape_sync.role, so a domain whose CHECK calls a function any database
 * user could have written (directly, or as the field of a composite or the
 * element of an array) would run that function with the role's privileges.
 * Safe: the types of the system in pg_catalog but xml (libxml2 parses it),
 * enums, and arrays, composites, ranges and domains made of safe types, a
 * domain only when it has no CHECK or belongs to the system.  Types of
 * extensions are not, even installed in pg_catalog: their code is not
 * PostgreSQL's.  Padding types are safe up to WHERE_MAX_PADDED_LENGTH.
 */
static SdefTypeProblem
sdef_type_problem(Oid typid, int32 typmod, int depth)
{
	HeapTuple	tup;
	Form_pg_type t;
	SdefTypeProblem problem = SDEF_TYPE_RUNS_CODE;

	if (depth > 16)
		return SDEF_TYPE_RUNS_CODE;
	tup = SearchSysCache1(TYPEOID, ObjectIdGetDatum(typid));
	if (!HeapTupleIsValid(tup))
		return SDEF_TYPE_RUNS_CODE;
	t = (Form_pg_type) GETSTRUCT(tup);
	switch (t->typtype)
	{
		case TYPTYPE_BASE:
			if (IsTrueArrayType(t))
				problem = sdef_type_problem(t->typelem, typmod, depth + 1);
			else if (sdef_is_reg_type(typid))
				problem = SDEF_TYPE_NAMES;
			else if (t->typnamespace != PG_CATALOG_NAMESPACE ||
					 typid >= FirstNormalObjectId || typid == XMLOID)
				problem = SDEF_TYPE_RUNS_CODE;
			else if ((typid == BPCHAROID && typmod > WHERE_MAX_PADDED_LENGTH + VARHDRSZ) ||
					 (typid == BITOID && typmod > WHERE_MAX_PADDED_LENGTH))
				problem = SDEF_TYPE_PADS;
			else
				problem = SDEF_TYPE_OK;
			break;
		case TYPTYPE_PSEUDO:
			problem = t->typnamespace == PG_CATALOG_NAMESPACE && typid < FirstNormalObjectId ?
				SDEF_TYPE_OK : SDEF_TYPE_RUNS_CODE;
			break;
		case TYPTYPE_ENUM:
			problem = SDEF_TYPE_OK;	/* enum_in reads pg_enum, nothing else */
			break;
		case TYPTYPE_DOMAIN:
			problem = sdef_type_problem(t->typbasetype, t->typtypmod, depth + 1);
			if (problem == SDEF_TYPE_OK && typid >= FirstNormalObjectId &&
				sdef_domain_has_check(typid))
				problem = SDEF_TYPE_RUNS_CODE;
			break;
		case TYPTYPE_COMPOSITE:
			{
				Relation	rel = relation_open(t->typrelid, AccessShareLock);
				TupleDesc	desc = RelationGetDescr(rel);

				problem = SDEF_TYPE_OK;
				/* the row types of pg_type, pg_proc, ... have fields of those */
				for (int i = 0; i < desc->natts && problem == SDEF_TYPE_OK; i++)
					if (!TupleDescAttr(desc, i)->attisdropped)
						problem = sdef_type_problem(TupleDescAttr(desc, i)->atttypid,
													TupleDescAttr(desc, i)->atttypmod,
													depth + 1);
				relation_close(rel, AccessShareLock);
			}
			break;
		case TYPTYPE_RANGE:
			{
				HeapTuple	rng = SearchSysCache1(RANGETYPE, ObjectIdGetDatum(typid));
				Oid			canonical = InvalidOid;

				if (HeapTupleIsValid(rng))
				{
					canonical = ((Form_pg_range) GETSTRUCT(rng))->rngcanonical;
					ReleaseSysCache(rng);
				}
				problem = sdef_type_problem(get_range_subtype(typid), -1, depth + 1);
				if (problem == SDEF_TYPE_OK && OidIsValid(canonical) &&
					sdef_foreign_function(canonical, NULL))
					problem = SDEF_TYPE_RUNS_CODE;
			}
			break;
		case TYPTYPE_MULTIRANGE:
			problem = sdef_type_problem(get_multirange_range(typid), -1, depth + 1);
			break;
	}
	ReleaseSysCache(tup);
	return problem;
}

/* Refuses a where clause that pads values beyond WHERE_MAX_PADDED_LENGTH. */
static void
sdef_refuse_padding(const char *what, const char *type)
{
	char		msg[512];

	snprintf(msg, sizeof(msg),
			 "%c%s reads values as %s, which where clauses cannot use: it pads every value to more than %d characters or bits",
			 pg_toupper((unsigned char) what[0]), what + 1, type, WHERE_MAX_PADDED_LENGTH);
	sdef_failing("where", msg);
	ereport(ERROR,
			(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
			 errmsg("%s reads values as %s, which a shape's where clause cannot use", what, type),
			 errdetail("It pads every value to more than %d characters or bits.",
					   WHERE_MAX_PADDED_LENGTH),
			 errhint("A where clause may use character(n) and bit(n) up to n = %d, also inside arrays, composite types and domains.",
					 WHERE_MAX_PADDED_LENGTH)));
}

/*
 * Refuses a type whose values the where clause would read from text;
 * `what` names what has the type, in lower case ("a cast", "parameter $1").
 */
static void
sdef_require_safe_type(Oid typid, int32 typmod, const char *what)
{
	char		msg[512];
	SdefTypeProblem problem = sdef_type_problem(typid, typmod, 0);

	if (problem == SDEF_TYPE_OK)
		return;
	if (problem == SDEF_TYPE_PADS)
		sdef_refuse_padding(what, format_type_with_typemod(typid, typmod));
	if (problem == SDEF_TYPE_NAMES)
	{
		snprintf(msg, sizeof(msg),
				 "%c%s has type %s, which where clauses cannot use: its values name objects of the catalog, which are looked up by name",
				 pg_toupper((unsigned char) what[0]), what + 1, format_type_be(typid));
		sdef_failing("where", msg);
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("%s has type %s, which a shape's where clause cannot use", what,
						format_type_be(typid)),
				 errdetail("Its values name objects of the catalog (relations, types, functions, text search configurations, ...), looked up by name in any schema."),
				 errhint("A where clause names nothing outside pg_catalog: object identifier types (regclass, regtype, regconfig, ...) are refused, directly or inside an array, a composite or a domain.")));
	}
	snprintf(msg, sizeof(msg),
			 "%c%s has type %s, which where clauses cannot use: reading its values could run code of a database user or an extension",
			 pg_toupper((unsigned char) what[0]), what + 1, format_type_be(typid));
	sdef_failing("where", msg);
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("%s has type %s, which a shape's where clause cannot use", what,
					format_type_be(typid)),
			 errdetail("Reading its values could run code of a database user or an extension."),
			 errhint("A where clause may use PostgreSQL's built-in types but xml, enums, domains without a CHECK constraint, and arrays, composites and ranges of these.")));
}

/* What the checks of the raw parse tree need. */
typedef struct SdefRaw
{
	Relation	rel;
	int			nparams;		/* the parameters given: $1 .. $nparams */
	const char *privilege_field;	/* the field of a column the user may not read */
} SdefRaw;

/*
 * A column reference must name a column of the table, of a safe type: a
 * whole-row reference (the table's name, t.*) is a value of the table's
 * row type, and a literal compared with it would be read as that type; a
 * qualified name that is no column (t.f) is functional notation, f(t).
 * An unqualified unknown name is left to the parser, whose error suggests
 * the column meant.  A column the user may not SELECT is refused here,
 * before analysis could tell its type (an operator that does not exist for
 * it, a literal it cannot read).
 */
static void
sdef_check_column_ref(ColumnRef *ref, SdefRaw *raw)
{
	Relation	rel = raw->rel;
	Node	   *last = llast(ref->fields);
	const char *name = IsA(last, String) ? strVal(last) : NULL;
	AttrNumber	attnum = name != NULL ? get_attnum(RelationGetRelid(rel), name) :
		InvalidAttrNumber;
	char		what[128];

	if (attnum == InvalidAttrNumber && list_length(ref->fields) == 1 && name != NULL &&
		strcmp(name, RelationGetRelationName(rel)) != 0)
		return;
	if (attnum == InvalidAttrNumber && name != NULL && list_length(ref->fields) > 1)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("column \"%s\" does not exist", name),
				 errposition(ref->location + 1)));
	if (attnum <= 0)
		sdef_refuse_system_column(ref->location + 1);
	if (pg_attribute_aclcheck(RelationGetRelid(rel), attnum, GetUserId(), ACL_SELECT) != ACLCHECK_OK)
	{
		const char *field;
		char	   *problem = shape_read_problem(RelationGetRelid(rel), 1, &attnum, &field);

		if (problem != NULL)
		{
			sdef_failing(raw->privilege_field, problem);
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("a shape cannot be served to role \"%s\"",
							GetUserNameFromId(GetUserId(), false)),
					 errdetail("%s.", problem)));
		}
	}
	snprintf(what, sizeof(what), "column \"%s\"", name);
	/* the column's own typmod pads nothing: stored values are read as they are */
	sdef_require_safe_type(get_atttype(RelationGetRelid(rel), attnum), -1, what);
}

/* Whether a qualified name's schema, if it has one, is pg_catalog. */
static bool
sdef_name_in_catalog(List *names)
{
	return list_length(names) < 2 ||
		strcmp(strVal(list_nth(names, list_length(names) - 2)), "pg_catalog") == 0;
}

/* Whether the type takes or makes values of an object identifier type. */
static bool
sdef_type_names(Oid typid)
{
	Oid			elem = get_element_type(typid);

	return sdef_is_reg_type(typid) || (OidIsValid(elem) && sdef_is_reg_type(elem));
}

/* Whether the function takes or returns values of an object identifier type. */
static bool
sdef_function_names(HeapTuple proctup)
{
	Form_pg_proc proc = (Form_pg_proc) GETSTRUCT(proctup);

	if (sdef_type_names(proc->prorettype))
		return true;
	for (int i = 0; i < proc->pronargs; i++)
		if (sdef_type_names(proc->proargtypes.values[i]))
			return true;
	return false;
}

/* Refuses a function (or function-style cast) that names objects of the catalog. */
static void
sdef_refuse_naming_function(const char *name, int cursorpos)
{
	char		msg[256];

	snprintf(msg, sizeof(msg),
			 "%s() is not allowed in where clauses: it takes or returns objects of the catalog, which are looked up by name",
			 name);
	sdef_failing("where", msg);
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("%s() is not allowed in a shape's where clause", name),
			 errdetail("It takes or returns a value of an object identifier type (regclass, regconfig, ...), which names an object of the catalog, in any schema."),
			 errposition(cursorpos)));
}

/*
 * Whether a call of `name` could name objects of the catalog: a function
 * of pg_catalog of that name (of any arguments: which one is called is
 * known only after analysis, whose coercions already look names up, as
 * 'myschema.cfg' to to_tsvector's regconfig) that takes or returns an
 * object identifier type, or such a type itself (regtype('x') is a cast).
 */
static bool
sdef_call_names(const char *name)
{
	CatCList   *procs = SearchSysCacheList1(PROCNAMEARGSNSP, CStringGetDatum(name));
	Oid			typid;
	bool		found = false;

	for (int i = 0; i < procs->n_members && !found; i++)
	{
		HeapTuple	tup = &procs->members[i]->tuple;

		found = ((Form_pg_proc) GETSTRUCT(tup))->pronamespace == PG_CATALOG_NAMESPACE &&
			sdef_function_names(tup);
	}
	ReleaseSysCacheList(procs);
	typid = GetSysCacheOid2(TYPENAMENSP, Anum_pg_type_oid, CStringGetDatum(name),
							ObjectIdGetDatum(PG_CATALOG_NAMESPACE));
	return found || (OidIsValid(typid) && sdef_type_names(typid));
}

/* Refuses $n beyond the parameters given, before the parser sizes anything by n. */
static void
sdef_check_param_ref(ParamRef *ref, int nparams)
{
	char		msg[128];

	if (ref->number >= 1 && ref->number <= nparams)
		return;
	snprintf(msg, sizeof(msg), "Parameter $%d was not provided", ref->number);
	sdef_failing("params", msg);
	ereport(ERROR,
			(errcode(ERRCODE_UNDEFINED_PARAMETER),
			 errmsg("there is no value for parameter $%d", ref->number),
			 ref->number >= 1 ?
			 errhint("Pass the value as params[%d].", ref->number) : 0,
			 errposition(ref->location + 1)));
}

/*
 * Checks of the raw parse tree, before it is analysed: analysis already
 * runs input functions (an unknown literal compared with a column, or
 * cast, is read as that type then), so what could run code outside
 * pg_catalog must be refused before.  Subqueries go here too, before they
 * could name anything; names qualified with another schema (functions,
 * operators, collations, types) and anything that would look an object up by
 * name (object identifier types); and a $n past the parameters given:
 * analysis would allocate an array of n parameter types (a gigabyte for
 * $268435455) before anything else could refuse it.
 */
static bool
sdef_check_raw(Node *node, SdefRaw *raw)
{
	if (node == NULL)
		return false;
	if (IsA(node, ParamRef))
		sdef_check_param_ref((ParamRef *) node, raw->nparams);
	if (IsA(node, CollateClause) && !sdef_name_in_catalog(((CollateClause *) node)->collname))
	{
		sdef_failing("where", "Only collations of pg_catalog are allowed in where clauses");
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("only collations of pg_catalog are allowed in a shape's where clause"),
				 errposition(((CollateClause *) node)->location + 1)));
	}
	if (IsA(node, FuncCall) && sdef_name_in_catalog(((FuncCall *) node)->funcname))
	{
		FuncCall   *call = (FuncCall *) node;
		const char *name = strVal(llast(call->funcname));

		if (sdef_call_names(name))
			sdef_refuse_naming_function(name, call->location + 1);
	}
	if (IsA(node, SubLink))
	{
		sdef_failing("where", "Subqueries are not allowed in where clauses");
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("subqueries are not allowed in a shape's where clause")));
	}
	if ((IsA(node, FuncCall) && !sdef_name_in_catalog(((FuncCall *) node)->funcname)) ||
		(IsA(node, A_Expr) && !sdef_name_in_catalog(((A_Expr *) node)->name)))
		sdef_refuse_foreign_function();
	if (IsA(node, TypeCast) && !sdef_name_in_catalog(((TypeCast *) node)->typeName->names))
	{
		sdef_failing("where", "Only types of pg_catalog are allowed in where clauses");
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("only types of pg_catalog are allowed in a shape's where clause"),
				 errposition(((TypeCast *) node)->location + 1)));
	}
	if (IsA(node, TypeCast))
	{
		TypeName   *name = ((TypeCast *) node)->typeName;
		Oid			typid = LookupTypeNameOid(NULL, name, true);

		if (OidIsValid(typid))
		{
			/* the type's own code first, then its typmod (which its typmodin reads) */
			sdef_require_safe_type(typid, -1, "a cast");
			if (name->typmods != NIL)
			{
				int32		typmod;

				(void) typenameTypeIdAndMod(NULL, name, &typid, &typmod);
				sdef_require_safe_type(typid, typmod, "a cast");
			}
		}
	}
	if (IsA(node, ColumnRef))
		sdef_check_column_ref((ColumnRef *) node, raw);
	return raw_expression_tree_walker(node, sdef_check_raw, raw);
}

/* Refuses constants of more than shape_sync.max_where_constant_size bytes in all. */
static void
sdef_check_constant_bytes(Size bytes)
{
	char		msg[256];

	if (bytes <= (Size) shape_sync_max_where_constant_size)
		return;
	snprintf(msg, sizeof(msg),
			 "The where clause's constants take %zu bytes or more; this server allows at most %d (shape_sync.max_where_constant_size)",
			 bytes, shape_sync_max_where_constant_size);
	sdef_failing("where", msg);
	ereport(ERROR,
			(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
			 errmsg("the constants of a shape's where clause take %zu bytes or more, more than \"%s\" allows",
					bytes, "shape_sync.max_where_constant_size"),
			 errdetail("The limit is %d bytes.", shape_sync_max_where_constant_size)));
}

/*
 * Folds the constant parts of the clause one node at a time, from the
 * leaves up, so that each constant is made, and counted, before the next
 * is: all the constants folding makes, the intermediate ones included
 * ($1 || $1 || $1 ...), may take at most shape_sync.max_where_constant_size
 * bytes, so a client's clause of 8 kB cannot make the main thread build
 * gigabytes before any check sees them.  Interrupts are looked at between
 * nodes, within the worker's evaluation deadline.
 */
static Node *
sdef_fold_mutator(Node *node, Size *made)
{
	Node	   *folded;

	if (node == NULL || IsA(node, Const) || IsA(node, Var))
		return node;
	node = expression_tree_mutator(node, sdef_fold_mutator, made);
	CHECK_FOR_INTERRUPTS();
	if (contain_var_clause(node))
		return node;
	folded = eval_const_expressions(NULL, node);
	if (IsA(folded, Const))
		sdef_constant_bytes(folded, made);
	sdef_check_constant_bytes(*made);
	return folded;
}

/* Raises the error of a clause that folding took too long over. */
static void
sdef_too_slow(void)
{
	char		msg[256];

	snprintf(msg, sizeof(msg),
			 "The where clause took longer than the %d ms that shape_sync.where_evaluation_timeout allows to evaluate",
			 shape_sync_where_evaluation_timeout);
	sdef_failing("where", msg);
	ereport(ERROR,
			(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
			 errmsg("a shape's where clause took longer than \"%s\" allows to evaluate",
					"shape_sync.where_evaluation_timeout")));
}

typedef enum SdefPattern
{
	SDEF_PATTERN_NONE,
	SDEF_PATTERN_REGEX,			/* compiled before anything is matched */
	SDEF_PATTERN_LIKE			/* read as far as the value matches */
} SdefPattern;

/*
 * Whether the function reads its second argument as a pattern: a regular
 * expression (~, ~*, !~, !~*, SIMILAR TO, which becomes ~, substring(...
 * from ...), the regexp_*() family), or a LIKE pattern (~~, ~~*, whose
 * trailing escape character is an error).  Found by their C
 * implementation, so that every operator and overload is.
 */
static SdefPattern
sdef_pattern_function(Oid funcid)
{
	HeapTuple	tup = SearchSysCache1(PROCOID, ObjectIdGetDatum(funcid));
	Form_pg_proc proc;
	SdefPattern found = SDEF_PATTERN_NONE;

	if (!HeapTupleIsValid(tup))
		return SDEF_PATTERN_NONE;
	proc = (Form_pg_proc) GETSTRUCT(tup);
	if (proc->prolang == INTERNALlanguageId && proc->pronamespace == PG_CATALOG_NAMESPACE &&
		proc->pronargs >= 2 && !proc->proretset)
	{
		bool		isnull;
		Datum		src = SysCacheGetAttr(PROCOID, tup, Anum_pg_proc_prosrc, &isnull);
		char	   *name = isnull ? NULL : TextDatumGetCString(src);

		if (name != NULL && strstr(name, "regex") != NULL)
			found = SDEF_PATTERN_REGEX;
		else if (name != NULL && strstr(name, "like") != NULL)
			found = SDEF_PATTERN_LIKE;
	}
	ReleaseSysCache(tup);
	return found;
}

/* Evaluates `call` (a copy) with its first argument replaced by `value`. */
static void
sdef_evaluate_on(Node *call, Node *value)
{
	List	   *args = IsA(call, FuncExpr) ? ((FuncExpr *) call)->args :
		IsA(call, OpExpr) ? ((OpExpr *) call)->args : ((ScalarArrayOpExpr *) call)->args;

	linitial(args) = value;
	(void) eval_const_expressions(NULL, call);
}

/*
 * Compiles the clause's constant patterns now: each call of a pattern
 * function whose arguments but the first are constants is evaluated once,
 * on an empty value, so that an invalid pattern ('(' as a regular
 * expression, or an invalid flag) is the client's 400 here rather than an
 * error of every snapshot and every change later.  The pattern is compiled
 * as the clause will compile it (the same function, flags and collation),
 * and PostgreSQL keeps it in its cache of compiled expressions.  A LIKE
 * pattern is read only as far as the value matches it, so it is matched
 * against itself too, which reads it to its end.
 */
static bool
sdef_check_patterns(Node *node, void *context)
{
	List	   *args = NIL;
	Oid			funcid = InvalidOid;

	if (node == NULL)
		return false;
	if (IsA(node, FuncExpr))
	{
		args = ((FuncExpr *) node)->args;
		funcid = ((FuncExpr *) node)->funcid;
	}
	else if (IsA(node, OpExpr))
	{
		args = ((OpExpr *) node)->args;
		funcid = ((OpExpr *) node)->opfuncid;
	}
	else if (IsA(node, ScalarArrayOpExpr))
	{
		args = ((ScalarArrayOpExpr *) node)->args;
		funcid = ((ScalarArrayOpExpr *) node)->opfuncid;
	}
	if (list_length(args) >= 2 && !IsA(linitial(args), Const))
	{
		bool		constant = true;
		ListCell   *lc;
		SdefPattern kind;

		for_each_from(lc, args, 1)
			constant = constant && IsA(lfirst(lc), Const);
		kind = constant ? sdef_pattern_function(funcid) : SDEF_PATTERN_NONE;

		if (kind != SDEF_PATTERN_NONE)
		{
			Node	   *subject = linitial(args);
			Const	   *pattern = lsecond(args);
			Oid			type = getBaseType(exprType(subject));
			Oid			input;
			Oid			ioparam;
			int16		typlen;
			bool		typbyval;

			getTypeInputInfo(type, &input, &ioparam);
			get_typlenbyval(type, &typlen, &typbyval);
			sdef_evaluate_on(copyObject(node),
							 (Node *) makeConst(type, -1, exprCollation(subject), typlen,
												OidInputFunctionCall(input, "", ioparam, -1),
												false, typbyval));
			if (kind == SDEF_PATTERN_LIKE && IsA(node, OpExpr) &&
				pattern->consttype == type && !pattern->constisnull)
			{
				Const	   *itself = copyObject(pattern);

				itself->constcollid = exprCollation(subject);
				sdef_evaluate_on(copyObject(node), (Node *) itself);
			}
		}
	}
	return expression_tree_walker(node, sdef_check_patterns, context);
}

static Node *
sdef_fold(Node *expr)
{
	MemoryContext old = CurrentMemoryContext;
	Node	   *volatile folded = NULL;
	bool		expired;

	eval_deadline_watch();
	eval_deadline_begin();
	PG_TRY();
	{
		Size		made = 0;

		/* the parameters' constants count too */
		sdef_constant_bytes(expr, &made);
		sdef_check_constant_bytes(made);
		folded = sdef_fold_mutator(expr, &made);
		/* what is left to simplify evaluates nothing heavy */
		folded = eval_const_expressions(NULL, folded);
		(void) sdef_check_patterns(folded, NULL);
	}
	PG_CATCH();
	{
		expired = eval_deadline_end();
		eval_deadline_unwatch();
		if (!expired)
			PG_RE_THROW();
		MemoryContextSwitchTo(old);
		FlushErrorState();
		sdef_too_slow();
	}
	PG_END_TRY();
	expired = eval_deadline_end();
	eval_deadline_unwatch();
	if (expired)
		sdef_too_slow();
	return folded;
}

/*
 * What evaluating the clause on one row may hold, counted in column
 * values: each column reference counts one (a compressed value is
 * decompressed for each reference), and each function or operator whose
 * result is not a boolean counts as many as the column references beneath
 * it (its result may be as large as its inputs together: lower(t),
 * t || u).  Booleans hold nothing, nor do relabelings.  All of it is held
 * until the row is done, so the sum bounds the memory one row's
 * evaluation takes, and its time, to this many times the row's largest
 * value, however the clause nests: t || t || ... || t, whose cost grows
 * with the square of its length, and a thousand lower(t) are refused.
 */
#define WHERE_MAX_VALUE_COST	256

typedef struct SdefCost
{
	int			columns;		/* column references beneath the node walked */
	int64		cost;
} SdefCost;

static bool
sdef_value_cost(Node *node, SdefCost *c)
{
	int			outer;
	int			beneath;

	if (node == NULL)
		return false;
	if (IsA(node, Var))
	{
		c->columns++;
		c->cost++;
		return false;
	}
	outer = c->columns;
	c->columns = 0;
	(void) expression_tree_walker(node, sdef_value_cost, c);
	beneath = c->columns;
	if (beneath > 0 &&
		((IsA(node, FuncExpr) && sdef_padding_limit(((FuncExpr *) node)->funcid) >= 0) ||
		 (IsA(node, ArrayCoerceExpr) &&
		  sdef_contains_padding((Node *) ((ArrayCoerceExpr *) node)->elemexpr, NULL))))
	{
		/* string_to_array(t, '')::char(1024)[] pads every character of t */
		sdef_failing("where", "Casting a column's values to character(n) or bit(n) is not allowed in where clauses: it pads every value");
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("casting a column's values to character(n) or bit(n) is not allowed in a shape's where clause"),
				 errdetail("It pads every value, or every element of an array, to n."),
				 errhint("Compare the column with the value directly.")));
	}
	if (beneath > 0 && !IsA(node, List) && !IsA(node, CaseWhen) &&
		!IsA(node, NamedArgExpr) && !IsA(node, RelabelType) && !IsA(node, CollateExpr) &&
		exprType(node) != BOOLOID)
		c->cost += beneath;
	c->columns = outer + beneath;
	return false;
}

/*
 * The most digits a numeric constant may have before or after its point:
 * 1e131000 takes eight bytes, but c + 1e131000 has 131,000 digits, and
 * multiplying two such takes seconds in code that never looks at
 * interrupts.  NUMERIC_MAX_PRECISION is the same 1000.
 */
#define WHERE_MAX_NUMERIC_DIGITS	1000

static bool
sdef_numeric_too_large(Numeric n, Numeric limit)
{
	if (numeric_is_nan(n) || numeric_is_inf(n))
		return false;
	if (DatumGetInt32(DirectFunctionCall1(numeric_scale, NumericGetDatum(n))) >
		WHERE_MAX_NUMERIC_DIGITS)
		return true;
	return DatumGetInt32(DirectFunctionCall2(numeric_cmp,
											 DirectFunctionCall1(numeric_abs, NumericGetDatum(n)),
											 NumericGetDatum(limit))) >= 0;
}

/* Whether a value holds a numeric of more than WHERE_MAX_NUMERIC_DIGITS, at any depth. */
static bool
sdef_value_has_large_numeric(Datum value, Oid type, Numeric limit, int depth)
{
	Oid			elem;

	if (depth > 16)
		return true;
	type = getBaseType(type);
	if (type == NUMERICOID)
		return sdef_numeric_too_large(DatumGetNumeric(value), limit);
	if (type == JSONBOID)
	{
		Jsonb	   *jb = DatumGetJsonbP(value);
		JsonbIterator *it = JsonbIteratorInit(&jb->root);
		JsonbValue	v;
		JsonbIteratorToken token;

		while ((token = JsonbIteratorNext(&it, &v, false)) != WJB_DONE)
			if ((token == WJB_VALUE || token == WJB_ELEM) && v.type == jbvNumeric &&
				sdef_numeric_too_large(v.val.numeric, limit))
				return true;
		return false;
	}
	if (OidIsValid(elem = get_element_type(type)))
	{
		ArrayType  *array = DatumGetArrayTypeP(value);
		int16		len;
		bool		byval;
		char		align;
		Datum	   *items;
		bool	   *nulls;
		int			n;

		get_typlenbyvalalign(elem, &len, &byval, &align);
		deconstruct_array(array, elem, len, byval, align, &items, &nulls, &n);
		for (int i = 0; i < n; i++)
			if (!nulls[i] && sdef_value_has_large_numeric(items[i], elem, limit, depth + 1))
				return true;
		return false;
	}
	if (type_is_range(type))
	{
		TypeCacheEntry *cache = lookup_type_cache(type, TYPECACHE_RANGE_INFO);
		RangeBound	lower,
					upper;
		bool		empty;

		range_deserialize(cache, DatumGetRangeTypeP(value), &lower, &upper, &empty);
		return !empty &&
			((!lower.infinite && sdef_value_has_large_numeric(lower.val, cache->rngelemtype->type_id, limit, depth + 1)) ||
			 (!upper.infinite && sdef_value_has_large_numeric(upper.val, cache->rngelemtype->type_id, limit, depth + 1)));
	}
	if (type_is_multirange(type))
	{
		TypeCacheEntry *cache = lookup_type_cache(type, TYPECACHE_MULTIRANGE_INFO);
		RangeType **ranges;
		int32		n;

		multirange_deserialize(cache->rngtype, DatumGetMultirangeTypeP(value), &n, &ranges);
		for (int i = 0; i < n; i++)
			if (sdef_value_has_large_numeric(RangeTypePGetDatum(ranges[i]),
											 cache->rngtype->type_id, limit, depth + 1))
				return true;
		return false;
	}
	if (type_is_rowtype(type))
	{
		HeapTupleHeader row = DatumGetHeapTupleHeader(value);
		TupleDesc	desc = lookup_rowtype_tupdesc(HeapTupleHeaderGetTypeId(row),
												  HeapTupleHeaderGetTypMod(row));
		HeapTupleData tuple;
		bool		found = false;

		tuple.t_len = HeapTupleHeaderGetDatumLength(row);
		ItemPointerSetInvalid(&tuple.t_self);
		tuple.t_tableOid = InvalidOid;
		tuple.t_data = row;
		for (int i = 0; i < desc->natts && !found; i++)
		{
			Form_pg_attribute att = TupleDescAttr(desc, i);
			bool		isnull;
			Datum		field;

			if (att->attisdropped)
				continue;
			field = heap_getattr(&tuple, i + 1, desc, &isnull);
			found = !isnull && sdef_value_has_large_numeric(field, att->atttypid, limit, depth + 1);
		}
		ReleaseTupleDesc(desc);
		return found;
	}
	return false;
}

static bool
sdef_find_large_numeric(Node *node, Numeric limit)
{
	if (node == NULL)
		return false;
	if (IsA(node, Const))
		return !((Const *) node)->constisnull &&
			sdef_value_has_large_numeric(((Const *) node)->constvalue,
										 ((Const *) node)->consttype, limit, 0);
	return expression_tree_walker(node, sdef_find_large_numeric, limit);
}

/* Refuses numeric constants, in any container, of more than WHERE_MAX_NUMERIC_DIGITS. */
static void
sdef_check_numeric_constants(Node *expr)
{
	char		limit_text[16];
	Numeric		limit;
	char		msg[256];

	snprintf(limit_text, sizeof(limit_text), "1e%d", WHERE_MAX_NUMERIC_DIGITS);
	limit = DatumGetNumeric(DirectFunctionCall3(numeric_in, CStringGetDatum(limit_text),
												ObjectIdGetDatum(InvalidOid),
												Int32GetDatum(-1)));
	if (!sdef_find_large_numeric(expr, limit))
		return;
	snprintf(msg, sizeof(msg),
			 "A numeric constant of the where clause has more than %d digits before or after its point",
			 WHERE_MAX_NUMERIC_DIGITS);
	sdef_failing("where", msg);
	ereport(ERROR,
			(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
			 errmsg("a numeric constant of a shape's where clause has more than %d digits before or after its point",
					WHERE_MAX_NUMERIC_DIGITS),
			 errdetail("Arithmetic on it would take time and memory that grow with its digits, on every change of the table.")));
}

static void
sdef_check_value_cost(Node *expr)
{
	SdefCost	c = {0, 0};
	char		msg[256];

	(void) sdef_value_cost(expr, &c);
	if (c.cost <= WHERE_MAX_VALUE_COST)
		return;
	snprintf(msg, sizeof(msg),
			 "The where clause would hold %lld column values at once on every row; at most %d are allowed (each column reference counts one, each function or operator that does not return a boolean as many as the references beneath it)",
			 (long long) c.cost, WHERE_MAX_VALUE_COST);
	sdef_failing("where", msg);
	ereport(ERROR,
			(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
			 errmsg("a shape's where clause would hold %lld column values at once on every row",
					(long long) c.cost),
			 errdetail("At most %d are allowed: each column reference counts one, and each function or operator that does not return a boolean counts as many as the column references beneath it.",
					   WHERE_MAX_VALUE_COST)));
}

typedef struct SdefErrorContext
{
	const char *query;
} SdefErrorContext;

/*
 * Parses `sql`, which must be "SELECT <one target> WHERE <expression>"
 * (a shape's or a subset's where clause), or with `order_by`
 * "SELECT <one target> ORDER BY <list>" (a subset's order_by), and nothing
 * else: no second statement, no other clause.  Returns the statement, or
 * NULL when it is anything more; a syntax error is raised.
 */
SelectStmt *
shape_def_parse_select_one(const char *sql, bool order_by)
{
	List	   *raw = raw_parser(sql, RAW_PARSE_DEFAULT);
	RawStmt    *stmt = list_length(raw) == 1 ? linitial_node(RawStmt, raw) : NULL;
	SelectStmt *select = stmt && IsA(stmt->stmt, SelectStmt) ? (SelectStmt *) stmt->stmt : NULL;

	if (select == NULL || select->op != SETOP_NONE ||
		(order_by ? select->whereClause != NULL : select->whereClause == NULL) ||
		(order_by ? select->sortClause == NIL : select->sortClause != NIL) ||
		list_length(select->targetList) != 1 || select->fromClause != NIL ||
		select->groupClause != NIL || select->havingClause != NULL ||
		select->windowClause != NIL ||
		select->limitCount != NULL || select->limitOffset != NULL ||
		select->lockingClause != NIL || select->withClause != NULL ||
		select->distinctClause != NIL || select->intoClause != NULL ||
		select->valuesLists != NIL)
		return NULL;
	return select;
}

/* Reports parse positions against the internal query, as SPI does. */
static void
sdef_where_error_callback(void *arg)
{
	SdefErrorContext *ctx = arg;
	int			pos = geterrposition();

	if (pos > 0)
	{
		errposition(0);
		internalerrposition(pos);
		internalerrquery(ctx->query);
	}
}

/*
 * Parses and analyses the where clause against `rel` and binds the
 * parameters; returns the clause deparsed to SQL in *sql and as a node tree
 * (nodeToString) in *tree.  A column the clause reads that the user may not
 * SELECT is refused with `privilege_field` as the request field.
 */
static void
sdef_where(const ShapeDefinition *def, Relation rel, const char *privilege_field,
		   char **sql_out, char **tree)
{
	StringInfoData sql;
	SelectStmt *select;
	ParseState *pstate;
	ParseNamespaceItem *nsitem;
	Node	   *expr;
	SdefParams	params;
	SdefRaw		raw;
	ErrorContextCallback errcb;
	SdefErrorContext errctx;

	sdef_failing("where", NULL);
	initStringInfo(&sql);
	appendStringInfoString(&sql, WHERE_PREFIX);
	appendStringInfoString(&sql, def->where);

	errctx.query = sql.data;
	errcb.callback = sdef_where_error_callback;
	errcb.arg = &errctx;
	errcb.previous = error_context_stack;
	error_context_stack = &errcb;

	select = shape_def_parse_select_one(sql.data, false);
	if (select == NULL)
	{
		sdef_failing("where", "Invalid where clause: it must be a single boolean expression");
		ereport(ERROR,
				(errcode(ERRCODE_SYNTAX_ERROR),
				 errmsg("a shape's where clause must be a single boolean expression"),
				 errdetail("The where clause may not contain further clauses or statements.")));
	}

	pstate = make_parsestate(NULL);
	pstate->p_sourcetext = sql.data;
	params.def = def;
	params.ntypes = def->nparams;
	params.types = def->nparams > 0 ? palloc0(sizeof(Oid) * def->nparams) : NULL;
	setup_parse_variable_parameters(pstate, &params.types, &params.ntypes);
	nsitem = addRangeTableEntryForRelation(pstate, rel, AccessShareLock, NULL, false, false);
	addNSItemToQuery(pstate, nsitem, false, true, true);

	raw.rel = rel;
	raw.nparams = def->nparams;
	raw.privilege_field = privilege_field;
	sdef_check_raw(select->whereClause, &raw);
	expr = transformExpr(pstate, select->whereClause, EXPR_KIND_WHERE);
	expr = coerce_to_boolean(pstate, expr, "WHERE");
	assign_expr_collations(pstate, expr);

	if (checkExprHasSubLink(expr))
	{
		sdef_failing("where", "Subqueries are not allowed in where clauses");
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("subqueries are not allowed in a shape's where clause")));
	}
	if (expression_returns_set(expr))
	{
		sdef_failing("where", "Set-returning functions are not allowed in where clauses");
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("set-returning functions are not allowed in a shape's where clause")));
	}
	sdef_check_node(expr, NULL);
	for (int i = 0; i < params.ntypes; i++)
		if (OidIsValid(params.types[i]))
		{
			char		what[32];

			snprintf(what, sizeof(what), "parameter $%d", i + 1);
			sdef_require_safe_type(params.types[i], -1, what);
		}
	expr = sdef_bind_params(expr, &params);
	if (contain_mutable_functions(expr))
	{
		sdef_failing("where", "Only immutable functions and operators are allowed in where clauses");
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("only immutable functions and operators are allowed in a shape's where clause"),
				 errdetail("Rows must match or not match the same way whenever the clause is evaluated.")));
	}

	error_context_stack = errcb.previous;
	free_parsestate(pstate);
	/* the clause as written, parameters bound: the shape's identity */
	*sql_out = deparse_expression(expr,
								  deparse_context_for(RelationGetRelationName(rel),
													  RelationGetRelid(rel)),
								  false, false);
	/*
	 * Fold once, here: the stream and the snapshot evaluate this tree.  (It
	 * is not deparsed: folding drops what only the parser needs, such as a
	 * COLLATE clause's node, which the deparsed identity must keep.)
	 */
	/* before folding too: multiplying two numbers of 65,000 digits is slow */
	sdef_check_numeric_constants(expr);
	expr = sdef_fold(expr);
	sdef_check_numeric_constants(expr);
	sdef_check_value_cost(expr);

	*tree = nodeToString(expr);
}

/*
 * sdef_where under pinned settings.  Parameters are read, and constants
 * deparsed, under Electric's display settings, whatever the session's: the
 * clause then means the same in the snapshot worker and the decoder, which
 * use them too.  Unqualified names resolve in pg_catalog only, whatever the
 * session's path; see sdef_check_raw for qualified ones.
 */
static void
sdef_where_pinned(const ShapeDefinition *def, Relation rel, const char *privilege_field,
				  char **sql_out, char **tree)
{
	int			nestlevel = NewGUCNestLevel();

	row_encoder_set_display_settings(PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE);
	(void) set_config_option("search_path", "pg_catalog", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	sdef_where(def, rel, privilege_field, sql_out, tree);
	AtEOXact_GUC(true, nestlevel);
}

/*
 * A subset query's where clause (subset_query.c): parsed, checked, bound
 * and folded exactly as a shape's, against `rel`, with `params` binding its
 * $n.  Returns the folded tree; raises an ERROR with shape_def_error_field
 * set ("where" or "params") when the clause is invalid.
 */
Node *
shape_def_subset_where(Relation rel, const char *where, char **params, int nparams)
{
	ShapeDefinition def;
	char	   *sql;
	char	   *tree;

	memset(&def, 0, sizeof(def));
	def.where = (char *) where;
	def.params = params;
	def.nparams = nparams;
	sdef_where_pinned(&def, rel, "where", &sql, &tree);
	return stringToNode(tree);
}

/* Byte offset of the (1-based) character position `pos` in `text`. */
static int
sdef_byte_position(const char *text, int pos)
{
	int			bytes = 0;

	for (int c = 1; c < pos && text[bytes] != '\0'; c++)
		bytes += pg_mblen(text + bytes);
	return bytes;
}

/*
 * What a client is told of a validation error of field `field`: the
 * sentence Electric's clients expect when there is one, a where clause's
 * syntax error with its location, or PostgreSQL's message.
 */
char *
shape_def_error_message(const char *field, const ErrorData *edata)
{
	if (shape_def_http_message[0] != '\0')
		return pstrdup(shape_def_http_message);
	if (strcmp(field, "where") == 0 && edata->internalpos > 0 && edata->internalquery)
		return psprintf("At location %d: %s",
						sdef_byte_position(edata->internalquery, edata->internalpos),
						edata->message);
	return pstrdup(edata->message);
}

/* ---------------------------------------------------------- validation */

static int
sdef_attnum_cmp(const void *a, const void *b)
{
	return (int) *(const AttrNumber *) a - (int) *(const AttrNumber *) b;
}

/* Resolves the selected column names to attnums and checks the key. */
static void
sdef_columns(const ShapeDefinition *def, Relation rel, ShapeSpec *spec)
{
	StringInfoData missing;
	StringInfoData msg;
	AttrNumber *attnums;
	Oid			pkoid;
	int			n = 0;
	const char *sdef_first_missing = NULL;

	sdef_failing("columns", NULL);
	initStringInfo(&missing);
	attnums = palloc(sizeof(AttrNumber) * def->ncolumns);
	for (int i = 0; i < def->ncolumns; i++)
	{
		AttrNumber	attnum;
		bool		dup = false;

		if (def->columns[i] == NULL || def->columns[i][0] == '\0')
		{
			sdef_failing("columns", "Invalid zero-length delimited identifier");
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_NAME),
					 errmsg("zero-length column name in a shape's column list")));
		}
		attnum = get_attnum(RelationGetRelid(rel), def->columns[i]);
		if (attnum == InvalidAttrNumber || attnum < 0)
		{
			if (missing.len == 0)
				sdef_first_missing = def->columns[i];
			appendStringInfo(&missing, "%s%s", missing.len ? ", " : "", def->columns[i]);
			continue;
		}
		for (int j = 0; j < n; j++)
			dup = dup || attnums[j] == attnum;
		if (!dup)
			attnums[n++] = attnum;
	}
	if (missing.len > 0)
	{
		initStringInfo(&msg);
		appendStringInfo(&msg, "The following columns are not found on the table: %s",
						 missing.data);
		sdef_failing("columns", msg.data);
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("column \"%s\" of relation \"%s\" does not exist",
						sdef_first_missing, RelationGetRelationName(rel)),
				 errdetail("Columns not found: %s.", missing.data)));
	}

	pkoid = RelationGetPrimaryKeyIndex(rel);
	if (OidIsValid(pkoid))
	{
		Relation	idx = index_open(pkoid, AccessShareLock);

		for (int k = 0; k < idx->rd_index->indnkeyatts; k++)
		{
			AttrNumber	key = idx->rd_index->indkey.values[k];
			bool		found = false;

			for (int j = 0; j < n; j++)
				found = found || attnums[j] == key;
			if (!found)
				appendStringInfo(&missing, "%s%s", missing.len ? ", " : "",
								 get_attname(RelationGetRelid(rel), key, false));
		}
		index_close(idx, AccessShareLock);
	}
	else
	{
		/*
		 * No primary key: every column is part of each row's key (and of
		 * key_change_to and key_change_from), so a list that leaves one out
		 * would hide nothing.  It must name them all.
		 */
		TupleDesc	desc = RelationGetDescr(rel);

		for (int i = 0; i < desc->natts; i++)
		{
			Form_pg_attribute att = TupleDescAttr(desc, i);
			bool		found = false;

			if (att->attisdropped)
				continue;
			for (int j = 0; j < n; j++)
				found = found || attnums[j] == att->attnum;
			if (!found)
				appendStringInfo(&missing, "%s%s", missing.len ? ", " : "",
								 NameStr(att->attname));
		}
		if (missing.len > 0)
		{
			initStringInfo(&msg);
			appendStringInfo(&msg,
							 "The table has no primary key, so its rows are keyed by all their columns: the list of columns must include every column, missing: %s",
							 missing.data);
			sdef_failing("columns", msg.data);
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("a shape's columns must include every column of a table without a primary key"),
					 errdetail("Missing: %s.", missing.data),
					 errhint("Each row's key is made of all its columns when the table has no primary key, so the key would send the columns left out.")));
		}
	}
	if (missing.len > 0)
	{
		initStringInfo(&msg);
		appendStringInfo(&msg,
						 "The list of columns must include all primary key columns, missing: %s",
						 missing.data);
		sdef_failing("columns", msg.data);
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a shape's columns must include every primary key column"),
				 errdetail("Missing: %s.", missing.data)));
	}
	qsort(attnums, n, sizeof(AttrNumber), sdef_attnum_cmp);
	spec->ncolumns = n;
	spec->columns = attnums;
}

/*
 * Validates a client's shape definition and fills `spec`.  Raises an ERROR
 * with shape_def_error_field set when the definition is invalid.  Must run
 * in a transaction.  With `nowait`, a table locked by another session
 * raises an error (with no field: the client may retry) instead of waiting:
 * the worker's main thread must never block on a user's lock.
 */
void
shape_def_validate(const ShapeDefinition *def, ShapeSpec *spec, bool nowait)
{
	const char *schema = def->schema ? def->schema : "public";
	Oid			relid;
	Relation	rel;
	Oid			not_full;

	memset(spec, 0, sizeof(*spec));
	sdef_failing("table", NULL);
	if (def->table == NULL || def->table[0] == '\0')
	{
		sdef_failing("table", "can't be blank");
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a shape needs a table")));
	}
	shape_def_error_field = NULL;	/* a lock not granted is no client error */
	relid = RangeVarGetRelidExtended(makeRangeVar(pstrdup(schema), pstrdup(def->table), -1),
									 AccessShareLock,
									 RVR_MISSING_OK | (nowait ? RVR_NOWAIT : 0),
									 NULL, NULL);
	if (!OidIsValid(relid))
	{
		char		msg[512];

		snprintf(msg, sizeof(msg),
				 "Table \"%s\".\"%s\" does not exist. If the table name contains capitals or special characters you must quote it.",
				 schema, def->table);
		sdef_failing("table", msg);
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation \"%s.%s\" does not exist", schema, def->table),
				 errhint("If the table name contains capitals or special characters you must quote it.")));
	}
	rel = table_open(relid, AccessShareLock);
	sdef_check_may_read(rel);
	if ((rel->rd_rel->relkind != RELKIND_RELATION &&
		 rel->rd_rel->relkind != RELKIND_PARTITIONED_TABLE) || IsCatalogRelation(rel))
	{
		char		msg[512];

		snprintf(msg, sizeof(msg),
				 "Table \"%s\".\"%s\" cannot be synced: only user tables (ordinary or partitioned) can be",
				 schema, def->table);
		sdef_failing("table", msg);
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("\"%s.%s\" is not a user table", schema, def->table),
				 errdetail("Shapes can be defined on ordinary and partitioned tables only; views, foreign tables and system catalogs are not supported.")));
	}
	if (OidIsValid(not_full = shape_table_not_logged_in_full(relid)) &&
		!shape_sync_manage_replica_identity)
	{
		char	   *quoted = shape_quoted_name(get_namespace_name(get_rel_namespace(not_full)),
											   get_rel_name(not_full));
		char		msg[512];

		snprintf(msg, sizeof(msg),
				 "Table %s does not have REPLICA IDENTITY FULL, which shapes need; the database operator can run: ALTER TABLE %s REPLICA IDENTITY FULL",
				 quoted, quoted);
		sdef_failing("table", msg);
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("table %s does not have REPLICA IDENTITY FULL", quoted),
				 errdetail("Shapes need the old values of updated and deleted rows, which PostgreSQL logs in full only with REPLICA IDENTITY FULL."),
				 errhint("Run ALTER TABLE %s REPLICA IDENTITY FULL, or let shape_sync set it by turning on \"%s\".",
						 quoted, "shape_sync.manage_replica_identity")));
	}
	spec->relid = relid;
	spec->flags = (def->replica_full ? SHAPE_FLAG_REPLICA_FULL : 0) |
		(def->changes_only ? SHAPE_FLAG_CHANGES_ONLY : 0);
	if (def->ncolumns > 0)
		sdef_columns(def, rel, spec);
	/* before the where clause is folded: that may run a column domain's checks */
	sdef_failing("table", NULL);
	table_code_check(relid);
	if (def->where != NULL && def->where[0] != '\0')
		sdef_where_pinned(def, rel, "columns", &spec->where_sql, &spec->where_tree);
	sdef_check_readable(rel, spec);
	table_close(rel, NoLock);
	shape_def_error_field = NULL;
}

/* The columns a shape reads: its own, its key's and its where clause's. */
static int
sdef_read_columns(const ShapeSpec *spec, AttrNumber **out)
{
	ShapeRelation *rel = shape_relation_load(spec->relid, spec->ncolumns, spec->columns);
	Bitmapset  *cols = NULL;
	AttrNumber *attnums;
	int			n = 0;
	int			x = -1;

	for (int i = 0; i < rel->ncolumns; i++)
		cols = bms_add_member(cols, rel->columns[i].attnum);
	for (int i = 0; i < rel->nkeys; i++)
		cols = bms_add_member(cols, rel->keys[i]);
	if (spec->where_tree != NULL)
	{
		Bitmapset  *vars = NULL;

		pull_varattnos(stringToNode(spec->where_tree), 1, &vars);
		while ((x = bms_next_member(vars, x)) >= 0)
			cols = bms_add_member(cols, x + FirstLowInvalidHeapAttributeNumber);
		x = -1;
	}
	attnums = palloc(sizeof(AttrNumber) * Max(bms_num_members(cols), 1));
	while ((x = bms_next_member(cols, x)) >= 0)
		attnums[n++] = (AttrNumber) x;
	*out = attnums;
	return n;
}

/*
 * What a shape's rows depend on, as text: its table's name, the electric-
 * schema of its columns, its key, and the name and type of every column it
 * reads (its where clause's too).  Two equal fingerprints, taken at two
 * moments, say that a snapshot taken at the second serves the shape made at
 * the first.
 */
char *
shape_definition_fingerprint(const ShapeSpec *spec)
{
	ShapeRelation *rel = shape_relation_load(spec->relid, spec->ncolumns, spec->columns);
	AttrNumber *attnums;
	int			n = sdef_read_columns(spec, &attnums);
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfo(&buf, "%s\n%s\nkey", shape_quoted_relation(rel), shape_schema_json(rel));
	for (int i = 0; i < rel->nkeys; i++)
		appendStringInfo(&buf, " %d", rel->keys[i]);
	appendStringInfoString(&buf, "\nreads");
	for (int i = 0; i < n; i++)
	{
		Oid			typid;
		int32		typmod;
		Oid			collation;

		get_atttypetypmodcoll(spec->relid, attnums[i], &typid, &typmod, &collation);
		appendStringInfo(&buf, " %d:%s:%u:%d", attnums[i],
						 get_attname(spec->relid, attnums[i], false), typid, typmod);
	}
	return buf.data;
}

/*
 * What keeps the current user from reading the shape (shape_read_problem
 * over the columns it reads), or NULL.
 */
char *
shape_spec_read_problem(const ShapeSpec *spec, const char **field)
{
	AttrNumber *attnums;
	int			n = sdef_read_columns(spec, &attnums);

	return shape_read_problem(spec->relid, n, attnums, field);
}

/*
 * Refuses the shape, with 403, when the current user could read nothing of
 * the table: no USAGE on its schema, SELECT on neither the table nor any of
 * its columns, or row-level security that applies.  This comes before
 * anything else is checked, so that such a user learns that the table
 * exists and nothing more: not its kind, nor its replica identity, nor its
 * columns' names and types (which the errors about a column list or a where
 * clause would tell).
 */
static void
sdef_check_may_read(Relation rel)
{
	const char *field = "table";
	char	   *problem = shape_read_problem(RelationGetRelid(rel), 0, NULL, &field);

	if (problem == NULL)
		return;
	sdef_failing("table", problem);
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("a shape cannot be served to role \"%s\"",
					GetUserNameFromId(GetUserId(), false)),
			 errdetail("%s.", problem)));
}

/* Refuses the shape, with 403, when the current user cannot read it. */
static void
sdef_check_readable(Relation rel, const ShapeSpec *spec)
{
	AttrNumber *attnums;
	int			n = sdef_read_columns(spec, &attnums);
	const char *field = "table";
	char	   *problem = shape_read_problem(RelationGetRelid(rel), n, attnums, &field);

	if (problem == NULL)
		return;
	sdef_failing(field, problem);
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("a shape cannot be served to role \"%s\"",
					GetUserNameFromId(GetUserId(), false)),
			 errdetail("%s.", problem)));
}

/*
 * Whether the current user could read these columns of the relation with
 * SELECT: USAGE on its schema, SELECT on the table or on each column, and
 * no row-level security that applies to it.  NULL when it could; else the
 * reason, as a sentence for the client, with *field the request parameter
 * it concerns.
 */
char *
shape_read_problem(Oid relid, int nattnums, const AttrNumber *attnums, const char **field)
{
	Oid			user = GetUserId();
	char	   *role = GetUserNameFromId(user, true);
	Oid			nsp = get_rel_namespace(relid);
	char	   *nspname = OidIsValid(nsp) ? get_namespace_name(nsp) : NULL;
	char	   *table = get_rel_name(relid);
	char	   *relname;

	*field = "table";
	/* decoding reads the catalog as of a commit: the table may be gone by then */
	if (role == NULL)
		return pstrdup("its role no longer exists");
	if (nspname == NULL || table == NULL)
		return pstrdup("its table no longer exists");
	relname = shape_quoted_name(nspname, table);
	if (pg_namespace_aclcheck(nsp, user, ACL_USAGE) != ACLCHECK_OK)
		return psprintf("Role \"%s\" has no USAGE privilege on the schema of table %s",
						role, relname);
	if (pg_class_aclcheck(relid, user, ACL_SELECT) != ACLCHECK_OK)
	{
		StringInfoData missing;

		if (pg_attribute_aclcheck_all(relid, user, ACL_SELECT, ACLMASK_ANY) != ACLCHECK_OK)
			return psprintf("Role \"%s\" may not SELECT from table %s", role, relname);
		initStringInfo(&missing);
		for (int i = 0; i < nattnums; i++)
		{
			char	   *name = get_attname(relid, attnums[i], true);
			bool		gone = false;
			AclResult	acl = pg_attribute_aclcheck_ext(relid, attnums[i], user, ACL_SELECT, &gone);

			if (name == NULL || gone)
				return pstrdup("a column it reads no longer exists");
			if (acl != ACLCHECK_OK)
				appendStringInfo(&missing, "%s%s", missing.len ? ", " : "",
								 quote_identifier(name));
		}
		if (missing.len > 0)
		{
			*field = "columns";
			return psprintf("Role \"%s\" may not SELECT these columns of table %s, which the shape reads: %s",
							role, relname, missing.data);
		}
	}
	if (shape_row_security_applies(relid, user))
		return psprintf("Table %s has row-level security that applies to role \"%s\"; a shape is shared by all its clients, so such a table is not served",
						relname, role);
	return NULL;
}

/* ----------------------------------------------------- electric-schema */

static void
sdef_schema_modifiers(StringInfo buf, const ShapeColumn *col)
{
	Oid			base = col->ndims > 0 ? get_element_type(col->typid) : col->typid;
	int32		typmod = col->typmod;

	if (!OidIsValid(base))
		base = col->typid;
	if (typmod < 0)
		return;
	switch (base)
	{
		case VARCHAROID:
		case TEXTOID:
			appendStringInfo(buf, ",\"max_length\":%d", typmod - VARHDRSZ);
			break;
		case BPCHAROID:
			appendStringInfo(buf, ",\"length\":%d", typmod - VARHDRSZ);
			break;
		case BITOID:
		case VARBITOID:
			appendStringInfo(buf, ",\"length\":%d", typmod);
			break;
		case TIMEOID:
		case TIMETZOID:
		case TIMESTAMPOID:
		case TIMESTAMPTZOID:
		case INTERVALOID:
			appendStringInfo(buf, ",\"precision\":%d", typmod & 0xFFFF);
			break;
		case NUMERICOID:
			appendStringInfo(buf, ",\"precision\":%d,\"scale\":%d",
							 ((typmod - VARHDRSZ) >> 16) & 0xFFFF,
							 ((((typmod - VARHDRSZ) & 0x7FF) ^ 1024) - 1024));
			break;
		default:
			appendStringInfo(buf, ",\"type_mod\":%d", typmod);
	}
}

/* pg_type.typname, unqualified, as Electric reports types. */
static const char *
sdef_type_name(Oid type)
{
	HeapTuple	tup = SearchSysCache1(TYPEOID, ObjectIdGetDatum(type));
	char	   *name;

	if (!HeapTupleIsValid(tup))
		return "unknown";
	name = pstrdup(NameStr(((Form_pg_type) GETSTRUCT(tup))->typname));
	ReleaseSysCache(tup);
	return name;
}

/* The electric-schema header: each selected column's type and flags. */
char *
shape_schema_json(const ShapeRelation *rel)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfoChar(&buf, '{');
	for (int i = 0; i < rel->ncolumns; i++)
	{
		const ShapeColumn *col = &rel->columns[i];
		Oid			type = col->typid;

		if (col->ndims > 0 && OidIsValid(get_element_type(type)))
			type = get_element_type(type);
		if (i > 0)
			appendStringInfoChar(&buf, ',');
		escape_json(&buf, col->name);
		appendStringInfoString(&buf, ":{\"type\":");
		escape_json(&buf, sdef_type_name(type));
		if (col->ndims > 0)
			appendStringInfo(&buf, ",\"dims\":%d", col->ndims);
		if (col->key_index >= 0 && rel->has_pk)
			appendStringInfo(&buf, ",\"pk_index\":%d", col->key_index);
		if (col->not_null)
			appendStringInfoString(&buf, ",\"not_null\":true");
		sdef_schema_modifiers(&buf, col);
		appendStringInfoChar(&buf, '}');
	}
	appendStringInfoChar(&buf, '}');
	return buf.data;
}

/* The text two definitions share exactly when they are the same shape. */
char *
shape_identity(const ShapeSpec *spec)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfo(&buf, "%u|%u|", spec->relid, spec->flags);
	for (int i = 0; i < spec->ncolumns; i++)
		appendStringInfo(&buf, "%d,", spec->columns[i]);
	appendStringInfo(&buf, "|%s", spec->where_sql ? spec->where_sql : "");
	return buf.data;
}
