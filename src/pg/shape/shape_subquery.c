/*-------------------------------------------------------------------------
 *
 * shape_subquery.c
 *		Subqueries in a shape's where clause: the forms accepted, and the
 *		plan of conditions and disjuncts that tags are made from.
 *
 * The forms are checked with the rest of the clause (shape_where_check.c,
 * against each table); the plan is built here, from the checked tree.
 *
 * A where clause may hold `a IN (SELECT c FROM t WHERE w)`, the row form
 * `(a, b) IN (SELECT c, d FROM t WHERE w)`, and NOT of either, combined
 * with anything else by AND, OR and NOT.  The inner select is one table
 * (unqualified, it is public's, as a shape's table is), plain columns, and
 * a where clause under the same rules as a shape's (shape_where_check.c
 * checks it against the inner table: its columns' privileges, its
 * functions), which may have subqueries of its own, SUBQUERY_MAX_LEVELS
 * deep in all; no select may refer to a row outside it.  An inner select
 * with subqueries has a plan of its own (SubqueryDependency.nested) that
 * the decoder matches its table's rows with (shape_stream_nested.c).
 * The compared columns are plain
 * columns of types whose text is their identity (integers, text, uuid,
 * boolean, date and timestamps): the decoder keeps an inner select's
 * values as text (dependency_set.c), the tags a client matches moves
 * against are made from the same text, and two values are equal exactly
 * when their texts are.  The inner table must log old rows in full, as
 * the shape's table must: a set of values follows its updates and deletes.
 *
 * The plan puts the clause in disjunctive normal form, NOT pushed down to
 * the conditions: each disjunct owns consecutive positions, one per
 * condition it has (a condition in two disjuncts has two positions).  A
 * row's tags are one string per disjunct, its active_conditions one bool
 * per position (row_tags.c); a move of a value flips the positions of its
 * subquery.  A dependency is one inner select: subqueries with the same
 * select share it, and must use it with the same polarity, since a move
 * of one of its values is then either a move in or a move out of the
 * shape.  At most SUBQUERY_MAX_DISJUNCTS disjuncts.
 *
 * Whether a row is in the shape is the where clause itself, with SQL's
 * three-valued logic: the plan keeps it with each subquery replaced by a
 * parameter (where_params) that the decoder sets from the value sets.
 *
 * IDENTIFICATION
 *	  src/pg/shape/shape_subquery.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "nodes/makefuncs.h"
#include "nodes/nodeFuncs.h"
#include "optimizer/optimizer.h"
#include "rewrite/rewriteManip.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/builtins.h"
#include "utils/ruleutils.h"
#include "utils/pg_locale.h"
#include "utils/rel.h"

#include "shape_def_error.h"
#include "shape_subquery.h"

void
subquery_refuse(const char *http_message, const char *message)
{
	shape_def_error_set("where", http_message);
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("%s", message),
			 errhint("A subquery in a shape's where clause is written column IN (SELECT column FROM table WHERE condition).")));
}

/* ------------------------------------------------- the analysed tree */

/* Types whose values are equal exactly when their texts are. */
bool
subquery_type_accepted(Oid type)
{
	switch (type)
	{
		case INT2OID:
		case INT4OID:
		case INT8OID:
		case TEXTOID:
		case VARCHAROID:
		case UUIDOID:
		case BOOLOID:
		case DATEOID:
		case TIMESTAMPOID:
		case TIMESTAMPTZOID:
			return true;
		default:
			return false;
	}
}

/*
 * Types whose equal values print alike: integers, text, and each other
 * accepted type on its own (a date equals a timestamp at midnight, whose
 * text differs).
 */
int
subquery_type_group(Oid type)
{
	switch (type)
	{
		case INT2OID:
		case INT4OID:
		case INT8OID:
			return INT8OID;
		case TEXTOID:
		case VARCHAROID:
			return TEXTOID;
		default:
			return (int) type;
	}
}

void
subquery_refuse_type(Oid type)
{
	char		msg[256];

	snprintf(msg, sizeof(msg),
			 "A subquery cannot compare values of type %s: only integers, text, varchar, uuid, boolean, date and timestamps",
			 format_type_be(type));
	shape_def_error_set("where", msg);
	ereport(ERROR,
			(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
			 errmsg("a subquery in a shape's where clause cannot compare values of type %s",
					format_type_be(type)),
			 errdetail("Only integers, text, varchar, uuid, boolean, date and timestamps are compared: their values are equal exactly when their texts are.")));
}

