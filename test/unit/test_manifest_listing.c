/*
 * Tests of manifest_listing.c: the rounds that keep the manifest up to
 * date by deltas, checked by decoding the file they build.
 *
 * The model is a set of slots whose shapes appear, grow, gain chunks, get
 * their next generation, leave and are replaced; each round offers every
 * slot, and its bytes are written to an in-memory "file" as the flusher
 * would (a whole manifest replaces it, a delta goes at its end), or are
 * lost, part of them written, as a failed round or a crash leaves them.
 * After every round the file must decode to what was last written: the
 * model's listing after a written round, the one before after a lost one.
 */
#include "unit.h"

#include <stdlib.h>
#include <string.h>

#include "log_manifest.h"
#include "manifest_listing.h"

#define MAX_CHUNKS	40

typedef struct ModelSlot
{
	bool		listed;
	char		handle[LOG_STORE_HANDLE_LEN];
	uint32_t	generation;
	uint64_t	length;
	LogOffset	last;
	uint32_t	nchunks;
	SlogChunk	chunks[MAX_CHUNKS];
} ModelSlot;

typedef struct Model
{
	uint32_t	nslots;
	ModelSlot  *slots;
	uint32_t	handles;		/* made so far: each new shape has its own */
	uint64_t	seed;
	/* the file */
	char	   *file;
	size_t		file_len;
	/* what it was last written to say */
	ModelSlot  *written;
	uint64_t	written_lsn;
} Model;

static uint32_t
rnd(Model *m, uint32_t n)
{
	m->seed = m->seed * 6364136223846793005ULL + 1442695040888963407ULL;
	return (uint32_t) ((m->seed >> 33) % n);
}

static void
model_init(Model *m, uint32_t nslots, uint64_t seed)
{
	memset(m, 0, sizeof(*m));
	m->nslots = nslots;
	m->slots = calloc(nslots, sizeof(ModelSlot));
	m->written = calloc(nslots, sizeof(ModelSlot));
	m->seed = seed;
	if (m->slots == NULL || m->written == NULL)
		abort();
}

static void
model_free(Model *m)
{
	free(m->slots);
	free(m->written);
	free(m->file);
}

static void
add_chunk(Model *m, ModelSlot *s)
{
	SlogChunk  *c;

	if (s->nchunks == MAX_CHUNKS)
		return;
	c = &s->chunks[s->nchunks];
	c->start_pos = s->nchunks == 0 ? 0 : s->chunks[s->nchunks - 1].end_pos;
	c->end_pos = c->start_pos + 1 + rnd(m, 1000);
	c->end_tx = (int64_t) (s->nchunks + 1) * 10;
	c->end_op = rnd(m, 5);
	s->nchunks++;
}

static void
new_shape(Model *m, ModelSlot *s)
{
	memset(s, 0, sizeof(*s));
	s->listed = true;
	snprintf(s->handle, sizeof(s->handle), "%u-17000000000%05u", m->handles, m->handles);
	m->handles++;
	s->generation = 1;
	s->last = LOG_OFFSET_BEFORE_ALL;
	for (uint32_t k = rnd(m, 3); k > 0; k--)
		add_chunk(m, s);
}

/* What may happen to a slot between two rounds. */
static void
model_step(Model *m, uint32_t slot)
{
	ModelSlot  *s = &m->slots[slot];
	uint32_t	r = rnd(m, 100);

	if (!s->listed)
	{
		if (r < 20)
		{
			/* a shape listed again after it left (a failed round's, compacted) keeps its handle */
			if (s->handle[0] != '\0' && r < 5)
				s->listed = true;
			else
				new_shape(m, s);
		}
		return;
	}
	if (r < 30)
	{
		/* it grows */
		s->length += 1 + rnd(m, 500);
		s->last.tx += 1;
		s->last.op = rnd(m, 3);
		for (uint32_t k = rnd(m, 3); k > 0; k--)
			add_chunk(m, s);
	}
	else if (r < 34)
	{
		/* compacted: its next generation, fewer chunks */
		s->generation++;
		s->nchunks = s->nchunks / 2;
		s->length = s->length / 2;
	}
	else if (r < 38)
		s->listed = false;		/* forgotten, failed, rotated */
	else if (r < 41)
		new_shape(m, s);		/* the slot now holds another shape */
}

