/*-------------------------------------------------------------------------
 *
 * log_manifest.c
 *		The files that keep shape logs across restarts: what they hold and
 *		how their bytes are checked.
 *
 * The store ($PGDATA/pg_shape_sync, see pg/worker/log_files.c) holds, for
 * each shape, a data file that is byte for byte the log in shared memory
 * (records as log_record.h and shape_log.h lay them out) and a shape file
 * (LogStoreShape) written once; and one manifest for all shapes: the
 * header naming the cluster, timeline, slot and database the logs belong
 * to, the position up to which every commit is in them (durable_lsn), the
 * generation and length of the value sets file of subquery shapes
 * (pg_shape_sync/sets.<generation>, see pg/worker/shape_stream_sets_disk.c;
 * generation 0: none), and each shape's durable extent.  A data file, or
 * the value sets file, may hold more than the manifest says (bytes written
 * after the last manifest): those are cut at start.
 *
 * Both kinds of file are one frame:
 *
 *		magic (8 bytes) | format version (4) | payload length (4) |
 *		payload | FNV-1a 64 of version, length and payload (8)
 *
 * with the payload a sequence of little-endian integers and
 * length-prefixed strings.  A file is replaced whole (written to a new
 * name and renamed over the old one), so a reader sees an old file or a
 * new one; the checksum and the length catch what a crash may still have
 * torn (a file renamed before its bytes reached the disk), and the decoder
 * refuses a shape file or a manifest frame that is not exactly one frame:
 * the caller purges then, and clients get 409, never a guess.  A format
 * version other than LOG_STORE_FORMAT_VERSION is refused the same way.
 *
 * Deltas.  Rewriting the whole manifest every round would cost every
 * round what all shapes' extents take (a megabyte beside 10,000 shapes),
 * so a round appends to it instead a delta frame (magic SSYNCDLT): the
 * header now, the handles no longer listed, and each changed extent with
 * the chunks it gained only (the index of its first new chunk; a new
 * generation, or a shape listed anew, starts at 0).  Chunks are only ever
 * appended within a generation, which the decoder checks.  The decoder
 * applies the deltas in order; the first one that is not a whole frame
 * ends them (the append a crash cut short: the writer, manifest_listing.c,
 * rewrites the manifest whole after a start or any failed round, so
 * nothing that a confirmed round wrote follows such a frame; a whole
 * delta after it means damage, and the manifest is refused), and what it
 * returns is the state after the last whole one, as after a crash just
 * then.  A whole delta that removes a shape it does not list, or extends
 * chunks of another generation, is corruption: the manifest is refused.
 *
 * Plain C: the worker calls it, and test/unit/ tests it without a server.
 *
 * IDENTIFICATION
 *	  src/contract/log_manifest.c
 *
 *-------------------------------------------------------------------------
 */
#include "log_manifest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "byte_codec.h"
#include "fnv_hash.h"

#ifdef POSTGRES_H
#error "log_manifest.c is plain C and must not include postgres.h"
#endif

#define MANIFEST_MAGIC		"SSYNCMAN"
#define DELTA_MAGIC			"SSYNCDLT"
#define SHAPE_MAGIC			"SSYNCSHP"
#define FRAME_HEAD			16
#define FRAME_TAIL			8
#define MAX_PAYLOAD			((uint32_t) 1 << 30)

/* ------------------------------------------------------------- writing */

/* A string, or NULL (length UINT32_MAX). */
static void
w_str(ByteWriter *w, const char *s)
{
	if (s == NULL)
	{
		byte_put_u32(w, UINT32_MAX);
		return;
	}
	byte_put_u32(w, (uint32_t) strlen(s));
	byte_put(w, s, strlen(s));
}

static void
w_begin(ByteWriter *w, const char *magic)
{
	memset(w, 0, sizeof(*w));
	byte_put(w, magic, 8);
	byte_put_u32(w, LOG_STORE_FORMAT_VERSION);
	byte_put_u32(w, 0);				/* the payload's length, set by w_finish */
}

