/*-------------------------------------------------------------------------
 *
 * manifest_listing.c
 *		What the manifest on disk lists, slot by slot, and the bytes that
 *		bring it up to date: a delta of what changed, or the whole of it.
 *
 * Each round (pg/worker/log_rounds.c) makes the manifest say what the shape
 * logs hold now.  Written whole, that costs every shape's extent each
 * round, also when one shape of 10,000 changed.  So this file remembers,
 * per slot, what the manifest on disk says (handle, generation, length,
 * last offset, chunk count), and a round offers each slot's extent now:
 * one that equals the remembered one costs a comparison; one that differs
 * goes into a delta with only the chunks the manifest lacks (chunks are
 * only appended within a generation); a slot whose shape the manifest no
 * longer is to list, or whose slot now holds another shape, has its handle
 * removed.  The delta is appended to the manifest (log_manifest.c has the
 * frame).  Because each round compares the state now with what the file
 * says, nothing has to tell this file that a shape stopped being listed
 * (forgotten, failed, rotated, compacted): whatever leaves the listing
 * leaves the manifest at the next round.
 *
 * What is remembered changes only when the round's bytes are in place
 * (manifest_listing_written), once for each round encoded: a round begun
 * while another's outcome never came, or an outcome with no round, makes
 * the file unknown, and the next manifest whole.
 *
 * The manifest is written whole instead of appended to:
 *	- at the first round (a start: the file may end in a delta cut short,
 *	  or name shapes that were not restored),
 *	- after a round that failed or may have written part of its bytes
 *	  (manifest_listing_lost), so that no delta follows a torn one,
 *	- once the deltas add up to more than what the entries listed now
 *	  take and MANIFEST_LISTING_DELTA_SLACK, or the whole part to more
 *	  than twice that and the slack (most of its shapes have gone): a
 *	  rewrite costs at most about what the deltas since the last one
 *	  wrote (or a few times what the removals wrote), so a round costs,
 *	  amortized, a constant times what it changed, and the file stays
 *	  within a few times what a whole manifest would take now.
 *
 * Plain C, used by the worker's main thread only (no synchronization), and
 * tested in test/unit/ without a server.
 *
 * IDENTIFICATION
 *	  src/contract/manifest_listing.c
 *
 *-------------------------------------------------------------------------
 */
#include "manifest_listing.h"

#include <stdlib.h>
#include <string.h>

#ifdef POSTGRES_H
#error "manifest_listing.c is plain C and must not include postgres.h"
#endif

/* What the manifest says of one slot. */
typedef struct ListedShape
{
	bool		listed;
	char		handle[LOG_STORE_HANDLE_LEN];
	uint32_t	generation;
	uint64_t	length;
	LogOffset	last;
	uint32_t	nchunks;
} ListedShape;

/* A slot whose extent the round's manifest writes. */
typedef struct ChangedShape
{
	uint32_t	slot;
	ListedShape next;
	uint32_t	first_chunk;
	uint32_t	chunk_at;		/* its first chunk's index in the round's chunks */
	uint32_t	chunks_given;
} ChangedShape;

struct ManifestListing
{
	uint32_t	nslots;
	ListedShape *on_disk;		/* per slot, when `known` */
	bool		known;			/* on_disk and the lengths describe the file */
	uint64_t	file_len;
	uint64_t	whole_len;		/* of its first frame, the whole manifest */
	uint64_t	listed_len;		/* what on_disk's entries take in a whole manifest */

	/* the round being built, or in flight */
	bool		in_flight;		/* encoded: its outcome is still to come */
	bool		whole;
	bool		out_of_memory;
	ChangedShape *changed;
	uint32_t	nchanged;
	uint32_t	changed_cap;
	uint32_t   *removed;		/* slots whose on_disk handle goes */
	uint32_t	nremoved;
	SlogChunk  *chunks;
	uint32_t	nchunks;
	uint32_t	chunks_cap;
	size_t		encoded_len;
};

ManifestListing *
manifest_listing_create(uint32_t nslots)
{
	ManifestListing *listing = calloc(1, sizeof(ManifestListing));

	if (listing == NULL)
		return NULL;
	listing->nslots = nslots;
	listing->on_disk = calloc(nslots > 0 ? nslots : 1, sizeof(ListedShape));
	listing->removed = calloc(nslots > 0 ? nslots : 1, sizeof(uint32_t));
	if (listing->on_disk == NULL || listing->removed == NULL)
	{
		manifest_listing_destroy(listing);
		return NULL;
	}
	return listing;
}