/* The slot's extent as a round offers it (chunks not given). */
static LogStoreExtent
extent_of(const ModelSlot *s)
{
	LogStoreExtent e;

	memset(&e, 0, sizeof(e));
	memcpy(e.handle, s->handle, sizeof(e.handle));
	e.generation = s->generation;
	e.length = s->length;
	e.last = s->last;
	e.nchunks = s->nchunks;
	return e;
}

/* A round's offers; returns whether it is written whole. */
static bool
offer_all(ManifestListing *l, Model *m)
{
	bool		whole = manifest_listing_begin(l);

	for (uint32_t slot = 0; slot < m->nslots; slot++)
	{
		const ModelSlot *s = &m->slots[slot];
		LogStoreExtent e = extent_of(s);
		uint32_t	first = manifest_listing_offer(l, slot, s->listed ? &e : NULL);

		if (!s->listed)
		{
			CHECK_EQ(first, UINT32_MAX);
			continue;
		}
		if (first == UINT32_MAX)
			continue;
		CHECK(first <= s->nchunks);
		for (uint32_t c = first; c < s->nchunks; c++)
			CHECK(manifest_listing_chunk(l, &s->chunks[c]));
	}
	return whole;
}

static void
header_at(LogStoreHeader *h, uint64_t lsn)
{
	memset(h, 0, sizeof(*h));
	h->system_id = 99;
	h->timeline = 1;
	h->database_oid = 5;
	strcpy(h->slot, "shape_sync_5");
	h->fsync_policy = LOG_FSYNC_BATCH;
	strcpy(h->boot_id, "boot");
	h->durable_lsn = lsn;
}

/* Puts a round's bytes in the file: all of them, or the first `n`. */
static void
file_write(Model *m, const ManifestWrite *w, size_t n)
{
	if (!w->append)
	{
		/* written aside and renamed: all or nothing */
		if (n < w->len)
			return;
		free(m->file);
		m->file = malloc(w->len);
		if (m->file == NULL)
			abort();
		memcpy(m->file, w->bytes, w->len);
		m->file_len = w->len;
		return;
	}
	REQUIRE_EQ(w->at, m->file_len);
	m->file = realloc(m->file, m->file_len + n + 1);
	if (m->file == NULL)
		abort();
	memcpy(m->file + m->file_len, w->bytes, n);
	m->file_len += n;
}

/* The file decodes to what was last written. */
static void
file_says_written_at(const char *file, int line, Model *m)
{
	LogStoreManifest got;
	char		error[LOG_STORE_ERROR_LEN];
	uint32_t	listed = 0;

	if (m->file == NULL)
		return;
	if (!log_manifest_decode(m->file, m->file_len, &got, error, sizeof(error)))
	{
		unit_fail(file, line, "the manifest does not decode: %s", error);
		return;
	}
	if (got.header.durable_lsn != m->written_lsn)
		unit_fail(file, line, "durable_lsn %llu, want %llu",
				  (unsigned long long) got.header.durable_lsn,
				  (unsigned long long) m->written_lsn);
	for (uint32_t slot = 0; slot < m->nslots; slot++)
	{
		const ModelSlot *w = &m->written[slot];
		const LogStoreExtent *e = NULL;

		if (!w->listed)
			continue;
		listed++;
		for (uint32_t i = 0; i < got.nshapes && e == NULL; i++)
			if (strcmp(got.shapes[i].handle, w->handle) == 0)
				e = &got.shapes[i];
		if (e == NULL)
		{
			unit_fail(file, line, "slot %u: %s is not listed", slot, w->handle);
			continue;
		}
		if (e->generation != w->generation || e->length != w->length ||
			e->last.tx != w->last.tx || e->last.op != w->last.op || e->nchunks != w->nchunks)
		{
			unit_fail(file, line, "slot %u: %s differs (gen %u/%u, len %llu/%llu, chunks %u/%u)",
					  slot, w->handle, e->generation, w->generation,
					  (unsigned long long) e->length, (unsigned long long) w->length,
					  e->nchunks, w->nchunks);
			continue;
		}
		for (uint32_t c = 0; c < e->nchunks; c++)
			if (memcmp(&e->chunks[c], &w->chunks[c], sizeof(SlogChunk)) != 0)
			{
				unit_fail(file, line, "slot %u: %s chunk %u differs", slot, w->handle, c);
				break;
			}
	}
	if (got.nshapes != listed)
		unit_fail(file, line, "%u shapes listed, want %u", got.nshapes, listed);
	log_manifest_free(&got);
}

