/*-------------------------------------------------------------------------
 *
 * table_code.c
 *		The code a table carries, and whether it may run while a shape of
 *		the table is read.
 *
 * Reading a table is not only reading rows.  Planning the snapshot or
 * subset query loads the expressions attached to the table and simplifies
 * them, which calls their functions: index expressions, partial index
 * predicates, extended statistics expressions, partition keys (of the
 * table and of every partitioned table below it) and, for constraint
 * exclusion on partitions, CHECK constraints.  A where clause compared with
 * a column of a domain type evaluates the domain's CHECK constraints, at
 * validation and in the snapshot.  And a foreign
 * table among the partitions is read through its foreign-data wrapper.
 * Anyone who may create a table, an index or a domain can put a function
 * there that calls anything; left alone, one GET of that table would run
 * it with shape_sync.role's rights.
 *
 * Two rules keep that from happening:
 *
 *	1. A function attached to the table runs only when it is trusted: its
 *	   owner is a superuser (so every built-in function, and those of
 *	   extensions a superuser installed), or a role the operator names in
 *	   shape_sync.trusted_owners.  A table with any other is refused (403)
 *	   at validation and again in every snapshot and subset transaction,
 *	   so an object added after the shape was made is caught by the next
 *	   read.  Foreign-table partitions are refused outright.
 *
 *	2. Planning runs as the table's owner (table_code_owner), in a
 *	   security-restricted operation, as PostgreSQL runs index expressions
 *	   in VACUUM, ANALYZE and CREATE INDEX.  What an object created between
 *	   the check and the plan could do is then what its owner could do
 *	   anyway.  The executor runs as shape_sync.role: its privilege checks
 *	   are the role's.
 *
 * Column defaults, generated columns, triggers and rules run on writes,
 * never on a read, so they are not looked at.  Operator classes, access
 * methods, base types' I/O functions and foreign-data wrappers can only be
 * made by superusers.
 *
 * IDENTIFICATION
 *	  src/pg/shape/table_code.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/pg_class.h"
#include "catalog/pg_constraint.h"
#include "catalog/pg_index.h"
#include "catalog/pg_partitioned_table.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_statistic_ext.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "nodes/nodeFuncs.h"
#include "utils/acl.h"
#include "utils/fmgroids.h"
#include "utils/builtins.h"
#include "utils/catcache.h"
#include "utils/regproc.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/syscache.h"
#include "utils/varlena.h"

#include "guc.h"
#include "table_code.h"

/* How deep domain, array and composite types are followed. */
#define TABLE_CODE_MAX_TYPE_DEPTH	8

typedef struct TableCodeWalk
{
	const char *object;			/* what the expression walked belongs to */
	Oid			untrusted;		/* the first untrusted function found */
	Oid			untrusted_owner;
	const char *untrusted_in;	/* and what it belongs to */
	int			depth;
	bool		too_deep;		/* a type nested past TABLE_CODE_MAX_TYPE_DEPTH */
} TableCodeWalk;

static void tc_check_type(TableCodeWalk *w, Oid typid);

/* Whether `roleid` is listed in shape_sync.trusted_owners. */
static bool
tc_listed_owner(Oid roleid)
{
	char	   *raw;
	List	   *names;
	ListCell   *lc;
	bool		listed = false;

	if (shape_sync_trusted_owners == NULL || shape_sync_trusted_owners[0] == '\0')
		return false;
	raw = pstrdup(shape_sync_trusted_owners);
	if (!SplitIdentifierString(raw, ',', &names))
		return false;			/* the check hook refuses such a value */
	foreach(lc, names)
	{
		Oid			listed_oid = get_role_oid((const char *) lfirst(lc), true);

		if (OidIsValid(listed_oid) && listed_oid == roleid)
			listed = true;
	}
	list_free(names);
	pfree(raw);
	return listed;
}

/*
 * check_functions_in_node's checker: a function may run while a table is
 * read when its owner is trusted (rule 1 in the header).  The first one
 * that may not is recorded.
 */
static bool
tc_untrusted_function(Oid funcid, void *context)
{
	TableCodeWalk *w = context;
	HeapTuple	tuple = SearchSysCache1(PROCOID, ObjectIdGetDatum(funcid));
	Oid			owner;

	if (!HeapTupleIsValid(tuple))
		return false;			/* dropped meanwhile: it runs nothing */
	owner = ((Form_pg_proc) GETSTRUCT(tuple))->proowner;
	ReleaseSysCache(tuple);
	if (superuser_arg(owner) || tc_listed_owner(owner))
		return false;
	w->untrusted = funcid;
	w->untrusted_owner = owner;
	w->untrusted_in = w->object;
	return true;
}

static bool
tc_walker(Node *node, TableCodeWalk *w)
{
	if (node == NULL || OidIsValid(w->untrusted))
		return false;
	if (check_functions_in_node(node, tc_untrusted_function, w))
		return true;
	if (IsA(node, CoerceToDomain))
		tc_check_type(w, ((CoerceToDomain *) node)->resulttype);
	return expression_tree_walker(node, tc_walker, w);
}

