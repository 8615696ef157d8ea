/*
 * test_log_compact.c: compaction keeps every client's view of a shape log.
 *
 * A random history of inserts, updates and deletes over a few keys (keys
 * deleted and inserted again, replica default and full, a snapshot in
 * chunks sharing one offset, closed chunks and an open one) is written the
 * way the server writes it, then compacted.  For every offset a client can
 * hold (-1, each chunk end, each record's offset), a strict materializer
 * (no insert of a present key, no update or delete of an absent one) that
 * had applied the old log up to that offset reads the rest from the
 * compacted log, and must end with exactly the rows of the whole old log.
 * The compacted log must also be smaller, and compacting it again after
 * more changes must hold the same.
 */
#include "unit.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log_compact.h"
#include "log_file_fixture.h"

/* Compaction with no limit but the arena's. */
static SlogCompactResult
compact_unlimited(ShapeLogArena *arena, const ShapeLog *in, ShapeLog *out, uint32_t chunk_bytes,
				  SlogCompactStats *st)
{
	SlogCompactOptions limits = slog_compact_defaults(chunk_bytes);

	return slog_compact(arena, in, out, &limits, st);
}

#define NKEYS		12

/*
 * Seeds per test: each checks every offset of its log, so a seed costs about
 * a second (five under ASan); the ASan build takes a sample (no TSan build:
 * no threads).  More with -DSEEDS=n.
 */
#ifndef SEEDS
#if defined(__SANITIZE_ADDRESS__)
#define SEEDS		6
#else
#define SEEDS		20
#endif
#endif
#define NCOLS		3			/* id, a, b */

static ShapeLogArena *
arena_new(uint32_t nblocks)
{
	size_t		size = slog_arena_size((uint64_t) nblocks * SLOG_BLOCK_SIZE);
	void	   *mem = aligned_alloc(SLOG_BLOCK_SIZE, size);

	return mem ? slog_arena_init(mem, size) : NULL;
}

/* ------------------------------------------------------------ rows */

typedef struct Row
{
	bool		present;
	char		col[NCOLS][24];
} Row;

typedef struct Rows
{
	Row			r[NKEYS];
	/* the client's view of transactions, as test/integrity checks it */
	long long	open_txn;		/* lsn of one whose last:true is not seen; 0 */
	bool		carried;		/* open since before this log: may not end */
} Rows;

static uint64_t rng;
static uint64_t wholes_checked = 0;	/* ranges of a whole chunk, their known size checked */

static uint32_t
rnd(uint32_t n)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t) (rng % n);
}

/* ------------------------------------------------------ the writer */

typedef struct Writer
{
	ShapeLogArena *arena;
	ShapeLog   *log;
	Rows		truth;
	bool		replica_full;
	uint32_t	threshold;
	uint64_t	lsn;
	uint32_t	xid;
	LogOffset	last;
} Writer;

static void
msg_value(char *buf, size_t len, const Row *row, int key, const bool *cols)
{
	size_t		n = 0;
	bool		first = true;

	n += snprintf(buf + n, len - n, "{");
	for (int c = 0; c < NCOLS; c++)
	{
		if (!cols[c])
			continue;
		n += snprintf(buf + n, len - n, "%s\"%s\":\"%s\"", first ? "" : ",",
					  c == 0 ? "id" : c == 1 ? "a" : "b", row->col[c]);
		first = false;
	}
	snprintf(buf + n, len - n, "}");
	(void) key;
}

static void
append(Writer *w, LogOffset o, const char *msg)
{
	REQUIRE(slog_append(w->arena, w->log, o, SLOG_RECORD_CHANGE, msg, (uint32_t) strlen(msg)) ==
			SLOG_OK);
	w->last = o;
}

static void
write_change(Writer *w, LogOffset o, const char *op, int key, const char *value,
			 const char *old_value, bool last)
{
	char		msg[1024];

	snprintf(msg, sizeof(msg),
			 "{\"key\":\"\\\"public\\\".\\\"t\\\"/\\\"%d\\\"\",\"value\":%s%s%s,"
			 "\"headers\":{\"operation\":\"%s\",\"relation\":[\"public\",\"t\"],"
			 "\"lsn\":\"%llu\",\"op_position\":%llu,\"txids\":[%u]%s}}",
			 key, value, old_value ? ",\"old_value\":" : "", old_value ? old_value : "", op,
			 (unsigned long long) o.tx, (unsigned long long) o.op, w->xid,
			 last ? ",\"last\":true" : "");
	append(w, o, msg);
}

/* The snapshot: the present rows, in chunks of `per_chunk`, then snapshot-end. */
static void
write_snapshot(Writer *w, int per_chunk)
{
	uint64_t	chunk = 0;
	int			in_chunk = 0;
	bool		all[NCOLS] = {true, true, true};

	for (int k = 0; k < NKEYS; k++)
	{
		char		v[256];
		char		msg[1024];

		if (rnd(3) == 0)
			continue;
		w->truth.r[k].present = true;
		snprintf(w->truth.r[k].col[0], 24, "%d", k);
		snprintf(w->truth.r[k].col[1], 24, "a0");
		snprintf(w->truth.r[k].col[2], 24, "b0");
		msg_value(v, sizeof(v), &w->truth.r[k], k, all);
		snprintf(msg, sizeof(msg),
				 "{\"key\":\"\\\"public\\\".\\\"t\\\"/\\\"%d\\\"\",\"value\":%s,"
				 "\"headers\":{\"operation\":\"insert\",\"relation\":[\"public\",\"t\"]}}", k, v);
		append(w, (LogOffset) {0, chunk}, msg);
		if (++in_chunk == per_chunk)
		{
			REQUIRE(slog_close_chunk(w->arena, w->log, (LogOffset) {0, chunk}) == SLOG_OK);
			chunk++;
			in_chunk = 0;
		}
	}
	REQUIRE(slog_append(w->arena, w->log, (LogOffset) {0, chunk}, SLOG_RECORD_CONTROL,
						"{\"headers\":{\"control\":\"snapshot-end\"}}", 38) == SLOG_OK);
	REQUIRE(slog_close_chunk(w->arena, w->log, (LogOffset) {0, chunk}) == SLOG_OK);
	slog_publish(w->log, LOG_OFFSET_SNAPSHOT_END, SLOG_SNAPSHOT_DONE);
	w->last = LOG_OFFSET_SNAPSHOT_END;
}

