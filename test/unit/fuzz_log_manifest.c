/*
 * fuzz_log_manifest.c
 *		The store's manifest and shape file decoders (log_manifest.c) on
 *		arbitrary bytes.
 *
 * Each input is decoded as it is, by both decoders, and again after its
 * frame is resealed (payload length and checksum written to match its
 * bytes, the magic and version left as they are), so that mutations reach
 * the payload parser instead of stopping at the checksum; again with each
 * of its frames resealed in place (a manifest's deltas); and once more as
 * the payload of a fresh frame of each kind.
 *
 * Oracles: a refusal comes with a sentence and leaves nothing to free; an
 * acceptance re-encodes to exactly the bytes decoded (the encoding is
 * canonical) when it had no deltas, and in any case to bytes that decode
 * again to the same values, of which any shorter prefix is refused.
 *
 * The seeds in corpus/fuzz_log_manifest/ are frames that the encoder
 * writes; built with -DFUZZ_LOG_MANIFEST_SEEDS this file is a program
 * that writes them again into the folder it is given.
 */
#include "fuzz_common.h"

#include "fnv_hash.h"
#include "log_manifest.h"

#define HEAD	16
#define TAIL	8

static bool
manifests_equal(const LogStoreManifest *a, const LogStoreManifest *b)
{
	const LogStoreHeader *x = &a->header;
	const LogStoreHeader *y = &b->header;

	if (x->system_id != y->system_id || x->timeline != y->timeline ||
		x->database_oid != y->database_oid || strcmp(x->slot, y->slot) != 0 ||
		x->fsync_policy != y->fsync_policy || strcmp(x->boot_id, y->boot_id) != 0 ||
		x->durable_lsn != y->durable_lsn || x->sets_generation != y->sets_generation ||
		x->sets_length != y->sets_length || a->nshapes != b->nshapes)
		return false;
	for (uint32_t i = 0; i < a->nshapes; i++)
	{
		const LogStoreExtent *e = &a->shapes[i];
		const LogStoreExtent *f = &b->shapes[i];

		if (strcmp(e->handle, f->handle) != 0 || e->generation != f->generation ||
			e->length != f->length || e->last.tx != f->last.tx ||
			e->last.op != f->last.op || e->nchunks != f->nchunks)
			return false;
		if (e->nchunks > 0 &&
			memcmp(e->chunks, f->chunks, e->nchunks * sizeof(SlogChunk)) != 0)
			return false;
	}
	return true;
}

static bool
texts_equal(const char *a, const char *b)
{
	if (a == NULL || b == NULL)
		return a == b;
	return strcmp(a, b) == 0;
}

static bool
shapes_equal(const LogStoreShape *a, const LogStoreShape *b)
{
	if (strcmp(a->handle, b->handle) != 0 || !texts_equal(a->identity, b->identity) ||
		!texts_equal(a->fingerprint, b->fingerprint) ||
		!texts_equal(a->schema_json, b->schema_json) ||
		!texts_equal(a->schema_name, b->schema_name) ||
		!texts_equal(a->table_name, b->table_name) ||
		!texts_equal(a->where_sql, b->where_sql) || a->ncolumns != b->ncolumns ||
		a->flags != b->flags || a->chunk_threshold != b->chunk_threshold ||
		a->snapshot_lsn != b->snapshot_lsn || a->xmin != b->xmin || a->xmax != b->xmax ||
		a->nxip != b->nxip || a->created_at_us != b->created_at_us ||
		a->snapshot_rows != b->snapshot_rows || a->snapshot_ms != b->snapshot_ms)
		return false;
	for (uint32_t i = 0; i < a->ncolumns; i++)
		if (!texts_equal(a->columns[i], b->columns[i]))
			return false;
	return a->nxip == 0 || memcmp(a->xip, b->xip, a->nxip * sizeof(uint64_t)) == 0;
}

/* Exactly n bytes in their own allocation, so that ASan sees an overread. */
static char *
exact_copy(const void *p, size_t n)
{
	char	   *c = malloc(n ? n : 1);

	FUZZ_ASSERT(c != NULL);
	if (n > 0)
		memcpy(c, p, n);
	return c;
}

