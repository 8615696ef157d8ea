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
 * A new shape's snapshot goes to the snapshot pool (snapshot_pool.c),
 * which tells the registry when it ended: the stream of a READY shape
 * takes its log over (shape_stream_snapshot_done).  A worker that ends
 * without finishing its shape fails it.  A failed shape is retired at
 * once, so its memory goes back to the arena as soon as its last reader
 * lets go, but the failure is remembered for
 * FAILED_SHAPE_RETENTION_MS: clients asking for the same definition meanwhile
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
 * Eviction: every shape it resolves counts as read (shape_eviction.c
 * keeps them in that order and evicts the least recently read).
 *
 * A loop of distinct where clauses cannot evict everyone else's shapes,
 * nor a loop of invalid ones keep the main thread validating: each client
 * is held to limits a minute (client_limits.c), and the shapes it made are
 * read once, so they are the least recently read and go first.
 *
 * IDENTIFICATION
 *	  src/pg/worker/registry.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <stdatomic.h>

#include "access/xact.h"
#include "common/hashfn.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "nodes/value.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

#include "catalog_use.h"
#include "client_limits.h"
#include "compact_hash.h"
#include "decoder.h"
#include "guc.h"
#include "log_files.h"
#include "log_restore.h"
#include "name_lookup.h"
#include "registry.h"
#include "shape_def.h"
#include "shape_def_error.h"
#include "shape_relation.h"
#include "shape_role.h"
#include "shape_eviction.h"
#include "shape_subquery.h"
#include "shape_stream.h"
#include "shared_state.h"
#include "snapshot_pool.h"

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
	char	   *schema_name;	/* the names it was defined with, for */
	char	   *table_name;		/* validating it again after a restart */
	char	  **column_names;	/* spec.ncolumns of them */
} RegistryEntry;

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
	int64		number;			/* ShapeSlot.error_number as it was */
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
static CompactHash reg_by_identity; /* RegistryIdentity by identity hash */
static CompactHash reg_by_handle;	/* RegistryHandle by handle */


static ShapeTable *
reg_table(void)
{
	return shape_sync_shared->table;
}

/* Frees an entry's memory; the slot itself is retired by the caller. */
static void
reg_forget(uint32 slot)
{
	RegistryEntry *e = &reg_entries[slot];

	eviction_forget(slot);
	shape_stream_remove(slot);
	log_files_forget(slot);
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
	snapshot_pool_forget(slot);
	if (e->context)
		MemoryContextDelete(e->context);
	memset(e, 0, sizeof(*e));
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
	client_limits_start(reg_context);
	eviction_start(table->nslots, reg_context, registry_rotate);
	ctl.keysize = sizeof(uint64);
	ctl.hcxt = reg_context;
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

		if (state != SHAPE_FREE && state != SHAPE_RETIRED)
			shape_table_retire(table, i);
	}
	snapshot_pool_start(table->nslots);	/* cancels the snapshots of those shapes */
}

