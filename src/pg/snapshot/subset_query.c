/*-------------------------------------------------------------------------
 *
 * subset_query.c
 *		Subset snapshots: a client's subset of a shape, read by a snapshot
 *		worker.
 *
 * A subset request asks for the rows of a shape that also match its own
 * where clause, ordered and limited: the official client's requestSnapshot
 * and fetchSnapshot, sent as GET with subset__* parameters or as POST with
 * a JSON body.  The main thread resolves the shape and queues a job
 * (subset_jobs.c); a worker of the snapshot pool takes it here.  All of
 * the client's subset input is read and checked here, in the worker, under
 * PostgreSQL's parsers: the JSON body and params with jsonb's, the where
 * clause exactly as a shape's (shape_where_for_subset: analysed, never
 * spliced, the same functions refused, the same limits), and order_by as
 * the ORDER BY list of "SELECT 1 ORDER BY <order_by>", of which only plain
 * column names with ASC/DESC and NULLS FIRST/LAST are accepted (a sort
 * expression would run a client's code on every row), of types whose
 * ordering is PostgreSQL's own (subset_builtin_ordering).  The where
 * clause and order_by may read only the shape's own columns (unless
 * shape_sync.subset_columns = table), and with queryable_columns only
 * those.
 *
 * The query is the shape's snapshot query (snapshot_scan) with the subset's
 * where clause ANDed in, its ORDER BY, LIMIT and OFFSET, in a REPEATABLE
 * READ, READ ONLY transaction as the shape's role, in a security-restricted
 * operation, within shape_sync.subset_statement_timeout; the columns the
 * subset's clauses read must be the role's to SELECT, as the shape's are.
 * The answer goes into the request's cell (subset_results.c): record 0 is
 * the metadata (the snapshot's xmin, xmax and xip list, a random
 * snapshot_mark, and the WAL insert position read after the snapshot was
 * taken, which is past the commit of every transaction it sees), then one
 * record per row, each carrying the snapshot_mark in its headers.  A
 * failure leaves a refusal in the cell instead (refusal.h: its reason and
 * facts in the cell, its text, if any, as record 0), which the HTTP side
 * renders.  An answer never makes a shape give up its memory: past an
 * eighth of shape_sync.log_memory it fails (400, narrow the subset), and
 * with the memory full it fails to be retried (503).
 *
 * IDENTIFICATION
 *	  src/pg/snapshot/subset_query.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "access/table.h"
#include "access/transam.h"
#include "common/pg_prng.h"
#include "miscadmin.h"
#include "optimizer/optimizer.h"
#include "parser/parser.h"
#include "pgstat.h"
#include "storage/dsm.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/numeric.h"
#include "utils/rel.h"
#include "utils/timestamp.h"
#include "utils/typcache.h"

#include "guc.h"
#include "row_encoder.h"
#include "shape_def_error.h"
#include "shape_role.h"
#include "shape_where.h"
#include "shared_state.h"
#include "log_record.h"
#include "shape_subquery.h"
#include "snapshot_query.h"
#include "subset_query.h"

/* The client's inputs, in the order the definition segment holds them. */
typedef enum SubsetText
{
	SUBSET_SHAPE_WHERE,			/* the shape's folded where tree */
	SUBSET_FINGERPRINT,
	SUBSET_WHERE,
	SUBSET_PARAMS,
	SUBSET_LIMIT,
	SUBSET_OFFSET,
	SUBSET_ORDER_BY,
	SUBSET_BODY,
	SUBSET_MOVE_IN,				/* a move-in's filter tree (no client inputs) */
	SUBSET_HANDLE,				/* the shape's handle, for its rows' tags */
	SUBSET_NTEXTS
} SubsetText;

/* The definition segment: this header, the columns, the texts, the names. */
typedef struct SubsetDefinition
{
	Oid			relid;
	uint32		flags;
	int32		ncolumns;
	int32		nqueryable;
	int32		lens[SUBSET_NTEXTS];	/* -1: absent */
	/* AttrNumber columns[ncolumns], each text and its NUL, each name and its NUL */
} SubsetDefinition;

/* The inputs, read back in the worker. */
typedef struct SubsetInputs
{
	ShapeSpec	spec;
	char	   *texts[SUBSET_NTEXTS];
	char	  **queryable;
	int			nqueryable;
} SubsetInputs;

/* A request checked: what the query adds to the shape's. */
typedef struct SubsetParsed
{
	char	   *where;
	char	  **params;
	int			nparams;
	char	   *order_by;
	int64		limit;			/* -1: none */
	int64		offset;
} SubsetParsed;

/* While checking, which field a failure belongs to, and what to tell. */
static const char *subset_field = NULL;
static const char *subset_message = NULL;	/* NULL: the error's own message */
static uint32 subset_paging = 0;	/* REFUSAL_PAGING_*: what limit, offset
									 * or order_by got wrong */
