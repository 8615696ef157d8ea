/*-------------------------------------------------------------------------
 *
 * shape_stream_sets_disk.c
 *		The value sets of subqueries kept on disk, so that a restart
 *		restores shapes with subqueries as it restores the others.
 *
 * A restored shape resumes after the manifest's durable_lsn: decoding
 * starts at or before it and the shape skips the commits before it
 * (log_rounds.c).  Its value sets must then be what they were at that
 * position too: reading them again at start would see commits after it,
 * whose moves would be lost.  So they are kept on disk, in one file of
 * records (value_sets_file.c) that each round of the logs' files extends
 * as of the round's position, and that the manifest names with its
 * length: the state at durable_lsn is the file read up to that length.
 *
 * What a round writes.  Each change of a set kept on disk (a value's
 * count, its rows with a NULL, a nested set's kept row) is appended to
 * `ssd_pending` as it is made, the count it has now: a round writes what
 * changed since the last one, not every set.  A set is kept on disk from
 * the first round after decoding has passed the position its first
 * reading was made at (its filtering is over then: _settle), whole, with
 * its children; one that fails, or goes, is dropped.  Now and then the
 * file is written whole instead, as a new generation: at the first round
 * after a start, after a round failed (the appended bytes may be torn),
 * when shape_sync.log_fsync leaves `off` (the file was never fsynced),
 * when the records waiting grew past SSD_PENDING_MAX, and when the
 * records appended since the last whole write outgrew it threefold
 * (SSD_REWRITE_MIN at least).  A generation is removed once a manifest
 * names the next (one whose round failed after its manifest may have been
 * written, only once a later one names another).  The round's bytes go to the flusher thread with the
 * manifest's (log_flusher.c), which writes and fsyncs them first.
 *
 * Which shapes are listed.  A shape with subqueries is durable
 * (shape_stream_durable) only while its sets are kept on disk and no
 * move-in of it is in flight (its log then lacks the transactions it
 * holds, and the rows to splice); at other rounds it is left out of the
 * manifest, and a restart then answers its clients 409.
 *
 * Restoring.  At start the file is read up to the manifest's length into
 * a table of sets by id (the records: last count wins, a drop removes);
 * a restored shape's subquery finds its set there by role, table and
 * select (ss_set_acquire, as a new shape finds a live one), checked
 * against the current catalog (the columns' numbers and types, the
 * partitions), and the set is built from the records with no query:
 * values as counted, kept rows read in again from their texts.  It skips
 * the commits before durable_lsn, as its shapes do.  A set the file lacks
 * fails the restore of its shape only.
 *
 * Everything here runs on the worker's main thread.
 *
 * IDENTIFICATION
 *	  src/pg/worker/shape_stream_sets_disk.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xlog_internal.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"

#include "shape_stream_internal.h"

/* records waiting for a round past this: the next round writes the file whole */
#define SSD_PENDING_MAX		((size_t) 64 << 20)
/* bytes appended since the last whole write before one is due, at least */
#define SSD_REWRITE_MIN		((uint64) 1 << 20)

static ValueSetsBuffer ssd_pending;	/* records since the last round's */
static bool ssd_whole_next = true;	/* the next round writes a new generation */
static uint64 ssd_next_uid = 1;
static uint32 ssd_last_generation;	/* the newest ever made */
static uint32 ssd_generation;	/* the file the last written manifest names */
static uint64 ssd_length;		/* ... and its length there */
static uint64 ssd_whole_length; /* its length when written whole */
static bool ssd_unwritable;		/* this round could not encode the sets */
static List *ssd_unsettled;		/* int list: top sets (no parent) not yet kept
								 * on disk, their children with them */

static List *ssd_obsolete;		/* int list: generations no manifest names */
static List *ssd_unsure;		/* int list: generations of rounds that failed
								 * once their manifest may have been written */

/* the round in flight */
static bool ssd_in_round;
static bool ssd_round_whole;
static uint32 ssd_round_generation;
static uint64 ssd_round_length;

/* ------------------------------------------------------------ recording */

/* Records waiting past the bound, or lost to memory: the file is rewritten. */
static void
ssd_pending_check(void)
{
	if (ssd_pending.failed || ssd_pending.len > SSD_PENDING_MAX)
	{
		value_sets_buffer_reset(&ssd_pending);
		ssd_whole_next = true;
	}
}

