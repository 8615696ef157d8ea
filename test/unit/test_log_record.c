/*
 * test_log_record.c: the record layout of log_record.h, as both sides use it.
 *
 * Records are built from the layout's constants the way row_encoder.c and
 * shape_stream_log.c build them (the same concatenations and format strings),
 * and must come out as the bytes Electric's clients read; then a log of
 * such records is compacted, and log_compact.c must read every one of
 * them (an unreadable record stops compaction) and write the merged
 * update with the same layout.
 */
#include "unit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log_compact.h"
#include "log_record.h"

#define FMT_U64 "%" PRIu64

/* A snapshot row's headers, as row_encoder_init makes them. */
static void
snapshot_headers(char *buf, size_t len, const char *relation_json)
{
	snprintf(buf, len, LOG_RECORD_HEADERS LOG_RECORD_OPERATION(LOG_RECORD_INSERT)
			 LOG_RECORD_RELATION "%s" LOG_RECORD_END, relation_json);
}

/* A subset's row headers, as row_encoder_set_snapshot_mark makes them. */
static void
subset_headers(char *buf, size_t len, const char *relation_json, unsigned mark)
{
	snprintf(buf, len, LOG_RECORD_HEADERS LOG_RECORD_OPERATION(LOG_RECORD_INSERT)
			 LOG_RECORD_RELATION "%s" LOG_RECORD_SNAPSHOT_MARK "%u" LOG_RECORD_END,
			 relation_json, mark);
}

/* A snapshot row, as row_encoder_snapshot_row writes it. */
static void
snapshot_row(char *buf, size_t len, const char *key, const char *value)
{
	char		headers[256];

	snapshot_headers(headers, sizeof(headers), "[\"public\",\"t\"]");
	snprintf(buf, len, LOG_RECORD_KEY "%s" LOG_RECORD_VALUE "{%s}%s", key, value, headers);
}

/*
 * A replicated change, as row_encoder_change writes it and ss_release_held
 * closes it.  old_value and the key changes are NULL when absent.
 */
static void
change(char *buf, size_t len, const char *op, const char *key, const char *value,
	   const char *old_value, const char *key_change_to, const char *key_change_from,
	   uint64_t lsn, uint64_t op_position, unsigned xid, bool last)
{
	size_t		n = 0;

	n += snprintf(buf + n, len - n, LOG_RECORD_KEY "%s" LOG_RECORD_VALUE "{%s}", key, value);
	if (old_value != NULL)
		n += snprintf(buf + n, len - n, LOG_RECORD_OLD_VALUE "{%s}", old_value);
	n += snprintf(buf + n, len - n, LOG_RECORD_HEADERS LOG_RECORD_OPERATION("%s")
				  LOG_RECORD_RELATION "%s", op, "[\"public\",\"t\"]");
	if (key_change_to != NULL)
		n += snprintf(buf + n, len - n, LOG_RECORD_KEY_CHANGE_TO "%s", key_change_to);
	if (key_change_from != NULL)
		n += snprintf(buf + n, len - n, LOG_RECORD_KEY_CHANGE_FROM "%s", key_change_from);
	n += snprintf(buf + n, len - n, LOG_RECORD_LSN "\"" FMT_U64 "\"" LOG_RECORD_OP_POSITION
				  FMT_U64 LOG_RECORD_TXIDS "%u]", lsn, op_position, xid);
	snprintf(buf + n, len - n, "%s", log_record_end(last));
}

