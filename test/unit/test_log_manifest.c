/*
 * test_log_manifest.c
 *		The store's manifest and shape files (src/contract/log_manifest.c):
 *		round trips, the byte layout, and refusal of every file that is not
 *		exactly one unchanged frame of this format version.
 *
 * Frames that the encoder would never write (absurd counts, NULs inside
 * strings, over-long fixed strings) are built here by hand, with a correct
 * checksum, so that the payload parser itself is what refuses them.
 *
 * Inputs are always handed to the decoders in malloc'd buffers of exactly
 * their length, so that ASan reports a read past the end.  Under ASan an
 * allocation above 512 MiB aborts (see __asan_default_options below): a
 * decoder that trusts an absurd count is caught there, not left to the
 * kernel's overcommit policy.
 */
#include "unit.h"

#include "fnv_hash.h"
#include "hand_bytes.h"
#include "log_manifest.h"

/* Used only by ASan builds; harmless elsewhere. */
__attribute__((used, visibility("default"))) const char *__asan_default_options(void);
const char *
__asan_default_options(void)
{
	return "max_allocation_size_mb=512:allocator_may_return_null=0";
}

#define MANIFEST_MAGIC	"SSYNCMAN"
#define SHAPE_MAGIC		"SSYNCSHP"
#define HEAD			16
#define TAIL			8

/* ------------------------------------------------- building bytes by hand */

/* n bytes of s (which may hold NULs) as a length-prefixed string */
static void
put_strn(Buf *b, const char *s, size_t n)
{
	put_u32(b, (uint32_t) n);
	put(b, s, n);
}

static void
put_str(Buf *b, const char *s)
{
	put_strn(b, s, strlen(s));
}

static void
put_null(Buf *b)
{
	put_u32(b, UINT32_MAX);
}

static uint32_t
get_u32(const unsigned char *p)
{
	return (uint32_t) p[0] | (uint32_t) p[1] << 8 | (uint32_t) p[2] << 16 |
		(uint32_t) p[3] << 24;
}

static void
set_u32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char) (v >> (8 * i));
}

/* Writes a frame's payload length and checksum from its bytes. */
static void
reseal(unsigned char *frame, size_t len)
{
	uint64_t	sum;

	set_u32(frame + 12, (uint32_t) (len - HEAD - TAIL));
	sum = fnv_hash_bytes(FNV_HASH_START, frame + 8, len - 8 - TAIL);
	for (int i = 0; i < 8; i++)
		frame[len - 8 + i] = (unsigned char) (sum >> (8 * i));
}

/* A whole frame around `payload`, in a malloc'd buffer of exactly *len. */
static char *
frame(const char *magic, uint32_t version, const void *payload, size_t n, size_t *len)
{
	unsigned char *f = malloc(HEAD + n + TAIL);

	if (f == NULL)
		abort();
	memcpy(f, magic, 8);
	set_u32(f + 8, version);
	if (n > 0)
		memcpy(f + HEAD, payload, n);
	reseal(f, HEAD + n + TAIL);
	*len = HEAD + n + TAIL;
	return (char *) f;
}

/* ------------------------------------------------------------- samples */

static void
sample_header(LogStoreHeader *h)
{
	memset(h, 0, sizeof(*h));
	h->system_id = 7311234567890123456ULL;
	h->timeline = 3;
	h->database_oid = 16384;
	strcpy(h->slot, "shape_sync_16384");
	h->fsync_policy = LOG_FSYNC_BATCH;
	strcpy(h->boot_id, "9f0c4e2a-51b7-4d3e-8a61-0c2f7b9d1e44");
	h->durable_lsn = 0x16B3748ULL;
	h->sets_generation = 5;
	h->sets_length = 0x2A0F1ULL;
}

static SlogChunk *
make_chunks(uint32_t n, uint64_t seed)
{
	SlogChunk  *c = calloc(n ? n : 1, sizeof(SlogChunk));

	if (c == NULL)
		abort();
	for (uint32_t i = 0; i < n; i++)
	{
		c[i].start_pos = seed + (uint64_t) i * 1000;
		c[i].end_pos = seed + (uint64_t) i * 1000 + 999;
		c[i].end_tx = i == 0 ? 0 : (int64_t) (seed + i);
		c[i].end_op = i % 3 == 0 ? LOG_OFFSET_OP_INF : (uint64_t) i * 2;
	}
	return c;
}

/*
 * Four shapes: no chunks and nothing logged; `many` chunks ending at the
 * snapshot's end; three chunks and the largest values; a handle of the
 * longest length that fits.
 */
static void
sample_manifest(LogStoreManifest *m, uint32_t many)
{
	LogStoreExtent *e;

	memset(m, 0, sizeof(*m));
	sample_header(&m->header);
	m->nshapes = 4;
	m->shapes = calloc(4, sizeof(LogStoreExtent));
	e = m->shapes;

	strcpy(e[0].handle, "12345-1700000000000000");
	e[0].generation = 0;
	e[0].length = 0;
	e[0].last = LOG_OFFSET_BEFORE_ALL;
	e[0].nchunks = 0;
	e[0].chunks = NULL;

	strcpy(e[1].handle, "67890-1700000000000001");
	e[1].generation = 7;
	e[1].length = 123456789;
	e[1].last = LOG_OFFSET_SNAPSHOT_END;
	e[1].nchunks = many;
	e[1].chunks = make_chunks(many, 100);

	strcpy(e[2].handle, "big-handle");
	e[2].generation = UINT32_MAX;
	e[2].length = UINT64_MAX;
	e[2].last.tx = INT64_MAX;
	e[2].last.op = LOG_OFFSET_OP_INF - 1;
	e[2].nchunks = 3;
	e[2].chunks = make_chunks(3, UINT64_MAX - 5000);
	e[2].chunks[2].end_tx = -1;

	memset(e[3].handle, 'h', LOG_STORE_HANDLE_LEN - 1);
	e[3].handle[LOG_STORE_HANDLE_LEN - 1] = '\0';
	e[3].generation = 1;
	e[3].length = 4096;
	e[3].last.tx = 0;
	e[3].last.op = 0;
	e[3].nchunks = 1;
	e[3].chunks = make_chunks(1, 0);
}

/* Frees what sample_manifest made (the decoder's _free does the same). */
static void
sample_manifest_free(LogStoreManifest *m)
{
	for (uint32_t i = 0; i < m->nshapes; i++)
		free(m->shapes[i].chunks);
	free(m->shapes);
	memset(m, 0, sizeof(*m));
}

static char *
dup_or_null(const char *s)
{
	return s ? strdup(s) : NULL;
}

/* A shape the way the worker would describe one; columns/xip as asked. */
static void
sample_shape(LogStoreShape *s, const char *where, uint32_t ncolumns, uint32_t nxip)
{
	memset(s, 0, sizeof(*s));
	strcpy(s->handle, "12345-1700000000000000");
	s->identity = strdup("public.items|id,name|where:price > $1|1=10");
	s->fingerprint = strdup("a3f1c9e07b2d4455");
	s->schema_json = strdup("{\"id\":{\"type\":\"int8\",\"pk_index\":0},\"name\":{\"type\":\"text\"}}");
	s->schema_name = strdup("public");
	s->table_name = strdup("items");
	s->where_sql = dup_or_null(where);
	s->ncolumns = ncolumns;
	s->columns = ncolumns ? calloc(ncolumns, sizeof(char *)) : NULL;
	for (uint32_t i = 0; i < ncolumns; i++)
	{
		char		name[32];

		/* column 1 is empty: "" is a string, not a missing one */
		if (i == 1)
			name[0] = '\0';
		else
			snprintf(name, sizeof(name), "col_%u", i);
		s->columns[i] = strdup(name);
	}
	s->flags = 0x5;
	s->chunk_threshold = -1;
	s->snapshot_lsn = 0x1000000FFULL;
	s->xmin = 7000;
	s->xmax = 7010;
	s->nxip = nxip;
	s->xip = nxip ? calloc(nxip, sizeof(uint64_t)) : NULL;
	for (uint32_t i = 0; i < nxip; i++)
		s->xip[i] = i == 0 ? UINT64_MAX : 7000 + i;
	s->created_at_us = INT64_MAX;
	s->snapshot_rows = UINT64_MAX - 1;
	s->snapshot_ms = INT64_MAX - 1;
}

/* ---------------------------------------------------------- comparison */

#define MANIFEST_EQ(a, b) manifest_eq(__FILE__, __LINE__, a, b)
#define SHAPE_EQ(a, b) shape_eq(__FILE__, __LINE__, a, b)

static void
manifest_eq(const char *file, int line, const LogStoreManifest *got,
			const LogStoreManifest *want)
{
	const LogStoreHeader *g = &got->header;
	const LogStoreHeader *w = &want->header;

	if (g->system_id != w->system_id)
		unit_fail(file, line, "system_id: got %llu, want %llu",
				  (unsigned long long) g->system_id, (unsigned long long) w->system_id);
	if (g->timeline != w->timeline)
		unit_fail(file, line, "timeline: got %u, want %u", g->timeline, w->timeline);
	if (g->database_oid != w->database_oid)
		unit_fail(file, line, "database_oid: got %u, want %u", g->database_oid, w->database_oid);
	if (strcmp(g->slot, w->slot) != 0)
		unit_fail(file, line, "slot: got \"%s\", want \"%s\"", g->slot, w->slot);
	if (g->fsync_policy != w->fsync_policy)
		unit_fail(file, line, "fsync_policy: got %u, want %u", g->fsync_policy, w->fsync_policy);
	if (strcmp(g->boot_id, w->boot_id) != 0)
		unit_fail(file, line, "boot_id: got \"%s\", want \"%s\"", g->boot_id, w->boot_id);
	if (g->durable_lsn != w->durable_lsn)
		unit_fail(file, line, "durable_lsn: got %llu, want %llu",
				  (unsigned long long) g->durable_lsn, (unsigned long long) w->durable_lsn);
	if (g->sets_generation != w->sets_generation)
		unit_fail(file, line, "sets_generation: got %u, want %u",
				  g->sets_generation, w->sets_generation);
	if (g->sets_length != w->sets_length)
		unit_fail(file, line, "sets_length: got %llu, want %llu",
				  (unsigned long long) g->sets_length, (unsigned long long) w->sets_length);
	if (got->nshapes != want->nshapes)
	{
		unit_fail(file, line, "nshapes: got %u, want %u", got->nshapes, want->nshapes);
		return;
	}
	if (got->nshapes == 0 && got->shapes != NULL)
		unit_fail(file, line, "no shapes, yet shapes is not NULL");
	for (uint32_t i = 0; i < got->nshapes; i++)
	{
		const LogStoreExtent *a = &got->shapes[i];
		const LogStoreExtent *b = &want->shapes[i];

		if (strcmp(a->handle, b->handle) != 0)
			unit_fail(file, line, "shape %u handle: got \"%s\", want \"%s\"", i, a->handle, b->handle);
		if (a->generation != b->generation || a->length != b->length ||
			a->last.tx != b->last.tx || a->last.op != b->last.op)
			unit_fail(file, line, "shape %u: got gen %u len %llu last (%lld, %llu), "
					  "want gen %u len %llu last (%lld, %llu)", i,
					  a->generation, (unsigned long long) a->length,
					  (long long) a->last.tx, (unsigned long long) a->last.op,
					  b->generation, (unsigned long long) b->length,
					  (long long) b->last.tx, (unsigned long long) b->last.op);
		if (a->nchunks != b->nchunks)
		{
			unit_fail(file, line, "shape %u nchunks: got %u, want %u", i, a->nchunks, b->nchunks);
			continue;
		}
		if (a->nchunks == 0 && a->chunks != NULL)
			unit_fail(file, line, "shape %u: no chunks, yet chunks is not NULL", i);
		for (uint32_t c = 0; c < a->nchunks; c++)
			if (a->chunks[c].start_pos != b->chunks[c].start_pos ||
				a->chunks[c].end_pos != b->chunks[c].end_pos ||
				a->chunks[c].end_tx != b->chunks[c].end_tx ||
				a->chunks[c].end_op != b->chunks[c].end_op)
			{
				unit_fail(file, line, "shape %u chunk %u differs", i, c);
				break;
			}
	}
}

