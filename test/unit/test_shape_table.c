/*
 * test_shape_table.c
 *		Slots, pins, generations, dirty marks and handles
 *		(src/contract/shape_table.c).
 */
#include "unit.h"

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include "refusal.h"
#include "shape_table.h"

/* ---------------------------------------------------------- helpers */

typedef struct Fixture
{
	void	   *arena_mem;
	void	   *table_mem;
	ShapeLogArena *arena;
	ShapeTable *table;
} Fixture;

static bool
fixture_init(Fixture *f, uint32_t nslots, uint32_t nblocks)
{
	size_t		asize = (size_t) (nblocks + 1) * SLOG_BLOCK_SIZE;	/* + header */

	memset(f, 0, sizeof(*f));
	f->arena_mem = aligned_alloc(SLOG_BLOCK_SIZE, asize);
	f->table_mem = malloc(shape_table_size(nslots));
	if (f->arena_mem == NULL || f->table_mem == NULL)
		return false;
	memset(f->table_mem, 0xcc, shape_table_size(nslots));
	f->arena = slog_arena_init(f->arena_mem, asize);
	f->table = shape_table_init(f->table_mem, nslots, f->arena);
	return f->arena->nblocks == nblocks;
}

static void
fixture_free(Fixture *f)
{
	free(f->arena_mem);
	free(f->table_mem);
}

static uint64_t
pins_of(Fixture *f, uint32_t slot)
{
	return atomic_load(&f->table->slots[slot].pins);
}

/* Claims a slot and writes `nrecords` records of `len` bytes into its log. */
static uint32_t
claim_with_log(Fixture *f, int nrecords, uint32_t len)
{
	uint32_t	slot = shape_table_claim(f->table);
	ShapeSlot  *s;
	char	   *buf;

	if (slot == SHAPE_NO_SLOT)
		return slot;
	s = &f->table->slots[slot];
	buf = calloc(1, len + 1);
	snprintf(s->handle, sizeof(s->handle), "h-%u", atomic_load(&s->generation));
	shape_table_set_state(f->table, slot, SHAPE_SNAPSHOTTING);
	for (int i = 0; i < nrecords; i++)
		if (slog_append(f->arena, &s->logs[0], (LogOffset) {0, 0}, SLOG_RECORD_CHANGE, buf, len) != SLOG_OK)
			FAIL("append %d failed", i);
	slog_close_chunk(f->arena, &s->logs[0], (LogOffset) {0, 0});
	slog_publish(&s->logs[0], LOG_OFFSET_SNAPSHOT_END, SLOG_SNAPSHOT_DONE);
	shape_table_set_state(f->table, slot, SHAPE_READY);
	free(buf);
	return slot;
}

/* ------------------------------------------------------------ layout */

TEST(init_and_layout)
{
	static const uint32_t sizes[] = {1, 2, 63, 64, 65, 130};

	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++)
	{
		uint32_t	n = sizes[k];
		size_t		size = shape_table_size(n);
		char	   *raw = malloc(size + 64);

		/* any 8-aligned start: the slots are aligned inside the region */
		for (int shift = 0; shift < 64; shift += 8)
		{
			char	   *mem = raw + shift;
			ShapeTable *t = shape_table_init(mem, n, NULL);

			CHECK_EQ(t->nslots, n);
			CHECK_EQ((uintptr_t) t->slots % 64, 0);
			CHECK((char *) t->dirty >= mem + sizeof(ShapeTable));
			CHECK((char *) (t->dirty + (n + 63) / 64) <= (char *) t->slots);
			CHECK((char *) (t->slots + n) <= mem + size);
			for (uint32_t i = 0; i < n; i++)
			{
				if (shape_table_state(t, i) != SHAPE_FREE ||
					atomic_load(&t->slots[i].generation) != 0 ||
					atomic_load(&t->slots[i].pins) != SHAPE_PIN_RETIRED)
				{
					FAIL("slot %u of %u not initialized", i, n);
					break;
				}
			}
			/* a free slot cannot be pinned, whatever the generation */
			CHECK(!shape_table_pin(t, 0, 0));
			CHECK(!shape_table_pin(t, 0, 1));
			CHECK(!shape_table_pin(t, n, 0));	/* out of range */
			CHECK(!shape_table_pin(t, UINT32_MAX, 0));
			CHECK_UEQ(atomic_load(&t->slots[0].pins), SHAPE_PIN_RETIRED);
		}
		free(raw);
	}
}

/* -------------------------------------------------------- life cycle */

