/*-------------------------------------------------------------------------
 *
 * client_limits.c
 *		Per-client limits on new shapes and refused definitions, a minute
 *		at a time.
 *
 * A loop of distinct where clauses cannot evict everyone else's shapes:
 * one client address (an IPv6 /64: ShapeRequest.client_key) creates at
 * most shape_sync.max_new_shapes_per_client shapes a minute (503 with
 * retry-after past that), and the shapes it made are read once, so they
 * are the least recently read and go first (shape_eviction.c).  Nor can a loop
 * of invalid ones keep the main thread validating: a client whose
 * definitions were refused that many times in the minute gets 503 before
 * its next one is looked at, unless that one validated lately (its shapes
 * stay in reach): the hashes of definitions that validated lately sit in
 * a table of fixed size.
 *
 * Each client is counted in a hash table, by key, for its current minute;
 * clients whose minute is over are swept once a minute.  Everything here
 * runs on the main worker's main thread.
 *
 * IDENTIFICATION
 *	  src/pg/worker/client_limits.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "common/hashfn.h"
#include "utils/hsearch.h"

#include "client_limits.h"
#include "compact_hash.h"
#include "guc.h"

#define CLIENT_WINDOW_MS		60000

/* New shapes one client created, and definitions it had refused, in the current minute. */
typedef struct ClientWindow
{
	uint64		key;			/* ShapeRequest.client_key; the hash key */
	TimestampTz window_start;
	int			created;
	int			refused;
} ClientWindow;

static CompactHash cl_clients;	/* ClientWindow by key */
static TimestampTz cl_last_sweep;

/* The request's client as of this minute, or NULL when none is counted. */
static ClientWindow *
cl_client(const ShapeRequest *req, bool enter)
{
	ClientWindow *c;
	bool		found;
	TimestampTz now = GetCurrentTimestamp();

	if (shape_sync_max_new_shapes_per_client == 0 || req->client_key == 0)
		return NULL;
	if (enter)
		c = compact_hash_enter(&cl_clients, &req->client_key, &found);
	else
	{
		c = hash_search(cl_clients.htab, &req->client_key, HASH_FIND, NULL);
		found = c != NULL;
	}
	if (c != NULL && (!found || TimestampDifferenceExceeds(c->window_start, now, CLIENT_WINDOW_MS)))
	{
		c->window_start = now;
		c->created = 0;
		c->refused = 0;
	}
	return c;
}

/* When a client at one of its limits may go on: the end of its minute, in seconds. */
static unsigned
cl_retry_s(const ClientWindow *c)
{
	TimestampTz now = GetCurrentTimestamp();

	return (unsigned) Max(1, (CLIENT_WINDOW_MS - (now - c->window_start) / 1000) / 1000 + 1);
}

/*
 * Whether the request's client may create another shape this minute; if
 * not, *retry_s says when it may.
 */
bool
client_may_create(const ShapeRequest *req, unsigned *retry_s)
{
	ClientWindow *c = cl_client(req, false);

	if (c == NULL || c->created < shape_sync_max_new_shapes_per_client)
		return true;
	*retry_s = cl_retry_s(c);
	return false;
}

void
client_created(const ShapeRequest *req)
{
	ClientWindow *c = cl_client(req, true);

	if (c != NULL)
		c->created++;
}

/*
 * A definition refused costs the main thread its validation, up to
 * shape_sync.where_evaluation_timeout: a client whose definitions were
 * refused as often as it may create shapes waits for the next minute
 * before any more of its definitions is looked at (503 with retry-after).
 */
bool
client_may_validate(const ShapeRequest *req, unsigned *retry_s)
{
	ClientWindow *c = cl_client(req, false);

	if (c == NULL || c->refused < shape_sync_max_new_shapes_per_client)
		return true;
	*retry_s = cl_retry_s(c);
	return false;
}

/*
 * Definitions that validated lately, as hashes of their text, in a table
 * of fixed size (a newer one takes an older one's place): a client over
 * its refusals still reaches the shapes it had, whose definitions are
 * here, at the cost of one hash.
 */
#define CL_VALID_DEFINITIONS	4096
static uint64 cl_valid_definitions[CL_VALID_DEFINITIONS];

static uint64
cl_definition_hash(const ShapeDefinition *def)
{
	uint64		h = 0x9e3779b97f4a7c15ULL;
	const char *parts[3] = {def->schema, def->table, def->where};

#define CL_MIX(p, n) (h = hash_bytes_extended((const unsigned char *) (p), (int) (n), h))
	for (int i = 0; i < 3; i++)
		CL_MIX(parts[i] ? parts[i] : "\001", parts[i] ? strlen(parts[i]) + 1 : 1);
	for (int i = 0; i < def->nparams; i++)
		CL_MIX(def->params[i] ? def->params[i] : "\001",
				def->params[i] ? strlen(def->params[i]) + 1 : 1);
	CL_MIX("\002", 1);
	for (int i = 0; i < def->ncolumns; i++)
		CL_MIX(def->columns[i] ? def->columns[i] : "", def->columns[i] ? strlen(def->columns[i]) + 1 : 1);
	CL_MIX(&def->replica_full, sizeof(def->replica_full));
	CL_MIX(&def->changes_only, sizeof(def->changes_only));
#undef CL_MIX
	return h | 1;				/* 0 marks an empty place */
}

bool
client_definition_valid_lately(const ShapeDefinition *def)
{
	uint64		h = cl_definition_hash(def);

	return cl_valid_definitions[h % CL_VALID_DEFINITIONS] == h;
}

void
client_definition_validated(const ShapeDefinition *def)
{
	uint64		h = cl_definition_hash(def);

	cl_valid_definitions[h % CL_VALID_DEFINITIONS] = h;
}

void
client_refused(const ShapeRequest *req)
{
	ClientWindow *c = cl_client(req, true);

	if (c != NULL)
		c->refused++;
}

/* Forgets clients whose minute is over. */
void
client_limits_maintain(TimestampTz now)
{
	HASH_SEQ_STATUS seq;
	ClientWindow *c;

	if (!TimestampDifferenceExceeds(cl_last_sweep, now, CLIENT_WINDOW_MS))
		return;
	hash_seq_init(&seq, cl_clients.htab);
	while ((c = hash_seq_search(&seq)) != NULL)
		if (TimestampDifferenceExceeds(c->window_start, now, CLIENT_WINDOW_MS))
			hash_search(cl_clients.htab, &c->key, HASH_REMOVE, NULL);
	compact_hash_shrink(&cl_clients);
	cl_last_sweep = now;
}
void
client_limits_start(MemoryContext context)
{
	HASHCTL		ctl;

	ctl.keysize = sizeof(uint64);
	ctl.entrysize = sizeof(ClientWindow);
	ctl.hcxt = context;
	compact_hash_create(&cl_clients, "shape_sync clients", 256, &ctl,
						HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	cl_last_sweep = 0;
}

void
client_limits_stop(void)
{
	/* its memory is the registry's context */
	cl_clients.htab = NULL;
}