static void
str_field_eq(const char *file, int line, const char *what, const char *got, const char *want)
{
	char		x[1024];
	char		y[1024];

	if (!unit_str_eq(got, want))
		unit_fail(file, line, "%s: got %s%s%s, want %s%s%s", what,
				  got ? "\"" : "", unit_show(got, got ? strlen(got) : 0, x, sizeof(x)),
				  got ? "\"" : "",
				  want ? "\"" : "", unit_show(want, want ? strlen(want) : 0, y, sizeof(y)),
				  want ? "\"" : "");
}

static void
shape_eq(const char *file, int line, const LogStoreShape *got, const LogStoreShape *want)
{
	str_field_eq(file, line, "handle", got->handle, want->handle);
	str_field_eq(file, line, "identity", got->identity, want->identity);
	str_field_eq(file, line, "fingerprint", got->fingerprint, want->fingerprint);
	str_field_eq(file, line, "schema_json", got->schema_json, want->schema_json);
	str_field_eq(file, line, "schema_name", got->schema_name, want->schema_name);
	str_field_eq(file, line, "table_name", got->table_name, want->table_name);
	str_field_eq(file, line, "where_sql", got->where_sql, want->where_sql);
	if (got->ncolumns != want->ncolumns)
		unit_fail(file, line, "ncolumns: got %u, want %u", got->ncolumns, want->ncolumns);
	else
	{
		if (got->ncolumns == 0 && got->columns != NULL)
			unit_fail(file, line, "no columns, yet columns is not NULL");
		for (uint32_t i = 0; i < got->ncolumns; i++)
			str_field_eq(file, line, "a column", got->columns[i], want->columns[i]);
	}
	if (got->flags != want->flags)
		unit_fail(file, line, "flags: got %u, want %u", got->flags, want->flags);
	if (got->chunk_threshold != want->chunk_threshold)
		unit_fail(file, line, "chunk_threshold: got %d, want %d",
				  got->chunk_threshold, want->chunk_threshold);
	if (got->snapshot_lsn != want->snapshot_lsn || got->xmin != want->xmin ||
		got->xmax != want->xmax)
		unit_fail(file, line, "snapshot lsn/xmin/xmax differ");
	if (got->nxip != want->nxip)
		unit_fail(file, line, "nxip: got %u, want %u", got->nxip, want->nxip);
	else
	{
		if (got->nxip == 0 && got->xip != NULL)
			unit_fail(file, line, "no xip, yet xip is not NULL");
		for (uint32_t i = 0; i < got->nxip; i++)
			if (got->xip[i] != want->xip[i])
				unit_fail(file, line, "xip[%u]: got %llu, want %llu", i,
						  (unsigned long long) got->xip[i], (unsigned long long) want->xip[i]);
	}
	if (got->created_at_us != want->created_at_us)
		unit_fail(file, line, "created_at_us: got %lld, want %lld",
				  (long long) got->created_at_us, (long long) want->created_at_us);
	if (got->snapshot_rows != want->snapshot_rows)
		unit_fail(file, line, "snapshot_rows: got %llu, want %llu",
				  (unsigned long long) got->snapshot_rows,
				  (unsigned long long) want->snapshot_rows);
	if (got->snapshot_ms != want->snapshot_ms)
		unit_fail(file, line, "snapshot_ms: got %lld, want %lld",
				  (long long) got->snapshot_ms, (long long) want->snapshot_ms);
}

/* A failed decode leaves nothing allocated and nothing to free. */
static bool
manifest_is_clean(const LogStoreManifest *m)
{
	return m->shapes == NULL && m->nshapes == 0;
}

static bool
shape_is_clean(const LogStoreShape *s)
{
	return s->identity == NULL && s->fingerprint == NULL && s->schema_json == NULL &&
		s->schema_name == NULL && s->table_name == NULL && s->where_sql == NULL &&
		s->columns == NULL && s->ncolumns == 0 && s->xip == NULL && s->nxip == 0;
}

/* ------------------------------------------------------ decode helpers */

/*
 * Decodes a copy of exactly `len` bytes; on failure checks that the error
 * is a sentence, that `out` holds nothing to free and that _free on it,
 * twice, is harmless.  Returns whether the decode succeeded.
 */
static bool
decode_manifest_at(const char *file, int line, const void *bytes, size_t len,
				   LogStoreManifest *out, char *error)
{
	char	   *copy = copy_of(bytes, len);
	bool		ok;

	error[0] = '\0';
	ok = log_manifest_decode(copy, len, out, error, LOG_STORE_ERROR_LEN);
	free(copy);
	if (!ok)
	{
		if (strlen(error) < 10)
			unit_fail(file, line, "a refused manifest came with the error \"%s\"", error);
		if (!manifest_is_clean(out))
			unit_fail(file, line, "a refused manifest left shapes allocated");
		log_manifest_free(out);
		log_manifest_free(out);
	}
	return ok;
}

static bool
decode_shape_at(const char *file, int line, const void *bytes, size_t len,
				LogStoreShape *out, char *error)
{
	char	   *copy = copy_of(bytes, len);
	bool		ok;

	error[0] = '\0';
	ok = log_store_shape_decode(copy, len, out, error, LOG_STORE_ERROR_LEN);
	free(copy);
	if (!ok)
	{
		if (strlen(error) < 10)
			unit_fail(file, line, "a refused shape came with the error \"%s\"", error);
		if (!shape_is_clean(out))
			unit_fail(file, line, "a refused shape left strings or arrays allocated");
		log_store_shape_free(out);
		log_store_shape_free(out);
	}
	return ok;
}

#define DECODE_MANIFEST(b, n, out, err) decode_manifest_at(__FILE__, __LINE__, b, n, out, err)
#define DECODE_SHAPE(b, n, out, err) decode_shape_at(__FILE__, __LINE__, b, n, out, err)

/* The manifest frame refused, with an error that contains `phrase`. */
static void
manifest_refused_at(const char *file, int line, const void *bytes, size_t len,
					const char *phrase)
{
	LogStoreManifest out;
	char		error[LOG_STORE_ERROR_LEN];

	if (decode_manifest_at(file, line, bytes, len, &out, error))
	{
		unit_fail(file, line, "a manifest that should be refused was accepted");
		log_manifest_free(&out);
	}
	else if (phrase != NULL && strstr(error, phrase) == NULL)
		unit_fail(file, line, "error \"%s\" does not mention \"%s\"", error, phrase);
}

static void
shape_refused_at(const char *file, int line, const void *bytes, size_t len,
				 const char *phrase)
{
	LogStoreShape out;
	char		error[LOG_STORE_ERROR_LEN];

	if (decode_shape_at(file, line, bytes, len, &out, error))
	{
		unit_fail(file, line, "a shape file that should be refused was accepted");
		log_store_shape_free(&out);
	}
	else if (phrase != NULL && strstr(error, phrase) == NULL)
		unit_fail(file, line, "error \"%s\" does not mention \"%s\"", error, phrase);
}

#define MANIFEST_REFUSED(b, n, phrase) manifest_refused_at(__FILE__, __LINE__, b, n, phrase)
#define SHAPE_REFUSED(b, n, phrase) shape_refused_at(__FILE__, __LINE__, b, n, phrase)

/* Encodes and decodes; compares; frees the decoded copy. */
static void
manifest_round_trip_at(const char *file, int line, const LogStoreManifest *m)
{
	size_t		len = 0;
	char	   *bytes = log_manifest_encode(m, &len);
	LogStoreManifest out;
	char		error[LOG_STORE_ERROR_LEN];

	if (bytes == NULL)
	{
		unit_fail(file, line, "log_manifest_encode returned NULL");
		return;
	}
	if (!decode_manifest_at(file, line, bytes, len, &out, error))
		unit_fail(file, line, "the encoded manifest was refused: %s", error);
	else
	{
		manifest_eq(file, line, &out, m);
		log_manifest_free(&out);
		if (!manifest_is_clean(&out))
			unit_fail(file, line, "log_manifest_free left pointers behind");
		log_manifest_free(&out);	/* twice is harmless */
	}
	free(bytes);
}

static void
shape_round_trip_at(const char *file, int line, const LogStoreShape *s)
{
	size_t		len = 0;
	char	   *bytes = log_store_shape_encode(s, &len);
	LogStoreShape out;
	char		error[LOG_STORE_ERROR_LEN];

	if (bytes == NULL)
	{
		unit_fail(file, line, "log_store_shape_encode returned NULL");
		return;
	}
	if (!decode_shape_at(file, line, bytes, len, &out, error))
		unit_fail(file, line, "the encoded shape was refused: %s", error);
	else
	{
		shape_eq(file, line, &out, s);
		log_store_shape_free(&out);
		if (!shape_is_clean(&out))
			unit_fail(file, line, "log_store_shape_free left pointers behind");
		log_store_shape_free(&out);
	}
	free(bytes);
}

#define MANIFEST_ROUND_TRIP(m) manifest_round_trip_at(__FILE__, __LINE__, m)
#define SHAPE_ROUND_TRIP(s) shape_round_trip_at(__FILE__, __LINE__, s)

