/*-------------------------------------------------------------------------
 *
 * request_queue.h
 *		Shape requests that HTTP threads hand to the worker's main thread.
 *
 * Resolving a shape definition needs the catalog, which only the main
 * thread may touch.  An HTTP thread fills a ShapeRequest (shape_request.h),
 * suspends its connection and pushes the request; the main thread resolves
 * it, fills in the result and calls `done`, which resumes the connection.
 * Neither side ever waits for the other.
 *
 * IDENTIFICATION
 *	  src/contract/request_queue.h
 *
 *-------------------------------------------------------------------------
 */
#ifndef REQUEST_QUEUE_H
#define REQUEST_QUEUE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "shape_request.h"

typedef struct RequestQueue
{
	pthread_mutex_t lock;
	ShapeRequest *head;			/* FIFO, guarded by lock */
	ShapeRequest *tail;
	int			wake_fd;		/* eventfd the main thread waits on */
	bool		closed;			/* guarded by lock: push refuses once set */
} RequestQueue;

extern int	request_queue_init(RequestQueue *queue);
extern void request_queue_destroy(RequestQueue *queue);
extern bool request_queue_push(RequestQueue *queue, ShapeRequest *req);
extern ShapeRequest *request_queue_take_all(RequestQueue *queue);
extern ShapeRequest *request_queue_close(RequestQueue *queue);

#endif							/* REQUEST_QUEUE_H */
