/*-------------------------------------------------------------------------
 *
 * shape_where.c
 *		The guard of a shape's or a subset's where clause.
 *
 * A client's where clause (a shape's, checked by shape_def_validate, or a
 * subset's) is only ever given to PostgreSQL's parser, as the where clause
 * of "SELECT 1 WHERE <where>"; the statement must come back as exactly that
 * shape, and the snapshot query is later built from the deparsed tree, so
 * no client text is spliced into SQL.  The clause is analysed against the
 * shape's table, its parameters bound as typed constants, and returned
 * twice: deparsed back to SQL (part of the shape's identity) and as the
 * folded expression tree.
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
 * Each refusal records the request field it concerns ("where", "params",
 * or the field of a column the user may not read) and the sentence
 * Electric's clients expect with shape_def_error_set (shape_def_error.c)
 * before it raises its ERROR.
 *
 * IDENTIFICATION
 *	  src/pg/shape_where.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/relation.h"
#include "access/table.h"
#include "catalog/pg_constraint.h"
#include "catalog/pg_language.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_range.h"
#include "catalog/pg_type.h"
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
#include "shape_def_error.h"
#include "shape_role.h"
#include "shape_where.h"

#define WHERE_PREFIX "SELECT 1 WHERE "

typedef struct WhereParams
{
	const ShapeDefinition *def;
	Oid		   *types;
	int			ntypes;
} WhereParams;

/* Replaces each $n with a constant of the type the parser inferred. */
static Node *
where_bind_params(Node *node, WhereParams *params)
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
			shape_def_error_set("params", msg);
			ereport(ERROR,
					(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					 errmsg("parameter $%d of a shape's where clause is null", i + 1),
					 errhint("Write IS NULL in the where clause instead of binding a null value.")));
		}
		if (i < 0 || i >= params->def->nparams)
		{
			snprintf(msg, sizeof(msg), "Parameter $%d was not provided", i + 1);
			shape_def_error_set("params", msg);
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_PARAMETER),
					 errmsg("there is no value for parameter $%d", i + 1),
					 errhint("Pass the value as params[%d].", i + 1)));
		}
		if (type == UNKNOWNOID || !OidIsValid(type))
			type = TEXTOID;
		shape_def_error_set("params", NULL);
		getTypeInputInfo(type, &input, &ioparam);
		get_typlenbyval(type, &typlen, &typbyval);
		value = OidInputFunctionCall(input, params->def->params[i], ioparam, -1);
		shape_def_error_set("where", NULL);
		return (Node *) makeConst(type, -1, param->paramcollid, typlen, value,
								  false, typbyval);
	}
	return expression_tree_mutator(node, where_bind_params, params);
}

/*
 * pg_catalog functions whose output can grow far beyond their input
 * (repeat('x', 1e9)) or whose time can (factorial(1e5)): a client's
 * constants go through them at validation, and every row on every change.
 */
static const char *const where_unbounded_functions[] = {
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
where_numeric_only(const char *name)
{
	return strcmp(name, "power") == 0 || strcmp(name, "pow") == 0 || strcmp(name, "exp") == 0;
}

static bool
where_unbounded_function(Oid funcid, void *context)
{
	char	   *name = get_func_name(funcid);

	if (name == NULL)
		return false;
	for (size_t i = 0; i < lengthof(where_unbounded_functions); i++)
		if (strcmp(name, where_unbounded_functions[i]) == 0 &&
			(!where_numeric_only(name) || get_func_rettype(funcid) == NUMERICOID))
		{
			*(const char **) context = where_unbounded_functions[i];
			return true;
		}
	return false;
}

/* Functions a where clause may not call: all but pg_catalog's own. */
static bool
where_foreign_function(Oid funcid, void *context)
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

static void where_refuse_padding(const char *what, const char *type);

/*
 * The length coercions that pad (character(n), bit(n)), called or made by
 * a cast of a column: the length, their second argument, must be a
 * constant of at most WHERE_MAX_PADDED_LENGTH.
 */
static int32
where_padding_limit(Oid funcid)
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
where_contains_padding(Node *node, void *context)
{
	if (node == NULL)
		return false;
	if (IsA(node, FuncExpr) && where_padding_limit(((FuncExpr *) node)->funcid) >= 0)
		return true;
	return expression_tree_walker(node, where_contains_padding, context);
}

static void
where_check_padding(FuncExpr *func)
{
	int32		limit = where_padding_limit(func->funcid);
	Node	   *length;

	if (limit < 0)
		return;
	length = list_length(func->args) >= 2 ? lsecond(func->args) : NULL;
	if (length != NULL && IsA(length, Const) && !((Const *) length)->constisnull &&
		DatumGetInt32(((Const *) length)->constvalue) <= limit)
		return;
	where_refuse_padding(psprintf("%s()", get_func_name(func->funcid)),
						 length != NULL && IsA(length, Const) && !((Const *) length)->constisnull ?
						 format_type_with_typemod(func->funcresulttype,
												  DatumGetInt32(((Const *) length)->constvalue)) :
						 psprintf("%s of a length it computes", format_type_be(func->funcresulttype)));
}

/* Refuses a system column or a whole-row reference (cursorpos 0: none known). */
static void
where_refuse_system_column(int cursorpos)
{
	shape_def_error_set("where", "System columns and whole-row references are not allowed in where clauses");
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("system columns and whole-row references are not allowed in a shape's where clause"),
			 errposition(cursorpos)));
}

