/*
 * test_refusal_render.c
 *		The HTTP answer of each refusal reason (src/net/refusal_render.c):
 *		status, retry-after and the exact JSON body the PostgreSQL side used
 *		to write itself, so that moving the rendering changed no byte.
 */
#include "unit.h"

#include "refusal_render.h"

/* Renders r and checks the answer; body NULL: a must-refetch. */
static void
check_answer(const char *file, int line, const Refusal *r, unsigned status,
			 unsigned retry_after_s, const char *body)
{
	RefusalAnswer a;

	if (!refusal_render(r, &a))
	{
		unit_fail(file, line, "refusal_render(reason %d) ran out of memory", (int) r->reason);
		return;
	}
	if (a.status != status || a.retry_after_s != retry_after_s)
		unit_fail(file, line, "reason %d: status %u retry-after %u, expected %u and %u",
				  (int) r->reason, a.status, a.retry_after_s, status, retry_after_s);
	if (body == NULL)
	{
		if (!a.must_refetch || a.body != NULL)
			unit_fail(file, line, "reason %d: expected a must-refetch", (int) r->reason);
	}
	else if (a.must_refetch || a.body == NULL || strcmp(a.body, body) != 0)
		unit_fail(file, line, "reason %d:\n  got      %s\n  expected %s", (int) r->reason,
				  a.body ? a.body : "(none)", body);
	free(a.body);
}

#define ANSWER(r, status, retry, body) check_answer(__FILE__, __LINE__, r, status, retry, body)

static Refusal
refusal(RefusalReason reason, const char *field, const char *text, int64_t number)
{
	Refusal		r = {0};

	r.reason = reason;
	r.field = (char *) field;
	r.text = (char *) text;
	r.number = number;
	return r;
}

TEST(definition_refusals)
{
	Refusal		r;

	r = refusal(REFUSAL_INVALID, "where", "Invalid where clause: \"x\"", 0);
	ANSWER(&r, 400, 0,
		   "{\"message\":\"Invalid request\",\"errors\":{\"where\":[\"Invalid where clause: \\\"x\\\"\"]}}");
	r = refusal(REFUSAL_FORBIDDEN, NULL, "permission denied for table t", 0);
	ANSWER(&r, 403, 0,
		   "{\"message\":\"Forbidden\",\"errors\":{\"table\":[\"permission denied for table t\"]}}");
	r = refusal(REFUSAL_FORBIDDEN, "columns", "no SELECT on \"secret\"", 0);
	ANSWER(&r, 403, 0,
		   "{\"message\":\"Forbidden\",\"errors\":{\"columns\":[\"no SELECT on \\\"secret\\\"\"]}}");
	r = refusal(REFUSAL_HANDLE_MISMATCH, NULL, NULL, 0);
	ANSWER(&r, 400, 0,
		   "{\"message\":\"The specified shape definition and handle do not match. "
		   "Please ensure the shape definition is correct or omit the shape handle "
		   "from the request to obtain a new one.\"}");
	r = refusal(REFUSAL_NO_SUCH_SHAPE, NULL, NULL, 0);
	ANSWER(&r, 404, 0, "{\"message\":\"No existing shape found\"}");
	r = refusal(REFUSAL_NOT_RESOLVED, NULL, "could not obtain lock on relation \"t\"", 0);
	ANSWER(&r, 503, 5, "{\"message\":\"could not obtain lock on relation \\\"t\\\"\"}");
	r = refusal(REFUSAL_NOT_RESOLVED, NULL, NULL, 0);
	ANSWER(&r, 503, 5, "{\"message\":\"internal error\"}");
	r = refusal(REFUSAL_SKIPPING_WAL, NULL, NULL, 0);
	ANSWER(&r, 503, 1,
		   "{\"message\":\"The server is skipping the WAL written before it started, please retry\"}");
}

/*
 * The fuzz finding of seed 3179421464: PostgreSQL's jsonpath error quoted
 * the clause cut after the first byte of U+FEFF, and the body went out as
 * it was, not UTF-8.  Such bytes become U+FFFD; whole characters stay.
 */
