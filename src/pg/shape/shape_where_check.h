/*-------------------------------------------------------------------------
 *
 * shape_where_check.h
 *		What a client's where clause may contain.
 *
 * IDENTIFICATION
 *	  src/pg/shape/shape_where_check.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SHAPE_WHERE_CHECK_H
#define SHAPE_WHERE_CHECK_H

#include "postgres.h"

#include "nodes/nodes.h"
#include "utils/relcache.h"

/* What the checks of the raw parse tree need. */
typedef struct WhereRaw
{
	Relation	rel;
	int			nparams;		/* the parameters given: $1 .. $nparams */
	const char *privilege_field;	/* the field of a column the user may not read */
} WhereRaw;

/* The raw parse tree, before analysis (a raw_expression_tree_walker). */
extern bool where_check_raw(Node *node, WhereRaw *raw);

/* The analysed tree (an expression_tree_walker; context unused). */
extern bool where_check_node(Node *node, void *context);

/* Refuses a type whose text input a where clause must not run. */
extern void where_require_safe_type(Oid typid, int32 typmod, const char *what);

/*
 * Functions that pad their result (character(n), bit(n)): the padded
 * length's limit, or -1; and whether an expression calls one.
 */
extern int32 where_padding_limit(Oid funcid);
extern bool where_contains_padding(Node *node, void *context);

#endif							/* SHAPE_WHERE_CHECK_H */