static bool
subquery_find(Node *node, void *context)
{
	if (node == NULL)
		return false;
	if (IsA(node, SubLink))
		return true;
	return expression_tree_walker(node, subquery_find, context);
}

bool
subquery_in_where(Node *where)
{
	return subquery_find(where, NULL);
}

/* ---------------------------------------------------------- the plan */

typedef struct Literal
{
	Expr	   *expr;
	bool		negated;
} Literal;

/* lists of disjuncts, each a list of Literal * */
static List *subquery_dnf(Node *node, bool negated);

static List *
subquery_product(List *a, List *b)
{
	List	   *out = NIL;
	ListCell   *la;
	ListCell   *lb;

	if ((int64) list_length(a) * list_length(b) > SUBQUERY_MAX_DISJUNCTS)
	{
		char		msg[256];

		snprintf(msg, sizeof(msg),
				 "The where clause is too complex: with its subqueries it expands to more than %d alternatives",
				 SUBQUERY_MAX_DISJUNCTS);
		shape_def_error_set("where", msg);
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("a shape's where clause with subqueries expands to more than %d disjuncts",
						SUBQUERY_MAX_DISJUNCTS),
				 errhint("Write the clause with fewer alternatives (OR) inside conjunctions (AND).")));
	}
	foreach(la, a)
		foreach(lb, b)
		out = lappend(out, list_concat_copy(lfirst(la), lfirst(lb)));
	return out;
}

static List *
subquery_dnf(Node *node, bool negated)
{
	if (IsA(node, BoolExpr))
	{
		BoolExpr   *b = (BoolExpr *) node;
		ListCell   *lc;
		List	   *out = NIL;
		bool		conjunction = (b->boolop == AND_EXPR) != negated;

		if (b->boolop == NOT_EXPR)
			return subquery_dnf(linitial(b->args), !negated);
		foreach(lc, b->args)
		{
			List	   *part = subquery_dnf(lfirst(lc), negated);

			if (lc == list_head(b->args))
				out = part;
			else if (conjunction)
				out = subquery_product(out, part);
			else
				out = list_concat(out, part);
			if (list_length(out) > SUBQUERY_MAX_DISJUNCTS)
				out = subquery_product(out, list_make1(NIL));	/* refuses */
		}
		return out;
	}
	else
	{
		Literal    *lit = palloc(sizeof(Literal));

		if (!IsA(node, SubLink) && subquery_in_where(node))
			subquery_refuse("A subquery in a where clause may only be combined with AND, OR and NOT",
							"a subquery in a shape's where clause may only be combined with AND, OR and NOT");
		lit->expr = (Expr *) node;
		lit->negated = negated;
		return list_make1(list_make1(lit));
	}
}

/* The outer column of one side of IN's comparison, or 0. */
static AttrNumber
subquery_outer_column(Node *node)
{
	while (node != NULL && IsA(node, RelabelType))
		node = (Node *) ((RelabelType *) node)->arg;
	if (node != NULL && IsA(node, Var) && ((Var *) node)->varlevelsup == 0 &&
		((Var *) node)->varno == 1 && ((Var *) node)->varattno > 0)
		return ((Var *) node)->varattno;
	return 0;
}

/* The comparisons of `a IN` or `(a, b) IN`: each an OpExpr. */
static List *
subquery_comparisons(SubLink *sublink)
{
	Node	   *test = sublink->testexpr;

	if (IsA(test, OpExpr))
		return list_make1(test);
	if (IsA(test, BoolExpr) && ((BoolExpr *) test)->boolop == AND_EXPR)
		return ((BoolExpr *) test)->args;
	subquery_refuse("A subquery must be compared with columns of the shape's table: column IN (SELECT ...) or (column, column) IN (SELECT ...)",
					"a subquery must be compared with columns of the shape's table");
	return NIL;
}