/* ====================================================== manifest trips */

TEST(manifest_without_shapes_round_trips)
{
	LogStoreManifest m;
	size_t		len = 0;
	char	   *bytes;

	memset(&m, 0, sizeof(m));
	sample_header(&m.header);
	MANIFEST_ROUND_TRIP(&m);

	/* header only: 8 + 4 + 4 + (4 + 16) + 4 + (4 + 36) + 8 + 4 + 8 + nshapes 4 */
	bytes = log_manifest_encode(&m, &len);
	REQUIRE(bytes != NULL);
	CHECK_EQ(len, HEAD + 104 + TAIL);
	free(bytes);

	/* empty strings and the largest values */
	m.header.slot[0] = '\0';
	m.header.boot_id[0] = '\0';
	MANIFEST_ROUND_TRIP(&m);
	m.header.system_id = UINT64_MAX;
	m.header.timeline = UINT32_MAX;
	m.header.database_oid = UINT32_MAX;
	m.header.fsync_policy = LOG_FSYNC_OFF;
	m.header.durable_lsn = UINT64_MAX;
	m.header.sets_generation = UINT32_MAX;
	m.header.sets_length = UINT64_MAX;
	memset(m.header.slot, 's', LOG_STORE_NAME_LEN - 1);
	memset(m.header.boot_id, 'b', LOG_STORE_NAME_LEN - 1);
	MANIFEST_ROUND_TRIP(&m);
	m.header.fsync_policy = LOG_FSYNC_COMMIT;
	m.header.system_id = 0;
	m.header.durable_lsn = 0;
	MANIFEST_ROUND_TRIP(&m);
	/* no value sets file */
	m.header.sets_generation = 0;
	m.header.sets_length = 0;
	MANIFEST_ROUND_TRIP(&m);
}

TEST(manifest_with_shapes_round_trips)
{
	LogStoreManifest m;

	sample_manifest(&m, 1000);
	MANIFEST_ROUND_TRIP(&m);
	sample_manifest_free(&m);

	sample_manifest(&m, 0);
	MANIFEST_ROUND_TRIP(&m);
	sample_manifest_free(&m);
}

/*
 * An extent takes 36 bytes plus its handle's length: the decoder's bound on
 * the shape count must not refuse a manifest of short handles (it assumed
 * 40 bytes and did).
 */
TEST(manifest_with_short_handles_round_trips)
{
	const char *handles[] = {"", "a", "abc"};

	for (size_t k = 0; k < sizeof(handles) / sizeof(handles[0]); k++)
	{
		LogStoreManifest m;
		size_t		len = 0;
		char	   *bytes;
		LogStoreManifest out;
		char		error[LOG_STORE_ERROR_LEN];

		memset(&m, 0, sizeof(m));
		sample_header(&m.header);
		m.nshapes = 1;
		m.shapes = calloc(1, sizeof(LogStoreExtent));
		strcpy(m.shapes[0].handle, handles[k]);
		bytes = log_manifest_encode(&m, &len);
		if (bytes != NULL)
		{
			if (!DECODE_MANIFEST(bytes, len, &out, error))
				FAIL("a manifest with the handle \"%s\" was encoded, then refused: %s",
					 handles[k], error);
			else
			{
				MANIFEST_EQ(&out, &m);
				log_manifest_free(&out);
			}
			free(bytes);
		}
		sample_manifest_free(&m);
	}
}

/* The same manifest always encodes to the same bytes. */
TEST(manifest_encoding_is_deterministic)
{
	LogStoreManifest m;
	size_t		len1 = 0;
	size_t		len2 = 0;
	char	   *a;
	char	   *b;

	sample_manifest(&m, 17);
	a = log_manifest_encode(&m, &len1);
	b = log_manifest_encode(&m, &len2);
	REQUIRE(a != NULL && b != NULL);
	CHECK_EQ(len1, len2);
	if (len1 == len2)
		CHECK_MEM_EQ(a, b, len1);
	free(a);
	free(b);
	sample_manifest_free(&m);
}

/* The layout the .c's header comment describes, byte for byte. */
TEST(manifest_layout_is_the_documented_one)
{
	LogStoreManifest m;
	Buf			p = {0};
	size_t		want_len;
	char	   *want;
	size_t		len = 0;
	char	   *got;

	memset(&m, 0, sizeof(m));
	sample_header(&m.header);
	m.nshapes = 1;
	m.shapes = calloc(1, sizeof(LogStoreExtent));
	strcpy(m.shapes[0].handle, "42-7");
	m.shapes[0].generation = 2;
	m.shapes[0].length = 300;
	m.shapes[0].last.tx = -1;
	m.shapes[0].last.op = LOG_OFFSET_OP_INF;
	m.shapes[0].nchunks = 1;
	m.shapes[0].chunks = make_chunks(1, 9);

	put_u64(&p, m.header.system_id);
	put_u32(&p, m.header.timeline);
	put_u32(&p, m.header.database_oid);
	put_str(&p, m.header.slot);
	put_u32(&p, m.header.fsync_policy);
	put_str(&p, m.header.boot_id);
	put_u64(&p, m.header.durable_lsn);
	put_u32(&p, m.header.sets_generation);
	put_u64(&p, m.header.sets_length);
	put_u32(&p, 1);
	put_str(&p, "42-7");
	put_u32(&p, 2);
	put_u64(&p, 300);
	put_u64(&p, UINT64_MAX);	/* tx -1 */
	put_u64(&p, LOG_OFFSET_OP_INF);
	put_u32(&p, 1);
	put_u64(&p, m.shapes[0].chunks[0].start_pos);
	put_u64(&p, m.shapes[0].chunks[0].end_pos);
	put_u64(&p, (uint64_t) m.shapes[0].chunks[0].end_tx);
	put_u64(&p, m.shapes[0].chunks[0].end_op);
	want = frame(MANIFEST_MAGIC, LOG_STORE_FORMAT_VERSION, p.d, p.len, &want_len);

	got = log_manifest_encode(&m, &len);
	REQUIRE(got != NULL);
	CHECK_EQ(len, want_len);
	if (len == want_len)
		CHECK_MEM_EQ(got, want, len);
	CHECK_EQ(LOG_STORE_FORMAT_VERSION, 2);
	free(got);
	free(want);
	buf_free(&p);
	sample_manifest_free(&m);
}

/* Decoding overwrites whatever `out` held (callers free it first). */
TEST(manifest_decode_ignores_what_out_held)
{
	LogStoreManifest m;
	LogStoreManifest out;
	size_t		len = 0;
	char	   *bytes;
	char		error[LOG_STORE_ERROR_LEN];

	sample_manifest(&m, 2);
	bytes = log_manifest_encode(&m, &len);
	REQUIRE(bytes != NULL);
	memset(&out, 0xAB, sizeof(out));
	REQUIRE(DECODE_MANIFEST(bytes, len, &out, error));
	MANIFEST_EQ(&out, &m);
	log_manifest_free(&out);

	memset(&out, 0xAB, sizeof(out));
	CHECK(!DECODE_MANIFEST(bytes, len - 1, &out, error));
	free(bytes);
	sample_manifest_free(&m);
}

/* ========================================================= shape trips */

TEST(shape_round_trips)
{
	LogStoreShape s;

	/* no WHERE clause, every column, no transaction in progress */
	sample_shape(&s, NULL, 0, 0);
	SHAPE_ROUND_TRIP(&s);
	log_store_shape_free(&s);

	/* an empty WHERE is kept apart from none */
	sample_shape(&s, "", 0, 0);
	SHAPE_ROUND_TRIP(&s);
	log_store_shape_free(&s);

	sample_shape(&s, "price > $1 AND name <> 'x'", 5, 4);
	SHAPE_ROUND_TRIP(&s);
	log_store_shape_free(&s);

	/* the smallest values, empty strings where any string will do */
	sample_shape(&s, "x", 1, 1);
	free(s.schema_json);
	s.schema_json = strdup("");
	free(s.identity);
	s.identity = strdup("");
	s.handle[0] = '\0';
	s.flags = UINT32_MAX;
	s.chunk_threshold = INT32_MIN;
	s.snapshot_lsn = 0;
	s.xmin = 0;
	s.xmax = UINT64_MAX;
	s.xip[0] = 0;
	s.created_at_us = INT64_MIN;
	s.snapshot_rows = 0;
	s.snapshot_ms = -1;
	SHAPE_ROUND_TRIP(&s);
	log_store_shape_free(&s);

	/* the longest handle, many columns, many xip, a long schema */
	sample_shape(&s, "a = 1", 1600, 5000);
	memset(s.handle, 'z', LOG_STORE_HANDLE_LEN - 1);
	free(s.schema_json);
	s.schema_json = malloc(100001);
	memset(s.schema_json, 'j', 100000);
	s.schema_json[100000] = '\0';
	s.chunk_threshold = INT32_MAX;
	SHAPE_ROUND_TRIP(&s);
	log_store_shape_free(&s);
}

TEST(shape_layout_is_the_documented_one)
{
	LogStoreShape s;
	Buf			p = {0};
	size_t		want_len;
	char	   *want;
	size_t		len = 0;
	char	   *got;

	sample_shape(&s, NULL, 2, 1);
	put_str(&p, s.handle);
	put_str(&p, s.identity);
	put_str(&p, s.fingerprint);
	put_str(&p, s.schema_json);
	put_str(&p, s.schema_name);
	put_str(&p, s.table_name);
	put_null(&p);				/* where_sql */
	put_u32(&p, 2);
	put_str(&p, "col_0");
	put_str(&p, "");
	put_u32(&p, s.flags);
	put_u32(&p, (uint32_t) s.chunk_threshold);
	put_u64(&p, s.snapshot_lsn);
	put_u64(&p, s.xmin);
	put_u64(&p, s.xmax);
	put_u32(&p, 1);
	put_u64(&p, s.xip[0]);
	put_u64(&p, (uint64_t) s.created_at_us);
	put_u64(&p, s.snapshot_rows);
	put_u64(&p, (uint64_t) s.snapshot_ms);
	want = frame(SHAPE_MAGIC, LOG_STORE_FORMAT_VERSION, p.d, p.len, &want_len);

	got = log_store_shape_encode(&s, &len);
	REQUIRE(got != NULL);
	CHECK_EQ(len, want_len);
	if (len == want_len)
		CHECK_MEM_EQ(got, want, len);
	free(got);
	free(want);
	buf_free(&p);
	log_store_shape_free(&s);
}

