/*-------------------------------------------------------------------------
 *
 * shape_where_check.c
 *		What a client's where clause may contain, checked before and after
 *		its analysis.
 *
 * A client's clause must not be able to run anyone's code but PostgreSQL's,
 * nor to look up anything outside pg_catalog, nor to make much from
 * little.  Before analysis (which reads literals through their types' input
 * functions, and sizes an array by the largest $n), the raw tree is
 * checked (where_check_raw): a $n past the parameters given; names
 * qualified with another schema (functions, operators, collations); column
 * references that are not plain columns, or name a column the user may not
 * SELECT; casts to types whose input runs a database user's or an
 * extension's code, pads (character(n), bit(n)) or looks names up (the
 * object identifier types, regclass, regconfig, ...), and calls of the
 * functions that take or return the latter (to_tsvector(regconfig, ...)).
 * After it (where_check_node): only immutable functions and operators of
 * pg_catalog, subqueries only in the forms shape_subquery.c accepts (whose
 * selects are checked here too, against their own tables), no aggregates,
 * window functions, set-returning
 * functions or system columns, and no functions whose output or time grows
 * far beyond their input, nor jsonpaths (exponential).
 *
 * Each refusal records the request field it concerns and raises an ERROR
 * (shape_def_error.c); shape_where.c runs these checks in order.
 *
 * IDENTIFICATION
 *	  src/pg/shape/shape_where_check.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/relation.h"
#include "access/table.h"
#include "catalog/catalog.h"
#include "catalog/namespace.h"
#include "catalog/pg_constraint.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_range.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/optimizer.h"
#include "parser/parse_type.h"
#include "utils/builtins.h"
#include "utils/catcache.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/syscache.h"

#include "shape_where_check.h"

#include "shape_def_error.h"
#include "shape_relation.h"
#include "shape_role.h"
#include "shape_subquery.h"
#include "table_code.h"

static void where_check_subquery_select(Query *select);

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
int32
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

bool
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
bool
where_check_node(Node *node, void *context)
{
	const char *unbounded = NULL;
	Oid			funcid = InvalidOid;

	if (node == NULL)
		return false;
	if (IsA(node, Query))
	{
		/* a subquery's select (shape_subquery.c): its where clause, its columns */
		where_check_subquery_select((Query *) node);
		return query_tree_walker((Query *) node, where_check_node, context, 0);
	}
	if (IsA(node, FromExpr) || IsA(node, RangeTblRef) || IsA(node, TargetEntry))
		return expression_tree_walker(node, where_check_node, context);	/* the select's parts */
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
void
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

/* ------------------------------------------------------- subqueries */

static bool
where_select_is_plain(SelectStmt *select)
{
	return IsA(select, SelectStmt) && select->op == SETOP_NONE &&
		list_length(select->fromClause) == 1 && IsA(linitial(select->fromClause), RangeVar) &&
		select->targetList != NIL && select->groupClause == NIL &&
		select->havingClause == NULL && select->windowClause == NIL &&
		select->limitCount == NULL && select->limitOffset == NULL &&
		select->lockingClause == NIL && select->withClause == NULL &&
		select->distinctClause == NIL && select->intoClause == NULL &&
		select->valuesLists == NIL && select->sortClause == NIL;
}

/*
 * A subquery before analysis: its form, its table (which analysis will
 * resolve, so its schema is set here: public when none is written), and
 * the inner select's columns and where clause, checked as a shape's are
 * against the inner table.
 */
