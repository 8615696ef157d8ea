/*-------------------------------------------------------------------------
 *
 * resolved_shapes.c
 *		What a connection's last request resolved to, and what each
 *		definition last resolved to, so that the next request for the same
 *		shape is served without the main thread.
 *
 * This file runs on libmicrohttpd threads and must not call into
 * PostgreSQL.
 *
 * Resolving a definition (table, where, params, columns) takes the catalog,
 * so only the main thread can do it, in a subtransaction, with a hand-off
 * and a resume each way.  A client that follows a shape asks for the same
 * definition again and again on its keep-alive connection: catch-up
 * requests, then a live request after every change.  So each connection
 * keeps its last successful resolution (ResolvedShape: the definition as
 * the client spelled it, byte for byte, and the shape's slot, generation
 * and handle), and a request on it with the same definition and the same
 * handle is served on its own thread: the shape slot is pinned with that
 * generation, which fails once the shape was rotated, evicted or deleted,
 * and then the request goes to the main thread as any other would.
 *
 * A client that comes back on a new connection (after a restart of the
 * server, a cut by a proxy, a browser that opened another) has nothing
 * kept.  So the server also keeps, in a table of buckets by the hash of the
 * definition (ResolvedShared, twice as many as there are shape slots), the last
 * resolution the main thread made of each definition, under the same rules:
 * a request on any connection with the same definition, the same handle and
 * the same catalog epoch is served from it, and its connection keeps it
 * from then on.  Once the first request of a definition is answered, the
 * others of a thousand clients that come back at once need no main thread
 * (those that arrived before that answer each went to it).  Two
 * definitions with the same bucket take turns in it (the other goes to the
 * main thread).  A failed pin drops that entry (not a newer one); nothing
 * else needs to: a refusal made since comes under a newer catalog epoch,
 * and a shape that failed, was deleted or rotated is retired (the pin
 * fails).  An entry never replaces one of a newer epoch, and one made
 * under an epoch that has moved on since is not kept.  The main thread's
 * guard against clients that send definitions it refuses
 * (client_limits.c) applies to definitions it was asked to resolve: a
 * client served from an entry sends one the main thread accepted.
 *
 * What the main thread would check again (the table by its name, its
 * columns, the role's privileges, the role itself) depends on the current
 * catalog, so a resolution is reused only while nothing it depends on may
 * have changed: it carries the shape table's catalog epoch as it was when
 * the main thread made it, and the main thread moves the epoch on every
 * invalidation of a served table, of a role, a membership or a schema, on
 * every reload, and all along a replay (whose requests for existing shapes
 * wait for its end).  The next request then goes to the main thread, which
 * answers under the current catalog: a 403, a 400 or a 409 with the handle
 * of another shape, as it would have without the reuse.  The worker takes
 * in other sessions' invalidations at each turn of its loop (at once when
 * it decodes; at most a second when idle), so that is how long a REVOKE may
 * take to stop a reused resolution.  A resolution made during a replay,
 * under the replay's catalog, is not kept at all, nor is one of a request
 * the main thread answered otherwise than with its shape.  A request
 * without a handle, or a HEAD, always goes to the main thread (at offset
 * -1 the handle a client sends, the one a 409 named, counts: it is not
 * checked, only looked for).  The read is noted in the shape's slot
 * (last_read_us) for eviction, as the main thread notes it.
 *
 * A request whose shape went while it waited gets a 409 that names the
 * entry of its definition, when one of the current epoch is there and
 * pins, or else the one the main thread then makes (shape_serve.c), and
 * the client's next request, at offset -1 with that handle, is served from
 * it.  The live requests parked on a rotated shape are woken together and
 * each goes to the main thread until the first answer is in, so a
 * rotation costs the main thread at most one resolution per parked
 * request, as when each came back without a handle, and the requests
 * that come back then cost it none.
 *
 * A non-live response carries the shape's electric-schema, which is the
 * same for every request of a shape slot's generation: one copy per slot
 * (ResolvedSchemas), put there by the first request the main thread
 * resolved, copied out by the others.
 *
 * Notes on synchronization
 * ------------------------
 * - A connection's ResolvedShape belongs to it, whose callbacks all run on
 *   the thread libmicrohttpd gave it: no lock.  It is freed when the
 *   connection closes, on that thread (http_request.c).  A bucket's is
 *   read, replaced and freed under the bucket's lock.
 * - A SchemaEntry is read and written under its own lock, held for a copy
 *   of the string; the generation tells a stale entry from a current one,
 *   since a slot is reused with a new generation.
 * - A SharedResolution is read and written under its bucket's lock, held
 *   for a comparison and a copy; what is copied out is checked again by
 *   the pin (the generation), as a connection's own is.
 *
 * IDENTIFICATION
 *	  src/net/resolved_shapes.c
 *
 *-------------------------------------------------------------------------
 */