/* One transaction of 1..3 changes, closing a chunk past the threshold. */
static void
write_transaction(Writer *w)
{
	/* mostly small; sometimes one that spans chunks, as a bulk UPDATE does */
	int			n = rnd(12) == 0 ? 4 + (int) rnd(12) : 1 + (int) rnd(3);

	w->lsn += 100 + rnd(50);
	w->xid++;
	for (int i = 0; i < n; i++)
	{
		int			k = (int) rnd(NKEYS);
		Row		   *row = &w->truth.r[k];
		LogOffset	o = {(int64_t) w->lsn, (uint64_t) i * 2};
		char		v[256],
					old[256];
		bool		all[NCOLS] = {true, true, true};
		bool		last = i == n - 1;

		if (!row->present)
		{
			row->present = true;
			snprintf(row->col[0], 24, "%d", k);
			snprintf(row->col[1], 24, "a%u", rnd(1000));
			snprintf(row->col[2], 24, "b%u", rnd(1000));
			msg_value(v, sizeof(v), row, k, all);
			write_change(w, o, "insert", k, v, NULL, last);
		}
		else if (rnd(4) == 0)
		{
			bool		keycols[NCOLS] = {true, false, false};

			msg_value(v, sizeof(v), row, k, w->replica_full ? all : keycols);
			write_change(w, o, "delete", k, v, NULL, last);
			row->present = false;
		}
		else
		{
			int			c = 1 + (int) rnd(2);
			bool		changed[NCOLS] = {true, c == 1, c == 2};
			Row			before = *row;

			snprintf(row->col[c], 24, "%c%u", c == 1 ? 'a' : 'b', rnd(1000));
			msg_value(v, sizeof(v), row, k, w->replica_full ? all : changed);
			if (w->replica_full)
			{
				bool		only[NCOLS] = {false, c == 1, c == 2};

				msg_value(old, sizeof(old), &before, k, only);
			}
			write_change(w, o, "update", k, v, w->replica_full ? old : NULL, last);
		}
		/* as shape_stream.c's ss_append: after any message, so mid-transaction too */
		if (w->log->open_chunk_bytes >= w->threshold)
			REQUIRE(slog_close_chunk(w->arena, w->log, o) == SLOG_OK);
	}
	slog_publish(w->log, w->last, SLOG_SNAPSHOT_DONE);
}

/* ------------------------------------------------------ the reader */

/* Reads "name":"value" members of the object after `tag` into row columns. */
static bool
parse_value(const char *msg, const char *tag, Row *row, bool *cols)
{
	const char *p = strstr(msg, tag);

	memset(cols, 0, sizeof(bool) * NCOLS);
	if (p == NULL)
		return false;
	p += strlen(tag);
	while (*p == '"')
	{
		const char *name = p + 1;
		const char *q = strchr(name, '"');
		const char *v;
		const char *ve;
		int			c;

		if (q == NULL || q[1] != ':' || q[2] != '"')
			return false;
		c = strncmp(name, "id", 2) == 0 ? 0 : strncmp(name, "a\"", 2) == 0 ? 1 : 2;
		v = q + 3;
		ve = strchr(v, '"');
		if (ve == NULL || ve - v >= 24)
			return false;
		memcpy(row->col[c], v, (size_t) (ve - v));
		row->col[c][ve - v] = '\0';
		cols[c] = true;
		p = ve + 1;
		if (*p == ',')
			p++;
	}
	return *p == '}';
}

/* Applies one message strictly; false (with a message) on an anomaly. */
static bool
apply(Rows *rows, const char *msg, char *why, size_t whylen)
{
	const char *kp = strstr(msg, "/\\\"");
	int			k;
	Row			got;
	bool		cols[NCOLS];
	Row		   *row;

	if (strstr(msg, "\"control\"") != NULL)
		return true;
	if (kp == NULL)
	{
		snprintf(why, whylen, "no key: %s", msg);
		return false;
	}
	k = atoi(kp + 3);
	row = &rows->r[k];
	memset(&got, 0, sizeof(got));
	if (!parse_value(msg, "\"value\":{", &got, cols))
	{
		snprintf(why, whylen, "bad value: %s", msg);
		return false;
	}
	if (strstr(msg, "\"operation\":\"insert\""))
	{
		if (row->present)
		{
			snprintf(why, whylen, "insert of present key %d: %s", k, msg);
			return false;
		}
		*row = got;
		row->present = true;
	}
	else if (strstr(msg, "\"operation\":\"update\""))
	{
		Row			was;
		bool		old_cols[NCOLS];

		if (!row->present)
		{
			snprintf(why, whylen, "update of absent key %d: %s", k, msg);
			return false;
		}
		/* old_value, when there is one, is what this client had */
		memset(&was, 0, sizeof(was));
		if (strstr(msg, "\"old_value\":{") && parse_value(msg, "\"old_value\":{", &was, old_cols))
			for (int c = 0; c < NCOLS; c++)
				if (old_cols[c] && strcmp(was.col[c], row->col[c]) != 0)
				{
					snprintf(why, whylen, "old_value of column %d is %s, the row had %s: %s", c,
							 was.col[c], row->col[c], msg);
					return false;
				}
		for (int c = 0; c < NCOLS; c++)
			if (cols[c])
				strcpy(row->col[c], got.col[c]);
	}
	else if (strstr(msg, "\"operation\":\"delete\""))
	{
		if (!row->present)
		{
			snprintf(why, whylen, "delete of absent key %d: %s", k, msg);
			return false;
		}
		/* with replica full, a delete carries the row this client had */
		for (int c = 1; c < NCOLS; c++)
			if (cols[c] && strcmp(got.col[c], row->col[c]) != 0)
			{
				snprintf(why, whylen, "delete's column %d is %s, the row had %s: %s", c,
						 got.col[c], row->col[c], msg);
				return false;
			}
		row->present = false;
	}
	if (strstr(msg, "\"headers\":{") == NULL || msg[strlen(msg) - 1] != '}')
	{
		snprintf(why, whylen, "malformed: %s", msg);
		return false;
	}
	if (strstr(msg, "\"lsn\":\"") != NULL)
	{
		long long	lsn = atoll(strstr(msg, "\"lsn\":\"") + 7);

		if (rows->open_txn != 0 && rows->open_txn != lsn && !rows->carried)
		{
			snprintf(why, whylen, "transaction %lld ended without last:true, next is %s",
					 rows->open_txn, msg);
			return false;
		}
		rows->open_txn = strstr(msg, "\"last\":true") != NULL ? 0 : lsn;
		rows->carried = false;
	}
	return true;
}

