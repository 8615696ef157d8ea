/*-------------------------------------------------------------------------
 *
 * shape_request.c
 *		Freeing the malloc'd parts of a shape request and its answer.
 *
 * IDENTIFICATION
 *	  src/contract/shape_request.c
 *
 *-------------------------------------------------------------------------
 */
#include "shape_request.h"

#include <stdlib.h>

#ifdef POSTGRES_H
#error "shape_request.c is shared with HTTP threads and must not include postgres.h"
#endif

void
shape_definition_free(ShapeDefinition *def)
{
	free(def->schema);
	free(def->table);
	free(def->where);
	for (int i = 0; i < def->nparams; i++)
		free(def->params[i]);
	free(def->params);
	for (int i = 0; i < def->ncolumns; i++)
		free(def->columns[i]);
	free(def->columns);
	def->schema = def->table = def->where = NULL;
	def->params = def->columns = NULL;
	def->nparams = def->ncolumns = 0;
}

void
shape_resolution_free(ShapeResolution *res)
{
	refusal_free(&res->refusal);
	free(res->schema_json);
	res->schema_json = NULL;
}

/* Frees the inputs; the cell is the connection's to let go of (shape_conn_free). */
void
subset_request_free(SubsetRequest *subset)
{
	if (subset == NULL)
		return;
	free(subset->where);
	free(subset->params);
	free(subset->limit);
	free(subset->offset);
	free(subset->order_by);
	free(subset->body);
	for (int i = 0; i < subset->nqueryable; i++)
		free(subset->queryable[i]);
	free(subset->queryable);
	free(subset->handle);
	free(subset);
}