static bool subset_not_object = false;	/* the POST body is no JSON object */

/* The cell this worker writes (snapshot_worker.c's exit callback finishes it). */
static int	subset_cell = -1;
static uint32 subset_ticket = 0;

/* An answer may take up to this fraction of the log memory (1/8). */
#define SUBSET_ARENA_SHARE		8

static const char order_by_rule[] =
	"order_by must be a list of column names, each optionally followed by ASC or DESC and NULLS FIRST or NULLS LAST";

/* ------------------------------------------------- the definition segment */

dsm_segment *
subset_definition_create(const ShapeSpec *spec, const char *fingerprint,
						 const SubsetRequest *in, const char *handle)
{
	const char *texts[SUBSET_NTEXTS];
	SubsetDefinition *def;
	Size		size = sizeof(SubsetDefinition) + sizeof(AttrNumber) * spec->ncolumns;
	dsm_segment *seg;
	char	   *p;

	texts[SUBSET_SHAPE_WHERE] = spec->where_tree;
	texts[SUBSET_FINGERPRINT] = fingerprint;
	texts[SUBSET_WHERE] = in->where;
	texts[SUBSET_PARAMS] = in->params;
	texts[SUBSET_LIMIT] = in->limit;
	texts[SUBSET_OFFSET] = in->offset;
	texts[SUBSET_ORDER_BY] = in->order_by;
	texts[SUBSET_BODY] = in->body;
	texts[SUBSET_MOVE_IN] = in->move_in_where;
	texts[SUBSET_HANDLE] = in->move_in_handle != NULL ? in->move_in_handle : handle;
	for (int i = 0; i < SUBSET_NTEXTS; i++)
		size += texts[i] ? strlen(texts[i]) + 1 : 0;
	for (int i = 0; i < in->nqueryable; i++)
		size += strlen(in->queryable[i]) + 1;

	seg = dsm_create(size, DSM_CREATE_NULL_IF_MAXSEGMENTS);
	if (seg == NULL)
		return NULL;
	dsm_pin_mapping(seg);
	def = dsm_segment_address(seg);
	def->relid = spec->relid;
	def->flags = spec->flags;
	def->ncolumns = spec->ncolumns;
	def->nqueryable = in->nqueryable;
	p = (char *) (def + 1);
	memcpy(p, spec->columns, sizeof(AttrNumber) * spec->ncolumns);
	p += sizeof(AttrNumber) * spec->ncolumns;
	for (int i = 0; i < SUBSET_NTEXTS; i++)
	{
		def->lens[i] = texts[i] ? (int32) strlen(texts[i]) : -1;
		if (texts[i] != NULL)
		{
			memcpy(p, texts[i], def->lens[i] + 1);
			p += def->lens[i] + 1;
		}
	}
	for (int i = 0; i < in->nqueryable; i++)
	{
		memcpy(p, in->queryable[i], strlen(in->queryable[i]) + 1);
		p += strlen(in->queryable[i]) + 1;
	}
	return seg;
}

static void
subset_read_definition(dsm_handle handle, SubsetInputs *in)
{
	dsm_segment *seg = dsm_attach(handle);
	SubsetDefinition *def;
	const char *p;

	if (seg == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("could not map the definition of a subset query")));
	def = dsm_segment_address(seg);
	memset(in, 0, sizeof(*in));
	in->spec.relid = def->relid;
	in->spec.flags = def->flags;
	in->spec.ncolumns = def->ncolumns;
	in->spec.columns = palloc(sizeof(AttrNumber) * Max(def->ncolumns, 1));
	p = (const char *) (def + 1);
	memcpy(in->spec.columns, p, sizeof(AttrNumber) * def->ncolumns);
	p += sizeof(AttrNumber) * def->ncolumns;
	for (int i = 0; i < SUBSET_NTEXTS; i++)
		if (def->lens[i] >= 0)
		{
			in->texts[i] = pnstrdup(p, def->lens[i]);
			p += def->lens[i] + 1;
		}
	in->nqueryable = def->nqueryable;
	in->queryable = palloc(sizeof(char *) * Max(def->nqueryable, 1));
	for (int i = 0; i < def->nqueryable; i++)
	{
		in->queryable[i] = pstrdup(p);
		p += strlen(p) + 1;
	}
	in->spec.where_tree = in->texts[SUBSET_SHAPE_WHERE];
	dsm_detach(seg);
}

/* ------------------------------------------------------------ the inputs */

/* Raises the client's error of `field`, with `message` as its text. */
static void
subset_invalid(const char *field, const char *message)
{
	subset_field = field;
	subset_message = message;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("invalid subset %s: %s", field, message)));
}