/* The client is up to date: no transaction may be left open. */
static bool
no_open_txn(const Rows *rows, char *why, size_t whylen)
{
	if (rows->open_txn == 0 || rows->carried)
		return true;
	snprintf(why, whylen, "up to date in the middle of transaction %lld", rows->open_txn);
	return false;
}

/*
 * Whether the body a response would send of the cursor's range, built in
 * pieces of random sizes the way shape_answer.c's shape_body_fill builds it
 * (whole messages through slog_cursor_copy_messages, one larger than a
 * piece split by slog_cursor_begin and slog_cursor_copy), is `joined`: the
 * messages copied one by one, separated by commas.
 */
static bool
pieces_match(ShapeLogArena *arena, const ShapeLog *log, SlogCursor cur, const char *joined,
			 size_t joined_len, char *why, size_t whylen)
{
	char	   *got = malloc(joined_len + 2);
	size_t		n = 0;
	bool		any = false;
	bool		ok;

	while (slog_cursor_more(&cur) && n < joined_len)
	{
		size_t		piece = 1 + rnd(600);
		size_t		limit = n + piece > joined_len ? joined_len - n : piece;
		size_t		start = n;

		if (cur.in_record)
		{
			n += slog_cursor_copy(arena, log, &cur, got + n, limit);
			continue;
		}
		n += slog_cursor_copy_messages(arena, log, &cur, got + n, limit, &any);
		if (n - start > limit)
		{
			snprintf(why, whylen, "%zu bytes copied into a piece of %zu", n - start, limit);
			free(got);
			return false;
		}
		/* it stopped at the end, or at a message that does not fit whole */
		if (slog_cursor_more(&cur) &&
			slog_cursor_peek(arena, log, &cur) + (any ? 1 : 0) <= limit - (n - start))
		{
			snprintf(why, whylen, "a message that fits the %zu bytes left was left for the next piece",
					 limit - (n - start));
			free(got);
			return false;
		}
		if (n > start || !slog_cursor_more(&cur))
			continue;
		if (any)
			got[n++] = ',';
		any = true;
		slog_cursor_begin(arena, log, &cur);
	}
	ok = n == joined_len && !slog_cursor_more(&cur) && memcmp(got, joined, n) == 0;
	if (!ok)
		snprintf(why, whylen, "a range built in pieces gave %zu bytes, one by one %zu", n,
				 joined_len);
	free(got);
	return ok;
}

/*
 * Reads `log` as a client that has `rows` as of `after`, chunk by chunk,
 * to its end; false on an anomaly.
 */
static bool
client_read(ShapeLogArena *arena, const ShapeLog *log, LogOffset after, Rows *rows,
			uint64_t *messages, char *why, size_t whylen)
{
	SlogPublished pub;

	slog_read_published(log, &pub);
	/*
	 * A transaction this client saw the start of in the old log (its
	 * offset is a chunk end inside it) may have lost its last message to
	 * compaction: the first message of the new log may belong to another.
	 * From there on, transactions end with last:true.
	 */
	rows->carried = rows->open_txn != 0;
	for (int guard = 0; guard < 100000; guard++)
	{
		SlogRange	r;
		SlogCursor	cur,
					start;
		char		msg[2048];
		uint64_t	measured,
					measured_count,
					copied,
					copied_count;
		/* the messages joined by commas, what a response's body holds (one buffer: no threads) */
		static char *joined = NULL;
		static size_t joined_cap = 0;
		size_t		joined_len;

		slog_locate(arena, log, &pub, after, &r);
		if (!r.ready)
		{
			snprintf(why, whylen, "range not ready");
			return false;
		}
		if (r.beyond_end)
			return no_open_txn(rows, why, whylen);
		if (r.start == r.end && log_offset_cmp(r.chunk_end, pub.last) >= 0)
			return no_open_txn(rows, why, whylen);	/* nothing after `after`: up to date */
		if (r.start == r.end)
		{
			/* a live request takes an empty range for "nothing yet" (shape_serve.c) */
			snprintf(why, whylen, "an empty range at %lld_%llu before the log's end",
					 (long long) after.tx, (unsigned long long) after.op);
			return false;
		}
		slog_cursor_init(arena, log, &cur, r.start, r.end, after);
		/* what a response of known length measures first (shape_answer.c) */
		if (!slog_cursor_measure(arena, log, &cur, &measured, &measured_count))
		{
			snprintf(why, whylen, "the range could not be measured");
			return false;
		}
		/* a whole chunk's size, known from the chunk index, is the same */
		if (r.whole_chunk && (r.message_bytes != measured || r.messages != measured_count))
		{
			snprintf(why, whylen, "a chunk's index says %llu bytes in %llu messages, its records %llu in %llu",
					 (unsigned long long) r.message_bytes, (unsigned long long) r.messages,
					 (unsigned long long) measured, (unsigned long long) measured_count);
			return false;
		}
		wholes_checked += r.whole_chunk;
		start = cur;
		joined_len = 0;
		copied = copied_count = 0;
		while (slog_cursor_more(&cur))
		{
			size_t		n = 0;

			slog_cursor_begin(arena, log, &cur);
			while (cur.in_record)
				n += slog_cursor_copy(arena, log, &cur, msg + n, sizeof(msg) - 1 - n);
			msg[n] = '\0';
			(*messages)++;
			copied += n;
			copied_count++;
			if (joined_len + n + 1 > joined_cap)
			{
				joined_cap = 2 * (joined_len + n + 1);
				joined = realloc(joined, joined_cap);
			}
			if (copied_count > 1)
				joined[joined_len++] = ',';
			memcpy(joined + joined_len, msg, n);
			joined_len += n;
			if (!apply(rows, msg, why, whylen))
				return false;
		}
		if (measured != copied || measured_count != copied_count)
		{
			snprintf(why, whylen, "a range measured %llu bytes in %llu messages and copied %llu in %llu",
					 (unsigned long long) measured, (unsigned long long) measured_count,
					 (unsigned long long) copied, (unsigned long long) copied_count);
			return false;
		}
		if (!pieces_match(arena, log, start, joined, joined_len, why, whylen))
			return false;
		if (log_offset_cmp(r.chunk_end, pub.last) >= 0)
			return no_open_txn(rows, why, whylen);
		after = r.chunk_end;
	}
	snprintf(why, whylen, "did not reach the end");
	return false;
}