TEST(shape_decode_ignores_what_out_held)
{
	LogStoreShape s;
	LogStoreShape out;
	size_t		len = 0;
	char	   *bytes;
	char		error[LOG_STORE_ERROR_LEN];

	sample_shape(&s, "b", 3, 2);
	bytes = log_store_shape_encode(&s, &len);
	REQUIRE(bytes != NULL);
	memset(&out, 0xAB, sizeof(out));
	REQUIRE(DECODE_SHAPE(bytes, len, &out, error));
	SHAPE_EQ(&out, &s);
	log_store_shape_free(&out);

	memset(&out, 0xAB, sizeof(out));
	CHECK(!DECODE_SHAPE(bytes, len - 1, &out, error));
	free(bytes);
	log_store_shape_free(&s);
}

/* A shape always names its table and has the texts it is checked by. */
TEST(shape_without_a_required_text_is_refused)
{
	for (int k = 0; k < 5; k++)
	{
		LogStoreShape s;
		char	  **field[5];
		size_t		len = 0;
		char	   *bytes;

		sample_shape(&s, NULL, 0, 0);
		field[0] = &s.identity;
		field[1] = &s.fingerprint;
		field[2] = &s.schema_json;
		field[3] = &s.schema_name;
		field[4] = &s.table_name;
		free(*field[k]);
		*field[k] = NULL;
		/* the encoder writes it as NULL; the decoder refuses it */
		bytes = log_store_shape_encode(&s, &len);
		REQUIRE(bytes != NULL);
		SHAPE_REFUSED(bytes, len, "decode");
		free(bytes);
		log_store_shape_free(&s);
	}
}

/* A missing column name is refused, not returned as NULL. */
TEST(shape_with_a_null_column_is_refused)
{
	LogStoreShape s;
	size_t		len = 0;
	char	   *bytes;

	sample_shape(&s, NULL, 3, 0);
	free(s.columns[2]);
	s.columns[2] = NULL;
	bytes = log_store_shape_encode(&s, &len);
	REQUIRE(bytes != NULL);
	SHAPE_REFUSED(bytes, len, "decode");
	free(bytes);
	log_store_shape_free(&s);
}

/* ======================================================= broken frames */

/* Every cut of the file, and every cut of the payload resealed. */
static void
check_truncations(const char *magic, const char *bytes, size_t len, bool manifest)
{
	for (size_t n = 0; n < len; n++)
	{
		if (manifest)
			MANIFEST_REFUSED(bytes, n, NULL);
		else
			SHAPE_REFUSED(bytes, n, NULL);
		if (UNIT_FAILURES() > 10)
			return;
	}
	/* a frame made whole around a shorter payload: the parser refuses it */
	for (size_t p = 0; p < len - HEAD - TAIL; p++)
	{
		size_t		flen;
		char	   *f = frame(magic, LOG_STORE_FORMAT_VERSION, bytes + HEAD, p, &flen);

		if (manifest)
			MANIFEST_REFUSED(f, flen, "decode");
		else
			SHAPE_REFUSED(f, flen, "decode");
		free(f);
		if (UNIT_FAILURES() > 10)
			return;
	}
}

TEST(manifest_truncations_are_refused)
{
	LogStoreManifest m;
	size_t		len = 0;
	char	   *bytes;

	sample_manifest(&m, 5);
	bytes = log_manifest_encode(&m, &len);
	REQUIRE(bytes != NULL);
	check_truncations(MANIFEST_MAGIC, bytes, len, true);
	/* the error of a file cut short says how long it should be */
	MANIFEST_REFUSED(bytes, len - 1, "bytes long");
	MANIFEST_REFUSED(bytes, 23, "not a shape_sync store file");
	free(bytes);
	sample_manifest_free(&m);

	/* the 1000-chunk manifest, cut in many places (each cut copies it) */
	sample_manifest(&m, 1000);
	bytes = log_manifest_encode(&m, &len);
	REQUIRE(bytes != NULL);
	for (size_t n = 0; n < len && UNIT_FAILURES() < 10; n++)
		if (n < 2048 || n % 61 == 0 || n + 64 > len)
			MANIFEST_REFUSED(bytes, n, NULL);
	free(bytes);
	sample_manifest_free(&m);
}

TEST(shape_truncations_are_refused)
{
	LogStoreShape s;
	size_t		len = 0;
	char	   *bytes;

	sample_shape(&s, "price > $1", 4, 3);
	bytes = log_store_shape_encode(&s, &len);
	REQUIRE(bytes != NULL);
	check_truncations(SHAPE_MAGIC, bytes, len, false);
	free(bytes);
	log_store_shape_free(&s);

	sample_shape(&s, NULL, 0, 0);
	bytes = log_store_shape_encode(&s, &len);
	REQUIRE(bytes != NULL);
	check_truncations(SHAPE_MAGIC, bytes, len, false);
	free(bytes);
	log_store_shape_free(&s);
}

/*
 * One more byte inside the frame (resealed) is refused; after it, a shape
 * file is refused, and a manifest is read as ending in a delta cut short.
 */
static void
check_extra_byte(const char *magic, const char *bytes, size_t len, bool manifest)
{
	char	   *longer = malloc(len + 1);
	size_t		flen;
	char	   *f;
	char	   *payload = malloc(len - HEAD - TAIL + 1);

	memcpy(longer, bytes, len);
	longer[len] = 0;
	if (manifest)
	{
		/* after a manifest's frame: a delta cut short, which ends the deltas */
		LogStoreManifest whole;
		LogStoreManifest out;
		char		error[LOG_STORE_ERROR_LEN];

		REQUIRE(DECODE_MANIFEST(bytes, len, &whole, error));
		if (DECODE_MANIFEST(longer, len + 1, &out, error))
		{
			MANIFEST_EQ(&out, &whole);
			CHECK_EQ(out.deltas, 0);
			CHECK_EQ(out.torn_bytes, 1);
			log_manifest_free(&out);
		}
		else
			FAIL("a manifest with one byte more was refused: %s", error);
		log_manifest_free(&whole);
	}
	else
		SHAPE_REFUSED(longer, len + 1, "bytes long");
	free(longer);

	memcpy(payload, bytes + HEAD, len - HEAD - TAIL);
	payload[len - HEAD - TAIL] = 0;
	f = frame(magic, LOG_STORE_FORMAT_VERSION, payload, len - HEAD - TAIL + 1, &flen);
	if (manifest)
		MANIFEST_REFUSED(f, flen, "decode");
	else
		SHAPE_REFUSED(f, flen, "decode");
	free(f);
	free(payload);
}

TEST(an_extra_byte_is_refused_or_a_torn_delta)
{
	LogStoreManifest m;
	LogStoreShape s;
	size_t		len = 0;
	char	   *bytes;

	sample_manifest(&m, 3);
	bytes = log_manifest_encode(&m, &len);
	REQUIRE(bytes != NULL);
	check_extra_byte(MANIFEST_MAGIC, bytes, len, true);
	free(bytes);
	sample_manifest_free(&m);

	sample_shape(&s, "w", 2, 2);
	bytes = log_store_shape_encode(&s, &len);
	REQUIRE(bytes != NULL);
	check_extra_byte(SHAPE_MAGIC, bytes, len, false);
	free(bytes);
	log_store_shape_free(&s);
}

/*
 * Every single flipped bit is refused: in the magic as not a store file,
 * in the version as a format version, in the length as the wrong length,
 * in the payload or the checksum by the checksum.
 */
static void
check_bit_flips(const char *bytes, size_t len, bool manifest)
{
	char	   *f = copy_of(bytes, len);

	for (size_t i = 0; i < len && UNIT_FAILURES() < 10; i++)
		for (int bit = 0; bit < 8; bit++)
		{
			const char *phrase;

			if (i < 8)
				phrase = "not a shape_sync store file";
			else if (i < 12)
				phrase = "format version";
			else if (i < 16)
			{
				/*
				 * A manifest's frame said shorter than the file is taken
				 * to be followed by deltas: its checksum is then wrong.
				 */
				phrase = manifest && (get_u32((unsigned char *) f + 12) ^
									  ((uint32_t) 1 << ((i - 12) * 8 + bit))) < len - HEAD - TAIL ?
					"checksum" : "bytes long";
			}
			else
				phrase = "checksum";
			f[i] ^= (char) (1 << bit);
			if (manifest)
				MANIFEST_REFUSED(f, len, phrase);
			else
				SHAPE_REFUSED(f, len, phrase);
			f[i] ^= (char) (1 << bit);
		}
	free(f);
}

TEST(every_bit_flip_is_refused)
{
	LogStoreManifest m;
	LogStoreShape s;
	size_t		len = 0;
	char	   *bytes;

	sample_manifest(&m, 3);
	bytes = log_manifest_encode(&m, &len);
	REQUIRE(bytes != NULL);
	check_bit_flips(bytes, len, true);
	free(bytes);
	sample_manifest_free(&m);

	sample_shape(&s, "w", 2, 2);
	bytes = log_store_shape_encode(&s, &len);
	REQUIRE(bytes != NULL);
	check_bit_flips(bytes, len, false);
	free(bytes);
	log_store_shape_free(&s);
}

/* Another version is refused even when its checksum is right. */
TEST(another_format_version_is_refused)
{
	LogStoreManifest m;
	LogStoreShape s;
	size_t		mlen = 0;
	size_t		slen = 0;
	char	   *mbytes;
	char	   *sbytes;
	const uint32_t versions[] = {0, 1, 3, 0x100, UINT32_MAX};

	sample_manifest(&m, 2);
	sample_shape(&s, NULL, 1, 1);
	mbytes = log_manifest_encode(&m, &mlen);
	sbytes = log_store_shape_encode(&s, &slen);
	REQUIRE(mbytes != NULL && sbytes != NULL);
	CHECK_EQ(get_u32((unsigned char *) mbytes + 8), LOG_STORE_FORMAT_VERSION);
	CHECK_EQ(get_u32((unsigned char *) sbytes + 8), LOG_STORE_FORMAT_VERSION);
	for (size_t k = 0; k < sizeof(versions) / sizeof(versions[0]); k++)
	{
		char	   *mf = copy_of(mbytes, mlen);
		char	   *sf = copy_of(sbytes, slen);
		char		phrase[64];

		set_u32((unsigned char *) mf + 8, versions[k]);
		set_u32((unsigned char *) sf + 8, versions[k]);
		reseal((unsigned char *) mf, mlen);
		reseal((unsigned char *) sf, slen);
		snprintf(phrase, sizeof(phrase), "format version %u", versions[k]);
		MANIFEST_REFUSED(mf, mlen, phrase);
		SHAPE_REFUSED(sf, slen, phrase);
		free(mf);
		free(sf);
	}
	free(mbytes);
	free(sbytes);
	sample_manifest_free(&m);
	log_store_shape_free(&s);
}