static void
tc_check_expression(TableCodeWalk *w, Node *expr, const char *object)
{
	const char *saved = w->object;

	w->object = object;
	(void) tc_walker(expr, w);
	w->object = saved;
}

/* The nodeToString text of a catalog column, walked; NULL is nothing. */
static void
tc_check_text_datum(TableCodeWalk *w, Datum value, bool isnull, const char *object)
{
	if (!isnull)
		tc_check_expression(w, stringToNode(TextDatumGetCString(value)), object);
}

/*
 * Each row of catalog `catid` whose `keycol` is `key` (found through
 * `indexid`): its expressions in `exprcol` and `exprcol2` (if valid) are
 * walked, named by `name`.
 */
typedef const char *(*TableCodeRowName) (HeapTuple tuple, const char *relname);

static void
tc_check_catalog_rows(TableCodeWalk *w, Oid catid, Oid indexid, AttrNumber keycol, Oid key,
					  AttrNumber exprcol, AttrNumber exprcol2, TableCodeRowName name,
					  const char *relname)
{
	Relation	catalog = table_open(catid, AccessShareLock);
	ScanKeyData scankey;
	SysScanDesc scan;
	HeapTuple	tuple;

	ScanKeyInit(&scankey, keycol, BTEqualStrategyNumber, F_OIDEQ, ObjectIdGetDatum(key));
	scan = systable_beginscan(catalog, indexid, true, NULL, 1, &scankey);
	while (HeapTupleIsValid(tuple = systable_getnext(scan)) && !OidIsValid(w->untrusted))
	{
		AttrNumber	cols[2] = {exprcol, exprcol2};

		for (int i = 0; i < 2 && AttributeNumberIsValid(cols[i]); i++)
		{
			bool		isnull;
			Datum		expr = heap_getattr(tuple, cols[i], RelationGetDescr(catalog), &isnull);

			if (!isnull)
				tc_check_text_datum(w, expr, false, name(tuple, relname));
		}
	}
	systable_endscan(scan);
	table_close(catalog, AccessShareLock);
}

static const char *
tc_index_name(HeapTuple tuple, const char *relname)
{
	return psprintf("index %s",
					quote_identifier(get_rel_name(((Form_pg_index) GETSTRUCT(tuple))->indexrelid)));
}

static const char *
tc_statistics_name(HeapTuple tuple, const char *relname)
{
	return psprintf("statistics object %s",
					quote_identifier(NameStr(((Form_pg_statistic_ext) GETSTRUCT(tuple))->stxname)));
}

static const char *
tc_constraint_name(HeapTuple tuple, const char *relname)
{
	Form_pg_constraint con = (Form_pg_constraint) GETSTRUCT(tuple);

	if (OidIsValid(con->contypid))
		return psprintf("a constraint of domain %s", format_type_be(con->contypid));
	return psprintf("constraint %s of %s", quote_identifier(NameStr(con->conname)), relname);
}

/* The types of the columns of relation `relid` (a table, or a composite type's). */
static void
tc_check_column_types(TableCodeWalk *w, Oid relid, const char *relname)
{
	CatCList   *attrs = SearchSysCacheList1(ATTNUM, ObjectIdGetDatum(relid));

	for (int i = 0; i < attrs->n_members && !OidIsValid(w->untrusted); i++)
	{
		Form_pg_attribute att = (Form_pg_attribute) GETSTRUCT(&attrs->members[i]->tuple);

		if (att->attnum <= 0 || att->attisdropped)
			continue;
		if (relname != NULL)
			w->object = psprintf("column %s of %s", quote_identifier(NameStr(att->attname)),
								 relname);
		tc_check_type(w, att->atttypid);
	}
	ReleaseSysCacheList(attrs);
}

/*
 * A column's type: a domain's CHECK constraints and the type it is over,
 * an array's element, a range's subtype, a composite's fields.  Deeper
 * than TABLE_CODE_MAX_TYPE_DEPTH is refused, not skipped.
 */
static void
tc_check_type(TableCodeWalk *w, Oid typid)
{
	HeapTuple	tuple;
	Form_pg_type typ;
	char		typtype;
	Oid			base;
	Oid			typrelid;
	Oid			element;

	if (OidIsValid(w->untrusted) || w->too_deep || !OidIsValid(typid))
		return;
	if (w->depth >= TABLE_CODE_MAX_TYPE_DEPTH)
	{
		w->too_deep = true;
		return;
	}
	tuple = SearchSysCache1(TYPEOID, ObjectIdGetDatum(typid));
	if (!HeapTupleIsValid(tuple))
		return;					/* dropped meanwhile */
	typ = (Form_pg_type) GETSTRUCT(tuple);
	typtype = typ->typtype;
	base = typ->typbasetype;
	typrelid = typ->typrelid;
	element = IsTrueArrayType(typ) ? typ->typelem : InvalidOid;
	ReleaseSysCache(tuple);

	w->depth++;
	if (typtype == TYPTYPE_DOMAIN)
	{
		/*
		 * From the catalog, not the type cache: loading a domain's
		 * constraints there simplifies them, which calls their functions.
		 */
		const char *saved = w->object;

		tc_check_catalog_rows(w, ConstraintRelationId, ConstraintTypidIndexId,
							  Anum_pg_constraint_contypid, typid, Anum_pg_constraint_conbin,
							  InvalidAttrNumber, tc_constraint_name, NULL);
		w->object = saved;
		tc_check_type(w, base);
	}
	else if (typtype == TYPTYPE_COMPOSITE && OidIsValid(typrelid))
		tc_check_column_types(w, typrelid, NULL);
	else if (typtype == TYPTYPE_RANGE)
		tc_check_type(w, get_range_subtype(typid));
	else if (typtype == TYPTYPE_MULTIRANGE)
		tc_check_type(w, get_multirange_range(typid));
	else if (OidIsValid(element))
		tc_check_type(w, element);
	w->depth--;
}