static bool
rows_equal(const Rows *a, const Rows *b, char *why, size_t whylen)
{
	for (int k = 0; k < NKEYS; k++)
	{
		if (a->r[k].present != b->r[k].present)
		{
			snprintf(why, whylen, "key %d present %d vs %d", k, a->r[k].present, b->r[k].present);
			return false;
		}
		if (!a->r[k].present)
			continue;
		for (int c = 0; c < NCOLS; c++)
			if (strcmp(a->r[k].col[c], b->r[k].col[c]) != 0)
			{
				snprintf(why, whylen, "key %d column %d: %s vs %s", k, c, a->r[k].col[c],
						 b->r[k].col[c]);
				return false;
			}
	}
	return true;
}

/*
 * Every offset a client of `log` can hold: -1, every chunk end, and every
 * record's offset from `from_pos` (a compacted part gives out only its
 * chunk ends).
 */
static int
client_offsets(ShapeLogArena *arena, const ShapeLog *log, uint64_t from_pos, LogOffset *out,
			   int max)
{
	SlogPublished pub;
	int			n = 0;

	slog_read_published(log, &pub);
	out[n++] = LOG_OFFSET_BEFORE_ALL;
	for (uint64_t pos = 0; pos < pub.data_end && n < max;)
	{
		SlogRecordHeader hdr;

		slog_read_header(arena, log, pos, &hdr);
		if (pos >= from_pos)
			out[n++] = (LogOffset) {hdr.tx, hdr.op};
		pos += slog_record_span(hdr.len);
	}
	for (uint32_t i = 0; i < pub.chunk_count && n < max; i++)
	{
		SlogChunk	c;

		slog_chunk_read(arena, log, i, &c);
		out[n++] = (LogOffset) {c.end_tx, c.end_op};
	}
	return n;
}

/* Applies `log` from -1 up to `upto` (inclusive) to `rows`; false on an anomaly. */
static bool
read_up_to(ShapeLogArena *arena, const ShapeLog *log, LogOffset upto, Rows *rows, char *why,
		   size_t whylen)
{
	SlogPublished p;
	LogOffset	after = LOG_OFFSET_BEFORE_ALL;

	if (log_offset_is_before_all(upto))
		return true;
	slog_read_published(log, &p);
	for (;;)
	{
		SlogRange	r;
		SlogCursor	cur;
		char		msg[2048];

		slog_locate(arena, log, &p, after, &r);
		slog_cursor_init(arena, log, &cur, r.start, r.end, after);
		while (slog_cursor_more(&cur))
		{
			size_t		len = 0;
			SlogRecordHeader hdr;

			slog_read_header(arena, log, cur.pos, &hdr);
			if (log_offset_cmp((LogOffset) {hdr.tx, hdr.op}, upto) > 0)
				return true;
			slog_cursor_begin(arena, log, &cur);
			while (cur.in_record)
				len += slog_cursor_copy(arena, log, &cur, msg + len, sizeof(msg) - 1 - len);
			msg[len] = '\0';
			if (!apply(rows, msg, why, whylen))
				return false;
		}
		if (log_offset_cmp(r.chunk_end, upto) >= 0 || log_offset_cmp(r.chunk_end, p.last) >= 0)
			return true;
		after = r.chunk_end;
	}
}

/* over all seeds: chunk ends compared with the old log, and made at transaction ends */
static uint64_t ends_compared = 0;
static uint64_t ends_made = 0;

/* Whether a client of `log` can hold `o`: one of its records' offsets or chunk ends. */
static bool
is_offset_of(ShapeLogArena *arena, const ShapeLog *log, LogOffset o)
{
	static LogOffset offsets[20000];
	int			n = client_offsets(arena, log, 0, offsets, 20000);

	for (int i = 0; i < n; i++)
		if (log_offset_cmp(offsets[i], o) == 0)
			return true;
	return false;
}

/*
 * At every chunk end of the compacted log that a client of the old log
 * could hold, its readers hold the rows that readers of the old log hold
 * there, values too: what the cursor's tombstone filter and the strict
 * rules need, and what a response to `offset=<that end>` cached from the
 * old log (a CDN keeps them by URL, and the handle stays) needs to be
 * right for the new log's clients.  The other chunk ends (a transaction's
 * end, see log_compact.c) are offsets no response was cached for.
 */
static int
check_chunk_ends_agree(ShapeLogArena *arena, const ShapeLog *old, const ShapeLog *new)
{
	SlogPublished pub,
				old_pub;
	int			bad = 0;

	slog_read_published(new, &pub);
	slog_read_published(old, &old_pub);
	for (uint32_t i = 0; i < pub.chunk_count && bad < 3; i++)
	{
		SlogChunk	c;
		Rows		a,
					b;
		char		why[2200] = "";
		LogOffset	end;

		slog_chunk_read(arena, new, i, &c);
		end = (LogOffset) {c.end_tx, c.end_op};
		if (log_offset_cmp(end, old_pub.last) > 0 && !log_offset_is_before_all(old_pub.last) &&
			old_pub.last.tx > 0)
			break;				/* past what the old log holds */
		if (!is_offset_of(arena, old, end))
			continue;
		ends_compared++;
		memset(&a, 0, sizeof(a));
		memset(&b, 0, sizeof(b));
		if (!read_up_to(arena, old, end, &a, why, sizeof(why)) ||
			!read_up_to(arena, new, end, &b, why, sizeof(why)) ||
			!rows_equal(&a, &b, why, sizeof(why)))
		{
			FAIL("at chunk end %lld_%llu of the compacted log: %s", (long long) end.tx,
				 (unsigned long long) end.op, why);
			bad++;
		}
	}
	return bad;
}