static void
check_manifest(const char *bytes, size_t len)
{
	LogStoreManifest m;
	char		error[LOG_STORE_ERROR_LEN];

	error[0] = '\0';
	if (!log_manifest_decode(bytes, len, &m, error, sizeof(error)))
	{
		FUZZ_ASSERT(error[0] != '\0');
		FUZZ_ASSERT(m.shapes == NULL && m.nshapes == 0);
		log_manifest_free(&m);	/* harmless */
		return;
	}
	{
		size_t		len2 = 0;
		char	   *again = log_manifest_encode(&m, &len2);
		LogStoreManifest m2;
		char	   *cut;

		FUZZ_ASSERT(again != NULL);
		/* a manifest without deltas is its own encoding; one with them, folded, decodes the same */
		if (m.deltas == 0 && m.torn_bytes == 0)
			FUZZ_ASSERT(len2 == len && memcmp(again, bytes, len) == 0);
		else
			FUZZ_ASSERT(m.torn_bytes < len);
		FUZZ_ASSERT(log_manifest_decode(again, len2, &m2, error, sizeof(error)));
		FUZZ_ASSERT(manifests_equal(&m, &m2));
		log_manifest_free(&m2);
		cut = exact_copy(again, len2 - 1);
		FUZZ_ASSERT(!log_manifest_decode(cut, len2 - 1, &m2, error, sizeof(error)));
		free(cut);
		free(again);
	}
	log_manifest_free(&m);
	FUZZ_ASSERT(m.shapes == NULL && m.nshapes == 0);
	log_manifest_free(&m);
}

static void
check_shape(const char *bytes, size_t len)
{
	LogStoreShape s;
	char		error[LOG_STORE_ERROR_LEN];

	error[0] = '\0';
	if (!log_store_shape_decode(bytes, len, &s, error, sizeof(error)))
	{
		FUZZ_ASSERT(error[0] != '\0');
		FUZZ_ASSERT(s.identity == NULL && s.fingerprint == NULL && s.schema_json == NULL &&
					s.schema_name == NULL && s.table_name == NULL && s.where_sql == NULL &&
					s.columns == NULL && s.xip == NULL);
		log_store_shape_free(&s);
		return;
	}
	FUZZ_ASSERT(s.identity && s.fingerprint && s.schema_json && s.schema_name && s.table_name);
	{
		size_t		len2 = 0;
		char	   *again = log_store_shape_encode(&s, &len2);
		LogStoreShape s2;
		char	   *cut;

		FUZZ_ASSERT(again != NULL);
		FUZZ_ASSERT(len2 == len && memcmp(again, bytes, len) == 0);
		FUZZ_ASSERT(log_store_shape_decode(again, len2, &s2, error, sizeof(error)));
		FUZZ_ASSERT(shapes_equal(&s, &s2));
		log_store_shape_free(&s2);
		cut = exact_copy(again, len2 - 1);
		FUZZ_ASSERT(!log_store_shape_decode(cut, len2 - 1, &s2, error, sizeof(error)));
		free(cut);
		free(again);
	}
	log_store_shape_free(&s);
	log_store_shape_free(&s);
}

static void
check_both(const char *bytes, size_t len)
{
	check_manifest(bytes, len);
	check_shape(bytes, len);
}

/* Writes the payload length and the checksum that the bytes call for. */
static void
reseal(unsigned char *f, size_t len)
{
	uint32_t	payload = (uint32_t) (len - HEAD - TAIL);
	uint64_t	sum;

	for (int i = 0; i < 4; i++)
		f[12 + i] = (unsigned char) (payload >> (8 * i));
	sum = fnv_hash_bytes(FNV_HASH_START, f + 8, len - 8 - TAIL);
	for (int i = 0; i < 8; i++)
		f[len - 8 + i] = (unsigned char) (sum >> (8 * i));
}

