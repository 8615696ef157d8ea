/*-------------------------------------------------------------------------
 *
 * refusal_render.c
 *		What the client reads of a refusal: status, body, retry-after.
 *
 * This file runs on libmicrohttpd threads and must not call into
 * PostgreSQL.
 *
 * The PostgreSQL side says why a request is refused (refusal.h); this file
 * alone turns the reason and its facts into the answer, in the shapes
 * Electric's clients read:
 *	- {"message":"Invalid request","errors":{"<field>":["<text>"]}} (400)
 *	  and {"message":"Forbidden","errors":{...}} (403) for what the client
 *	  asked wrong, with {"subset":{"<field>":[...]}} for a subset's fields;
 *	- {"error":"...","details":"..."} for a POST body that is no JSON object;
 *	- {"message":"<sentence>"} for everything else, with retry-after on a
 *	  503;
 *	- 409 must-refetch for a shape that is made again.
 * Every string is escaped as PostgreSQL's escape_json does (json_text.c),
 * so a text reaches the client as the PostgreSQL side wrote it, except
 * bytes that are not UTF-8, which become U+FFFD: a sentence cut at
 * SHAPE_ERROR_LEN, or an error PostgreSQL cut itself (a jsonpath's), may
 * end in the middle of a character, and the body must stay JSON.
 *
 * IDENTIFICATION
 *	  src/net/refusal_render.c
 *
 *-------------------------------------------------------------------------
 */
#include "refusal_render.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "json_text.h"

#ifdef POSTGRES_H
#error "refusal_render.c runs on HTTP threads and must not include postgres.h"
#endif

/* The answer of a reason apart from its body. */
typedef struct RenderRule
{
	unsigned	status;
	unsigned	retry_after_s;	/* 503: unless the refusal says */
	const char *sentence;		/* the body is {"message":sentence} */
	bool		subset_text;	/* a subset query's text: lost (it did not
								 * fit in the cell's log), the answer only
								 * says that the query failed */
} RenderRule;