TEST(claim_pin_generation)
{
	Fixture		f;
	uint32_t	slot;

	REQUIRE(fixture_init(&f, 3, 8));
	slot = shape_table_claim(f.table);
	CHECK_EQ(slot, 0);
	CHECK_EQ(atomic_load(&f.table->slots[0].generation), 1);
	CHECK_UEQ(pins_of(&f, 0), 0);
	CHECK_EQ(shape_table_state(f.table, 0), SHAPE_FREE);	/* until the caller says */

	shape_table_set_state(f.table, 0, SHAPE_SNAPSHOTTING);
	CHECK_EQ(shape_table_claim(f.table), 1);	/* the next free slot */
	shape_table_set_state(f.table, 1, SHAPE_SNAPSHOTTING);
	CHECK_EQ(shape_table_claim(f.table), 2);
	shape_table_set_state(f.table, 2, SHAPE_READY);
	CHECK_EQ(shape_table_claim(f.table), SHAPE_NO_SLOT);

	/* wrong generations fail and leave no pin behind */
	CHECK(!shape_table_pin(f.table, 0, 0));
	CHECK(!shape_table_pin(f.table, 0, 2));
	CHECK_UEQ(pins_of(&f, 0), 0);

	CHECK(shape_table_pin(f.table, 0, 1));
	CHECK(shape_table_pin(f.table, 0, 1));
	CHECK_UEQ(pins_of(&f, 0), 2);
	shape_table_unpin(f.table, 0);
	shape_table_unpin(f.table, 0);
	CHECK_UEQ(pins_of(&f, 0), 0);
	CHECK_EQ(shape_table_state(f.table, 0), SHAPE_SNAPSHOTTING);

	for (int s = 0; s < 3; s++)
		shape_table_retire(f.table, (uint32_t) s);
	for (int s = 0; s < 3; s++)
		CHECK_EQ(shape_table_state(f.table, (uint32_t) s), SHAPE_FREE);
	fixture_free(&f);
}

TEST(retire_without_pins_frees_at_once)
{
	Fixture		f;
	uint32_t	slot;
	ShapeSlot  *s;

	REQUIRE(fixture_init(&f, 2, 16));
	slot = claim_with_log(&f, 3, 20000);
	REQUIRE(slot == 0);
	s = &f.table->slots[slot];
	/* 8 data blocks, their directory and a position index block (the chunk is inline) */
	CHECK_EQ(s->logs[0].blocks_held, 10);
	CHECK_EQ(slog_arena_free_blocks(f.arena), 6);

	shape_table_retire(f.table, slot);
	CHECK_EQ(shape_table_state(f.table, slot), SHAPE_FREE);
	CHECK_UEQ(pins_of(&f, slot), SHAPE_PIN_RETIRED);
	CHECK_EQ(slog_arena_free_blocks(f.arena), 16);
	CHECK_EQ(s->logs[0].write_pos, 0);
	CHECK_EQ(atomic_load(&s->logs[0].pub_data_end), 0);
	CHECK(!shape_table_pin(f.table, slot, 1));
	fixture_free(&f);
}

TEST(retire_with_pins_frees_at_last_unpin)
{
	Fixture		f;
	uint32_t	slot;

	REQUIRE(fixture_init(&f, 2, 16));
	slot = claim_with_log(&f, 2, 30000);
	REQUIRE(slot == 0);
	/* 60 kB: 8 data blocks, their directory and a position index block */
	CHECK_EQ(f.table->slots[slot].logs[0].blocks_held, 10);
	CHECK(shape_table_pin(f.table, slot, 1));
	CHECK(shape_table_pin(f.table, slot, 1));

	shape_table_retire(f.table, slot);
	CHECK_EQ(shape_table_state(f.table, slot), SHAPE_RETIRED);
	CHECK_UEQ(pins_of(&f, slot), SHAPE_PIN_RETIRED | 2);
	CHECK_EQ(slog_arena_free_blocks(f.arena), 16 - 10);
	/* the pinned log is still readable */
	{
		SlogPublished pub;

		slog_read_published(&f.table->slots[slot].logs[0], &pub);
		CHECK_EQ(pub.data_end, 2 * slog_record_span(30000));
	}

	/* a retired slot takes no new pins, with any generation */
	CHECK(!shape_table_pin(f.table, slot, 1));
	CHECK(!shape_table_pin(f.table, slot, 2));
	CHECK_UEQ(pins_of(&f, slot), SHAPE_PIN_RETIRED | 2);
	/* nor can it be claimed while pinned */
	CHECK_EQ(shape_table_claim(f.table), 1);
	shape_table_set_state(f.table, 1, SHAPE_SNAPSHOTTING);
	CHECK_EQ(shape_table_claim(f.table), SHAPE_NO_SLOT);

	shape_table_unpin(f.table, slot);
	CHECK_EQ(shape_table_state(f.table, slot), SHAPE_RETIRED);
	CHECK_EQ(slog_arena_free_blocks(f.arena), 16 - 10);
	shape_table_unpin(f.table, slot);
	CHECK_EQ(shape_table_state(f.table, slot), SHAPE_FREE);
	CHECK_UEQ(pins_of(&f, slot), SHAPE_PIN_RETIRED);
	CHECK_EQ(slog_arena_free_blocks(f.arena), 16);

	shape_table_retire(f.table, 1);
	fixture_free(&f);
}

