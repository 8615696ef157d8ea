/*-------------------------------------------------------------------------
 *
 * table_code.h
 *		The code a table carries, and whether it may run while a shape of
 *		the table is read (see table_code.c).
 *
 * IDENTIFICATION
 *	  src/pg/table_code.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef TABLE_CODE_H
#define TABLE_CODE_H

#include "postgres.h"

/* What table_code_plan_as_owner replaced, for table_code_restore. */
typedef struct TableCodeSaved
{
	Oid			user;
	int			context;
} TableCodeSaved;

/* Why the table's attached code may not run while it is read, or NULL. */
extern char *table_code_problem(Oid relid);

/* table_code_problem as an ERROR (ERRCODE_INSUFFICIENT_PRIVILEGE). */
extern void table_code_check(Oid relid);

/* Acts as the table's owner, in a security-restricted operation, to plan. */
extern void table_code_plan_as_owner(Oid relid, TableCodeSaved *saved);
extern void table_code_restore(const TableCodeSaved *saved);

#endif							/* TABLE_CODE_H */
