/*
 * fuzz_shape_log.c
 *		The shape log against a model: the input is a program of appends,
 *		chunk closes, publications, lookups and releases on a small arena
 *		(so that SLOG_FULL happens), with a second log competing for blocks.
 *
 * Oracles: every lookup matches the model (a linear scan over chunks and
 * records, where slog_locate uses its position index), every record in a
 * range has its header and payload intact, a failed append or close
 * leaves the log as it was (also when only the index block was missing),
 * and releasing gives every block back.  Lookups pick among the first 256
 * records; the final look also takes offsets spread over all of them.
 */
#include "fuzz_common.h"

#include "shape_log.h"

#define ARENA_BLOCKS	96			/* 768 kB: records of up to 80 kB fill it */
#define MAX_RECS		4096
#define MAX_CHUNKS		4096

typedef struct MRec
{
	LogOffset	o;
	uint32_t	len;
	uint32_t	kind;
	uint64_t	pos;
	uint64_t	seed;
} MRec;

typedef struct MChunk
{
	uint64_t	start;
	uint64_t	end;
	LogOffset	end_off;
} MChunk;

typedef struct Model
{
	MRec		recs[MAX_RECS];
	int			nrecs;
	MChunk		chunks[MAX_CHUNKS];
	int			nchunks;
	uint64_t	write_pos;
	uint64_t	chunk_start;
	LogOffset	cur;			/* the next record's offset */
	/* what was last published */
	int			pub_nrecs;
	int			pub_nchunks;
	uint64_t	pub_data_end;
	uint32_t	pub_flags;
	LogOffset	pub_last;
} Model;

static void *arena_mem;
static ShapeLogArena *arena;
static Model model;
static char payload[80 * 1024];
static char readback[80 * 1024];

/* Payload and comparison loops need no coverage feedback, only speed. */
#if defined(__clang__)
#define NO_COVERAGE __attribute__((no_sanitize("coverage"), noinline))
#else
#define NO_COVERAGE __attribute__((noinline))
#endif

NO_COVERAGE static void
fill(char *buf, uint32_t len, uint64_t seed)
{
	uint64_t	x = seed * 0x9e3779b97f4a7c15ull + 7;
	uint32_t	i = 0;

	for (; i + 8 <= len; i += 8)
	{
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		memcpy(buf + i, &x, 8);
	}
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	for (; i < len; i++)
		buf[i] = (char) (x >> (8 * (i % 8)));
}

/* memcmp, but not one libFuzzer intercepts and traces byte by byte */
NO_COVERAGE static bool
same_bytes(const char *a, const char *b, size_t n)
{
	uint64_t	diff = 0;
	size_t		i = 0;

	for (; i + 8 <= n; i += 8)
	{
		uint64_t	x;
		uint64_t	y;

		memcpy(&x, a + i, 8);
		memcpy(&y, b + i, 8);
		diff |= x ^ y;
	}
	for (; i < n; i++)
		diff |= (uint64_t) (a[i] ^ b[i]);
	return diff == 0;
}

static void
model_reset(Model *m)
{
	memset(m, 0, sizeof(*m));
	m->pub_last = LOG_OFFSET_BEFORE_ALL;
}

typedef struct Reader
{
	const uint8_t *p;
	const uint8_t *end;
} Reader;

static uint8_t
next_byte(Reader *r)
{
	return r->p < r->end ? *r->p++ : 0;
}

/*
 * Model of slog_locate over the published state: the first chunk ending
 * past `after`, passing over one whose records are all at or before it (a
 * chunk may end past its last record), else the open tail once the
 * snapshot is done.
 */
static void
model_locate(const Model *m, LogOffset after, SlogRange *want, int *first_rec)
{
	int			c;

	for (c = 0; c < m->pub_nchunks; c++)
		if (log_offset_cmp(m->chunks[c].end_off, after) > 0)
			break;
	for (;; c++)
	{
		int			i;

		memset(want, 0, sizeof(*want));
		*first_rec = -1;
		if (c < m->pub_nchunks)
		{
			want->start = m->chunks[c].start;
			want->end = m->chunks[c].end;
			want->chunk_end = m->chunks[c].end_off;
		}
		else if (m->pub_flags & SLOG_SNAPSHOT_DONE)
		{
			want->start = m->pub_nchunks ? m->chunks[m->pub_nchunks - 1].end : 0;
			want->end = m->pub_data_end;
			want->chunk_end = m->pub_last;
			want->beyond_end = log_offset_cmp(after, m->pub_last) > 0;
		}
		else
			return;
		want->ready = true;
		/* the first record at start, then skip those at or before `after` */
		for (i = 0; i < m->pub_nrecs && m->recs[i].pos < want->start; i++)
			;
		if (!log_offset_is_before_all(after))
			for (; i < m->pub_nrecs && m->recs[i].pos < want->end &&
				 log_offset_cmp(m->recs[i].o, after) <= 0; i++)
				want->start = m->recs[i].pos + slog_record_span(m->recs[i].len);
		*first_rec = i;
		if (want->start < want->end || c >= m->pub_nchunks ||
			m->chunks[c].start == m->chunks[c].end)
			return;
	}
}