/*
 * For each offset of the old log: the client's rows up to it (from the
 * old log, from -1), then the rest from the new log; it must reach the
 * truth without an anomaly.
 */
static int
check_every_offset(ShapeLogArena *arena, const ShapeLog *old, uint64_t old_from_pos,
				   const ShapeLog *new, const Rows *truth, uint64_t *messages_from_start)
{
	static LogOffset offsets[20000];
	int			n = client_offsets(arena, old, old_from_pos, offsets, 20000);
	int			failures = 0;

	for (int i = 0; i < n && failures < 3; i++)
	{
		Rows		rows;
		char		why[2200] = "";
		uint64_t	msgs = 0;

		memset(&rows, 0, sizeof(rows));
		/* the rows a client at offsets[i] holds: the old log up to it */
		if (!read_up_to(arena, old, offsets[i], &rows, why, sizeof(why)))
		{
			FAIL("the old log itself: %s", why);
			return 1;
		}
		if (!client_read(arena, new, offsets[i], &rows, &msgs, why, sizeof(why)) ||
			!rows_equal(&rows, truth, why, sizeof(why)))
		{
			FAIL("a client at %lld_%llu: %s", (long long) offsets[i].tx,
				 (unsigned long long) offsets[i].op, why);
			failures++;
		}
		if (log_offset_is_before_all(offsets[i]) && messages_from_start)
			*messages_from_start = msgs;
	}
	return failures;
}

/* Records of a log, tombstones included or not. */
static uint64_t
count_records(ShapeLogArena *arena, const ShapeLog *log, bool tombstones)
{
	SlogPublished pub;
	uint64_t	n = 0;

	slog_read_published(log, &pub);
	for (uint64_t pos = 0; pos < pub.data_end;)
	{
		SlogRecordHeader hdr;

		slog_read_header(arena, log, pos, &hdr);
		n += tombstones || hdr.kind != SLOG_RECORD_TOMBSTONE;
		pos += slog_record_span(hdr.len);
	}
	return n;
}

/*
 * The shape of a compacted log: every closed chunk ends at its last
 * record's offset (as the server's chunks do), or, at the end of a
 * transaction, at that transaction's LSN with an op above
 * SLOG_COMPACT_END_OP, past its last record and before the next chunk's
 * first record (of a later transaction); and a merged update (more
 * than one txid) carries no old_value.
 */
static int
check_chunks_and_merges(ShapeLogArena *arena, const ShapeLog *log)
{
	SlogPublished pub;
	int			bad = 0;

	slog_read_published(log, &pub);
	for (uint32_t i = 0; i < pub.chunk_count; i++)
	{
		SlogChunk	c;
		LogOffset	last = {0, 0};

		slog_chunk_read(arena, log, i, &c);
		for (uint64_t pos = c.start_pos; pos < c.end_pos;)
		{
			SlogRecordHeader hdr;
			char		m[2048];

			slog_read_header(arena, log, pos, &hdr);
			last = (LogOffset) {hdr.tx, hdr.op};
			slog_copy_out(arena, log, pos + sizeof(hdr), m, hdr.len);
			m[hdr.len] = '\0';
			if (strstr(m, "\"txids\":["))
			{
				int			commas = 0;

				for (const char *t = strstr(m, "\"txids\":["); *t && *t != ']'; t++)
					commas += *t == ',';
				if (commas + 1 > SLOG_COMPACT_MAX_TXIDS)
				{
					FAIL("%d txids in one message: %s", commas + 1, m);
					bad++;
				}
			}
			if (strstr(m, "\"txids\":[") && strchr(strstr(m, "\"txids\":["), ',') &&
				strchr(strstr(m, "\"txids\":["), ',') < strchr(strstr(m, "\"txids\":["), ']') &&
				strstr(m, "\"old_value\"") != NULL)
			{
				FAIL("a merged update with old_value: %s", m);
				bad++;
			}
			pos += slog_record_span(hdr.len);
		}
		if (c.end_op > SLOG_COMPACT_END_OP && c.end_tx > 0 &&
			log_offset_cmp((LogOffset) {c.end_tx, c.end_op}, last) > 0)
		{
			SlogRecordHeader next;

			ends_made++;
			if (c.end_pos < pub.data_end)
			{
				slog_read_header(arena, log, c.end_pos, &next);
				if (next.tx <= last.tx)
				{
					FAIL("chunk %u ends at %lld_%llu, but the next record is %lld_%llu", i,
						 (long long) c.end_tx, (unsigned long long) c.end_op,
						 (long long) next.tx, (unsigned long long) next.op);
					bad++;
				}
			}
		}
		else if (log_offset_cmp(last, (LogOffset) {c.end_tx, c.end_op}) != 0)
		{
			FAIL("chunk %u ends at %lld_%llu, its last record is %lld_%llu", i,
				 (long long) c.end_tx, (unsigned long long) c.end_op,
				 (long long) last.tx, (unsigned long long) last.op);
			bad++;
		}
	}
	return bad;
}

static SlogCompactResult
compact_into(ShapeLogArena *arena, const ShapeLog *in, ShapeLog *out, SlogCompactStats *st)
{
	slog_init(out);
	return compact_unlimited(arena, in, out, 600, st);
}


/*
 * A seed's history in logs[0] (logs[1] and [2] emptied for its copies): the
 * snapshot in chunks of `per_snapshot_chunk` rows, then `transactions`.
 */
