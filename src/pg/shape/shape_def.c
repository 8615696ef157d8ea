/*-------------------------------------------------------------------------
 *
 * shape_def.c
 *		Validation of shape definitions against the catalog, and a shape's
 *		identity.
 *
 * A client's shape definition (table, where, params, columns, replica) is
 * turned here into a ShapeSpec: the relation's OID, the selected column
 * numbers, and the where clause as an analysed expression tree, deparsed
 * back to SQL with its parameters bound as typed constants.  The where
 * clause's guard, analysis and folding are shape_where.c's (with
 * shape_where_check.c and shape_where_fold.c).
 *
 * Validation runs as the current user (shape_sync.role in the worker, the
 * caller in SQL), and refuses what that user could not read with SELECT:
 * the schema without USAGE, the table or a column the shape reads (its
 * columns, key and where clause) without SELECT, and a table whose
 * row-level security applies to the user, because a shape is shared by all
 * its clients.  A user that may read nothing of the table is refused first,
 * before anything else is checked, so that all it learns is that the table
 * exists: no error about a column list, a where clause or the replica
 * identity tells it the table's columns, their types or its settings.  A
 * table without REPLICA IDENTITY FULL is refused, unless
 * shape_sync.manage_replica_identity lets the snapshot worker set it.  A
 * table without a primary key is keyed by all its columns, so a column list
 * must name them all.
 *
 * Failures are ordinary ereport(ERROR)s; the request field each belongs
 * to, and the sentence Electric's clients expect, are recorded with
 * shape_def_error_set (shape_def_error.c) before it is raised.
 *
 * A validated shape has two texts: its identity (shape_identity), which
 * two definitions share exactly when they are the same shape, and its
 * fingerprint (shape_definition_fingerprint), what its rows depend on in
 * the catalog, which its snapshot compares to see that the shape is still
 * the one that was made.
 *
 * IDENTIFICATION
 *	  src/pg/shape/shape_def.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/table.h"
#include "catalog/catalog.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "optimizer/optimizer.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"

#include "guc.h"
#include "shape_def.h"
#include "shape_def_error.h"
#include "shape_relation.h"
#include "shape_role.h"
#include "shape_table.h"
#include "shape_where.h"
#include "table_code.h"

static void sdef_check_readable(Relation rel, const ShapeSpec *spec);
static void sdef_check_may_read(Relation rel);

/* qsort comparator: attribute numbers, ascending */
static int
sdef_attnum_cmp(const void *a, const void *b)
{
	return (int) *(const AttrNumber *) a - (int) *(const AttrNumber *) b;
}