static inline bool
ssd_recording(const SsValueSet *set)
{
	return set->uid != 0 && !ssd_whole_next;
}

/*
 * A count below zero is a set that lost track (it fails, and leaves the
 * file): the file never holds one.
 */
static bool
ssd_count_lost(SsValueSet *set, int64 count)
{
	if (count >= 0)
		return false;
	ss_set_fail(set, "a row left its subquery's result that was not counted in it");
	return true;
}

void
ss_disk_value(SsValueSet *set, const SsValue *v)
{
	if (ssd_count_lost(set, v->count) || !ssd_recording(set))
		return;
	value_sets_write_value(&ssd_pending, set->uid, v->key.data, v->key.len, v->count);
	ssd_pending_check();
}

void
ss_disk_null_rows(SsValueSet *set)
{
	if (ssd_count_lost(set, set->null_rows) || !ssd_recording(set))
		return;
	value_sets_write_null_rows(&ssd_pending, set->uid, set->null_rows);
	ssd_pending_check();
}

void
ss_disk_kept_row(SsValueSet *set, const char *key, uint32 len, int64 count)
{
	if (ssd_count_lost(set, count) || !ssd_recording(set))
		return;
	value_sets_write_kept_row(&ssd_pending, set->uid, key, len, count);
	ssd_pending_check();
}

/* The set and its children leave the file (it failed, or goes). */
void
ss_disk_drop(SsValueSet *set)
{
	if (set->uid == 0)
		return;
	if (!ssd_whole_next)
	{
		value_sets_write_drop(&ssd_pending, set->uid);
		ssd_pending_check();
	}
	set->uid = 0;
	for (int d = 0; d < ss_nested_nchildren(set); d++)
		if (ss_nested_child(set, d) >= 0)
			ss_disk_drop(ss_sets[ss_nested_child(set, d)]);
}

/* A new top set waits to be kept on disk; one that goes no longer does. */
void
ss_disk_unsettled(SsValueSet *set, bool add)
{
	MemoryContext old;

	if (!add)
	{
		ssd_unsettled = list_delete_int(ssd_unsettled, set->id);
		return;
	}
	if (set->uid != 0)
		return;					/* restored */
	old = MemoryContextSwitchTo(ss_context);
	ssd_unsettled = lappend_int(ssd_unsettled, set->id);
	MemoryContextSwitchTo(old);
}

/* ------------------------------------------------------------- rounds */

/*
 * Whether decoding has passed where every set of the tree was read (a
 * position just past a page header counts as its page's start, where
 * decoding stops until more WAL comes).
 */
static bool
ssd_tree_caught_up(SsValueSet *set, XLogRecPtr decoded)
{
	if (set->seen_lsn > decoded &&
		!(decoded % XLOG_BLCKSZ == 0 && set->seen_lsn - decoded <= SizeOfXLogLongPHD))
		return false;
	for (int d = 0; d < ss_nested_nchildren(set); d++)
		if (ss_nested_child(set, d) >= 0 &&
			!ssd_tree_caught_up(ss_sets[ss_nested_child(set, d)], decoded))
			return false;
	return true;
}

/* The tree's sets get their ids; their filtering is over. */
static void
ssd_tree_settle(SsValueSet *set)
{
	set->uid = ssd_next_uid++;
	set->filtering = false;
	for (int d = 0; d < ss_nested_nchildren(set); d++)
		if (ss_nested_child(set, d) >= 0)
			ssd_tree_settle(ss_sets[ss_nested_child(set, d)]);
}

/* The tree as records: each set, its values, its kept rows, its children. */
static void
ssd_write_tree(ValueSetsBuffer *buf, SsValueSet *set, uint64 parent_uid, uint32 dependency)
{
	ValueSetsSetInfo info;
	dlist_iter	it;

	memset(&info, 0, sizeof(info));
	info.uid = set->uid;
	info.parent = parent_uid;
	info.dependency = dependency;
	info.level = (uint32) set->level;
	info.role = set->role;
	info.relid = set->relid;
	info.identity = set->identity;
	info.ncolumns = (uint32) set->ncolumns;
	info.attnums = set->attnums;
	info.types = set->types;
	info.nread = (uint32) set->nread;
	info.read_attnums = set->read_attnums;
	info.read_types = set->read_types;
	info.npartitions = (uint32) set->npartitions;
	info.partitions = set->partitions;
	info.null_rows = set->null_rows;
	value_sets_write_set(buf, &info);
	dlist_foreach(it, &set->values)
	{
		SsValue    *v = dlist_container(SsValue, in_set, it.cur);

		if (v->count > 0)
			value_sets_write_value(buf, set->uid, v->key.data, v->key.len, v->count);
	}
	if (set->nested == NULL)
		return;
	ss_nested_write_kept(set, buf);
	for (int d = 0; d < ss_nested_nchildren(set); d++)
		if (ss_nested_child(set, d) >= 0)
			ssd_write_tree(buf, ss_sets[ss_nested_child(set, d)], set->uid, (uint32) d);
}