static void
check_as_payload(const char *magic, const uint8_t *data, size_t size)
{
	size_t		len = HEAD + size + TAIL;
	unsigned char *f = malloc(len);

	FUZZ_ASSERT(f != NULL);
	memcpy(f, magic, 8);
	f[8] = LOG_STORE_FORMAT_VERSION;
	f[9] = f[10] = f[11] = 0;
	if (size > 0)
		memcpy(f + HEAD, data, size);
	reseal(f, len);
	check_both((const char *) f, len);
	free(f);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char	   *raw = exact_copy(data, size);

	/* the bytes as they are: the frame checks */
	check_both(raw, size);

	/* the same frame made whole again: the payload parser */
	if (size >= HEAD + TAIL)
	{
		reseal((unsigned char *) raw, size);
		check_both(raw, size);
	}

	/*
	 * Each frame made whole again in place, by its own payload length (the
	 * last one up to the end): a manifest's deltas reach the parser that
	 * applies them.
	 */
	memcpy(raw, data, size);
	for (size_t pos = 0; pos + HEAD + TAIL <= size;)
	{
		const unsigned char *b = (const unsigned char *) raw + pos;
		size_t		frame = HEAD + TAIL + ((size_t) b[12] | (size_t) b[13] << 8 |
										   (size_t) b[14] << 16 | (size_t) b[15] << 24);

		if (frame > size - pos || size - pos - frame < HEAD + TAIL)
			frame = size - pos;
		reseal((unsigned char *) raw + pos, frame);
		pos += frame;
	}
	if (size >= HEAD + TAIL)
		check_both(raw, size);
	free(raw);

	/* the bytes as a payload */
	if (size < (1u << 20))
	{
		check_as_payload("SSYNCMAN", data, size);
		check_as_payload("SSYNCSHP", data, size);
	}
	return 0;
}

#ifdef FUZZ_LOG_MANIFEST_SEEDS
/*
 *	gcc -DFUZZ_LOG_MANIFEST_SEEDS -I../../src/contract -I. \
 *		fuzz_log_manifest.c ../../src/contract/log_manifest.c -o /tmp/seeds &&
 *	/tmp/seeds corpus/fuzz_log_manifest
 */
static void
write_seed(const char *dir, const char *name, char *bytes, const size_t *lenp)
{
	size_t		len = *lenp;
	char		path[4096];
	FILE	   *f;
	LogStoreManifest m;
	LogStoreShape s;
	char		error[LOG_STORE_ERROR_LEN];
	bool		is_manifest;
	bool		is_shape;

	/* a seed is accepted by one decoder and round-trips */
	FUZZ_ASSERT(bytes != NULL);
	is_manifest = log_manifest_decode(bytes, len, &m, error, sizeof(error));
	is_shape = log_store_shape_decode(bytes, len, &s, error, sizeof(error));
	FUZZ_ASSERT(is_manifest != is_shape);
	log_manifest_free(&m);
	log_store_shape_free(&s);
	check_both(bytes, len);
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "wb");
	FUZZ_ASSERT(f != NULL);
	FUZZ_ASSERT(fwrite(bytes, 1, len, f) == len);
	fclose(f);
	free(bytes);
}

