/*-------------------------------------------------------------------------
 *
 * sse_stream.h
 *		A live shape request answered as Server-Sent Events.
 *
 * IDENTIFICATION
 *	  src/net/sse_stream.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SSE_STREAM_H
#define SSE_STREAM_H

#include <microhttpd.h>

#include "http_conn.h"

extern enum MHD_Result sse_respond(ShapeConn *sc, const SlogPublished *pub,
								   const SlogRange *range, bool hold,
								   const char *cursor);

#endif							/* SSE_STREAM_H */