void
registry_stop(void)
{
	/* shapes stay in shared memory; the next start retires them */
	reg_entries = NULL;
	reg_failures = NIL;
	client_limits_stop();
	eviction_stop();
	reg_by_identity.htab = NULL;
	reg_by_handle.htab = NULL;
	snapshot_pool_stop();
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

/*
 * The registry's entry for a shape in `slot`: its identity (findable from
 * now on), definition and texts, in the entry's own memory.
 */
static RegistryEntry *
reg_enter(uint32 slot, const ShapeSpec *spec, const ShapeRelation *rel, const char *identity,
		  uint64 hash, const char *schema_json, const char *fingerprint)
{
	RegistryEntry *e = &reg_entries[slot];
	MemoryContext old;

	e->context = AllocSetContextCreate(reg_context, "shape_sync shape", ALLOCSET_SMALL_SIZES);
	old = MemoryContextSwitchTo(e->context);
	e->in_use = true;
	e->identity_hash = hash;
	e->identity = pstrdup(identity);
	e->generation = atomic_load(&reg_table()->slots[slot].generation);
	e->role = GetUserId();
	e->manage_replica_identity = shape_sync_manage_replica_identity;
	reg_copy_spec(&e->spec, spec);
	e->schema_json = pstrdup(schema_json);
	e->fingerprint = pstrdup(fingerprint);
	e->schema_name = pstrdup(rel->schema);
	e->table_name = pstrdup(rel->table);
	e->column_names = palloc0(sizeof(char *) * Max(spec->ncolumns, 1));
	for (int i = 0; i < spec->ncolumns && i < rel->ncolumns; i++)
		e->column_names[i] = pstrdup(rel->columns[i].name);
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
	MemoryContextSwitchTo(old);
	return e;
}

/* The slot's handle (findable from now on) and what the views show of it. */
static void
reg_describe(uint32 slot, const ShapeSpec *spec, const ShapeRelation *rel, const char *handle)
{
	ShapeSlot  *s = &reg_table()->slots[slot];
	RegistryHandle *h;

	strlcpy(s->handle, handle, sizeof(s->handle));
	h = compact_hash_enter(&reg_by_handle, s->handle, NULL);
	h->slot = slot;
	strlcpy(s->relation, shape_quoted_relation(rel), sizeof(s->relation));
	strlcpy(s->where_preview, spec->where_sql ? spec->where_sql : "",
			sizeof(s->where_preview));
	reg_columns_preview(rel, s->columns, sizeof(s->columns));
	s->relid = spec->relid;
	s->flags = spec->flags;
}

/* A slot for a new shape, evicting to make one; SHAPE_NO_SLOT when full. */
static uint32
reg_claim(void)
{
	ShapeTable *table = reg_table();
	uint32		slot = shape_table_claim(table);

	/* a victim being read frees its slot only at its last unpin: try a few */
	for (int tries = 0; slot == SHAPE_NO_SLOT && tries < 8 &&
		 shape_sync_shape_eviction == SHAPE_EVICTION_LRU; tries++)
	{
		if (eviction_evict_oldest(SM_EVICTION_MAX_SHAPES, "\"shape_sync.max_shapes\" was reached") < 0)
			break;
		slot = shape_table_claim(table);
	}
	return slot;
}

/* Claims a slot for a new shape and queues its snapshot; -1 when full. */
static int32
reg_create(const ShapeSpec *spec, const char *identity, uint64 hash)
{
	ShapeTable *table = reg_table();
	uint32		slot = reg_claim();
	ShapeSlot  *s;
	RegistryEntry *e;
	ShapeRelation *rel;
	char		handle[SHAPE_HANDLE_LEN];
	MemoryContext old;

	if (slot == SHAPE_NO_SLOT)
		return -1;
	reg_creating = slot;		/* undone by registry_resolve on error */
	s = &table->slots[slot];

	/*
	 * What it takes to make them (the relation, catalog lookups, buffers) is
	 * left in the caller's transaction context; only the results are kept.
	 */
	rel = shape_relation_load(spec->relid, spec->ncolumns, spec->columns);
	e = reg_enter(slot, spec, rel, identity, hash, shape_schema_json(rel),
				  shape_definition_fingerprint(spec));
	/* the handle first: a shape with subqueries tags its rows with it */
	shape_table_new_handle(table, (uint32) (hash & 0x7fffffff), shape_table_unix_us(), handle);
	reg_describe(slot, spec, rel, handle);
	shape_stream_add(slot, e->generation, spec, shape_sync_chunk_bytes_threshold);
	if (reg_in_replay)
		shape_stream_check_when_replayed(slot);
	else if (ActiveSnapshotSet() && GetActiveSnapshot()->snapshot_type == SNAPSHOT_MVCC &&
			 !GetActiveSnapshot()->takenDuringRecovery)
		shape_stream_note_creating_snapshot(slot, GetActiveSnapshot());	/* the batch's */
	old = MemoryContextSwitchTo(reg_context);
	snapshot_pool_queue(slot, e->generation, e->role, e->manage_replica_identity, &e->spec,
						e->fingerprint);
	MemoryContextSwitchTo(old);

	s->created_at_us = shape_table_unix_us();
	eviction_touch(slot);
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
			reg_refuse(req, f->reason, NULL, f->text)->number = f->number;
			return;
		}
	}
	if (slot >= 0 && reg_in_replay && !req->successor_only)
	{
		/*
		 * Names were resolved under the replay's catalog: the current one
		 * may say this definition is another shape, or not the role's to
		 * read.  A shape that exists has no snapshot to start early.  (A
		 * 409 may name it all the same: the client's next request, at
		 * offset -1, is resolved anew.)
		 */
		reg_wait_for_replay = true;
		return;
	}
	if (slot < 0 && reg_in_replay && spec->where_tree != NULL &&
		subquery_in_where(stringToNode(spec->where_tree)))
	{
		/* its subqueries' values are read under the current snapshot only */
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

		if (!client_may_create(req, &retry_s))
		{
			Refusal    *r = reg_refuse(req, REFUSAL_CLIENT_NEW_SHAPES, NULL, NULL);

			r->number = shape_sync_max_new_shapes_per_client;
			r->retry_after_s = retry_s;
			return;
		}
		if (req->successor_only ?
			!admission_has_room(&shape_sync_shared->admission, ADMISSION_INITIAL) :
			(!req->holds_initial &&
			 !admission_would_admit(&shape_sync_shared->admission, ADMISSION_INITIAL)))
		{
			/*
			 * its request (a 409's: its clients) would wait for the
			 * snapshot, over the initial limit
			 */
			reg_refuse(req, REFUSAL_CONCURRENT_LIMIT, NULL, NULL);
			return;
		}
		slot = reg_create(spec, identity, hash);
		if (slot >= 0)
			client_created(req);
	}
	else
		eviction_touch((uint32) slot);
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