/* A manifest is not a shape file, nor the other way round. */
TEST(the_other_kind_of_file_is_refused)
{
	LogStoreManifest m;
	LogStoreShape s;
	size_t		mlen = 0;
	size_t		slen = 0;
	char	   *mbytes;
	char	   *sbytes;
	char	   *f;
	size_t		flen;

	sample_manifest(&m, 2);
	sample_shape(&s, NULL, 1, 1);
	mbytes = log_manifest_encode(&m, &mlen);
	sbytes = log_store_shape_encode(&s, &slen);
	REQUIRE(mbytes != NULL && sbytes != NULL);
	SHAPE_REFUSED(mbytes, mlen, "not a shape_sync store file");
	MANIFEST_REFUSED(sbytes, slen, "not a shape_sync store file");

	/* nor a payload of the one kind under the other's magic */
	f = frame(SHAPE_MAGIC, LOG_STORE_FORMAT_VERSION, mbytes + HEAD, mlen - HEAD - TAIL, &flen);
	SHAPE_REFUSED(f, flen, "decode");
	free(f);
	f = frame(MANIFEST_MAGIC, LOG_STORE_FORMAT_VERSION, sbytes + HEAD, slen - HEAD - TAIL, &flen);
	MANIFEST_REFUSED(f, flen, "decode");
	free(f);

	/* lower case, or a zero-filled file, is not the magic either */
	f = copy_of(mbytes, mlen);
	memcpy(f, "ssyncman", 8);
	MANIFEST_REFUSED(f, mlen, "not a shape_sync store file");
	memset(f, 0, mlen);
	MANIFEST_REFUSED(f, mlen, "not a shape_sync store file");
	SHAPE_REFUSED(f, mlen, "not a shape_sync store file");
	free(f);

	free(mbytes);
	free(sbytes);
	sample_manifest_free(&m);
	log_store_shape_free(&s);
}

/* A payload length that does not match the frame's is refused. */
TEST(a_wrong_payload_length_is_refused)
{
	LogStoreManifest m;
	size_t		len = 0;
	char	   *bytes;
	const uint32_t lengths[] = {0, 1, UINT32_MAX, UINT32_MAX - 23};

	sample_manifest(&m, 2);
	bytes = log_manifest_encode(&m, &len);
	REQUIRE(bytes != NULL);
	for (size_t k = 0; k < sizeof(lengths) / sizeof(lengths[0]); k++)
	{
		char	   *f = copy_of(bytes, len);

		set_u32((unsigned char *) f + 12, lengths[k]);
		/* shorter than the file: a frame followed by deltas, whose checksum is wrong */
		MANIFEST_REFUSED(f, len, lengths[k] < len - HEAD - TAIL ? "checksum" : "bytes long");
		free(f);
	}
	free(bytes);
	sample_manifest_free(&m);
}

/* ====================================================== hand-built frames */

/* A manifest payload's header, as the encoder writes it. */
static void
put_header(Buf *p)
{
	LogStoreHeader h;

	sample_header(&h);
	put_u64(p, h.system_id);
	put_u32(p, h.timeline);
	put_u32(p, h.database_oid);
	put_str(p, h.slot);
	put_u32(p, h.fsync_policy);
	put_str(p, h.boot_id);
	put_u64(p, h.durable_lsn);
	put_u32(p, h.sets_generation);
	put_u64(p, h.sets_length);
}

/* An extent with `nchunks` claimed and none written. */
static void
put_extent_head(Buf *p, const char *handle, uint32_t nchunks)
{
	put_str(p, handle);
	put_u32(p, 1);
	put_u64(p, 100);
	put_u64(p, 5);
	put_u64(p, 2);
	put_u32(p, nchunks);
}

static void
manifest_payload_refused_at(const char *file, int line, const Buf *p, const char *phrase)
{
	size_t		len;
	char	   *f = frame(MANIFEST_MAGIC, LOG_STORE_FORMAT_VERSION, p->d, p->len, &len);

	manifest_refused_at(file, line, f, len, phrase);
	free(f);
}

static bool
manifest_payload_accepted_at(const char *file, int line, const Buf *p, LogStoreManifest *out)
{
	size_t		len;
	char	   *f = frame(MANIFEST_MAGIC, LOG_STORE_FORMAT_VERSION, p->d, p->len, &len);
	char		error[LOG_STORE_ERROR_LEN];
	bool		ok = decode_manifest_at(file, line, f, len, out, error);

	if (!ok)
		unit_fail(file, line, "a well-formed manifest was refused: %s", error);
	free(f);
	return ok;
}

static void
shape_payload_refused_at(const char *file, int line, const Buf *p, const char *phrase)
{
	size_t		len;
	char	   *f = frame(SHAPE_MAGIC, LOG_STORE_FORMAT_VERSION, p->d, p->len, &len);

	shape_refused_at(file, line, f, len, phrase);
	free(f);
}

static bool
shape_payload_accepted_at(const char *file, int line, const Buf *p, LogStoreShape *out)
{
	size_t		len;
	char	   *f = frame(SHAPE_MAGIC, LOG_STORE_FORMAT_VERSION, p->d, p->len, &len);
	char		error[LOG_STORE_ERROR_LEN];
	bool		ok = decode_shape_at(file, line, f, len, out, error);

	if (!ok)
		unit_fail(file, line, "a well-formed shape file was refused: %s", error);
	free(f);
	return ok;
}

#define MANIFEST_PAYLOAD_REFUSED(p, phrase) manifest_payload_refused_at(__FILE__, __LINE__, p, phrase)
#define MANIFEST_PAYLOAD_ACCEPTED(p, out) manifest_payload_accepted_at(__FILE__, __LINE__, p, out)
#define SHAPE_PAYLOAD_REFUSED(p, phrase) shape_payload_refused_at(__FILE__, __LINE__, p, phrase)
#define SHAPE_PAYLOAD_ACCEPTED(p, out) shape_payload_accepted_at(__FILE__, __LINE__, p, out)

/* The frame builder itself: a plain manifest built here is accepted. */
TEST(hand_built_frames_are_accepted)
{
	Buf			p = {0};
	LogStoreManifest m;
	LogStoreShape s;

	put_header(&p);
	put_u32(&p, 2);
	put_extent_head(&p, "1-1", 0);
	put_extent_head(&p, "2-2", 1);
	put_u64(&p, 1);
	put_u64(&p, 2);
	put_u64(&p, 3);
	put_u64(&p, 4);
	if (MANIFEST_PAYLOAD_ACCEPTED(&p, &m))
	{
		CHECK_EQ(m.nshapes, 2);
		CHECK_STR_EQ(m.shapes[1].handle, "2-2");
		CHECK_EQ(m.shapes[1].nchunks, 1);
		CHECK_EQ(m.shapes[1].chunks[0].end_op, 4);
		CHECK_EQ(m.shapes[0].last.tx, 5);
		log_manifest_free(&m);
	}
	buf_free(&p);

	put_str(&p, "h");
	for (int i = 0; i < 5; i++)
		put_str(&p, "t");
	put_null(&p);
	put_u32(&p, 0);				/* ncolumns */
	put_u32(&p, 0);
	put_u32(&p, 0);
	put_u64(&p, 0);
	put_u64(&p, 0);
	put_u64(&p, 0);
	put_u32(&p, 0);				/* nxip */
	put_u64(&p, 0);
	put_u64(&p, 0);
	put_u64(&p, 0);
	if (SHAPE_PAYLOAD_ACCEPTED(&p, &s))
	{
		CHECK_STR_EQ(s.table_name, "t");
		CHECK(s.where_sql == NULL);
		log_store_shape_free(&s);
	}
	buf_free(&p);
}

/*
 * Counts that the bytes cannot hold are refused before anything of their
 * size is allocated (ASan aborts on an allocation over 512 MiB).
 */
TEST(absurd_manifest_counts_are_refused)
{
	const uint32_t counts[] = {UINT32_MAX, UINT32_MAX - 1, 0x80000000u, 0x10000000u, 1000, 2};

	for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++)
	{
		Buf			p = {0};

		/* nshapes, with one plausible extent after it */
		put_header(&p);
		put_u32(&p, counts[k]);
		put_extent_head(&p, "1-1", 0);
		MANIFEST_PAYLOAD_REFUSED(&p, "decode");
		buf_free(&p);

		/* nshapes, with nothing after it */
		put_header(&p);
		put_u32(&p, counts[k]);
		MANIFEST_PAYLOAD_REFUSED(&p, "decode");
		buf_free(&p);

		/* nchunks, with one chunk and a second extent after it */
		put_header(&p);
		put_u32(&p, 2);
		put_extent_head(&p, "1-1", counts[k]);
		put_u64(&p, 1);
		put_u64(&p, 2);
		put_u64(&p, 3);
		put_u64(&p, 4);
		put_extent_head(&p, "2-2", 0);
		MANIFEST_PAYLOAD_REFUSED(&p, "decode");
		buf_free(&p);

		/* nchunks of the second extent, after a good first one */
		put_header(&p);
		put_u32(&p, 2);
		put_extent_head(&p, "1-1", 1);
		put_u64(&p, 1);
		put_u64(&p, 2);
		put_u64(&p, 3);
		put_u64(&p, 4);
		put_extent_head(&p, "2-2", counts[k]);
		MANIFEST_PAYLOAD_REFUSED(&p, "decode");
		buf_free(&p);
	}
}

/* An extent of n chunks, all bytes present, chunk k ending at op k. */
static void
put_many_chunks(Buf *p, uint32_t n)
{
	size_t		at;

	put_header(p);
	put_u32(p, 1);
	put_extent_head(p, "1-1", n);
	at = p->len;
	p->d = realloc(p->d, at + (size_t) n * 32);
	if (p->d == NULL)
		abort();
	memset(p->d + at, 0, (size_t) n * 32);
	for (uint32_t k = 0; k < n; k++)
		set_u32(p->d + at + (size_t) k * 32 + 24, k);
	p->len = p->cap = at + (size_t) n * 32;
}

/*
 * As many chunks as a shape log keeps (SLOG_MAX_CHUNKS) are accepted, one
 * more is refused although the bytes for all of them are there.
 */
TEST(chunk_count_is_bounded_by_what_a_log_keeps)
{
	Buf			p = {0};
	LogStoreManifest m;

	put_many_chunks(&p, SLOG_MAX_CHUNKS);
	if (MANIFEST_PAYLOAD_ACCEPTED(&p, &m))
	{
		CHECK_EQ(m.nshapes, 1);
		CHECK_EQ(m.shapes[0].nchunks, SLOG_MAX_CHUNKS);
		CHECK_UEQ(m.shapes[0].chunks[SLOG_MAX_CHUNKS - 1].end_op, SLOG_MAX_CHUNKS - 1);
		log_manifest_free(&m);
	}
	buf_free(&p);

	put_many_chunks(&p, SLOG_MAX_CHUNKS + 1);
	MANIFEST_PAYLOAD_REFUSED(&p, "decode");
	buf_free(&p);
}

