/*-------------------------------------------------------------------------
 *
 * log_compact.c
 *		Compaction of a shape log: one message per key life, not per change.
 *
 * A hot shape's log grows with every update while its rows stay the same
 * size.  Compaction rewrites the closed chunks of a log into a new log
 * (the shape's spare version, see shape_table.c) that serves every client
 * exactly as the old one did, whatever offset it resumes from, and copies
 * the open chunk as it is.  It reads only messages this server wrote (the
 * layout of log_record.h), and gives up on anything else.
 *
 * The closed chunks are taken in groups of at least `chunk_bytes` (input
 * bytes), and each group becomes one chunk of the compacted log (where it
 * ends: see below).  Per key (a life: an insert, its updates, the delete
 * that ends it):
 *	- the insert stays at its offset;
 *	- the life's updates become one update at the offset of the last of
 *	  them (of the last before a chunk end that updates do not cross, see
 *	  below): every column any of them changed, with its last value (with
 *	  replica full, the last update's whole row), and their txids (the
 *	  newest SLOG_COMPACT_MAX_TXIDS).  A merged update has no old_value: the
 *	  values before it differ from one client to another (a lone update
 *	  keeps its own, which is right for every client);
 *	- a life that begins and ends inside one group keeps only its delete
 *	  and, if it had updates, their merged update, as tombstone records
 *	  that carry the offset of the life's insert.  The cursor
 *	  (slog_cursor_*) serves a tombstone only to a client that resumes from
 *	  inside that life, the one client that holds the row; a client
 *	  entering the chunk at its start never hears of the key.  A life that
 *	  spans a group's end keeps its insert and its delete as they are;
 *	- control messages (snapshot-end) stay where they are.
 * So at every chunk end of the compacted log its readers hold the same keys
 * as readers of the old log at that offset, and offsets inside a chunk are
 * held only by clients of the old log (a client of the compacted one holds
 * its chunk ends), whose rows the old log defines: from any offset a client
 * holds, the messages after it bring it strictly to the same rows.  Each
 * kept change message is marked the last of its transaction: the messages
 * a transaction had beside it may be gone, and a client must not wait for
 * them.  A key whose history this server would never write (an insert of
 * a present key: a table whose rows share a key) keeps its records as they
 * are.
 *
 * Chunk ends.  A merged update moves values past chunk ends, so at a chunk
 * end a reader of the compacted log may hold older values than a reader of
 * the old log held at the same offset; a caching proxy that still holds
 * the old log's response for that offset (the handle stays) would give the
 * new reader the old log's continuation, which does not repeat them.  So:
 *	- a chunk that ends where a transaction ends (the next record is of a
 *	  later one) ends at an offset no client ever held: that transaction's
 *	  LSN with op SLOG_COMPACT_END_OP + 1, or one more than the input
 *	  chunk end's op when an earlier compaction made it so.  It is above
 *	  every op of the transaction's messages and below the next
 *	  transaction's, and updates merge across it;
 *	- a chunk that ends inside a transaction (a bulk change spans chunks),
 *	  in the snapshot, or at the end of the log ends at its last message,
 *	  and no update merges across it, so its readers hold what the old
 *	  log's readers held there, values too.
 * A transaction whose records after the group's end were dropped by an
 * earlier compaction (the insert of a life whose tombstone comes later)
 * does not end there: a client at a made offset would count as inside that
 * life.  test_log_compact.c checks, at every chunk end a client of the old
 * log could hold, that both logs' readers agree.
 *
 * So a compacted log holds one insert and at most one update per row, plus
 * a delete (and a merged update) per life that ended since the snapshot; a
 * log whose deletes dominate does not shrink much, and its shape is rotated
 * when the arena cannot hold it (shape_stream_log.c).
 *
 * Work is linear in the records of the log; memory is a small fixed
 * record per message and one per key (malloc'd, freed before returning)
 * plus, while an update group is being merged, that group's columns.  A
 * log that left memory for its file (durable logs, docs/storage.md) is
 * read from there, 64 kB at a time (shape_log_read.c), three passes; its
 * copy is built in the arena, and the caller may write each of its chunks
 * out as it closes and take it out of memory (chunk_closed).  Past
 * max_work_bytes of bookkeeping (SlogCompactOptions) compaction gives up
 * with SLOG_COMPACT_TOO_LARGE; an input file that cannot be read gives
 * SLOG_COMPACT_READ_FAILED.  Each leaves `in` as it was.
 *
 * Notes on synchronization
 * ------------------------
 * None here: the caller is the writer of both logs.  `in` is read below
 * its published bounds, which nobody writes again (nor trims: only the
 * writer does), and `out` is invisible until the caller publishes and
 * swaps it (shape_table_swap_log).
 *
 * IDENTIFICATION
 *	  src/contract/log_compact.c
 *
 *-------------------------------------------------------------------------
 */
#include "log_compact.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fnv_hash.h"
#include "log_record.h"

#ifdef POSTGRES_H
#error "log_compact.c is shared by threads and must not include postgres.h"
#endif

/* What becomes of a record of the closed chunks. */
typedef enum CompactFate
{
	FATE_PENDING = 0,
	FATE_KEEP,					/* copied (a change marked last) */
	FATE_DROP,
	FATE_TOMBSTONE,				/* a delete, kept as a tombstone */
	FATE_KEEP_TOMBSTONE,		/* a tombstone of an earlier compaction */
	FATE_MERGE,					/* an update folded into a later one */
	FATE_MERGE_LAST				/* where the merged update goes */
} CompactFate;

typedef enum CompactOp
{
	OP_CONTROL,
	OP_INSERT,
	OP_UPDATE,
	OP_DELETE,
	OP_TOMBSTONE
} CompactOp;