/* Resolves the selected column names to attnums and checks the key. */
static void
sdef_columns(const ShapeDefinition *def, Relation rel, ShapeSpec *spec)
{
	StringInfoData missing;
	StringInfoData msg;
	AttrNumber *attnums;
	Oid			pkoid;
	int			n = 0;
	const char *sdef_first_missing = NULL;

	shape_def_error_set("columns", NULL);
	initStringInfo(&missing);
	attnums = palloc(sizeof(AttrNumber) * def->ncolumns);
	for (int i = 0; i < def->ncolumns; i++)
	{
		AttrNumber	attnum;
		bool		dup = false;

		if (def->columns[i] == NULL || def->columns[i][0] == '\0')
		{
			shape_def_error_set("columns", "Invalid zero-length delimited identifier");
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_NAME),
					 errmsg("zero-length column name in a shape's column list")));
		}
		attnum = get_attnum(RelationGetRelid(rel), def->columns[i]);
		if (attnum == InvalidAttrNumber || attnum < 0)
		{
			if (missing.len == 0)
				sdef_first_missing = def->columns[i];
			appendStringInfo(&missing, "%s%s", missing.len ? ", " : "", def->columns[i]);
			continue;
		}
		for (int j = 0; j < n; j++)
			dup = dup || attnums[j] == attnum;
		if (!dup)
			attnums[n++] = attnum;
	}
	if (missing.len > 0)
	{
		initStringInfo(&msg);
		appendStringInfo(&msg, "The following columns are not found on the table: %s",
						 missing.data);
		shape_def_error_set("columns", msg.data);
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("column \"%s\" of relation \"%s\" does not exist",
						sdef_first_missing, RelationGetRelationName(rel)),
				 errdetail("Columns not found: %s.", missing.data)));
	}

	pkoid = RelationGetPrimaryKeyIndex(rel);
	if (OidIsValid(pkoid))
	{
		Relation	idx = index_open(pkoid, AccessShareLock);

		for (int k = 0; k < idx->rd_index->indnkeyatts; k++)
		{
			AttrNumber	key = idx->rd_index->indkey.values[k];
			bool		found = false;

			for (int j = 0; j < n; j++)
				found = found || attnums[j] == key;
			if (!found)
				appendStringInfo(&missing, "%s%s", missing.len ? ", " : "",
								 get_attname(RelationGetRelid(rel), key, false));
		}
		index_close(idx, AccessShareLock);
	}
	else
	{
		/*
		 * No primary key: every column is part of each row's key (and of
		 * key_change_to and key_change_from), so a list that leaves one out
		 * would hide nothing.  It must name them all.
		 */
		TupleDesc	desc = RelationGetDescr(rel);

		for (int i = 0; i < desc->natts; i++)
		{
			Form_pg_attribute att = TupleDescAttr(desc, i);
			bool		found = false;

			if (att->attisdropped)
				continue;
			for (int j = 0; j < n; j++)
				found = found || attnums[j] == att->attnum;
			if (!found)
				appendStringInfo(&missing, "%s%s", missing.len ? ", " : "",
								 NameStr(att->attname));
		}
		if (missing.len > 0)
		{
			initStringInfo(&msg);
			appendStringInfo(&msg,
							 "The table has no primary key, so its rows are keyed by all their columns: the list of columns must include every column, missing: %s",
							 missing.data);
			shape_def_error_set("columns", msg.data);
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("a shape's columns must include every column of a table without a primary key"),
					 errdetail("Missing: %s.", missing.data),
					 errhint("Each row's key is made of all its columns when the table has no primary key, so the key would send the columns left out.")));
		}
	}
	if (missing.len > 0)
	{
		initStringInfo(&msg);
		appendStringInfo(&msg,
						 "The list of columns must include all primary key columns, missing: %s",
						 missing.data);
		shape_def_error_set("columns", msg.data);
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a shape's columns must include every primary key column"),
				 errdetail("Missing: %s.", missing.data)));
	}
	qsort(attnums, n, sizeof(AttrNumber), sdef_attnum_cmp);
	spec->ncolumns = n;
	spec->columns = attnums;
}

/*
 * Validates a client's shape definition and fills `spec`.  Raises an ERROR
 * with shape_def_error_field set when the definition is invalid.  Must run
 * in a transaction.  With `nowait`, a table locked by another session
 * raises an error (with no field: the client may retry) instead of waiting:
 * the worker's main thread must never block on a user's lock.
 */