/* Fills `sl` from `sublink`, whose dependency is `dep`. */
static void
subquery_fill_sublink(SubLink *sublink, SubquerySublink *sl, const SubqueryDependency *dep,
					  Oid outer_relid)
{
	List	   *comparisons = subquery_comparisons(sublink);
	ListCell   *lc;
	int			i = 0;

	if (list_length(comparisons) != dep->ncolumns)
		subquery_refuse("A subquery must select as many columns as it is compared with",
						"a subquery must select as many columns as it is compared with");
	sl->outer_attnums = palloc(sizeof(AttrNumber) * dep->ncolumns);
	sl->outer_names = palloc(sizeof(char *) * dep->ncolumns);
	foreach(lc, comparisons)
	{
		OpExpr	   *op = lfirst(lc);
		AttrNumber	attnum;
		Oid			type;

		if (!IsA(op, OpExpr) || list_length(op->args) != 2 ||
			(attnum = subquery_outer_column(linitial(op->args))) == 0)
			subquery_refuse("A subquery must be compared with columns of the shape's table: column IN (SELECT ...) or (column, column) IN (SELECT ...)",
							"a subquery must be compared with columns of the shape's table");
		type = exprType(lsecond(op->args));
		if (!subquery_type_accepted(get_atttype(outer_relid, attnum)))
			subquery_refuse_type(get_atttype(outer_relid, attnum));
		if (!subquery_type_accepted(type))
			subquery_refuse_type(type);
		if (subquery_type_group(get_atttype(outer_relid, attnum)) != subquery_type_group(type))
		{
			char		msg[256];

			snprintf(msg, sizeof(msg),
					 "A subquery cannot compare %s with %s: their values do not print alike",
					 format_type_be(get_atttype(outer_relid, attnum)), format_type_be(type));
			subquery_refuse(msg, "a subquery in a shape's where clause must compare values of the same kind");
		}
		if (OidIsValid(op->inputcollid) && !get_collation_isdeterministic(op->inputcollid))
			subquery_refuse("A subquery cannot compare text under a nondeterministic collation",
							"a subquery in a shape's where clause cannot compare text under a nondeterministic collation");
		sl->outer_attnums[i] = attnum;
		sl->outer_names[i] = get_attname(outer_relid, attnum, false);
		i++;
	}
}

/* Notes one column a dependency reads, once. */
static void
subquery_note_read_column(SubqueryDependency *d, AttrNumber attnum, Oid type)
{
	for (int i = 0; i < d->nread; i++)
		if (d->read_attnums[i] == attnum)
			return;
	if (attnum <= 0)
		return;
	d->read_attnums[d->nread] = attnum;
	d->read_types[d->nread++] = type;
}

/*
 * The columns a dependency reads, with their types: a change of one
 * rotates its shapes.  Those its where clause's own subqueries are
 * compared with count; the columns of their tables are theirs.
 */
static void
subquery_note_read_columns(SubqueryDependency *d)
{
	Node	   *own = d->nested != NULL ? d->nested->where_params : d->where;
	List	   *vars = own != NULL ? pull_var_clause(own, 0) : NIL;
	int			ncompared = 0;
	ListCell   *lc;

	for (int i = 0; d->nested != NULL && i < d->nested->nsublinks; i++)
		ncompared += d->nested->dependencies[d->nested->sublinks[i].dependency].ncolumns;
	d->read_attnums = palloc(sizeof(AttrNumber) * (d->ncolumns + list_length(vars) + ncompared));
	d->read_types = palloc(sizeof(Oid) * (d->ncolumns + list_length(vars) + ncompared));
	d->nread = 0;
	for (int c = 0; c < d->ncolumns; c++)
		subquery_note_read_column(d, d->inner_attnums[c], d->types[c]);
	foreach(lc, vars)
		subquery_note_read_column(d, ((Var *) lfirst(lc))->varattno, ((Var *) lfirst(lc))->vartype);
	for (int i = 0; d->nested != NULL && i < d->nested->nsublinks; i++)
	{
		const SubquerySublink *sl = &d->nested->sublinks[i];

		for (int c = 0; c < d->nested->dependencies[sl->dependency].ncolumns; c++)
			subquery_note_read_column(d, sl->outer_attnums[c],
									  get_atttype(d->relid, sl->outer_attnums[c]));
	}
}

static void subquery_refuse_too_many(void) pg_attribute_noreturn();

static void
subquery_refuse_too_many(void)
{
	char		msg[128];

	snprintf(msg, sizeof(msg), "A where clause may have at most %d different subqueries",
			 SUBQUERY_MAX_DEPENDENCIES);
	shape_def_error_set("where", msg);
	ereport(ERROR,
			(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
			 errmsg("a shape's where clause may have at most %d different subqueries",
					SUBQUERY_MAX_DEPENDENCIES)));
}

typedef struct PlanBuild
{
	SubqueryPlan *plan;
	List	   *sublink_nodes;	/* SubLink *, by sublink number */
	Oid			outer_relid;
	int			level;			/* of its subqueries: 1 for a shape's clause */
} PlanBuild;

static SubqueryPlan *subquery_plan_at(Node *where, Oid outer_relid, int level);