static const RenderRule rr_rules[] = {
	[REFUSAL_NONE] = {500, 0, NULL, false},
	[REFUSAL_INVALID] = {400, 0, NULL, false},
	[REFUSAL_FORBIDDEN] = {403, 0, NULL, false},
	[REFUSAL_HANDLE_MISMATCH] = {400, 0,
		"The specified shape definition and handle do not match. "
		"Please ensure the shape definition is correct or omit the shape handle "
	"from the request to obtain a new one.", false},
	[REFUSAL_NO_SUCH_SHAPE] = {404, 0, "No existing shape found", false},
	[REFUSAL_NOT_RESOLVED] = {503, 5, NULL, false},
	[REFUSAL_SKIPPING_WAL] = {503, 1,
	"The server is skipping the WAL written before it started, please retry", false},
	[REFUSAL_CLIENT_NEW_SHAPES] = {503, 5, NULL, false},
	[REFUSAL_CLIENT_REFUSED] = {503, 5, NULL, false},
	[REFUSAL_SHAPES_FULL] = {503, 5, NULL, false},
	[REFUSAL_CONCURRENT_LIMIT] = {503, 5, NULL, false},
	[REFUSAL_SNAPSHOT_INVALID] = {400, 0, NULL, false},
	[REFUSAL_SNAPSHOT_FORBIDDEN] = {403, 0, NULL, false},
	[REFUSAL_SNAPSHOT_UNAVAILABLE] = {503, 10, NULL, false},
	[REFUSAL_SNAPSHOT_FAILED] = {500, 0, NULL, false},
	[REFUSAL_SNAPSHOT_TIMEOUT] = {400, 0, NULL, false},
	[REFUSAL_SNAPSHOT_ROW_TOO_SLOW] = {400, 0, NULL, false},
	[REFUSAL_SNAPSHOT_ROW_FAILED] = {400, 0, NULL, false},
	[REFUSAL_SNAPSHOT_CANCELLED] = {503, 10, NULL, false},
	[REFUSAL_SNAPSHOT_CONFLICT] = {503, 10, NULL, false},
	[REFUSAL_SNAPSHOT_TABLE_BUSY] = {503, 10, NULL, false},
	[REFUSAL_SNAPSHOT_WORKER_STOPPED] = {500, 0, NULL, false},
	[REFUSAL_STREAM_CHANGE_TOO_SLOW] = {400, 0, NULL, false},
	[REFUSAL_MUST_REFETCH] = {409, 0, NULL, false},
	[REFUSAL_SUBSET_SHAPE_DROPPED] = {503, 5, "The shape was dropped, please retry", false},
	[REFUSAL_SUBSET_BUSY] = {503, 5,
	"The server cannot take another subset query now, please retry", false},
	[REFUSAL_SUBSET_SHAPE_FAILED] = {503, 5, "The shape's snapshot failed, please retry", false},
	[REFUSAL_SUBSET_WAIT_TIMEOUT] = {503, 5,
		"The subset query did not finish within shape_sync.snapshot_wait_timeout, "
	"please retry", false},
	[REFUSAL_SUBSET_SHUTDOWN] = {503, 5, "The server is shutting down, please retry", false},
	[REFUSAL_SUBSET_PAGING] = {400, 0, NULL, false},
	[REFUSAL_BODY_NOT_OBJECT] = {400, 0, NULL, false},
	[REFUSAL_BODY_INVALID] = {400, 0, NULL, true},
	[REFUSAL_SUBSET_INVALID] = {400, 0, NULL, true},
	[REFUSAL_SUBSET_FORBIDDEN] = {403, 0, NULL, true},
	[REFUSAL_SUBSET_SHAPE_FORBIDDEN] = {403, 0, NULL, true},
	[REFUSAL_SUBSET_TIMEOUT] = {400, 0, NULL, false},
	[REFUSAL_SUBSET_CANCELLED] = {503, 5, "The subset query was cancelled, please retry", false},
	[REFUSAL_SUBSET_RETRY] = {503, 5, NULL, true},
	[REFUSAL_SUBSET_TOO_LARGE] = {400, 0, NULL, true},
	[REFUSAL_SUBSET_ROW_FAILED] = {400, 0, NULL, true},
	[REFUSAL_SUBSET_ROW_TOO_SLOW] = {400, 0, NULL, false},
	[REFUSAL_SUBSET_WORKER_STOPPED] = {503, 5,
		"The snapshot worker stopped before the subset query was complete, please retry",
	false},
	[REFUSAL_SUBSET_FAILED] = {500, 0, NULL, true},
	[REFUSAL_SUBSET_UNANSWERED] = {503, 5, "The subset query failed", false},
	[REFUSAL_NOT_READY] = {503, 5, "the server is not ready, please retry", false},
};

#define RR_NRULES	(sizeof(rr_rules) / sizeof(rr_rules[0]))

/* Appends prefix, text and suffix as one JSON string literal, quotes included. */
static void
rr_put_string3(JsonBuf *buf, const char *prefix, const char *text, const char *suffix)
{
	const char *parts[3] = {prefix, text, suffix};

	json_buf_putc(buf, '"');
	for (int i = 0; i < 3; i++)
	{
		if (parts[i] != NULL)
			json_buf_put_escaped(buf, parts[i]);
	}
	json_buf_putc(buf, '"');
}

/* {"message":"<prefix><text><suffix>"} */
static void
rr_message(JsonBuf *buf, const char *prefix, const char *text, const char *suffix)
{
	json_buf_puts(buf, "{\"message\":");
	rr_put_string3(buf, prefix, text, suffix);
	json_buf_putc(buf, '}');
}

/*
 * {"message":"<headline>","errors":{"<field>":["<text>"]}}, the field
 * inside {"subset":{...}} for a subset's.
 */
static void
rr_errors(JsonBuf *buf, const char *headline, bool subset, const char *field,
		  const char *prefix, const char *text)
{
	json_buf_puts(buf, "{\"message\":");
	json_buf_put_string(buf, headline);
	json_buf_puts(buf, subset ? ",\"errors\":{\"subset\":{" : ",\"errors\":{");
	json_buf_put_string(buf, field);
	json_buf_puts(buf, ":[");
	rr_put_string3(buf, prefix, text, NULL);
	json_buf_puts(buf, subset ? "]}}}" : "]}}");
}

