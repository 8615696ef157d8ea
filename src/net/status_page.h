/*-------------------------------------------------------------------------
 *
 * status_page.h
 *		GET /: the operator's page, built into the server.
 *
 * IDENTIFICATION
 *	  src/net/status_page.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef STATUS_PAGE_H
#define STATUS_PAGE_H

#include <microhttpd.h>

/* Queues the page (200, text/html); the caller checked the request's access. */
extern enum MHD_Result http_respond_status_page(struct MHD_Connection *connection);

#endif							/* STATUS_PAGE_H */