void
shape_def_validate(const ShapeDefinition *def, ShapeSpec *spec, bool nowait)
{
	const char *schema = def->schema ? def->schema : "public";
	Oid			relid;
	Relation	rel;
	Oid			not_full;
	Oid			unlogged;

	memset(spec, 0, sizeof(*spec));
	shape_def_error_set("table", NULL);
	if (def->table == NULL || def->table[0] == '\0')
	{
		shape_def_error_set("table", "can't be blank");
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a shape needs a table")));
	}
	shape_def_error_field = NULL;	/* a lock not granted is no client error */
	relid = RangeVarGetRelidExtended(makeRangeVar(pstrdup(schema), pstrdup(def->table), -1),
									 AccessShareLock,
									 RVR_MISSING_OK | (nowait ? RVR_NOWAIT : 0),
									 NULL, NULL);
	if (!OidIsValid(relid))
	{
		char		msg[512];

		snprintf(msg, sizeof(msg),
				 "Table \"%s\".\"%s\" does not exist. If the table name contains capitals or special characters you must quote it.",
				 schema, def->table);
		shape_def_error_set("table", msg);
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("relation \"%s.%s\" does not exist", schema, def->table),
				 errhint("If the table name contains capitals or special characters you must quote it.")));
	}
	rel = table_open(relid, AccessShareLock);
	sdef_check_may_read(rel);
	if ((rel->rd_rel->relkind != RELKIND_RELATION &&
		 rel->rd_rel->relkind != RELKIND_PARTITIONED_TABLE) || IsCatalogRelation(rel))
	{
		char		msg[512];

		snprintf(msg, sizeof(msg),
				 "Table \"%s\".\"%s\" cannot be synced: only user tables (ordinary or partitioned) can be",
				 schema, def->table);
		shape_def_error_set("table", msg);
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("\"%s.%s\" is not a user table", schema, def->table),
				 errdetail("Shapes can be defined on ordinary and partitioned tables only; views, foreign tables and system catalogs are not supported.")));
	}
	if (OidIsValid(unlogged = shape_table_not_logged(relid)))
	{
		char	   *quoted = shape_quoted_name(get_namespace_name(get_rel_namespace(unlogged)),
											   get_rel_name(unlogged));
		char		msg[512];

		snprintf(msg, sizeof(msg),
				 "Table %s cannot be synced: it is unlogged, so its changes are not in the WAL",
				 quoted);
		shape_def_error_set("table", msg);
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("table %s is unlogged", quoted),
				 errdetail("Shapes follow a table's changes through logical decoding, which does not see unlogged tables."),
				 errhint("Run ALTER TABLE %s SET LOGGED.", quoted)));
	}
	if (OidIsValid(not_full = shape_table_not_logged_in_full(relid)) &&
		!shape_sync_manage_replica_identity)
	{
		char	   *quoted = shape_quoted_name(get_namespace_name(get_rel_namespace(not_full)),
											   get_rel_name(not_full));
		char		msg[512];

		snprintf(msg, sizeof(msg),
				 "Table %s does not have REPLICA IDENTITY FULL, which shapes need; the database operator can run: ALTER TABLE %s REPLICA IDENTITY FULL",
				 quoted, quoted);
		shape_def_error_set("table", msg);
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("table %s does not have REPLICA IDENTITY FULL", quoted),
				 errdetail("Shapes need the old values of updated and deleted rows, which PostgreSQL logs in full only with REPLICA IDENTITY FULL."),
				 errhint("Run ALTER TABLE %s REPLICA IDENTITY FULL, or let shape_sync set it by turning on \"%s\".",
						 quoted, "shape_sync.manage_replica_identity")));
	}
	spec->relid = relid;
	spec->flags = (def->replica_full ? SHAPE_FLAG_REPLICA_FULL : 0) |
		(def->changes_only ? SHAPE_FLAG_CHANGES_ONLY : 0);
	if (def->ncolumns > 0)
		sdef_columns(def, rel, spec);
	/* before the where clause is folded: that may run a column domain's checks */
	shape_def_error_set("table", NULL);
	table_code_check(relid);
	if (def->where != NULL && def->where[0] != '\0')
		shape_where_validate(def, rel, "columns", &spec->where_sql, &spec->where_tree);
	sdef_check_readable(rel, spec);
	table_close(rel, NoLock);
	shape_def_error_field = NULL;
}

/* The columns a shape reads: its own, its key's and its where clause's. */
static int
sdef_read_columns(const ShapeSpec *spec, AttrNumber **out)
{
	ShapeRelation *rel = shape_relation_load(spec->relid, spec->ncolumns, spec->columns);
	Bitmapset  *cols = NULL;
	AttrNumber *attnums;
	int			n = 0;
	int			x = -1;

	for (int i = 0; i < rel->ncolumns; i++)
		cols = bms_add_member(cols, rel->columns[i].attnum);
	for (int i = 0; i < rel->nkeys; i++)
		cols = bms_add_member(cols, rel->keys[i]);
	if (spec->where_tree != NULL)
	{
		Bitmapset  *vars = NULL;

		pull_varattnos(stringToNode(spec->where_tree), 1, &vars);
		while ((x = bms_next_member(vars, x)) >= 0)
			cols = bms_add_member(cols, x + FirstLowInvalidHeapAttributeNumber);
		x = -1;
	}
	attnums = palloc(sizeof(AttrNumber) * Max(bms_num_members(cols), 1));
	while ((x = bms_next_member(cols, x)) >= 0)
		attnums[n++] = (AttrNumber) x;
	*out = attnums;
	return n;
}