/*
 * `decoded` is the round's position, which is the restored durable_lsn
 * while decoding skips up to it after a start (decoder.c): a set read in
 * this life was read past that position, so it does not settle early.
 */
void
shape_stream_sets_settle(XLogRecPtr decoded)
{
	ListCell   *lc;

	foreach(lc, ssd_unsettled)
	{
		SsValueSet *set = ss_sets[lfirst_int(lc)];

		if (set->problem != NULL)
		{
			/* failed before it settled: its shapes rotate */
			ssd_unsettled = foreach_delete_current(ssd_unsettled, lc);
			continue;
		}
		if (!ssd_tree_caught_up(set, decoded))
			continue;
		ssd_tree_settle(set);
		if (!ssd_whole_next)
		{
			ssd_write_tree(&ssd_pending, set, 0, 0);
			ssd_pending_check();
		}
		ssd_unsettled = foreach_delete_current(ssd_unsettled, lc);
	}
}

void
shape_stream_sets_round(ShapeStreamSetsRound *round)
{
	memset(round, 0, sizeof(*round));
	ssd_unwritable = false;
	ssd_in_round = false;
	round->generation = ssd_generation;
	round->length = ssd_length;
	if (!ssd_whole_next && ssd_generation != 0 &&
		ssd_length - ssd_whole_length > Max(SSD_REWRITE_MIN, 3 * ssd_whole_length))
		ssd_whole_next = true;	/* mostly changes overwritten since: rewritten */
	if (ssd_whole_next)
	{
		ValueSetsBuffer whole;
		bool		any = false;

		for (int id = 0; id < ss_nsets && !any; id++)
			any = ss_sets[id]->in_use && ss_sets[id]->uid != 0;
		if (!any && ssd_generation == 0)
			return;				/* never any: no file */
		memset(&whole, 0, sizeof(whole));
		value_sets_write_header(&whole, ssd_last_generation + 1);
		for (int id = 0; id < ss_nsets; id++)
		{
			SsValueSet *set = ss_sets[id];

			if (set->in_use && set->uid != 0 && set->parent < 0)
				ssd_write_tree(&whole, set, 0, 0);
		}
		if (whole.failed)
		{
			/* out of memory: the shapes with subqueries wait for the next round */
			value_sets_buffer_free(&whole);
			ssd_unwritable = true;
			return;
		}
		value_sets_buffer_reset(&ssd_pending);
		ssd_whole_next = false;
		ssd_last_generation++;
		round->bytes = whole.data;
		round->len = whole.len;
		round->at = 0;
		round->create = true;
		round->generation = ssd_last_generation;
		round->length = whole.len;
	}
	else if (ssd_pending.len > 0)
	{
		round->bytes = ssd_pending.data;
		round->len = ssd_pending.len;
		round->at = ssd_length;
		round->length = ssd_length + ssd_pending.len;
		memset(&ssd_pending, 0, sizeof(ssd_pending));
	}
	else
		return;
	ssd_in_round = true;
	ssd_round_whole = round->create;
	ssd_round_generation = round->generation;
	ssd_round_length = round->length;
}

static void
ssd_obsolete_add(uint32 generation)
{
	MemoryContext old;

	if (generation == 0)
		return;
	old = MemoryContextSwitchTo(TopMemoryContext);
	ssd_obsolete = list_append_unique_int(ssd_obsolete, (int) generation);
	MemoryContextSwitchTo(old);
}