/* limit, offset and order_by, each with its one message, in that order */
static void
rr_paging(JsonBuf *buf, uint32_t paging)
{
	const char *sep = "";

	json_buf_puts(buf, "{\"message\":\"Invalid request\",\"errors\":{\"subset\":{");
	if (paging & (REFUSAL_PAGING_LIMIT_INVALID | REFUSAL_PAGING_LIMIT_NOT_POSITIVE))
	{
		json_buf_puts(buf, (paging & REFUSAL_PAGING_LIMIT_INVALID) ?
					  "\"limit\":[\"is invalid\"]" :
					  "\"limit\":[\"must be greater than 0\"]");
		sep = ",";
	}
	if (paging & (REFUSAL_PAGING_OFFSET_INVALID | REFUSAL_PAGING_OFFSET_NEGATIVE))
	{
		json_buf_puts(buf, sep);
		json_buf_puts(buf, (paging & REFUSAL_PAGING_OFFSET_INVALID) ?
					  "\"offset\":[\"is invalid\"]" :
					  "\"offset\":[\"must be greater than or equal to 0\"]");
		sep = ",";
	}
	if (paging & REFUSAL_PAGING_NO_ORDER_BY)
	{
		json_buf_puts(buf, sep);
		json_buf_puts(buf,
					  "\"order_by\":[\"order_by is required when limit or offset is present\"]");
	}
	json_buf_puts(buf, "}}}");
}