static char *
w_finish(ByteWriter *w, size_t *len)
{
	uint64_t	payload = w->len - FRAME_HEAD;
	uint64_t	sum;

	if (!w->failed && payload >= MAX_PAYLOAD)
		w->failed = true;
	if (w->failed)
	{
		free(w->data);
		return NULL;
	}
	for (int i = 0; i < 4; i++)
		w->data[12 + i] = (char) (payload >> (8 * i));
	sum = fnv_hash_bytes(FNV_HASH_START, w->data + 8, w->len - 8);
	byte_put_u64(w, sum);
	if (w->failed)
	{
		free(w->data);
		return NULL;
	}
	*len = w->len;
	return w->data;
}

/* ------------------------------------------------------------- reading */

/* A malloc'd string, or NULL when it was written as NULL or is broken. */
static char *
r_str(ByteReader *r)
{
	uint32_t	n = byte_get_u32(r);
	char	   *s;

	if (r->failed || n == UINT32_MAX)
		return NULL;
	if (n > r->left || memchr(r->p, '\0', n) != NULL)
	{
		r->failed = true;
		return NULL;
	}
	s = malloc((size_t) n + 1);
	if (s == NULL)
	{
		r->failed = true;
		return NULL;
	}
	memcpy(s, r->p, n);
	s[n] = '\0';
	r->p += n;
	r->left -= n;
	return s;
}

/* A string into a fixed buffer: it must fit. */
static void
r_fixed(ByteReader *r, char *out, size_t size)
{
	char	   *s = r_str(r);

	if (s == NULL || strlen(s) >= size)
		r->failed = true;
	else
		strcpy(out, s);
	free(s);
}

/* Checks the frame and points `r` at its payload. */
static bool
r_open(ByteReader *r, const char *bytes, size_t len, const char *magic, char *error,
	   size_t error_len)
{
	const unsigned char *b = (const unsigned char *) bytes;
	uint32_t	version = 0;
	uint32_t	payload = 0;
	uint64_t	sum = 0;

	if (len < FRAME_HEAD + FRAME_TAIL || memcmp(bytes, magic, 8) != 0)
	{
		snprintf(error, error_len, "it is not a shape_sync store file");
		return false;
	}
	for (int i = 0; i < 4; i++)
	{
		version |= (uint32_t) b[8 + i] << (8 * i);
		payload |= (uint32_t) b[12 + i] << (8 * i);
	}
	if (version != LOG_STORE_FORMAT_VERSION)
	{
		snprintf(error, error_len, "it has format version %u, not %u", version,
				 LOG_STORE_FORMAT_VERSION);
		return false;
	}
	if ((uint64_t) payload + FRAME_HEAD + FRAME_TAIL != len)
	{
		snprintf(error, error_len, "it is %zu bytes long, not %llu", len,
				 (unsigned long long) payload + FRAME_HEAD + FRAME_TAIL);
		return false;
	}
	for (int i = 0; i < 8; i++)
		sum |= (uint64_t) b[len - 8 + i] << (8 * i);
	if (sum != fnv_hash_bytes(FNV_HASH_START, bytes + 8, len - 8 - FRAME_TAIL))
	{
		snprintf(error, error_len, "its checksum does not match its contents");
		return false;
	}
	r->p = b + FRAME_HEAD;
	r->left = payload;
	r->failed = false;
	return true;
}

static bool
r_close(ByteReader *r, char *error, size_t error_len)
{
	if (r->failed || r->left != 0)
	{
		snprintf(error, error_len, "its contents do not decode");
		return false;
	}
	return true;
}

/* ------------------------------------------------------------ manifest */

static inline uint32_t
Min32(uint32_t a, uint32_t b)
{
	return a < b ? a : b;
}

static void
w_header(ByteWriter *w, const LogStoreHeader *h)
{
	byte_put_u64(w, h->system_id);
	byte_put_u32(w, h->timeline);
	byte_put_u32(w, h->database_oid);
	w_str(w, h->slot);
	byte_put_u32(w, h->fsync_policy);
	w_str(w, h->boot_id);
	byte_put_u64(w, h->durable_lsn);
	byte_put_u32(w, h->sets_generation);
	byte_put_u64(w, h->sets_length);
}

