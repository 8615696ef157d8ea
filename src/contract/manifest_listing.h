/*-------------------------------------------------------------------------
 *
 * manifest_listing.h
 *		What the manifest on disk lists, slot by slot, and the bytes that
 *		bring it up to date: a delta of what changed, or the whole of it.
 *
 * See manifest_listing.c for when the manifest is rewritten whole.
 *
 * IDENTIFICATION
 *	  src/contract/manifest_listing.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef MANIFEST_LISTING_H
#define MANIFEST_LISTING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "log_manifest.h"

/* Deltas may add up to a whole manifest's size and this much more before it is rewritten. */
#define MANIFEST_LISTING_DELTA_SLACK	((uint64_t) 64 * 1024)

typedef struct ManifestListing ManifestListing;

/* What the next manifest bytes are and where they go. */
typedef struct ManifestWrite
{
	char	   *bytes;			/* malloc'd: the caller frees */
	size_t		len;
	bool		append;			/* a delta, written at `at`; else the whole file */
	uint64_t	at;
} ManifestWrite;

/* NULL when out of memory. */
extern ManifestListing *manifest_listing_create(uint32_t nslots);
extern void manifest_listing_destroy(ManifestListing *listing);

/*
 * A round: begin (true when this round's manifest is written whole), then
 * every slot offered once, in any order, then encode, then written when
 * its bytes are in place (a whole file renamed into place, a delta
 * appended and fsynced) or lost when writing them failed or may have
 * failed: the next round then writes the whole manifest.  cancel ends a
 * round that writes no manifest (nothing of the file changed).
 */
extern bool manifest_listing_begin(ManifestListing *listing);

/*
 * The slot's extent now (its chunks not given: `now->chunks` is ignored),
 * or NULL when the manifest is not to list the slot.  Returns the index of
 * the first chunk the manifest lacks: the caller hands that chunk and each
 * after it to manifest_listing_chunk, in order, up to now->nchunks; or
 * UINT32_MAX when the manifest has the extent already (or is not to list
 * it).  False from manifest_listing_chunk when out of memory.
 */
extern uint32_t manifest_listing_offer(ManifestListing *listing, uint32_t slot,
									   const LogStoreExtent *now);
extern bool manifest_listing_chunk(ManifestListing *listing, const SlogChunk *chunk);

/* The round's bytes; false when out of memory (nothing is changed then: cancel). */
extern bool manifest_listing_encode(ManifestListing *listing, const LogStoreHeader *header,
									ManifestWrite *write);

extern void manifest_listing_written(ManifestListing *listing);
extern void manifest_listing_lost(ManifestListing *listing);
extern void manifest_listing_cancel(ManifestListing *listing);

#endif							/* MANIFEST_LISTING_H */