void
shape_stream_sets_round_done(bool ok, bool manifest_untouched)
{
	ListCell   *lc;

	if (!ssd_in_round)
		return;
	ssd_in_round = false;
	if (!ok)
	{
		/* the bytes it appended may be torn, and those after rely on them */
		value_sets_buffer_reset(&ssd_pending);
		ssd_whole_next = true;
		if (!ssd_round_whole)
			return;
		if (manifest_untouched)
			ssd_obsolete_add(ssd_round_generation);	/* never named */
		else
		{
			/* the manifest may name it now: it goes once a later one names another */
			MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

			ssd_unsure = list_append_unique_int(ssd_unsure, (int) ssd_round_generation);
			MemoryContextSwitchTo(old);
		}
		return;
	}
	if (ssd_round_whole)
	{
		ssd_obsolete_add(ssd_generation);
		foreach(lc, ssd_unsure)
			ssd_obsolete_add((uint32) lfirst_int(lc));
		list_free(ssd_unsure);
		ssd_unsure = NIL;
		ssd_generation = ssd_round_generation;
		ssd_whole_length = ssd_round_length;
	}
	ssd_length = ssd_round_length;
}

uint32
shape_stream_sets_take_obsolete(void)
{
	uint32		generation;

	if (ssd_obsolete == NIL)
		return 0;
	generation = (uint32) linitial_int(ssd_obsolete);
	ssd_obsolete = list_delete_first(ssd_obsolete);
	return generation;
}

void
shape_stream_sets_round_cancel(ShapeStreamSetsRound *round)
{
	if (!ssd_in_round)
		return;
	ssd_in_round = false;
	if (round->create)
	{
		/* made for nothing: the next round makes it again */
		free(round->bytes);
		ssd_last_generation--;
		ssd_whole_next = true;
	}
	else if (ssd_pending.len == 0 && !ssd_whole_next)
	{
		/* its records wait for the next round */
		ssd_pending.data = round->bytes;
		ssd_pending.len = round->len;
		ssd_pending.cap = round->len;
		ssd_pending.failed = false;
	}
	else
	{
		free(round->bytes);
		value_sets_buffer_reset(&ssd_pending);
		ssd_whole_next = true;
	}
	round->bytes = NULL;
}

void
shape_stream_sets_write_whole(void)
{
	value_sets_buffer_reset(&ssd_pending);
	ssd_whole_next = true;
}

/*
 * Whether a shape with subqueries (any shape: true without) could be
 * restored as of now: its sets are kept on disk, as they will be written
 * this round, and it holds no move-in.
 */
bool
ss_subquery_kept_on_disk(const ShapeStream *s)
{
	const SsSubquery *q = s->subquery;

	if (q == NULL)
		return true;
	if (s->moving != NULL || ssd_unwritable)
		return false;
	for (int d = 0; d < q->plan->ndependencies; d++)
		if (q->sets[d] < 0 || ss_sets[q->sets[d]]->uid == 0 ||
			ss_sets[q->sets[d]]->problem != NULL)
			return false;
	return true;
}

/* ---------------------------------------------------------- restoring */

/* A value or kept row of a stored set, by set, kind and key. */
typedef struct SsdEntryKey
{
	uint64		uid;
	char		kind;			/* VALUE_SETS_VALUE or VALUE_SETS_KEPT_ROW */
	uint32		len;
	const char *data;			/* into the file's bytes */
} SsdEntryKey;

typedef struct SsdEntry
{
	SsdEntryKey key;			/* hash key */
	int64		count;
	dlist_node	node;			/* on its set's entries */
} SsdEntry;

typedef struct SsdStoredSet
{
	uint64		uid;			/* hash key */
	ValueSetsRecord set;		/* its set record, into the file's bytes */
	int64		null_rows;
	dlist_head	entries;		/* SsdEntry */
} SsdStoredSet;

/* The sets under one parent and dependency, or the tops by identity. */
typedef struct SsdFindKey
{
	uint64		parent;			/* 0: a top set, then `hash` is its identity's */
	uint32		dependency;
	uint32		hash;
} SsdFindKey;

typedef struct SsdFind
{
	SsdFindKey	key;			/* hash key */
	List	   *sets;			/* SsdStoredSet * */
} SsdFind;

static bool ssd_restoring;		/* between _restore_begin and _end */
static MemoryContext ssd_restore_context;
static HTAB *ssd_stored;		/* uid -> SsdStoredSet */
static HTAB *ssd_entries;		/* SsdEntryKey -> SsdEntry */
static HTAB *ssd_find;			/* SsdFindKey -> SsdFind */
static XLogRecPtr ssd_restore_lsn;	/* the sets' position: durable_lsn */