TEST(retire_keeps_failed_state_for_readers)
{
	Fixture		f;
	uint32_t	slot;

	REQUIRE(fixture_init(&f, 1, 8));
	slot = claim_with_log(&f, 1, 100);
	REQUIRE(slot == 0);
	/* a one-row shape holds one block */
	CHECK_EQ(f.table->slots[slot].logs[0].blocks_held, 1);
	CHECK_EQ(slog_arena_free_blocks(f.arena), 7);
	strcpy(f.table->slots[slot].error, "boom");
	f.table->slots[slot].error_reason = REFUSAL_SNAPSHOT_INVALID;
	shape_table_set_state(f.table, slot, SHAPE_FAILED);
	CHECK(shape_table_pin(f.table, slot, 1));
	shape_table_retire(f.table, slot);
	/* the reader still holding it sees why the shape failed */
	CHECK_EQ(shape_table_state(f.table, slot), SHAPE_FAILED);
	CHECK(!shape_table_pin(f.table, slot, 1));
	shape_table_unpin(f.table, slot);
	CHECK_EQ(shape_table_state(f.table, slot), SHAPE_FREE);
	CHECK_EQ(slog_arena_free_blocks(f.arena), 8);
	fixture_free(&f);
}

/* A snapshot worker that finishes as its shape is retired cannot revive it. */
TEST(late_finish_cannot_revive_a_retired_shape)
{
	Fixture		f;
	uint32_t	slot;

	REQUIRE(fixture_init(&f, 1, 8));
	slot = claim_with_log(&f, 1, 100);
	REQUIRE(slot == 0);
	shape_table_set_state(f.table, slot, SHAPE_SNAPSHOTTING);
	CHECK(shape_table_pin(f.table, slot, 1));	/* the worker's pin */
	shape_table_retire(f.table, slot);
	CHECK(!shape_table_transition(f.table, slot, SHAPE_SNAPSHOTTING, SHAPE_READY));
	CHECK(!shape_table_transition(f.table, slot, SHAPE_SNAPSHOTTING, SHAPE_FAILED));
	CHECK_EQ(shape_table_state(f.table, slot), SHAPE_RETIRED);
	shape_table_unpin(f.table, slot);
	CHECK_EQ(shape_table_state(f.table, slot), SHAPE_FREE);
	CHECK_EQ(slog_arena_free_blocks(f.arena), 8);

	/* one that finished first is retired as usual */
	slot = claim_with_log(&f, 1, 100);
	shape_table_set_state(f.table, slot, SHAPE_SNAPSHOTTING);
	CHECK(shape_table_transition(f.table, slot, SHAPE_SNAPSHOTTING, SHAPE_READY));
	CHECK_EQ(shape_table_state(f.table, slot), SHAPE_READY);
	shape_table_retire(f.table, slot);
	CHECK_EQ(shape_table_state(f.table, slot), SHAPE_FREE);
	fixture_free(&f);
}

TEST(reuse_bumps_generation)
{
	Fixture		f;
	uint32_t	slot;

	REQUIRE(fixture_init(&f, 1, 8));
	for (uint32_t gen = 1; gen <= 5; gen++)
	{
		slot = claim_with_log(&f, 1, 1000);
		REQUIRE(slot == 0);
		CHECK_EQ(atomic_load(&f.table->slots[0].generation), gen);
		CHECK_STR_EQ(f.table->slots[0].handle,
					 gen == 1 ? "h-1" : gen == 2 ? "h-2" : gen == 3 ? "h-3" :
					 gen == 4 ? "h-4" : "h-5");
		/* every older generation is refused */
		for (uint32_t old = 0; old < gen; old++)
			CHECK(!shape_table_pin(f.table, 0, old));
		CHECK(!shape_table_pin(f.table, 0, gen + 1));
		CHECK_UEQ(pins_of(&f, 0), 0);
		CHECK(shape_table_pin(f.table, 0, gen));
		shape_table_unpin(f.table, 0);
		/* snapshot counters are reset on claim */
		CHECK_EQ(atomic_load(&f.table->slots[0].snapshot_rows), 0);
		atomic_store(&f.table->slots[0].snapshot_rows, 99);
		strcpy(f.table->slots[0].error, "stale error");
		shape_table_retire(f.table, 0);
		CHECK_EQ(shape_table_state(f.table, 0), SHAPE_FREE);
		CHECK_EQ(slog_arena_free_blocks(f.arena), 8);
	}
	slot = shape_table_claim(f.table);
	CHECK_EQ(f.table->slots[slot].error[0], '\0');
	shape_table_retire(f.table, slot);
	fixture_free(&f);
}

/* ------------------------------------------------------------- dirty */

TEST(dirty_marks)
{
	Fixture		f;
	uint32_t	got[8];
	uint32_t	n;

	REQUIRE(fixture_init(&f, 130, 1));
	CHECK_EQ(shape_table_take_dirty(f.table, got, 8), 0);

	shape_table_mark_dirty(f.table, 70);
	shape_table_mark_dirty(f.table, 3);
	shape_table_mark_dirty(f.table, 129);
	shape_table_mark_dirty(f.table, 5);
	shape_table_mark_dirty(f.table, 3);	/* twice: one mark */
	shape_table_mark_dirty(f.table, 64);
	shape_table_mark_dirty(f.table, 63);

	/* at most `max`, in slot order; the rest stay marked */
	n = shape_table_take_dirty(f.table, got, 2);
	REQUIRE_EQ(n, 2);
	CHECK_EQ(got[0], 3);
	CHECK_EQ(got[1], 5);

	n = shape_table_take_dirty(f.table, got, 3);
	REQUIRE_EQ(n, 3);
	CHECK_EQ(got[0], 63);
	CHECK_EQ(got[1], 64);
	CHECK_EQ(got[2], 70);

	shape_table_mark_dirty(f.table, 0);
	n = shape_table_take_dirty(f.table, got, 8);
	REQUIRE_EQ(n, 2);
	CHECK_EQ(got[0], 0);
	CHECK_EQ(got[1], 129);

	CHECK_EQ(shape_table_take_dirty(f.table, got, 8), 0);

	/* max 0 takes nothing and loses nothing */
	shape_table_mark_dirty(f.table, 7);
	CHECK_EQ(shape_table_take_dirty(f.table, got, 0), 0);
	n = shape_table_take_dirty(f.table, got, 8);
	REQUIRE_EQ(n, 1);
	CHECK_EQ(got[0], 7);
	fixture_free(&f);
}