/* ------------------------------------------------------------ restoring */

/*
 * Makes the shape a shape file describes again, in a fresh slot, with its
 * handle and its log read back from disk; NULL when it cannot serve now,
 * with the reason in `why`.  The definition is validated as a request's is,
 * as shape_sync.role, against the current catalog, and must come out with
 * the same identity, fingerprint and schema: a table dropped, altered or
 * no longer readable while the server was down drops the shape.
 */
static const char *
reg_restore_one(const LogStoreShape *stored, const LogStoreExtent *extent, XLogRecPtr durable)
{
	ShapeTable *table = reg_table();
	ShapeDefinition def;
	ShapeSpec	spec;
	ShapeRelation *rel;
	char	   *identity;
	uint64		hash;
	uint32		slot;
	RegistryEntry *e;
	SnapshotVisibility *visibility;
	char		why[256];
	const char *problem;

	memset(&def, 0, sizeof(def));
	def.schema = stored->schema_name;
	def.table = stored->table_name;
	def.where = stored->where_sql;
	def.columns = stored->columns;
	def.ncolumns = (int) stored->ncolumns;
	def.replica_full = (stored->flags & SHAPE_FLAG_REPLICA_FULL) != 0;
	def.changes_only = (stored->flags & SHAPE_FLAG_CHANGES_ONLY) != 0;
	shape_def_validate(&def, &spec, false);
	identity = shape_identity(&spec);
	if (strcmp(identity, stored->identity) != 0)
		return "its definition names other columns or another table now";
	if (strcmp(shape_definition_fingerprint(&spec), stored->fingerprint) != 0)
		return "its table or columns changed";
	rel = shape_relation_load(spec.relid, spec.ncolumns, spec.columns);
	if (strcmp(shape_schema_json(rel), stored->schema_json) != 0)
		return "its columns' types changed";
	hash = hash_bytes_extended((const unsigned char *) identity, strlen(identity), 0);
	if (reg_find(hash, identity) >= 0)
		return "another stored shape has the same definition";
	slot = shape_table_claim(table);
	if (slot == SHAPE_NO_SLOT)
		return "\"shape_sync.max_shapes\" was reached";
	reg_creating = slot;		/* undone by the caller on error */
	e = reg_enter(slot, &spec, rel, identity, hash, stored->schema_json, stored->fingerprint);
	/* described first: the stream tags rows with the handle (row_tags.c) */
	reg_describe(slot, &spec, rel, stored->handle);
	shape_stream_add(slot, e->generation, &spec, stored->chunk_threshold);
	table->slots[slot].created_at_us = stored->created_at_us;
	table->slots[slot].snapshot_lsn = stored->snapshot_lsn;
	atomic_store(&table->slots[slot].snapshot_rows, stored->snapshot_rows);
	atomic_store(&table->slots[slot].snapshot_ms, stored->snapshot_ms);
	if ((problem = shape_stream_restored_problem(slot)) != NULL)
		return pstrdup(problem);	/* (it may be the set's, which goes with the slot) */
	if (!log_restore_load(slot, extent, why, sizeof(why)))
		return pstrdup(why);
	visibility = palloc(offsetof(SnapshotVisibility, xip) + sizeof(uint64) * Max(stored->nxip, 1));
	visibility->xmin = stored->xmin;
	visibility->xmax = stored->xmax;
	visibility->nxip = (int32) stored->nxip;
	memcpy(visibility->xip, stored->xip, sizeof(uint64) * stored->nxip);
	/* the stream takes the log over at the next maintain, as after a snapshot */
	shape_stream_snapshot_done(slot, visibility);
	shape_stream_resume_after(slot, durable);
	eviction_touch(slot);
	shape_table_set_state(table, slot, SHAPE_READY);
	reg_creating = SHAPE_NO_SLOT;
	return NULL;
}