/* Refuses a function or an operator that is not pg_catalog's. */
static void
where_refuse_foreign_function(void)
{
	shape_def_error_set("where", "Only functions and operators of pg_catalog are allowed in where clauses");
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("only functions and operators of pg_catalog are allowed in a shape's where clause"),
			 errdetail("The where clause is also evaluated while decoding the WAL, where only built-in functions are safe.")));
}

static bool where_type_names(Oid typid);
static bool where_function_names(HeapTuple proctup);
static void where_refuse_naming_function(const char *name, int cursorpos);
static void where_require_safe_type(Oid typid, int32 typmod, const char *what);

/* check_functions_in_node: a function that takes or returns an object identifier type */
static bool
where_naming_function(Oid funcid, void *context)
{
	HeapTuple	tup = SearchSysCache1(PROCOID, ObjectIdGetDatum(funcid));
	bool		found;

	if (!HeapTupleIsValid(tup))
		return false;
	found = where_function_names(tup);
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
where_jsonpath_function(Oid funcid, void *context)
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
where_call_text(Node *node, Oid funcid)
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
where_check_node(Node *node, void *context)
{
	const char *unbounded = NULL;
	Oid			funcid = InvalidOid;

	if (node == NULL)
		return false;
	if (IsA(node, Var) && ((Var *) node)->varattno <= 0)
		where_refuse_system_column(0);
	/* (the raw tree's checks refuse these before analysis; this is in case) */
	if (check_functions_in_node(node, where_naming_function, &funcid))
		where_refuse_naming_function(get_func_name(funcid), 0);
	if (!IsA(node, List) && !IsA(node, CaseWhen) && where_type_names(exprType(node)))
		where_require_safe_type(exprType(node), -1, "an expression");
	if (check_functions_in_node(node, where_jsonpath_function, &funcid))
	{
		char	   *what = where_call_text(node, funcid);
		char		msg[256];

		snprintf(msg, sizeof(msg),
				 "%s is not allowed in where clauses: evaluating a jsonpath can take time and memory exponential in its length",
				 what);
		shape_def_error_set("where", msg);
		what[0] = pg_tolower((unsigned char) what[0]);
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("%s is not allowed in a shape's where clause", what),
				 errdetail("Evaluating a jsonpath can take time and memory exponential in its length (in lax mode, each step may double what it finds), and the clause runs on every change of the table.")));
	}
	if (check_functions_in_node(node, where_unbounded_function, &unbounded))
	{
		char		msg[256];

		snprintf(msg, sizeof(msg),
				 "%s() is not allowed in where clauses: its output or its time can grow far beyond its input",
				 unbounded);
		shape_def_error_set("where", msg);
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("%s() is not allowed in a shape's where clause", unbounded),
				 errdetail("Its output or its time can grow far beyond its input, and the clause runs on every change of the table.")));
	}
	if (IsA(node, FuncExpr))
		where_check_padding((FuncExpr *) node);
	if (!IsA(node, List) && !IsA(node, CaseWhen) &&
		(exprType(node) == XMLOID || exprType(node) == XMLARRAYOID))
	{
		/* xmlelement(), xpath(): libxml2 builds what it likes, outside PostgreSQL's memory */
		shape_def_error_set("where", "Values of type xml are not allowed in where clauses");
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("values of type xml are not allowed in a shape's where clause")));
	}
	if (check_functions_in_node(node, where_foreign_function, NULL))
		where_refuse_foreign_function();
	if (IsA(node, CoerceToDomain) &&
		((CoerceToDomain *) node)->resulttype >= FirstNormalObjectId)
	{
		/* a domain's CHECK constraints may call any function */
		shape_def_error_set("where", "Casts to user-defined domains are not allowed in where clauses");
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("casts to user-defined domains are not allowed in a shape's where clause"),
				 errdetail("A domain's check constraints may call functions that are not safe while decoding the WAL.")));
	}
	return expression_tree_walker(node, where_check_node, context);
}