#include "resolved_shapes.h"

#include <stdlib.h>
#include <string.h>

#include "fnv_hash.h"

#ifdef POSTGRES_H
#error "resolved_shapes.c runs on HTTP threads and must not include postgres.h"
#endif

/* ------------------------------------------------------- schema copies */

int
resolved_schemas_init(ResolvedSchemas *schemas, uint32_t nslots)
{
	schemas->entries = calloc(nslots ? nslots : 1, sizeof(SchemaEntry));
	if (schemas->entries == NULL)
		return -1;
	schemas->nslots = nslots;
	for (uint32_t i = 0; i < nslots; i++)
		pthread_mutex_init(&schemas->entries[i].lock, NULL);
	return 0;
}

void
resolved_schemas_destroy(ResolvedSchemas *schemas)
{
	if (schemas->entries == NULL)
		return;
	for (uint32_t i = 0; i < schemas->nslots; i++)
	{
		pthread_mutex_destroy(&schemas->entries[i].lock);
		free(schemas->entries[i].json);
	}
	free(schemas->entries);
	schemas->entries = NULL;
}

void
resolved_schemas_put(ResolvedSchemas *schemas, uint32_t slot, uint32_t generation,
					 const char *json)
{
	SchemaEntry *e;

	if (slot >= schemas->nslots || json == NULL)
		return;
	e = &schemas->entries[slot];
	pthread_mutex_lock(&e->lock);
	if (e->json == NULL || e->generation != generation)
	{
		char	   *copy = strdup(json);

		if (copy != NULL)
		{
			free(e->json);
			e->json = copy;
			e->generation = generation;
		}
	}
	pthread_mutex_unlock(&e->lock);
}

/* A malloc'd copy of the slot's schema for this generation, or NULL. */
char *
resolved_schemas_copy(ResolvedSchemas *schemas, uint32_t slot, uint32_t generation)
{
	SchemaEntry *e;
	char	   *copy = NULL;

	if (slot >= schemas->nslots)
		return NULL;
	e = &schemas->entries[slot];
	pthread_mutex_lock(&e->lock);
	if (e->json != NULL && e->generation == generation)
		copy = strdup(e->json);
	pthread_mutex_unlock(&e->lock);
	return copy;
}

/* ---------------------------------------------------- resolved shapes */

typedef struct KeyBuf
{
	char	   *data;
	size_t		len;
	size_t		cap;
	bool		failed;
} KeyBuf;

static void
key_put(KeyBuf *k, const void *bytes, size_t n)
{
	if (k->failed)
		return;
	if (k->len + n > k->cap)
	{
		size_t		cap = k->cap ? k->cap : 128;
		char	   *grown;

		while (cap < k->len + n)
			cap *= 2;
		grown = realloc(k->data, cap);
		if (grown == NULL)
		{
			k->failed = true;
			return;
		}
		k->data = grown;
		k->cap = cap;
	}
	memcpy(k->data + k->len, bytes, n);
	k->len += n;
}

/* A string as its length and bytes; NULL as a length no string has. */
static void
key_put_string(KeyBuf *k, const char *s)
{
	uint32_t	len = s != NULL ? (uint32_t) strlen(s) : UINT32_MAX;

	key_put(k, &len, sizeof(len));
	if (s != NULL)
		key_put(k, s, len);
}

char *
resolved_shape_key(const ShapeDefinition *def, size_t *len)
{
	KeyBuf		k = {0};
	uint32_t	n;
	char		flags = (char) ((def->replica_full ? 1 : 0) | (def->changes_only ? 2 : 0));

	key_put_string(&k, def->schema);
	key_put_string(&k, def->table);
	key_put_string(&k, def->where);
	n = (uint32_t) def->nparams;
	key_put(&k, &n, sizeof(n));
	for (int i = 0; i < def->nparams; i++)
		key_put_string(&k, def->params[i]);
	n = def->columns != NULL ? (uint32_t) def->ncolumns : UINT32_MAX;
	key_put(&k, &n, sizeof(n));
	for (int i = 0; def->columns != NULL && i < def->ncolumns; i++)
		key_put_string(&k, def->columns[i]);
	key_put(&k, &flags, 1);
	if (k.failed)
	{
		free(k.data);
		return NULL;
	}
	*len = k.len;
	return k.data;
}

/* Whether a kept resolution is of this definition. */
static bool
same_key(const ResolvedShape *cached, const char *key, size_t key_len)
{
	return cached != NULL && cached->key_len == key_len &&
		memcmp(cached->key, key, key_len) == 0;
}

bool
resolved_shape_matches(const ResolvedShape *cached, const char *key, size_t key_len,
					   const char *handle, uint64_t epoch)
{
	return key != NULL && handle != NULL && same_key(cached, key, key_len) &&
		cached->catalog_epoch == epoch && strcmp(cached->handle, handle) == 0;
}

