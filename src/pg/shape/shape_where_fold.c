/*-------------------------------------------------------------------------
 *
 * shape_where_fold.c
 *		Folding a where clause's constants, once, and bounding what its
 *		evaluation may cost.
 *
 * The analysed clause's constants are folded here, once, and the folded
 * tree is what the snapshot and the stream evaluate.  Folding goes one node
 * at a time and counts every constant it makes against
 * shape_sync.max_where_constant_size, within the worker's evaluation
 * deadline (eval_deadline.c), and then compiles every constant pattern
 * (regular expressions, LIKE) once, so that an invalid one is the client's
 * error now.  What one row's evaluation holds, counted in column values, is
 * bounded (WHERE_MAX_VALUE_COST), and so are the numeric constants a clause
 * may compare with (where_check_numeric_constants).
 *
 * IDENTIFICATION
 *	  src/pg/shape/shape_where_fold.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_language.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_proc.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/optimizer.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/multirangetypes.h"
#include "utils/numeric.h"
#include "utils/syscache.h"

#include "shape_where_fold.h"

#include "eval_deadline.h"
#include "guc.h"
#include "shape_def_error.h"
#include "shape_where_check.h"

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

Node *
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
void
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

void
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