/*
 * One relation: everything the header lists that it carries itself, read
 * from the catalog alone.  No lock is taken: the worker's main thread
 * validates shapes and must never wait for a lock another session holds
 * on a partition; the catalog, read under the catalog snapshot, says what
 * the next lock of the table would show.
 */
static void
tc_check_relation(TableCodeWalk *w, Oid relid, char relkind)
{
	const char *name = quote_qualified_identifier(get_namespace_name(get_rel_namespace(relid)),
												  get_rel_name(relid));

	tc_check_catalog_rows(w, IndexRelationId, IndexIndrelidIndexId, Anum_pg_index_indrelid,
						  relid, Anum_pg_index_indexprs, Anum_pg_index_indpred, tc_index_name, name);
	tc_check_catalog_rows(w, StatisticExtRelationId, StatisticExtRelidIndexId,
						  Anum_pg_statistic_ext_stxrelid, relid, Anum_pg_statistic_ext_stxexprs,
						  InvalidAttrNumber, tc_statistics_name, name);
	tc_check_catalog_rows(w, ConstraintRelationId, ConstraintRelidTypidNameIndexId,
						  Anum_pg_constraint_conrelid, relid, Anum_pg_constraint_conbin,
						  InvalidAttrNumber, tc_constraint_name, name);
	if (relkind == RELKIND_PARTITIONED_TABLE && !OidIsValid(w->untrusted))
	{
		HeapTuple	tuple = SearchSysCache1(PARTRELID, ObjectIdGetDatum(relid));

		if (HeapTupleIsValid(tuple))
		{
			bool		isnull;
			Datum		exprs = SysCacheGetAttr(PARTRELID, tuple,
												Anum_pg_partitioned_table_partexprs, &isnull);

			tc_check_text_datum(w, exprs, isnull, psprintf("the partition key of %s", name));
			ReleaseSysCache(tuple);
		}
	}
	if (!OidIsValid(w->untrusted))
		tc_check_column_types(w, relid, name);
}

char *
table_code_problem(Oid relid)
{
	TableCodeWalk w;
	List	   *rels;
	ListCell   *lc;

	memset(&w, 0, sizeof(w));
	/* a partitioned table's partitions are read, and planned, with it */
	rels = get_rel_relkind(relid) == RELKIND_PARTITIONED_TABLE ?
		find_all_inheritors(relid, NoLock, NULL) : list_make1_oid(relid);
	foreach(lc, rels)
	{
		Oid			rel = lfirst_oid(lc);
		char		relkind = get_rel_relkind(rel);

		if (relkind == RELKIND_FOREIGN_TABLE)
			return psprintf("its partition %s is a foreign table, read through a foreign-data wrapper",
							quote_identifier(get_rel_name(rel)));
		if (relkind == '\0')
			continue;			/* detached and dropped meanwhile */
		tc_check_relation(&w, rel, relkind);
		if (OidIsValid(w.untrusted))
		{
			const char *owner = GetUserNameFromId(w.untrusted_owner, true);

			return psprintf("%s calls function %s of role \"%s\", which is not trusted to run while the table is read",
							w.untrusted_in, format_procedure(w.untrusted),
							owner ? owner : "?");
		}
		if (w.too_deep)
			return psprintf("a column type of %s nests domains, arrays, ranges or composites more than %d deep",
							quote_identifier(get_rel_name(rel)), TABLE_CODE_MAX_TYPE_DEPTH);
	}
	return NULL;
}

void
table_code_check(Oid relid)
{
	char	   *problem = table_code_problem(relid);

	if (problem != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("table %s cannot be served: it carries code of a role that is not trusted to run while it is read",
						quote_qualified_identifier(get_namespace_name(get_rel_namespace(relid)),
												   get_rel_name(relid))),
				 errdetail("%s.", problem),
				 errhint("A superuser may list the function's owner in \"shape_sync.trusted_owners\"; shape_sync.validate_shape() shows this detail.")));
}

Oid
table_code_owner(Oid relid)
{
	HeapTuple	tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	Oid			owner;

	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for relation %u", relid);
	owner = ((Form_pg_class) GETSTRUCT(tuple))->relowner;
	ReleaseSysCache(tuple);
	return owner;
}