static void
w_extent(ByteWriter *w, const LogStoreExtent *e, uint32_t first_chunk)
{
	w_str(w, e->handle);
	byte_put_u32(w, e->generation);
	byte_put_u64(w, e->length);
	byte_put_u64(w, (uint64_t) e->last.tx);
	byte_put_u64(w, e->last.op);
	byte_put_u32(w, e->nchunks);
	for (uint32_t c = first_chunk; c < e->nchunks; c++)
	{
		const SlogChunk *chunk = &e->chunks[c - first_chunk];

		byte_put_u64(w, chunk->start_pos);
		byte_put_u64(w, chunk->end_pos);
		byte_put_u64(w, (uint64_t) chunk->end_tx);
		byte_put_u64(w, chunk->end_op);
	}
}

char *
log_manifest_encode(const LogStoreManifest *manifest, size_t *len)
{
	ByteWriter		w;

	w_begin(&w, MANIFEST_MAGIC);
	w_header(&w, &manifest->header);
	byte_put_u32(&w, manifest->nshapes);
	for (uint32_t i = 0; i < manifest->nshapes; i++)
		w_extent(&w, &manifest->shapes[i], 0);
	return w_finish(&w, len);
}

char *
log_manifest_delta_encode(const LogStoreDelta *delta, size_t *len)
{
	ByteWriter		w;

	w_begin(&w, DELTA_MAGIC);
	w_header(&w, &delta->header);
	byte_put_u32(&w, delta->nremoved);
	for (uint32_t i = 0; i < delta->nremoved; i++)
		w_str(&w, delta->removed[i]);
	byte_put_u32(&w, delta->nchanged);
	for (uint32_t i = 0; i < delta->nchanged; i++)
	{
		const LogStoreExtent *e = &delta->changed[i];

		if (delta->first_chunk[i] > e->nchunks)
			w.failed = true;
		byte_put_u32(&w, delta->first_chunk[i]);
		w_extent(&w, e, Min32(delta->first_chunk[i], e->nchunks));
	}
	return w_finish(&w, len);
}

static void
r_header(ByteReader *r, LogStoreHeader *h)
{
	h->system_id = byte_get_u64(r);
	h->timeline = byte_get_u32(r);
	h->database_oid = byte_get_u32(r);
	r_fixed(r, h->slot, sizeof(h->slot));
	h->fsync_policy = byte_get_u32(r);
	r_fixed(r, h->boot_id, sizeof(h->boot_id));
	h->durable_lsn = byte_get_u64(r);
	h->sets_generation = byte_get_u32(r);
	h->sets_length = byte_get_u64(r);
}

/*
 * An extent, its chunks from `first_chunk` on read into chunks[first_chunk
 * ...] of `e`, whose array is grown to hold them: e->chunks must hold
 * first_chunk entries already.
 */
static void
r_extent(ByteReader *r, LogStoreExtent *e, uint32_t first_chunk)
{
	uint32_t	nchunks;
	SlogChunk  *grown;

	r_fixed(r, e->handle, sizeof(e->handle));
	e->generation = byte_get_u32(r);
	e->length = byte_get_u64(r);
	e->last.tx = (int64_t) byte_get_u64(r);
	e->last.op = byte_get_u64(r);
	nchunks = byte_get_u32(r);
	/* no count the bytes cannot hold */
	if (r->failed || nchunks < first_chunk || nchunks > SLOG_MAX_CHUNKS ||
		nchunks - first_chunk > r->left / 32)
	{
		r->failed = true;
		return;
	}
	if (nchunks > 0)
	{
		grown = realloc(e->chunks, sizeof(SlogChunk) * nchunks);
		if (grown == NULL)
		{
			r->failed = true;
			return;
		}
		e->chunks = grown;
	}
	for (uint32_t c = first_chunk; c < nchunks; c++)
	{
		memset(&e->chunks[c], 0, sizeof(SlogChunk));
		e->chunks[c].start_pos = byte_get_u64(r);
		e->chunks[c].end_pos = byte_get_u64(r);
		e->chunks[c].end_tx = (int64_t) byte_get_u64(r);
		e->chunks[c].end_op = byte_get_u64(r);
	}
	e->nchunks = nchunks;
}