void
manifest_listing_destroy(ManifestListing *listing)
{
	if (listing == NULL)
		return;
	free(listing->on_disk);
	free(listing->removed);
	free(listing->changed);
	free(listing->chunks);
	free(listing);
}

static void
round_reset(ManifestListing *listing)
{
	listing->in_flight = false;
	listing->nchanged = 0;
	listing->nremoved = 0;
	listing->nchunks = 0;
	listing->out_of_memory = false;
	listing->encoded_len = 0;
}

bool
manifest_listing_begin(ManifestListing *listing)
{
	uint64_t	deltas = listing->file_len - listing->whole_len;

	/* a round whose outcome never came: the file is not known any more */
	if (listing->in_flight)
		listing->known = false;
	round_reset(listing);
	/* deltas that outgrew what a whole manifest would take, or a whole part mostly stale */
	listing->whole = !listing->known ||
		deltas > listing->listed_len + MANIFEST_LISTING_DELTA_SLACK ||
		listing->whole_len > 2 * listing->listed_len + MANIFEST_LISTING_DELTA_SLACK;
	return listing->whole;
}

/* What an entry takes in a whole manifest (log_manifest.c's layout). */
static uint64_t
entry_len(const ListedShape *s)
{
	return 4 + strlen(s->handle) + 4 + 8 + 16 + 4 + (uint64_t) 32 * s->nchunks;
}

static bool
same_extent(const ListedShape *a, const LogStoreExtent *b)
{
	return a->generation == b->generation && a->length == b->length &&
		a->last.tx == b->last.tx && a->last.op == b->last.op &&
		a->nchunks == b->nchunks;
}

uint32_t
manifest_listing_offer(ManifestListing *listing, uint32_t slot, const LogStoreExtent *now)
{
	const ListedShape *was = &listing->on_disk[slot];
	bool		same_shape = false;
	uint32_t	first_chunk = 0;
	ChangedShape *c;

	if (!listing->whole && was->listed)
	{
		same_shape = now != NULL && strcmp(was->handle, now->handle) == 0;
		if (!same_shape)
			listing->removed[listing->nremoved++] = slot;
		else if (same_extent(was, now))
			return UINT32_MAX;
		else if (was->generation == now->generation && now->nchunks >= was->nchunks)
			first_chunk = was->nchunks;
	}
	if (now == NULL)
		return UINT32_MAX;
	if (listing->nchanged == listing->changed_cap)
	{
		uint32_t	cap = listing->changed_cap ? listing->changed_cap * 2 : 64;
		ChangedShape *grown = realloc(listing->changed, sizeof(ChangedShape) * cap);

		if (grown == NULL)
		{
			listing->out_of_memory = true;
			return UINT32_MAX;
		}
		listing->changed = grown;
		listing->changed_cap = cap;
	}
	c = &listing->changed[listing->nchanged++];
	memset(c, 0, sizeof(*c));
	c->slot = slot;
	c->next.listed = true;
	memcpy(c->next.handle, now->handle, sizeof(c->next.handle));
	c->next.handle[sizeof(c->next.handle) - 1] = '\0';
	c->next.generation = now->generation;
	c->next.length = now->length;
	c->next.last = now->last;
	c->next.nchunks = now->nchunks;
	c->first_chunk = first_chunk;
	c->chunk_at = listing->nchunks;
	return first_chunk;
}

bool
manifest_listing_chunk(ManifestListing *listing, const SlogChunk *chunk)
{
	if (listing->nchanged == 0 || listing->out_of_memory)
		return false;
	if (listing->nchunks == listing->chunks_cap)
	{
		uint32_t	cap = listing->chunks_cap ? listing->chunks_cap * 2 : 256;
		SlogChunk  *grown = realloc(listing->chunks, sizeof(SlogChunk) * cap);

		if (grown == NULL)
		{
			listing->out_of_memory = true;
			return false;
		}
		listing->chunks = grown;
		listing->chunks_cap = cap;
	}
	listing->chunks[listing->nchunks++] = *chunk;
	listing->changed[listing->nchanged - 1].chunks_given++;
	return true;
}

