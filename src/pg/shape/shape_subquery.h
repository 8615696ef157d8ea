/*-------------------------------------------------------------------------
 *
 * shape_subquery.h
 *		Subqueries in a shape's where clause: the forms accepted, and the
 *		plan of conditions and disjuncts that tags are made from.
 *
 * IDENTIFICATION
 *	  src/pg/shape/shape_subquery.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SHAPE_SUBQUERY_H
#define SHAPE_SUBQUERY_H

#include "postgres.h"

#include "lib/stringinfo.h"
#include "nodes/parsenodes.h"
#include "nodes/primnodes.h"


/* most disjuncts a where clause with subqueries may expand to */
#define SUBQUERY_MAX_DISJUNCTS	100
/* ... most slots its tags may have in all (disjuncts x positions) */
#define SUBQUERY_MAX_TAG_SLOTS	1000
/* ... most different inner selects, at all levels together */
#define SUBQUERY_MAX_DEPENDENCIES	16
/* ... most levels of subqueries, each inside the where clause of the one above */
#define SUBQUERY_MAX_LEVELS		4

struct SubqueryPlan;

/*
 * One inner select, `SELECT c1 [, c2 ...] FROM t WHERE w`: what a value set
 * is built from.  Two subqueries with the same inner select share it.
 */
typedef struct SubqueryDependency
{
	Query	   *select;			/* analysed, its parameters bound */
	char	   *identity;		/* the select as SQL: equal, shared */
	Oid			relid;			/* t */
	int			ncolumns;		/* 1, or a row's width */
	AttrNumber *inner_attnums;	/* c1, c2 ... */
	Oid		   *types;			/* their types */
	Node	   *where;			/* w; NULL: every row */
	struct SubqueryPlan *nested;	/* w's own subqueries; NULL: none */
	bool		negated;		/* used as NOT IN */
	int			nread;			/* the columns it reads, selected, in w or
								 * compared with w's subqueries, */
	AttrNumber *read_attnums;	/* each once, */
	Oid		   *read_types;		/* and their types when it was planned */
} SubqueryDependency;

/*
 * One `(a [, b ...]) IN (select)` of the clause; in a nested plan (an inner
 * select's where clause), a, b ... are columns of that select's table.
 */
typedef struct SubquerySublink
{
	SubLink    *node;			/* as analysed: what a snapshot query reads */
	int			dependency;
	AttrNumber *outer_attnums;	/* a, b ... of the shape's table */
	char	  **outer_names;	/* their names, for a row's tags */
} SubquerySublink;

/*
 * One condition of the clause in disjunctive normal form: a subquery
 * (sublink >= 0) or any other condition (expr), negated or not.
 */
typedef struct SubqueryPosition
{
	Expr	   *expr;			/* sublink < 0: the condition */
	int			sublink;
	bool		negated;
} SubqueryPosition;

typedef struct SubqueryPlan
{
	int			ndependencies;
	SubqueryDependency *dependencies;
	int			nsublinks;
	SubquerySublink *sublinks;
	int			npositions;
	SubqueryPosition *positions;
	int			ndisjuncts;
	int		   *disjunct_first; /* ndisjuncts + 1: positions of disjunct d are
								 * disjunct_first[d] .. disjunct_first[d + 1] - 1 */
	Node	   *where_params;	/* the clause, each subquery replaced by the
								 * PARAM_EXEC parameter numbered as its sublink */
} SubqueryPlan;

/* Refuses a where clause (field "where") for what a subquery may not be. */
extern void subquery_refuse(const char *http_message, const char *message) pg_attribute_noreturn();

/* Whether a subquery may compare values of the type; refusing one. */
extern bool subquery_type_accepted(Oid type);
extern int	subquery_type_group(Oid type);
extern void subquery_refuse_type(Oid type) pg_attribute_noreturn();

/* Whether an analysed where clause has a subquery. */
extern bool subquery_in_where(Node *where);

/*
 * The plan of an analysed, folded where clause; NULL when it has no
 * subquery.  The where clause of an inner select with subqueries of its
 * own has a plan too (SubqueryDependency.nested), of which only the
 * sublinks, dependencies and where_params are used.  Refuses (an ERROR
 * with the request field set) what the plan cannot express.
 */
extern SubqueryPlan *subquery_plan(Node *where, Oid outer_relid);

/* The tables the clause's subqueries read, each once. */
extern List *subquery_relids(Node *where);

#endif							/* SHAPE_SUBQUERY_H */