/*
 * Takes marks, 16 at a time, noting each slot in `seen`, until `wanted`
 * distinct slots were seen or `spins` takes were made; spins < 0: until a
 * take finds none.  Returns how many slots were seen for the first time.
 */
static int
take_marks_while(ShapeTable *table, uint8_t *seen, int wanted, int spins)
{
	uint32_t	got[16];
	int			fresh = 0;

	for (int i = 0; spins < 0 || (i < spins && fresh < wanted); i++)
	{
		uint32_t	n = shape_table_take_dirty(table, got, 16);

		if (n == 0 && spins < 0)
			break;
		for (uint32_t k = 0; k < n; k++)
			if (!seen[got[k]]++)
				fresh++;
	}
	return fresh;
}

typedef struct DirtyArg
{
	ShapeTable *table;
	int			id;
} DirtyArg;

static void *
dirty_marker(void *arg)
{
	DirtyArg   *da = arg;

	for (int round = 0; round < 2000; round++)
		shape_table_mark_dirty(da->table, (uint32_t) (da->id * 40 + round % 40));
	return NULL;
}

/*
 * Four threads mark slots (marker) while the main thread takes the marks;
 * after they are done every slot they marked was taken: `expected` distinct
 * slots of a table of `nslots`.  TSan runs it too.
 */
static void
check_concurrent_marks(uint32_t nslots, void *(*marker) (void *), int expected)
{
	Fixture		f;
	pthread_t	th[4];
	DirtyArg	args[4];
	uint8_t    *seen = calloc(nslots, 1);
	int			total;

	REQUIRE(seen != NULL);
	REQUIRE(fixture_init(&f, nslots, 1));
	for (int i = 0; i < 4; i++)
	{
		args[i].table = f.table;
		args[i].id = i;
		pthread_create(&th[i], NULL, marker, &args[i]);
	}
	/* the main thread collects meanwhile, a few at a time */
	total = take_marks_while(f.table, seen, expected, 200000);
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	total += take_marks_while(f.table, seen, expected, -1);
	CHECK_EQ(total, expected);
	fixture_free(&f);
	free(seen);
}

TEST(dirty_marks_concurrent)
{
	check_concurrent_marks(160, dirty_marker, 160);
}

/*
 * A table of 10,000 slots: 157 words of marks and 3 words of their summary.
 * Marks at the edges of words and of summary words are all taken, in slot
 * order, also when `max` cuts a take in the middle of a summary word.
 */
TEST(dirty_marks_across_summary_words)
{
	static const uint32_t marked[] = {0, 63, 64, 4031, 4032, 4095, 4096, 8191, 8192, 9999};
	const uint32_t nmarked = sizeof(marked) / sizeof(marked[0]);
	Fixture		f;
	uint32_t	got[16];
	uint32_t	n;
	uint32_t	all = 0;

	REQUIRE(fixture_init(&f, 10000, 1));
	for (int i = (int) nmarked - 1; i >= 0; i--)
		shape_table_mark_dirty(f.table, marked[i]);
	for (;;)
	{
		n = shape_table_take_dirty(f.table, got, 3);
		if (n == 0)
			break;
		for (uint32_t k = 0; k < n; k++)
		{
			REQUIRE(all < nmarked);
			CHECK_EQ(got[k], marked[all]);
			all++;
		}
	}
	CHECK_EQ(all, nmarked);
	CHECK_EQ(shape_table_take_dirty(f.table, got, 16), 0);
	fixture_free(&f);
}

static void *
dirty_marker_wide(void *arg)
{
	DirtyArg   *da = arg;

	/* 200 slots 50 apart from 2,500 * id: across words and summary words */
	for (int round = 0; round < 4000; round++)
		shape_table_mark_dirty(da->table, (uint32_t) (da->id * 2500 + (round % 200) * 12));
	return NULL;
}

/* The same across words and summary words of marks. */
TEST(dirty_marks_concurrent_wide)
{
	check_concurrent_marks(10000, dirty_marker_wide, 800);
}

/* ------------------------------------------------------------ handles */