/* The texts of a shape file before its counts, from `handle` on. */
static void
put_shape_texts(Buf *p)
{
	put_str(p, "1-1");
	put_str(p, "identity");
	put_str(p, "fingerprint");
	put_str(p, "{}");
	put_str(p, "public");
	put_str(p, "items");
	put_null(p);
}

/* What follows the columns, up to and including nxip. */
static void
put_shape_middle(Buf *p, uint32_t nxip)
{
	put_u32(p, 0);
	put_u32(p, 0);
	put_u64(p, 1);
	put_u64(p, 2);
	put_u64(p, 3);
	put_u32(p, nxip);
}

static void
put_shape_end(Buf *p)
{
	put_u64(p, 4);
	put_u64(p, 5);
	put_u64(p, 6);
}

TEST(absurd_shape_counts_are_refused)
{
	const uint32_t counts[] = {UINT32_MAX, UINT32_MAX - 1, 0x80000000u, 0x10000000u, 1000, 20};

	for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++)
	{
		Buf			p = {0};

		/* ncolumns, with one column and the rest of a shape after it */
		put_shape_texts(&p);
		put_u32(&p, counts[k]);
		put_str(&p, "id");
		put_shape_middle(&p, 0);
		put_shape_end(&p);
		SHAPE_PAYLOAD_REFUSED(&p, "decode");
		buf_free(&p);

		/* nxip, with one xip and the rest after it */
		put_shape_texts(&p);
		put_u32(&p, 0);
		put_shape_middle(&p, counts[k]);
		put_u64(&p, 99);
		put_shape_end(&p);
		SHAPE_PAYLOAD_REFUSED(&p, "decode");
		buf_free(&p);

		/* a string length that the bytes cannot hold */
		put_u32(&p, counts[k] == UINT32_MAX ? UINT32_MAX - 1 : counts[k]);
		put(&p, "1-1", 3);
		put_shape_end(&p);
		SHAPE_PAYLOAD_REFUSED(&p, "decode");
		buf_free(&p);
	}
}

/* Strings with a NUL inside are refused wherever they are. */
TEST(strings_with_a_nul_inside_are_refused)
{
	static const char nul[] = "ab\0cd";
	Buf			p = {0};

	/* the slot */
	put_u64(&p, 1);
	put_u32(&p, 1);
	put_u32(&p, 1);
	put_strn(&p, nul, 5);
	put_u32(&p, 0);
	put_str(&p, "boot");
	put_u64(&p, 0);
	put_u32(&p, 0);
	put_u64(&p, 0);
	put_u32(&p, 0);
	MANIFEST_PAYLOAD_REFUSED(&p, "decode");
	buf_free(&p);

	/* the boot id, a trailing NUL */
	put_u64(&p, 1);
	put_u32(&p, 1);
	put_u32(&p, 1);
	put_str(&p, "slot");
	put_u32(&p, 0);
	put_strn(&p, "boot\0", 5);
	put_u64(&p, 0);
	put_u32(&p, 0);
	put_u64(&p, 0);
	put_u32(&p, 0);
	MANIFEST_PAYLOAD_REFUSED(&p, "decode");
	buf_free(&p);

	/* a handle in the manifest, starting with a NUL */
	put_header(&p);
	put_u32(&p, 1);
	put_strn(&p, "\0-1", 3);
	put_u32(&p, 1);
	put_u64(&p, 100);
	put_u64(&p, 5);
	put_u64(&p, 2);
	put_u32(&p, 0);
	MANIFEST_PAYLOAD_REFUSED(&p, "decode");
	buf_free(&p);

	/* each text of a shape file, and a column */
	for (int field = 0; field < 8; field++)
	{
		const char *texts[] = {"1-1", "identity", "fingerprint", "{}", "public", "items",
		"a = 1"};

		for (int i = 0; i < 7; i++)
		{
			if (i == field)
				put_strn(&p, nul, 5);
			else
				put_str(&p, texts[i]);
		}
		put_u32(&p, 1);
		if (field == 7)
			put_strn(&p, nul, 5);
		else
			put_str(&p, "id");
		put_shape_middle(&p, 0);
		put_shape_end(&p);
		SHAPE_PAYLOAD_REFUSED(&p, "decode");
		buf_free(&p);
	}
}

/* Fixed-size strings that would not fit with their NUL are refused. */
TEST(over_long_fixed_strings_are_refused)
{
	char		name[LOG_STORE_NAME_LEN + 1];
	char		handle[LOG_STORE_HANDLE_LEN + 1];
	Buf			p = {0};
	LogStoreManifest m;
	LogStoreShape s;

	memset(name, 'n', LOG_STORE_NAME_LEN);
	name[LOG_STORE_NAME_LEN] = '\0';
	memset(handle, 'h', LOG_STORE_HANDLE_LEN);
	handle[LOG_STORE_HANDLE_LEN] = '\0';

	/* 64 bytes of slot: one too many */
	put_u64(&p, 1);
	put_u32(&p, 1);
	put_u32(&p, 1);
	put_str(&p, name);
	put_u32(&p, 0);
	put_str(&p, "boot");
	put_u64(&p, 0);
	put_u32(&p, 0);
	put_u64(&p, 0);
	put_u32(&p, 0);
	MANIFEST_PAYLOAD_REFUSED(&p, "decode");
	buf_free(&p);

	/* 64 bytes of boot id */
	put_u64(&p, 1);
	put_u32(&p, 1);
	put_u32(&p, 1);
	put_str(&p, "slot");
	put_u32(&p, 0);
	put_str(&p, name);
	put_u64(&p, 0);
	put_u32(&p, 0);
	put_u64(&p, 0);
	put_u32(&p, 0);
	MANIFEST_PAYLOAD_REFUSED(&p, "decode");
	buf_free(&p);

	/* 63 bytes fit */
	name[LOG_STORE_NAME_LEN - 1] = '\0';
	put_u64(&p, 1);
	put_u32(&p, 1);
	put_u32(&p, 1);
	put_str(&p, name);
	put_u32(&p, 0);
	put_str(&p, name);
	put_u64(&p, 0);
	put_u32(&p, 0);
	put_u64(&p, 0);
	put_u32(&p, 0);
	if (MANIFEST_PAYLOAD_ACCEPTED(&p, &m))
	{
		CHECK_STR_EQ(m.header.slot, name);
		CHECK_STR_EQ(m.header.boot_id, name);
		log_manifest_free(&m);
	}
	buf_free(&p);

	/* a NULL slot */
	put_u64(&p, 1);
	put_u32(&p, 1);
	put_u32(&p, 1);
	put_null(&p);
	put_u32(&p, 0);
	put_str(&p, "boot");
	put_u64(&p, 0);
	put_u32(&p, 0);
	put_u64(&p, 0);
	put_u32(&p, 0);
	MANIFEST_PAYLOAD_REFUSED(&p, "decode");
	buf_free(&p);

	/* 48 bytes of handle in the manifest, and in a shape file */
	put_header(&p);
	put_u32(&p, 1);
	put_extent_head(&p, handle, 0);
	MANIFEST_PAYLOAD_REFUSED(&p, "decode");
	buf_free(&p);

	put_str(&p, handle);
	for (int i = 0; i < 5; i++)
		put_str(&p, "t");
	put_null(&p);
	put_u32(&p, 0);
	put_shape_middle(&p, 0);
	put_shape_end(&p);
	SHAPE_PAYLOAD_REFUSED(&p, "decode");
	buf_free(&p);

	/* a NULL handle in a shape file */
	put_null(&p);
	for (int i = 0; i < 5; i++)
		put_str(&p, "t");
	put_null(&p);
	put_u32(&p, 0);
	put_shape_middle(&p, 0);
	put_shape_end(&p);
	SHAPE_PAYLOAD_REFUSED(&p, "decode");
	buf_free(&p);

	/* 47 bytes of handle fit */
	handle[LOG_STORE_HANDLE_LEN - 1] = '\0';
	put_str(&p, handle);
	for (int i = 0; i < 5; i++)
		put_str(&p, "t");
	put_null(&p);
	put_u32(&p, 0);
	put_shape_middle(&p, 0);
	put_shape_end(&p);
	if (SHAPE_PAYLOAD_ACCEPTED(&p, &s))
	{
		CHECK_STR_EQ(s.handle, handle);
		log_store_shape_free(&s);
	}
	buf_free(&p);
}

/* A short error buffer gets a cut, terminated sentence. */
TEST(a_short_error_buffer_is_respected)
{
	char		error[16];
	LogStoreManifest m;
	LogStoreShape s;

	memset(error, 'x', sizeof(error));
	CHECK(!log_manifest_decode("SSYNC", 5, &m, error, 8));
	CHECK(memchr(error, '\0', 8) != NULL);
	CHECK_EQ(error[8], 'x');
	memset(error, 'x', sizeof(error));
	CHECK(!log_store_shape_decode("SSYNC", 5, &s, error, 8));
	CHECK(memchr(error, '\0', 8) != NULL);
	CHECK_EQ(error[8], 'x');
}

/* ============================================================= headers */

TEST(equal_headers_match)
{
	LogStoreHeader a;
	LogStoreHeader b;

	sample_header(&a);
	sample_header(&b);
	CHECK(log_store_header_mismatch(&a, &b) == NULL);

	/* how far the files got, and the boot, do not matter with fsync on */
	b.durable_lsn = a.durable_lsn + 1000;
	b.sets_generation = a.sets_generation + 1;
	b.sets_length = 0;
	strcpy(b.boot_id, "another-boot");
	a.fsync_policy = LOG_FSYNC_BATCH;
	CHECK(log_store_header_mismatch(&a, &b) == NULL);
	a.fsync_policy = LOG_FSYNC_COMMIT;
	CHECK(log_store_header_mismatch(&a, &b) == NULL);

	/* nor the policy the server now runs under */
	b.fsync_policy = LOG_FSYNC_OFF;
	CHECK(log_store_header_mismatch(&a, &b) == NULL);

	/* with fsync off, the same boot matches */
	a.fsync_policy = LOG_FSYNC_OFF;
	strcpy(b.boot_id, a.boot_id);
	CHECK(log_store_header_mismatch(&a, &b) == NULL);
}

