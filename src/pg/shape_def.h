/*-------------------------------------------------------------------------
 *
 * shape_def.h
 *		Validation of shape definitions against the catalog.
 *
 * IDENTIFICATION
 *	  src/pg/shape_def.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SHAPE_DEF_H
#define SHAPE_DEF_H

#include "postgres.h"

#include "access/attnum.h"
#include "lib/stringinfo.h"
#include "nodes/nodes.h"
#include "nodes/parsenodes.h"
#include "nodes/pg_list.h"
#include "utils/relcache.h"

#include "shape_request.h"

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

/*
 * While validating, the request field a failure belongs to, and the
 * message Electric clients expect when it differs from PostgreSQL's.
 */
extern const char *shape_def_error_field;
extern char shape_def_http_message[512];

extern void shape_def_validate(const ShapeDefinition *def, ShapeSpec *spec, bool nowait);
extern Node *shape_def_subset_where(Relation rel, const char *where, char **params,
									int nparams);
extern char *shape_def_error_message(const char *field, const ErrorData *edata);
extern SelectStmt *shape_def_parse_select_one(const char *sql, bool order_by);
extern ShapeRelation *shape_relation_load(Oid relid, int ncolumns,
										  const AttrNumber *columns);
extern ShapeRelation *shape_relation_describe(Relation rel, int ncolumns,
											  const AttrNumber *columns);
extern char *shape_schema_json(const ShapeRelation *rel);
extern char *shape_definition_fingerprint(const ShapeSpec *spec);
extern Oid	shape_table_not_logged_in_full(Oid relid);
extern char *shape_identity(const ShapeSpec *spec);
extern char *shape_quoted_name(const char *schema, const char *table);
extern char *shape_quoted_relation(const ShapeRelation *rel);
extern char *shape_read_problem(Oid relid, int nattnums, const AttrNumber *attnums,
								const char **field);
extern char *shape_spec_read_problem(const ShapeSpec *spec, const char **field);

#endif							/* SHAPE_DEF_H */