/*
 * reg_restore_one in a subtransaction, as shape_sync.role: NULL when the
 * shape is restored, else why not (its slot given back).
 */
static const char *
reg_try_restore(const LogStoreShape *stored, const LogStoreExtent *extent, XLogRecPtr durable,
				bool *lock_timeout)
{
	MemoryContext oldcxt = CurrentMemoryContext;
	ResourceOwner oldowner = CurrentResourceOwner;
	const char *why = NULL;

	*lock_timeout = false;
	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(oldcxt);
	PG_TRY();
	{
		ShapeRoleSaved saved;

		shape_role_become(shape_role_resolve(), &saved);
		why = reg_restore_one(stored, extent, durable);
		shape_role_restore(&saved);
		ReleaseCurrentSubTransaction();
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(oldcxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		why = pstrdup(edata->message);
		*lock_timeout = edata->sqlerrcode == ERRCODE_LOCK_NOT_AVAILABLE;
		FreeErrorData(edata);
		name_lookup_failed();
	}
	PG_END_TRY();
	MemoryContextSwitchTo(oldcxt);
	CurrentResourceOwner = oldowner;
	if (why != NULL && reg_creating != SHAPE_NO_SLOT)
	{
		if (reg_entries[reg_creating].in_use)
			reg_forget(reg_creating);
		else
			shape_stream_remove(reg_creating);
		shape_table_retire(reg_table(), reg_creating);
		reg_creating = SHAPE_NO_SLOT;
	}
	return why;
}

/*
 * Restores the shapes of the previous life that the manifest lists
 * (log_restore.c checked it against the cluster and the slot): each with its
 * handle, so that its clients go on at their offsets.  Main thread, at
 * start, before decoding: returns how many were restored.
 */
int
registry_restore_shapes(const LogStoreManifest *manifest)
{
	int			restored = 0;
	TimestampTz started = GetCurrentTimestamp();
	List	   *locked = NIL;	/* tables whose lock did not come in time */
	char	   *sets;
	size_t		sets_len;

	catalog_use_current();
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	/* a table locked for long does not hold the worker's start */
	(void) set_config_option("lock_timeout", "5s", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_LOCAL, true, 0, false);
	/* the value sets of subqueries, as of the logs' end */
	sets = log_restore_read_sets(&manifest->header, &sets_len);
	shape_stream_sets_restore_begin(sets, sets_len, manifest->header.sets_generation,
									manifest->header.durable_lsn);
	for (uint32 i = 0; i < manifest->nshapes; i++)
	{
		const LogStoreExtent *extent = &manifest->shapes[i];
		LogStoreShape *stored = log_restore_read_shape(extent->handle);
		const char *why;
		char	   *table;
		bool		lock_timeout;

		if (stored == NULL)
			continue;
		table = shape_quoted_name(stored->schema_name, stored->table_name);
		if (list_member(locked, makeString(table)))
			why = "its table was locked by another session";	/* waited for once */
		else
		{
			why = reg_try_restore(stored, extent, manifest->header.durable_lsn, &lock_timeout);
			if (lock_timeout)
				locked = lappend(locked, makeString(table));
		}
		if (why != NULL)
			ereport(LOG,
					(errmsg("shape %s on %s is not restored: %s", extent->handle, table, why),
					 errdetail("Its clients are answered as if it had been deleted: 409, or the error a new request for it gets.")));
		else
			restored++;
		log_store_shape_free(stored);
		pfree(stored);
	}
	shape_stream_sets_restore_end();
	if (sets != NULL)
		pfree(sets);
	PopActiveSnapshot();
	CommitTransactionCommand();
	if (manifest->nshapes > 0)
		ereport(LOG,
				(errmsg("shape_sync restored %d of %u shapes from disk in %lld ms",
						restored, manifest->nshapes,
						(long long) ((GetCurrentTimestamp() - started) / 1000))));
	return restored;
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

		if (!client_may_validate(req, &retry_s) &&
			!(req->has_definition && client_definition_valid_lately(&req->def)))
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
				client_definition_validated(&req->def);
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
			/* a 409's handle asked for: its client is told nothing of it */
			if (!req->successor_only &&
				(req->result.refusal.reason == REFUSAL_INVALID ||
				 req->result.refusal.reason == REFUSAL_FORBIDDEN))
				client_refused(req);
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
	if (req->successor_only)
	{
		/* its 409 goes now, naming no handle, rather than after the replay */
		req->result.status = SHAPE_RESOLVE_UNAVAILABLE;
		return true;
	}
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
	char		sentence[REFUSAL_SENTENCE_MAX];

	f->identity_hash = e->identity_hash;
	f->identity = pstrdup(e->identity);
	f->reason = s->error_reason ? (RefusalReason) s->error_reason : REFUSAL_SNAPSHOT_FAILED;
	f->number = s->error_number;
	f->text = pstrdup(s->error);
	f->failed_at = now;
	reg_failures = lappend(reg_failures, f);
	MemoryContextSwitchTo(old);

	refusal_failure_sentence(f->reason, f->number, f->text, sentence, sizeof(sentence));
	ereport(WARNING,
			(errmsg("shape %s on %s failed: %s", s->handle, s->relation, sentence)));
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
	snapshotting = snapshot_pool_launched(slot) &&
		shape_table_state(table, slot) == SHAPE_SNAPSHOTTING;
	reg_forget(slot);
	shape_table_retire(table, slot);
	shape_table_mark_dirty(table, slot);
	sm_add(SM_ROTATIONS, cause, 1);

	/*
	 * Its snapshot is no longer wanted: cancel the query, now that the slot
	 * is retired, so that the worker finds it so and goes on quietly (see
	 * snapshot_worker.c) instead of failing the shape.  A job not yet taken finds
	 * the slot retired and is skipped.
	 */
	if (snapshotting)
		snapshot_pool_cancel(slot, generation);
}

/* Rotates every shape; how many there were. */
uint32
registry_rotate_all(SmRotationCause cause)
{
	uint32		rotated = 0;

	if (reg_entries == NULL)
		return 0;
	for (uint32 slot = 0; slot < reg_table()->nslots; slot++)
	{
		if (!reg_entries[slot].in_use)
			continue;
		registry_rotate(slot, cause);
		rotated++;
	}
	return rotated;
}

/*
 * A shape's snapshot is done: from now on its log is kept on disk too
 * (log_files.c), with what it takes to restore it.
 */
static void
reg_keep_on_disk(uint32 slot, const SnapshotVisibility *visibility)
{
	RegistryEntry *e = &reg_entries[slot];
	ShapeSlot  *s = &reg_table()->slots[slot];
	LogStoreShape shape;

	memset(&shape, 0, sizeof(shape));
	strlcpy(shape.handle, s->handle, sizeof(shape.handle));
	shape.identity = e->identity;
	shape.fingerprint = e->fingerprint;
	shape.schema_json = e->schema_json;
	shape.schema_name = e->schema_name;
	shape.table_name = e->table_name;
	shape.where_sql = e->spec.where_sql;
	shape.ncolumns = (uint32) e->spec.ncolumns;
	shape.columns = e->column_names;
	shape.flags = e->spec.flags;
	shape.chunk_threshold = shape_sync_chunk_bytes_threshold;
	shape.snapshot_lsn = s->snapshot_lsn;
	shape.xmin = visibility->xmin;
	shape.xmax = visibility->xmax;
	shape.nxip = (uint32) visibility->nxip;
	shape.xip = (uint64_t *) visibility->xip;
	shape.created_at_us = s->created_at_us;
	shape.snapshot_rows = atomic_load(&s->snapshot_rows);
	shape.snapshot_ms = atomic_load(&s->snapshot_ms);
	log_files_shape_ready(slot, &shape);
}

/*
 * A snapshot ended (snapshot_pool_reap): a READY shape's stream takes its
 * log over; a FAILED shape is remembered, or rotated when its table
 * changed before the snapshot.
 */
static void
reg_snapshot_ended(uint32 slot, ShapeState state, const SnapshotVisibility *visibility)
{
	ShapeTable *table = reg_table();

	if (!reg_entries[slot].in_use)
		return;
	if (state == SHAPE_READY && visibility != NULL)
	{
		shape_stream_snapshot_done(slot, visibility);
		reg_keep_on_disk(slot, visibility);
	}
	else if (state == SHAPE_READY)
	{
		/* cannot happen: a worker stores the visibility before READY */
		ereport(LOG,
				(errmsg("shape %s will be rotated: its snapshot left no visibility",
						table->slots[slot].handle)));
		registry_rotate(slot, SM_ROTATION_SNAPSHOT_CONFLICT);
	}
	else if (state == SHAPE_FAILED)
	{
		if (table->slots[slot].error_reason == REFUSAL_MUST_REFETCH)
		{
			/* its table changed before the snapshot: a new shape, not an error */
			ereport(LOG,
					(errmsg("shape %s will be rotated: %s", table->slots[slot].handle,
							table->slots[slot].error)));
			registry_rotate(slot, SM_ROTATION_SNAPSHOT_CONFLICT);
		}
		else
			reg_remember_failure(slot, GetCurrentTimestamp());
	}
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

	snapshot_pool_reap(reg_snapshot_ended);

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

	client_limits_maintain(now);
	eviction_maintain(now, false);
	snapshot_pool_launch();
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

	snapshot_pool_reap(reg_snapshot_ended);
	eviction_maintain(now, true);
	snapshot_pool_launch();
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