#define FILE_SAYS_WRITTEN(m) file_says_written_at(__FILE__, __LINE__, m)

/* What a whole manifest of what was last written takes. */
static size_t
whole_size(const Model *m)
{
	LogStoreManifest w;
	size_t		len = 0;
	char	   *bytes;

	memset(&w, 0, sizeof(w));
	header_at(&w.header, m->written_lsn);
	w.shapes = calloc(m->nslots, sizeof(LogStoreExtent));
	if (w.shapes == NULL)
		abort();
	for (uint32_t slot = 0; slot < m->nslots; slot++)
		if (m->written[slot].listed)
		{
			w.shapes[w.nshapes] = extent_of(&m->written[slot]);
			w.shapes[w.nshapes++].chunks = (SlogChunk *) m->written[slot].chunks;
		}
	bytes = log_manifest_encode(&w, &len);
	if (bytes == NULL)
		abort();
	free(bytes);
	free(w.shapes);
	return len;
}

static void
model_written(Model *m, uint64_t lsn)
{
	memcpy(m->written, m->slots, sizeof(ModelSlot) * m->nslots);
	m->written_lsn = lsn;
}

/*
 * Random rounds, some lost with part of their bytes written: the file
 * always says what the last written round listed, and stays bounded.
 */
static void
random_rounds(uint64_t seed)
{
	Model		m;
	ManifestListing *l;
	uint32_t	wholes = 0;
	uint32_t	deltas = 0;
	uint32_t	losses = 0;
	size_t		largest_delta = 0;

	model_init(&m, 48, seed);
	l = manifest_listing_create(m.nslots);
	REQUIRE(l != NULL);
	for (uint32_t round = 1; round <= 3000 && UNIT_FAILURES() == 0; round++)
	{
		LogStoreHeader h;
		ManifestWrite w;
		bool		whole;
		uint32_t	outcome = rnd(&m, 100);
		size_t		before = whole_size(&m);

		for (uint32_t slot = 0; slot < m.nslots; slot++)
			model_step(&m, slot);
		whole = offer_all(l, &m);
		if (round == 1)
			CHECK(whole);
		header_at(&h, round);
		REQUIRE(manifest_listing_encode(l, &h, &w));
		CHECK(w.append == !whole);
		if (outcome < 4)
		{
			/* no manifest this round after all */
			manifest_listing_cancel(l);
		}
		else if (outcome < 14)
		{
			/* lost: part of it written (a delta cut short), or none */
			file_write(&m, &w, rnd(&m, (uint32_t) w.len));
			manifest_listing_lost(l);
			losses++;
		}
		else
		{
			file_write(&m, &w, w.len);
			manifest_listing_written(l);
			model_written(&m, round);
			if (whole)
				wholes++;
			else
			{
				deltas++;
				if (w.len > largest_delta)
					largest_delta = w.len;
			}
			/* within a few times what a whole manifest took before the round, and the slack */
			CHECK(m.file_len <= 3 * before + 2 * MANIFEST_LISTING_DELTA_SLACK + largest_delta);
		}
		free(w.bytes);
		FILE_SAYS_WRITTEN(&m);
		/* after a loss, the next round is whole */
		if (outcome >= 4 && outcome < 14)
		{
			CHECK(manifest_listing_begin(l));
			manifest_listing_cancel(l);
		}
	}
	CHECK(wholes > 0);
	CHECK(deltas > wholes);
	manifest_listing_destroy(l);
	model_free(&m);
}