/*
 * Where each handle of a manifest being decoded is, for the deltas:
 * open addressing over shapes[] indexes (-1: empty), never deleted from
 * (a removed shape stays in shapes[], marked, until the end).
 */
typedef struct HandleIndex
{
	int32_t    *slots;
	uint32_t	mask;
} HandleIndex;

static uint32_t
handle_hash(const char *handle)
{
	return (uint32_t) fnv_hash_bytes(FNV_HASH_START, handle, strlen(handle));
}

static bool
index_build(HandleIndex *ix, const LogStoreExtent *shapes, uint32_t n)
{
	uint32_t	cap = 16;

	while (cap < (uint64_t) n * 2 + 2)
		cap *= 2;
	free(ix->slots);
	ix->slots = malloc(sizeof(int32_t) * cap);
	if (ix->slots == NULL)
		return false;
	memset(ix->slots, 0xff, sizeof(int32_t) * cap);
	ix->mask = cap - 1;
	for (uint32_t i = 0; i < n; i++)
	{
		uint32_t	h = handle_hash(shapes[i].handle) & ix->mask;

		while (ix->slots[h] >= 0)
			h = (h + 1) & ix->mask;
		ix->slots[h] = (int32_t) i;
	}
	return true;
}

/* The index in shapes[] of `handle`, or -1; *at is where it would go. */
static int32_t
index_find(const HandleIndex *ix, const LogStoreExtent *shapes, const char *handle,
		   uint32_t *at)
{
	uint32_t	h = handle_hash(handle) & ix->mask;

	while (ix->slots[h] >= 0 && strcmp(shapes[ix->slots[h]].handle, handle) != 0)
		h = (h + 1) & ix->mask;
	*at = h;
	return ix->slots[h];
}

/* A manifest being decoded: its shapes, some removed, and their index. */
typedef struct Decoding
{
	LogStoreManifest *out;
	uint32_t	cap;
	bool	   *removed;		/* per shapes[] entry */
	HandleIndex index;
} Decoding;

/* Applies one delta frame's payload; false when its bytes or its changes do not fit. */
static bool
apply_delta(Decoding *d, ByteReader *r)
{
	LogStoreManifest *out = d->out;
	uint32_t	n;
	char		handle[LOG_STORE_HANDLE_LEN];
	uint32_t	at;

	r_header(r, &out->header);
	n = byte_get_u32(r);
	if (r->failed || n > r->left / 4)
		return false;
	for (uint32_t i = 0; i < n; i++)
	{
		int32_t		found;

		r_fixed(r, handle, sizeof(handle));
		if (r->failed)
			return false;
		found = index_find(&d->index, out->shapes, handle, &at);
		if (found < 0 || d->removed[found])
			return false;		/* removes what it does not have */
		d->removed[found] = true;
	}
	n = byte_get_u32(r);
	if (r->failed || n > r->left / 36)
		return false;
	for (uint32_t i = 0; i < n; i++)
	{
		uint32_t	first_chunk = byte_get_u32(r);
		size_t		mark_left = r->left;
		const unsigned char *mark = r->p;
		int32_t		found;
		LogStoreExtent *e;

		/* the handle first, to find the shape it changes */
		r_fixed(r, handle, sizeof(handle));
		if (r->failed)
			return false;
		r->p = mark;
		r->left = mark_left;
		found = index_find(&d->index, out->shapes, handle, &at);
		if (found < 0)
		{
			if (out->nshapes == d->cap)
			{
				uint32_t	cap = d->cap ? d->cap * 2 : 16;
				LogStoreExtent *shapes = realloc(out->shapes, sizeof(LogStoreExtent) * cap);
				bool	   *removed;

				if (shapes == NULL)
					return false;
				out->shapes = shapes;
				removed = realloc(d->removed, sizeof(bool) * cap);
				if (removed == NULL)
					return false;
				d->removed = removed;
				d->cap = cap;
			}
			found = (int32_t) out->nshapes++;
			memset(&out->shapes[found], 0, sizeof(LogStoreExtent));
			memcpy(out->shapes[found].handle, handle, sizeof(handle));	/* for the index */
			d->removed[found] = true;	/* until it is read whole */
			if ((uint64_t) out->nshapes * 2 + 2 > (uint64_t) d->index.mask + 1)
			{
				if (!index_build(&d->index, out->shapes, out->nshapes))
					return false;
			}
			else
				d->index.slots[at] = found;
		}
		e = &out->shapes[found];
		/* chunks are kept only within one generation of a listed shape */
		if (first_chunk > 0 &&
			(d->removed[found] || first_chunk > e->nchunks))
			return false;
		{
			uint32_t	generation = e->generation;

			r_extent(r, e, first_chunk);
			if (r->failed || (first_chunk > 0 && e->generation != generation))
				return false;
		}
		d->removed[found] = false;
	}
	return !r->failed && r->left == 0;
}

