/*-------------------------------------------------------------------------
 *
 * registry.c
 *		The main thread's map from shape definitions to shapes.
 *
 * The main thread resolves every shape request: it validates the
 * definition (shape_def.c), and either finds the shape that has the same
 * identity or creates one, with a fresh handle, and queues its snapshot.
 * Identical definitions therefore share one handle, and handles are never
 * reused (shape_table_new_handle).  A request refused here gets a reason
 * and its facts (refusal.h), never an HTTP answer: the HTTP side renders
 * it (refusal_render.c), and the statuses named below are what it sends.
 *
 * The map lives in the main worker's memory, one entry per shape slot,
 * found by the hash of its identity (reg_by_identity).
 *
 * Snapshots are queued in FIFO order for the pool of snapshot workers
 * (snapshot_jobs.c, snapshot.c), at most shape_sync.max_snapshot_workers
 * jobs waiting at a time, and as many taken at once.  A worker that ends
 * without finishing its shape fails it.  A
 * failed shape is retired at once, so its memory goes back to the arena as
 * soon as its last reader lets go, but the failure is remembered for
 * FAILED_SHAPE_RETENTION: clients asking for the same definition meanwhile
 * get the error at once instead of starting another doomed snapshot.
 *
 * Resolving runs as shape_sync.role (shape_role.c): the definition is
 * validated, and the shape's stream prepared, with that role's privileges,
 * and its snapshot worker is told to read as it.  What the role may not
 * read is answered 403; a shape_sync.role that cannot be used, 503.
 *
 * When the worker (re)starts, shapes left in shared memory by its previous
 * life are retired: their clients get 409 and refetch.
 *
 * During the replay of a long transaction (decoder.c's hook, every few ms)
 * requests are resolved too, under the catalog as the replay sees it (a
 * historic snapshot: the replay's transaction is the only one there is),
 * so that a new shape's snapshot starts at once instead of after the
 * replay.  That catalog may be older than the current one, so only a new
 * shape whose definition it validates is answered then: its snapshot
 * worker checks, under the current catalog, the table (the shape's
 * fingerprint, as every snapshot does) and that the role may read it, and
 * the shape is checked again before decoding goes past the transaction
 * (shape_stream_check_when_replayed).  Everything else waits for the end
 * of the replay and the current catalog: an error, a deletion, and a
 * request for a shape that exists (which has no snapshot to start early,
 * and which the current catalog may name differently or refuse).  A shape
 * made so skips the transaction being replayed: its snapshot, taken
 * later, sees it.
 *
 * Eviction.  Entries sit on a list in the order they were last read (every
 * request for a shape resolves here, and moves it to the head).  A shape is
 * in active use while its snapshot runs or a request holds it (a parked
 * live request, an SSE stream, a response being sent: its pins);
 * every other shape may be evicted (rotated: its clients get 409
 * must-refetch and its log memory goes back to the arena once its last
 * reader lets go).  Three things evict, always from the least recently
 * read end, moving shapes in active use to the head as they pass, so that
 * each walk costs what it evicts plus what it passes once:
 *	- a shape not read for shape_sync.shape_idle_timeout (checked each second);
 *	- a new shape finding shape_sync.max_shapes reached;
 *	- the arena's free memory falling under a reserve (a sixteenth of it),
 *	  or a snapshot worker asking for blocks (ShapeTable.blocks_wanted), so
 *	  that a growing log rarely finds the arena full (and is then rotated
 *	  itself, never a bystander).
 * With shape_sync.shape_eviction = none only idle shapes go, and a full
 * server refuses new shapes with 503.  A new shape is refused only when
 * every held shape is in active use.
 *
 * A loop of distinct where clauses cannot evict everyone else's shapes:
 * one client address (an IPv6 /64) creates at most
 * shape_sync.max_new_shapes_per_client shapes a minute (503 with
 * retry-after past that), and the shapes it made are read once, so they
 * are the least recently read and go first.  Nor can a loop of invalid
 * ones keep the main thread validating: a client whose definitions were
 * refused that many times in the minute gets 503 before its next one is
 * looked at, unless that one validated lately (its shapes stay in reach).
 *
 * IDENTIFICATION
 *	  src/pg/registry.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <signal.h>
#include <stdatomic.h>

#include "access/xact.h"
#include "common/hashfn.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "storage/dsm.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "compact_hash.h"
#include "decoder.h"
#include "guc.h"
#include "name_lookup.h"
#include "registry.h"
#include "shape_def.h"
#include "shape_role.h"
#include "shape_stream.h"
#include "shared_state.h"
#include "snapshot.h"

#define FAILED_SHAPE_RETENTION_MS	10000

typedef struct RegistryEntry
{
	bool		in_use;
	MemoryContext context;		/* identity, spec, schema_json, fingerprint:
								 * deleted with the entry, so that its memory
								 * goes back to malloc, not to a freelist */
	uint64		identity_hash;
	int32		identity_next;	/* the next entry of the same hash, or -1 */
	char	   *identity;
	uint32		generation;
	ShapeSpec	spec;
	char	   *schema_json;
	char	   *fingerprint;	/* shape_definition_fingerprint, for its snapshot */
	Oid			role;			/* read as this role */
	bool		manage_replica_identity;	/* the snapshot may set it */
	bool		launched;		/* its snapshot job was queued */
	dsm_segment *definition;	/* for the snapshot worker, until it is done */
	int32		lru_newer;		/* the entry read after this one, or -1 */
	int32		lru_older;		/* ... before it, or -1 */
	int64		touched_us;		/* last_read_us as of its place on the list */
} RegistryEntry;

/* New shapes one client created, and definitions it had refused, in the current minute. */
typedef struct RegistryClient
{
	uint64		key;			/* ShapeRequest.client_key; the hash key */
	TimestampTz window_start;
	int			created;
	int			refused;
} RegistryClient;

