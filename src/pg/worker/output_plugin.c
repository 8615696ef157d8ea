/*-------------------------------------------------------------------------
 *
 * output_plugin.c
 *		shape_sync as a logical decoding output plugin.
 *
 * The library is its own output plugin: a slot created with plugin
 * 'shape_sync' loads this file's _PG_output_plugin_init.  It has two
 * users.
 *
 *	- The worker's decoder (decoder.c).  Its callbacks write nothing to the
 *	  plugin's output; they hand each change to the shape stream
 *	  (shape_stream_change.c), which appends it to the logs of the shapes it
 *	  belongs to.
 *	- Anyone else, through pg_logical_slot_get_changes() on a second slot:
 *	  then each change is written as the Electric message a shape over the
 *	  whole table would carry, one row per message, for inspection and
 *	  tests.  Options: "replica" ('default' or 'full', default 'full'),
 *	  "include-lsn" and "include-xids" (booleans, default true; off, they
 *	  print 0, for deterministic output).
 *
 * Each change's scratch memory lives in a context reset after the change.
 *
 * IDENTIFICATION
 *	  src/pg/worker/output_plugin.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "commands/defrem.h"
#include "executor/tuptable.h"
#include "replication/logical.h"
#include "replication/output_plugin.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/json.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "decoder.h"
#include "log_record.h"
#include "row_encoder.h"
#include "server_metrics.h"
#include "shape_relation.h"
#include "shape_stream.h"

PGDLLEXPORT void _PG_output_plugin_init(OutputPluginCallbacks *cb);

typedef struct PluginState
{
	MemoryContext change_context;
	bool		replica_full;
	bool		include_lsn;
	bool		include_xids;
	/* SQL output: the transaction's latest message, held for "last" */
	StringInfoData held;
	bool		has_held;
	TransactionId xid;
	XLogRecPtr	lsn;
	uint64		op;
} PluginState;

static void
plugin_startup(LogicalDecodingContext *ctx, OutputPluginOptions *opt, bool is_init)
{
	PluginState *state = MemoryContextAllocZero(ctx->context, sizeof(PluginState));
	ListCell   *lc;

	state->change_context = AllocSetContextCreate(ctx->context, "shape_sync change",
												  ALLOCSET_DEFAULT_SIZES);
	state->replica_full = true;
	state->include_lsn = true;
	state->include_xids = true;
	initStringInfo(&state->held);
	ctx->output_plugin_private = state;
	opt->output_type = OUTPUT_PLUGIN_TEXTUAL_OUTPUT;
	opt->receive_rewrites = false;

	foreach(lc, ctx->output_plugin_options)
	{
		DefElem    *elem = lfirst(lc);
		const char *value = elem->arg ? strVal(elem->arg) : NULL;

		if (strcmp(elem->defname, "replica") == 0 && value &&
			(strcmp(value, "full") == 0 || strcmp(value, "default") == 0))
			state->replica_full = strcmp(value, "full") == 0;
		else if (strcmp(elem->defname, "include-lsn") == 0 && value &&
				 parse_bool(value, &state->include_lsn))
			;
		else if (strcmp(elem->defname, "include-xids") == 0 && value &&
				 parse_bool(value, &state->include_xids))
			;
		else
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("option \"%s\" = \"%s\" is unknown to the shape_sync output plugin",
							elem->defname, value ? value : "(null)"),
					 errhint("Valid options are \"replica\" (default or full), \"include-lsn\" and \"include-xids\" (booleans).")));
	}
}

static void
plugin_begin(LogicalDecodingContext *ctx, ReorderBufferTXN *txn)
{
	PluginState *state = ctx->output_plugin_private;

	if (decoder_is_worker_context(ctx))
	{
		shape_stream_begin(txn->xid, txn->final_lsn);
		return;
	}
	state->xid = txn->xid;
	state->lsn = txn->final_lsn;
	state->op = 0;
	state->has_held = false;
}

/* SQL output: writes the held message as a row. */
static void
plugin_write_held(LogicalDecodingContext *ctx, bool last)
{
	PluginState *state = ctx->output_plugin_private;

	if (!state->has_held)
		return;
	OutputPluginPrepareWrite(ctx, true);
	appendBinaryStringInfo(ctx->out, state->held.data, state->held.len);
	appendStringInfoString(ctx->out, log_record_end(last));
	OutputPluginWrite(ctx, true);
	resetStringInfo(&state->held);
	state->has_held = false;
}

static void
plugin_hold(LogicalDecodingContext *ctx, StringInfo msg)
{
	PluginState *state = ctx->output_plugin_private;
	MemoryContext old = MemoryContextSwitchTo(ctx->context);

	plugin_write_held(ctx, false);
	appendBinaryStringInfo(&state->held, msg->data, msg->len);
	state->has_held = true;
	MemoryContextSwitchTo(old);
}

static void
plugin_hold_message(void *arg, uint64 op_position, StringInfo msg)
{
	plugin_hold(arg, msg);
}

static void
plugin_deform(TupleDesc desc, ReorderBufferTupleBuf *buf, Datum **values, bool **nulls)
{
	*values = palloc(sizeof(Datum) * Max(desc->natts, 1));
	*nulls = palloc(sizeof(bool) * Max(desc->natts, 1));
	heap_deform_tuple(&buf->tuple, desc, *values, *nulls);
}