TEST(text_cut_inside_a_character_stays_utf8)
{
	Refusal		r;

	r = refusal(REFUSAL_INVALID, "where", "at or near \".214748\xEF\" of jsonpath input", 0);
	ANSWER(&r, 400, 0,
		   "{\"message\":\"Invalid request\",\"errors\":{\"where\":"
		   "[\"at or near \\\".214748\xEF\xBF\xBD\\\" of jsonpath input\"]}}");
	r = refusal(REFUSAL_SNAPSHOT_FAILED, NULL, "caf\xC3\xA9 \xE2\x82", 0);
	ANSWER(&r, 500, 0, "{\"message\":\"The shape's snapshot failed: caf\xC3\xA9 \xEF\xBF\xBD\xEF\xBF\xBD\"}");
}

TEST(limit_refusals)
{
	Refusal		r;

	r = refusal(REFUSAL_CLIENT_NEW_SHAPES, NULL, NULL, 20);
	r.retry_after_s = 37;
	ANSWER(&r, 503, 37,
		   "{\"message\":\"This client created 20 new shapes in the last minute, as many as "
		   "\\\"shape_sync.max_new_shapes_per_client\\\" allows, please retry later\"}");
	r = refusal(REFUSAL_CLIENT_REFUSED, NULL, NULL, 20);
	r.retry_after_s = 2;
	ANSWER(&r, 503, 2,
		   "{\"message\":\"This client sent 20 invalid shape definitions in the last minute, as many as "
		   "\\\"shape_sync.max_new_shapes_per_client\\\" allows, please retry later\"}");
	r = refusal(REFUSAL_SHAPES_FULL, NULL, NULL, 1000);
	ANSWER(&r, 503, 5,
		   "{\"message\":\"The server holds as many shapes as \\\"shape_sync.max_shapes\\\" (1000) "
		   "allows, all in use, please retry later\"}");
	r = refusal(REFUSAL_CONCURRENT_LIMIT, "initial", NULL, 300);
	r.retry_after_s = 7;
	ANSWER(&r, 503, 7,
		   "{\"code\":\"concurrent_request_limit_exceeded\",\"message\":"
		   "\"Concurrent initial request limit exceeded (limit: 300), please retry\"}");
	r = refusal(REFUSAL_NOT_READY, NULL, NULL, 0);
	ANSWER(&r, 503, 5, "{\"message\":\"the server is not ready, please retry\"}");
}

TEST(failed_snapshot_refusals)
{
	Refusal		r;

	/* PostgreSQL's words, quoted as they are */
	r = refusal(REFUSAL_SNAPSHOT_INVALID, NULL, "shape is too large: the shape needs 9 MB ", 0);
	ANSWER(&r, 400, 0, "{\"message\":\"shape is too large: the shape needs 9 MB \"}");
	r = refusal(REFUSAL_SNAPSHOT_UNAVAILABLE, NULL, "out of memory: \t", 0);
	ANSWER(&r, 503, 10, "{\"message\":\"out of memory: \\t\"}");
	/* the sentences the answers had when the snapshot worker wrote them */
	r = refusal(REFUSAL_SNAPSHOT_FORBIDDEN, NULL, "permission denied", 0);
	ANSWER(&r, 403, 0, "{\"message\":\"Forbidden: permission denied\"}");
	r = refusal(REFUSAL_SNAPSHOT_FAILED, NULL, "x", 0);
	ANSWER(&r, 500, 0, "{\"message\":\"The shape's snapshot failed: x\"}");
	r = refusal(REFUSAL_SNAPSHOT_TIMEOUT, NULL, NULL, 3000);
	ANSWER(&r, 400, 0, "{\"message\":\"The shape's snapshot took longer than the 3000 ms that "
		   "shape_sync.snapshot_statement_timeout allows; narrow the shape with a where clause\"}");
	r = refusal(REFUSAL_SNAPSHOT_ROW_TOO_SLOW, NULL, NULL, 50);
	ANSWER(&r, 400, 0, "{\"message\":\"The shape's where clause took longer than the 50 ms that "
		   "shape_sync.where_evaluation_timeout allows on one row\"}");
	r = refusal(REFUSAL_SNAPSHOT_ROW_FAILED, NULL, "division by zero", 0);
	ANSWER(&r, 400, 0, "{\"message\":\"The shape's where clause failed on a row of the table: "
		   "division by zero\"}");
	r = refusal(REFUSAL_SNAPSHOT_CANCELLED, NULL, NULL, 0);
	ANSWER(&r, 503, 10, "{\"message\":\"The shape's snapshot was cancelled, please retry\"}");
	r = refusal(REFUSAL_SNAPSHOT_CONFLICT, NULL, "could not serialize access", 0);
	ANSWER(&r, 503, 10, "{\"message\":\"The shape's snapshot could not be taken: could not "
		   "serialize access, please retry\"}");
	r = refusal(REFUSAL_SNAPSHOT_TABLE_BUSY, NULL, NULL, 100);
	ANSWER(&r, 503, 10, "{\"message\":\"The table is in use: REPLICA IDENTITY FULL could not be "
		   "set within 100 ms, please retry\"}");
	r = refusal(REFUSAL_SNAPSHOT_WORKER_STOPPED, NULL, NULL, 0);
	ANSWER(&r, 500, 0, "{\"message\":\"The snapshot worker stopped before the snapshot was "
		   "complete, please retry\"}");
	r = refusal(REFUSAL_STREAM_CHANGE_TOO_SLOW, NULL, NULL, 50);
	ANSWER(&r, 400, 0, "{\"message\":\"The shape's where clause took longer than the 50 ms that "
		   "shape_sync.where_evaluation_timeout allows on one change of its table\"}");
	r = refusal(REFUSAL_MUST_REFETCH, NULL, "The shape's snapshot was interrupted", 0);
	ANSWER(&r, 409, 0, NULL);
}

