/*-------------------------------------------------------------------------
 *
 * subset_serve.h
 *		Subset queries of a shape: GET with subset__* parameters, or POST.
 *
 * IDENTIFICATION
 *	  src/net/subset_serve.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef SUBSET_SERVE_H
#define SUBSET_SERVE_H

#include <microhttpd.h>

#include "http_conn.h"

extern bool subset_is_requested(const ShapeConn *sc);
extern unsigned subset_client_bucket(uint64_t seed, uint64_t key);
extern void subset_take_body(ShapeConn *sc, const char *data, size_t size);
extern bool subset_start(ShapeConn *sc, enum MHD_Result *answered);
extern enum MHD_Result subset_respond(ShapeConn *sc);
extern void subset_conn_free(ShapeConn *sc);

#endif							/* SUBSET_SERVE_H */