bool
refusal_render(const Refusal *r, RefusalAnswer *out)
{
	RefusalReason reason = r->reason;
	const RenderRule *rule;
	const char *text = r->text ? r->text : "";
	const char *field = r->field ? r->field : "";
	char		sentence[256];
	JsonBuf		buf;

	if ((unsigned) reason >= RR_NRULES || rr_rules[reason].status == 0)
		reason = REFUSAL_NONE;
	rule = &rr_rules[reason];
	out->status = rule->status;
	out->body = NULL;
	out->must_refetch = reason == REFUSAL_MUST_REFETCH;
	out->retry_after_s = 0;
	if (rule->status == 503)
		out->retry_after_s = r->retry_after_s ? r->retry_after_s : rule->retry_after_s;
	if (out->must_refetch)
		return true;

	json_buf_init(&buf);
	if (rule->subset_text && r->text == NULL)
	{
		rr_message(&buf, "The subset query failed", NULL, NULL);
		out->body = json_buf_finish(&buf);
		return out->body != NULL;
	}
	if (rule->sentence != NULL)
	{
		rr_message(&buf, rule->sentence, NULL, NULL);
		out->body = json_buf_finish(&buf);
		return out->body != NULL;
	}
	switch (reason)
	{
		case REFUSAL_INVALID:
			rr_errors(&buf, "Invalid request", false, field, NULL, text);
			break;
		case REFUSAL_FORBIDDEN:
			rr_errors(&buf, "Forbidden", false, r->field ? r->field : "table", NULL, text);
			break;
		case REFUSAL_NOT_RESOLVED:
			rr_message(&buf, r->text ? r->text : "internal error", NULL, NULL);
			break;
		case REFUSAL_CLIENT_NEW_SHAPES:
			snprintf(sentence, sizeof(sentence),
					 "This client created %" PRId64 " new shapes in the last minute, as many as "
					 "\"shape_sync.max_new_shapes_per_client\" allows, please retry later",
					 r->number);
			rr_message(&buf, sentence, NULL, NULL);
			break;
		case REFUSAL_CLIENT_REFUSED:
			snprintf(sentence, sizeof(sentence),
					 "This client sent %" PRId64 " invalid shape definitions in the last minute, "
					 "as many as \"shape_sync.max_new_shapes_per_client\" allows, please retry later",
					 r->number);
			rr_message(&buf, sentence, NULL, NULL);
			break;
		case REFUSAL_SHAPES_FULL:
			snprintf(sentence, sizeof(sentence),
					 "The server holds as many shapes as \"shape_sync.max_shapes\" (%" PRId64 ") "
					 "allows, all in use, please retry later",
					 r->number);
			rr_message(&buf, sentence, NULL, NULL);
			break;
		case REFUSAL_CONCURRENT_LIMIT:
			/* Electric's body: a code beside the message */
			json_buf_puts(&buf, "{\"code\":\"concurrent_request_limit_exceeded\",\"message\":");
			snprintf(sentence, sizeof(sentence), " request limit exceeded (limit: %" PRId64 "), please retry",
					 r->number);
			rr_put_string3(&buf, "Concurrent ", field, sentence);
			json_buf_putc(&buf, '}');
			break;
		case REFUSAL_SNAPSHOT_INVALID:
		case REFUSAL_SNAPSHOT_FORBIDDEN:
		case REFUSAL_SNAPSHOT_UNAVAILABLE:
		case REFUSAL_SNAPSHOT_FAILED:
		case REFUSAL_SNAPSHOT_TIMEOUT:
		case REFUSAL_SNAPSHOT_ROW_TOO_SLOW:
		case REFUSAL_SNAPSHOT_ROW_FAILED:
		case REFUSAL_SNAPSHOT_CANCELLED:
		case REFUSAL_SNAPSHOT_CONFLICT:
		case REFUSAL_SNAPSHOT_TABLE_BUSY:
		case REFUSAL_SNAPSHOT_WORKER_STOPPED:
		case REFUSAL_STREAM_CHANGE_TOO_SLOW:
			{
				char		failure[REFUSAL_SENTENCE_MAX];

				refusal_failure_sentence(reason, r->number, r->text, failure, sizeof(failure));
				rr_message(&buf, failure, NULL, NULL);
			}
			break;
		case REFUSAL_SUBSET_PAGING:
			rr_paging(&buf, r->paging);
			break;
		case REFUSAL_BODY_NOT_OBJECT:
			json_buf_puts(&buf, "{\"error\":\"Request body must be a JSON object\"}");
			break;
		case REFUSAL_BODY_INVALID:
			json_buf_puts(&buf, "{\"error\":\"Invalid JSON in request body\",\"details\":");
			json_buf_put_string(&buf, text);
			json_buf_putc(&buf, '}');
			break;
		case REFUSAL_SUBSET_INVALID:
			rr_errors(&buf, "Invalid request", true, field, NULL, text);
			break;
		case REFUSAL_SUBSET_FORBIDDEN:
			rr_errors(&buf, "Forbidden", true, field, NULL, text);
			break;
		case REFUSAL_SUBSET_SHAPE_FORBIDDEN:
			rr_errors(&buf, "Forbidden", false, "table", NULL, text);
			break;
		case REFUSAL_SUBSET_TIMEOUT:
			snprintf(sentence, sizeof(sentence),
					 "The subset query took longer than the %" PRId64 " ms that "
					 "shape_sync.subset_statement_timeout allows; narrow it with a where clause "
					 "or a limit",
					 r->number);
			rr_message(&buf, sentence, NULL, NULL);
			break;
		case REFUSAL_SUBSET_RETRY:
			rr_message(&buf, NULL, text, ", please retry");
			break;
		case REFUSAL_SUBSET_TOO_LARGE:
			rr_message(&buf, NULL, text, "; narrow it with a where clause or a limit");
			break;
		case REFUSAL_SUBSET_ROW_FAILED:
			rr_errors(&buf, "Invalid request", true, "where",
					  "The where clause failed on a row of the table: ", text);
			break;
		case REFUSAL_SUBSET_ROW_TOO_SLOW:
			snprintf(sentence, sizeof(sentence),
					 "The where clause took longer than the %" PRId64 " ms that "
					 "shape_sync.where_evaluation_timeout allows on one row",
					 r->number);
			rr_errors(&buf, "Invalid request", true, "where", NULL, sentence);
			break;
		case REFUSAL_SUBSET_FAILED:
			rr_message(&buf, "The subset query failed: ", text, NULL);
			break;
		default:
			/* REFUSAL_NONE, or a reason nobody should render */
			rr_message(&buf, "internal error", NULL, NULL);
			break;
	}
	out->body = json_buf_finish(&buf);
	return out->body != NULL;
}