int
main(int argc, char **argv)
{
	LogStoreManifest m;
	LogStoreExtent e[3];
	SlogChunk	chunks[5];
	LogStoreShape s;
	char	   *columns[3] = {"id", "", "name"};
	uint64_t	xip[3] = {7001, 7003, UINT64_MAX};
	size_t		len = 0;

	if (argc != 2)
		return 2;

	memset(&m, 0, sizeof(m));
	m.header.system_id = 7311234567890123456ULL;
	m.header.timeline = 1;
	m.header.database_oid = 16384;
	strcpy(m.header.slot, "shape_sync_16384");
	m.header.fsync_policy = LOG_FSYNC_BATCH;
	strcpy(m.header.boot_id, "9f0c4e2a-51b7-4d3e-8a61-0c2f7b9d1e44");
	m.header.durable_lsn = 0x16B3748;
	write_seed(argv[1], "manifest_empty", log_manifest_encode(&m, &len), &len);

	memset(e, 0, sizeof(e));
	for (int i = 0; i < 5; i++)
	{
		chunks[i].start_pos = (uint64_t) i * 4096;
		chunks[i].end_pos = (uint64_t) i * 4096 + 4000;
		chunks[i].end_tx = i < 2 ? 0 : 0x16B0000 + i;
		chunks[i].end_op = i == 1 ? UINT64_MAX : (uint64_t) i * 2;
	}
	strcpy(e[0].handle, "12345-1700000000000000");
	e[0].last.tx = -1;
	strcpy(e[1].handle, "67890-1700000000000001");
	e[1].generation = 3;
	e[1].length = 20480;
	e[1].last.tx = 0x16B3700;
	e[1].last.op = 8;
	e[1].nchunks = 5;
	e[1].chunks = chunks;
	strcpy(e[2].handle, "1-1");
	e[2].generation = 1;
	e[2].length = 4096;
	e[2].last.op = UINT64_MAX;
	e[2].nchunks = 1;
	e[2].chunks = chunks;
	m.nshapes = 3;
	m.shapes = e;
	m.header.fsync_policy = LOG_FSYNC_OFF;
	m.header.sets_generation = 2;
	m.header.sets_length = 12288;
	write_seed(argv[1], "manifest_three_shapes", log_manifest_encode(&m, &len), &len);

	/* the same, then a delta: one shape gone, one with two chunks more, one new; then a cut one */
	{
		char	   *whole = log_manifest_encode(&m, &len);
		LogStoreDelta delta;
		LogStoreExtent changed[2];
		uint32_t	first[2] = {3, 0};
		const char *removed[1] = {"1-1"};
		size_t		dlen = 0;
		char	   *d;
		char	   *both;

		memset(&delta, 0, sizeof(delta));
		delta.header = m.header;
		delta.header.durable_lsn += 64;
		delta.header.sets_length += 640;
		delta.removed = removed;
		delta.nremoved = 1;
		changed[0] = e[1];
		changed[0].length += 8192;
		changed[0].chunks = chunks;	/* chunks 3 and 4 of 5, as if new */
		changed[0].nchunks = 5;
		changed[1] = e[2];
		strcpy(changed[1].handle, "2-2");
		delta.changed = changed;
		delta.first_chunk = first;
		delta.nchanged = 2;
		changed[0].nchunks = 5;
		d = log_manifest_delta_encode(&delta, &dlen);
		FUZZ_ASSERT(whole != NULL && d != NULL);
		both = malloc(len + dlen);
		FUZZ_ASSERT(both != NULL);
		memcpy(both, whole, len);
		memcpy(both + len, d, dlen);
		len += dlen;
		write_seed(argv[1], "manifest_with_a_delta", exact_copy(both, len), &len);
		len -= dlen / 2;
		write_seed(argv[1], "manifest_with_a_torn_delta", both, &len);
		free(whole);
		free(d);
	}

	memset(&s, 0, sizeof(s));
	strcpy(s.handle, "12345-1700000000000000");
	s.identity = "public.items|*|";
	s.fingerprint = "a3f1c9e07b2d4455";
	s.schema_json = "{\"id\":{\"type\":\"int8\",\"pk_index\":0}}";
	s.schema_name = "public";
	s.table_name = "items";
	s.chunk_threshold = 10485760;
	s.snapshot_lsn = 0x16B3748;
	s.xmin = 7000;
	s.xmax = 7000;
	s.created_at_us = 1700000000000000;
	s.snapshot_rows = 3;
	s.snapshot_ms = 12;
	write_seed(argv[1], "shape_plain", log_store_shape_encode(&s, &len), &len);

	s.where_sql = "price > $1";
	s.ncolumns = 3;
	s.columns = columns;
	s.flags = 1;
	s.chunk_threshold = -1;
	s.xmax = 7004;
	s.nxip = 3;
	s.xip = xip;
	s.snapshot_ms = -1;
	write_seed(argv[1], "shape_where_columns_xip", log_store_shape_encode(&s, &len), &len);

	s.where_sql = "";
	s.ncolumns = 0;
	s.columns = NULL;
	s.nxip = 0;
	s.xip = NULL;
	write_seed(argv[1], "shape_empty_where", log_store_shape_encode(&s, &len), &len);
	return 0;
}
#endif