/* The layout's bytes are the ones Electric's clients read. */
TEST(records_have_electrics_bytes)
{
	char		buf[1024];

	snapshot_row(buf, sizeof(buf), "\"\\\"public\\\".\\\"t\\\"/\\\"1\\\"\"", "\"id\":\"1\",\"a\":null");
	CHECK_STR_EQ(buf,
				 "{\"key\":\"\\\"public\\\".\\\"t\\\"/\\\"1\\\"\",\"value\":{\"id\":\"1\",\"a\":null},"
				 "\"headers\":{\"operation\":\"insert\",\"relation\":[\"public\",\"t\"]}}");

	subset_headers(buf, sizeof(buf), "[\"s\",\"t\"]", 7);
	CHECK_STR_EQ(buf, ",\"headers\":{\"operation\":\"insert\",\"relation\":[\"s\",\"t\"],\"snapshot_mark\":7}}");

	change(buf, sizeof(buf), LOG_RECORD_UPDATE, "\"k\"", "\"id\":\"1\",\"a\":\"b\"", "\"a\":\"z\"",
		   NULL, NULL, 1234, 5, 77, true);
	CHECK_STR_EQ(buf,
				 "{\"key\":\"k\",\"value\":{\"id\":\"1\",\"a\":\"b\"},\"old_value\":{\"a\":\"z\"},"
				 "\"headers\":{\"operation\":\"update\",\"relation\":[\"public\",\"t\"],"
				 "\"lsn\":\"1234\",\"op_position\":5,\"txids\":[77],\"last\":true}}");

	change(buf, sizeof(buf), LOG_RECORD_DELETE, "\"k\"", "\"id\":\"1\"", NULL,
		   "\"n\"", NULL, 9, 0, 3, false);
	CHECK_STR_EQ(buf,
				 "{\"key\":\"k\",\"value\":{\"id\":\"1\"},"
				 "\"headers\":{\"operation\":\"delete\",\"relation\":[\"public\",\"t\"],"
				 "\"key_change_to\":\"n\",\"lsn\":\"9\",\"op_position\":0,\"txids\":[3]}}");

	CHECK_STR_EQ(log_record_end(false), "}}");
	CHECK_STR_EQ(log_record_end(true), ",\"last\":true}}");
	CHECK_STR_EQ(LOG_RECORD_SNAPSHOT_END "\"xmin\":\"1\"" LOG_RECORD_END,
				 "{\"headers\":{\"control\":\"snapshot-end\",\"xmin\":\"1\"}}");
	/* the names a reader looks for are the members' without their comma */
	CHECK_STR_EQ("," LOG_RECORD_LSN_NAME, LOG_RECORD_LSN);
	CHECK_STR_EQ("," LOG_RECORD_TXIDS_NAME, LOG_RECORD_TXIDS);
}

static ShapeLogArena *
arena_new(uint32_t nblocks)
{
	size_t		size = slog_arena_size((uint64_t) nblocks * SLOG_BLOCK_SIZE);
	void	   *mem = aligned_alloc(SLOG_BLOCK_SIZE, size);

	return mem ? slog_arena_init(mem, size) : NULL;
}

static void
append(ShapeLogArena *arena, ShapeLog *log, LogOffset o, uint32_t kind, const char *msg)
{
	REQUIRE(slog_append(arena, log, o, kind, msg, (uint32_t) strlen(msg)) == SLOG_OK);
}

/*
 * The compactor reads every kind of record the encoder writes: snapshot
 * rows, the snapshot-end control record, inserts, updates with and without
 * old values, a key change's delete and insert, and deletes; the two
 * updates of one key become one, written in the same layout.
 */