static uint32
ssd_entry_hash(const void *key, Size keysize)
{
	const SsdEntryKey *k = key;

	return hash_combine(hash_combine(murmurhash32((uint32) k->uid), (uint32) k->kind),
						hash_bytes((const unsigned char *) k->data, (int) k->len));
}

static int
ssd_entry_match(const void *a, const void *b, Size keysize)
{
	const SsdEntryKey *x = a;
	const SsdEntryKey *y = b;

	return x->uid == y->uid && x->kind == y->kind && x->len == y->len &&
		memcmp(x->data, y->data, x->len) == 0 ? 0 : 1;
}

static uint32
ssd_identity_hash(uint32 role, uint32 relid, const char *identity, uint32 len)
{
	return hash_combine(hash_combine(murmurhash32(role), murmurhash32(relid)),
						hash_bytes((const unsigned char *) identity, (int) len));
}

static void
ssd_drop_stored(SsdStoredSet *stored)
{
	dlist_mutable_iter it;

	dlist_foreach_modify(it, &stored->entries)
	{
		SsdEntry   *e = dlist_container(SsdEntry, node, it.cur);

		dlist_delete(&e->node);
		hash_search(ssd_entries, &e->key, HASH_REMOVE, NULL);
	}
	hash_search(ssd_stored, &stored->uid, HASH_REMOVE, NULL);
}

/* Applies one record; false when it contradicts those before it. */
static bool
ssd_apply_record(const ValueSetsRecord *rec)
{
	SsdStoredSet *stored;
	bool		found;

	if (rec->kind == VALUE_SETS_HEADER)
		return true;
	stored = hash_search(ssd_stored, &rec->uid, rec->kind == VALUE_SETS_SET ? HASH_ENTER : HASH_FIND,
						 &found);
	switch (rec->kind)
	{
		case VALUE_SETS_SET:
			if (found)
				return false;	/* a set is written once a generation */
			stored->set = *rec;
			stored->null_rows = rec->null_rows;
			dlist_init(&stored->entries);
			return true;
		case VALUE_SETS_DROP:
			if (stored != NULL)
				ssd_drop_stored(stored);
			return true;
		case VALUE_SETS_NULL_ROWS:
			if (stored == NULL)
				return false;
			stored->null_rows = rec->null_rows;
			return true;
		case VALUE_SETS_VALUE:
		case VALUE_SETS_KEPT_ROW:
			{
				SsdEntryKey key;
				SsdEntry   *e;

				if (stored == NULL)
					return false;
				memset(&key, 0, sizeof(key));
				key.uid = rec->uid;
				key.kind = (char) rec->kind;
				key.len = rec->key_len;
				key.data = rec->key;
				e = hash_search(ssd_entries, &key, rec->count > 0 ? HASH_ENTER : HASH_FIND, &found);
				if (e == NULL)
					return true;	/* gone, and not there */
				if (rec->count == 0)
				{
					dlist_delete(&e->node);
					hash_search(ssd_entries, &key, HASH_REMOVE, NULL);
					return true;
				}
				if (!found)
					dlist_push_tail(&stored->entries, &e->node);
				e->count = rec->count;
				return true;
			}
		default:
			return false;
	}
}

/* Files each stored set under its parent's, or a top's identity. */
static void
ssd_index_stored(void)
{
	HASH_SEQ_STATUS seq;
	SsdStoredSet *stored;

	hash_seq_init(&seq, ssd_stored);
	while ((stored = hash_seq_search(&seq)) != NULL)
	{
		SsdFindKey	key;
		SsdFind    *f;
		bool		found;

		memset(&key, 0, sizeof(key));
		key.parent = stored->set.parent;
		key.dependency = stored->set.dependency;
		if (stored->set.parent == 0)
			key.hash = ssd_identity_hash(stored->set.role, stored->set.relid,
										 stored->set.identity, stored->set.identity_len);
		f = hash_search(ssd_find, &key, HASH_ENTER, &found);
		if (!found)
			f->sets = NIL;
		f->sets = lappend(f->sets, stored);
	}
}

