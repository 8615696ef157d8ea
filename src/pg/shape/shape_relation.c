/*-------------------------------------------------------------------------
 *
 * shape_relation.c
 *		A shape's table and columns as the catalog describes them.
 *
 * A ShapeRelation is what the snapshot, the stream, the encoder and the
 * registry know of a shape's table: its schema and name, the selected
 * columns (all of them when none are selected) with their types, and its
 * key.  The key is the primary key, or every column, ordered by name, when
 * the table has none.  Describing a relation takes no lock of its own: the
 * caller holds one on it (which keeps its primary key's index), or
 * decodes, where the catalog is read as of the change.
 *
 * What is derived from that description lives here too: the relation's
 * name quoted the PostgreSQL way, always, which starts every row's key
 * and names the table in messages; whether the table, or any partition
 * of it, does not log old rows in full (REPLICA IDENTITY FULL), which
 * shapes need; and the electric-schema header, which tells a client each
 * selected column's type (pg_type's unqualified name), array dimensions,
 * position in the primary key (when the table has one), NOT NULL, and type
 * modifiers (length, precision, scale) as Electric reports them.
 *
 * IDENTIFICATION
 *	  src/pg/shape/shape_relation.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/pg_class.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_type.h"
#include "lib/stringinfo.h"
#include "utils/json.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/syscache.h"

#include "shape_relation.h"

/* qsort comparator: columns by name */
static int
srel_column_name_cmp(const void *a, const void *b)
{
	const ShapeColumn *ca = a;
	const ShapeColumn *cb = b;

	return strcmp(ca->name, cb->name);
}

/* shape_relation_describe of a relation that this opens and locks for it */
ShapeRelation *
shape_relation_load(Oid relid, int ncolumns, const AttrNumber *columns)
{
	Relation	rel = table_open(relid, AccessShareLock);
	ShapeRelation *sr = shape_relation_describe(rel, ncolumns, columns);

	table_close(rel, AccessShareLock);
	return sr;
}

/*
 * Describes the relation and the selected columns (all when ncolumns is 0).
 * The key is the primary key, or every column by name when there is none.
 * Takes no lock: the caller holds one on the relation (which keeps its
 * primary key's index), or decodes, where the catalog is read as of the
 * change.
 */
ShapeRelation *
shape_relation_describe(Relation rel, int ncolumns, const AttrNumber *columns)
{
	ShapeRelation *sr = palloc0(sizeof(ShapeRelation));
	Oid			relid = RelationGetRelid(rel);
	TupleDesc	desc = RelationGetDescr(rel);
	Oid			pkoid = RelationGetPrimaryKeyIndex(rel);
	int			n = 0;

	sr->relid = relid;
	sr->natts = desc->natts;
	sr->schema = get_namespace_name(RelationGetNamespace(rel));
	sr->table = pstrdup(RelationGetRelationName(rel));
	sr->columns = palloc0(sizeof(ShapeColumn) * Max(desc->natts, 1));

	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);
		ShapeColumn *col;
		bool		selected = ncolumns == 0;

		if (att->attisdropped)
			continue;
		for (int j = 0; j < ncolumns && !selected; j++)
			selected = columns[j] == att->attnum;
		if (!selected)
			continue;
		col = &sr->columns[n++];
		col->attnum = att->attnum;
		col->name = pstrdup(NameStr(att->attname));
		col->typid = att->atttypid;
		col->typmod = att->atttypmod;
		col->ndims = att->attndims;
		if (col->ndims == 0 && OidIsValid(get_element_type(att->atttypid)))
			col->ndims = 1;
		col->not_null = att->attnotnull;
		col->key_index = -1;
	}
	sr->ncolumns = n;

	if (OidIsValid(pkoid))
	{
		Relation	idx = RelationIdGetRelation(pkoid);
		int			nkeys;

		if (!RelationIsValid(idx))
			elog(ERROR, "could not open the primary key index %u", pkoid);
		nkeys = idx->rd_index->indnkeyatts;

		sr->has_pk = true;
		sr->nkeys = nkeys;
		sr->keys = palloc(sizeof(AttrNumber) * nkeys);
		for (int k = 0; k < nkeys; k++)
		{
			sr->keys[k] = idx->rd_index->indkey.values[k];
			for (int c = 0; c < sr->ncolumns; c++)
				if (sr->columns[c].attnum == sr->keys[k])
					sr->columns[c].key_index = k;
		}
		RelationClose(idx);
	}
	else
	{
		/* no primary key: every column, ordered by name, is the key */
		ShapeColumn *all = palloc(sizeof(ShapeColumn) * Max(desc->natts, 1));
		int			nall = 0;

		for (int i = 0; i < desc->natts; i++)
		{
			Form_pg_attribute att = TupleDescAttr(desc, i);

			if (att->attisdropped)
				continue;
			all[nall].attnum = att->attnum;
			all[nall].name = NameStr(att->attname);
			nall++;
		}
		qsort(all, nall, sizeof(ShapeColumn), srel_column_name_cmp);
		sr->nkeys = nall;
		sr->keys = palloc(sizeof(AttrNumber) * Max(nall, 1));
		for (int k = 0; k < nall; k++)
		{
			sr->keys[k] = all[k].attnum;
			for (int c = 0; c < sr->ncolumns; c++)
				if (sr->columns[c].attnum == sr->keys[k])
					sr->columns[c].key_index = k;
		}
		pfree(all);
	}
	return sr;
}

/*
 * A table that stores rows of `relid` (the table itself, or one of its
 * partitions) and does not log old rows in full, or InvalidOid when every
 * one does.  The replica identity of a partitioned table itself does not
 * matter: each partition logs its own rows.
 */
