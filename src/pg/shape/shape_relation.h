/*-------------------------------------------------------------------------
 *
 * shape_relation.h
 *		A shape's table and columns as the catalog describes them.
 *
 * IDENTIFICATION
 *	  src/pg/shape/shape_relation.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SHAPE_RELATION_H
#define SHAPE_RELATION_H

#include "postgres.h"

#include "access/attnum.h"
#include "utils/relcache.h"

/* One column a shape sends. */
typedef struct ShapeColumn
{
	AttrNumber	attnum;
	char	   *name;
	Oid			typid;
	int32		typmod;
	int			ndims;			/* array dimensions; 0 for scalars */
	bool		not_null;
	int			key_index;		/* position in the key, or -1 */
} ShapeColumn;

/* A shape's relation as the catalog describes it now. */
typedef struct ShapeRelation
{
	Oid			relid;
	char	   *schema;
	char	   *table;
	int			natts;			/* attributes of the table, dropped included */
	int			ncolumns;		/* the selected columns, by attnum */
	ShapeColumn *columns;
	int			nkeys;			/* the key columns, in key order */
	AttrNumber *keys;
	bool		has_pk;			/* false: every column is part of the key */
} ShapeRelation;

extern ShapeRelation *shape_relation_load(Oid relid, int ncolumns,
										  const AttrNumber *columns);
extern ShapeRelation *shape_relation_describe(Relation rel, int ncolumns,
											  const AttrNumber *columns);
extern Oid	shape_table_not_logged_in_full(Oid relid);
extern Oid	shape_table_not_logged(Oid relid);
extern char *shape_quoted_name(const char *schema, const char *table);
extern char *shape_quoted_relation(const ShapeRelation *rel);
extern char *shape_schema_json(const ShapeRelation *rel);

#endif							/* SHAPE_RELATION_H */