TEST(new_handle_is_strictly_increasing)
{
	Fixture		f;
	char		h[SHAPE_HANDLE_LEN];

	REQUIRE(fixture_init(&f, 1, 1));
	shape_table_new_handle(f.table, 42, 1700000000000000LL, h);
	CHECK_STR_EQ(h, "42-1700000000000000");
	shape_table_new_handle(f.table, 42, 1700000000000000LL, h);	/* same time */
	CHECK_STR_EQ(h, "42-1700000000000001");
	shape_table_new_handle(f.table, 7, 1600000000000000LL, h);	/* clock went back */
	CHECK_STR_EQ(h, "7-1700000000000002");
	shape_table_new_handle(f.table, 2147483647u, 1800000000000000LL, h);
	CHECK_STR_EQ(h, "2147483647-1800000000000000");
	shape_table_new_handle(f.table, UINT32_MAX, 0, h);
	CHECK_STR_EQ(h, "4294967295-1800000000000001");
	CHECK(strlen(h) < SHAPE_HANDLE_LEN);
	fixture_free(&f);
}

#define HANDLE_THREADS 4
#define HANDLES_PER_THREAD 10000

typedef struct HandleArg
{
	ShapeTable *table;
	int64_t    *stamps;
	int			id;
	_Atomic int *failures;
} HandleArg;

static void *
handle_maker(void *arg)
{
	HandleArg  *ha = arg;
	char		h[SHAPE_HANDLE_LEN];
	int64_t		prev = -1;

	for (int i = 0; i < HANDLES_PER_THREAD; i++)
	{
		unsigned	hash;
		long long	us;

		/* equal and decreasing timestamps from every thread */
		shape_table_new_handle(ha->table, (uint32_t) ha->id, 1000 - (i % 3), h);
		if (sscanf(h, "%u-%lld", &hash, &us) != 2 || hash != (unsigned) ha->id || us <= prev)
		{
			atomic_fetch_add(ha->failures, 1);
			break;
		}
		prev = us;
		ha->stamps[i] = us;
	}
	return NULL;
}

static int
cmp_i64(const void *a, const void *b)
{
	int64_t		x = *(const int64_t *) a;
	int64_t		y = *(const int64_t *) b;

	return x < y ? -1 : x > y;
}

TEST(new_handle_unique_across_threads)
{
	Fixture		f;
	pthread_t	th[HANDLE_THREADS];
	HandleArg	args[HANDLE_THREADS];
	int64_t    *stamps = calloc(HANDLE_THREADS * HANDLES_PER_THREAD, sizeof(int64_t));
	_Atomic int failures = 0;
	int			dups = 0;

	REQUIRE(stamps != NULL);
	REQUIRE(fixture_init(&f, 1, 1));
	for (int i = 0; i < HANDLE_THREADS; i++)
	{
		args[i].table = f.table;
		args[i].stamps = stamps + i * HANDLES_PER_THREAD;
		args[i].id = i;
		args[i].failures = &failures;
		pthread_create(&th[i], NULL, handle_maker, &args[i]);
	}
	for (int i = 0; i < HANDLE_THREADS; i++)
		pthread_join(th[i], NULL);
	CHECK_EQ(atomic_load(&failures), 0);
	qsort(stamps, HANDLE_THREADS * HANDLES_PER_THREAD, sizeof(int64_t), cmp_i64);
	for (int i = 1; i < HANDLE_THREADS * HANDLES_PER_THREAD; i++)
		if (stamps[i] == stamps[i - 1])
			dups++;
	CHECK_EQ(dups, 0);
	/* no gaps either: every CAS took exactly the next value */
	CHECK_EQ(stamps[0], 1000);
	CHECK_EQ(stamps[HANDLE_THREADS * HANDLES_PER_THREAD - 1],
			 1000 + HANDLE_THREADS * HANDLES_PER_THREAD - 1);
	CHECK_EQ(atomic_load(&f.table->last_handle_us), 1000 + HANDLE_THREADS * HANDLES_PER_THREAD - 1);
	free(stamps);
	fixture_free(&f);
}

/* ---------------------------------------------------------------- lsn */

typedef struct LsnArg
{
	ShapeTable *table;
	uint64_t	seed;
} LsnArg;

static void *
lsn_noter(void *arg)
{
	LsnArg	   *la = arg;
	uint64_t	x = la->seed;

	for (int i = 0; i < 20000; i++)
	{
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		shape_table_note_lsn(la->table, x % 1000000);
	}
	shape_table_note_lsn(la->table, 1000000 + la->seed);
	return NULL;
}

TEST(note_lsn_only_moves_forward)
{
	Fixture		f;
	pthread_t	th[4];
	LsnArg		args[4];

	REQUIRE(fixture_init(&f, 1, 1));
	CHECK_UEQ(atomic_load(&f.table->last_seen_lsn), 0);
	shape_table_note_lsn(f.table, 100);
	CHECK_UEQ(atomic_load(&f.table->last_seen_lsn), 100);
	shape_table_note_lsn(f.table, 50);
	CHECK_UEQ(atomic_load(&f.table->last_seen_lsn), 100);
	shape_table_note_lsn(f.table, 100);
	CHECK_UEQ(atomic_load(&f.table->last_seen_lsn), 100);
	shape_table_note_lsn(f.table, UINT64_C(0x100000000));
	CHECK_UEQ(atomic_load(&f.table->last_seen_lsn), UINT64_C(0x100000000));
	shape_table_note_lsn(f.table, 0);
	CHECK_UEQ(atomic_load(&f.table->last_seen_lsn), UINT64_C(0x100000000));

	atomic_store(&f.table->last_seen_lsn, 0);
	for (int i = 0; i < 4; i++)
	{
		args[i].table = f.table;
		args[i].seed = (uint64_t) (i + 1) * 7919;
		pthread_create(&th[i], NULL, lsn_noter, &args[i]);
	}
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	CHECK_UEQ(atomic_load(&f.table->last_seen_lsn), 1000000 + 4 * 7919);
	fixture_free(&f);
}

