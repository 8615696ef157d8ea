/*-------------------------------------------------------------------------
 *
 * shape_where_fold.h
 *		Folding a where clause's constants, and bounding its cost.
 *
 * IDENTIFICATION
 *	  src/pg/shape/shape_where_fold.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SHAPE_WHERE_FOLD_H
#define SHAPE_WHERE_FOLD_H

#include "postgres.h"

#include "nodes/nodes.h"

extern Node *where_fold(Node *expr);
extern void where_check_numeric_constants(Node *expr);
extern void where_check_value_cost(Node *expr);

#endif							/* SHAPE_WHERE_FOLD_H */