/*
 * The frame at the start of `bytes` if it is a whole, unchanged frame of
 * this version with that magic: its length, or 0.
 */
static size_t
frame_at(const char *bytes, size_t len, const char *magic)
{
	const unsigned char *b = (const unsigned char *) bytes;
	uint32_t	version = 0;
	uint32_t	payload = 0;
	uint64_t	sum = 0;
	size_t		frame;

	if (len < FRAME_HEAD + FRAME_TAIL || memcmp(bytes, magic, 8) != 0)
		return 0;
	for (int i = 0; i < 4; i++)
	{
		version |= (uint32_t) b[8 + i] << (8 * i);
		payload |= (uint32_t) b[12 + i] << (8 * i);
	}
	frame = (size_t) payload + FRAME_HEAD + FRAME_TAIL;
	if (version != LOG_STORE_FORMAT_VERSION || frame > len)
		return 0;
	for (int i = 0; i < 8; i++)
		sum |= (uint64_t) b[frame - 8 + i] << (8 * i);
	if (sum != fnv_hash_bytes(FNV_HASH_START, bytes + 8, frame - 8 - FRAME_TAIL))
		return 0;
	return frame;
}

bool
log_manifest_decode(const char *bytes, size_t len, LogStoreManifest *out,
					char *error, size_t error_len)
{
	ByteReader		r;
	Decoding	d;
	size_t		base = len;
	size_t		pos;
	uint32_t	kept = 0;

	memset(out, 0, sizeof(*out));
	memset(&d, 0, sizeof(d));
	d.out = out;
	/* the whole manifest: its frame, which deltas may follow */
	if (len >= FRAME_HEAD + FRAME_TAIL && memcmp(bytes, MANIFEST_MAGIC, 8) == 0)
	{
		const unsigned char *b = (const unsigned char *) bytes;
		uint32_t	payload = 0;

		for (int i = 0; i < 4; i++)
			payload |= (uint32_t) b[12 + i] << (8 * i);
		if ((uint64_t) payload + FRAME_HEAD + FRAME_TAIL < len)
			base = (size_t) payload + FRAME_HEAD + FRAME_TAIL;
	}
	if (!r_open(&r, bytes, base, MANIFEST_MAGIC, error, error_len))
		return false;
	r_header(&r, &out->header);
	out->nshapes = byte_get_u32(&r);
	/* each extent takes at least 36 bytes: no count the bytes cannot hold */
	if (!r.failed && out->nshapes > r.left / 36)
		r.failed = true;
	if (!r.failed)
	{
		d.cap = out->nshapes > 0 ? out->nshapes : 1;
		out->shapes = calloc(d.cap, sizeof(LogStoreExtent));
		d.removed = calloc(d.cap, sizeof(bool));
		if (out->shapes == NULL || d.removed == NULL)
			r.failed = true;
	}
	for (uint32_t i = 0; !r.failed && i < out->nshapes; i++)
		r_extent(&r, &out->shapes[i], 0);
	if (!r_close(&r, error, error_len))
		goto fail;

	/*
	 * The deltas, in order.  One that is not a whole frame ends them: the
	 * last append, cut short by a crash (the writer starts a whole
	 * manifest after any failure or start, so nothing a round confirmed
	 * follows it).  A whole frame whose changes do not fit is corruption.
	 */
	if (base < len && !index_build(&d.index, out->shapes, out->nshapes))
	{
		snprintf(error, error_len, "out of memory");
		goto fail;
	}
	for (pos = base; pos < len;)
	{
		size_t		frame = frame_at(bytes + pos, len - pos, DELTA_MAGIC);

		if (frame == 0)
		{
			/* torn, not damaged: no whole delta may follow */
			for (size_t at = pos + 1; at + 8 <= len; at++)
				if (bytes[at] == DELTA_MAGIC[0] &&
					frame_at(bytes + at, len - at, DELTA_MAGIC) != 0)
				{
					snprintf(error, error_len,
							 "a whole change at byte %zu follows bytes at byte %zu that are not one",
							 at, pos);
					goto fail;
				}
			out->torn_bytes = len - pos;
			break;
		}
		r.p = (const unsigned char *) bytes + pos + FRAME_HEAD;
		r.left = frame - FRAME_HEAD - FRAME_TAIL;
		r.failed = false;
		if (!apply_delta(&d, &r))
		{
			snprintf(error, error_len, "its change %u at byte %zu does not apply",
					 out->deltas + 1, pos);
			goto fail;
		}
		out->deltas++;
		pos += frame;
	}
	/* the shapes a delta removed go; nothing is allocated for nothing */
	for (uint32_t i = 0; i < out->nshapes; i++)
	{
		LogStoreExtent *e = &out->shapes[i];

		if (d.removed[i] || e->nchunks == 0)
		{
			free(e->chunks);
			e->chunks = NULL;
		}
		if (!d.removed[i])
			out->shapes[kept++] = *e;
	}
	out->nshapes = kept;
	if (kept == 0)
	{
		free(out->shapes);
		out->shapes = NULL;
	}
	free(d.removed);
	free(d.index.slots);
	return true;

fail:
	free(d.removed);
	free(d.index.slots);
	if (out->shapes != NULL && out->nshapes > d.cap)
		out->nshapes = d.cap;
	log_manifest_free(out);
	return false;
}