/*
 * Reads on the HTTP threads move last_read_us on once SHAPE_READ_NOTE_US has
 * passed, so that eviction tells apart a shape read again 50 ms after it was
 * made from one made just before it (the store once waited a whole second).
 */
TEST(note_read_moves_on_after_the_note_interval)
{
	Fixture		f;
	int64_t		made;

	REQUIRE(fixture_init(&f, 2, 1));
	made = shape_table_unix_us();
	atomic_store(&f.table->slots[0].last_read_us, made);
	atomic_store(&f.table->slots[1].last_read_us, made + 1);
	usleep(50 * 1000);	/* a read 50 ms after the last */
	shape_table_note_read(f.table, 0);
	CHECK(atomic_load(&f.table->slots[0].last_read_us) > atomic_load(&f.table->slots[1].last_read_us));
	/* within the interval, the line is only read */
	atomic_store(&f.table->slots[1].last_read_us, shape_table_unix_us() + 60 * 1000000);
	shape_table_note_read(f.table, 1);
	CHECK(atomic_load(&f.table->slots[1].last_read_us) > shape_table_unix_us());
	fixture_free(&f);
}

/* ------------------------------------------------------------- stress */

/*
 * Readers pin slot 0 by the generation they last saw, while the main thread
 * retires and re-claims it over and over.  After each claim the main thread
 * sets the handle to "gen-<g>" and writes a marker record derived from g,
 * big enough to span blocks.  A reader that pinned generation g must see
 * exactly g's handle and marker: anything else means it read a log that a
 * newer shape owns (or that was freed under it).
 */
#define STRESS_READERS 3
#define MARKER_LEN 40000

typedef struct StressState
{
	Fixture		f;
	_Atomic bool stop;
	_Atomic uint64_t pins_ok;
	_Atomic uint64_t markers_checked;
	_Atomic uint64_t stale_refused;
} StressState;

static void
marker(char *buf, uint32_t gen)
{
	for (int i = 0; i < MARKER_LEN; i++)
		buf[i] = (char) ((gen * 2654435761u + (uint32_t) i * 40503u) >> 13);
	snprintf(buf, 32, "generation %u|", gen);
}

static void *
stress_reader(void *arg)
{
	StressState *st = arg;
	ShapeTable *t = st->f.table;
	ShapeSlot  *s = &t->slots[0];
	char	   *want = malloc(MARKER_LEN);
	char	   *got = malloc(MARKER_LEN);

	while (!atomic_load(&st->stop))
	{
		uint32_t	gen = atomic_load_explicit(&s->generation, memory_order_relaxed);
		ShapeState	state;
		SlogPublished pub;

		/* an older generation is always refused */
		if (gen > 0 && shape_table_pin(t, 0, gen - 1))
		{
			FAIL("pinned generation %u while %u was current", gen - 1, gen);
			shape_table_unpin(t, 0);
			break;
		}
		if (!shape_table_pin(t, 0, gen))
		{
			atomic_fetch_add(&st->stale_refused, 1);
			continue;
		}
		atomic_fetch_add(&st->pins_ok, 1);
		state = shape_table_state(t, 0);
		if (state != SHAPE_FREE)
		{
			char		h[SHAPE_HANDLE_LEN];

			snprintf(h, sizeof(h), "gen-%u", gen);
			if (strcmp(s->handle, h) != 0)
			{
				FAIL("pinned generation %u but the handle says %s", gen, s->handle);
				shape_table_unpin(t, 0);
				break;
			}
		}
		slog_read_published(&s->logs[0], &pub);
		if (pub.data_end > 0)
		{
			SlogRecordHeader hdr;

			slog_read_header(t->arena, &s->logs[0], 0, &hdr);
			if (hdr.len != MARKER_LEN || hdr.tx != (int64_t) gen)
			{
				FAIL("pinned generation %u, the log holds a record of %lld",
					 gen, (long long) hdr.tx);
				shape_table_unpin(t, 0);
				break;
			}
			slog_copy_out(t->arena, &s->logs[0], sizeof(hdr), got, MARKER_LEN);
			marker(want, gen);
			if (memcmp(want, got, MARKER_LEN) != 0)
			{
				FAIL("pinned generation %u, its marker was overwritten", gen);
				shape_table_unpin(t, 0);
				break;
			}
			atomic_fetch_add(&st->markers_checked, 1);
		}
		shape_table_unpin(t, 0);
	}
	free(want);
	free(got);
	return NULL;
}