/* A JSON scalar as the text a parameter or a field takes; NULL for null. */
static char *
subset_json_scalar(const JsonbValue *v, const char *field)
{
	switch (v->type)
	{
		case jbvString:
			return pnstrdup(v->val.string.val, v->val.string.len);
		case jbvNumeric:
			return DatumGetCString(DirectFunctionCall1(numeric_out,
													   NumericGetDatum(v->val.numeric)));
		case jbvBool:
			return pstrdup(v->val.boolean ? "true" : "false");
		case jbvNull:
			return NULL;
		default:
			subset_invalid(field, strcmp(field, "params") == 0 ?
						   "params values must be strings, numbers or booleans" :
						   "is invalid");
	}
	return NULL;
}

/* Parses JSON text with jsonb's parser; the error is `field`'s. */
static Jsonb *
subset_parse_json(const char *text, const char *field, const char *message)
{
	Jsonb	   *jb;

	subset_field = field;
	subset_message = message;
	jb = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(text)));
	subset_field = NULL;
	subset_message = NULL;
	return jb;
}

/* params: {"1": value, ...}, binding $1 ... of the subset's where clause. */
static void
subset_read_params(JsonbContainer *object, SubsetParsed *out)
{
	JsonbIterator *it = JsonbIteratorInit(object);
	JsonbValue	v;
	JsonbIteratorToken tok;
	int			pending = 0;	/* the index of the key just read */

	out->nparams = 0;
	out->params = palloc0(sizeof(char *) * SUBSET_MAX_PARAMS);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		if (tok == WJB_KEY)
		{
			char	   *key = pnstrdup(v.val.string.val, v.val.string.len);
			char	   *end;
			long		n = strtol(key, &end, 10);

			if (key[0] < '1' || key[0] > '9' || *end != '\0' || n > SUBSET_MAX_PARAMS)
				subset_invalid("params",
								psprintf("params keys must be parameter numbers from 1 to %d",
										 SUBSET_MAX_PARAMS));
			pending = (int) n;
		}
		else if (tok == WJB_VALUE)
		{
			out->params[pending - 1] = subset_json_scalar(&v, "params");
			if (out->params[pending - 1] == NULL)
				subset_invalid("params",
							   psprintf("Parameter $%d is null; use IS NULL in the where clause instead",
										pending));
			out->nparams = Max(out->nparams, pending);
		}
	}
}

static void
subset_params_text(const char *text, SubsetParsed *out)
{
	Jsonb	   *jb = subset_parse_json(text, "params", "params must be valid JSON");

	if (!JB_ROOT_IS_OBJECT(jb))
		subset_invalid("params", "params must be a JSON object");
	subset_read_params(&jb->root, out);
}

/* A limit or offset, as Electric casts it: a whole number, or "is invalid". */
static bool
subset_integer(const char *text, int64 *out)
{
	const char *p = text;
	char	   *end;

	if (*p == '-' || *p == '+')
		p++;
	if (*p == '\0')
		return false;
	for (const char *q = p; *q; q++)
		if (*q < '0' || *q > '9')
			return false;
	errno = 0;
	*out = strtoll(text, &end, 10);
	return errno == 0 && *end == '\0';
}

/* limit, offset, and order_by when either is given: all their errors at once. */
static void
subset_check_paging(const char *limit, const char *offset, const char *order_by,
					SubsetParsed *out)
{
	uint32		paging = 0;

	out->limit = -1;
	out->offset = 0;
	if (limit != NULL)
	{
		if (!subset_integer(limit, &out->limit))
			paging |= REFUSAL_PAGING_LIMIT_INVALID;
		else if (out->limit <= 0)
			paging |= REFUSAL_PAGING_LIMIT_NOT_POSITIVE;
	}
	if (offset != NULL)
	{
		if (!subset_integer(offset, &out->offset))
			paging |= REFUSAL_PAGING_OFFSET_INVALID;
		else if (out->offset < 0)
			paging |= REFUSAL_PAGING_OFFSET_NEGATIVE;
	}
	if ((limit != NULL || offset != NULL) && (order_by == NULL || order_by[0] == '\0'))
		paging |= REFUSAL_PAGING_NO_ORDER_BY;
	if (paging == 0)
		return;
	subset_paging = paging;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("invalid subset limit, offset or order_by")));
}

/* GET: the subset__* parameters. */
static void
subset_read_query(const SubsetInputs *in, SubsetParsed *out)
{
	subset_check_paging(in->texts[SUBSET_LIMIT], in->texts[SUBSET_OFFSET],
						in->texts[SUBSET_ORDER_BY], out);
	out->where = in->texts[SUBSET_WHERE];
	out->order_by = in->texts[SUBSET_ORDER_BY];
	if (in->texts[SUBSET_PARAMS] != NULL)
		subset_params_text(in->texts[SUBSET_PARAMS], out);
}