typedef struct CompactRecord
{
	uint64_t	pos;
	LogOffset	offset;
	LogOffset	born;			/* tombstones: the insert of their life */
	uint32_t	len;
	uint32_t	key;			/* index into keys, changes only */
	int64_t		prev_in_life;	/* the key's previous record of this life */
	uint8_t		kind;
	uint8_t		op;				/* CompactOp */
	uint8_t		fate;			/* CompactFate */
	bool		filtered;		/* kept as a tombstone: only for clients
								 * inside its life (born) */
} CompactRecord;

/* A column of a merged update: name and value as JSON text. */
typedef struct CompactPair
{
	char	   *name;
	size_t		name_len;
	char	   *value;
	size_t		value_len;
} CompactPair;

typedef struct CompactMerge
{
	CompactPair *values;
	int			nvalues;
	uint64_t   *txids;
	int			ntxids;
} CompactMerge;

typedef struct CompactKey
{
	uint64_t	hash;
	size_t		text_off;		/* into Compactor.key_text */
	size_t		text_len;
	bool		life_open;		/* the key is present */
	bool		verbatim;		/* its records stay as they are */
	int64_t		life_insert;	/* the open life's insert, or -1 */
	int64_t		life_last;		/* its last record, or -1 */
	uint32_t	life_updates;	/* ... and how many updates it has */
	bool		listed;			/* in Compactor.updated_keys */
	CompactMerge *merge;		/* while pass 2 merges its updates */
} CompactKey;

/* A tombstone of the input: where it is, and the transaction of its life's insert. */
typedef struct CompactBorn
{
	int64_t		tx;
	uint64_t	pos;
} CompactBorn;

typedef struct Compactor
{
	ShapeLogArena *arena;
	const ShapeLog *in;
	CompactRecord *records;
	uint64_t	nrecords;
	uint64_t	records_cap;
	CompactKey *keys;
	uint32_t	nkeys;
	uint64_t	keys_cap;
	uint32_t   *slots;			/* open addressing: key index + 1, 0 free */
	uint32_t	slots_mask;
	char	   *key_text;
	size_t		key_text_len;
	size_t		key_text_cap;
	char	   *buf;			/* one record's payload */
	size_t		buf_cap;
	char	   *out_buf;		/* a rewritten record */
	size_t		out_cap;
	size_t		out_len;
	bool		no_memory;
	LogOffset	last_out;		/* the offset of the last record written */
	uint64_t   *group_ends;		/* end positions of the groups of chunks */
	LogOffset  *group_end_offsets;	/* ... their output chunk ends; tx 0: the
									 * offset of the chunk's last message */
	uint64_t   *input_end_ops;	/* the op of the input chunk end at each */
	uint32_t	ngroups;
	CompactBorn *born;			/* the input's tombstones, by born.tx */
	uint64_t	nborn;
	uint32_t   *updated_keys;	/* keys with updates not yet settled */
	uint32_t	nupdated;
	uint64_t	updated_cap;
	uint64_t	work_bytes;		/* what the arrays above took */
	uint64_t	work_limit;		/* ... at most */
	bool		too_large;		/* refused past work_limit */
	int			read_error;		/* errno of an input file that could not be read */
} Compactor;

/* ------------------------------------------------------------- helpers */

/*
 * Counts `more` bytes of working memory against the limit; false (and
 * too_large set) past it.
 */
static bool
cmp_charge(Compactor *c, uint64_t more)
{
	if (c->work_bytes + more > c->work_limit)
	{
		c->too_large = true;
		return false;
	}
	c->work_bytes += more;
	return true;
}

static bool
cmp_reserve(Compactor *c, char **buf, size_t *cap, size_t need)
{
	char	   *grown;
	size_t		n;

	if (need <= *cap)
		return true;
	n = *cap ? *cap : 256;
	while (n < need)
		n *= 2;
	if (!cmp_charge(c, n - *cap))
		return false;
	grown = realloc(*buf, n);
	if (grown == NULL)
		return false;
	*buf = grown;
	*cap = n;
	return true;
}

/* Doubles an array of `size`-byte elements (to `first` when empty). */
static bool
cmp_grow_array(Compactor *c, void **array, uint64_t *cap, size_t size, uint64_t first)
{
	uint64_t	n = *cap ? *cap * 2 : first;
	void	   *grown;

	if (!cmp_charge(c, size * (n - *cap)))
		return false;
	grown = realloc(*array, size * n);
	if (grown == NULL)
		return false;
	*array = grown;
	*cap = n;
	return true;
}

static bool
cmp_out(Compactor *c, const char *s, size_t n)
{
	if (!cmp_reserve(c, &c->out_buf, &c->out_cap, c->out_len + n))
	{
		c->no_memory = true;
		return false;
	}
	memcpy(c->out_buf + c->out_len, s, n);
	c->out_len += n;
	return true;
}

/* The end of the JSON string that starts at p ('"'), or NULL. */
static const char *
cmp_string_end(const char *p, const char *end)
{
	if (p >= end || *p != '"')
		return NULL;
	for (p++; p < end; p++)
	{
		if (*p == '\\')
			p++;
		else if (*p == '"')
			return p + 1;
	}
	return NULL;
}

static bool
cmp_skip(const char **p, const char *end, const char *lit)
{
	size_t		n = strlen(lit);

	if ((size_t) (end - *p) < n || memcmp(*p, lit, n) != 0)
		return false;
	*p += n;
	return true;
}

/*
 * Parses a flat object of string or null values at *p ('{'), calling
 * `pair` for each member (unless NULL); *p moves past it.
 */