TEST(random_rounds_keep_the_file_equal_to_the_last_written)
{
	for (uint64_t seed = 1; seed <= 8 && UNIT_FAILURES() == 0; seed++)
		random_rounds(seed);
}

/*
 * A round whose bytes are all written to the file: its length, and in
 * *append whether it was a delta.
 */
static size_t
written_round(ManifestListing *l, Model *m, uint64_t lsn, bool *append)
{
	LogStoreHeader h;
	ManifestWrite w;
	bool		whole = offer_all(l, m);

	header_at(&h, lsn);
	if (!manifest_listing_encode(l, &h, &w))
	{
		FAIL("round %llu: not encoded", (unsigned long long) lsn);
		manifest_listing_cancel(l);
		return 0;
	}
	CHECK(w.append == !whole);
	file_write(m, &w, w.len);
	free(w.bytes);
	manifest_listing_written(l);
	model_written(m, lsn);
	*append = w.append;
	return w.len;
}

/* `n` slots, each a shape of `chunks` chunks */
static void
model_full(Model *m, uint32_t n, uint32_t chunks, uint64_t seed)
{
	model_init(m, n, seed);
	for (uint32_t slot = 0; slot < n; slot++)
	{
		new_shape(m, &m->slots[slot]);
		while (m->slots[slot].nchunks < chunks)
			add_chunk(m, &m->slots[slot]);
	}
}

/*
 * Beside 1,000 listed shapes of 10 chunks, a round in which one of them
 * gained one chunk writes about what that shape changed, not the others.
 */
TEST(a_round_writes_what_changed)
{
	Model		m;
	ManifestListing *l;
	size_t		whole_len;
	size_t		len;
	bool		append;

	model_full(&m, 1000, 10, 7);
	l = manifest_listing_create(m.nslots);
	REQUIRE(l != NULL);
	whole_len = written_round(l, &m, 1, &append);
	CHECK(!append);				/* the first round: whole */
	CHECK(whole_len > 1000 * 10 * 32);

	/* nothing changed but the position: the header alone */
	len = written_round(l, &m, 2, &append);
	CHECK(append);
	CHECK(len < 200);
	FILE_SAYS_WRITTEN(&m);

	/* one shape gained a chunk, another left, a third is another shape now */
	add_chunk(&m, &m.slots[500]);
	m.slots[500].length += 10;
	m.slots[7].listed = false;
	new_shape(&m, &m.slots[9]);
	len = written_round(l, &m, 3, &append);
	CHECK(append);
	CHECK(len < 400);
	FILE_SAYS_WRITTEN(&m);
	CHECK(m.file_len < whole_len + 600);
	manifest_listing_destroy(l);
	model_free(&m);
}

/*
 * Rounds that each change one shape append deltas until they add up to
 * more than the whole manifest and the slack; then one is whole again.
 */
TEST(deltas_that_add_up_are_folded_into_a_whole_manifest)
{
	Model		m;
	ManifestListing *l;
	size_t		whole_len = 0;
	uint32_t	wholes = 0;

	model_full(&m, 100, 0, 3);
	l = manifest_listing_create(m.nslots);
	REQUIRE(l != NULL);
	for (uint32_t round = 1; round <= 5000 && wholes < 3; round++)
	{
		size_t		before = m.file_len;
		size_t		len;
		bool		append;

		m.slots[round % m.nslots].length++;
		len = written_round(l, &m, round, &append);
		if (!append)
		{
			/* the deltas took more than the whole manifest (less its header) and the slack */
			if (round > 1)
				CHECK(before - whole_len > whole_len - 100 + MANIFEST_LISTING_DELTA_SLACK);
			wholes++;
			whole_len = len;
		}
		CHECK(m.file_len <= 2 * whole_len + MANIFEST_LISTING_DELTA_SLACK + 400);
	}
	CHECK_EQ(wholes, 3);
	FILE_SAYS_WRITTEN(&m);
	manifest_listing_destroy(l);
	model_free(&m);
}