void
shape_stream_sets_restore_begin(const char *bytes, size_t len, uint32 generation,
								XLogRecPtr durable)
{
	HASHCTL		ctl;
	MemoryContext old;
	size_t		pos = 0;
	ValueSetsRecord rec;
	char		error[160];
	int			got;

	/* the manifest names this generation until the first round writes the next */
	ssd_generation = generation;
	ssd_last_generation = generation;
	ssd_length = len;
	ssd_whole_next = true;
	ssd_restoring = true;
	ssd_restore_lsn = durable;
	if (bytes == NULL)
		return;
	ssd_restore_context = AllocSetContextCreate(TopMemoryContext, "shape_sync restored value sets",
												ALLOCSET_DEFAULT_SIZES);
	old = MemoryContextSwitchTo(ssd_restore_context);
	ctl.keysize = sizeof(uint64);
	ctl.entrysize = sizeof(SsdStoredSet);
	ctl.hcxt = ssd_restore_context;
	ssd_stored = hash_create("shape_sync restored sets", 256, &ctl,
							 HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	ctl.keysize = sizeof(SsdEntryKey);
	ctl.entrysize = sizeof(SsdEntry);
	ctl.hash = ssd_entry_hash;
	ctl.match = ssd_entry_match;
	ssd_entries = hash_create("shape_sync restored values", 1024, &ctl,
							  HASH_ELEM | HASH_FUNCTION | HASH_COMPARE | HASH_CONTEXT);
	ctl.keysize = sizeof(SsdFindKey);
	ctl.entrysize = sizeof(SsdFind);
	ssd_find = hash_create("shape_sync restored set names", 256, &ctl,
						   HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	while ((got = value_sets_read(bytes, len, &pos, &rec, error, sizeof(error))) == 1)
	{
		if (rec.kind == VALUE_SETS_HEADER && rec.generation != generation)
		{
			got = -1;
			snprintf(error, sizeof(error), "it says it is generation %u, not %u",
					 rec.generation, generation);
			break;
		}
		if (rec.kind != VALUE_SETS_HEADER && rec.uid >= ssd_next_uid)
			ssd_next_uid = rec.uid + 1;
		if (!ssd_apply_record(&rec))
		{
			got = -1;
			snprintf(error, sizeof(error), "a record of set %llu contradicts those before it",
					 (unsigned long long) rec.uid);
			break;
		}
	}
	if (got < 0)
	{
		/* nothing is found then: each shape with subqueries is not restored */
		ereport(LOG,
				(errmsg("shape_sync cannot read back the value sets of its subqueries: %s", error),
				 errdetail("Shapes with subqueries are not restored; their clients get 409.")));
	}
	else
		ssd_index_stored();
	MemoryContextSwitchTo(old);
}

void
shape_stream_sets_restore_end(void)
{
	if (ssd_restore_context != NULL)
		MemoryContextDelete(ssd_restore_context);
	ssd_restore_context = NULL;
	ssd_stored = NULL;
	ssd_entries = NULL;
	ssd_find = NULL;
	ssd_restore_lsn = InvalidXLogRecPtr;
	ssd_restoring = false;
}

bool
ss_disk_restoring(void)
{
	return ssd_restoring;
}

/* The stored sets a find key names (NIL: none). */
static List *
ssd_found(uint64 parent, uint32 dependency, uint32 hash)
{
	SsdFindKey	key;
	SsdFind    *f;

	if (ssd_find == NULL)
		return NIL;
	memset(&key, 0, sizeof(key));
	key.parent = parent;
	key.dependency = dependency;
	key.hash = parent == 0 ? hash : 0;
	f = hash_search(ssd_find, &key, HASH_FIND, NULL);
	return f != NULL ? f->sets : NIL;
}

/* Whether a stored set was made for `dep` as the catalog has it now. */
static bool
ssd_matches(const SsdStoredSet *stored, const SubqueryDependency *dep, int level)
{
	const ValueSetsRecord *r = &stored->set;

	if (r->relid != dep->relid || r->role != GetUserId() || r->level != (uint32) level ||
		r->identity_len != strlen(dep->identity) ||
		memcmp(r->identity, dep->identity, r->identity_len) != 0 ||
		r->ncolumns != (uint32) dep->ncolumns || r->nread != (uint32) dep->nread)
		return false;
	for (uint32 c = 0; c < r->ncolumns; c++)
		if ((AttrNumber) (uint16) value_sets_word(r->columns, c * 2) != dep->inner_attnums[c] ||
			value_sets_word(r->columns, c * 2 + 1) != dep->types[c])
			return false;
	for (uint32 c = 0; c < r->nread; c++)
		if ((AttrNumber) (uint16) value_sets_word(r->read, c * 2) != dep->read_attnums[c] ||
			value_sets_word(r->read, c * 2 + 1) != dep->read_types[c])
			return false;
	return true;
}

/* The set's table's partitions are those it was read with. */
static void
ssd_restore_partitions(SsValueSet *set, const SsdStoredSet *stored)
{
	const ValueSetsRecord *r = &stored->set;
	Oid		   *now;
	int			nnow = 0;

	if (get_rel_relkind(set->relid) != RELKIND_PARTITIONED_TABLE)
	{
		if (r->npartitions == 0)
			return;
		now = NULL;
	}
	else
		now = ss_list_partitions(set->relid, &nnow);
	if ((uint32) nnow != r->npartitions)
		goto changed;
	for (int i = 0; i < nnow; i++)
		if (now[i] != value_sets_word(r->partitions, (uint32) i))
			goto changed;
	set->partitioned = true;
	set->npartitions = nnow;
	set->partitions = MemoryContextAlloc(set->context, sizeof(Oid) * Max(nnow, 1));
	memcpy(set->partitions, now, sizeof(Oid) * nnow);
	pfree(now);
	return;

changed:
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("partitions of a table its subquery reads were attached or detached")));
}