TEST(subset_refusals)
{
	Refusal		r;

	r = refusal(REFUSAL_SUBSET_PAGING, NULL, NULL, 0);
	r.paging = REFUSAL_PAGING_LIMIT_INVALID | REFUSAL_PAGING_OFFSET_NEGATIVE |
		REFUSAL_PAGING_NO_ORDER_BY;
	ANSWER(&r, 400, 0,
		   "{\"message\":\"Invalid request\",\"errors\":{\"subset\":{\"limit\":[\"is invalid\"],"
		   "\"offset\":[\"must be greater than or equal to 0\"],"
		   "\"order_by\":[\"order_by is required when limit or offset is present\"]}}}");
	r.paging = REFUSAL_PAGING_OFFSET_INVALID;
	ANSWER(&r, 400, 0,
		   "{\"message\":\"Invalid request\",\"errors\":{\"subset\":{\"offset\":[\"is invalid\"]}}}");
	r.paging = REFUSAL_PAGING_LIMIT_NOT_POSITIVE;
	ANSWER(&r, 400, 0,
		   "{\"message\":\"Invalid request\",\"errors\":{\"subset\":{\"limit\":[\"must be greater than 0\"]}}}");
	r = refusal(REFUSAL_BODY_NOT_OBJECT, NULL, NULL, 0);
	ANSWER(&r, 400, 0, "{\"error\":\"Request body must be a JSON object\"}");
	r = refusal(REFUSAL_BODY_INVALID, "body", "invalid input syntax for type json", 0);
	ANSWER(&r, 400, 0,
		   "{\"error\":\"Invalid JSON in request body\",\"details\":\"invalid input syntax for type json\"}");
	r = refusal(REFUSAL_SUBSET_INVALID, "order_by", "must name columns", 0);
	ANSWER(&r, 400, 0,
		   "{\"message\":\"Invalid request\",\"errors\":{\"subset\":{\"order_by\":[\"must name columns\"]}}}");
	r = refusal(REFUSAL_SUBSET_FORBIDDEN, "where", "no SELECT on b", 0);
	ANSWER(&r, 403, 0,
		   "{\"message\":\"Forbidden\",\"errors\":{\"subset\":{\"where\":[\"no SELECT on b\"]}}}");
	r = refusal(REFUSAL_SUBSET_SHAPE_FORBIDDEN, NULL, "permission denied for table t", 0);
	ANSWER(&r, 403, 0,
		   "{\"message\":\"Forbidden\",\"errors\":{\"table\":[\"permission denied for table t\"]}}");
	r = refusal(REFUSAL_SUBSET_TIMEOUT, NULL, NULL, 250);
	ANSWER(&r, 400, 0,
		   "{\"message\":\"The subset query took longer than the 250 ms that "
		   "shape_sync.subset_statement_timeout allows; narrow it with a where clause or a limit\"}");
	r = refusal(REFUSAL_SUBSET_RETRY, NULL, "out of memory", 0);
	ANSWER(&r, 503, 5, "{\"message\":\"out of memory, please retry\"}");
	r = refusal(REFUSAL_SUBSET_TOO_LARGE, NULL, "the answer is too large", 0);
	ANSWER(&r, 400, 0,
		   "{\"message\":\"the answer is too large; narrow it with a where clause or a limit\"}");
	r = refusal(REFUSAL_SUBSET_ROW_FAILED, NULL, "division by zero", 0);
	ANSWER(&r, 400, 0,
		   "{\"message\":\"Invalid request\",\"errors\":{\"subset\":{\"where\":"
		   "[\"The where clause failed on a row of the table: division by zero\"]}}}");
	r = refusal(REFUSAL_SUBSET_ROW_TOO_SLOW, NULL, NULL, 50);
	ANSWER(&r, 400, 0,
		   "{\"message\":\"Invalid request\",\"errors\":{\"subset\":{\"where\":[\"The where clause "
		   "took longer than the 50 ms that shape_sync.where_evaluation_timeout allows on one row\"]}}}");
	r = refusal(REFUSAL_SUBSET_FAILED, NULL, "could not open file", 0);
	ANSWER(&r, 500, 0, "{\"message\":\"The subset query failed: could not open file\"}");
	r = refusal(REFUSAL_SUBSET_WORKER_STOPPED, NULL, NULL, 0);
	ANSWER(&r, 503, 5,
		   "{\"message\":\"The snapshot worker stopped before the subset query was complete, please retry\"}");
	r = refusal(REFUSAL_SUBSET_UNANSWERED, NULL, NULL, 0);
	ANSWER(&r, 503, 5, "{\"message\":\"The subset query failed\"}");
	r = refusal(REFUSAL_SUBSET_WAIT_TIMEOUT, NULL, NULL, 0);
	ANSWER(&r, 503, 5,
		   "{\"message\":\"The subset query did not finish within shape_sync.snapshot_wait_timeout, "
		   "please retry\"}");
	r = refusal(REFUSAL_MUST_REFETCH, NULL, NULL, 0);
	ANSWER(&r, 409, 0, NULL);
}