TEST(compactor_reads_what_the_encoder_writes)
{
	ShapeLogArena *arena = arena_new(64);
	ShapeLog	in,
				out;
	SlogCompactStats st;
	SlogCompactOptions limits;
	SlogPublished pub;
	char		msg[2048];
	char		expected[2048];
	int			merged = 0;

	REQUIRE(arena != NULL);
	slog_init(&in);
	slog_init(&out);
	snapshot_row(msg, sizeof(msg), "\"a\"", "\"id\":\"a\",\"v\":\"0\"");
	append(arena, &in, (LogOffset) {0, 0}, SLOG_RECORD_CHANGE, msg);
	snapshot_row(msg, sizeof(msg), "\"b\"", "\"id\":\"b\",\"v\":\"0\"");
	append(arena, &in, (LogOffset) {0, 0}, SLOG_RECORD_CHANGE, msg);
	append(arena, &in, (LogOffset) {0, 0}, SLOG_RECORD_CONTROL,
		   LOG_RECORD_SNAPSHOT_END "\"xmin\":\"1\"" LOG_RECORD_END);
	REQUIRE(slog_close_chunk(arena, &in, (LogOffset) {0, 0}) == SLOG_OK);

	/* two updates of a, then b's key changes to c, then a new d, deleted */
	change(msg, sizeof(msg), LOG_RECORD_UPDATE, "\"a\"", "\"id\":\"a\",\"v\":\"1\"",
		   "\"v\":\"0\"", NULL, NULL, 100, 0, 41, true);
	append(arena, &in, (LogOffset) {100, 0}, SLOG_RECORD_CHANGE, msg);
	change(msg, sizeof(msg), LOG_RECORD_UPDATE, "\"a\"", "\"id\":\"a\",\"v\":\"2\"",
		   NULL, NULL, NULL, 200, 0, 42, false);
	append(arena, &in, (LogOffset) {200, 0}, SLOG_RECORD_CHANGE, msg);
	change(msg, sizeof(msg), LOG_RECORD_DELETE, "\"b\"", "\"id\":\"b\"", NULL,
		   "\"c\"", NULL, 200, 2, 42, false);
	append(arena, &in, (LogOffset) {200, 2}, SLOG_RECORD_CHANGE, msg);
	change(msg, sizeof(msg), LOG_RECORD_INSERT, "\"c\"", "\"id\":\"c\",\"v\":\"0\"", NULL,
		   NULL, "\"b\"", 200, 3, 42, true);
	append(arena, &in, (LogOffset) {200, 3}, SLOG_RECORD_CHANGE, msg);
	change(msg, sizeof(msg), LOG_RECORD_INSERT, "\"d\"", "\"id\":\"d\"", NULL,
		   NULL, NULL, 300, 0, 43, true);
	append(arena, &in, (LogOffset) {300, 0}, SLOG_RECORD_CHANGE, msg);
	change(msg, sizeof(msg), LOG_RECORD_DELETE, "\"d\"", "\"id\":\"d\"", NULL,
		   NULL, NULL, 400, 0, 44, true);
	append(arena, &in, (LogOffset) {400, 0}, SLOG_RECORD_CHANGE, msg);
	REQUIRE(slog_close_chunk(arena, &in, (LogOffset) {400, 0}) == SLOG_OK);
	slog_publish(&in, (LogOffset) {400, 0}, SLOG_SNAPSHOT_DONE);

	/* SLOG_COMPACT_UNREADABLE here: the two sides disagree on the layout */
	limits = slog_compact_defaults(1 << 20);
	REQUIRE_EQ(slog_compact(arena, &in, &out, &limits, &st), SLOG_COMPACT_OK);
	CHECK_EQ(st.records_in, 9);
	CHECK(st.records_out < st.records_in);

	/* the merged update: the last one's key and headers, all txids, last */
	snprintf(expected, sizeof(expected),
			 LOG_RECORD_KEY "\"a\"" LOG_RECORD_VALUE "{\"id\":\"a\",\"v\":\"2\"}"
			 LOG_RECORD_HEADERS LOG_RECORD_OPERATION(LOG_RECORD_UPDATE)
			 LOG_RECORD_RELATION "[\"public\",\"t\"]"
			 LOG_RECORD_LSN "\"200\"" LOG_RECORD_OP_POSITION "0" LOG_RECORD_TXIDS "41,42]%s",
			 log_record_end(true));
	slog_read_published(&out, &pub);
	for (uint64_t pos = 0; pos < pub.data_end;)
	{
		SlogRecordHeader hdr;

		slog_read_header(arena, &out, pos, &hdr);
		REQUIRE(hdr.len < sizeof(msg));
		slog_copy_out(arena, &out, pos + sizeof(hdr), msg, hdr.len);
		msg[hdr.len] = '\0';
		if (hdr.kind == SLOG_RECORD_CHANGE && strstr(msg, "\"a\"") != NULL &&
			strstr(msg, LOG_RECORD_OPERATION(LOG_RECORD_UPDATE)) != NULL)
		{
			merged++;
			CHECK_STR_EQ(msg, expected);
		}
		pos += slog_record_span(hdr.len);
	}
	CHECK_EQ(merged, 1);
	slog_release(arena, &in);
	slog_release(arena, &out);
	free(arena);
}

/* An operation the layout does not name is not a record this server wrote. */
TEST(compactor_refuses_an_unknown_operation)
{
	ShapeLogArena *arena = arena_new(16);
	ShapeLog	in,
				out;
	SlogCompactStats st;
	SlogCompactOptions limits;
	char		msg[1024];

	REQUIRE(arena != NULL);
	slog_init(&in);
	slog_init(&out);
	change(msg, sizeof(msg), "truncate", "\"a\"", "\"id\":\"a\"", NULL, NULL, NULL,
		   100, 0, 41, true);
	append(arena, &in, (LogOffset) {100, 0}, SLOG_RECORD_CHANGE, msg);
	REQUIRE(slog_close_chunk(arena, &in, (LogOffset) {100, 0}) == SLOG_OK);
	slog_publish(&in, (LogOffset) {100, 0}, SLOG_SNAPSHOT_DONE);
	limits = slog_compact_defaults(1024);
	CHECK_EQ(slog_compact(arena, &in, &out, &limits, &st), SLOG_COMPACT_UNREADABLE);
	slog_release(arena, &out);
	slog_release(arena, &in);
	free(arena);
}

UNIT_MAIN()