TEST(each_differing_field_is_named)
{
	LogStoreHeader a;
	LogStoreHeader b;

	sample_header(&a);
	sample_header(&b);
	b.system_id++;
	CHECK_STR_EQ(log_store_header_mismatch(&a, &b), "the system identifier");

	sample_header(&b);
	b.timeline++;
	CHECK_STR_EQ(log_store_header_mismatch(&a, &b), "the timeline");

	sample_header(&b);
	b.database_oid++;
	CHECK_STR_EQ(log_store_header_mismatch(&a, &b), "the database");

	sample_header(&b);
	strcpy(b.slot, "shape_sync_16385");
	CHECK_STR_EQ(log_store_header_mismatch(&a, &b), "the replication slot");
	b.slot[0] = '\0';
	CHECK_STR_EQ(log_store_header_mismatch(&a, &b), "the replication slot");

	/* the first that differs is named */
	sample_header(&b);
	b.timeline++;
	strcpy(b.slot, "other");
	CHECK_STR_EQ(log_store_header_mismatch(&a, &b), "the timeline");
	b.system_id++;
	CHECK_STR_EQ(log_store_header_mismatch(&a, &b), "the system identifier");
}

TEST(another_boot_matters_only_with_fsync_off)
{
	LogStoreHeader a;
	LogStoreHeader b;
	const char *why;

	sample_header(&a);
	sample_header(&b);
	strcpy(b.boot_id, "another-boot");

	a.fsync_policy = LOG_FSYNC_OFF;
	why = log_store_header_mismatch(&a, &b);
	CHECK(why != NULL);
	if (why != NULL)
	{
		CHECK(strstr(why, "boot") != NULL);
		CHECK(strstr(why, "shape_sync.log_fsync") != NULL);
	}
	/* the policy that counts is the one the files were written under */
	b.fsync_policy = LOG_FSYNC_COMMIT;
	CHECK(log_store_header_mismatch(&a, &b) != NULL);

	a.fsync_policy = LOG_FSYNC_BATCH;
	b.fsync_policy = LOG_FSYNC_OFF;
	CHECK(log_store_header_mismatch(&a, &b) == NULL);
	a.fsync_policy = LOG_FSYNC_COMMIT;
	CHECK(log_store_header_mismatch(&a, &b) == NULL);

	/* fields before the boot are named first */
	a.fsync_policy = LOG_FSYNC_OFF;
	b.database_oid++;
	CHECK_STR_EQ(log_store_header_mismatch(&a, &b), "the database");
}


/*
 * The frame's checksum is FNV-1a 64, as the format says: the published
 * test vectors (the offset basis had lost its last digit, so files were
 * checked with another hash than the one named).
 */
TEST(checksum_is_fnv1a_64)
{
	if (fnv_hash_bytes(FNV_HASH_START, "", 0) != 0xcbf29ce484222325ULL)
		FAIL("FNV-1a 64 of \"\" is %016llx", (unsigned long long) fnv_hash_bytes(FNV_HASH_START, "", 0));
	if (fnv_hash_bytes(FNV_HASH_START, "a", 1) != 0xaf63dc4c8601ec8cULL)
		FAIL("FNV-1a 64 of \"a\" is %016llx", (unsigned long long) fnv_hash_bytes(FNV_HASH_START, "a", 1));
	if (fnv_hash_bytes(FNV_HASH_START, "foobar", 6) != 0x85944171f73967e8ULL)
		FAIL("FNV-1a 64 of \"foobar\" is %016llx",
			 (unsigned long long) fnv_hash_bytes(FNV_HASH_START, "foobar", 6));
}

/* ============================================================== deltas */

static int
extent_by_handle(const void *a, const void *b)
{
	return strcmp(((const LogStoreExtent *) a)->handle, ((const LogStoreExtent *) b)->handle);
}

/* Compares as sets of shapes: a delta's new shapes come after the others. */
static void
manifest_set_eq_at(const char *file, int line, LogStoreManifest *got, LogStoreManifest *want)
{
	if (got->nshapes > 1)
		qsort(got->shapes, got->nshapes, sizeof(LogStoreExtent), extent_by_handle);
	if (want->nshapes > 1)
		qsort(want->shapes, want->nshapes, sizeof(LogStoreExtent), extent_by_handle);
	manifest_eq(file, line, got, want);
}

#define MANIFEST_SET_EQ(a, b) manifest_set_eq_at(__FILE__, __LINE__, a, b)

/* bytes = a + b (both freed), its length in *len */
static char *
concat(char *a, size_t alen, char *b, size_t blen, size_t *len)
{
	char	   *c = malloc(alen + blen);

	if (c == NULL)
		abort();
	memcpy(c, a, alen);
	memcpy(c + alen, b, blen);
	free(a);
	free(b);
	*len = alen + blen;
	return c;
}

static LogStoreExtent *
find_extent(LogStoreManifest *m, const char *handle)
{
	for (uint32_t i = 0; i < m->nshapes; i++)
		if (strcmp(m->shapes[i].handle, handle) == 0)
			return &m->shapes[i];
	return NULL;
}

static void
drop_extent(LogStoreManifest *m, const char *handle)
{
	LogStoreExtent *e = find_extent(m, handle);

	if (e == NULL)
		abort();
	free(e->chunks);
	*e = m->shapes[--m->nshapes];
}

/* e gains `more` chunks after its own (make_chunks(..., seed)); *tail points at them */
static void
grow_extent(LogStoreExtent *e, uint32_t more, uint64_t seed, SlogChunk **tail)
{
	SlogChunk  *extra = make_chunks(more, seed);

	e->chunks = realloc(e->chunks, sizeof(SlogChunk) * (e->nchunks + more));
	if (e->chunks == NULL)
		abort();
	memcpy(e->chunks + e->nchunks, extra, sizeof(SlogChunk) * more);
	free(extra);
	*tail = e->chunks + e->nchunks;
	e->nchunks += more;
}

/*
 * The sample manifest, then two deltas: the first removes a shape, gives
 * another two chunks more, and lists a new one; the second gives a shape
 * its next generation (chunks from 0), lists the removed one again, and
 * removes another.  *after1 and *after2 are what each leaves.
 */
static char *
sample_with_deltas(LogStoreManifest *after1, LogStoreManifest *after2, size_t *base_len,
				   size_t *delta1_len, size_t *len)
{
	LogStoreManifest m;
	char	   *bytes;
	char	   *d;
	size_t		dlen;
	LogStoreDelta delta;
	LogStoreExtent changed[2];
	uint32_t	first[2];
	const char *removed[1];
	SlogChunk  *tail;
	LogStoreExtent *e;

	sample_manifest(&m, 5);
	bytes = log_manifest_encode(&m, base_len);
	if (bytes == NULL)
		abort();
	*len = *base_len;

	/* delta 1 */
	memset(&delta, 0, sizeof(delta));
	delta.header = m.header;
	delta.header.durable_lsn += 100;
	delta.header.sets_length += 4096;	/* a round appended value sets */
	removed[0] = "12345-1700000000000000";
	delta.removed = removed;
	delta.nremoved = 1;
	drop_extent(&m, removed[0]);
	e = find_extent(&m, "67890-1700000000000001");
	grow_extent(e, 2, 90000, &tail);
	e->length += 5000;
	e->last.tx += 3;
	changed[0] = *e;
	changed[0].chunks = tail;
	first[0] = e->nchunks - 2;
	m.shapes = realloc(m.shapes, sizeof(LogStoreExtent) * (m.nshapes + 1));
	e = &m.shapes[m.nshapes++];
	memset(e, 0, sizeof(*e));
	strcpy(e->handle, "new-1");
	e->generation = 1;
	e->length = 777;
	e->last.tx = 42;
	e->last.op = 1;
	e->nchunks = 2;
	e->chunks = make_chunks(2, 5);
	changed[1] = *e;
	first[1] = 0;
	delta.changed = changed;
	delta.first_chunk = first;
	delta.nchanged = 2;
	d = log_manifest_delta_encode(&delta, &dlen);
	if (d == NULL)
		abort();
	bytes = concat(bytes, *len, d, dlen, len);
	*delta1_len = dlen;
	m.header = delta.header;
	/* a deep copy of the state after delta 1 */
	{
		size_t		l;
		char	   *copy = log_manifest_encode(&m, &l);
		char		error[LOG_STORE_ERROR_LEN];

		if (copy == NULL || !log_manifest_decode(copy, l, after1, error, sizeof(error)))
			abort();
		free(copy);
	}

	/* delta 2 */
	memset(&delta, 0, sizeof(delta));
	delta.header = m.header;
	delta.header.durable_lsn += 100;
	delta.header.fsync_policy = LOG_FSYNC_COMMIT;
	delta.header.sets_generation++;	/* a new value sets file */
	delta.header.sets_length = 512;
	removed[0] = "big-handle";
	delta.removed = removed;
	delta.nremoved = 1;
	drop_extent(&m, removed[0]);
	memset(changed, 0, sizeof(changed));
	e = find_extent(&m, "67890-1700000000000001");
	e->generation++;
	free(e->chunks);
	e->nchunks = 1;
	e->chunks = make_chunks(1, 31);
	e->length = 1000;
	changed[0] = *e;
	first[0] = 0;
	m.shapes = realloc(m.shapes, sizeof(LogStoreExtent) * (m.nshapes + 1));
	e = &m.shapes[m.nshapes++];
	memset(e, 0, sizeof(*e));
	strcpy(e->handle, "12345-1700000000000000");
	e->generation = 3;
	e->length = 10;
	e->last.tx = 9;
	e->nchunks = 1;
	e->chunks = make_chunks(1, 8);
	changed[1] = *e;
	first[1] = 0;
	delta.changed = changed;
	delta.first_chunk = first;
	delta.nchanged = 2;
	d = log_manifest_delta_encode(&delta, &dlen);
	if (d == NULL)
		abort();
	bytes = concat(bytes, *len, d, dlen, len);
	m.header = delta.header;
	*after2 = m;
	return bytes;
}

/* The sample with its two deltas, and what each leaves (sample_with_deltas). */
typedef struct DeltaSample
{
	LogStoreManifest after1;
	LogStoreManifest after2;
	size_t		base_len;
	size_t		delta1_len;
	size_t		len;
	char	   *bytes;
} DeltaSample;

static void
delta_sample(DeltaSample *d)
{
	d->bytes = sample_with_deltas(&d->after1, &d->after2, &d->base_len, &d->delta1_len, &d->len);
}

static void
delta_sample_free(DeltaSample *d)
{
	free(d->bytes);
	log_manifest_free(&d->after1);
	sample_manifest_free(&d->after2);
}