static void
check_locate(ShapeLog *log, const SlogPublished *pub, LogOffset after)
{
	SlogRange	got;
	SlogRange	want;
	int			first;

	slog_locate(arena, log, pub, after, &got);
	model_locate(&model, after, &want, &first);
	FUZZ_ASSERT(got.ready == want.ready);
	if (!want.ready)
		return;
	FUZZ_ASSERT(got.beyond_end == want.beyond_end);
	FUZZ_ASSERT(got.start == want.start);
	FUZZ_ASSERT(got.end == want.end);
	FUZZ_ASSERT(log_offset_cmp(got.chunk_end, want.chunk_end) == 0);

	/* the bytes of the range are the model's records */
	for (uint64_t pos = got.start; pos < got.end; first++)
	{
		SlogRecordHeader hdr;
		const MRec *r;

		FUZZ_ASSERT(first >= 0 && first < model.pub_nrecs);
		r = &model.recs[first];
		FUZZ_ASSERT(r->pos == pos);
		slog_read_header(arena, log, pos, &hdr);
		FUZZ_ASSERT(hdr.len == r->len && hdr.kind == r->kind);
		FUZZ_ASSERT(hdr.tx == r->o.tx && hdr.op == r->o.op);
		slog_copy_out(arena, log, pos + sizeof(hdr), readback, r->len);
		fill(payload, r->len, r->seed);
		FUZZ_ASSERT(same_bytes(readback, payload, r->len));
		pos += slog_record_span(r->len);
	}
}

