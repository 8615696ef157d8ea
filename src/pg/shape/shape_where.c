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
 * operators of pg_catalog only, subqueries only in the forms
 * shape_subquery.c accepts, no aggregates, window functions,
 * set-returning functions or system columns.  It is analysed
 * with search_path pinned to pg_catalog, its constants are folded once,
 * here, and the folded tree is what the snapshot and the stream evaluate,
 * so nothing resolves names again later.
 *
 * The checks of what a clause may contain are shape_where_check.c's; the
 * folding of its constants and the bounds on its cost, shape_where_fold.c's.
 * This file parses, checks the raw tree (where_check_raw), analyses,
 * checks the analysed tree (where_check_node), binds the parameters and
 * folds (where_fold), in that order.
 *
 * Each refusal records the request field it concerns ("where", "params",
 * or the field of a column the user may not read) and the sentence
 * Electric's clients expect with shape_def_error_set (shape_def_error.c)
 * before it raises its ERROR.
 *
 * IDENTIFICATION
 *	  src/pg/shape/shape_where.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/optimizer.h"
#include "parser/parse_coerce.h"
#include "parser/parse_collate.h"
#include "parser/parse_expr.h"
#include "parser/parse_param.h"
#include "parser/parse_relation.h"
#include "parser/parser.h"
#include "rewrite/rewriteManip.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/ruleutils.h"

#include "row_encoder.h"
#include "shape_def_error.h"
#include "shape_where.h"
#include "shape_subquery.h"
#include "shape_where_check.h"
#include "shape_where_fold.h"

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
	if (IsA(node, Query))
		/* a subquery's select: its where clause's parameters too */
		return (Node *) query_tree_mutator((Query *) node, where_bind_params, params, 0);
	return expression_tree_mutator(node, where_bind_params, params);
}

/*
 * Folds the where clause of each subquery's select in place, with the
 * bounds the shape's own clause has (shape_where_fold.c): the decoder
 * evaluates it on every change of the subquery's table.
 */
static bool
where_fold_subqueries(Node *node, void *context)
{
	if (node == NULL)
		return false;
	if (IsA(node, SubLink))
	{
		Query	   *select = (Query *) ((SubLink *) node)->subselect;

		if (select->jointree->quals != NULL)
		{
			where_check_numeric_constants(select->jointree->quals);
			select->jointree->quals = where_fold(select->jointree->quals);
			where_check_numeric_constants(select->jointree->quals);
			where_check_value_cost(select->jointree->quals);
			/* and those of the subqueries of its where clause */
			(void) where_fold_subqueries(select->jointree->quals, context);
		}
		return where_fold_subqueries(((SubLink *) node)->testexpr, context);
	}
	return expression_tree_walker(node, where_fold_subqueries, context);
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
	if (subquery_in_where(expr))
	{
		/* the selects' own clauses are folded and bounded as the shape's */
		(void) where_fold_subqueries(expr, NULL);
		/* what the plan cannot express is refused now */
		(void) subquery_plan(expr, RelationGetRelid(rel));
	}

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