/* Adds up the bytes of the constants in a (folded) expression. */
static bool
where_constant_bytes(Node *node, Size *total)
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
	return expression_tree_walker(node, where_constant_bytes, total);
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
where_domain_has_check(Oid domain)
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
typedef enum WhereTypeProblem
{
	WHERE_TYPE_OK,
	WHERE_TYPE_RUNS_CODE,		/* code of a database user or an extension */
	WHERE_TYPE_PADS,				/* character(n) or bit(n) beyond the limit */
	WHERE_TYPE_NAMES				/* an object identifier type: names the catalog */
} WhereTypeProblem;

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
where_is_reg_type(Oid typid)
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
static WhereTypeProblem
where_type_problem(Oid typid, int32 typmod, int depth)
{
	HeapTuple	tup;
	Form_pg_type t;
	WhereTypeProblem problem = WHERE_TYPE_RUNS_CODE;

	if (depth > 16)
		return WHERE_TYPE_RUNS_CODE;
	tup = SearchSysCache1(TYPEOID, ObjectIdGetDatum(typid));
	if (!HeapTupleIsValid(tup))
		return WHERE_TYPE_RUNS_CODE;
	t = (Form_pg_type) GETSTRUCT(tup);
	switch (t->typtype)
	{
		case TYPTYPE_BASE:
			if (IsTrueArrayType(t))
				problem = where_type_problem(t->typelem, typmod, depth + 1);
			else if (where_is_reg_type(typid))
				problem = WHERE_TYPE_NAMES;
			else if (t->typnamespace != PG_CATALOG_NAMESPACE ||
					 typid >= FirstNormalObjectId || typid == XMLOID)
				problem = WHERE_TYPE_RUNS_CODE;
			else if ((typid == BPCHAROID && typmod > WHERE_MAX_PADDED_LENGTH + VARHDRSZ) ||
					 (typid == BITOID && typmod > WHERE_MAX_PADDED_LENGTH))
				problem = WHERE_TYPE_PADS;
			else
				problem = WHERE_TYPE_OK;
			break;
		case TYPTYPE_PSEUDO:
			problem = t->typnamespace == PG_CATALOG_NAMESPACE && typid < FirstNormalObjectId ?
				WHERE_TYPE_OK : WHERE_TYPE_RUNS_CODE;
			break;
		case TYPTYPE_ENUM:
			problem = WHERE_TYPE_OK;	/* enum_in reads pg_enum, nothing else */
			break;
		case TYPTYPE_DOMAIN:
			problem = where_type_problem(t->typbasetype, t->typtypmod, depth + 1);
			if (problem == WHERE_TYPE_OK && typid >= FirstNormalObjectId &&
				where_domain_has_check(typid))
				problem = WHERE_TYPE_RUNS_CODE;
			break;
		case TYPTYPE_COMPOSITE:
			{
				Relation	rel = relation_open(t->typrelid, AccessShareLock);
				TupleDesc	desc = RelationGetDescr(rel);

				problem = WHERE_TYPE_OK;
				/* the row types of pg_type, pg_proc, ... have fields of those */
				for (int i = 0; i < desc->natts && problem == WHERE_TYPE_OK; i++)
					if (!TupleDescAttr(desc, i)->attisdropped)
						problem = where_type_problem(TupleDescAttr(desc, i)->atttypid,
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
				problem = where_type_problem(get_range_subtype(typid), -1, depth + 1);
				if (problem == WHERE_TYPE_OK && OidIsValid(canonical) &&
					where_foreign_function(canonical, NULL))
					problem = WHERE_TYPE_RUNS_CODE;
			}
			break;
		case TYPTYPE_MULTIRANGE:
			problem = where_type_problem(get_multirange_range(typid), -1, depth + 1);
			break;
	}
	ReleaseSysCache(tup);
	return problem;
}

/* Refuses a where clause that pads values beyond WHERE_MAX_PADDED_LENGTH. */
static void
where_refuse_padding(const char *what, const char *type)
{
	char		msg[512];

	snprintf(msg, sizeof(msg),
			 "%c%s reads values as %s, which where clauses cannot use: it pads every value to more than %d characters or bits",
			 pg_toupper((unsigned char) what[0]), what + 1, type, WHERE_MAX_PADDED_LENGTH);
	shape_def_error_set("where", msg);
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
where_require_safe_type(Oid typid, int32 typmod, const char *what)
{
	char		msg[512];
	WhereTypeProblem problem = where_type_problem(typid, typmod, 0);

	if (problem == WHERE_TYPE_OK)
		return;
	if (problem == WHERE_TYPE_PADS)
		where_refuse_padding(what, format_type_with_typemod(typid, typmod));
	if (problem == WHERE_TYPE_NAMES)
	{
		snprintf(msg, sizeof(msg),
				 "%c%s has type %s, which where clauses cannot use: its values name objects of the catalog, which are looked up by name",
				 pg_toupper((unsigned char) what[0]), what + 1, format_type_be(typid));
		shape_def_error_set("where", msg);
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
	shape_def_error_set("where", msg);
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("%s has type %s, which a shape's where clause cannot use", what,
					format_type_be(typid)),
			 errdetail("Reading its values could run code of a database user or an extension."),
			 errhint("A where clause may use PostgreSQL's built-in types but xml, enums, domains without a CHECK constraint, and arrays, composites and ranges of these.")));
}

/* What the checks of the raw parse tree need. */
typedef struct WhereRaw
{
	Relation	rel;
	int			nparams;		/* the parameters given: $1 .. $nparams */
	const char *privilege_field;	/* the field of a column the user may not read */
} WhereRaw;

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
where_check_column_ref(ColumnRef *ref, WhereRaw *raw)
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
		where_refuse_system_column(ref->location + 1);
	if (pg_attribute_aclcheck(RelationGetRelid(rel), attnum, GetUserId(), ACL_SELECT) != ACLCHECK_OK)
	{
		const char *field;
		char	   *problem = shape_read_problem(RelationGetRelid(rel), 1, &attnum, &field);

		if (problem != NULL)
		{
			shape_def_error_set(raw->privilege_field, problem);
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("a shape cannot be served to role \"%s\"",
							GetUserNameFromId(GetUserId(), false)),
					 errdetail("%s.", problem)));
		}
	}
	snprintf(what, sizeof(what), "column \"%s\"", name);
	/* the column's own typmod pads nothing: stored values are read as they are */
	where_require_safe_type(get_atttype(RelationGetRelid(rel), attnum), -1, what);
}