/* A field of the POST body as text; NULL when absent or null. */
static char *
subset_body_field(JsonbContainer *object, const char *name)
{
	JsonbValue	v;

	if (getKeyJsonValueFromContainer(object, name, strlen(name), &v) == NULL)
		return NULL;
	return subset_json_scalar(&v, name);
}

/* POST: the JSON body's where, params, limit, offset and order_by. */
static void
subset_read_body(const char *body, SubsetParsed *out)
{
	Jsonb	   *jb;
	JsonbValue	params;
	char	   *limit;
	char	   *offset;

	subset_field = "body";
	jb = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(body)));
	subset_field = NULL;
	if (!JB_ROOT_IS_OBJECT(jb) || JB_ROOT_IS_SCALAR(jb))
	{
		subset_not_object = true;
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a subset request's body must be a JSON object")));
	}
	limit = subset_body_field(&jb->root, "limit");
	offset = subset_body_field(&jb->root, "offset");
	out->order_by = subset_body_field(&jb->root, "order_by");
	subset_check_paging(limit, offset, out->order_by, out);
	out->where = subset_body_field(&jb->root, "where");
	if (getKeyJsonValueFromContainer(&jb->root, "params", 6, &params) != NULL)
	{
		if (params.type == jbvString)
			subset_params_text(pnstrdup(params.val.string.val, params.val.string.len), out);
		else if (params.type == jbvBinary && JsonContainerIsObject(params.val.binary.data))
			subset_read_params(params.val.binary.data, out);
		else if (params.type != jbvNull)
			subset_invalid("params", "params must be a JSON object");
	}
}

/*
 * Whether sorting by a column of this type runs only PostgreSQL's own code:
 * a default ordering whose operators and their functions are built in (an
 * extension's or a user's could run anything, on every row; an enum's are
 * built in), and, for
 * an array, range or multirange, the same of what it holds.  Composite
 * types compare their fields with whatever those define: refused.
 */
static bool
subset_builtin_ordering(Oid typid, int depth)
{
	TypeCacheEntry *tc;
	Oid			ops[3];
	Oid			inner = InvalidOid;

	if (depth > 4)
		return false;
	typid = getBaseType(typid);
	if (type_is_rowtype(typid))
		return false;
	tc = lookup_type_cache(typid, TYPECACHE_LT_OPR | TYPECACHE_GT_OPR | TYPECACHE_EQ_OPR);
	ops[0] = tc->lt_opr;
	ops[1] = tc->gt_opr;
	ops[2] = tc->eq_opr;
	for (int i = 0; i < 3; i++)
		if (!OidIsValid(ops[i]) || ops[i] >= FirstGenbkiObjectId ||
			get_opcode(ops[i]) >= FirstGenbkiObjectId)
			return false;
	if (type_is_array(typid))
		inner = get_element_type(typid);
	else if (type_is_range(typid))
		inner = get_range_subtype(typid);
	else if (type_is_multirange(typid))
		inner = get_range_subtype(get_multirange_range(typid));
	return !OidIsValid(inner) || subset_builtin_ordering(inner, depth + 1);
}

/* order_by: ORDER BY items that are plain column names; their sort keys. */
static SnapshotOrder *
subset_order_by(Relation rel, const char *order_by, int *norder)
{
	char	   *sql = psprintf("SELECT 1 ORDER BY %s", order_by);
	SelectStmt *select;
	SnapshotOrder *order;
	ListCell   *lc;
	int			n = 0;

	subset_field = "order_by";
	subset_message = order_by_rule;
	select = shape_where_parse_select_one(sql, true);
	subset_message = NULL;
	if (select == NULL)
		subset_invalid("order_by", order_by_rule);

	order = palloc(sizeof(SnapshotOrder) * list_length(select->sortClause));
	foreach(lc, select->sortClause)
	{
		SortBy	   *sort = lfirst_node(SortBy, lc);
		ColumnRef  *ref = (ColumnRef *) sort->node;
		const char *name;
		AttrNumber	attnum;

		if (!IsA(ref, ColumnRef) || list_length(ref->fields) != 1 ||
			!IsA(linitial(ref->fields), String) || sort->useOp != NIL ||
			sort->sortby_dir == SORTBY_USING)
			subset_invalid("order_by", order_by_rule);
		name = strVal(linitial(ref->fields));
		attnum = get_attnum(RelationGetRelid(rel), name);
		if (attnum <= 0)
			subset_invalid("order_by",
						   psprintf("The following columns are not found on the table: %s", name));
		if (!subset_builtin_ordering(get_atttype(RelationGetRelid(rel), attnum), 0))
			subset_invalid("order_by",
						   psprintf("Column \"%s\" cannot be ordered: its type has no ordering built into PostgreSQL",
									name));
		order[n].attnum = attnum;
		order[n].descending = sort->sortby_dir == SORTBY_DESC;
		order[n].nulls_first = sort->sortby_nulls == SORTBY_NULLS_DEFAULT ?
			order[n].descending : sort->sortby_nulls == SORTBY_NULLS_FIRST;
		n++;
	}
	subset_field = NULL;
	*norder = n;
	return order;
}