/*
 * What a shape's rows depend on, as text: its table's name, the electric-
 * schema of its columns, its key, and the name and type of every column it
 * reads (its where clause's too).  Two equal fingerprints, taken at two
 * moments, say that a snapshot taken at the second serves the shape made at
 * the first.
 */
char *
shape_definition_fingerprint(const ShapeSpec *spec)
{
	ShapeRelation *rel = shape_relation_load(spec->relid, spec->ncolumns, spec->columns);
	AttrNumber *attnums;
	int			n = sdef_read_columns(spec, &attnums);
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfo(&buf, "%s\n%s\nkey", shape_quoted_relation(rel), shape_schema_json(rel));
	for (int i = 0; i < rel->nkeys; i++)
		appendStringInfo(&buf, " %d", rel->keys[i]);
	appendStringInfoString(&buf, "\nreads");
	for (int i = 0; i < n; i++)
	{
		Oid			typid;
		int32		typmod;
		Oid			collation;

		get_atttypetypmodcoll(spec->relid, attnums[i], &typid, &typmod, &collation);
		appendStringInfo(&buf, " %d:%s:%u:%d", attnums[i],
						 get_attname(spec->relid, attnums[i], false), typid, typmod);
	}
	return buf.data;
}

/*
 * What keeps the current user from reading the shape (shape_read_problem
 * over the columns it reads), or NULL.
 */
char *
shape_spec_read_problem(const ShapeSpec *spec, const char **field)
{
	AttrNumber *attnums;
	int			n = sdef_read_columns(spec, &attnums);

	return shape_read_problem(spec->relid, n, attnums, field);
}

/*
 * Refuses the shape, with 403, when the current user could read nothing of
 * the table: no USAGE on its schema, SELECT on neither the table nor any of
 * its columns, or row-level security that applies.  This comes before
 * anything else is checked, so that such a user learns that the table
 * exists and nothing more: not its kind, nor its replica identity, nor its
 * columns' names and types (which the errors about a column list or a where
 * clause would tell).
 */
static void
sdef_check_may_read(Relation rel)
{
	const char *field = "table";
	char	   *problem = shape_read_problem(RelationGetRelid(rel), 0, NULL, &field);

	if (problem == NULL)
		return;
	shape_def_error_set("table", problem);
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("a shape cannot be served to role \"%s\"",
					GetUserNameFromId(GetUserId(), false)),
			 errdetail("%s.", problem)));
}

/* Refuses the shape, with 403, when the current user cannot read it. */
static void
sdef_check_readable(Relation rel, const ShapeSpec *spec)
{
	AttrNumber *attnums;
	int			n = sdef_read_columns(spec, &attnums);
	const char *field = "table";
	char	   *problem = shape_read_problem(RelationGetRelid(rel), n, attnums, &field);

	if (problem == NULL)
		return;
	shape_def_error_set(field, problem);
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("a shape cannot be served to role \"%s\"",
					GetUserNameFromId(GetUserId(), false)),
			 errdetail("%s.", problem)));
}

/* The text two definitions share exactly when they are the same shape. */
char *
shape_identity(const ShapeSpec *spec)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfo(&buf, "%u|%u|", spec->relid, spec->flags);
	for (int i = 0; i < spec->ncolumns; i++)
		appendStringInfo(&buf, "%d,", spec->columns[i]);
	appendStringInfo(&buf, "|%s", spec->where_sql ? spec->where_sql : "");
	return buf.data;
}
