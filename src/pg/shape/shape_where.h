/*-------------------------------------------------------------------------
 *
 * shape_where.h
 *		The guard of a shape's or a subset's where clause.
 *
 * IDENTIFICATION
 *	  src/pg/shape/shape_where.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SHAPE_WHERE_H
#define SHAPE_WHERE_H

#include "postgres.h"

#include "nodes/nodes.h"
#include "nodes/parsenodes.h"
#include "utils/relcache.h"

#include "shape_request.h"

extern void shape_where_validate(const ShapeDefinition *def, Relation rel,
								 const char *privilege_field,
								 char **sql_out, char **tree);
extern Node *shape_where_for_subset(Relation rel, const char *where, char **params,
									int nparams);
extern SelectStmt *shape_where_parse_select_one(const char *sql, bool order_by);

#endif							/* SHAPE_WHERE_H */
