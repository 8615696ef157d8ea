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
 * to, the position up to which every commit is in them (durable_lsn), and
 * each shape's durable extent.  A data file may hold more than its extent
 * says (bytes written after the last manifest): those are cut at start.
 *
 * Both kinds of file are one frame:
 *
 *		magic (8 bytes) | format version (4) | payload length (4) |
 *		payload | FNV-1a 64 of version, length and payload (8)
 *
 * with the payload a sequence of little-endian integers and
 * length-prefixed strings.  A frame is replaced whole (written to a new
 * name and renamed over the old one), so a reader sees an old file or a
 * new one; the checksum and the length catch what a crash may still have
 * torn (a file renamed before its bytes reached the disk), and the decoder
 * refuses anything that is not exactly one frame: the caller purges then,
 * and clients get 409, never a guess.  A format version other than
 * LOG_STORE_FORMAT_VERSION is refused the same way.
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

#include "fnv_hash.h"

#ifdef POSTGRES_H
#error "log_manifest.c is plain C and must not include postgres.h"
#endif

#define MANIFEST_MAGIC		"SSYNCMAN"
#define SHAPE_MAGIC			"SSYNCSHP"
#define FRAME_HEAD			16
#define FRAME_TAIL			8
#define MAX_PAYLOAD			((uint32_t) 1 << 30)

/* ------------------------------------------------------------- writing */

typedef struct Writer
{
	char	   *data;
	size_t		len;
	size_t		cap;
	bool		failed;
} Writer;

static void
w_bytes(Writer *w, const void *p, size_t n)
{
	if (w->failed)
		return;
	if (w->len + n > w->cap)
	{
		size_t		cap = w->cap ? w->cap : 256;
		char	   *grown;

		while (cap < w->len + n)
			cap *= 2;
		grown = realloc(w->data, cap);
		if (grown == NULL)
		{
			w->failed = true;
			return;
		}
		w->data = grown;
		w->cap = cap;
	}
	memcpy(w->data + w->len, p, n);
	w->len += n;
}

static void
w_u32(Writer *w, uint32_t v)
{
	unsigned char b[4];

	for (int i = 0; i < 4; i++)
		b[i] = (unsigned char) (v >> (8 * i));
	w_bytes(w, b, 4);
}

static void
w_u64(Writer *w, uint64_t v)
{
	unsigned char b[8];

	for (int i = 0; i < 8; i++)
		b[i] = (unsigned char) (v >> (8 * i));
	w_bytes(w, b, 8);
}

/* A string, or NULL (length UINT32_MAX). */
static void
w_str(Writer *w, const char *s)
{
	if (s == NULL)
	{
		w_u32(w, UINT32_MAX);
		return;
	}
	w_u32(w, (uint32_t) strlen(s));
	w_bytes(w, s, strlen(s));
}

static void
w_begin(Writer *w, const char *magic)
{
	memset(w, 0, sizeof(*w));
	w_bytes(w, magic, 8);
	w_u32(w, LOG_STORE_FORMAT_VERSION);
	w_u32(w, 0);				/* the payload's length, set by w_finish */
}

static char *
w_finish(Writer *w, size_t *len)
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
	w_u64(w, sum);
	if (w->failed)
	{
		free(w->data);
		return NULL;
	}
	*len = w->len;
	return w->data;
}

/* ------------------------------------------------------------- reading */

typedef struct Reader
{
	const unsigned char *p;
	size_t		left;
	bool		failed;
} Reader;

static bool
r_bytes(Reader *r, void *out, size_t n)
{
	if (r->failed || r->left < n)
	{
		r->failed = true;
		memset(out, 0, n);
		return false;
	}
	memcpy(out, r->p, n);
	r->p += n;
	r->left -= n;
	return true;
}

static uint32_t
r_u32(Reader *r)
{
	unsigned char b[4];
	uint32_t	v = 0;

	r_bytes(r, b, 4);
	for (int i = 0; i < 4; i++)
		v |= (uint32_t) b[i] << (8 * i);
	return v;
}

static uint64_t
r_u64(Reader *r)
{
	unsigned char b[8];
	uint64_t	v = 0;

	r_bytes(r, b, 8);
	for (int i = 0; i < 8; i++)
		v |= (uint64_t) b[i] << (8 * i);
	return v;
}