static void
write_history(Writer *w, ShapeLogArena *arena, ShapeLog *logs, uint64_t seed, bool replica_full,
			  int per_snapshot_chunk, int transactions)
{
	rng = seed * 2654435761u + 1;
	memset(w, 0, sizeof(*w));
	for (int i = 0; i < 3; i++)
		slog_init(&logs[i]);
	w->arena = arena;
	w->log = &logs[0];
	w->replica_full = replica_full;
	w->threshold = 500;
	w->lsn = 1000;
	write_snapshot(w, per_snapshot_chunk);
	for (int t = 0; t < transactions; t++)
		write_transaction(w);
}

/* One seed: history, compaction, every offset; more history, again. */
static void
run_seed(uint64_t seed, bool replica_full, int per_snapshot_chunk)
{
	ShapeLogArena *arena = arena_new(512);
	ShapeLog	logs[3];
	Writer		w;
	SlogCompactStats st;
	uint64_t	fresh = 0;
	uint64_t	compacted_end;
	SlogPublished before,
				after;

	REQUIRE(arena != NULL);
	write_history(&w, arena, logs, seed, replica_full, per_snapshot_chunk, 150);

	REQUIRE(compact_into(arena, &logs[0], &logs[1], &st) == SLOG_COMPACT_OK);
	slog_read_published(&logs[0], &before);
	slog_read_published(&logs[1], &after);
	CHECK(log_offset_cmp(before.last, after.last) == 0);
	CHECK_EQ(before.flags, after.flags);
	CHECK(st.bytes_out < st.bytes_in);
	CHECK(st.records_out < st.records_in);
	CHECK_EQ(check_every_offset(arena, &logs[0], 0, &logs[1], &w.truth, &fresh), 0);
	CHECK_EQ(check_chunks_and_merges(arena, &logs[1]), 0);
	CHECK_EQ(check_chunk_ends_agree(arena, &logs[0], &logs[1]), 0);
	{
		SlogChunk	last;

		slog_chunk_read(arena, &logs[1], after.chunk_count - 1, &last);
		compacted_end = last.end_pos;
	}
	/* a fresh client gets every record but the tombstones */
	CHECK_EQ(fresh, count_records(arena, &logs[1], false));
	CHECK(fresh < count_records(arena, &logs[0], true));

	/* more changes on the compacted log, then compaction again */
	w.log = &logs[1];
	for (int t = 0; t < 100; t++)
		write_transaction(&w);
	REQUIRE(compact_into(arena, &logs[1], &logs[2], &st) == SLOG_COMPACT_OK);
	CHECK(st.tombstones > 0 || st.records_out <= st.records_in);
	/* clients of the first log, and of the compacted one, on the second */
	CHECK_EQ(check_every_offset(arena, &logs[1], compacted_end, &logs[2], &w.truth, NULL), 0);
	CHECK_EQ(check_every_offset(arena, &logs[0], 0, &logs[2], &w.truth, NULL), 0);
	CHECK_EQ(check_chunks_and_merges(arena, &logs[2]), 0);
	CHECK_EQ(check_chunk_ends_agree(arena, &logs[1], &logs[2]), 0);
	CHECK_EQ(check_chunk_ends_agree(arena, &logs[0], &logs[2]), 0);

	for (int i = 0; i < 3; i++)
		slog_release(arena, &logs[i]);
	CHECK_EQ(slog_arena_free_blocks(arena), arena->nblocks);
	free(arena);
}

TEST(compaction_keeps_every_offset_replica_default)
{
	for (uint64_t seed = 1; seed <= SEEDS; seed++)
		run_seed(seed, false, 1 + (int) (seed % 4));
	/* neither kind of chunk end went untested */
	CHECK(ends_compared > 0);
	CHECK(ends_made > 0);
	CHECK(wholes_checked > 0);
}

TEST(compaction_keeps_every_offset_replica_full)
{
	for (uint64_t seed = 100; seed < 100 + SEEDS; seed++)
		run_seed(seed, true, 1 + (int) (seed % 4));
}

/* The merged update carries every txid of the updates it merged, and last. */
TEST(merged_update_has_all_txids)
{
	ShapeLogArena *arena = arena_new(64);
	ShapeLog	in,
				out;
	Writer		w;
	SlogCompactStats st;
	SlogPublished pub;
	char		msg[2048];
	bool		found = false;

	memset(&w, 0, sizeof(w));
	slog_init(&in);
	slog_init(&out);
	w.arena = arena;
	w.log = &in;
	w.threshold = 1 << 30;
	append(&w, (LogOffset) {0, 0},
		   "{\"key\":\"\\\"public\\\".\\\"t\\\"/\\\"1\\\"\",\"value\":{\"id\":\"1\",\"a\":\"x\",\"b\":\"y\"},"
		   "\"headers\":{\"operation\":\"insert\",\"relation\":[\"public\",\"t\"]}}");
	REQUIRE(slog_close_chunk(arena, &in, (LogOffset) {0, 0}) == SLOG_OK);
	w.xid = 41;
	write_change(&w, (LogOffset) {100, 0}, "update", 1, "{\"id\":\"1\",\"a\":\"x2\"}", NULL, false);
	w.xid = 42;
	write_change(&w, (LogOffset) {200, 0}, "update", 1, "{\"id\":\"1\",\"b\":\"y2\"}", NULL, true);
	REQUIRE(slog_close_chunk(arena, &in, (LogOffset) {200, 0}) == SLOG_OK);
	slog_publish(&in, (LogOffset) {200, 0}, SLOG_SNAPSHOT_DONE);
	REQUIRE(compact_unlimited(arena, &in, &out, 1 << 20, &st) == SLOG_COMPACT_OK);
	CHECK_EQ(st.records_out, 2);
	slog_read_published(&out, &pub);
	for (uint64_t pos = 0; pos < pub.data_end;)
	{
		SlogRecordHeader hdr;

		slog_read_header(arena, &out, pos, &hdr);
		slog_copy_out(arena, &out, pos + sizeof(hdr), msg, hdr.len);
		msg[hdr.len] = '\0';
		if (hdr.tx == 200)
		{
			found = true;
			CHECK(strstr(msg, "\"value\":{\"id\":\"1\",\"a\":\"x2\",\"b\":\"y2\"}") != NULL);
			CHECK(strstr(msg, "\"txids\":[41,42]") != NULL);
			CHECK(strstr(msg, "\"last\":true}}") != NULL);
			CHECK(strstr(msg, "\"operation\":\"update\"") != NULL);
		}
		pos += slog_record_span(hdr.len);
	}
	CHECK(found);
	slog_release(arena, &in);
	slog_release(arena, &out);
	free(arena);
}