/* Whether a qualified name's schema, if it has one, is pg_catalog. */
static bool
where_name_in_catalog(List *names)
{
	return list_length(names) < 2 ||
		strcmp(strVal(list_nth(names, list_length(names) - 2)), "pg_catalog") == 0;
}

/* Whether the type takes or makes values of an object identifier type. */
static bool
where_type_names(Oid typid)
{
	Oid			elem = get_element_type(typid);

	return where_is_reg_type(typid) || (OidIsValid(elem) && where_is_reg_type(elem));
}

/* Whether the function takes or returns values of an object identifier type. */
static bool
where_function_names(HeapTuple proctup)
{
	Form_pg_proc proc = (Form_pg_proc) GETSTRUCT(proctup);

	if (where_type_names(proc->prorettype))
		return true;
	for (int i = 0; i < proc->pronargs; i++)
		if (where_type_names(proc->proargtypes.values[i]))
			return true;
	return false;
}

/* Refuses a function (or function-style cast) that names objects of the catalog. */
static void
where_refuse_naming_function(const char *name, int cursorpos)
{
	char		msg[256];

	snprintf(msg, sizeof(msg),
			 "%s() is not allowed in where clauses: it takes or returns objects of the catalog, which are looked up by name",
			 name);
	shape_def_error_set("where", msg);
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
where_call_names(const char *name)
{
	CatCList   *procs = SearchSysCacheList1(PROCNAMEARGSNSP, CStringGetDatum(name));
	Oid			typid;
	bool		found = false;

	for (int i = 0; i < procs->n_members && !found; i++)
	{
		HeapTuple	tup = &procs->members[i]->tuple;

		found = ((Form_pg_proc) GETSTRUCT(tup))->pronamespace == PG_CATALOG_NAMESPACE &&
			where_function_names(tup);
	}
	ReleaseSysCacheList(procs);
	typid = GetSysCacheOid2(TYPENAMENSP, Anum_pg_type_oid, CStringGetDatum(name),
							ObjectIdGetDatum(PG_CATALOG_NAMESPACE));
	return found || (OidIsValid(typid) && where_type_names(typid));
}

/* Refuses $n beyond the parameters given, before the parser sizes anything by n. */
static void
where_check_param_ref(ParamRef *ref, int nparams)
{
	char		msg[128];

	if (ref->number >= 1 && ref->number <= nparams)
		return;
	snprintf(msg, sizeof(msg), "Parameter $%d was not provided", ref->number);
	shape_def_error_set("params", msg);
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
where_check_raw(Node *node, WhereRaw *raw)
{
	if (node == NULL)
		return false;
	if (IsA(node, ParamRef))
		where_check_param_ref((ParamRef *) node, raw->nparams);
	if (IsA(node, CollateClause) && !where_name_in_catalog(((CollateClause *) node)->collname))
	{
		shape_def_error_set("where", "Only collations of pg_catalog are allowed in where clauses");
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("only collations of pg_catalog are allowed in a shape's where clause"),
				 errposition(((CollateClause *) node)->location + 1)));
	}
	if (IsA(node, FuncCall) && where_name_in_catalog(((FuncCall *) node)->funcname))
	{
		FuncCall   *call = (FuncCall *) node;
		const char *name = strVal(llast(call->funcname));

		if (where_call_names(name))
			where_refuse_naming_function(name, call->location + 1);
	}
	if (IsA(node, SubLink))
	{
		shape_def_error_set("where", "Subqueries are not allowed in where clauses");
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("subqueries are not allowed in a shape's where clause")));
	}
	if ((IsA(node, FuncCall) && !where_name_in_catalog(((FuncCall *) node)->funcname)) ||
		(IsA(node, A_Expr) && !where_name_in_catalog(((A_Expr *) node)->name)))
		where_refuse_foreign_function();
	if (IsA(node, TypeCast) && !where_name_in_catalog(((TypeCast *) node)->typeName->names))
	{
		shape_def_error_set("where", "Only types of pg_catalog are allowed in where clauses");
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
			where_require_safe_type(typid, -1, "a cast");
			if (name->typmods != NIL)
			{
				int32		typmod;

				(void) typenameTypeIdAndMod(NULL, name, &typid, &typmod);
				where_require_safe_type(typid, typmod, "a cast");
			}
		}
	}
	if (IsA(node, ColumnRef))
		where_check_column_ref((ColumnRef *) node, raw);
	return raw_expression_tree_walker(node, where_check_raw, raw);
}