/*
 * Once most shapes have gone, the next round writes the manifest whole:
 * the file follows what is listed now, not what once was.
 */
TEST(a_manifest_whose_shapes_left_is_written_whole_again)
{
	Model		m;
	ManifestListing *l;
	size_t		whole_len;
	size_t		len;
	bool		append;

	model_full(&m, 1000, 10, 11);
	l = manifest_listing_create(m.nslots);
	REQUIRE(l != NULL);
	whole_len = written_round(l, &m, 1, &append);
	CHECK(!append);
	/* round 2 removes 990 of them, by a delta */
	for (uint32_t slot = 10; slot < m.nslots; slot++)
		m.slots[slot].listed = false;
	(void) written_round(l, &m, 2, &append);
	CHECK(append);
	FILE_SAYS_WRITTEN(&m);
	/* round 3: whole, ten shapes' worth */
	len = written_round(l, &m, 3, &append);
	CHECK(!append);
	CHECK(len < whole_len / 50);
	FILE_SAYS_WRITTEN(&m);
	CHECK(m.file_len < whole_len / 50);
	manifest_listing_destroy(l);
	model_free(&m);
}

/*
 * A round's outcome comes once: a round begun while the one before was
 * still in flight, or an outcome without a round (the worker applied a
 * round twice), makes the next manifest whole, never a delta at a
 * position the file does not end at.
 */
TEST(an_outcome_out_of_turn_makes_the_next_manifest_whole)
{
	Model		m;
	ManifestListing *l;
	LogStoreHeader h;
	ManifestWrite w;
	bool		append;

	model_full(&m, 8, 0, 5);
	l = manifest_listing_create(m.nslots);
	REQUIRE(l != NULL);
	(void) written_round(l, &m, 1, &append);
	CHECK(!append);
	/* round 2 encoded, its outcome not yet applied, and round 3 begun: whole */
	m.slots[0].length++;
	CHECK(!offer_all(l, &m));
	header_at(&h, 2);
	REQUIRE(manifest_listing_encode(l, &h, &w));
	CHECK(w.append);
	free(w.bytes);
	(void) written_round(l, &m, 3, &append);
	CHECK(!append);
	FILE_SAYS_WRITTEN(&m);
	/* the same outcome again: the file is not known, the next is whole */
	manifest_listing_written(l);
	(void) written_round(l, &m, 4, &append);
	CHECK(!append);
	FILE_SAYS_WRITTEN(&m);
	manifest_listing_destroy(l);
	model_free(&m);
}

/* A chunk handed to a round that offered nothing, or too few chunks, fails: never a wrong file. */
TEST(misused_rounds_write_nothing)
{
	ManifestListing *l = manifest_listing_create(4);
	LogStoreExtent e;
	SlogChunk	c;
	LogStoreHeader h;
	ManifestWrite w;

	REQUIRE(l != NULL);
	memset(&e, 0, sizeof(e));
	memset(&c, 0, sizeof(c));
	strcpy(e.handle, "h");
	e.nchunks = 2;
	header_at(&h, 1);
	CHECK(manifest_listing_begin(l));
	CHECK(!manifest_listing_chunk(l, &c));
	CHECK_EQ(manifest_listing_offer(l, 0, &e), 0);
	CHECK(manifest_listing_chunk(l, &c));
	CHECK(!manifest_listing_encode(l, &h, &w));	/* one chunk of two */
	CHECK(w.bytes == NULL);
	manifest_listing_cancel(l);
	CHECK(manifest_listing_begin(l));	/* nothing was written: still whole */
	manifest_listing_cancel(l);
	manifest_listing_destroy(l);
}

UNIT_MAIN()