TEST(subset_text_lost_in_a_full_arena)
{
	/* record 0 did not fit: the answer says only that the query failed */
	Refusal		r = refusal(REFUSAL_SUBSET_INVALID, "where", NULL, 0);

	ANSWER(&r, 400, 0, "{\"message\":\"The subset query failed\"}");
	r = refusal(REFUSAL_SUBSET_RETRY, NULL, NULL, 0);
	ANSWER(&r, 503, 5, "{\"message\":\"The subset query failed\"}");
}

TEST(unknown_reason_is_an_internal_error)
{
	Refusal		r = refusal((RefusalReason) 9999, NULL, NULL, 0);

	ANSWER(&r, 500, 0, "{\"message\":\"internal error\"}");
	r = refusal(REFUSAL_NONE, NULL, NULL, 0);
	ANSWER(&r, 500, 0, "{\"message\":\"internal error\"}");
}

TEST(set_and_free)
{
	Refusal		r = {0};

	REQUIRE(refusal_set(&r, REFUSAL_INVALID, "where", "bad"));
	CHECK_STR_EQ(r.field, "where");
	CHECK_STR_EQ(r.text, "bad");
	REQUIRE(refusal_set(&r, REFUSAL_NOT_RESOLVED, NULL, "again"));	/* frees the first */
	CHECK(r.field == NULL);
	CHECK_STR_EQ(r.text, "again");
	refusal_free(&r);
	CHECK(r.reason == REFUSAL_NONE && r.text == NULL);
}

UNIT_MAIN()