/* A set built from its records, with its children, indexed. */
static SsValueSet *
ssd_build(const SubqueryDependency *dep, int parent, int level, SsdStoredSet *stored)
{
	SsValueSet *set = ss_set_make(dep, parent, level);

	PG_TRY();
	{
		StringInfoData key;
		dlist_iter	it;

		ssd_restore_partitions(set, stored);
		if (dep->nested != NULL)
		{
			ss_nested_init(set, dep);
			for (int d = 0; d < dep->nested->ndependencies; d++)
			{
				const SubqueryDependency *inner = &dep->nested->dependencies[d];
				List	   *children = ssd_found(stored->uid, (uint32) d, 0);
				SsValueSet *child;

				if (list_length(children) != 1 ||
					!ssd_matches(linitial(children), inner, level + 1))
					ereport(ERROR,
							(errcode(ERRCODE_DATA_CORRUPTED),
							 errmsg("the values of a nested subquery were not kept on disk")));
				child = ssd_build(inner, set->id, level + 1, linitial(children));
				ss_nested_set_child(set, d, child->id);
			}
		}
		memset(&key, 0, sizeof(key));
		dlist_foreach(it, &stored->entries)
		{
			SsdEntry   *e = dlist_container(SsdEntry, node, it.cur);

			if (e->key.kind == VALUE_SETS_VALUE)
			{
				key.data = (char *) e->key.data;
				key.len = (int) e->key.len;
				ss_set_count(set, &key, true, e->count);
			}
			else if (set->nested != NULL)
				ss_nested_restore_row(set, e->key.data, e->key.len, e->count);
			else
				ereport(ERROR,
						(errcode(ERRCODE_DATA_CORRUPTED),
						 errmsg("a subquery without subqueries has rows kept on disk")));
		}
		set->null_rows = stored->null_rows;
		set->uid = stored->uid;
		set->resume_lsn = ssd_restore_lsn;
		set->filtering = false;
		ss_set_indexed(set);
	}
	PG_CATCH();
	{
		ss_set_destroy(set);
		PG_RE_THROW();
	}
	PG_END_TRY();
	return set;
}

/*
 * The set of a restored shape's subquery (a top set), as the value sets
 * file has it at durable_lsn; an error when it has none.
 */
SsValueSet *
ss_disk_restore_set(const SubqueryDependency *dep)
{
	List	   *candidates;
	SsdStoredSet *best = NULL;
	ListCell   *lc;

	candidates = ssd_found(0, 0, ssd_identity_hash(GetUserId(), dep->relid, dep->identity,
												   (uint32) strlen(dep->identity)));
	foreach(lc, candidates)
	{
		SsdStoredSet *stored = lfirst(lc);

		if (ssd_matches(stored, dep, 0) && (best == NULL || stored->uid > best->uid))
			best = stored;
	}
	if (best == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("the values of its subquery were not kept on disk")));
	return ssd_build(dep, -1, 0, best);
}

const char *
shape_stream_restored_problem(uint32 slot)
{
	ShapeStream *s = &ss_streams[slot];

	return s->in_use && s->subquery != NULL ? ss_subquery_problem(s) : NULL;
}