static LogOffset
pick_offset(Reader *rd)
{
	uint8_t		how = next_byte(rd);
	uint8_t		which = next_byte(rd);
	LogOffset	o = LOG_OFFSET_BEFORE_ALL;

	switch (how % 6)
	{
		case 0:
			return LOG_OFFSET_BEFORE_ALL;
		case 1:
			if (model.pub_nrecs > 0)
				o = model.recs[which % model.pub_nrecs].o;
			return o;
		case 2:
			if (model.pub_nrecs > 0)
			{
				o = model.recs[which % model.pub_nrecs].o;
				if (o.op < LOG_OFFSET_OP_INF - 1)
					o.op++;
			}
			return o;
		case 3:
			if (model.pub_nchunks > 0)
				o = model.chunks[which % model.pub_nchunks].end_off;
			return o;
		case 4:
			o = model.pub_last;
			if (o.tx >= 0)
				o.tx += which % 3;
			return o;
		default:
			o.tx = which % 8;
			o.op = (how & 0x80) ? LOG_OFFSET_OP_INF : (uint64_t) (how % 5);
			return o;
	}
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	Reader		rd = {data, data + size};
	ShapeLog	log;
	ShapeLog	other;			/* competes for blocks */
	uint64_t	seed = 1;

	if (arena_mem == NULL)
	{
		size_t		asize = slog_arena_size((uint64_t) ARENA_BLOCKS * SLOG_BLOCK_SIZE);

		arena_mem = aligned_alloc(SLOG_BLOCK_SIZE, asize);
		FUZZ_ASSERT(arena_mem != NULL);
		arena = slog_arena_init(arena_mem, asize);
	}
	else
		arena = slog_arena_init(arena_mem, slog_arena_size((uint64_t) ARENA_BLOCKS * SLOG_BLOCK_SIZE));
	FUZZ_ASSERT(slog_arena_free_blocks(arena) == arena->nblocks);
	slog_init(&log);
	slog_init(&other);
	model_reset(&model);

	while (rd.p < rd.end)
	{
		uint8_t		op = next_byte(&rd);

		switch (op % 7)
		{
			case 0:
			case 1:				/* append */
				{
					uint8_t		a = next_byte(&rd);
					uint8_t		b = next_byte(&rd);
					uint8_t		step = next_byte(&rd);
					/* small records, or up to ~70 KB: more than two blocks */
					uint32_t	len = (a & 0x80) ? (uint32_t) (a & 0x7f) * 544 + b :
						(uint32_t) a * 4 + b % 4;
					uint32_t	kind = (step & 0x80) ? SLOG_RECORD_CONTROL : SLOG_RECORD_CHANGE;
					uint64_t	before = log.write_pos;
					SlogResult	res;

					if (len > sizeof(payload))
						len = sizeof(payload);
					switch (step % 4)
					{
						case 1:
							model.cur.op++;
							break;
						case 2:
							model.cur.op += 2;
							break;
						case 3:
							model.cur.tx++;
							model.cur.op = 0;
							break;
					}
					fill(payload, len, seed);
					res = slog_append(arena, &log, model.cur, kind, payload, len);
					if (res != SLOG_OK)
					{
						FUZZ_ASSERT(res == SLOG_FULL);
						FUZZ_ASSERT(log.write_pos == before);
						break;
					}
					if (model.nrecs == MAX_RECS)
						goto done;
					model.recs[model.nrecs].o = model.cur;
					model.recs[model.nrecs].len = len;
					model.recs[model.nrecs].kind = kind;
					model.recs[model.nrecs].pos = before;
					model.recs[model.nrecs].seed = seed++;
					model.nrecs++;
					model.write_pos = before + slog_record_span(len);
					FUZZ_ASSERT(log.write_pos == model.write_pos);
					break;
				}
			case 2:				/* close a chunk at the current offset */
				{
					SlogResult	res;

					if (model.nchunks == MAX_CHUNKS)
						goto done;
					res = slog_close_chunk(arena, &log, model.cur);
					if (res != SLOG_OK)
					{
						FUZZ_ASSERT(res == SLOG_FULL);
						FUZZ_ASSERT(log.chunk_count == (uint32_t) model.nchunks);
						break;
					}
					model.chunks[model.nchunks].start = model.chunk_start;
					model.chunks[model.nchunks].end = model.write_pos;
					model.chunks[model.nchunks].end_off = model.cur;
					model.nchunks++;
					model.chunk_start = model.write_pos;
					break;
				}
			case 3:				/* publish */
				{
					uint8_t		f = next_byte(&rd);
					LogOffset	last = model.cur;
					SlogPublished pub;

					if (f & 2)
						last = LOG_OFFSET_SNAPSHOT_END.tx >= model.cur.tx ?
							LOG_OFFSET_SNAPSHOT_END : model.cur;
					/* once done, a snapshot stays done */
					model.pub_flags |= (f & 1) ? SLOG_SNAPSHOT_DONE : 0;
					model.pub_last = last;
					model.pub_nrecs = model.nrecs;
					model.pub_nchunks = model.nchunks;
					model.pub_data_end = model.write_pos;
					slog_publish(&log, last, model.pub_flags);
					slog_read_published(&log, &pub);
					FUZZ_ASSERT(pub.data_end == model.pub_data_end);
					FUZZ_ASSERT(pub.chunk_count == (uint32_t) model.pub_nchunks);
					FUZZ_ASSERT(pub.flags == model.pub_flags);
					FUZZ_ASSERT(log_offset_cmp(pub.last, last) == 0);
					break;
				}
			case 4:				/* look up */
				{
					SlogPublished pub;

					slog_read_published(&log, &pub);
					check_locate(&log, &pub, pick_offset(&rd));
					break;
				}
			case 5:				/* release everything; start over */
				slog_release(arena, &log);
				model_reset(&model);
				FUZZ_ASSERT(log.write_pos == 0 && log.blocks_held == 0);
				FUZZ_ASSERT(slog_arena_free_blocks(arena) + other.blocks_held ==
							arena->nblocks);
				break;
			default:			/* the other log grows or gives back */
				{
					uint8_t		a = next_byte(&rd);

					if (a & 1)
						slog_release(arena, &other);
					else
					{
						static char blob[3 * 8192];

						(void) slog_append(arena, &other, model.cur, SLOG_RECORD_CHANGE, blob,
										   (uint32_t) (a % 4) * 8192);
					}
					break;
				}
		}
		/* the arena's accounting always adds up */
		FUZZ_ASSERT(slog_arena_free_blocks(arena) + log.blocks_held + other.blocks_held ==
					arena->nblocks);
	}
done:
	/* a final look at every published chunk boundary */
	{
		SlogPublished pub;

		slog_read_published(&log, &pub);
		check_locate(&log, &pub, LOG_OFFSET_BEFORE_ALL);
		for (int i = 0; i < model.pub_nchunks && i < 64; i++)
			check_locate(&log, &pub, model.chunks[i].end_off);
		/* records' offsets and the ones just past them, across the log */
		for (int i = 0; i < model.pub_nrecs; i += 1 + model.pub_nrecs / 64)
		{
			LogOffset	o = model.recs[i].o;

			check_locate(&log, &pub, o);
			if (o.op < LOG_OFFSET_OP_INF)
				o.op++;
			check_locate(&log, &pub, o);
		}
		if (model.pub_nrecs > 0)
			check_locate(&log, &pub, model.recs[model.pub_nrecs - 1].o);
	}
	slog_release(arena, &log);
	slog_release(arena, &other);
	FUZZ_ASSERT(slog_arena_free_blocks(arena) == arena->nblocks);
	return 0;
}