static void
where_check_subquery_raw(SubLink *sublink, WhereRaw *raw)
{
	SelectStmt *select = (SelectStmt *) sublink->subselect;
	RangeVar   *rv;
	Oid			relid;
	Oid			not_full;
	Oid			unlogged = InvalidOid;
	Relation	inner;
	WhereRaw	inner_raw;
	ListCell   *lc;
	char		msg[512];
	char	   *quoted;

	if (sublink->subLinkType != ANY_SUBLINK ||
		(sublink->operName != NIL &&
		 (list_length(sublink->operName) != 1 ||
		  strcmp(strVal(linitial(sublink->operName)), "=") != 0)))
		subquery_refuse("Only IN (SELECT ...) subqueries are supported in where clauses",
						"only IN (SELECT ...) subqueries are allowed in a shape's where clause");
	if (!where_select_is_plain(select))
		subquery_refuse("A subquery in a where clause must select columns of one table, with an optional where clause, and nothing else",
						"a subquery in a shape's where clause must select columns of one table");
	rv = linitial(select->fromClause);
	if (rv->catalogname != NULL)
		subquery_refuse("A subquery's table cannot name a database",
						"a subquery's table cannot name a database");
	if (rv->schemaname == NULL)
		rv->schemaname = pstrdup("public");
	relid = RangeVarGetRelidExtended(rv, AccessShareLock, RVR_MISSING_OK | RVR_NOWAIT,
									 NULL, NULL);
	/*
	 * The table alone, as a shape reads its own: the children of an
	 * inherited table are not followed, the partitions of a partitioned
	 * one are its rows.
	 */
	rv->inh = OidIsValid(relid) && get_rel_relkind(relid) == RELKIND_PARTITIONED_TABLE;
	if (!OidIsValid(relid))
	{
		snprintf(msg, sizeof(msg), "Table \"%s\".\"%s\" in a subquery does not exist",
				 rv->schemaname, rv->relname);
		shape_def_error_set("where", msg);
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation \"%s.%s\" does not exist", rv->schemaname, rv->relname)));
	}
	inner = table_open(relid, NoLock);
	quoted = shape_quoted_name(rv->schemaname, rv->relname);
	if ((inner->rd_rel->relkind != RELKIND_RELATION &&
		 inner->rd_rel->relkind != RELKIND_PARTITIONED_TABLE) || IsCatalogRelation(inner) ||
		OidIsValid(unlogged = shape_table_not_logged(relid)))
	{
		if (OidIsValid(unlogged) && unlogged != relid)	/* a partition of it */
			quoted = shape_quoted_name(get_namespace_name(get_rel_namespace(unlogged)),
									   get_rel_name(unlogged));
		snprintf(msg, sizeof(msg), "Table %s in a subquery is not a logged user table",
				 quoted);
		shape_def_error_set("where", msg);
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("%s is not a logged user table", quoted),
				 errdetail("Subqueries may read ordinary tables whose changes are in the WAL only.")));
	}
	if (OidIsValid(not_full = shape_table_not_logged_in_full(relid)))
	{
		if (not_full != relid)	/* a partition of it */
			quoted = shape_quoted_name(get_namespace_name(get_rel_namespace(not_full)),
									   get_rel_name(not_full));
		snprintf(msg, sizeof(msg),
				 "Table %s in a subquery does not have REPLICA IDENTITY FULL, which subqueries need; the database operator can run: ALTER TABLE %s REPLICA IDENTITY FULL",
				 quoted, quoted);
		shape_def_error_set("where", msg);
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("table %s does not have REPLICA IDENTITY FULL", quoted),
				 errdetail("The values a subquery selects follow the updates and deletes of its table, whose old rows PostgreSQL logs in full only with REPLICA IDENTITY FULL."),
				 errhint("Run ALTER TABLE %s REPLICA IDENTITY FULL.", quoted)));
	}
	if (shape_row_security_applies(relid, GetUserId()))
	{
		snprintf(msg, sizeof(msg), "Table %s in a subquery has row-level security that applies to the server's role",
				 quoted);
		shape_def_error_set("where", msg);
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("table %s has row-level security that applies to role \"%s\"",
						quoted, GetUserNameFromId(GetUserId(), false)),
				 errdetail("A shape is shared by all its clients, so a subquery may not read such a table.")));
	}
	table_code_check(relid);
	inner_raw = *raw;
	inner_raw.rel = inner;
	foreach(lc, select->targetList)
	{
		ResTarget  *target = lfirst_node(ResTarget, lc);

		if (!IsA(target->val, ColumnRef))
			subquery_refuse("A subquery in a where clause must select plain columns",
							"a subquery in a shape's where clause must select plain columns");
		(void) where_check_raw(target->val, &inner_raw);
	}
	if (select->whereClause != NULL)
		(void) where_check_raw(select->whereClause, &inner_raw);
	table_close(inner, NoLock);
	(void) where_check_raw(sublink->testexpr, raw);
}


static void
where_check_subquery_select(Query *select)
{
	ListCell   *lc;

	if (select->commandType != CMD_SELECT || list_length(select->rtable) != 1 ||
		linitial_node(RangeTblEntry, select->rtable)->rtekind != RTE_RELATION ||
		list_length(select->jointree->fromlist) != 1 ||
		!IsA(linitial(select->jointree->fromlist), RangeTblRef) ||
		select->hasAggs || select->hasWindowFuncs || select->hasTargetSRFs ||
		select->hasDistinctOn || select->groupClause != NIL || select->groupingSets != NIL ||
		select->havingQual != NULL || select->sortClause != NIL ||
		select->limitCount != NULL || select->limitOffset != NULL ||
		select->setOperations != NULL || select->cteList != NIL ||
		select->rowMarks != NIL || select->distinctClause != NIL)
		subquery_refuse("A subquery in a where clause must select columns of one table, with an optional where clause, and nothing else",
						"a subquery in a shape's where clause must select columns of one table");
	/* (its own subqueries are checked as they are walked to, and planned) */
	if (contain_vars_of_level((Node *) select, 1))
		subquery_refuse("A subquery in a where clause cannot refer to a table outside it",
						"a subquery in a shape's where clause cannot refer to a table outside it");
	foreach(lc, select->targetList)
	{
		TargetEntry *te = lfirst_node(TargetEntry, lc);
		Var		   *var = (Var *) te->expr;

		if (te->resjunk)
			continue;
		if (!IsA(var, Var) || var->varlevelsup != 0 || var->varattno <= 0)
			subquery_refuse("A subquery in a where clause must select plain columns",
							"a subquery in a shape's where clause must select plain columns");
		if (!subquery_type_accepted(var->vartype))
			subquery_refuse_type(var->vartype);
	}
}


/*
 * Checks of the raw parse tree, before it is analysed: analysis already
 * runs input functions (an unknown literal compared with a column, or
 * cast, is read as that type then), so what could run code outside
 * pg_catalog must be refused before.  A subquery's select is checked here
 * against its own table (shape_subquery.c), before it could name anything; names qualified with another schema (functions,
 * operators, collations, types) and anything that would look an object up by
 * name (object identifier types); and a $n past the parameters given:
 * analysis would allocate an array of n parameter types (a gigabyte for
 * $268435455) before anything else could refuse it.
 */
bool
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
		/* its select against its own table, its comparison against ours */
		where_check_subquery_raw((SubLink *) node, raw);
		return false;
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
