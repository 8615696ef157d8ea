/*-------------------------------------------------------------------------
 *
 * table_code.h
 *		The code a table carries, and whether it may run while a shape of
 *		the table is read (see table_code.c).
 *
 * IDENTIFICATION
 *	  src/pg/shape/table_code.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef TABLE_CODE_H
#define TABLE_CODE_H

#include "postgres.h"

/* Why the table's attached code may not run while it is read, or NULL. */
extern char *table_code_problem(Oid relid);

/* table_code_problem as an ERROR (ERRCODE_INSUFFICIENT_PRIVILEGE). */
extern void table_code_check(Oid relid);

/* The table's owner, whom its planning runs as (snapshot_query.c, shape_role_become). */
extern Oid	table_code_owner(Oid relid);

#endif							/* TABLE_CODE_H */