void
resolved_shape_store(ResolvedShape **cached, char *key, size_t key_len,
					 const ShapeResolution *res)
{
	ResolvedShape *r = *cached;

	if (r == NULL)
	{
		r = calloc(1, sizeof(ResolvedShape));
		if (r == NULL)
		{
			free(key);
			return;
		}
		*cached = r;
	}
	free(r->key);
	r->key = key;
	r->key_len = key_len;
	r->slot = res->slot;
	r->generation = res->generation;
	r->catalog_epoch = res->catalog_epoch;
	strncpy(r->handle, res->handle, sizeof(r->handle) - 1);
	r->handle[sizeof(r->handle) - 1] = '\0';
}

void
resolved_shape_free(ResolvedShape **cached)
{
	if (*cached == NULL)
		return;
	free((*cached)->key);
	free(*cached);
	*cached = NULL;
}

/* --------------------------------------- resolutions for every connection */

int
resolved_shared_init(ResolvedShared *shared, uint32_t nbuckets)
{
	shared->nbuckets = nbuckets ? nbuckets : 1;
	shared->buckets = calloc(shared->nbuckets, sizeof(SharedResolution));
	if (shared->buckets == NULL)
		return -1;
	for (uint32_t i = 0; i < shared->nbuckets; i++)
		pthread_mutex_init(&shared->buckets[i].lock, NULL);
	return 0;
}

void
resolved_shared_destroy(ResolvedShared *shared)
{
	if (shared->buckets == NULL)
		return;
	for (uint32_t i = 0; i < shared->nbuckets; i++)
	{
		pthread_mutex_destroy(&shared->buckets[i].lock);
		resolved_shape_free(&shared->buckets[i].cached);
	}
	free(shared->buckets);
	shared->buckets = NULL;
}

static SharedResolution *
shared_bucket(ResolvedShared *shared, const char *key, size_t key_len)
{
	return &shared->buckets[fnv_hash_bytes(FNV_HASH_START, key, key_len) % shared->nbuckets];
}

/*
 * The last resolution of this definition, with this handle and made under
 * this catalog epoch, copied into *found (its key left NULL): true when
 * there is one.  With `handle` NULL, whatever its handle: the shape a 409
 * names when the client's shape of that definition went, if it still pins
 * (shape_serve.c), since the main thread resolved the definition to it
 * under the current catalog and a definition has one shape at a time.
 */
bool
resolved_shared_find(ResolvedShared *shared, const char *key, size_t key_len,
					 const char *handle, uint64_t epoch, ResolvedShape *found)
{
	SharedResolution *b;
	bool		hit;

	if (key == NULL || shared->buckets == NULL)
		return false;
	b = shared_bucket(shared, key, key_len);
	pthread_mutex_lock(&b->lock);
	hit = handle != NULL ? resolved_shape_matches(b->cached, key, key_len, handle, epoch) :
		same_key(b->cached, key, key_len) && b->cached->catalog_epoch == epoch;
	if (hit)
	{
		*found = *b->cached;
		found->key = NULL;
	}
	pthread_mutex_unlock(&b->lock);
	return hit;
}

/*
 * Keeps a copy of the main thread's resolution of this definition, unless
 * it was made under a catalog epoch older than the current one (`epoch`:
 * it can serve nothing) or the bucket holds one of it made under a newer.
 */
void
resolved_shared_put(ResolvedShared *shared, const char *key, size_t key_len,
					const ShapeResolution *res, uint64_t epoch)
{
	SharedResolution *b;
	char	   *copy;

	if (key == NULL || shared->buckets == NULL || res->catalog_epoch != epoch ||
		(copy = malloc(key_len)) == NULL)
		return;
	memcpy(copy, key, key_len);
	b = shared_bucket(shared, key, key_len);
	pthread_mutex_lock(&b->lock);
	if (same_key(b->cached, key, key_len) && b->cached->catalog_epoch > res->catalog_epoch)
		free(copy);
	else
		resolved_shape_store(&b->cached, copy, key_len, res);	/* takes the copy */
	pthread_mutex_unlock(&b->lock);
}

/* The definition's entry `gone` (as found) is of a shape that is gone. */
void
resolved_shared_forget(ResolvedShared *shared, const char *key, size_t key_len,
					   const ResolvedShape *gone)
{
	SharedResolution *b;

	if (key == NULL || shared->buckets == NULL)
		return;
	b = shared_bucket(shared, key, key_len);
	pthread_mutex_lock(&b->lock);
	if (same_key(b->cached, key, key_len) && b->cached->slot == gone->slot &&
		b->cached->generation == gone->generation &&
		strcmp(b->cached->handle, gone->handle) == 0)
		resolved_shape_free(&b->cached);
	pthread_mutex_unlock(&b->lock);
}