static bool
cmp_object(const char **p, const char *end,
		   bool (*pair) (void *arg, const char *name, size_t nlen, const char *value, size_t vlen),
		   void *arg)
{
	const char *q = *p;

	if (!cmp_skip(&q, end, "{"))
		return false;
	if (cmp_skip(&q, end, "}"))
	{
		*p = q;
		return true;
	}
	for (;;)
	{
		const char *name = q;
		const char *name_end = cmp_string_end(q, end);
		const char *value;
		const char *value_end;

		if (name_end == NULL)
			return false;
		q = name_end;
		if (!cmp_skip(&q, end, ":"))
			return false;
		value = q;
		if (cmp_skip(&q, end, "null"))
			value_end = q;
		else if ((value_end = cmp_string_end(q, end)) == NULL)
			return false;
		q = value_end;
		if (pair != NULL && !pair(arg, name, (size_t) (name_end - name), value,
								  (size_t) (value_end - value)))
			return false;
		if (cmp_skip(&q, end, "}"))
			break;
		if (!cmp_skip(&q, end, ","))
			return false;
	}
	*p = q;
	return true;
}

/* The parts of a change message. */
typedef struct CompactMessage
{
	const char *key;			/* the key's JSON string */
	size_t		key_len;
	const char *value;			/* the value object */
	const char *value_end;
	const char *old_value;		/* NULL when absent */
	const char *old_value_end;
	const char *headers;		/* the headers object */
	const char *headers_end;
	CompactOp	op;
} CompactMessage;

static bool
cmp_parse(const char *msg, size_t len, CompactMessage *m)
{
	const char *end = msg + len;
	const char *p = msg;

	memset(m, 0, sizeof(*m));
	if (len < 2 || msg[len - 1] != '}' || !cmp_skip(&p, end, LOG_RECORD_KEY))
		return false;
	m->key = p;
	if ((p = cmp_string_end(p, end)) == NULL)
		return false;
	m->key_len = (size_t) (p - m->key);
	if (!cmp_skip(&p, end, LOG_RECORD_VALUE))
		return false;
	m->value = p;
	if (!cmp_object(&p, end, NULL, NULL))
		return false;
	m->value_end = p;
	if (cmp_skip(&p, end, LOG_RECORD_OLD_VALUE))
	{
		m->old_value = p;
		if (!cmp_object(&p, end, NULL, NULL))
			return false;
		m->old_value_end = p;
	}
	if (!cmp_skip(&p, end, LOG_RECORD_HEADERS))
		return false;
	m->headers = p;
	m->headers_end = end - 1;	/* the message's own closing brace follows */
	if (cmp_skip(&p, end, LOG_RECORD_OPERATION(LOG_RECORD_INSERT)))
		m->op = OP_INSERT;
	else if (cmp_skip(&p, end, LOG_RECORD_OPERATION(LOG_RECORD_UPDATE)))
		m->op = OP_UPDATE;
	else if (cmp_skip(&p, end, LOG_RECORD_OPERATION(LOG_RECORD_DELETE)))
		m->op = OP_DELETE;
	else
		return false;
	return m->headers_end > m->headers && *(m->headers_end - 1) == '}';
}

/* Doubles the key slots (keeping them under half full). */
static bool
cmp_grow_slots(Compactor *c)
{
	uint32_t	n = c->slots_mask ? (c->slots_mask + 1) * 2 : 2048;
	uint32_t   *slots;

	if (!cmp_charge(c, sizeof(uint32_t) * (n - (c->slots_mask ? c->slots_mask + 1 : 0))))
		return false;
	slots = calloc(n, sizeof(uint32_t));
	if (slots == NULL)
		return false;
	for (uint32_t k = 0; k < c->nkeys; k++)
	{
		uint32_t	i = (uint32_t) c->keys[k].hash & (n - 1);

		while (slots[i] != 0)
			i = (i + 1) & (n - 1);
		slots[i] = k + 1;
	}
	free(c->slots);
	c->slots = slots;
	c->slots_mask = n - 1;
	return true;
}

/* The index of a key, added if new; UINT32_MAX when out of memory. */
static uint32_t
cmp_key(Compactor *c, const char *text, size_t len)
{
	uint64_t	h = fnv_hash_bytes(FNV_HASH_START, text, len);
	uint32_t	i;
	CompactKey *k;

	if ((c->nkeys + 1) * 2 > c->slots_mask + 1 && !cmp_grow_slots(c))
		return UINT32_MAX;
	i = (uint32_t) h & c->slots_mask;

	for (;; i = (i + 1) & c->slots_mask)
	{
		uint32_t	s = c->slots[i];

		if (s == 0)
			break;
		k = &c->keys[s - 1];
		if (k->hash == h && k->text_len == len &&
			memcmp(c->key_text + k->text_off, text, len) == 0)
			return s - 1;
	}
	if (c->nkeys == c->keys_cap &&
		!cmp_grow_array(c, (void **) &c->keys, &c->keys_cap, sizeof(CompactKey), 1024))
		return UINT32_MAX;
	if (!cmp_reserve(c, &c->key_text, &c->key_text_cap, c->key_text_len + len))
		return UINT32_MAX;
	k = &c->keys[c->nkeys];
	memset(k, 0, sizeof(*k));
	k->hash = h;
	k->text_off = c->key_text_len;
	k->text_len = len;
	k->life_insert = -1;
	k->life_last = -1;
	memcpy(c->key_text + c->key_text_len, text, len);
	c->key_text_len += len;
	c->slots[i] = ++c->nkeys;
	return c->nkeys - 1;
}

/*
 * Copies [pos, pos + n) of the input, from memory or, below its memory
 * start, from its file (shape_log_read.c); false with read_error set when
 * the file cannot be read.
 */
static bool
cmp_copy_in(Compactor *c, uint64_t pos, void *dst, size_t n)
{
	if (slog_copy_out(c->arena, c->in, pos, dst, n))
		return true;
	c->read_error = errno ? errno : EIO;
	return false;
}