/* SQL output of one change: every column, the key, Electric's headers. */
static void
plugin_sql_change(LogicalDecodingContext *ctx, Relation rel, ReorderBufferChange *change)
{
	PluginState *state = ctx->output_plugin_private;
	TupleDesc	desc = RelationGetDescr(rel);
	ShapeRelation *srel = shape_relation_describe(rel, 0, NULL);
	RowEncoder	enc;
	RowChange	ch = {0};
	StringInfoData msg;
	Datum	   *newv = NULL;
	bool	   *newn = NULL;
	Datum	   *oldv = NULL;
	bool	   *oldn = NULL;

	int			nestlevel = NewGUCNestLevel();

	row_encoder_set_display_settings(PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE);
	row_encoder_init(&enc, srel);
	if (change->data.tp.newtuple)
		plugin_deform(desc, change->data.tp.newtuple, &newv, &newn);
	if (change->data.tp.oldtuple)
		plugin_deform(desc, change->data.tp.oldtuple, &oldv, &oldn);
	ch.operation = change->action == REORDER_BUFFER_CHANGE_INSERT ? LOG_RECORD_INSERT :
		change->action == REORDER_BUFFER_CHANGE_UPDATE ? LOG_RECORD_UPDATE : LOG_RECORD_DELETE;
	ch.new_values = newv;
	ch.new_nulls = newn;
	ch.old_values = oldv;
	ch.old_nulls = oldn;
	if (change->action == REORDER_BUFFER_CHANGE_DELETE && oldv == NULL)
	{
		/* no replica identity logged: nothing to say which row went */
		state->op += 2;
		AtEOXact_GUC(true, nestlevel);
		return;
	}
	ch.lsn = state->include_lsn ? state->lsn : 0;
	ch.op_position = state->op;
	ch.xid = state->include_xids ? state->xid : 0;
	state->op += 2;
	initStringInfo(&msg);
	if (change->action == REORDER_BUFFER_CHANGE_UPDATE && oldv != NULL)
		row_encoder_update(&enc, &ch, state->replica_full, plugin_hold_message, ctx);
	else if (row_encoder_change(&enc, &ch, state->replica_full, &msg))
		plugin_hold(ctx, &msg);
	AtEOXact_GUC(true, nestlevel);
}

static void
plugin_change(LogicalDecodingContext *ctx, ReorderBufferTXN *txn, Relation rel,
			  ReorderBufferChange *change)
{
	PluginState *state = ctx->output_plugin_private;
	MemoryContext old;

	if (change->action != REORDER_BUFFER_CHANGE_INSERT &&
		change->action != REORDER_BUFFER_CHANGE_UPDATE &&
		change->action != REORDER_BUFFER_CHANGE_DELETE)
		return;
	old = MemoryContextSwitchTo(state->change_context);
	if (decoder_is_worker_context(ctx))
	{
		sm_add(SM_DECODED_CHANGES,
			   change->action == REORDER_BUFFER_CHANGE_INSERT ? SM_OP_INSERT :
			   change->action == REORDER_BUFFER_CHANGE_UPDATE ? SM_OP_UPDATE : SM_OP_DELETE, 1);
		shape_stream_change(rel, change);
		decoder_replay_tick();
	}
	else
		plugin_sql_change(ctx, rel, change);
	MemoryContextSwitchTo(old);
	MemoryContextReset(state->change_context);
}

static void
plugin_truncate(LogicalDecodingContext *ctx, ReorderBufferTXN *txn, int nrelations,
				Relation relations[], ReorderBufferChange *change)
{
	PluginState *state = ctx->output_plugin_private;

	if (decoder_is_worker_context(ctx))
	{
		sm_add(SM_DECODED_CHANGES, SM_OP_TRUNCATE, (uint64) nrelations);
		shape_stream_truncate(nrelations, relations);
		return;
	}
	for (int i = 0; i < nrelations; i++)
	{
		StringInfoData msg;

		initStringInfo(&msg);
		appendStringInfo(&msg, "{\"headers\":{\"operation\":\"truncate\",\"relation\":[");
		escape_json(&msg, get_namespace_name(RelationGetNamespace(relations[i])));
		appendStringInfoChar(&msg, ',');
		escape_json(&msg, RelationGetRelationName(relations[i]));
		appendStringInfo(&msg, "],\"op_position\":" UINT64_FORMAT, state->op);
		state->op += 2;
		plugin_hold(ctx, &msg);
	}
}

static void
plugin_commit(LogicalDecodingContext *ctx, ReorderBufferTXN *txn, XLogRecPtr commit_lsn)
{
	if (decoder_is_worker_context(ctx))
	{
		shape_stream_commit();
		decoder_note_commit(txn->end_lsn, txn->xact_time.commit_time);
		return;
	}
	plugin_write_held(ctx, true);
}

void
_PG_output_plugin_init(OutputPluginCallbacks *cb)
{
	cb->startup_cb = plugin_startup;
	cb->begin_cb = plugin_begin;
	cb->change_cb = plugin_change;
	cb->truncate_cb = plugin_truncate;
	cb->commit_cb = plugin_commit;
}