TEST(deltas_apply_in_order)
{
	DeltaSample d;
	LogStoreManifest out;
	char		error[LOG_STORE_ERROR_LEN];

	delta_sample(&d);
	if (DECODE_MANIFEST(d.bytes, d.len, &out, error))
	{
		CHECK_EQ(out.deltas, 2);
		CHECK_EQ(out.torn_bytes, 0);
		MANIFEST_SET_EQ(&out, &d.after2);
		log_manifest_free(&out);
	}
	else
		FAIL("a manifest with two deltas was refused: %s", error);
	/* the whole part alone, and with the first delta */
	if (DECODE_MANIFEST(d.bytes, d.base_len + d.delta1_len, &out, error))
	{
		CHECK_EQ(out.deltas, 1);
		MANIFEST_SET_EQ(&out, &d.after1);
		log_manifest_free(&out);
	}
	else
		FAIL("a manifest with one delta was refused: %s", error);
	delta_sample_free(&d);
}

/*
 * The last delta cut anywhere, or its length written but not its bytes
 * (zeros, as a crash can leave a file extended), ends the deltas: what is
 * read is the state before it.
 */
TEST(a_delta_cut_short_ends_the_deltas)
{
	DeltaSample d;
	LogStoreManifest out;
	char		error[LOG_STORE_ERROR_LEN];
	size_t		at;

	delta_sample(&d);
	at = d.base_len + d.delta1_len;

	for (size_t cut = at + 1; cut < d.len; cut++)
	{
		if (!DECODE_MANIFEST(d.bytes, cut, &out, error))
		{
			FAIL("cut at %zu of %zu: refused: %s", cut, d.len, error);
			break;
		}
		CHECK_EQ(out.deltas, 1);
		CHECK_EQ(out.torn_bytes, cut - at);
		MANIFEST_SET_EQ(&out, &d.after1);
		log_manifest_free(&out);
	}
	memset(d.bytes + at, 0, d.len - at);
	if (DECODE_MANIFEST(d.bytes, d.len, &out, error))
	{
		CHECK_EQ(out.deltas, 1);
		CHECK_EQ(out.torn_bytes, d.len - at);
		log_manifest_free(&out);
	}
	else
		FAIL("a zeroed last delta: refused: %s", error);
	/* the whole part cut is not a torn delta: refused */
	MANIFEST_REFUSED(d.bytes, d.base_len - 1, "bytes long");
	delta_sample_free(&d);
}

/*
 * A flipped bit in a delta that a whole delta follows is damage: the
 * manifest is refused (a crash cuts only the last append, and the writer
 * appends nothing after a round that failed).  In the last delta it
 * cannot be told from a cut: the deltas end there, and what is read is the
 * state before it (a restore then checks that the slot was not confirmed
 * past its durable_lsn, log_restore.c).
 */
TEST(a_damaged_delta_is_refused_unless_it_is_the_last)
{
	DeltaSample d;
	LogStoreManifest out;
	char		error[LOG_STORE_ERROR_LEN];

	delta_sample(&d);
	for (size_t at = d.base_len; at < d.len && UNIT_FAILURES() == 0; at++)
	{
		d.bytes[at] ^= 0x10;
		if (at < d.base_len + d.delta1_len)
			MANIFEST_REFUSED(d.bytes, d.len, "follows bytes");
		else if (!DECODE_MANIFEST(d.bytes, d.len, &out, error))
			FAIL("a flip at %zu of the last delta: refused: %s", at, error);
		else
		{
			CHECK_EQ(out.deltas, 1);
			CHECK_EQ(out.torn_bytes, d.len - d.base_len - d.delta1_len);
			MANIFEST_SET_EQ(&out, &d.after1);
			log_manifest_free(&out);
		}
		d.bytes[at] ^= 0x10;
	}
	delta_sample_free(&d);
}

/* A whole delta frame (sealed) with the given payload, after the sample manifest. */
static void
delta_refused_at(const char *file, int line, Buf *payload, const char *phrase)
{
	LogStoreManifest m;
	size_t		len;
	size_t		flen;
	char	   *bytes;
	char	   *f;

	sample_manifest(&m, 5);
	bytes = log_manifest_encode(&m, &len);
	f = frame("SSYNCDLT", LOG_STORE_FORMAT_VERSION, payload->d, payload->len, &flen);
	bytes = concat(bytes, len, f, flen, &len);
	manifest_refused_at(file, line, bytes, len, phrase);
	free(bytes);
	sample_manifest_free(&m);
	buf_free(payload);
}

/* a delta payload: the sample header, the removed handles, then the caller's changes */
static void
delta_payload(Buf *b, const char *removed)
{
	LogStoreHeader h;

	sample_header(&h);
	memset(b, 0, sizeof(*b));
	put_u64(b, h.system_id);
	put_u32(b, h.timeline);
	put_u32(b, h.database_oid);
	put_str(b, h.slot);
	put_u32(b, h.fsync_policy);
	put_str(b, h.boot_id);
	put_u64(b, h.durable_lsn);
	put_u32(b, h.sets_generation);
	put_u64(b, h.sets_length);
	put_u32(b, removed ? 1 : 0);
	if (removed)
		put_str(b, removed);
}

/* one change: its first chunk, handle, generation, nchunks; chunks from first on */
static void
delta_change(Buf *b, uint32_t first, const char *handle, uint32_t generation, uint32_t nchunks)
{
	put_u32(b, 1);
	put_u32(b, first);
	put_str(b, handle);
	put_u32(b, generation);
	put_u64(b, 100);
	put_u64(b, 1);
	put_u64(b, 2);
	put_u32(b, nchunks);
	for (uint32_t c = first; c < nchunks; c++)
		for (int k = 0; k < 4; k++)
			put_u64(b, c * 10 + k);
}

/*
 * A whole delta whose changes do not fit what it follows is corruption,
 * not a crash: the manifest is refused.
 */
TEST(a_delta_that_does_not_apply_is_refused)
{
	Buf			b;

	/* it removes a shape that is not listed */
	delta_payload(&b, "not-listed");
	put_u32(&b, 0);
	delta_refused_at(__FILE__, __LINE__, &b, "does not apply");
	/* it extends chunks past those listed (shape 1 has 5) */
	delta_payload(&b, NULL);
	delta_change(&b, 6, "67890-1700000000000001", 7, 8);
	delta_refused_at(__FILE__, __LINE__, &b, "does not apply");
	/* it extends the chunks of another generation */
	delta_payload(&b, NULL);
	delta_change(&b, 5, "67890-1700000000000001", 8, 6);
	delta_refused_at(__FILE__, __LINE__, &b, "does not apply");
	/* it extends the chunks of a shape that is not listed */
	delta_payload(&b, NULL);
	delta_change(&b, 1, "new-one", 1, 2);
	delta_refused_at(__FILE__, __LINE__, &b, "does not apply");
	/* ... or that it removed */
	delta_payload(&b, "67890-1700000000000001");
	delta_change(&b, 5, "67890-1700000000000001", 7, 6);
	delta_refused_at(__FILE__, __LINE__, &b, "does not apply");
	/* fewer chunks than its first */
	delta_payload(&b, NULL);
	delta_change(&b, 5, "67890-1700000000000001", 7, 4);
	delta_refused_at(__FILE__, __LINE__, &b, "does not apply");
	/* a byte more than its changes */
	delta_payload(&b, NULL);
	put_u32(&b, 0);
	put(&b, "x", 1);
	delta_refused_at(__FILE__, __LINE__, &b, "does not apply");
	/* the encoder refuses a first chunk past the count */
	{
		LogStoreDelta delta;
		LogStoreExtent e;
		uint32_t	first = 3;
		size_t		len;

		memset(&delta, 0, sizeof(delta));
		memset(&e, 0, sizeof(e));
		sample_header(&delta.header);
		strcpy(e.handle, "h");
		e.nchunks = 2;
		delta.changed = &e;
		delta.first_chunk = &first;
		delta.nchanged = 1;
		CHECK(log_manifest_delta_encode(&delta, &len) == NULL);
	}
}

/*
 * Shapes a delta lists anew are found by the next ones, also past the
 * size at which the decoder's index of handles grows.
 */
TEST(shapes_new_in_deltas_are_found_again)
{
	LogStoreManifest m;
	LogStoreManifest out;
	LogStoreDelta delta;
	LogStoreExtent changed[100];
	uint32_t	first[100];
	SlogChunk	chunks[100][2];
	char	   *bytes;
	char	   *d;
	size_t		len;
	size_t		dlen;
	char		error[LOG_STORE_ERROR_LEN];

	memset(&m, 0, sizeof(m));
	sample_header(&m.header);
	bytes = log_manifest_encode(&m, &len);
	REQUIRE(bytes != NULL);
	memset(changed, 0, sizeof(changed));
	memset(chunks, 0, sizeof(chunks));
	for (uint32_t i = 0; i < 100; i++)
	{
		snprintf(changed[i].handle, sizeof(changed[i].handle), "shape-%u", i);
		changed[i].generation = 1;
		changed[i].nchunks = 1;
		chunks[i][0].end_pos = i;
		chunks[i][1].end_pos = 1000 + i;
		changed[i].chunks = &chunks[i][0];
		first[i] = 0;
	}
	memset(&delta, 0, sizeof(delta));
	delta.header = m.header;
	delta.changed = changed;
	delta.first_chunk = first;
	delta.nchanged = 100;
	d = log_manifest_delta_encode(&delta, &dlen);
	REQUIRE(d != NULL);
	bytes = concat(bytes, len, d, dlen, &len);
	/* each gains a chunk: found by its handle */
	for (uint32_t i = 0; i < 100; i++)
	{
		changed[i].nchunks = 2;
		changed[i].chunks = &chunks[i][1];
		first[i] = 1;
	}
	d = log_manifest_delta_encode(&delta, &dlen);
	REQUIRE(d != NULL);
	bytes = concat(bytes, len, d, dlen, &len);
	if (DECODE_MANIFEST(bytes, len, &out, error))
	{
		CHECK_EQ(out.nshapes, 100);
		CHECK_EQ(out.deltas, 2);
		for (uint32_t i = 0; i < out.nshapes; i++)
		{
			unsigned	k;

			CHECK_EQ(out.shapes[i].nchunks, 2);
			CHECK(sscanf(out.shapes[i].handle, "shape-%u", &k) == 1);
			if (out.shapes[i].nchunks == 2)
			{
				CHECK_EQ(out.shapes[i].chunks[0].end_pos, k);
				CHECK_EQ(out.shapes[i].chunks[1].end_pos, 1000 + k);
			}
		}
		log_manifest_free(&out);
	}
	else
		FAIL("100 shapes listed by a delta, then extended: refused: %s", error);
	free(bytes);
}

UNIT_MAIN()