static bool
cmp_header(Compactor *c, uint64_t pos, SlogRecordHeader *hdr)
{
	return cmp_copy_in(c, pos, hdr, sizeof(*hdr));
}

/* Reads a record's payload into c->buf. */
static SlogCompactResult
cmp_read(Compactor *c, const CompactRecord *r)
{
	if (!cmp_reserve(c, &c->buf, &c->buf_cap, r->len + 1))
		return SLOG_COMPACT_NO_MEMORY;
	if (!cmp_copy_in(c, r->pos + sizeof(SlogRecordHeader), c->buf, r->len))
		return SLOG_COMPACT_READ_FAILED;
	c->buf[r->len] = '\0';
	return SLOG_COMPACT_OK;
}

/* The first `tag` in [p, end), or NULL. */
static const char *
cmp_find(const char *p, const char *end, const char *tag)
{
	size_t		n = strlen(tag);

	for (; p + n <= end; p++)
		if (memcmp(p, tag, n) == 0)
			return p;
	return NULL;
}

/*
 * Appends the tail [h, h_end) of a headers object to c->out, marked last
 * when `mark` (and it is not already).
 */
static bool
cmp_out_headers_marked(Compactor *c, const char *h, const char *h_end, bool mark)
{
	static const char last[] = LOG_RECORD_LAST "}";

	if (!mark ||
		((size_t) (h_end - h) >= sizeof(last) - 1 &&
		 memcmp(h_end - (sizeof(last) - 1), last, sizeof(last) - 1) == 0))
		return cmp_out(c, h, (size_t) (h_end - h));
	return cmp_out(c, h, (size_t) (h_end - h) - 1) && cmp_out(c, last, sizeof(last) - 1);
}

/*
 * Appends the headers object [h, h_end) to c->out, marked last when it
 * is a replicated change's (snapshot rows have no transaction).
 */
static bool
cmp_out_headers_last(Compactor *c, const char *h, const char *h_end)
{
	return cmp_out_headers_marked(c, h, h_end, cmp_find(h, h_end, LOG_RECORD_LSN_NAME) != NULL);
}

/* ---------------------------------------------------------- merging */

static void
cmp_merge_free(CompactMerge *m)
{
	if (m == NULL)
		return;
	for (int i = 0; i < m->nvalues; i++)
	{
		free(m->values[i].name);
		free(m->values[i].value);
	}
	free(m->values);
	free(m->txids);
	free(m);
}

static char *
cmp_dup(const char *s, size_t n)
{
	char	   *d = malloc(n ? n : 1);

	if (d != NULL)
		memcpy(d, s, n);
	return d;
}

/* Sets name to value in a pair list. */
static bool
cmp_set_pair(CompactPair **pairs, int *n, const char *name, size_t nlen,
			 const char *value, size_t vlen)
{
	CompactPair *grown;
	char	   *v;

	for (int i = 0; i < *n; i++)
		if ((*pairs)[i].name_len == nlen && memcmp((*pairs)[i].name, name, nlen) == 0)
		{
			if ((v = cmp_dup(value, vlen)) == NULL)
				return false;
			free((*pairs)[i].value);
			(*pairs)[i].value = v;
			(*pairs)[i].value_len = vlen;
			return true;
		}
	grown = realloc(*pairs, sizeof(CompactPair) * (*n + 1));
	if (grown == NULL)
		return false;
	*pairs = grown;
	grown[*n].name = cmp_dup(name, nlen);
	grown[*n].name_len = nlen;
	grown[*n].value = cmp_dup(value, vlen);
	grown[*n].value_len = vlen;
	if (grown[*n].name == NULL || grown[*n].value == NULL)
	{
		free(grown[*n].name);
		free(grown[*n].value);
		return false;
	}
	(*n)++;
	return true;
}

static bool
cmp_merge_value(void *arg, const char *name, size_t nlen, const char *value, size_t vlen)
{
	CompactMerge *m = arg;

	return cmp_set_pair(&m->values, &m->nvalues, name, nlen, value, vlen);
}

/* The txids array of a headers object, added to the merge's. */
static bool
cmp_merge_txids(CompactMerge *m, const char *h, const char *h_end)
{
	static const char tag[] = LOG_RECORD_TXIDS_NAME;
	const char *p = cmp_find(h, h_end, tag);

	if (p == NULL)
		return true;			/* none */
	for (p += sizeof(tag) - 1; p < h_end && *p != ']';)
	{
		uint64_t	x = 0;
		bool		seen = false;
		uint64_t   *grown;

		if (*p < '0' || *p > '9')
		{
			p++;
			continue;
		}
		while (p < h_end && *p >= '0' && *p <= '9')
			x = x * 10 + (uint64_t) (*p++ - '0');
		for (int i = 0; i < m->ntxids; i++)
			seen = seen || m->txids[i] == x;
		if (seen)
			continue;
		if (m->txids == NULL)
		{
			grown = malloc(sizeof(uint64_t) * SLOG_COMPACT_MAX_TXIDS);
			if (grown == NULL)
				return false;
			m->txids = grown;
		}
		if (m->ntxids == SLOG_COMPACT_MAX_TXIDS)
		{
			/* the newest stay: a client awaits a txid it wrote just now */
			memmove(m->txids, m->txids + 1, sizeof(uint64_t) * (SLOG_COMPACT_MAX_TXIDS - 1));
			m->ntxids--;
		}
		m->txids[m->ntxids++] = x;
	}
	return true;
}

static bool
cmp_out_pairs(Compactor *c, const CompactPair *pairs, int n)
{
	if (!cmp_out(c, "{", 1))
		return false;
	for (int i = 0; i < n; i++)
		if ((i > 0 && !cmp_out(c, ",", 1)) ||
			!cmp_out(c, pairs[i].name, pairs[i].name_len) || !cmp_out(c, ":", 1) ||
			!cmp_out(c, pairs[i].value, pairs[i].value_len))
			return false;
	return cmp_out(c, "}", 1);
}

