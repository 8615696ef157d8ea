/*-------------------------------------------------------------------------
 *
 * shape_role.c
 *		The role whose privileges shapes are read with (shape_sync.role).
 *
 * The worker and its snapshot workers connect as the bootstrap superuser:
 * decoding and the replication slot need it, and a background worker of
 * PostgreSQL 15 cannot connect as a NOLOGIN role such as the default,
 * pg_read_all_data.  Everything a client can influence runs as the
 * configured role instead: validating a definition, evaluating its where
 * clause on decoded rows, encoding its values and running its snapshot.
 * The switch is SetUserIdAndSecContext with SECURITY_LOCAL_USERID_CHANGE
 * (no SET ROLE back to the superuser) and SECURITY_RESTRICTED_OPERATION
 * (no temporary objects, no session state), the way PostgreSQL runs
 * maintenance commands as a table's owner.  PostgreSQL's own privilege
 * checks then decide what can be read: table and column privileges,
 * schema USAGE, function EXECUTE.
 *
 * A superuser is refused as shape_sync.role: it would read every row and
 * ignore row-level security.  A role with BYPASSRLS, or the table's owner
 * when the table does not FORCE ROW LEVEL SECURITY, is the operator's way
 * to serve, whole, tables whose row-level security would otherwise refuse
 * them (shape_row_security_applies).  That is PostgreSQL's rule, which
 * check_enable_rls() applies for the current user; but its answer for an
 * owner also depends on the security context (a foreign key check ignores
 * FORCE), and that for the others on row_security, whose "off" makes it
 * raise an error instead.  The rule here depends on the role's attributes
 * and memberships and the table's flags alone, all of which the stream
 * watches (shape_stream.c), so a verdict changes only with the catalog.
 *
 * What the current user could not read of a table with SELECT, as a
 * sentence for the client (shape_read_problem): USAGE on the schema,
 * SELECT on the table or on each column read, and no row-level security
 * that applies.  Validation asks it (shape_def.c, and shape_where_check.c
 * for a column the where clause names), and so do a subset (subset_query.c) and
 * the stream, which checks a shape's privileges again when the catalog
 * changes (shape_stream_change.c, shape_stream_maintain.c).
 *
 * IDENTIFICATION
 *	  src/pg/shape/shape_role.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/transam.h"
#include "catalog/pg_class.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"

#include "guc.h"
#include "shape_relation.h"
#include "shape_role.h"

char *
shape_role_problem(void)
{
	const char *name = shape_sync_role ? shape_sync_role : "";
	Oid			role = name[0] ? get_role_oid(name, true) : InvalidOid;

	if (!OidIsValid(role))
		return psprintf("the role \"%s\" set by \"%s\" does not exist", name,
						"shape_sync.role");
	if (superuser_arg(role))
		return psprintf("the role \"%s\" set by \"%s\" is a superuser", name,
						"shape_sync.role");
	return NULL;
}

Oid
shape_role_usable(void)
{
	return shape_role_problem() == NULL ? get_role_oid(shape_sync_role, false) : InvalidOid;
}

Oid
shape_role_resolve(void)
{
	char	   *problem = shape_role_problem();

	if (problem != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_CONFIG_FILE_ERROR),
				 errmsg("shape_sync cannot serve shapes: %s", problem),
				 errhint("Set \"%s\" to a role without SUPERUSER that may SELECT the tables to serve, such as pg_read_all_data.",
						 "shape_sync.role")));
	return get_role_oid(shape_sync_role, false);
}

/*
 * Row-level security applies to the role when the table enables it and the
 * role has no BYPASSRLS and does not own the table (as a member of its
 * owner, too), or owns it but the table FORCEs it.  A table that is gone
 * has none: callers find it gone otherwise.
 */
bool
shape_row_security_applies(Oid relid, Oid role)
{
	HeapTuple	tuple;
	bool		enabled;
	bool		forced;

	if (relid < (Oid) FirstNormalObjectId)
		return false;			/* as check_enable_rls: catalogs have none */
	tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	if (!HeapTupleIsValid(tuple))
		return false;
	enabled = ((Form_pg_class) GETSTRUCT(tuple))->relrowsecurity;
	forced = ((Form_pg_class) GETSTRUCT(tuple))->relforcerowsecurity;
	ReleaseSysCache(tuple);
	if (!enabled || has_bypassrls_privilege(role))
		return false;
	return forced || !pg_class_ownercheck(relid, role);
}

/*
 * Whether the current user could read these columns of the relation with
 * SELECT: USAGE on its schema, SELECT on the table or on each column, and
 * no row-level security that applies to it.  NULL when it could; else the
 * reason, as a sentence for the client, with *field the request parameter
 * it concerns.
 */
char *
shape_read_problem(Oid relid, int nattnums, const AttrNumber *attnums, const char **field)
{
	Oid			user = GetUserId();
	char	   *role = GetUserNameFromId(user, true);
	Oid			nsp = get_rel_namespace(relid);
	char	   *nspname = OidIsValid(nsp) ? get_namespace_name(nsp) : NULL;
	char	   *table = get_rel_name(relid);
	char	   *relname;

	*field = "table";
	/* decoding reads the catalog as of a commit: the table may be gone by then */
	if (role == NULL)
		return pstrdup("its role no longer exists");
	if (nspname == NULL || table == NULL)
		return pstrdup("its table no longer exists");
	relname = shape_quoted_name(nspname, table);
	if (pg_namespace_aclcheck(nsp, user, ACL_USAGE) != ACLCHECK_OK)
		return psprintf("Role \"%s\" has no USAGE privilege on the schema of table %s",
						role, relname);
	if (pg_class_aclcheck(relid, user, ACL_SELECT) != ACLCHECK_OK)
	{
		StringInfoData missing;

		if (pg_attribute_aclcheck_all(relid, user, ACL_SELECT, ACLMASK_ANY) != ACLCHECK_OK)
			return psprintf("Role \"%s\" may not SELECT from table %s", role, relname);
		initStringInfo(&missing);
		for (int i = 0; i < nattnums; i++)
		{
			char	   *name = get_attname(relid, attnums[i], true);
			bool		gone = false;
			AclResult	acl = pg_attribute_aclcheck_ext(relid, attnums[i], user, ACL_SELECT, &gone);

			if (name == NULL || gone)
				return pstrdup("a column it reads no longer exists");
			if (acl != ACLCHECK_OK)
				appendStringInfo(&missing, "%s%s", missing.len ? ", " : "",
								 quote_identifier(name));
		}
		if (missing.len > 0)
		{
			*field = "columns";
			return psprintf("Role \"%s\" may not SELECT these columns of table %s, which the shape reads: %s",
							role, relname, missing.data);
		}
	}
	if (shape_row_security_applies(relid, user))
		return psprintf("Table %s has row-level security that applies to role \"%s\"; a shape is shared by all its clients, so such a table is not served",
						relname, role);
	return NULL;
}

void
shape_role_become(Oid role, ShapeRoleSaved *saved)
{
	GetUserIdAndSecContext(&saved->user, &saved->context);
	SetUserIdAndSecContext(role, saved->context | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
}

void
shape_role_restore(const ShapeRoleSaved *saved)
{
	SetUserIdAndSecContext(saved->user, saved->context);
}