/* The extents the round writes, pointing at its chunks; NULL when out of memory. */
static LogStoreExtent *
changed_extents(ManifestListing *listing, uint32_t **first_chunks)
{
	LogStoreExtent *extents = calloc(listing->nchanged > 0 ? listing->nchanged : 1,
									 sizeof(LogStoreExtent));
	uint32_t   *firsts = calloc(listing->nchanged > 0 ? listing->nchanged : 1,
								sizeof(uint32_t));

	if (extents == NULL || firsts == NULL)
	{
		free(extents);
		free(firsts);
		return NULL;
	}
	for (uint32_t i = 0; i < listing->nchanged; i++)
	{
		const ChangedShape *c = &listing->changed[i];
		LogStoreExtent *e = &extents[i];

		memcpy(e->handle, c->next.handle, sizeof(e->handle));
		e->generation = c->next.generation;
		e->length = c->next.length;
		e->last = c->next.last;
		e->nchunks = c->next.nchunks;
		e->chunks = listing->chunks != NULL ? listing->chunks + c->chunk_at : NULL;
		firsts[i] = c->first_chunk;
	}
	*first_chunks = firsts;
	return extents;
}

bool
manifest_listing_encode(ManifestListing *listing, const LogStoreHeader *header,
						ManifestWrite *write)
{
	LogStoreExtent *extents;
	uint32_t   *first_chunks = NULL;

	memset(write, 0, sizeof(*write));
	if (listing->out_of_memory)
		return false;
	/* every changed extent got the chunks it lacks, no more, no fewer */
	for (uint32_t i = 0; i < listing->nchanged; i++)
	{
		const ChangedShape *c = &listing->changed[i];

		if (c->chunks_given != c->next.nchunks - c->first_chunk)
			return false;
	}
	extents = changed_extents(listing, &first_chunks);
	if (extents == NULL)
		return false;
	if (listing->whole)
	{
		LogStoreManifest manifest;

		memset(&manifest, 0, sizeof(manifest));
		manifest.header = *header;
		manifest.nshapes = listing->nchanged;
		manifest.shapes = extents;
		write->bytes = log_manifest_encode(&manifest, &write->len);
	}
	else
	{
		LogStoreDelta delta;
		const char **removed = calloc(listing->nremoved > 0 ? listing->nremoved : 1,
									  sizeof(char *));

		if (removed != NULL)
		{
			for (uint32_t i = 0; i < listing->nremoved; i++)
				removed[i] = listing->on_disk[listing->removed[i]].handle;
			memset(&delta, 0, sizeof(delta));
			delta.header = *header;
			delta.nremoved = listing->nremoved;
			delta.removed = removed;
			delta.nchanged = listing->nchanged;
			delta.changed = extents;
			delta.first_chunk = first_chunks;
			write->bytes = log_manifest_delta_encode(&delta, &write->len);
			write->append = true;
			write->at = listing->file_len;
		}
		free(removed);
	}
	free(extents);
	free(first_chunks);
	listing->encoded_len = write->bytes != NULL ? write->len : 0;
	listing->in_flight = write->bytes != NULL;
	return write->bytes != NULL;
}

void
manifest_listing_written(ManifestListing *listing)
{
	if (!listing->in_flight)
	{
		/* no round's bytes to be in place: what the file holds is not known */
		manifest_listing_lost(listing);
		return;
	}
	if (listing->whole)
	{
		memset(listing->on_disk, 0, sizeof(ListedShape) * listing->nslots);
		listing->file_len = listing->whole_len = listing->encoded_len;
		listing->listed_len = 0;
	}
	else
		listing->file_len += listing->encoded_len;
	for (uint32_t i = 0; i < listing->nremoved; i++)
	{
		ListedShape *was = &listing->on_disk[listing->removed[i]];

		listing->listed_len -= entry_len(was);
		was->listed = false;
	}
	for (uint32_t i = 0; i < listing->nchanged; i++)
	{
		ListedShape *was = &listing->on_disk[listing->changed[i].slot];

		if (was->listed)
			listing->listed_len -= entry_len(was);
		*was = listing->changed[i].next;
		listing->listed_len += entry_len(was);
	}
	listing->known = true;
	round_reset(listing);
}

void
manifest_listing_lost(ManifestListing *listing)
{
	listing->known = false;
	round_reset(listing);
}

void
manifest_listing_cancel(ManifestListing *listing)
{
	round_reset(listing);
}