/*
 * The entries whose identities have one hash (almost always one), oldest
 * first, chained through RegistryEntry.identity_next: no allocation per
 * shape outside its own memory context.
 */
typedef struct RegistryIdentity
{
	uint64		identity_hash;	/* the hash key */
	int32		first_slot;
} RegistryIdentity;

/* The entry of a handle. */
typedef struct RegistryHandle
{
	char		handle[SHAPE_HANDLE_LEN];	/* the hash key */
	uint32		slot;
} RegistryHandle;

/* A definition whose snapshot failed recently. */
typedef struct RegistryFailure
{
	uint64		identity_hash;
	char	   *identity;
	RefusalReason reason;		/* a REFUSAL_SNAPSHOT_* */
	char	   *text;			/* ShapeSlot.error as it was */
	TimestampTz failed_at;
} RegistryFailure;

static void reg_delete(ShapeRequest *req, const ShapeSpec *spec);

static RegistryEntry *reg_entries;
static List *reg_failures = NIL;
static uint32 reg_creating = SHAPE_NO_SLOT;	/* slot claimed, not yet published */
static bool reg_in_replay = false;	/* resolving during a replay (see the header) */
static bool reg_wait_for_replay = false;	/* ... and this request must wait */
static MemoryContext reg_context;
static List *reg_waiting = NIL;	/* int list: slots whose snapshot waits to
								 * be queued, oldest first */
static List *reg_launched = NIL;	/* int list: slots whose snapshot job was
									 * queued and is not known to be done */
static int32 reg_lru_newest = -1;
static int32 reg_lru_oldest = -1;
static CompactHash reg_clients;	/* RegistryClient by key */
static CompactHash reg_by_identity; /* RegistryIdentity by identity hash */
static CompactHash reg_by_handle;	/* RegistryHandle by handle */
static TimestampTz reg_last_idle_sweep;
static TimestampTz reg_last_clients_sweep;
static TimestampTz reg_evictions_logged_at;
static TimestampTz reg_room_retry_at;	/* reg_make_room found nothing to evict */
static uint64 reg_evictions_unlogged;	/* for room, since the last LOG */

#define CLIENT_WINDOW_MS		60000
#define EVICTION_LOG_EVERY_MS	60000

static ShapeTable *
reg_table(void)
{
	return shape_sync_shared->table;
}

/* ------------------------------------------------------- recency list */

static void
reg_lru_unlink(uint32 slot)
{
	RegistryEntry *e = &reg_entries[slot];

	if (e->lru_newer >= 0)
		reg_entries[e->lru_newer].lru_older = e->lru_older;
	else if (reg_lru_newest == (int32) slot)
		reg_lru_newest = e->lru_older;
	if (e->lru_older >= 0)
		reg_entries[e->lru_older].lru_newer = e->lru_newer;
	else if (reg_lru_oldest == (int32) slot)
		reg_lru_oldest = e->lru_newer;
	e->lru_newer = e->lru_older = -1;
}

