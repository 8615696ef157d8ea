/*-------------------------------------------------------------------------
 *
 * resolved_shapes.h
 *		What a connection's last request resolved to, and what each
 *		definition last resolved to, so that the next request for the same
 *		shape is served without the main thread.
 *
 * IDENTIFICATION
 *	  src/net/resolved_shapes.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef RESOLVED_SHAPES_H
#define RESOLVED_SHAPES_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "request_queue.h"
#include "shape_table.h"

/* A resolution kept: a connection's own (its thread's), or a bucket's (under its lock). */
typedef struct ResolvedShape
{
	char	   *key;			/* the definition as the client spelled it */
	size_t		key_len;
	uint32_t	slot;
	uint32_t	generation;
	uint64_t	catalog_epoch;	/* of the resolution */
	char		handle[SHAPE_HANDLE_LEN];
} ResolvedShape;

/* The electric-schema of each shape slot's current generation. */
typedef struct SchemaEntry
{
	pthread_mutex_t lock;
	uint32_t	generation;
	char	   *json;			/* malloc'd; NULL: not known */
} SchemaEntry;

typedef struct ResolvedSchemas
{
	uint32_t	nslots;
	SchemaEntry *entries;
} ResolvedSchemas;

extern int	resolved_schemas_init(ResolvedSchemas *schemas, uint32_t nslots);
extern void resolved_schemas_destroy(ResolvedSchemas *schemas);
extern void resolved_schemas_put(ResolvedSchemas *schemas, uint32_t slot, uint32_t generation,
								 const char *json);
extern char *resolved_schemas_copy(ResolvedSchemas *schemas, uint32_t slot, uint32_t generation);

/* The last resolution of each definition, for every connection: a bucket per hash. */
typedef struct SharedResolution
{
	pthread_mutex_t lock;
	ResolvedShape *cached;		/* NULL: none */
} SharedResolution;

typedef struct ResolvedShared
{
	uint32_t	nbuckets;
	SharedResolution *buckets;
} ResolvedShared;

extern int	resolved_shared_init(ResolvedShared *shared, uint32_t nbuckets);
extern void resolved_shared_destroy(ResolvedShared *shared);
extern bool resolved_shared_find(ResolvedShared *shared, const char *key, size_t key_len,
								 const char *handle, uint64_t epoch, ResolvedShape *found);
extern void resolved_shared_put(ResolvedShared *shared, const char *key, size_t key_len,
								const ShapeResolution *res, uint64_t epoch);
extern void resolved_shared_forget(ResolvedShared *shared, const char *key, size_t key_len,
								   const ResolvedShape *gone);

/*
 * The definition's key: every field the client sent that the main thread
 * resolves (schema, table, where, params, columns, replica, log), in a
 * form where different definitions never give the same bytes.  malloc'd.
 */
extern char *resolved_shape_key(const ShapeDefinition *def, size_t *len);

/*
 * Whether `cached` answers a request with this key and handle, the catalog
 * epoch being `epoch` now.
 */
extern bool resolved_shape_matches(const ResolvedShape *cached, const char *key, size_t key_len,
								   const char *handle, uint64_t epoch);

/* Remembers a resolution (replacing the previous one); takes `key`. */
extern void resolved_shape_store(ResolvedShape **cached, char *key, size_t key_len,
								 const ShapeResolution *res);
extern void resolved_shape_free(ResolvedShape **cached);

#endif							/* RESOLVED_SHAPES_H */