/* The sublink number of `sublink`, recording it and its dependency. */
static int
subquery_note_sublink(PlanBuild *b, SubLink *sublink, bool negated)
{
	SubqueryPlan *plan = b->plan;
	Query	   *select = (Query *) sublink->subselect;
	char	   *identity;
	int			dep = -1;
	int			n = list_length(b->sublink_nodes);
	ListCell   *lc;

	foreach(lc, b->sublink_nodes)
		if (lfirst(lc) == sublink)
			return foreach_current_index(lc);

	/*
	 * As it reads: the same select written twice is one dependency.
	 * Deparsing leaves much behind: it is done in a context of its own, and
	 * only its text is kept (a stream keeps its plan for good).
	 */
	{
		MemoryContext deparse = AllocSetContextCreate(CurrentMemoryContext,
													  "shape_sync subquery identity",
													  ALLOCSET_SMALL_SIZES);
		MemoryContext old = MemoryContextSwitchTo(deparse);
		char	   *text = pg_get_querydef(select, false);

		MemoryContextSwitchTo(old);
		identity = pstrdup(text);
		MemoryContextDelete(deparse);
	}
	for (int i = 0; i < plan->ndependencies && dep < 0; i++)
		if (strcmp(plan->dependencies[i].identity, identity) == 0)
			dep = i;
	if (dep >= 0 && plan->dependencies[dep].negated != negated)
		subquery_refuse("A subquery cannot be used both with IN and with NOT IN in one where clause",
						"a subquery cannot be used both with IN and with NOT IN in one shape's where clause");
	if (dep < 0 && plan->ndependencies == SUBQUERY_MAX_DEPENDENCIES)
		subquery_refuse_too_many();
	if (dep < 0)
	{
		SubqueryDependency *d;
		RangeTblEntry *rte = linitial_node(RangeTblEntry, select->rtable);
		ListCell   *tc;
		int			ncolumns = 0;

		plan->dependencies = plan->ndependencies == 0 ?
			palloc(sizeof(SubqueryDependency)) :
			repalloc(plan->dependencies, sizeof(SubqueryDependency) * (plan->ndependencies + 1));
		dep = plan->ndependencies++;
		d = &plan->dependencies[dep];
		memset(d, 0, sizeof(*d));
		d->select = select;
		d->identity = identity;
		d->relid = rte->relid;
		d->negated = negated;
		d->where = select->jointree->quals;
		d->inner_attnums = palloc(sizeof(AttrNumber) * list_length(select->targetList));
		d->types = palloc(sizeof(Oid) * list_length(select->targetList));
		foreach(tc, select->targetList)
		{
			TargetEntry *te = lfirst_node(TargetEntry, tc);

			if (te->resjunk)
				continue;
			d->inner_attnums[ncolumns] = ((Var *) te->expr)->varattno;
			d->types[ncolumns] = ((Var *) te->expr)->vartype;
			ncolumns++;
		}
		d->ncolumns = ncolumns;
		if (d->where != NULL && subquery_in_where(d->where))
		{
			if (b->level == SUBQUERY_MAX_LEVELS)
			{
				char		msg[128];

				snprintf(msg, sizeof(msg),
						 "Subqueries may be nested at most %d levels deep in a where clause",
						 SUBQUERY_MAX_LEVELS);
				shape_def_error_set("where", msg);
				ereport(ERROR,
						(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
						 errmsg("subqueries in a shape's where clause may be nested at most %d levels deep",
								SUBQUERY_MAX_LEVELS)));
			}
			d->nested = subquery_plan_at(d->where, d->relid, b->level + 1);
		}
		subquery_note_read_columns(d);
	}
	if (negated && plan->dependencies[dep].ncolumns > 1)
		subquery_refuse("NOT IN with a row of columns is not supported yet",
						"NOT IN with a row of columns is not supported in a shape's where clause yet");
	plan->sublinks = n == 0 ? palloc(sizeof(SubquerySublink)) :
		repalloc(plan->sublinks, sizeof(SubquerySublink) * (n + 1));
	plan->sublinks[n].node = sublink;
	plan->sublinks[n].dependency = dep;
	subquery_fill_sublink(sublink, &plan->sublinks[n], &plan->dependencies[dep], b->outer_relid);
	plan->nsublinks = n + 1;
	b->sublink_nodes = lappend(b->sublink_nodes, sublink);
	return n;
}

