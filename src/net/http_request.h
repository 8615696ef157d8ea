/*-------------------------------------------------------------------------
 *
 * http_request.h
 *		libmicrohttpd's callbacks for a request's life, which
 *		http_server.c hands to each daemon (cls: the HttpServer).
 *
 * IDENTIFICATION
 *	  src/net/http_request.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef HTTP_REQUEST_H
#define HTTP_REQUEST_H

#include <microhttpd.h>

#include "http_conn.h"

extern void *http_request_begins(void *cls, const char *uri,
								 struct MHD_Connection *connection);
extern size_t http_unescape(void *cls, struct MHD_Connection *connection, char *s);
extern enum MHD_Result http_access(void *cls, struct MHD_Connection *connection,
								   const char *url, const char *method,
								   const char *version, const char *upload_data,
								   size_t *upload_data_size, void **con_cls);
extern void http_completed(void *cls, struct MHD_Connection *connection,
						   void **con_cls, enum MHD_RequestTerminationCode toe);
extern void http_connection_event(void *cls, struct MHD_Connection *connection,
								  void **socket_context,
								  enum MHD_ConnectionNotificationCode toe);

/* A connection turned away past the limit: counted, logged once a minute. */
extern void http_note_over_limit(HttpServer *server);

#endif							/* HTTP_REQUEST_H */