/* With queryable_columns, the clauses may read only those columns. */
static void
subset_check_queryable(Relation rel, const SubsetInputs *in, const char *field,
					   Bitmapset *read)
{
	StringInfoData others;
	int			x = -1;

	if (in->nqueryable == 0)
		return;
	initStringInfo(&others);
	while ((x = bms_next_member(read, x)) >= 0)
	{
		AttrNumber	attnum = x + FirstLowInvalidHeapAttributeNumber;
		const char *name = get_attname(RelationGetRelid(rel), attnum, false);
		bool		allowed = false;

		for (int i = 0; i < in->nqueryable; i++)
			allowed = allowed || strcmp(in->queryable[i], name) == 0;
		if (!allowed)
			appendStringInfo(&others, "%s%s", others.len ? ", " : "", name);
	}
	if (others.len > 0)
		subset_invalid(field,
					   psprintf("The following columns are not in queryable_columns: %s",
								others.data));
}

/*
 * A subset's clauses read only the shape's columns (its key is among
 * them), so that a where clause or an ordering cannot be an oracle on a
 * column the shape hides, unless shape_sync.subset_columns = table.
 */
static void
subset_check_shape_columns(Relation rel, const SubsetInputs *in, const char *field,
						   Bitmapset *read)
{
	StringInfoData others;
	int			x = -1;

	if (in->spec.ncolumns == 0 || shape_sync_subset_columns == SUBSET_COLUMNS_TABLE)
		return;
	initStringInfo(&others);
	while ((x = bms_next_member(read, x)) >= 0)
	{
		AttrNumber	attnum = x + FirstLowInvalidHeapAttributeNumber;
		bool		in_shape = false;

		for (int i = 0; i < in->spec.ncolumns; i++)
			in_shape = in_shape || in->spec.columns[i] == attnum;
		if (!in_shape)
			appendStringInfo(&others, "%s%s", others.len ? ", " : "",
							 get_attname(RelationGetRelid(rel), attnum, false));
	}
	if (others.len > 0)
		subset_invalid(field,
					   psprintf("The following columns are not in the shape's columns: %s",
								others.data));
}

/* The columns `read` (offsets of FirstLowInvalidHeapAttributeNumber) are the role's to SELECT. */
static void
subset_check_readable(Oid relid, Bitmapset *read, const char *field)
{
	AttrNumber *attnums = palloc(sizeof(AttrNumber) * Max(bms_num_members(read), 1));
	const char *problem_field;
	char	   *problem;
	int			n = 0;
	int			x = -1;

	while ((x = bms_next_member(read, x)) >= 0)
		attnums[n++] = x + FirstLowInvalidHeapAttributeNumber;
	if (n == 0)
		return;
	problem = shape_read_problem(relid, n, attnums, &problem_field);
	if (problem != NULL)
	{
		subset_field = field;
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("%s", problem)));
	}
}

/* ------------------------------------------------------------ the answer */

typedef struct SubsetWriter
{
	ShapeTable *table;
	ShapeLog   *log;
	uint64		records;
} SubsetWriter;

/*
 * Appends one record of the answer.  A subset's answer never evicts a
 * shape to make room (one client's subsets could otherwise push every
 * shape out): when the arena is full it fails with a 503 to retry, and an
 * answer that outgrows an eighth of shape_sync.log_memory fails with a
 * 400 that asks for a narrower subset.
 */
static void
subset_append(SubsetWriter *w, const char *data, int len)
{
	LogOffset	offset = {0, w->records};
	ShapeLogArena *arena = w->table->arena;
	SlogResult	res;

	if (subset_abandoned(&shape_sync_shared->subsets, subset_cell, subset_ticket))
		ereport(ERROR,
				(errcode(ERRCODE_QUERY_CANCELED),
				 errmsg("the subset query was abandoned: its client was answered already")));
	if (w->log->blocks_held > arena->nblocks / SUBSET_ARENA_SHARE)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("the subset's rows take more than an eighth of the shape log memory"),
				 errdetail("\"%s\" is %d MB.", "shape_sync.log_memory", shape_sync_log_memory)));
	res = slog_append(arena, w->log, offset, SLOG_RECORD_CHANGE, data, (uint32) len);
	if (res == SLOG_FULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("the shape log memory is full"),
				 errdetail("Shapes and subset queries share the %d MB set by \"%s\".",
						   shape_sync_log_memory, "shape_sync.log_memory")));
	if (res != SLOG_OK)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("the subset's rows are too large for one answer")));
	w->records++;
}