TEST(stress_pin_retire_reclaim)
{
	StressState *st = calloc(1, sizeof(StressState));
	pthread_t	th[STRESS_READERS];
	char	   *buf = malloc(MARKER_LEN);
	double		until;
	uint32_t	claims = 0;
	uint64_t	waits = 0;
	ShapeTable *t;
	ShapeSlot  *s;

	REQUIRE(st != NULL && buf != NULL);
	REQUIRE(fixture_init(&st->f, 1, 16));
	t = st->f.table;
	s = &t->slots[0];
	for (int i = 0; i < STRESS_READERS; i++)
		pthread_create(&th[i], NULL, stress_reader, st);

	until = unit_now() + 1.0;
	while (unit_now() < until)
	{
		uint32_t	slot = shape_table_claim(t);
		uint32_t	gen;

		if (slot == SHAPE_NO_SLOT)
		{
			/* a reader still holds the retired log */
			waits++;
			sched_yield();
			continue;
		}
		REQUIRE_EQ(slot, 0);
		gen = atomic_load(&s->generation);
		CHECK_EQ(gen, claims + 1);
		CHECK_EQ(s->logs[0].write_pos, 0);
		snprintf(s->handle, sizeof(s->handle), "gen-%u", gen);
		shape_table_set_state(t, 0, SHAPE_SNAPSHOTTING);
		marker(buf, gen);
		if (slog_append(t->arena, &s->logs[0], (LogOffset) {(int64_t) gen, 0}, SLOG_RECORD_CHANGE,
						buf, MARKER_LEN) != SLOG_OK ||
			slog_close_chunk(t->arena, &s->logs[0], (LogOffset) {(int64_t) gen, 0}) != SLOG_OK)
		{
			FAIL("generation %u: the arena is short of blocks (%u free)", gen,
				 slog_arena_free_blocks(t->arena));
			shape_table_retire(t, 0);
			break;
		}
		slog_publish(&s->logs[0], (LogOffset) {(int64_t) gen, 0}, SLOG_SNAPSHOT_DONE);
		shape_table_set_state(t, 0, SHAPE_READY);
		claims++;
		if (claims % 4 == 0)
			usleep(50);			/* let readers pin the ready shape */
		shape_table_retire(t, 0);
	}
	atomic_store(&st->stop, true);
	for (int i = 0; i < STRESS_READERS; i++)
		pthread_join(th[i], NULL);

	fprintf(stderr, "  # %u claims, %llu waits, %llu pins, %llu markers checked, %llu refused\n",
			claims, (unsigned long long) waits,
			(unsigned long long) atomic_load(&st->pins_ok),
			(unsigned long long) atomic_load(&st->markers_checked),
			(unsigned long long) atomic_load(&st->stale_refused));
	CHECK(claims > 20);
	CHECK(atomic_load(&st->pins_ok) > 20);
	CHECK(atomic_load(&st->markers_checked) > 5);
	/* the last retire's log went back when its last reader left */
	CHECK_EQ(shape_table_state(t, 0), SHAPE_FREE);
	CHECK_UEQ(atomic_load(&s->pins), SHAPE_PIN_RETIRED);
	CHECK_EQ(slog_arena_free_blocks(t->arena), 16);
	free(buf);
	fixture_free(&st->f);
	free(st);
}

/* --------------------------------------------------------- log versions */

/* Appends one record whose offset and bytes say `id`, and publishes it. */
static void
version_write(Fixture *f, ShapeLog *log, uint32_t id, uint32_t len)
{
	char	   *buf = malloc(len);

	memset(buf, (int) (id & 0x7f), len);
	REQUIRE(slog_append(f->arena, log, (LogOffset) {(int64_t) id, 0}, SLOG_RECORD_CHANGE,
						buf, len) == SLOG_OK);
	slog_publish(log, (LogOffset) {(int64_t) id, 0}, SLOG_SNAPSHOT_DONE);
	free(buf);
}

TEST(log_versions_swap_and_release)
{
	Fixture		f;
	uint32_t	slot;
	uint32_t	v1,
				v2;
	const ShapeLog *old;
	ShapeLog   *spare;
	SlogRecordHeader hdr;

	REQUIRE(fixture_init(&f, 1, 16));
	slot = shape_table_claim(f.table);
	version_write(&f, shape_table_log(f.table, slot), 1, 40000);
	REQUIRE(shape_table_pin(f.table, slot, 1));

	/* a reader holds version 0 while version 1 is built and swapped in */
	old = shape_table_log_pin(f.table, slot, &v1);
	CHECK_EQ(v1, 0);
	spare = shape_table_spare_log(f.table, slot);
	REQUIRE(spare != NULL);
	version_write(&f, spare, 2, 100);
	shape_table_swap_log(f.table, slot);
	CHECK(shape_table_log(f.table, slot) == spare);
	/* 5 data blocks, their directory and a position index block; one data block */
	CHECK_EQ(slog_arena_free_blocks(f.arena), 16 - 7 - 1);
	slog_read_header(f.arena, old, 0, &hdr);
	CHECK_EQ(hdr.tx, 1);		/* the old version is intact for its reader */
	CHECK(shape_table_spare_log(f.table, slot) == NULL);	/* still read */

	/* a new reader gets the new version */
	shape_table_log_pin(f.table, slot, &v2);
	CHECK_EQ(v2, 1);
	shape_table_log_unpin(f.table, slot, v2);

	/* the old version's last reader gives its blocks back */
	shape_table_log_unpin(f.table, slot, v1);
	CHECK_EQ(slog_arena_free_blocks(f.arena), 16 - 1);
	spare = shape_table_spare_log(f.table, slot);
	REQUIRE(spare != NULL);
	version_write(&f, spare, 3, 100);
	shape_table_drop_spare_log(f.table, slot);	/* a compaction that gave up */
	CHECK_EQ(slog_arena_free_blocks(f.arena), 16 - 1);
	CHECK(shape_table_log(f.table, slot) != spare);

	/* a swap with no reader frees the old version at once */
	spare = shape_table_spare_log(f.table, slot);
	REQUIRE(spare != NULL);
	version_write(&f, spare, 4, 100);
	shape_table_swap_log(f.table, slot);
	CHECK_EQ(slog_arena_free_blocks(f.arena), 16 - 1);

	/* retiring the shape frees both versions */
	spare = shape_table_spare_log(f.table, slot);
	REQUIRE(spare != NULL);
	version_write(&f, spare, 5, 100);
	shape_table_retire(f.table, slot);
	CHECK_EQ(shape_table_state(f.table, slot), SHAPE_RETIRED);
	shape_table_unpin(f.table, slot);
	CHECK_EQ(shape_table_state(f.table, slot), SHAPE_FREE);
	CHECK_EQ(slog_arena_free_blocks(f.arena), 16);

	/* and the next claim starts with version 0 served */
	slot = shape_table_claim(f.table);
	CHECK(shape_table_log(f.table, slot) == &f.table->slots[slot].logs[0]);
	fixture_free(&f);
}