/* A record this server did not write stops compaction; nothing is lost. */
TEST(unreadable_record_stops_compaction)
{
	ShapeLogArena *arena = arena_new(64);
	ShapeLog	in,
				out;
	SlogCompactStats st;

	slog_init(&in);
	slog_init(&out);
	REQUIRE(slog_append(arena, &in, (LogOffset) {0, 0}, SLOG_RECORD_CHANGE, "{\"oops\":1}", 10) ==
			SLOG_OK);
	REQUIRE(slog_close_chunk(arena, &in, (LogOffset) {0, 0}) == SLOG_OK);
	slog_publish(&in, LOG_OFFSET_SNAPSHOT_END, SLOG_SNAPSHOT_DONE);
	CHECK_EQ(compact_unlimited(arena, &in, &out, 1024, &st), SLOG_COMPACT_UNREADABLE);
	slog_release(arena, &out);
	slog_release(arena, &in);
	CHECK_EQ(slog_arena_free_blocks(arena), arena->nblocks);
	free(arena);
}

/* An arena too small for the copy: FULL, and the copy can be released. */
TEST(compaction_out_of_blocks)
{
	ShapeLogArena *arena = arena_new(14);
	ShapeLog	in,
				out;
	SlogCompactStats st;
	char		msg[1024];
	uint32_t	start = slog_arena_free_blocks(arena);

	slog_init(&in);
	slog_init(&out);
	for (int i = 0; i < 100; i++)
	{
		snprintf(msg, sizeof(msg),
				 "{\"key\":\"\\\"public\\\".\\\"t\\\"/\\\"%d\\\"\",\"value\":{\"id\":\"%d\",\"a\":\"%0600d\"},"
				 "\"headers\":{\"operation\":\"insert\",\"relation\":[\"public\",\"t\"]}}", i, i, i);
		REQUIRE(slog_append(arena, &in, (LogOffset) {0, 0}, SLOG_RECORD_CHANGE, msg,
							(uint32_t) strlen(msg)) == SLOG_OK);
	}
	REQUIRE(slog_close_chunk(arena, &in, (LogOffset) {0, 0}) == SLOG_OK);
	slog_publish(&in, LOG_OFFSET_SNAPSHOT_END, SLOG_SNAPSHOT_DONE);
	/* 10 data blocks, their directory and a position index block: 2 are left */
	CHECK_EQ(in.blocks_held, 12);
	CHECK_EQ(compact_unlimited(arena, &in, &out, 1 << 20, &st), SLOG_COMPACT_FULL);
	slog_release(arena, &out);
	slog_release(arena, &in);
	CHECK_EQ(slog_arena_free_blocks(arena), start);
	free(arena);
}

/*
 * Whether two logs hold the same records, chunks and published state (not
 * the same bytes: a record's padding is whatever its block held before).
 */
static bool
same_log(ShapeLogArena *arena, const ShapeLog *a, const ShapeLog *b)
{
	SlogPublished pa,
				pb;
	static char ma[4096],
				mb[4096];

	slog_read_published(a, &pa);
	slog_read_published(b, &pb);
	if (pa.data_end != pb.data_end || pa.chunk_count != pb.chunk_count ||
		pa.flags != pb.flags || log_offset_cmp(pa.last, pb.last) != 0)
		return false;
	for (uint32_t i = 0; i < pa.chunk_count; i++)
	{
		SlogChunk	ca,
					cb;

		slog_chunk_read(arena, a, i, &ca);
		slog_chunk_read(arena, b, i, &cb);
		if (ca.start_pos != cb.start_pos || ca.end_pos != cb.end_pos ||
			ca.end_tx != cb.end_tx || ca.end_op != cb.end_op ||
			ca.message_bytes != cb.message_bytes || ca.messages != cb.messages ||
			ca.tombstones != cb.tombstones)
			return false;
	}
	for (uint64_t pos = 0; pos < pa.data_end;)
	{
		SlogRecordHeader ha,
					hb;

		if (!slog_read_header(arena, a, pos, &ha) || !slog_read_header(arena, b, pos, &hb) ||
			ha.tx != hb.tx || ha.op != hb.op || ha.kind != hb.kind || ha.len != hb.len ||
			ha.len > sizeof(ma) ||
			!slog_copy_out(arena, a, pos + sizeof(ha), ma, ha.len) ||
			!slog_copy_out(arena, b, pos + sizeof(hb), mb, hb.len) ||
			memcmp(ma, mb, ha.len) != 0)
			return false;
		pos += slog_record_span(ha.len);
	}
	return true;
}

/* Compacts `in` into `out` (emptied first) under `limits`; releases `out` unless OK. */
static SlogCompactResult
compact_limited(ShapeLogArena *arena, const ShapeLog *in, ShapeLog *out,
				const SlogCompactOptions *limits, SlogCompactStats *st)
{
	SlogCompactResult res;

	slog_init(out);
	res = slog_compact(arena, in, out, limits, st);
	if (res != SLOG_COMPACT_OK)
		slog_release(arena, out);
	return res;
}

/*
 * chunk_closed as log_files.c does it: what the copy gained, to its file,
 * then out of memory; `stop_at` calls (0: never) says stop.
 */
typedef struct CopySink
{
	const char *path;
	ShapeLogArena *arena;
	int			fd;
	uint64_t	written;
	uint32_t	calls;
	uint32_t	stop_at;
	uint64_t	trimmed;
} CopySink;