static void
subset_emit(void *arg, const char *message, int len)
{
	subset_append((SubsetWriter *) arg, message, len);
}

/*
 * A move-in of a shape with subqueries (shape_stream_subquery.c): the rows
 * of the shape that the main thread's filter selects, tagged, at a snapshot
 * of their own.  Record 0 is for the main thread alone: the WAL insert
 * position after the snapshot and pg_current_snapshot()'s text; the rows
 * follow, then, when there are any, the snapshot-end message clients get.
 */
static void
subset_take_move_in(SubsetWriter *w, const SnapshotJob *job, const SubsetInputs *in)
{
	ShapeRoleSaved saved;
	SnapshotSubset subset;
	Relation	rel;
	StringInfoData meta;
	char	   *snapshot_text;
	uint64		database_lsn;

	snapshot_text = snapshot_begin(in->spec.relid, (Oid) job->role, "taking a move-in snapshot",
								   shape_sync_subset_statement_timeout, &saved,
								   &database_lsn);
	rel = table_open(in->spec.relid, AccessShareLock);
	snapshot_check_shape(&in->spec, in->texts[SUBSET_FINGERPRINT], (Oid) job->role,
						 quote_identifier(RelationGetRelationName(rel)));
	table_close(rel, NoLock);

	memset(&subset, 0, sizeof(subset));
	subset.limit = -1;
	subset.move_in = true;
	subset.where = stringToNode(in->texts[SUBSET_MOVE_IN]);
	initStringInfo(&meta);
	appendStringInfo(&meta, UINT64_FORMAT " %s", database_lsn, snapshot_text);
	subset_append(w, meta.data, meta.len);
	snapshot_scan(&in->spec, &subset, in->texts[SUBSET_HANDLE], subset_emit, w);
	if (w->records > 1)
	{
		resetStringInfo(&meta);
		appendStringInfoString(&meta, LOG_RECORD_SNAPSHOT_END);
		snapshot_visibility_json(&meta, snapshot_text);
		appendStringInfoString(&meta, LOG_RECORD_END);
		subset_append(w, meta.data, meta.len);
	}
	snapshot_end(&saved);
}

/* Runs the checked query; the cell holds the answer after. */
static void
subset_take(SubsetWriter *w, const SnapshotJob *job, const SubsetInputs *in)
{
	ShapeRoleSaved saved;
	SubsetParsed parsed;
	SnapshotSubset subset;
	Relation	rel;
	Bitmapset  *where_read = NULL;
	Bitmapset  *sorted = NULL;
	StringInfoData meta;
	char	   *snapshot_text;
	uint64		database_lsn;

	/* the insert position after the snapshot is past all it sees (snapshot_begin) */
	snapshot_text = snapshot_begin(in->spec.relid, (Oid) job->role, "taking a subset snapshot",
								   shape_sync_subset_statement_timeout, &saved,
								   &database_lsn);
	rel = table_open(in->spec.relid, AccessShareLock);
	snapshot_check_shape(&in->spec, in->texts[SUBSET_FINGERPRINT], (Oid) job->role,
						 quote_identifier(RelationGetRelationName(rel)));

	/* the client's inputs */
	memset(&parsed, 0, sizeof(parsed));
	if (in->texts[SUBSET_BODY] != NULL)
		subset_read_body(in->texts[SUBSET_BODY], &parsed);
	else
		subset_read_query(in, &parsed);
	memset(&subset, 0, sizeof(subset));
	subset.limit = parsed.limit;
	subset.offset = parsed.offset;
	if (parsed.where != NULL && parsed.where[0] != '\0')
	{
		if (shape_sync_max_where_length > 0 &&
			strlen(parsed.where) > (size_t) shape_sync_max_where_length)
			subset_invalid("where",
						   psprintf("The where clause is %zu bytes long; this server accepts at most %d (shape_sync.max_where_length)",
									strlen(parsed.where), shape_sync_max_where_length));
		shape_def_error_field = NULL;
		shape_def_http_message[0] = '\0';
		subset.where = shape_where_for_subset(rel, parsed.where, parsed.params, parsed.nparams);
		shape_def_error_field = NULL;
		if (subquery_in_where(subset.where))
			subset_invalid("where", "A subset's where clause cannot have subqueries");
		pull_varattnos(subset.where, 1, &where_read);
		subset_check_shape_columns(rel, in, "where", where_read);
		subset_check_queryable(rel, in, "where", where_read);
	}
	if (parsed.order_by != NULL && parsed.order_by[0] != '\0')
	{
		if (shape_sync_max_where_length > 0 &&
			strlen(parsed.order_by) > (size_t) shape_sync_max_where_length)
			subset_invalid("order_by", "is too long");
		subset.order = subset_order_by(rel, parsed.order_by, &subset.norder);
		for (int i = 0; i < subset.norder; i++)
			sorted = bms_add_member(sorted,
									subset.order[i].attnum - FirstLowInvalidHeapAttributeNumber);
		subset_check_shape_columns(rel, in, "order_by", sorted);
		subset_check_queryable(rel, in, "order_by", sorted);
	}

	/* what the subset's clauses read is the role's to SELECT, as the shape's is */
	subset_check_readable(in->spec.relid, where_read, "where");
	subset_check_readable(in->spec.relid, sorted, "order_by");
	table_close(rel, NoLock);

	subset.snapshot_mark = (pg_prng_uint32(&pg_global_prng_state) % 0x7fffffffu) + 1;
	initStringInfo(&meta);
	appendStringInfoChar(&meta, '{');
	snapshot_visibility_json(&meta, snapshot_text);
	appendStringInfo(&meta, ",\"snapshot_mark\":%u,\"database_lsn\":\"" UINT64_FORMAT "\"}",
					 subset.snapshot_mark, database_lsn);
	subset_append(w, meta.data, meta.len);

	/* a shape with subqueries tags the rows, as its log does */
	snapshot_scan(&in->spec, &subset, in->texts[SUBSET_HANDLE], subset_emit, w);
	snapshot_end(&saved);
}

