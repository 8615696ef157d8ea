/*-------------------------------------------------------------------------
 *
 * shape_role.h
 *		The role whose privileges shapes are read with (shape_sync.role).
 *
 * IDENTIFICATION
 *	  src/pg/shape/shape_role.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SHAPE_ROLE_H
#define SHAPE_ROLE_H

#include "postgres.h"

#include "access/attnum.h"

/* What shape_role_become replaced, for shape_role_restore. */
typedef struct ShapeRoleSaved
{
	Oid			user;
	int			context;
} ShapeRoleSaved;

/*
 * The role named by shape_sync.role.  In a transaction.  Raises an ERROR
 * with ERRCODE_CONFIG_FILE_ERROR when it does not exist or is a superuser.
 */
extern Oid	shape_role_resolve(void);

/* Why shape_sync.role cannot be used, or NULL; in a transaction. */
extern char *shape_role_problem(void);

/* The role shape_sync.role names, or InvalidOid when it cannot be used. */
extern Oid	shape_role_usable(void);

/*
 * Whether the row-level security of the table applies to `role`, from the
 * catalog alone (see shape_role.c); in a transaction.
 */
extern bool shape_row_security_applies(Oid relid, Oid role);

/*
 * What keeps the current user from reading these columns of the table with
 * SELECT, as a sentence for the client, or NULL; *field is the request
 * field it concerns.  In a transaction.
 */
extern char *shape_read_problem(Oid relid, int nattnums, const AttrNumber *attnums,
								const char **field);

/* Acts as `role`, in a security-restricted operation, until restored. */
extern void shape_role_become(Oid role, ShapeRoleSaved *saved);
extern void shape_role_restore(const ShapeRoleSaved *saved);

#endif							/* SHAPE_ROLE_H */