static bool
copy_sink_chunk(void *arg, ShapeLog *out)
{
	CopySink   *sink = arg;
	char		buf[SLOG_BLOCK_SIZE];

	if (++sink->calls == sink->stop_at)
		return false;
	while (sink->written < out->write_pos)
	{
		size_t		n = out->write_pos - sink->written < sizeof(buf) ?
			(size_t) (out->write_pos - sink->written) : sizeof(buf);

		slog_writer_copy_out(sink->arena, out, sink->written, buf, n);
		if (pwrite(sink->fd, buf, n, (off_t) sink->written) != (ssize_t) n)
			abort();
		sink->written += n;
	}
	sink->trimmed += (uint64_t) trim_log_to_file(sink->arena, out, sink->path, sink->written) *
		SLOG_BLOCK_SIZE;
	return true;
}

/*
 * A log whose closed chunks left memory for its file (durable logs)
 * compacts to exactly what it compacts to in memory, read from the file,
 * and serves every client of the old log as well.  Each limit refuses it
 * cleanly, and exactly at its bound: its bookkeeping past max_work_bytes;
 * so does a file that cannot be read.  A copy
 * written to its own file as it is built (chunk_closed) and taken out of
 * memory is the same log; chunk_closed can stop it.  Every block comes
 * back.
 */
TEST(compaction_reads_a_log_that_left_memory)
{
	char		dir[] = "/tmp/test_log_compact.XXXXXX";
	char		path[256];
	uint64_t	trimmed_bytes = 0;
	uint64_t	copied_bytes = 0;

	REQUIRE(mkdtemp(dir) != NULL);
	for (uint64_t seed = 7; seed < 7 + (SEEDS + 3) / 4; seed++)
	{
		ShapeLogArena *arena = arena_new(512);
		ShapeLog	logs[3];
		Writer		w;
		SlogCompactStats in_memory,
					st;
		SlogCompactOptions limits = slog_compact_defaults(600);
		SlogPublished pub;
		SlogChunk	last;

		REQUIRE(arena != NULL);
		/* a path names the same bytes for good (the readers' window relies on it) */
		snprintf(path, sizeof(path), "%s/h%llu.1.log", dir, (unsigned long long) seed);
		write_history(&w, arena, logs, seed, seed % 2 == 0, 2, 400);
		REQUIRE_EQ(compact_limited(arena, &logs[0], &logs[1], &limits, &in_memory),
				   SLOG_COMPACT_OK);

		/* its closed chunks leave memory for its file */
		REQUIRE(write_log_file(arena, &logs[0], path));
		slog_read_published(&logs[0], &pub);
		slog_chunk_read(arena, &logs[0], pub.chunk_count - 1, &last);
		REQUIRE(trim_log_to_file(arena, &logs[0], path, last.end_pos) > 0);
		trimmed_bytes += slog_mem_start(&logs[0]);

		REQUIRE_EQ(compact_limited(arena, &logs[0], &logs[2], &limits, &st), SLOG_COMPACT_OK);
		CHECK(same_log(arena, &logs[1], &logs[2]));
		CHECK_EQ(st.records_in, in_memory.records_in);
		CHECK_EQ(st.bytes_out, in_memory.bytes_out);
		CHECK_EQ(st.work_bytes, in_memory.work_bytes);
		CHECK(st.bytes_out < st.bytes_in);
		CHECK_EQ(check_every_offset(arena, &logs[0], 0, &logs[2], &w.truth, NULL), 0);
		slog_release(arena, &logs[2]);

		/* the copy written to its own file as it is built, and out of memory */
		{
			char		copy_path[300];
			CopySink	sink = {copy_path, arena, -1, 0, 0, 0, 0};

			snprintf(copy_path, sizeof(copy_path), "%s/h%llu.2.log", dir,
					 (unsigned long long) seed);
			sink.fd = open(copy_path, O_RDWR | O_CREAT | O_TRUNC, 0600);
			REQUIRE(sink.fd >= 0);
			limits.chunk_closed = copy_sink_chunk;
			limits.arg = &sink;
			REQUIRE_EQ(compact_limited(arena, &logs[0], &logs[2], &limits, &st),
					   SLOG_COMPACT_OK);
			CHECK(sink.calls > 1);
			CHECK(sink.trimmed > 0);
			CHECK_EQ(slog_mem_start(&logs[2]), sink.trimmed);
			CHECK(same_log(arena, &logs[1], &logs[2]));
			CHECK_EQ(check_every_offset(arena, &logs[0], 0, &logs[2], &w.truth, NULL), 0);
			slog_release(arena, &logs[2]);
			copied_bytes += sink.trimmed;

			/* stopped by it: nothing is left but the blocks it holds, given back */
			sink.calls = 0;
			sink.written = 0;
			sink.stop_at = 2;
			CHECK_EQ(compact_limited(arena, &logs[0], &logs[2], &limits, &st),
					 SLOG_COMPACT_STOPPED);
			close(sink.fd);
			unlink(copy_path);
			limits = slog_compact_defaults(600);
		}

		/* the bookkeeping's bound, exactly */
		limits.max_work_bytes = in_memory.work_bytes;
		CHECK_EQ(compact_limited(arena, &logs[0], &logs[2], &limits, &st), SLOG_COMPACT_OK);
		slog_release(arena, &logs[2]);
		limits.max_work_bytes = in_memory.work_bytes - 1;
		CHECK_EQ(compact_limited(arena, &logs[0], &logs[2], &limits, &st),
				 SLOG_COMPACT_TOO_LARGE);
		limits.max_work_bytes = 4096;
		CHECK_EQ(compact_limited(arena, &logs[0], &logs[2], &limits, &st),
				 SLOG_COMPACT_TOO_LARGE);
		CHECK(st.work_bytes <= 4096);

		/* a file that cannot be read */
		REQUIRE(unlink(path) == 0);
		limits = slog_compact_defaults(600);
		CHECK_EQ(compact_limited(arena, &logs[0], &logs[2], &limits, &st),
				 SLOG_COMPACT_READ_FAILED);
		CHECK_EQ(st.read_error, ENOENT);

		for (int i = 0; i < 3; i++)
			slog_release(arena, &logs[i]);
		CHECK_EQ(slog_arena_free_blocks(arena), arena->nblocks);
		free(arena);
	}
	rmdir(dir);
	printf("  # %llu bytes read from files, %llu of copies written to files\n",
		   (unsigned long long) trimmed_bytes, (unsigned long long) copied_bytes);
}

UNIT_MAIN()