/* A malloc'd string, or NULL when it was written as NULL or is broken. */
static char *
r_str(Reader *r)
{
	uint32_t	n = r_u32(r);
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
r_fixed(Reader *r, char *out, size_t size)
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
r_open(Reader *r, const char *bytes, size_t len, const char *magic, char *error,
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
r_close(Reader *r, char *error, size_t error_len)
{
	if (r->failed || r->left != 0)
	{
		snprintf(error, error_len, "its contents do not decode");
		return false;
	}
	return true;
}

/* ------------------------------------------------------------ manifest */

static void
w_header(Writer *w, const LogStoreHeader *h)
{
	w_u64(w, h->system_id);
	w_u32(w, h->timeline);
	w_u32(w, h->database_oid);
	w_str(w, h->slot);
	w_u32(w, h->fsync_policy);
	w_str(w, h->boot_id);
	w_u64(w, h->durable_lsn);
}

char *
log_manifest_encode(const LogStoreManifest *manifest, size_t *len)
{
	Writer		w;

	w_begin(&w, MANIFEST_MAGIC);
	w_header(&w, &manifest->header);
	w_u32(&w, manifest->nshapes);
	for (uint32_t i = 0; i < manifest->nshapes; i++)
	{
		const LogStoreExtent *e = &manifest->shapes[i];

		w_str(&w, e->handle);
		w_u32(&w, e->generation);
		w_u64(&w, e->length);
		w_u64(&w, (uint64_t) e->last.tx);
		w_u64(&w, e->last.op);
		w_u32(&w, e->nchunks);
		for (uint32_t c = 0; c < e->nchunks; c++)
		{
			w_u64(&w, e->chunks[c].start_pos);
			w_u64(&w, e->chunks[c].end_pos);
			w_u64(&w, (uint64_t) e->chunks[c].end_tx);
			w_u64(&w, e->chunks[c].end_op);
		}
	}
	return w_finish(&w, len);
}

bool
log_manifest_decode(const char *bytes, size_t len, LogStoreManifest *out,
					char *error, size_t error_len)
{
	Reader		r;
	LogStoreHeader *h = &out->header;

	memset(out, 0, sizeof(*out));
	if (!r_open(&r, bytes, len, MANIFEST_MAGIC, error, error_len))
		return false;
	h->system_id = r_u64(&r);
	h->timeline = r_u32(&r);
	h->database_oid = r_u32(&r);
	r_fixed(&r, h->slot, sizeof(h->slot));
	h->fsync_policy = r_u32(&r);
	r_fixed(&r, h->boot_id, sizeof(h->boot_id));
	h->durable_lsn = r_u64(&r);
	out->nshapes = r_u32(&r);
	/* each extent takes at least 36 bytes: no count the bytes cannot hold */
	if (!r.failed && out->nshapes > r.left / 36)
		r.failed = true;
	if (!r.failed && out->nshapes > 0)
	{
		out->shapes = calloc(out->nshapes, sizeof(LogStoreExtent));
		if (out->shapes == NULL)
			r.failed = true;
	}
	for (uint32_t i = 0; !r.failed && i < out->nshapes; i++)
	{
		LogStoreExtent *e = &out->shapes[i];

		r_fixed(&r, e->handle, sizeof(e->handle));
		e->generation = r_u32(&r);
		e->length = r_u64(&r);
		e->last.tx = (int64_t) r_u64(&r);
		e->last.op = r_u64(&r);
		e->nchunks = r_u32(&r);
		if (r.failed || e->nchunks > r.left / 32 || e->nchunks > SLOG_MAX_CHUNKS)
		{
			r.failed = true;
			e->nchunks = 0;
			break;
		}
		if (e->nchunks > 0)
		{
			e->chunks = calloc(e->nchunks, sizeof(SlogChunk));
			if (e->chunks == NULL)
			{
				r.failed = true;
				e->nchunks = 0;
				break;
			}
		}
		for (uint32_t c = 0; c < e->nchunks; c++)
		{
			e->chunks[c].start_pos = r_u64(&r);
			e->chunks[c].end_pos = r_u64(&r);
			e->chunks[c].end_tx = (int64_t) r_u64(&r);
			e->chunks[c].end_op = r_u64(&r);
		}
	}
	if (!r_close(&r, error, error_len))
	{
		log_manifest_free(out);
		return false;
	}
	return true;
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
	Writer		w;

	w_begin(&w, SHAPE_MAGIC);
	w_str(&w, s->handle);
	w_str(&w, s->identity);
	w_str(&w, s->fingerprint);
	w_str(&w, s->schema_json);
	w_str(&w, s->schema_name);
	w_str(&w, s->table_name);
	w_str(&w, s->where_sql);
	w_u32(&w, s->ncolumns);
	for (uint32_t i = 0; i < s->ncolumns; i++)
		w_str(&w, s->columns[i]);
	w_u32(&w, s->flags);
	w_u32(&w, (uint32_t) s->chunk_threshold);
	w_u64(&w, s->snapshot_lsn);
	w_u64(&w, s->xmin);
	w_u64(&w, s->xmax);
	w_u32(&w, s->nxip);
	for (uint32_t i = 0; i < s->nxip; i++)
		w_u64(&w, s->xip[i]);
	w_u64(&w, (uint64_t) s->created_at_us);
	w_u64(&w, s->snapshot_rows);
	w_u64(&w, (uint64_t) s->snapshot_ms);
	return w_finish(&w, len);
}

bool
log_store_shape_decode(const char *bytes, size_t len, LogStoreShape *out,
					   char *error, size_t error_len)
{
	Reader		r;

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
	out->ncolumns = r_u32(&r);
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
	out->flags = r_u32(&r);
	out->chunk_threshold = (int32_t) r_u32(&r);
	out->snapshot_lsn = r_u64(&r);
	out->xmin = r_u64(&r);
	out->xmax = r_u64(&r);
	out->nxip = r_u32(&r);
	if (!r.failed && out->nxip > r.left / 8)
		r.failed = true;
	if (!r.failed && out->nxip > 0)
	{
		out->xip = calloc(out->nxip, sizeof(uint64_t));
		if (out->xip == NULL)
			r.failed = true;
	}
	for (uint32_t i = 0; !r.failed && i < out->nxip; i++)
		out->xip[i] = r_u64(&r);
	out->created_at_us = (int64_t) r_u64(&r);
	out->snapshot_rows = r_u64(&r);
	out->snapshot_ms = (int64_t) r_u64(&r);
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