/* Refuses constants of more than shape_sync.max_where_constant_size bytes in all. */
static void
where_check_constant_bytes(Size bytes)
{
	char		msg[256];

	if (bytes <= (Size) shape_sync_max_where_constant_size)
		return;
	snprintf(msg, sizeof(msg),
			 "The where clause's constants take %zu bytes or more; this server allows at most %d (shape_sync.max_where_constant_size)",
			 bytes, shape_sync_max_where_constant_size);
	shape_def_error_set("where", msg);
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
where_fold_mutator(Node *node, Size *made)
{
	Node	   *folded;

	if (node == NULL || IsA(node, Const) || IsA(node, Var))
		return node;
	node = expression_tree_mutator(node, where_fold_mutator, made);
	CHECK_FOR_INTERRUPTS();
	if (contain_var_clause(node))
		return node;
	folded = eval_const_expressions(NULL, node);
	if (IsA(folded, Const))
		where_constant_bytes(folded, made);
	where_check_constant_bytes(*made);
	return folded;
}

/* Raises the error of a clause that folding took too long over. */
static void
where_too_slow(void)
{
	char		msg[256];

	snprintf(msg, sizeof(msg),
			 "The where clause took longer than the %d ms that shape_sync.where_evaluation_timeout allows to evaluate",
			 shape_sync_where_evaluation_timeout);
	shape_def_error_set("where", msg);
	ereport(ERROR,
			(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
			 errmsg("a shape's where clause took longer than \"%s\" allows to evaluate",
					"shape_sync.where_evaluation_timeout")));
}

typedef enum WherePattern
{
	WHERE_PATTERN_NONE,
	WHERE_PATTERN_REGEX,			/* compiled before anything is matched */
	WHERE_PATTERN_LIKE			/* read as far as the value matches */
} WherePattern;

/*
 * Whether the function reads its second argument as a pattern: a regular
 * expression (~, ~*, !~, !~*, SIMILAR TO, which becomes ~, substring(...
 * from ...), the regexp_*() family), or a LIKE pattern (~~, ~~*, whose
 * trailing escape character is an error).  Found by their C
 * implementation, so that every operator and overload is.
 */
static WherePattern
where_pattern_function(Oid funcid)
{
	HeapTuple	tup = SearchSysCache1(PROCOID, ObjectIdGetDatum(funcid));
	Form_pg_proc proc;
	WherePattern found = WHERE_PATTERN_NONE;

	if (!HeapTupleIsValid(tup))
		return WHERE_PATTERN_NONE;
	proc = (Form_pg_proc) GETSTRUCT(tup);
	if (proc->prolang == INTERNALlanguageId && proc->pronamespace == PG_CATALOG_NAMESPACE &&
		proc->pronargs >= 2 && !proc->proretset)
	{
		bool		isnull;
		Datum		src = SysCacheGetAttr(PROCOID, tup, Anum_pg_proc_prosrc, &isnull);
		char	   *name = isnull ? NULL : TextDatumGetCString(src);

		if (name != NULL && strstr(name, "regex") != NULL)
			found = WHERE_PATTERN_REGEX;
		else if (name != NULL && strstr(name, "like") != NULL)
			found = WHERE_PATTERN_LIKE;
	}
	ReleaseSysCache(tup);
	return found;
}

/* Evaluates `call` (a copy) with its first argument replaced by `value`. */
static void
where_evaluate_on(Node *call, Node *value)
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
where_check_patterns(Node *node, void *context)
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
		WherePattern kind;

		for_each_from(lc, args, 1)
			constant = constant && IsA(lfirst(lc), Const);
		kind = constant ? where_pattern_function(funcid) : WHERE_PATTERN_NONE;

		if (kind != WHERE_PATTERN_NONE)
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
			where_evaluate_on(copyObject(node),
							  (Node *) makeConst(type, -1, exprCollation(subject), typlen,
												 OidInputFunctionCall(input, "", ioparam, -1),
												 false, typbyval));
			if (kind == WHERE_PATTERN_LIKE && IsA(node, OpExpr) &&
				pattern->consttype == type && !pattern->constisnull)
			{
				Const	   *itself = copyObject(pattern);

				itself->constcollid = exprCollation(subject);
				where_evaluate_on(copyObject(node), (Node *) itself);
			}
		}
	}
	return expression_tree_walker(node, where_check_patterns, context);
}