/*
 * Writes the merged update into c->out_buf: the last update's key and
 * headers (txids replaced by all of the group's, marked last) and the
 * merged value.
 */
static bool
cmp_out_merged(Compactor *c, const CompactMessage *last, const CompactMerge *m,
			   const LogOffset *born)
{
	static const char tag[] = LOG_RECORD_TXIDS_NAME;
	const char *h = last->headers;
	const char *t;
	/* decided on the whole headers: the tail after txids has no lsn */
	bool		replicated = cmp_find(h, last->headers_end, LOG_RECORD_LSN_NAME) != NULL;

	c->out_len = 0;
	if (born != NULL)
	{
		char		prefix[SLOG_TOMBSTONE_PREFIX];

		memcpy(prefix, &born->tx, sizeof(int64_t));
		memcpy(prefix + sizeof(int64_t), &born->op, sizeof(uint64_t));
		if (!cmp_out(c, prefix, sizeof(prefix)))
			return false;
	}
	if (!cmp_out(c, LOG_RECORD_KEY, sizeof(LOG_RECORD_KEY) - 1) ||
		!cmp_out(c, last->key, last->key_len) ||
		!cmp_out(c, LOG_RECORD_VALUE, sizeof(LOG_RECORD_VALUE) - 1) ||
		!cmp_out_pairs(c, m->values, m->nvalues))
		return false;
	if (!cmp_out(c, LOG_RECORD_HEADERS, sizeof(LOG_RECORD_HEADERS) - 1))
		return false;
	t = cmp_find(h, last->headers_end, tag);
	if (t != NULL)
	{
		const char *close = memchr(t, ']', (size_t) (last->headers_end - t));
		char		num[24];

		if (close == NULL)
			return false;
		if (!cmp_out(c, h, (size_t) (t - h) + sizeof(tag) - 1))
			return false;
		for (int i = 0; i < m->ntxids; i++)
		{
			int			n = 0;
			uint64_t	x = m->txids[i];
			char		rev[24];

			do
				rev[n++] = (char) ('0' + x % 10);
			while ((x /= 10) != 0);
			for (int j = 0; j < n; j++)
				num[j] = rev[n - 1 - j];
			if ((i > 0 && !cmp_out(c, ",", 1)) || !cmp_out(c, num, (size_t) n))
				return false;
		}
		h = close;
	}
	return cmp_out_headers_marked(c, h, last->headers_end, replicated) && cmp_out(c, "}", 1);
}

/* ------------------------------------------------------------ passes */

/*
 * Settles the records of a key's life: its insert is kept or dropped, its
 * updates are kept (one) or merged (several, at the last one's offset);
 * `filtered` makes them tombstone records, for the clients inside the life
 * only.
 */
static void
cmp_settle_life(Compactor *c, CompactKey *k, bool keep_insert, bool filtered)
{
	LogOffset	born = k->life_insert >= 0 ? c->records[k->life_insert].offset :
		LOG_OFFSET_BEFORE_ALL;
	bool		last = true;

	for (int64_t i = k->life_last; i >= 0; i = c->records[i].prev_in_life)
	{
		CompactRecord *r = &c->records[i];

		if (r->op == OP_INSERT)
			r->fate = keep_insert ? FATE_KEEP : FATE_DROP;
		else
		{
			r->fate = k->life_updates > 1 ? (last ? FATE_MERGE_LAST : FATE_MERGE) : FATE_KEEP;
			r->filtered = filtered;
			r->born = born;
			last = false;
		}
	}
	k->life_last = -1;
	k->life_updates = 0;
}

/*
 * Whether a tombstone after input position `pos` began its life in
 * transaction `tx`: that transaction's insert, since dropped, comes after
 * `pos` in the history clients saw.
 */