void
log_manifest_free(LogStoreManifest *manifest)
{
	if (manifest->shapes != NULL)
	{
		for (uint32_t i = 0; i < manifest->nshapes; i++)
			free(manifest->shapes[i].chunks);
		free(manifest->shapes);
	}
	manifest->shapes = NULL;
	manifest->nshapes = 0;
}

const char *
log_store_header_mismatch(const LogStoreHeader *stored, const LogStoreHeader *now)
{
	/* the value sets file's generation and length are not about the cluster */
	if (stored->system_id != now->system_id)
		return "the system identifier";
	if (stored->timeline != now->timeline)
		return "the timeline";
	if (stored->database_oid != now->database_oid)
		return "the database";
	if (strcmp(stored->slot, now->slot) != 0)
		return "the replication slot";
	/* written without fsync, they may have lost bytes in an operating system crash */
	if (stored->fsync_policy == LOG_FSYNC_OFF && strcmp(stored->boot_id, now->boot_id) != 0)
		return "the operating system's boot (the files were written with \"shape_sync.log_fsync\" off)";
	return NULL;
}

/* -------------------------------------------------------------- shapes */

char *
log_store_shape_encode(const LogStoreShape *s, size_t *len)
{
	ByteWriter		w;

	w_begin(&w, SHAPE_MAGIC);
	w_str(&w, s->handle);
	w_str(&w, s->identity);
	w_str(&w, s->fingerprint);
	w_str(&w, s->schema_json);
	w_str(&w, s->schema_name);
	w_str(&w, s->table_name);
	w_str(&w, s->where_sql);
	byte_put_u32(&w, s->ncolumns);
	for (uint32_t i = 0; i < s->ncolumns; i++)
		w_str(&w, s->columns[i]);
	byte_put_u32(&w, s->flags);
	byte_put_u32(&w, (uint32_t) s->chunk_threshold);
	byte_put_u64(&w, s->snapshot_lsn);
	byte_put_u64(&w, s->xmin);
	byte_put_u64(&w, s->xmax);
	byte_put_u32(&w, s->nxip);
	for (uint32_t i = 0; i < s->nxip; i++)
		byte_put_u64(&w, s->xip[i]);
	byte_put_u64(&w, (uint64_t) s->created_at_us);
	byte_put_u64(&w, s->snapshot_rows);
	byte_put_u64(&w, (uint64_t) s->snapshot_ms);
	return w_finish(&w, len);
}