static Node *
subquery_replace_sublinks(Node *node, PlanBuild *b)
{
	if (node == NULL)
		return NULL;
	if (IsA(node, SubLink))
	{
		ListCell   *lc;

		foreach(lc, b->sublink_nodes)
			if (lfirst(lc) == node)
			{
				Param	   *param = makeNode(Param);

				param->paramkind = PARAM_EXEC;
				param->paramid = foreach_current_index(lc);
				param->paramtype = BOOLOID;
				param->paramtypmod = -1;
				param->paramcollid = InvalidOid;
				param->location = -1;
				return (Node *) param;
			}
		elog(ERROR, "subquery missing from its plan");
	}
	return expression_tree_mutator(node, subquery_replace_sublinks, b);
}

/* The inner selects of a plan, at every level. */
static int
subquery_plan_size(const SubqueryPlan *plan)
{
	int			n = plan->ndependencies;

	for (int d = 0; d < plan->ndependencies; d++)
		if (plan->dependencies[d].nested != NULL)
			n += subquery_plan_size(plan->dependencies[d].nested);
	return n;
}

/*
 * The plan of `where` (analysed and folded, on the table `outer_relid`),
 * or NULL when it has no subquery.
 */
SubqueryPlan *
subquery_plan(Node *where, Oid outer_relid)
{
	SubqueryPlan *plan = subquery_plan_at(where, outer_relid, 1);

	if (plan != NULL && subquery_plan_size(plan) > SUBQUERY_MAX_DEPENDENCIES)
		subquery_refuse_too_many();
	return plan;
}

/* The plan of a where clause whose subqueries are at `level`. */
static SubqueryPlan *
subquery_plan_at(Node *where, Oid outer_relid, int level)
{
	PlanBuild	b;
	SubqueryPlan *plan;
	List	   *disjuncts;
	ListCell   *dc;
	int			npositions = 0;
	int			d = 0;
	int			p = 0;

	if (where == NULL || !subquery_in_where(where))
		return NULL;
	plan = palloc0(sizeof(SubqueryPlan));
	b.plan = plan;
	b.sublink_nodes = NIL;
	b.outer_relid = outer_relid;
	b.level = level;
	disjuncts = subquery_dnf(where, false);
	foreach(dc, disjuncts)
		npositions += list_length(lfirst(dc));
	/* (a nested clause's positions tag nothing) */
	if (level == 1 && (int64) npositions * list_length(disjuncts) > SUBQUERY_MAX_TAG_SLOTS)
	{
		char		msg[256];

		snprintf(msg, sizeof(msg),
				 "The where clause is too complex: its rows would carry %d tags of %d conditions each, more than %d in all",
				 list_length(disjuncts), npositions, SUBQUERY_MAX_TAG_SLOTS);
		shape_def_error_set("where", msg);
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("a shape's where clause with subqueries has %d disjuncts of %d conditions in all",
						list_length(disjuncts), npositions),
				 errhint("Write the clause with fewer alternatives (OR) or fewer conditions.")));
	}
	plan->ndisjuncts = list_length(disjuncts);
	plan->disjunct_first = palloc(sizeof(int) * (plan->ndisjuncts + 1));
	plan->npositions = npositions;
	plan->positions = palloc0(sizeof(SubqueryPosition) * npositions);
	foreach(dc, disjuncts)
	{
		ListCell   *lc;

		plan->disjunct_first[d++] = p;
		foreach(lc, (List *) lfirst(dc))
		{
			Literal    *lit = lfirst(lc);
			SubqueryPosition *pos = &plan->positions[p++];

			pos->negated = lit->negated;
			pos->sublink = -1;
			if (IsA(lit->expr, SubLink))
				pos->sublink = subquery_note_sublink(&b, (SubLink *) lit->expr, lit->negated);
			else
				pos->expr = lit->expr;
		}
	}
	plan->disjunct_first[d] = p;
	plan->where_params = subquery_replace_sublinks(where, &b);	/* (copies as it goes) */
	return plan;
}

static bool
subquery_collect_relids(Node *node, List **relids)
{
	if (node == NULL)
		return false;
	if (IsA(node, SubLink))
	{
		Query	   *select = (Query *) ((SubLink *) node)->subselect;
		ListCell   *lc;

		foreach(lc, select->rtable)
		{
			RangeTblEntry *rte = lfirst_node(RangeTblEntry, lc);

			if (rte->rtekind == RTE_RELATION)
				*relids = list_append_unique_oid(*relids, rte->relid);
		}
		if (subquery_collect_relids(select->jointree->quals, relids))
			return true;
	}
	return expression_tree_walker(node, subquery_collect_relids, relids);
}

List *
subquery_relids(Node *where)
{
	List	   *relids = NIL;

	(void) subquery_collect_relids(where, &relids);
	return relids;
}