static int64
reg_unix_us(void)
{
	return GetCurrentTimestamp() +
		(int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY * USECS_PER_SEC;
}

/* The shape was just read (or made): it moves to the newest end. */
static void
reg_touch(uint32 slot)
{
	RegistryEntry *e = &reg_entries[slot];

	if (reg_lru_newest != (int32) slot)
	{
		reg_lru_unlink(slot);
		e->lru_older = reg_lru_newest;
		if (reg_lru_newest >= 0)
			reg_entries[reg_lru_newest].lru_newer = (int32) slot;
		reg_lru_newest = (int32) slot;
		if (reg_lru_oldest < 0)
			reg_lru_oldest = (int32) slot;
	}
	e->touched_us = reg_unix_us();
	atomic_store_explicit(&reg_table()->slots[slot].last_read_us, e->touched_us,
						  memory_order_relaxed);
}

/*
 * Whether the shape was read since it took its place on the list: requests
 * on a connection that resolved it before are served without this thread
 * (resolved_shapes.c) and note the read in the slot only.  Eviction moves
 * such a shape to the newest end, as if this thread had seen the read.
 */
static bool
reg_read_since_touched(uint32 slot)
{
	return atomic_load_explicit(&reg_table()->slots[slot].last_read_us, memory_order_relaxed) >
		reg_entries[slot].touched_us;
}

/* Frees an entry's memory; the slot itself is retired by the caller. */
static void
reg_forget(uint32 slot)
{
	RegistryEntry *e = &reg_entries[slot];

	reg_lru_unlink(slot);
	shape_stream_remove(slot);
	if (e->in_use)
	{
		RegistryIdentity *id = hash_search(reg_by_identity.htab, &e->identity_hash,
										   HASH_FIND, NULL);
		RegistryHandle *h = hash_search(reg_by_handle.htab, reg_table()->slots[slot].handle,
										HASH_FIND, NULL);

		if (h != NULL && h->slot == slot)
			hash_search(reg_by_handle.htab, reg_table()->slots[slot].handle, HASH_REMOVE, NULL);

		if (id != NULL)
		{
			int32	   *link = &id->first_slot;

			while (*link >= 0 && *link != (int32) slot)
				link = &reg_entries[*link].identity_next;
			if (*link == (int32) slot)
				*link = e->identity_next;
			if (id->first_slot < 0)
				hash_search(reg_by_identity.htab, &e->identity_hash, HASH_REMOVE, NULL);
		}
		compact_hash_shrink(&reg_by_handle);
		compact_hash_shrink(&reg_by_identity);
	}
	if (e->definition)
		dsm_detach(e->definition);
	if (e->context)
		MemoryContextDelete(e->context);
	memset(e, 0, sizeof(*e));
	e->lru_newer = e->lru_older = -1;
	e->identity_next = -1;
}

void
registry_start(void)
{
	ShapeTable *table = reg_table();
	HASHCTL		ctl;

	reg_context = AllocSetContextCreate(TopMemoryContext, "shape_sync registry",
										ALLOCSET_DEFAULT_SIZES);
	reg_entries = MemoryContextAllocZero(reg_context,
										 sizeof(RegistryEntry) * table->nslots);
	reg_lru_newest = reg_lru_oldest = -1;
	ctl.keysize = sizeof(uint64);
	ctl.entrysize = sizeof(RegistryClient);
	ctl.hcxt = reg_context;
	compact_hash_create(&reg_clients, "shape_sync clients", 256, &ctl,
						HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	ctl.entrysize = sizeof(RegistryIdentity);
	compact_hash_create(&reg_by_identity, "shape_sync shape identities", 1024, &ctl,
						HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	ctl.keysize = SHAPE_HANDLE_LEN;
	ctl.entrysize = sizeof(RegistryHandle);
	compact_hash_create(&reg_by_handle, "shape_sync shape handles", 1024, &ctl,
						HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
	for (uint32 i = 0; i < table->nslots; i++)
	{
		ShapeState	state = shape_table_state(table, i);

		reg_entries[i].lru_newer = reg_entries[i].lru_older = -1;
		if (state != SHAPE_FREE && state != SHAPE_RETIRED)
			shape_table_retire(table, i);
	}
	snapshot_pool_cancel_all();	/* the snapshots of those shapes */
}

void
registry_stop(void)
{
	/* shapes stay in shared memory; the next start retires them */
	reg_entries = NULL;
	reg_failures = NIL;
	reg_clients.htab = NULL;
	reg_by_identity.htab = NULL;
	reg_by_handle.htab = NULL;
	reg_waiting = reg_launched = NIL;
}

/* ------------------------------------------------------------ resolving */

static char *
reg_malloc_string(const char *s)
{
	char	   *copy = strdup(s);

	if (copy == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory")));
	return copy;
}

/*
 * Refuses the request: the reason and its facts (refusal.h) go back to
 * the HTTP side, which renders the answer.  Strings are copied.
 */
static Refusal *
reg_refuse(ShapeRequest *req, RefusalReason reason, const char *field, const char *text)
{
	req->result.status = SHAPE_RESOLVE_REFUSED;
	if (!refusal_set(&req->result.refusal, reason, field, text))
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("out of memory")));
	return &req->result.refusal;
}

/* Turns a caught validation error into the refusal the client gets. */
static void
reg_reject(ShapeRequest *req, ErrorData *edata)
{
	const char *field = shape_def_error_field;

	if (edata->sqlerrcode == ERRCODE_INSUFFICIENT_PRIVILEGE)
	{
		/* no field: the table */
		reg_refuse(req, REFUSAL_FORBIDDEN, field,
				   shape_def_http_message[0] && field ? shape_def_http_message :
				   edata->message);
		return;
	}
	if (field == NULL)
	{
		/* a table another session holds locked: worth another try soon */
		req->result.retry = edata->sqlerrcode == ERRCODE_LOCK_NOT_AVAILABLE;
		reg_refuse(req, REFUSAL_NOT_RESOLVED, NULL, edata->message);
		/* a shape_sync.role that cannot be used is logged once, by the worker */
		if (!req->result.retry && edata->sqlerrcode != ERRCODE_CONFIG_FILE_ERROR)
			ereport(LOG,
					(errmsg("shape_sync could not resolve a shape: %s", edata->message)));
		return;
	}
	reg_refuse(req, REFUSAL_INVALID, field, shape_def_error_message(field, edata));
}

static int32
reg_find(uint64 hash, const char *identity)
{
	RegistryIdentity *id = hash_search(reg_by_identity.htab, &hash, HASH_FIND, NULL);

	if (id == NULL)
		return -1;
	for (int32 slot = id->first_slot; slot >= 0; slot = reg_entries[slot].identity_next)
	{
		RegistryEntry *e = &reg_entries[slot];

		if (e->in_use && strcmp(e->identity, identity) == 0)
			return slot;
	}
	return -1;
}

static void
reg_copy_spec(ShapeSpec *dst, const ShapeSpec *src)
{
	dst->relid = src->relid;
	dst->flags = src->flags;
	dst->ncolumns = src->ncolumns;
	dst->columns = palloc(sizeof(AttrNumber) * Max(src->ncolumns, 1));
	memcpy(dst->columns, src->columns, sizeof(AttrNumber) * src->ncolumns);
	dst->where_sql = src->where_sql ? pstrdup(src->where_sql) : NULL;
	dst->where_tree = src->where_tree ? pstrdup(src->where_tree) : NULL;
}

/* ------------------------------------------------------------ eviction */

/*
 * Whether a shape is in active use: its snapshot runs, or a request holds
 * it (parked live requests, SSE streams and responses being sent all do).
 */
static bool
reg_in_active_use(uint32 slot)
{
	ShapeTable *table = reg_table();

	if (shape_table_state(table, slot) == SHAPE_SNAPSHOTTING)
		return true;
	return (atomic_load_explicit(&table->slots[slot].pins, memory_order_relaxed) &
			~SHAPE_PIN_RETIRED) > 0;
}

static void
reg_evict(uint32 slot, SmEvictionCause cause, const char *why)
{
	ShapeSlot  *s = &reg_table()->slots[slot];

	ereport(DEBUG1,
			(errmsg_internal("shape %s on %s evicted: %s", s->handle, s->relation, why)));
	if (cause != SM_EVICTION_IDLE)
		reg_evictions_unlogged++;	/* for room */
	sm_add(SM_EVICTIONS, cause, 1);
	registry_rotate(slot, SM_ROTATION_EVICTED);
}

/*
 * Evicts the least recently read shape not in active use; those in active
 * use that it passes count as read now, and those read on an HTTP thread
 * since they took their place (reg_read_since_touched) take their place
 * anew, at the newest end, where the walk comes to them again.  Returns
 * the log blocks the victim held (they return to the arena at its last
 * unpin), or -1 if every shape is in active use.
 */
static int64
reg_evict_oldest(SmEvictionCause cause, const char *why)
{
	int32		slot = reg_lru_oldest;
	uint32		passes = 2 * reg_table()->nslots;	/* those read meanwhile come round again */

	while (slot >= 0 && passes-- > 0)
	{
		int32		newer = reg_entries[slot].lru_newer;

		if (!reg_in_active_use((uint32) slot) && !reg_read_since_touched((uint32) slot))
		{
			int64		blocks = shape_table_log_blocks(reg_table(), (uint32) slot);

			reg_evict((uint32) slot, cause, why);
			return blocks;
		}
		reg_touch((uint32) slot);
		slot = newer;
	}
	return -1;
}

/* Drops the shapes nobody read for shape_sync.shape_idle_timeout. */
static void
reg_evict_idle(void)
{
	ShapeTable *table = reg_table();
	int64		cutoff = reg_unix_us() - (int64) shape_sync_shape_idle_timeout * USECS_PER_SEC;
	int32		slot = reg_lru_oldest;
	uint32		passes = table->nslots;

	while (slot >= 0 && passes-- > 0)
	{
		int32		newer = reg_entries[slot].lru_newer;

		if (reg_read_since_touched((uint32) slot))
		{
			reg_touch((uint32) slot);	/* read on another thread meanwhile */
			slot = newer;
			continue;
		}
		if (atomic_load_explicit(&table->slots[slot].last_read_us, memory_order_relaxed) >= cutoff)
			break;
		if (reg_in_active_use((uint32) slot))
			reg_touch((uint32) slot);
		else
			reg_evict((uint32) slot, SM_EVICTION_IDLE, "not read for shape_sync.shape_idle_timeout");
		slot = newer;
	}
}

/*
 * Keeps a reserve of free log memory, and gives a waiting snapshot what it
 * asks for, by evicting the least recently read shapes.
 */
static void
reg_make_room(void)
{
	ShapeTable *table = reg_table();
	ShapeLogArena *arena = table->arena;
	uint32		reserve = Max(arena->nblocks / 16, 4);
	uint32		wanted = atomic_load_explicit(&table->blocks_wanted, memory_order_acquire);
	int64		free_blocks = slog_arena_free_blocks(arena);
	int64		target;

	if (free_blocks >= reserve && (wanted == 0 || free_blocks >= wanted + reserve / 2))
	{
		if (wanted != 0)
			atomic_store_explicit(&table->blocks_wanted, 0, memory_order_relaxed);
		return;
	}
	if (shape_sync_shape_eviction != SHAPE_EVICTION_LRU ||
		(wanted == 0 && GetCurrentTimestamp() < reg_room_retry_at))
	{
		atomic_store_explicit(&table->blocks_wanted, 0, memory_order_relaxed);
		return;
	}
	/* evict until what the victims hold would reach the target */
	target = Max((int64) reserve * 2, (int64) wanted + reserve);
	while (free_blocks < target)
	{
		int64		freed = reg_evict_oldest(SM_EVICTION_LOG_MEMORY,
											 "the shape log memory (\"shape_sync.log_memory\") is nearly full");

		if (freed < 0)
		{
			/* all in use: a walk of every shape, not again for a second */
			reg_room_retry_at = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), 1000);
			break;
		}
		free_blocks += freed;
	}
	atomic_store_explicit(&table->blocks_wanted, 0, memory_order_relaxed);
}

/* Says, once a minute at most, how many shapes were evicted to make room. */
static void
reg_log_evictions(TimestampTz now)
{
	if (reg_evictions_unlogged == 0 ||
		!TimestampDifferenceExceeds(reg_evictions_logged_at, now, EVICTION_LOG_EVERY_MS))
		return;
	ereport(LOG,
			(errmsg_plural("shape_sync evicted %llu least recently read shape to make room for others",
						   "shape_sync evicted %llu least recently read shapes to make room for others",
						   reg_evictions_unlogged, (unsigned long long) reg_evictions_unlogged),
			 errdetail("\"shape_sync.max_shapes\" (%d) or \"shape_sync.log_memory\" (%d MB) was reached; their clients refetch.",
					   shape_sync_max_shapes, shape_sync_log_memory),
			 errhint("Consider increasing them if evicted shapes are asked for again.")));
	reg_evictions_unlogged = 0;
	reg_evictions_logged_at = now;
}

/* -------------------------------------------------------- client limits */

/* The request's client as of this minute, or NULL when none is counted. */
static RegistryClient *
reg_client(const ShapeRequest *req, bool enter)
{
	RegistryClient *c;
	bool		found;
	TimestampTz now = GetCurrentTimestamp();

	if (shape_sync_max_new_shapes_per_client == 0 || req->client_key == 0)
		return NULL;
	if (enter)
		c = compact_hash_enter(&reg_clients, &req->client_key, &found);
	else
	{
		c = hash_search(reg_clients.htab, &req->client_key, HASH_FIND, NULL);
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
reg_client_retry_s(const RegistryClient *c)
{
	TimestampTz now = GetCurrentTimestamp();

	return (unsigned) Max(1, (CLIENT_WINDOW_MS - (now - c->window_start) / 1000) / 1000 + 1);
}

/*
 * Whether the request's client may create another shape this minute; if
 * not, *retry_s says when it may.
 */
static bool
reg_client_may_create(const ShapeRequest *req, unsigned *retry_s)
{
	RegistryClient *c = reg_client(req, false);

	if (c == NULL || c->created < shape_sync_max_new_shapes_per_client)
		return true;
	*retry_s = reg_client_retry_s(c);
	return false;
}

static void
reg_client_created(const ShapeRequest *req)
{
	RegistryClient *c = reg_client(req, true);

	if (c != NULL)
		c->created++;
}

/*
 * A definition refused costs the main thread its validation, up to
 * shape_sync.where_evaluation_timeout: a client whose definitions were
 * refused as often as it may create shapes waits for the next minute
 * before any more of its definitions is looked at (503 with retry-after).
 */
static bool
reg_client_may_validate(const ShapeRequest *req, unsigned *retry_s)
{
	RegistryClient *c = reg_client(req, false);

	if (c == NULL || c->refused < shape_sync_max_new_shapes_per_client)
		return true;
	*retry_s = reg_client_retry_s(c);
	return false;
}

/*
 * Definitions that validated lately, as hashes of their text, in a table
 * of fixed size (a newer one takes an older one's place): a client over
 * its refusals still reaches the shapes it had, whose definitions are
 * here, at the cost of one hash.
 */
#define REG_VALID_DEFINITIONS	4096
static uint64 reg_valid_definitions[REG_VALID_DEFINITIONS];

static uint64
reg_definition_hash(const ShapeDefinition *def)
{
	uint64		h = 0x9e3779b97f4a7c15ULL;
	const char *parts[3] = {def->schema, def->table, def->where};

#define REG_MIX(p, n) (h = hash_bytes_extended((const unsigned char *) (p), (int) (n), h))
	for (int i = 0; i < 3; i++)
		REG_MIX(parts[i] ? parts[i] : "\001", parts[i] ? strlen(parts[i]) + 1 : 1);
	for (int i = 0; i < def->nparams; i++)
		REG_MIX(def->params[i] ? def->params[i] : "\001",
				def->params[i] ? strlen(def->params[i]) + 1 : 1);
	REG_MIX("\002", 1);
	for (int i = 0; i < def->ncolumns; i++)
		REG_MIX(def->columns[i] ? def->columns[i] : "", def->columns[i] ? strlen(def->columns[i]) + 1 : 1);
	REG_MIX(&def->replica_full, sizeof(def->replica_full));
	REG_MIX(&def->changes_only, sizeof(def->changes_only));
#undef REG_MIX
	return h | 1;				/* 0 marks an empty place */
}

static bool
reg_definition_valid_lately(const ShapeDefinition *def)
{
	uint64		h = reg_definition_hash(def);

	return reg_valid_definitions[h % REG_VALID_DEFINITIONS] == h;
}

static void
reg_definition_validated(const ShapeDefinition *def)
{
	uint64		h = reg_definition_hash(def);

	reg_valid_definitions[h % REG_VALID_DEFINITIONS] = h;
}

static void
reg_client_refused(const ShapeRequest *req)
{
	RegistryClient *c = reg_client(req, true);

	if (c != NULL)
		c->refused++;
}

/* Forgets clients whose minute is over. */
static void
reg_clients_sweep(TimestampTz now)
{
	HASH_SEQ_STATUS seq;
	RegistryClient *c;

	hash_seq_init(&seq, reg_clients.htab);
	while ((c = hash_seq_search(&seq)) != NULL)
		if (TimestampDifferenceExceeds(c->window_start, now, CLIENT_WINDOW_MS))
			hash_search(reg_clients.htab, &c->key, HASH_REMOVE, NULL);
	compact_hash_shrink(&reg_clients);
}

/* The columns a shape sends, "a,b,c" as quoted identifiers, cut to fit. */
static void
reg_columns_preview(const ShapeRelation *rel, char *out, size_t len)
{
	StringInfoData buf;

	initStringInfo(&buf);
	for (int i = 0; i < rel->ncolumns; i++)
		appendStringInfo(&buf, "%s%s", i ? "," : "", quote_identifier(rel->columns[i].name));
	if ((size_t) buf.len >= len)
		buf.len = pg_mbcliplen(buf.data, buf.len, (int) len - 1);	/* whole characters */
	memcpy(out, buf.data, buf.len);
	out[buf.len] = '\0';
	pfree(buf.data);
}

/* Claims a slot for a new shape and queues its snapshot; -1 when full. */
static int32
reg_create(const ShapeSpec *spec, const char *identity, uint64 hash)
{
	ShapeTable *table = reg_table();
	uint32		slot = shape_table_claim(table);
	ShapeSlot  *s;
	RegistryEntry *e;
	ShapeRelation *rel;
	char	   *schema_json;
	char	   *fingerprint;
	MemoryContext old;

	/* a victim being read frees its slot only at its last unpin: try a few */
	for (int tries = 0; slot == SHAPE_NO_SLOT && tries < 8 &&
		 shape_sync_shape_eviction == SHAPE_EVICTION_LRU; tries++)
	{
		if (reg_evict_oldest(SM_EVICTION_MAX_SHAPES, "\"shape_sync.max_shapes\" was reached") < 0)
			break;
		slot = shape_table_claim(table);
	}
	if (slot == SHAPE_NO_SLOT)
		return -1;
	reg_creating = slot;		/* undone by registry_resolve on error */
	s = &table->slots[slot];
	e = &reg_entries[slot];

	/*
	 * What it takes to make them (the relation, catalog lookups, buffers) is
	 * left in the caller's transaction context; only the results are kept.
	 */
	rel = shape_relation_load(spec->relid, spec->ncolumns, spec->columns);
	schema_json = shape_schema_json(rel);
	fingerprint = shape_definition_fingerprint(spec);
	e->context = AllocSetContextCreate(reg_context, "shape_sync shape", ALLOCSET_SMALL_SIZES);
	old = MemoryContextSwitchTo(e->context);
	e->in_use = true;
	e->identity_hash = hash;
	e->identity = pstrdup(identity);
	e->generation = atomic_load(&s->generation);
	e->role = GetUserId();
	e->manage_replica_identity = shape_sync_manage_replica_identity;
	reg_copy_spec(&e->spec, spec);
	e->schema_json = pstrdup(schema_json);
	e->fingerprint = pstrdup(fingerprint);
	MemoryContextSwitchTo(reg_context);
	{
		bool		found;
		RegistryIdentity *id = compact_hash_enter(&reg_by_identity, &hash, &found);
		int32	   *link = &id->first_slot;

		if (!found)
			id->first_slot = -1;
		while (*link >= 0)
			link = &reg_entries[*link].identity_next;
		*link = (int32) slot;
		e->identity_next = -1;
	}
	reg_waiting = lappend_int(reg_waiting, (int) slot);
	MemoryContextSwitchTo(old);
	shape_stream_add(slot, e->generation, spec, shape_sync_chunk_bytes_threshold);
	if (reg_in_replay)
		shape_stream_check_when_replayed(slot);

	shape_table_new_handle(table, (uint32) (hash & 0x7fffffff), reg_unix_us(),
						   s->handle);
	{
		RegistryHandle *h = compact_hash_enter(&reg_by_handle, s->handle, NULL);

		h->slot = slot;
	}
	strlcpy(s->relation, shape_quoted_relation(rel), sizeof(s->relation));
	strlcpy(s->where_preview, spec->where_sql ? spec->where_sql : "",
			sizeof(s->where_preview));
	reg_columns_preview(rel, s->columns, sizeof(s->columns));
	s->relid = spec->relid;
	s->flags = spec->flags;
	s->created_at_us = reg_unix_us();
	reg_touch(slot);
	shape_table_set_state(table, slot, SHAPE_SNAPSHOTTING);
	reg_creating = SHAPE_NO_SLOT;
	ereport(DEBUG1,
			(errmsg_internal("shape %s created for %s", s->handle, s->relation)));
	return (int32) slot;
}

static void
reg_resolve_valid(ShapeRequest *req, const ShapeSpec *spec)
{
	ShapeTable *table = reg_table();
	char	   *identity = shape_identity(spec);
	uint64		hash = hash_bytes_extended((const unsigned char *) identity,
										   strlen(identity), 0);
	int32		slot = reg_find(hash, identity);
	RegistryEntry *e;
	ListCell   *lc;

	foreach(lc, reg_failures)
	{
		RegistryFailure *f = lfirst(lc);

		if (f->identity_hash == hash && strcmp(f->identity, identity) == 0)
		{
			reg_refuse(req, f->reason, NULL, f->text);
			return;
		}
	}
	if (slot >= 0 && reg_in_replay)
	{
		/*
		 * Names were resolved under the replay's catalog: the current one
		 * may say this definition is another shape, or not the role's to
		 * read.  A shape that exists has no snapshot to start early.
		 */
		reg_wait_for_replay = true;
		return;
	}
	if (slot < 0 && decoder_skipping())
	{
		reg_refuse(req, REFUSAL_SKIPPING_WAL, NULL, NULL);
		return;
	}
	if (slot < 0)
	{
		unsigned	retry_s;

		if (!reg_client_may_create(req, &retry_s))
		{
			Refusal    *r = reg_refuse(req, REFUSAL_CLIENT_NEW_SHAPES, NULL, NULL);

			r->number = shape_sync_max_new_shapes_per_client;
			r->retry_after_s = retry_s;
			return;
		}
		if (!req->holds_initial &&
			!admission_would_admit(&shape_sync_shared->admission, ADMISSION_INITIAL))
		{
			/* its request would wait for the snapshot, over the initial limit */
			reg_refuse(req, REFUSAL_CONCURRENT_LIMIT, NULL, NULL);
			return;
		}
		slot = reg_create(spec, identity, hash);
		if (slot >= 0)
			reg_client_created(req);
	}
	else
		reg_touch((uint32) slot);
	if (slot < 0)
	{
		reg_refuse(req, REFUSAL_SHAPES_FULL, NULL, NULL)->number = shape_sync_max_shapes;
		return;
	}
	e = &reg_entries[slot];
	req->result.status = SHAPE_RESOLVE_OK;
	req->result.reusable = !reg_in_replay;	/* a replay's catalog is not the current one */
	req->result.slot = (uint32) slot;
	req->result.generation = e->generation;
	strlcpy(req->result.handle, table->slots[slot].handle, sizeof(req->result.handle));
	req->result.schema_json = reg_malloc_string(e->schema_json);
}

/*
 * DELETE /v1/shape: rotates the shape named by its definition, its handle,
 * or both (which must then agree).
 */
static void
reg_delete(ShapeRequest *req, const ShapeSpec *spec)
{
	ShapeTable *table = reg_table();
	int32		by_definition = -1;
	int32		by_handle = -1;
	int32		slot;

	if (spec != NULL)
	{
		char	   *identity = shape_identity(spec);

		by_definition = reg_find(hash_bytes_extended((const unsigned char *) identity,
													 strlen(identity), 0), identity);
	}
	if (req->handle != NULL && strlen(req->handle) < SHAPE_HANDLE_LEN)
	{
		RegistryHandle *h = hash_search(reg_by_handle.htab, req->handle, HASH_FIND, NULL);

		if (h != NULL && reg_entries[h->slot].in_use)
			by_handle = (int32) h->slot;
	}

	if (spec != NULL && req->handle != NULL && by_definition != by_handle &&
		(by_definition >= 0 || by_handle >= 0))
	{
		reg_refuse(req, REFUSAL_HANDLE_MISMATCH, NULL, NULL);
		return;
	}
	slot = spec != NULL ? by_definition : by_handle;
	if (slot < 0)
	{
		reg_refuse(req, REFUSAL_NO_SUCH_SHAPE, NULL, NULL);
		return;
	}
	ereport(LOG,
			(errmsg("shape %s on %s deleted by a client", table->slots[slot].handle,
					table->slots[slot].relation)));
	registry_rotate((uint32) slot, SM_ROTATION_DELETED);
	req->result.status = SHAPE_RESOLVE_DELETED;
}

/*
 * Resolves one request: fills req->result.  Runs inside a transaction on
 * the main thread, as shape_sync.role; validation errors are caught in a
 * subtransaction and become the client's 400 or 403.
 */
void
registry_resolve(ShapeRequest *req)
{
	MemoryContext oldcxt = CurrentMemoryContext;
	ResourceOwner oldowner = CurrentResourceOwner;
	ShapeSpec	spec;

	shape_def_error_field = NULL;	/* what failed is this request's business */
	shape_def_http_message[0] = '\0';
	if (!reg_in_replay && (req->has_definition || !req->delete_shape))
	{
		unsigned	retry_s;

		if (!reg_client_may_validate(req, &retry_s) &&
			!(req->has_definition && reg_definition_valid_lately(&req->def)))
		{
			Refusal    *r = reg_refuse(req, REFUSAL_CLIENT_REFUSED, NULL, NULL);

			r->number = shape_sync_max_new_shapes_per_client;
			r->retry_after_s = retry_s;
			return;
		}
	}
	/* read before the catalog is: a change seen meanwhile moves it on */
	req->result.catalog_epoch = atomic_load(&reg_table()->catalog_epoch);
	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(oldcxt);
	PG_TRY();
	{
		ShapeRoleSaved saved;

		/* an error leaves the role with the subtransaction */
		shape_role_become(shape_role_resolve(), &saved);
		if (req->has_definition || !req->delete_shape)
		{
			shape_def_validate(&req->def, &spec, true);
			if (!reg_in_replay)
				reg_definition_validated(&req->def);
		}
		if (req->delete_shape)
			reg_delete(req, req->has_definition ? &spec : NULL);
		else
			reg_resolve_valid(req, &spec);
		shape_role_restore(&saved);
		if (reg_in_replay)
		{
			/*
			 * Nothing here writes: rolling back releases the locks now,
			 * instead of with the replay's transaction, seconds later.
			 */
			RollbackAndReleaseCurrentSubTransaction();
		}
		else
			ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcxt);
		CurrentResourceOwner = oldowner;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(oldcxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcxt);
		CurrentResourceOwner = oldowner;
		name_lookup_failed();	/* what it named may not exist */
		if (reg_creating != SHAPE_NO_SLOT)
		{
			/* a shape half made: give its slot back */
			if (reg_entries[reg_creating].in_use)
				reg_forget(reg_creating);
			else
				shape_stream_remove(reg_creating);
			shape_table_retire(reg_table(), reg_creating);
			reg_creating = SHAPE_NO_SLOT;
		}
		shape_resolution_free(&req->result);
		if (reg_in_replay)
			reg_wait_for_replay = true; /* the current catalog may say otherwise */
		else
		{
			reg_reject(req, edata);
			if (req->result.refusal.reason == REFUSAL_INVALID ||
				req->result.refusal.reason == REFUSAL_FORBIDDEN)
				reg_client_refused(req);
		}
		FreeErrorData(edata);
	}
	PG_END_TRY();
}

/*
 * registry_resolve during the replay of a transaction, inside its
 * transaction (see the header): true when the request was answered, false
 * when it waits for the end of the replay.
 */
bool
registry_resolve_during_replay(ShapeRequest *req)
{
	/* a subset's query reads the current catalog: it waits too */
	if (req->delete_shape || req->subset != NULL)
		return false;
	reg_in_replay = true;
	reg_wait_for_replay = false;
	registry_resolve(req);
	reg_in_replay = false;
	if (!reg_wait_for_replay)
		return true;
	shape_resolution_free(&req->result);
	memset(&req->result, 0, sizeof(req->result));
	return false;
}

/* ---------------------------------------------------------- maintenance */

/*
 * Retires a failed shape, remembering its error for new requests, and
 * logs the failure.
 */
static void
reg_remember_failure(uint32 slot, TimestampTz now)
{
	ShapeTable *table = reg_table();
	ShapeSlot  *s = &table->slots[slot];
	RegistryEntry *e = &reg_entries[slot];
	MemoryContext old = MemoryContextSwitchTo(reg_context);
	RegistryFailure *f = palloc(sizeof(RegistryFailure));

	f->identity_hash = e->identity_hash;
	f->identity = pstrdup(e->identity);
	f->reason = s->error_reason ? (RefusalReason) s->error_reason : REFUSAL_SNAPSHOT_FAILED;
	f->text = pstrdup(s->error);
	f->failed_at = now;
	reg_failures = lappend(reg_failures, f);
	MemoryContextSwitchTo(old);

	ereport(WARNING,
			(errmsg("shape %s on %s failed: %s", s->handle, s->relation, s->error)));
	reg_forget(slot);
	shape_table_retire(table, slot);
}

/*
 * Rotates a shape: it is retired, and its clients get 409 must-refetch and
 * start over with a new shape for the same definition.
 */
void
registry_rotate(uint32 slot, SmRotationCause cause)
{
	ShapeTable *table = reg_table();
	uint32		generation;
	bool		snapshotting;

	if (reg_entries == NULL || !reg_entries[slot].in_use)
		return;
	generation = reg_entries[slot].generation;
	snapshotting = reg_entries[slot].launched &&
		shape_table_state(table, slot) == SHAPE_SNAPSHOTTING;
	reg_forget(slot);
	shape_table_retire(table, slot);
	shape_table_mark_dirty(table, slot);
	sm_add(SM_ROTATIONS, cause, 1);

	/*
	 * Its snapshot is no longer wanted: cancel the query, now that the slot
	 * is retired, so that the worker finds it so and goes on quietly (see
	 * snapshot.c) instead of failing the shape.  A job not yet taken finds
	 * the slot retired and is skipped.
	 */
	if (snapshotting)
		snapshot_pool_cancel(slot, generation);
}

/*
 * Notices finished and failed snapshots: lets go of their definitions, and
 * retires failed shapes (a worker that exits in the middle of a snapshot
 * fails its shape first: snapshot.c).
 */
static void
reg_reap_snapshots(TimestampTz now)
{
	ShapeTable *table = reg_table();
	List	   *launched = reg_launched;
	ListCell   *lc;

	reg_launched = NIL;
	foreach(lc, launched)
	{
		uint32		i = (uint32) lfirst_int(lc);
		RegistryEntry *e = &reg_entries[i];
		ShapeState	state;

		if (!e->in_use || !e->launched)
			continue;			/* gone (a slot taken again is listed again) */
		state = shape_table_state(table, i);
		if (state == SHAPE_SNAPSHOTTING)
		{
			MemoryContext old = MemoryContextSwitchTo(reg_context);

			reg_launched = lappend_int(reg_launched, (int) i);
			MemoryContextSwitchTo(old);
			continue;
		}
		if (e->definition != NULL)
		{
			dsm_detach(e->definition);
			e->definition = NULL;
		}
		if (state == SHAPE_FAILED)
		{
			if (table->slots[i].error_reason == REFUSAL_MUST_REFETCH)
			{
				/* its table changed before the snapshot: a new shape, not an error */
				ereport(LOG,
						(errmsg("shape %s will be rotated: %s", table->slots[i].handle,
								table->slots[i].error)));
				registry_rotate(i, SM_ROTATION_SNAPSHOT_CONFLICT);
			}
			else
				reg_remember_failure(i, now);
		}
	}
	list_free(launched);
}

/*
 * Queues the snapshots of new shapes, oldest first, while fewer than
 * shape_sync.max_snapshot_workers jobs wait (each holds a DSM segment),
 * and staffs them (snapshot.c).
 */
static void
reg_launch_snapshots(void)
{
	ShapeTable *table = reg_table();
	SnapshotJobs *jobs = &shape_sync_shared->snapshot_jobs;

	while (reg_waiting != NIL &&
		   snapshot_jobs_queued(jobs) < (uint32) shape_sync_max_snapshot_workers)
	{
		uint32		slot = (uint32) linitial_int(reg_waiting);
		RegistryEntry *e = &reg_entries[slot];
		SnapshotJob job;
		MemoryContext old;

		if (!e->in_use || e->launched || shape_table_state(table, slot) != SHAPE_SNAPSHOTTING)
		{
			reg_waiting = list_delete_first(reg_waiting);
			continue;			/* gone, or queued under an earlier entry */
		}
		old = MemoryContextSwitchTo(reg_context);
		e->definition = snapshot_definition_create(&e->spec, e->fingerprint,
												   shape_sync_chunk_bytes_threshold);
		MemoryContextSwitchTo(old);
		job.slot = slot;
		job.generation = e->generation;
		job.role = (uint32) e->role;
		job.definition = (uint32) dsm_segment_handle(e->definition);
		job.flags = e->manage_replica_identity ? SNAPSHOT_JOB_MANAGE_REPLICA_IDENTITY : 0;
		if (!snapshot_jobs_push(jobs, &job))
		{
			dsm_detach(e->definition);
			e->definition = NULL;
			break;				/* full: a worker is still reading a cell */
		}
		e->launched = true;
		reg_waiting = list_delete_first(reg_waiting);
		old = MemoryContextSwitchTo(reg_context);
		reg_launched = lappend_int(reg_launched, (int) slot);
		MemoryContextSwitchTo(old);
	}
	snapshot_pool_staff();
}

/*
 * Starts queued snapshots, notices finished and failed ones, retires failed
 * shapes and evicts.  Main thread, outside transactions.
 */
void
registry_maintain(void)
{
	TimestampTz now = GetCurrentTimestamp();
	ListCell   *lc;

	reg_reap_snapshots(now);

	/* forget failures older than the retention */
	foreach(lc, reg_failures)
	{
		RegistryFailure *f = lfirst(lc);

		if (TimestampDifferenceExceeds(f->failed_at, now, FAILED_SHAPE_RETENTION_MS))
		{
			pfree(f->identity);
			pfree(f->text);
			pfree(f);
			reg_failures = foreach_delete_current(reg_failures, lc);
		}
	}

	if (shape_sync_shape_idle_timeout > 0 &&
		TimestampDifferenceExceeds(reg_last_idle_sweep, now, 1000))
	{
		reg_evict_idle();
		reg_last_idle_sweep = now;
	}
	if (TimestampDifferenceExceeds(reg_last_clients_sweep, now, CLIENT_WINDOW_MS))
	{
		reg_clients_sweep(now);
		reg_last_clients_sweep = now;
	}
	reg_make_room();
	reg_log_evictions(now);
	reg_launch_snapshots();
}

/*
 * What of registry_maintain runs during a replay (decoder.c's hook): the
 * snapshots of shapes made meanwhile start, with room made for them.  A
 * shape retired meanwhile leaves the replay's transaction with its stream
 * (shape_stream_remove).
 */
void
registry_maintain_during_replay(void)
{
	TimestampTz now = GetCurrentTimestamp();

	reg_reap_snapshots(now);
	reg_make_room();
	reg_log_evictions(now);
	reg_launch_snapshots();
}

/*
 * What a subset query of a shape the registry holds needs: its spec, the
 * fingerprint of its table and the role it is read as.  False when the
 * slot holds another shape now.
 */
bool
registry_shape(uint32 slot, uint32 generation, const ShapeSpec **spec,
			   const char **fingerprint, Oid *role)
{
	RegistryEntry *e = &reg_entries[slot];

	if (!e->in_use || e->generation != generation)
		return false;
	*spec = &e->spec;
	*fingerprint = e->fingerprint;
	*role = e->role;
	return true;
}
