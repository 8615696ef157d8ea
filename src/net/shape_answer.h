/*-------------------------------------------------------------------------
 *
 * shape_answer.h
 *		The answers of a shape request, and the log version it reads.
 *
 * IDENTIFICATION
 *	  src/net/shape_answer.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SHAPE_ANSWER_H
#define SHAPE_ANSWER_H

#include <microhttpd.h>

#include "http_conn.h"
#include "refusal.h"

/* The request has its answer queued. */
extern void shape_conn_responded(ShapeConn *sc);

extern enum MHD_Result shape_respond_error(ShapeConn *sc, unsigned status,
										   const char *body, int retry_after);
extern enum MHD_Result shape_respond_refusal(ShapeConn *sc, const Refusal *refusal);
extern enum MHD_Result shape_respond_unavailable(ShapeConn *sc, const char *message,
												 int retry_after);
extern enum MHD_Result shape_respond_must_refetch(ShapeConn *sc, const char *handle);
extern enum MHD_Result shape_respond_unreadable(ShapeConn *sc, const ShapeLog *log, int error);
extern void shape_note_unreadable_log(const ShapeLog *log, int error);
extern enum MHD_Result shape_respond_deleted(ShapeConn *sc);

/* The version of its shape's log a request reads. */
extern const ShapeLog *shape_conn_pin_log(ShapeConn *sc);
extern const ShapeLog *shape_conn_log(const ShapeConn *sc);
extern void shape_conn_unpin_log(ShapeConn *sc);

/*
 * The body of a 200: its length first (SHAPE_BODY_UNREADABLE when the
 * log's file could not be read), then the response that sends it.
 */
#define SHAPE_BODY_UNREADABLE	UINT64_MAX
extern uint64_t shape_body_measure(ShapeConn *sc);
extern struct MHD_Response *shape_body_response(ShapeConn *sc, uint64_t size);

/* The whole body, malloc'd, of the length measured; NULL on failure. */
extern char *shape_body_build(ShapeConn *sc, size_t size);

#endif							/* SHAPE_ANSWER_H */