bool
log_store_shape_decode(const char *bytes, size_t len, LogStoreShape *out,
					   char *error, size_t error_len)
{
	ByteReader		r;

	memset(out, 0, sizeof(*out));
	if (!r_open(&r, bytes, len, SHAPE_MAGIC, error, error_len))
		return false;
	r_fixed(&r, out->handle, sizeof(out->handle));
	out->identity = r_str(&r);
	out->fingerprint = r_str(&r);
	out->schema_json = r_str(&r);
	out->schema_name = r_str(&r);
	out->table_name = r_str(&r);
	out->where_sql = r_str(&r);
	out->ncolumns = byte_get_u32(&r);
	if (!r.failed && out->ncolumns > r.left / 4)
		r.failed = true;
	if (!r.failed && out->ncolumns > 0)
	{
		out->columns = calloc(out->ncolumns, sizeof(char *));
		if (out->columns == NULL)
			r.failed = true;
	}
	for (uint32_t i = 0; !r.failed && i < out->ncolumns; i++)
	{
		out->columns[i] = r_str(&r);
		if (out->columns[i] == NULL)
			r.failed = true;
	}
	out->flags = byte_get_u32(&r);
	out->chunk_threshold = (int32_t) byte_get_u32(&r);
	out->snapshot_lsn = byte_get_u64(&r);
	out->xmin = byte_get_u64(&r);
	out->xmax = byte_get_u64(&r);
	out->nxip = byte_get_u32(&r);
	if (!r.failed && out->nxip > r.left / 8)
		r.failed = true;
	if (!r.failed && out->nxip > 0)
	{
		out->xip = calloc(out->nxip, sizeof(uint64_t));
		if (out->xip == NULL)
			r.failed = true;
	}
	for (uint32_t i = 0; !r.failed && i < out->nxip; i++)
		out->xip[i] = byte_get_u64(&r);
	out->created_at_us = (int64_t) byte_get_u64(&r);
	out->snapshot_rows = byte_get_u64(&r);
	out->snapshot_ms = (int64_t) byte_get_u64(&r);
	/* a shape always names its table and has the texts it is checked by */
	if (!r.failed && (out->identity == NULL || out->fingerprint == NULL ||
					  out->schema_json == NULL || out->schema_name == NULL ||
					  out->table_name == NULL))
		r.failed = true;
	if (!r_close(&r, error, error_len))
	{
		log_store_shape_free(out);
		return false;
	}
	return true;
}

void
log_store_shape_free(LogStoreShape *s)
{
	free(s->identity);
	free(s->fingerprint);
	free(s->schema_json);
	free(s->schema_name);
	free(s->table_name);
	free(s->where_sql);
	if (s->columns != NULL)
		for (uint32_t i = 0; i < s->ncolumns; i++)
			free(s->columns[i]);
	free(s->columns);
	free(s->xip);
	memset(s, 0, sizeof(*s));
}
