/*-------------------------------------------------------------------------
 *
 * shape_request.h
 *		What an HTTP thread asks of the main thread, and the answer.
 *
 * The hand-off between the floors: an HTTP thread writes a ShapeRequest
 * (a shape definition, a DELETE, or a subset query) and queues it
 * (request_queue.h); the main thread writes its ShapeResolution and calls
 * `done`.  Strings are malloc'd so that either side may free them without
 * PostgreSQL's memory contexts.  A refused request carries the reason and
 * its facts (refusal.h), never an HTTP answer: the HTTP side renders it.
 *
 * IDENTIFICATION
 *	  src/contract/shape_request.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SHAPE_REQUEST_H
#define SHAPE_REQUEST_H

#include <stdbool.h>
#include <stdint.h>

#include "refusal.h"
#include "shape_table.h"

/* A shape definition as the client wrote it; strings are malloc'd. */
typedef struct ShapeDefinition
{
	char	   *schema;			/* unquoted; NULL means "public" */
	char	   *table;			/* unquoted */
	char	   *where;			/* NULL when absent */
	char	  **params;			/* params[i] binds $(i+1); entries may be NULL */
	int			nparams;
	char	  **columns;		/* unquoted names; NULL means all columns */
	int			ncolumns;
	bool		replica_full;
	bool		changes_only;
} ShapeDefinition;

typedef enum ShapeResolveStatus
{
	SHAPE_RESOLVE_OK = 0,
	SHAPE_RESOLVE_REFUSED,		/* `refusal` says why */
	SHAPE_RESOLVE_UNAVAILABLE,	/* never resolved: the queue refused it or
								 * closed (set by the HTTP side) */
	SHAPE_RESOLVE_DELETED		/* DELETE: the shape is gone */
} ShapeResolveStatus;

/* The main thread's answer. */
typedef struct ShapeResolution
{
	ShapeResolveStatus status;
	Refusal		refusal;		/* SHAPE_RESOLVE_REFUSED: reason and facts,
								 * malloc'd */
	bool		retry;			/* a lock was busy: the main thread tries again */
	char	   *schema_json;	/* malloc'd electric-schema, on success */
	bool		reusable;		/* on success: made under the current catalog,
								 * so the connection may keep it */
	uint64_t	catalog_epoch;	/* ShapeTable.catalog_epoch before it was made */
	uint32_t	slot;
	uint32_t	generation;
	char		handle[SHAPE_HANDLE_LEN];
} ShapeResolution;

/*
 * A subset query (GET with subset__* parameters, or POST /v1/shape): its
 * inputs as the client sent them, checked by the snapshot worker that runs
 * it (subset_query.c).  Strings are malloc'd, NULL when absent.
 */
typedef struct SubsetRequest
{
	char	   *where;
	char	   *params;			/* a JSON object, as text */
	char	   *limit;
	char	   *offset;
	char	   *order_by;
	char	   *body;			/* POST: the JSON body, which holds the above
								 * (checked on the HTTP side: no NUL, UTF-8) */
	char	  **queryable;		/* queryable_columns, unquoted; NULL: any */
	int			nqueryable;
	char	   *handle;			/* the handle the client sent, or NULL */
	bool		offset_now;		/* offset=now: the answer's offset is the log's end */
	int			cell;			/* its SubsetResults cell, held by the request */
	uint32_t	ticket;			/* ... and which use of it */
	char		log_end[48];	/* main thread: the log's end before the query */
	char	   *move_in_where;	/* main thread: a move-in's filter, no client's */
	char	   *move_in_handle; /* ... and its shape's handle */
} SubsetRequest;

typedef struct ShapeRequest ShapeRequest;

struct ShapeRequest
{
	ShapeRequest *next;			/* queue link, owned by the queue */
	ShapeDefinition def;		/* written by the HTTP thread before push */
	bool		delete_shape;	/* DELETE /v1/shape rather than GET */
	bool		has_definition; /* def names a table (DELETE may give a handle only) */
	char	   *handle;			/* DELETE: the handle given, or NULL */
	SubsetRequest *subset;		/* a subset query, or NULL */
	uint64_t	client_key;		/* who asks: its address (IPv6: its /64),
								 * hashed, or the one X-Forwarded-For names
								 * behind a trusted proxy (client_address.c);
								 * 0 when unknown */
	bool		holds_initial;	/* admitted as initial (shape_serve.c) */
	bool		successor_only; /* asked again only for the handle a 409
								 * names (shape_serve.c): answered at once,
								 * during a replay too, or not at all */
	int64_t		first_try_ms;	/* main thread: when it first tried; 0 before */
	ShapeResolution result;		/* written by the main thread before done() */
	void		(*done) (ShapeRequest *req);	/* called once, by the resolver */
	void	   *owner;			/* the HTTP side's context */
};

extern void shape_definition_free(ShapeDefinition *def);
extern void shape_resolution_free(ShapeResolution *res);
extern void subset_request_free(SubsetRequest *subset);


#endif							/* SHAPE_REQUEST_H */
