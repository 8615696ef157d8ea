/*-------------------------------------------------------------------------
 *
 * shape_def.h
 *		Validation of shape definitions against the catalog, and a shape's
 *		identity.
 *
 * IDENTIFICATION
 *	  src/pg/shape/shape_def.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SHAPE_DEF_H
#define SHAPE_DEF_H

#include "postgres.h"

#include "access/attnum.h"

#include "shape_request.h"

/*
 * What a shape is, once validated: everything the snapshot needs, flat so
 * that it can be handed to another process.
 */
typedef struct ShapeSpec
{
	Oid			relid;
	uint32		flags;			/* SHAPE_FLAG_* */
	int			ncolumns;
	AttrNumber *columns;		/* selected attnums, ascending */
	char	   *where_sql;		/* deparsed, parameters bound; NULL if none */
	char	   *where_tree;		/* the folded tree, nodeToString(); NULL if none */
} ShapeSpec;

extern void shape_def_validate(const ShapeDefinition *def, ShapeSpec *spec, bool nowait);
extern char *shape_definition_fingerprint(const ShapeSpec *spec);
extern char *shape_identity(const ShapeSpec *spec);
extern char *shape_spec_read_problem(const ShapeSpec *spec, const char **field);

#endif							/* SHAPE_DEF_H */