/*
 * Why a failed subset query is refused (refusal.h), its facts in *out and
 * its text returned (palloc'd, or NULL).  Called in the PG_CATCH before
 * the abort: the strings it reads live in the transaction.
 */
static const char *
subset_failure(const ErrorData *edata, int64 elapsed_ms, SubsetOutcome *out)
{
	const char *field = subset_field ? subset_field : shape_def_error_field;

	memset(out, 0, sizeof(*out));
	if (field != NULL)
		strlcpy(out->field, field, sizeof(out->field));
	if (subset_paging != 0)
	{
		out->reason = REFUSAL_SUBSET_PAGING;
		out->paging = subset_paging;
		return NULL;
	}
	if (subset_not_object)
	{
		out->reason = REFUSAL_BODY_NOT_OBJECT;
		return NULL;
	}
	if (field != NULL && strcmp(field, "body") == 0)
	{
		out->reason = REFUSAL_BODY_INVALID;
		return pstrdup(edata->message);
	}
	if (edata->sqlerrcode == ERRCODE_INSUFFICIENT_PRIVILEGE)
	{
		/* with no field: the shape itself may not be read now (snapshot_check_shape) */
		out->reason = field == NULL ? REFUSAL_SUBSET_SHAPE_FORBIDDEN : REFUSAL_SUBSET_FORBIDDEN;
		return pstrdup(edata->message);
	}
	if (field != NULL)
	{
		out->reason = REFUSAL_SUBSET_INVALID;
		return pstrdup(subset_message ? subset_message : shape_def_error_message(field, edata));
	}
	switch (edata->sqlerrcode)
	{
		case ERRCODE_INVALID_TABLE_DEFINITION:
			/* the shape's table changed: its clients refetch it */
			out->reason = REFUSAL_MUST_REFETCH;
			return NULL;
		case ERRCODE_QUERY_CANCELED:
			if (shape_sync_subset_statement_timeout > 0 &&
				elapsed_ms >= shape_sync_subset_statement_timeout)
			{
				out->reason = REFUSAL_SUBSET_TIMEOUT;
				out->number = shape_sync_subset_statement_timeout;
				return NULL;
			}
			out->reason = REFUSAL_SUBSET_CANCELLED;
			return NULL;
		case ERRCODE_OUT_OF_MEMORY:
		case ERRCODE_T_R_SERIALIZATION_FAILURE:
			out->reason = REFUSAL_SUBSET_RETRY;
			return pstrdup(edata->message);
		case ERRCODE_PROGRAM_LIMIT_EXCEEDED:
			out->reason = REFUSAL_SUBSET_TOO_LARGE;
			return pstrdup(edata->message);
	}
	if (ERRCODE_TO_CATEGORY(edata->sqlerrcode) == ERRCODE_DATA_EXCEPTION)
	{
		/* the where clause failed on a row (a division by zero, a value it cannot cast) */
		out->reason = REFUSAL_SUBSET_ROW_FAILED;
		return pstrdup(edata->message);
	}
	out->reason = REFUSAL_SUBSET_FAILED;
	return pstrdup(edata->message);
}

/* The cell's answer is complete: tell the main thread, let go of the cell. */
static void
subset_complete(SubsetWriter *w, const SubsetOutcome *outcome)
{
	SubsetResults *results = &shape_sync_shared->subsets;
	LogOffset	last = {0, w->records > 0 ? w->records - 1 : 0};

	slog_publish(w->log, last, SLOG_SNAPSHOT_DONE);
	subset_finish(results, subset_cell, subset_ticket, outcome);
	subset_release(results, w->table->arena, subset_cell);
	subset_cell = -1;
	shape_sync_wake_worker();
}

