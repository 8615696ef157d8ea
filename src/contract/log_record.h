/*-------------------------------------------------------------------------
 *
 * log_record.h
 *		The bytes of a shape log's records: what the encoder writes and the
 *		compactor reads.
 *
 * A record's payload (after its SlogRecordHeader, shape_log.h) is an
 * Electric message, the JSON a client receives, written once and served as
 * it is.  The HTTP threads copy records without reading them; compaction
 * (log_compact.c) parses change records, and relies on the exact bytes and
 * order below, so this header is the one place they are written down.
 *
 * A change record (SLOG_RECORD_CHANGE) is one JSON object without
 * whitespace, its members always in this order:
 *
 *	{"key":K,"value":{...},"old_value":{...},"headers":{"operation":"insert",
 *	 "relation":["schema","table"],...}}
 *
 *	key			a JSON string: the quoted relation, then /"<value>" for each
 *				key column ("/" doubled inside values, NULL written /_).
 *	value		a flat object, each member a column name and its value as
 *				PostgreSQL's text output in a JSON string, or null: the
 *				selected columns (insert, delete with replica full), the key
 *				columns (delete with replica default), or those of an update
 *				(the whole new row with replica full; the key columns and
 *				the changed ones with replica default).
 *	old_value	only in an update with replica full: the old values of the
 *				columns the update changed, as in value.
 *	headers		an object whose first member is always "operation", one of
 *				"insert", "update" and "delete"; then "relation", the schema
 *				and table names as a JSON array.  A snapshot row's headers
 *				end there, or, for a subset's rows, after "snapshot_mark"
 *				(a number), or, for a move-in's rows, after "is_move_in":true;
 *				then, for a shape with subqueries, "tags" and
 *				"active_conditions" (row_tags.c).  A replicated change's go on
 *				with
 *				"key_change_to" (the delete half of an update that changed
 *				the key: the new key) or "key_change_from" (the insert half:
 *				the old key), for a shape with subqueries "tags",
 *				"removed_tags" (updates) and "active_conditions", then "lsn"
 *				(the commit LSN, as a JSON string of
 *				its decimal value), "op_position" (a number) and "txids" (an
 *				array of transaction ids: one, or several in an update merged
 *				by compaction), and, on the last message of its transaction
 *				for this shape, "last":true.
 *
 * So "lsn" marks a replicated change (a snapshot row belongs to no
 * transaction), and a record ends with the headers' and its own closing
 * braces, "}}".
 *
 * A shape with subqueries also has event records, written as change
 * records: {"headers":{"event":"move-out"|"move-in","patterns":[...],
 * "txids":[...]}} (shape_stream_subquery.c), and after a move-in's rows a
 * snapshot-end; such shapes are never compacted.
 *
 * A tombstone record (SLOG_RECORD_TOMBSTONE, made by compaction) is a
 * change record behind SLOG_TOMBSTONE_PREFIX bytes that hold the offset of
 * its life's insert.  A control record (SLOG_RECORD_CONTROL) is
 * {"headers":{"control":"snapshot-end",...}}; compaction keeps it where it
 * is without reading it.
 *
 * Who writes what: row_encoder.c (src/pg) writes a snapshot row whole,
 * and a change up to its last header, without the two closing braces;
 * shape_stream_log.c closes a change, marked last or not, once it knows whether
 * another message of its transaction follows (the output plugin's SQL
 * output closes it the same way); snapshot_worker.c writes the
 * snapshot-end control record; log_compact.c reads change records and
 * writes merged updates.  This header is plain C (no PostgreSQL or
 * libmicrohttpd header), for both floors.
 *
 * IDENTIFICATION
 *	  src/contract/log_record.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef LOG_RECORD_H
#define LOG_RECORD_H

#include <stdbool.h>

/* A change record's members up to the headers, each with what precedes it */
#define LOG_RECORD_KEY			"{\"key\":"
#define LOG_RECORD_VALUE		",\"value\":"
#define LOG_RECORD_OLD_VALUE	",\"old_value\":"
#define LOG_RECORD_HEADERS		",\"headers\":"

/* The operations, as RowChange names them and the headers write them */
#define LOG_RECORD_INSERT		"insert"
#define LOG_RECORD_UPDATE		"update"
#define LOG_RECORD_DELETE		"delete"

/*
 * How the headers object starts, for an operation given as a string
 * literal: LOG_RECORD_OPERATION(LOG_RECORD_INSERT) is
 * {"operation":"insert"
 */
#define LOG_RECORD_OPERATION(op)	"{\"operation\":\"" op "\""

/* The other headers, in order, each with the comma before it */
#define LOG_RECORD_RELATION			",\"relation\":"
#define LOG_RECORD_SNAPSHOT_MARK	",\"snapshot_mark\":"
#define LOG_RECORD_IS_MOVE_IN		",\"is_move_in\":true"
#define LOG_RECORD_KEY_CHANGE_TO	",\"key_change_to\":"
#define LOG_RECORD_KEY_CHANGE_FROM	",\"key_change_from\":"
#define LOG_RECORD_LSN				",\"lsn\":"
#define LOG_RECORD_OP_POSITION		",\"op_position\":"
#define LOG_RECORD_TXIDS			",\"txids\":["
#define LOG_RECORD_LAST				",\"last\":true"

/*
 * The names a reader looks for anywhere in the headers: LOG_RECORD_LSN and
 * LOG_RECORD_TXIDS without their comma.
 */
#define LOG_RECORD_LSN_NAME			"\"lsn\":"
#define LOG_RECORD_TXIDS_NAME		"\"txids\":["

/* The closing braces of the headers and of the record */
#define LOG_RECORD_END				"}}"

/* How the snapshot-end control record starts; its facts follow */
#define LOG_RECORD_SNAPSHOT_END		"{\"headers\":{\"control\":\"snapshot-end\","

/*
 * The bytes that close a replicated change: marked the last of its
 * transaction for the shape, or not.
 */
static inline const char *
log_record_end(bool last)
{
	return last ? LOG_RECORD_LAST LOG_RECORD_END : LOG_RECORD_END;
}

#endif							/* LOG_RECORD_H */