static Node *
where_fold(Node *expr)
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
		where_constant_bytes(expr, &made);
		where_check_constant_bytes(made);
		folded = where_fold_mutator(expr, &made);
		/* what is left to simplify evaluates nothing heavy */
		folded = eval_const_expressions(NULL, folded);
		(void) where_check_patterns(folded, NULL);
	}
	PG_CATCH();
	{
		expired = eval_deadline_end();
		eval_deadline_unwatch();
		if (!expired)
			PG_RE_THROW();
		MemoryContextSwitchTo(old);
		FlushErrorState();
		where_too_slow();
	}
	PG_END_TRY();
	expired = eval_deadline_end();
	eval_deadline_unwatch();
	if (expired)
		where_too_slow();
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

typedef struct WhereCost
{
	int			columns;		/* column references beneath the node walked */
	int64		cost;
} WhereCost;

static bool
where_value_cost(Node *node, WhereCost *c)
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
	(void) expression_tree_walker(node, where_value_cost, c);
	beneath = c->columns;
	if (beneath > 0 &&
		((IsA(node, FuncExpr) && where_padding_limit(((FuncExpr *) node)->funcid) >= 0) ||
		 (IsA(node, ArrayCoerceExpr) &&
		  where_contains_padding((Node *) ((ArrayCoerceExpr *) node)->elemexpr, NULL))))
	{
		/* string_to_array(t, '')::char(1024)[] pads every character of t */
		shape_def_error_set("where", "Casting a column's values to character(n) or bit(n) is not allowed in where clauses: it pads every value");
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
where_numeric_too_large(Numeric n, Numeric limit)
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
where_value_has_large_numeric(Datum value, Oid type, Numeric limit, int depth)
{
	Oid			elem;

	if (depth > 16)
		return true;
	type = getBaseType(type);
	if (type == NUMERICOID)
		return where_numeric_too_large(DatumGetNumeric(value), limit);
	if (type == JSONBOID)
	{
		Jsonb	   *jb = DatumGetJsonbP(value);
		JsonbIterator *it = JsonbIteratorInit(&jb->root);
		JsonbValue	v;
		JsonbIteratorToken token;

		while ((token = JsonbIteratorNext(&it, &v, false)) != WJB_DONE)
			if ((token == WJB_VALUE || token == WJB_ELEM) && v.type == jbvNumeric &&
				where_numeric_too_large(v.val.numeric, limit))
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
			if (!nulls[i] && where_value_has_large_numeric(items[i], elem, limit, depth + 1))
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
			((!lower.infinite && where_value_has_large_numeric(lower.val, cache->rngelemtype->type_id, limit, depth + 1)) ||
			 (!upper.infinite && where_value_has_large_numeric(upper.val, cache->rngelemtype->type_id, limit, depth + 1)));
	}
	if (type_is_multirange(type))
	{
		TypeCacheEntry *cache = lookup_type_cache(type, TYPECACHE_MULTIRANGE_INFO);
		RangeType **ranges;
		int32		n;

		multirange_deserialize(cache->rngtype, DatumGetMultirangeTypeP(value), &n, &ranges);
		for (int i = 0; i < n; i++)
			if (where_value_has_large_numeric(RangeTypePGetDatum(ranges[i]),
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
			found = !isnull && where_value_has_large_numeric(field, att->atttypid, limit, depth + 1);
		}
		ReleaseTupleDesc(desc);
		return found;
	}
	return false;
}

static bool
where_find_large_numeric(Node *node, Numeric limit)
{
	if (node == NULL)
		return false;
	if (IsA(node, Const))
		return !((Const *) node)->constisnull &&
			where_value_has_large_numeric(((Const *) node)->constvalue,
										  ((Const *) node)->consttype, limit, 0);
	return expression_tree_walker(node, where_find_large_numeric, limit);
}

/* Refuses numeric constants, in any container, of more than WHERE_MAX_NUMERIC_DIGITS. */
static void
where_check_numeric_constants(Node *expr)
{
	char		limit_text[16];
	Numeric		limit;
	char		msg[256];

	snprintf(limit_text, sizeof(limit_text), "1e%d", WHERE_MAX_NUMERIC_DIGITS);
	limit = DatumGetNumeric(DirectFunctionCall3(numeric_in, CStringGetDatum(limit_text),
												ObjectIdGetDatum(InvalidOid),
												Int32GetDatum(-1)));
	if (!where_find_large_numeric(expr, limit))
		return;
	snprintf(msg, sizeof(msg),
			 "A numeric constant of the where clause has more than %d digits before or after its point",
			 WHERE_MAX_NUMERIC_DIGITS);
	shape_def_error_set("where", msg);
	ereport(ERROR,
			(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
			 errmsg("a numeric constant of a shape's where clause has more than %d digits before or after its point",
					WHERE_MAX_NUMERIC_DIGITS),
			 errdetail("Arithmetic on it would take time and memory that grow with its digits, on every change of the table.")));
}

static void
where_check_value_cost(Node *expr)
{
	WhereCost	c = {0, 0};
	char		msg[256];

	(void) where_value_cost(expr, &c);
	if (c.cost <= WHERE_MAX_VALUE_COST)
		return;
	snprintf(msg, sizeof(msg),
			 "The where clause would hold %lld column values at once on every row; at most %d are allowed (each column reference counts one, each function or operator that does not return a boolean as many as the references beneath it)",
			 (long long) c.cost, WHERE_MAX_VALUE_COST);
	shape_def_error_set("where", msg);
	ereport(ERROR,
			(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
			 errmsg("a shape's where clause would hold %lld column values at once on every row",
					(long long) c.cost),
			 errdetail("At most %d are allowed: each column reference counts one, and each function or operator that does not return a boolean counts as many as the column references beneath it.",
					   WHERE_MAX_VALUE_COST)));
}

typedef struct WhereErrorContext
{
	const char *query;
} WhereErrorContext;

/*
 * Parses `sql`, which must be "SELECT <one target> WHERE <expression>"
 * (a shape's or a subset's where clause), or with `order_by`
 * "SELECT <one target> ORDER BY <list>" (a subset's order_by), and nothing
 * else: no second statement, no other clause.  Returns the statement, or
 * NULL when it is anything more; a syntax error is raised.
 */
SelectStmt *
shape_where_parse_select_one(const char *sql, bool order_by)
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
where_error_callback(void *arg)
{
	WhereErrorContext *ctx = arg;
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
where_analyse(const ShapeDefinition *def, Relation rel, const char *privilege_field,
			  char **sql_out, char **tree)
{
	StringInfoData sql;
	SelectStmt *select;
	ParseState *pstate;
	ParseNamespaceItem *nsitem;
	Node	   *expr;
	WhereParams	params;
	WhereRaw		raw;
	ErrorContextCallback errcb;
	WhereErrorContext errctx;

	shape_def_error_set("where", NULL);
	initStringInfo(&sql);
	appendStringInfoString(&sql, WHERE_PREFIX);
	appendStringInfoString(&sql, def->where);

	errctx.query = sql.data;
	errcb.callback = where_error_callback;
	errcb.arg = &errctx;
	errcb.previous = error_context_stack;
	error_context_stack = &errcb;

	select = shape_where_parse_select_one(sql.data, false);
	if (select == NULL)
	{
		shape_def_error_set("where", "Invalid where clause: it must be a single boolean expression");
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
	where_check_raw(select->whereClause, &raw);
	expr = transformExpr(pstate, select->whereClause, EXPR_KIND_WHERE);
	expr = coerce_to_boolean(pstate, expr, "WHERE");
	assign_expr_collations(pstate, expr);

	if (checkExprHasSubLink(expr))
	{
		shape_def_error_set("where", "Subqueries are not allowed in where clauses");
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("subqueries are not allowed in a shape's where clause")));
	}
	if (expression_returns_set(expr))
	{
		shape_def_error_set("where", "Set-returning functions are not allowed in where clauses");
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("set-returning functions are not allowed in a shape's where clause")));
	}
	where_check_node(expr, NULL);
	for (int i = 0; i < params.ntypes; i++)
		if (OidIsValid(params.types[i]))
		{
			char		what[32];

			snprintf(what, sizeof(what), "parameter $%d", i + 1);
			where_require_safe_type(params.types[i], -1, what);
		}
	expr = where_bind_params(expr, &params);
	if (contain_mutable_functions(expr))
	{
		shape_def_error_set("where", "Only immutable functions and operators are allowed in where clauses");
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
	where_check_numeric_constants(expr);
	expr = where_fold(expr);
	where_check_numeric_constants(expr);
	where_check_value_cost(expr);

	*tree = nodeToString(expr);
}

/*
 * where_analyse under pinned settings.  Parameters are read, and constants
 * deparsed, under Electric's display settings, whatever the session's: the
 * clause then means the same in the snapshot worker and the decoder, which
 * use them too.  Unqualified names resolve in pg_catalog only, whatever the
 * session's path; see where_check_raw for qualified ones.
 */
void
shape_where_validate(const ShapeDefinition *def, Relation rel, const char *privilege_field,
					 char **sql_out, char **tree)
{
	int			nestlevel = NewGUCNestLevel();

	row_encoder_set_display_settings(PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE);
	(void) set_config_option("search_path", "pg_catalog", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	where_analyse(def, rel, privilege_field, sql_out, tree);
	AtEOXact_GUC(true, nestlevel);
}

/*
 * A subset query's where clause (subset_query.c): parsed, checked, bound
 * and folded exactly as a shape's, against `rel`, with `params` binding its
 * $n.  Returns the folded tree; raises an ERROR with shape_def_error_field
 * set ("where" or "params") when the clause is invalid.
 */
Node *
shape_where_for_subset(Relation rel, const char *where, char **params, int nparams)
{
	ShapeDefinition def;
	char	   *sql;
	char	   *tree;

	memset(&def, 0, sizeof(def));
	def.where = (char *) where;
	def.params = params;
	def.nparams = nparams;
	shape_where_validate(&def, rel, "where", &sql, &tree);
	return stringToNode(tree);
}
