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
 * IDENTIFICATION
 *	  src/pg/shape_role.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/transam.h"
#include "catalog/pg_class.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/syscache.h"

#include "guc.h"
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