static bool
cmp_life_of_tx_spans(const Compactor *c, int64_t tx, uint64_t pos)
{
	uint64_t	lo = 0,
				hi = c->nborn;

	while (lo < hi)
	{
		uint64_t	mid = lo + (hi - lo) / 2;

		if (c->born[mid].tx < tx)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (; lo < c->nborn && c->born[lo].tx == tx; lo++)
		if (c->born[lo].pos >= pos)
			return true;
	return false;
}

/*
 * The end of group `g`, after record `last`, before a record of
 * transaction `next_tx` (when `has_next`): where its output chunk ends
 * (see "Chunk ends" in the header).  At the end of a transaction the
 * chunk ends at an offset no client held, and updates merge across it;
 * elsewhere it ends at its last message, and the updates before it are
 * settled, so that none merges across it.
 */
static void
cmp_end_group(Compactor *c, uint32_t g, const CompactRecord *last, bool has_next,
			  int64_t next_tx)
{
	/*
	 * A transaction whose later records an earlier compaction dropped (the
	 * insert of a life whose tombstone comes later) has not ended here: a
	 * client at the made offset would count as inside that life
	 * (slog_cursor_skip).
	 */
	if (last != NULL && last->offset.tx > 0 && has_next && next_tx != last->offset.tx &&
		!cmp_life_of_tx_spans(c, last->offset.tx, c->group_ends[g]))
	{
		uint64_t	in_op = c->input_end_ops[g];

		c->group_end_offsets[g].tx = last->offset.tx;
		c->group_end_offsets[g].op = in_op > SLOG_COMPACT_END_OP && in_op != LOG_OFFSET_OP_INF ?
			in_op + 1 : SLOG_COMPACT_END_OP + 1;
		return;
	}
	c->group_end_offsets[g] = (LogOffset) {0, 0};
	for (uint32_t i = 0; i < c->nupdated; i++)
	{
		CompactKey *k = &c->keys[c->updated_keys[i]];

		if (k->life_open && k->life_updates > 0 && !k->verbatim)
			cmp_settle_life(c, k, true, false);
		k->listed = false;
	}
	c->nupdated = 0;
}

static int
cmp_born_cmp(const void *a, const void *b)
{
	const CompactBorn *x = a;
	const CompactBorn *y = b;

	return x->tx < y->tx ? -1 : x->tx > y->tx;
}

/* The input's tombstones: where each is, and the transaction of its life's insert. */
static SlogCompactResult
cmp_collect_born(Compactor *c, uint64_t closed_end)
{
	uint64_t	cap = 0;

	for (uint64_t pos = 0; pos < closed_end;)
	{
		SlogRecordHeader hdr;

		if (!cmp_header(c, pos, &hdr))
			return SLOG_COMPACT_READ_FAILED;
		if (hdr.kind == SLOG_RECORD_TOMBSTONE && hdr.len >= SLOG_TOMBSTONE_PREFIX)
		{
			if (c->nborn == cap &&
				!cmp_grow_array(c, (void **) &c->born, &cap, sizeof(CompactBorn), 256))
				return SLOG_COMPACT_NO_MEMORY;
			if (!cmp_copy_in(c, pos + sizeof(hdr), &c->born[c->nborn].tx, sizeof(int64_t)))
				return SLOG_COMPACT_READ_FAILED;
			c->born[c->nborn].pos = pos;
			c->nborn++;
		}
		pos += slog_record_span(hdr.len);
	}
	if (c->nborn > 1)
		qsort(c->born, c->nborn, sizeof(CompactBorn), cmp_born_cmp);
	return SLOG_COMPACT_OK;
}

/*
 * Pass 1: every record of the closed chunks, its key and its fate; the
 * output chunks end at c->group_ends[].  A sequence this server never
 * writes for a key (an insert of a present key: a table whose rows share a
 * key; an update or delete of an absent one) makes that key's records stay
 * as they are.
 */
static SlogCompactResult
cmp_classify(Compactor *c, uint64_t closed_end)
{
	uint64_t	pos = 0;
	uint64_t	n = 0;
	uint32_t	group = 0;
	uint64_t	group_first = 0;	/* its first record */
	bool		any_verbatim = false;
	SlogCompactResult res;

	for (pos = 0; pos < closed_end; n++)
	{
		SlogRecordHeader hdr;
		CompactRecord *r;
		CompactMessage m;
		const char *json;
		size_t		json_len;
		CompactKey *k;

		if (!cmp_header(c, pos, &hdr))
			return SLOG_COMPACT_READ_FAILED;
		while (group < c->ngroups && pos >= c->group_ends[group])
		{
			cmp_end_group(c, group, n > 0 ? &c->records[n - 1] : NULL, true, hdr.tx);
			group++;
			group_first = n;
		}
		if (n == c->records_cap &&
			!cmp_grow_array(c, (void **) &c->records, &c->records_cap, sizeof(CompactRecord), 4096))
			return SLOG_COMPACT_NO_MEMORY;
		r = &c->records[n];
		c->nrecords = n + 1;	/* what cmp_settle_life may walk */
		memset(r, 0, sizeof(*r));
		r->pos = pos;
		r->len = hdr.len;
		r->kind = (uint8_t) hdr.kind;
		r->offset.tx = hdr.tx;
		r->offset.op = hdr.op;
		r->prev_in_life = -1;
		pos += slog_record_span(hdr.len);
		if (hdr.kind == SLOG_RECORD_CONTROL)
		{
			r->op = OP_CONTROL;
			r->fate = FATE_KEEP;
			continue;
		}
		if ((res = cmp_read(c, r)) != SLOG_COMPACT_OK)
			return res;
		json = c->buf;
		json_len = r->len;
		if (hdr.kind == SLOG_RECORD_TOMBSTONE)
		{
			if (r->len < SLOG_TOMBSTONE_PREFIX)
				return SLOG_COMPACT_UNREADABLE;
			memcpy(&r->born.tx, c->buf, sizeof(int64_t));
			memcpy(&r->born.op, c->buf + sizeof(int64_t), sizeof(uint64_t));
			json += SLOG_TOMBSTONE_PREFIX;
			json_len -= SLOG_TOMBSTONE_PREFIX;
		}
		else if (hdr.kind != SLOG_RECORD_CHANGE)
			return SLOG_COMPACT_UNREADABLE;
		if (!cmp_parse(json, json_len, &m))
			return SLOG_COMPACT_UNREADABLE;
		if ((r->key = cmp_key(c, m.key, m.key_len)) == UINT32_MAX)
			return SLOG_COMPACT_NO_MEMORY;
		k = &c->keys[r->key];
		r->op = hdr.kind == SLOG_RECORD_TOMBSTONE ? OP_TOMBSTONE : (uint8_t) m.op;
		if (hdr.kind == SLOG_RECORD_TOMBSTONE)
			r->fate = FATE_KEEP_TOMBSTONE;	/* of an earlier compaction: as it is */
		if ((hdr.kind == SLOG_RECORD_TOMBSTONE && k->life_open) ||
			(m.op == OP_INSERT && k->life_open) ||
			(m.op != OP_INSERT && hdr.kind == SLOG_RECORD_CHANGE && !k->life_open))
		{
			k->verbatim = any_verbatim = true;
			k->life_open = m.op != OP_DELETE;
			k->life_insert = -1;
			k->life_last = -1;
			k->life_updates = 0;
			continue;
		}
		if (hdr.kind == SLOG_RECORD_TOMBSTONE)
			continue;
		switch (m.op)
		{
			case OP_INSERT:
				k->life_open = true;
				k->life_insert = k->life_last = (int64_t) n;
				k->life_updates = 0;
				break;
			case OP_UPDATE:
				r->prev_in_life = k->life_last;
				k->life_last = (int64_t) n;
				k->life_updates++;
				if (!k->listed)
				{
					if (c->nupdated == c->updated_cap &&
						!cmp_grow_array(c, (void **) &c->updated_keys, &c->updated_cap,
										sizeof(uint32_t), 1024))
						return SLOG_COMPACT_NO_MEMORY;
					c->updated_keys[c->nupdated++] = r->key;
					k->listed = true;
				}
				break;
			case OP_DELETE:
				if (k->life_insert >= (int64_t) group_first)
				{
					/*
					 * A life inside one chunk: clients entering the chunk never
					 * see the row; those inside the life get its merged update
					 * and its delete (tombstones).
					 */
					r->born = c->records[k->life_insert].offset;
					cmp_settle_life(c, k, false, true);
					r->fate = FATE_TOMBSTONE;
				}
				else
				{
					/* begun in an earlier chunk: every client here has the row */
					cmp_settle_life(c, k, true, false);
					r->fate = FATE_KEEP;
				}
				k->life_open = false;
				k->life_insert = -1;
				break;
			default:
				return SLOG_COMPACT_UNREADABLE;
		}
	}
	c->nrecords = n;
	while (group < c->ngroups)
	{
		/* the last group ends the closed part: the open part follows */
		SlogPublished pub;
		SlogRecordHeader next;

		slog_read_published(c->in, &pub);
		if (closed_end < pub.data_end && !cmp_header(c, closed_end, &next))
			return SLOG_COMPACT_READ_FAILED;
		cmp_end_group(c, group, n > 0 ? &c->records[n - 1] : NULL,
					  closed_end < pub.data_end, closed_end < pub.data_end ? next.tx : 0);
		group++;
	}
	for (uint32_t i = 0; i < c->nkeys; i++)
		if (c->keys[i].life_open && c->keys[i].life_last >= 0)
			cmp_settle_life(c, &c->keys[i], true, false);
	if (any_verbatim)
		for (uint64_t i = 0; i < n; i++)
		{
			CompactRecord *r = &c->records[i];

			if (r->op != OP_CONTROL && c->keys[r->key].verbatim && r->fate != FATE_KEEP_TOMBSTONE)
			{
				r->fate = FATE_KEEP;
				r->filtered = false;
			}
		}
	return SLOG_COMPACT_OK;
}

static SlogCompactResult
cmp_append(Compactor *c, ShapeLog *out, LogOffset offset, uint32_t kind, const char *data,
		   size_t len)
{
	SlogResult	res = slog_append(c->arena, out, offset, kind, data, (uint32_t) len);

	c->last_out = offset;
	return res == SLOG_OK ? SLOG_COMPACT_OK : SLOG_COMPACT_FULL;
}

/* Pass 2 for one record. */
static SlogCompactResult
cmp_emit(Compactor *c, ShapeLog *out, CompactRecord *r, SlogCompactStats *stats)
{
	CompactMessage m;
	CompactKey *k;
	SlogCompactResult res;

	if (r->fate == FATE_DROP)
		return SLOG_COMPACT_OK;
	if ((res = cmp_read(c, r)) != SLOG_COMPACT_OK)
		return res;
	if (r->fate == FATE_KEEP_TOMBSTONE ||
		(r->fate == FATE_KEEP && r->kind == SLOG_RECORD_CONTROL))
	{
		stats->records_out++;
		stats->tombstones += r->fate == FATE_KEEP_TOMBSTONE;
		return cmp_append(c, out, r->offset, r->kind, c->buf, r->len);
	}
	if (!cmp_parse(c->buf, r->len, &m))
		return SLOG_COMPACT_UNREADABLE;
	k = &c->keys[r->key];
	c->out_len = 0;
	if (r->filtered || r->fate == FATE_TOMBSTONE)
	{
		char		prefix[SLOG_TOMBSTONE_PREFIX];

		memcpy(prefix, &r->born.tx, sizeof(int64_t));
		memcpy(prefix + sizeof(int64_t), &r->born.op, sizeof(uint64_t));
		if (!cmp_out(c, prefix, sizeof(prefix)))
			return SLOG_COMPACT_NO_MEMORY;
	}
	switch (r->fate)
	{
		case FATE_KEEP:
			if (!cmp_out(c, c->buf, (size_t) (m.headers - c->buf)) ||
				!cmp_out_headers_last(c, m.headers, m.headers_end) || !cmp_out(c, "}", 1))
				return SLOG_COMPACT_NO_MEMORY;
			stats->records_out++;
			stats->tombstones += r->filtered;
			return cmp_append(c, out, r->offset,
							  r->filtered ? SLOG_RECORD_TOMBSTONE : SLOG_RECORD_CHANGE,
							  c->out_buf, c->out_len);
		case FATE_TOMBSTONE:
			{
				if (!cmp_out(c, c->buf, (size_t) (m.headers - c->buf)) ||
					!cmp_out_headers_last(c, m.headers, m.headers_end) || !cmp_out(c, "}", 1))
					return SLOG_COMPACT_NO_MEMORY;
				stats->records_out++;
				stats->tombstones++;
				return cmp_append(c, out, r->offset, SLOG_RECORD_TOMBSTONE, c->out_buf,
								  c->out_len);
			}
		case FATE_MERGE:
		case FATE_MERGE_LAST:
			if (k->merge == NULL && (k->merge = calloc(1, sizeof(CompactMerge))) == NULL)
				return SLOG_COMPACT_NO_MEMORY;
			{
				const char *p = m.value;

				if (!cmp_object(&p, m.value_end, cmp_merge_value, k->merge))
					return SLOG_COMPACT_NO_MEMORY;
				if (!cmp_merge_txids(k->merge, m.headers, m.headers_end))
					return SLOG_COMPACT_NO_MEMORY;
			}
			if (r->fate == FATE_MERGE)
				return SLOG_COMPACT_OK;
			if (!cmp_out_merged(c, &m, k->merge, r->filtered ? &r->born : NULL))
				return SLOG_COMPACT_NO_MEMORY;
			cmp_merge_free(k->merge);
			k->merge = NULL;
			stats->records_out++;
			stats->tombstones += r->filtered;
			res = cmp_append(c, out, r->offset,
							 r->filtered ? SLOG_RECORD_TOMBSTONE : SLOG_RECORD_CHANGE,
							 c->out_buf, c->out_len);
			return res;
		default:
			return SLOG_COMPACT_UNREADABLE;
	}
}

SlogCompactResult
slog_compact(ShapeLogArena *arena, const ShapeLog *in, ShapeLog *out,
			 const SlogCompactOptions *options, SlogCompactStats *stats)
{
	uint32_t	chunk_bytes = options->chunk_bytes;
	Compactor	c;
	SlogPublished pub;
	SlogCompactResult res = SLOG_COMPACT_OK;
	uint64_t	closed_end = 0;
	uint64_t	next = 0;
	uint64_t	group_bytes = 0;

	memset(stats, 0, sizeof(*stats));
	memset(&c, 0, sizeof(c));
	c.arena = arena;
	c.in = in;
	c.work_limit = options->max_work_bytes;
	slog_read_published(in, &pub);
	stats->bytes_in = pub.data_end;
	if (pub.chunk_count > 0)
	{
		SlogChunk	last;

		slog_chunk_read(arena, in, pub.chunk_count - 1, &last);
		closed_end = last.end_pos;
	}

	/* the groups: runs of input chunks of at least chunk_bytes (the last ends the closed part) */
	if (!cmp_charge(&c, (sizeof(uint64_t) * 2 + sizeof(LogOffset)) *
					(pub.chunk_count ? pub.chunk_count : 1)))
		res = SLOG_COMPACT_NO_MEMORY;
	c.group_ends = malloc(sizeof(uint64_t) * (pub.chunk_count ? pub.chunk_count : 1));
	c.group_end_offsets = malloc(sizeof(LogOffset) * (pub.chunk_count ? pub.chunk_count : 1));
	c.input_end_ops = malloc(sizeof(uint64_t) * (pub.chunk_count ? pub.chunk_count : 1));
	if (c.group_ends == NULL || c.group_end_offsets == NULL || c.input_end_ops == NULL)
		res = SLOG_COMPACT_NO_MEMORY;
	for (uint32_t ch = 0; res == SLOG_COMPACT_OK && ch < pub.chunk_count; ch++)
	{
		SlogChunk	chunk;

		slog_chunk_read(arena, in, ch, &chunk);
		group_bytes += chunk.end_pos - chunk.start_pos;
		if (group_bytes >= chunk_bytes || ch + 1 == pub.chunk_count)
		{
			c.input_end_ops[c.ngroups] = chunk.end_op;
			c.group_ends[c.ngroups++] = chunk.end_pos;
			group_bytes = 0;
		}
	}

	if (res == SLOG_COMPACT_OK)
		res = cmp_collect_born(&c, closed_end);
	if (res == SLOG_COMPACT_OK)
		res = cmp_classify(&c, closed_end);
	stats->records_in = c.nrecords;

	/* pass 2, group by group: a chunk each, ending at its last message */
	for (uint32_t g = 0; res == SLOG_COMPACT_OK && g < c.ngroups; g++)
	{
		while (res == SLOG_COMPACT_OK && next < c.nrecords && c.records[next].pos < c.group_ends[g])
			res = cmp_emit(&c, out, &c.records[next++], stats);
		if (res == SLOG_COMPACT_OK && out->open_chunk_bytes > 0)
		{
			if (slog_close_chunk(arena, out, c.group_end_offsets[g].tx > 0 ?
								 c.group_end_offsets[g] : c.last_out) != SLOG_OK)
				res = SLOG_COMPACT_FULL;
			else if (options->chunk_closed != NULL && !options->chunk_closed(options->arg, out))
				res = SLOG_COMPACT_STOPPED;
		}
	}

	/* the open chunk, as it is */
	for (uint64_t pos = closed_end; res == SLOG_COMPACT_OK && pos < pub.data_end;)
	{
		SlogRecordHeader hdr;
		CompactRecord r;

		if (!cmp_header(&c, pos, &hdr))
		{
			res = SLOG_COMPACT_READ_FAILED;
			break;
		}
		r.pos = pos;
		r.len = hdr.len;
		res = cmp_read(&c, &r);
		if (res == SLOG_COMPACT_OK)
			res = cmp_append(&c, out, (LogOffset) {hdr.tx, hdr.op}, hdr.kind, c.buf, hdr.len);
		pos += slog_record_span(hdr.len);
	}

	for (uint32_t i = 0; i < c.nkeys; i++)
		cmp_merge_free(c.keys[i].merge);
	free(c.records);
	free(c.group_ends);
	free(c.group_end_offsets);
	free(c.input_end_ops);
	free(c.updated_keys);
	free(c.born);
	free(c.slots);
	free(c.keys);
	free(c.key_text);
	free(c.buf);
	free(c.out_buf);
	if (res == SLOG_COMPACT_OK && c.no_memory)
		res = SLOG_COMPACT_NO_MEMORY;
	if (res == SLOG_COMPACT_NO_MEMORY && c.too_large)
		res = SLOG_COMPACT_TOO_LARGE;
	stats->work_bytes = c.work_bytes;
	stats->read_error = c.read_error;
	if (res != SLOG_COMPACT_OK)
		return res;
	stats->bytes_out = out->write_pos;
	slog_publish(out, pub.last, pub.flags);
	return SLOG_COMPACT_OK;
}