/*
 * A refusal replaces whatever rows were written: its text, if it has one,
 * is record 0.
 */
static void
subset_write_refusal(SubsetWriter *w, const char *text)
{
	slog_release(w->table->arena, w->log);
	w->records = 0;
	if (text == NULL)
		return;
	/* a text is small; if even it does not fit, the answer says less */
	(void) slog_append(w->table->arena, w->log, (LogOffset) {0, 0}, SLOG_RECORD_CHANGE,
					   text, (uint32) strlen(text));
	w->records = w->log->write_pos > 0 ? 1 : 0;
}

void
subset_run_job(const SnapshotJob *job, MemoryContext job_context)
{
	SubsetResults *results = &shape_sync_shared->subsets;
	int			cell = (int) (job->slot & ~SUBSET_JOB_SLOT_BIT);
	TimestampTz started = GetCurrentTimestamp();
	SubsetWriter w;
	SubsetInputs in;

	MemoryContextSwitchTo(job_context);
	subset_cell = cell;
	subset_ticket = job->generation;
	subset_field = NULL;
	subset_message = NULL;
	subset_paging = 0;
	subset_not_object = false;
	shape_def_error_field = NULL;
	shape_def_http_message[0] = '\0';
	memset(&w, 0, sizeof(w));
	w.table = shape_sync_shared->table;
	w.log = &results->cells[cell].log;

	/* its request is gone or answered already: nobody reads the answer */
	if (atomic_load(&results->cells[cell].refs) == 1 ||
		subset_abandoned(results, cell, job->generation))
	{
		SubsetOutcome unanswered = {.reason = REFUSAL_SUBSET_UNANSWERED};

		subset_complete(&w, &unanswered);
		return;
	}

	PG_TRY();
	{
		subset_read_definition((dsm_handle) job->definition, &in);
		if (in.texts[SUBSET_MOVE_IN] != NULL)
			subset_take_move_in(&w, job, &in);
		else
			subset_take(&w, job, &in);
	}
	PG_CATCH();
	{
		ErrorData  *edata;
		SubsetOutcome outcome;
		const char *text;

		MemoryContextSwitchTo(job_context);
		edata = CopyErrorData();

		/*
		 * The refusal is made before the transaction is aborted: what it
		 * quotes (subset_message, a where clause's position) was allocated
		 * in that transaction, and is gone once it aborts.  Until the abort
		 * the failed work may still hold LWLocks: this copies text only,
		 * with interrupts held, and looks nothing up.
		 */
		HOLD_INTERRUPTS();
		if (snapshot_deadline_caught())
		{
			memset(&outcome, 0, sizeof(outcome));
			outcome.reason = REFUSAL_SUBSET_ROW_TOO_SLOW;
			outcome.number = shape_sync_where_evaluation_timeout;
			text = NULL;
		}
		else
			text = subset_failure(edata, (GetCurrentTimestamp() - started) / 1000, &outcome);
		subset_field = NULL;
		subset_message = NULL;
		subset_paging = 0;
		subset_not_object = false;
		RESUME_INTERRUPTS();
		snapshot_worker_recover();
		if (outcome.reason == REFUSAL_SUBSET_FAILED)
			ereport(LOG,
					(errmsg("a subset query failed: %s", edata->message),
					 edata->detail ? errdetail_internal("%s", edata->detail) : 0));
		else if (outcome.reason == REFUSAL_SUBSET_CANCELLED ||
				 outcome.reason == REFUSAL_SUBSET_RETRY)
			ereport(DEBUG1,
					(errmsg("a subset query failed: %s", edata->message),
					 edata->detail ? errdetail_internal("%s", edata->detail) : 0));
		subset_write_refusal(&w, text);
		shape_def_error_field = NULL;
		subset_complete(&w, &outcome);
		pgstat_report_activity(STATE_IDLE, NULL);
		return;
	}
	PG_END_TRY();
	subset_complete(&w, NULL);
	pgstat_report_activity(STATE_IDLE, NULL);
}

/* The worker exits in the middle of a job: its client is told so. */
void
subset_abandon(void)
{
	SubsetOutcome stopped = {.reason = REFUSAL_SUBSET_WORKER_STOPPED};
	SubsetWriter w;

	if (subset_cell < 0)
		return;
	memset(&w, 0, sizeof(w));
	w.table = shape_sync_shared->table;
	w.log = &shape_sync_shared->subsets.cells[subset_cell].log;
	subset_write_refusal(&w, NULL);
	subset_complete(&w, &stopped);
}