/*
 * Readers pin the served version and check that the record in it is the
 * one its writer put there (its id is in its offset and in every byte),
 * while the writer builds, publishes and swaps versions as fast as it can;
 * a reader that ever saw a freed or half-built version would find another
 * id or bytes.  At the end every block is back.
 */
#define VERSION_READERS 3

typedef struct VersionStress
{
	Fixture		f;
	_Atomic bool stop;
	_Atomic uint64_t reads;
} VersionStress;

static void *
version_reader(void *arg)
{
	VersionStress *st = arg;
	ShapeTable *t = st->f.table;
	char		buf[3000];

	while (!atomic_load(&st->stop))
	{
		uint32_t	v;
		const ShapeLog *log = shape_table_log_pin(t, 0, &v);
		SlogPublished pub;
		SlogRecordHeader hdr;

		slog_read_published(log, &pub);
		if (pub.data_end > 0)
		{
			slog_read_header(t->arena, log, 0, &hdr);
			if (hdr.len < 1000 || hdr.len > sizeof(buf) || hdr.tx != pub.last.tx)
			{
				FAIL("version %u: record of %u bytes for %lld, published %lld", v, hdr.len,
					 (long long) hdr.tx, (long long) pub.last.tx);
				shape_table_log_unpin(t, 0, v);
				break;
			}
			slog_copy_out(t->arena, log, sizeof(hdr), buf, hdr.len);
			for (uint32_t i = 0; i < hdr.len; i++)
				if (buf[i] != (char) (hdr.tx & 0x7f))
				{
					FAIL("version %u: byte %u of record %lld is wrong", v, i, (long long) hdr.tx);
					shape_table_log_unpin(t, 0, v);
					return NULL;
				}
			atomic_fetch_add(&st->reads, 1);
		}
		shape_table_log_unpin(t, 0, v);
	}
	return NULL;
}

TEST(log_versions_concurrent_swaps)
{
	VersionStress *st = calloc(1, sizeof(*st));
	pthread_t	th[VERSION_READERS];
	uint32_t	swaps = 0,
				busy = 0;
	int64_t		until;
	struct timespec ts;

	REQUIRE(fixture_init(&st->f, 1, 16));
	REQUIRE(shape_table_claim(st->f.table) == 0);
	version_write(&st->f, shape_table_log(st->f.table, 0), 1, 1000);
	REQUIRE(shape_table_pin(st->f.table, 0, 1));
	for (int i = 0; i < VERSION_READERS; i++)
		pthread_create(&th[i], NULL, version_reader, st);
	clock_gettime(CLOCK_MONOTONIC, &ts);
	until = ts.tv_sec * 1000 + ts.tv_nsec / 1000000 + 1000;
	for (uint32_t id = 2;; id++)
	{
		ShapeLog   *spare = shape_table_spare_log(st->f.table, 0);

		clock_gettime(CLOCK_MONOTONIC, &ts);
		if (ts.tv_sec * 1000 + ts.tv_nsec / 1000000 > until)
			break;
		if (spare == NULL)
		{
			busy++;				/* its readers still hold the old one */
			sched_yield();
			continue;
		}
		version_write(&st->f, spare, id, 1000 + id % 2000);
		shape_table_swap_log(st->f.table, 0);
		swaps++;
	}
	atomic_store(&st->stop, true);
	for (int i = 0; i < VERSION_READERS; i++)
		pthread_join(th[i], NULL);
	fprintf(stderr, "  # %u swaps, %u waits for readers, %llu reads\n", swaps, busy,
			(unsigned long long) atomic_load(&st->reads));
	CHECK(swaps > 20);
	CHECK(atomic_load(&st->reads) > 100);
	shape_table_retire(st->f.table, 0);
	shape_table_unpin(st->f.table, 0);
	CHECK_EQ(slog_arena_free_blocks(st->f.arena), 16);
	fixture_free(&st->f);
	free(st);
}

UNIT_MAIN()