Oid
shape_table_not_logged_in_full(Oid relid)
{
	List	   *tables;
	ListCell   *lc;

	if (get_rel_relkind(relid) != RELKIND_PARTITIONED_TABLE)
		tables = list_make1_oid(relid);
	else
		tables = find_all_inheritors(relid, NoLock, NULL);
	foreach(lc, tables)
	{
		HeapTuple	tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(lfirst_oid(lc)));
		Form_pg_class form;
		bool		full;

		if (!HeapTupleIsValid(tuple))
			continue;			/* dropped meanwhile */
		form = (Form_pg_class) GETSTRUCT(tuple);
		full = form->relkind == RELKIND_PARTITIONED_TABLE ||
			form->relreplident == REPLICA_IDENTITY_FULL;
		ReleaseSysCache(tuple);
		if (!full)
			return lfirst_oid(lc);
	}
	return InvalidOid;
}

/*
 * A table that stores rows of `relid` (the table itself, or one of its
 * partitions at any level) whose changes are not in the WAL (unlogged), or
 * InvalidOid when every one's are: logical decoding never sees the others'.
 */
Oid
shape_table_not_logged(Oid relid)
{
	List	   *tables = get_rel_relkind(relid) == RELKIND_PARTITIONED_TABLE ?
		find_all_inheritors(relid, NoLock, NULL) : list_make1_oid(relid);
	ListCell   *lc;

	foreach(lc, tables)
	{
		HeapTuple	tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(lfirst_oid(lc)));
		bool		logged;

		if (!HeapTupleIsValid(tuple))
			continue;			/* dropped meanwhile */
		logged = ((Form_pg_class) GETSTRUCT(tuple))->relpersistence == RELPERSISTENCE_PERMANENT;
		ReleaseSysCache(tuple);
		if (!logged)
			return lfirst_oid(lc);
	}
	return InvalidOid;
}

/* "schema"."table", each part quoted the PostgreSQL way, always. */
char *
shape_quoted_name(const char *schema, const char *table)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfoChar(&buf, '"');
	for (const char *p = schema; *p; p++)
	{
		if (*p == '"')
			appendStringInfoChar(&buf, '"');
		appendStringInfoChar(&buf, *p);
	}
	appendStringInfoString(&buf, "\".\"");
	for (const char *p = table; *p; p++)
	{
		if (*p == '"')
			appendStringInfoChar(&buf, '"');
		appendStringInfoChar(&buf, *p);
	}
	appendStringInfoChar(&buf, '"');
	return buf.data;
}

char *
shape_quoted_relation(const ShapeRelation *rel)
{
	return shape_quoted_name(rel->schema, rel->table);
}

/* ----------------------------------------------------- electric-schema */

static void
srel_schema_modifiers(StringInfo buf, const ShapeColumn *col)
{
	Oid			base = col->ndims > 0 ? get_element_type(col->typid) : col->typid;
	int32		typmod = col->typmod;

	if (!OidIsValid(base))
		base = col->typid;
	if (typmod < 0)
		return;
	switch (base)
	{
		case VARCHAROID:
		case TEXTOID:
			appendStringInfo(buf, ",\"max_length\":%d", typmod - VARHDRSZ);
			break;
		case BPCHAROID:
			appendStringInfo(buf, ",\"length\":%d", typmod - VARHDRSZ);
			break;
		case BITOID:
		case VARBITOID:
			appendStringInfo(buf, ",\"length\":%d", typmod);
			break;
		case TIMEOID:
		case TIMETZOID:
		case TIMESTAMPOID:
		case TIMESTAMPTZOID:
		case INTERVALOID:
			appendStringInfo(buf, ",\"precision\":%d", typmod & 0xFFFF);
			break;
		case NUMERICOID:
			appendStringInfo(buf, ",\"precision\":%d,\"scale\":%d",
							 ((typmod - VARHDRSZ) >> 16) & 0xFFFF,
							 ((((typmod - VARHDRSZ) & 0x7FF) ^ 1024) - 1024));
			break;
		default:
			appendStringInfo(buf, ",\"type_mod\":%d", typmod);
	}
}

/* pg_type.typname, unqualified, as Electric reports types. */
static const char *
srel_type_name(Oid type)
{
	HeapTuple	tup = SearchSysCache1(TYPEOID, ObjectIdGetDatum(type));
	char	   *name;

	if (!HeapTupleIsValid(tup))
		return "unknown";
	name = pstrdup(NameStr(((Form_pg_type) GETSTRUCT(tup))->typname));
	ReleaseSysCache(tup);
	return name;
}

/* The electric-schema header: each selected column's type and flags. */
char *
shape_schema_json(const ShapeRelation *rel)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfoChar(&buf, '{');
	for (int i = 0; i < rel->ncolumns; i++)
	{
		const ShapeColumn *col = &rel->columns[i];
		Oid			type = col->typid;

		if (col->ndims > 0 && OidIsValid(get_element_type(type)))
			type = get_element_type(type);
		if (i > 0)
			appendStringInfoChar(&buf, ',');
		escape_json(&buf, col->name);
		appendStringInfoString(&buf, ":{\"type\":");
		escape_json(&buf, srel_type_name(type));
		if (col->ndims > 0)
			appendStringInfo(&buf, ",\"dims\":%d", col->ndims);
		if (col->key_index >= 0 && rel->has_pk)
			appendStringInfo(&buf, ",\"pk_index\":%d", col->key_index);
		if (col->not_null)
			appendStringInfoString(&buf, ",\"not_null\":true");
		srel_schema_modifiers(&buf, col);
		appendStringInfoChar(&buf, '}');
	}
	appendStringInfoChar(&buf, '}');
	return buf.data;
}
