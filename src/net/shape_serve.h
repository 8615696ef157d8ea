/*-------------------------------------------------------------------------
 *
 * shape_serve.h
 *		/v1/shape: a request from its parameters to its response.
 *
 * IDENTIFICATION
 *	  src/net/shape_serve.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SHAPE_SERVE_H
#define SHAPE_SERVE_H

#include <microhttpd.h>

#include "http_conn.h"

/* Every call of libmicrohttpd's handler for the request goes here. */
extern enum MHD_Result shape_serve(HttpServer *server, struct MHD_Connection *connection,
								   ShapeConn *sc);

/* The request completed, however it ended: releases all it holds. */
extern void shape_conn_free(ShapeConn *sc);

#endif							/* SHAPE_SERVE_H */
