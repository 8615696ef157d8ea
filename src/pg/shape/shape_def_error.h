/*-------------------------------------------------------------------------
 *
 * shape_def_error.h
 *		The request field a shape definition's error belongs to, and the
 *		sentence Electric's clients expect for it.
 *
 * IDENTIFICATION
 *	  src/pg/shape/shape_def_error.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SHAPE_DEF_ERROR_H
#define SHAPE_DEF_ERROR_H

#include "postgres.h"

/*
 * While validating, the request field a failure belongs to, and the
 * message Electric clients expect when it differs from PostgreSQL's.
 */
extern const char *shape_def_error_field;
extern char shape_def_http_message[512];

extern void shape_def_error_set(const char *field, const char *http_message);
extern char *shape_def_error_message(const char *field, const ErrorData *edata);

#endif							/* SHAPE_DEF_ERROR_H */
