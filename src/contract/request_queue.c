/*-------------------------------------------------------------------------
 *
 * request_queue.c
 *		Shape requests that HTTP threads hand to the worker's main thread.
 *
 * A mutex-guarded FIFO plus an eventfd.  Pushing appends under the mutex and
 * writes the eventfd, which sits in the main thread's wait set, so the main
 * loop wakes without polling.  The main thread takes the whole list at once
 * and works on it without the lock.
 *
 * Notes on synchronization
 * ------------------------
 * - head, tail and closed are guarded by `lock`; nothing else is shared.
 * - A request belongs to the HTTP thread until push, to the main thread from
 *   take until it calls done(), and to the HTTP thread again afterwards.
 *   The mutex hand-offs order the definition before the main thread reads
 *   it; done() is responsible for ordering the result before the HTTP
 *   thread reads it (it resumes the connection through libmicrohttpd, whose
 *   internal mutex provides that).
 * - Once closed (at shutdown), push refuses and close() returns what was
 *   still queued, so no request is stranded.
 *
 * IDENTIFICATION
 *	  src/contract/request_queue.c
 *
 *-------------------------------------------------------------------------
 */
#include "request_queue.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

#ifdef POSTGRES_H
#error "request_queue.c runs on HTTP threads and must not include postgres.h"
#endif

int
request_queue_init(RequestQueue *queue)
{
	queue->head = NULL;
	queue->tail = NULL;
	queue->closed = false;
	queue->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (queue->wake_fd < 0)
		return -1;
	pthread_mutex_init(&queue->lock, NULL);
	return 0;
}

void
request_queue_destroy(RequestQueue *queue)
{
	if (queue->wake_fd >= 0)
		close(queue->wake_fd);
	queue->wake_fd = -1;
	pthread_mutex_destroy(&queue->lock);
}

/* Queues a request and wakes the main thread; false once the queue closed. */
bool
request_queue_push(RequestQueue *queue, ShapeRequest *req)
{
	uint64_t	one = 1;
	ssize_t		rc;

	req->next = NULL;
	pthread_mutex_lock(&queue->lock);
	if (queue->closed)
	{
		pthread_mutex_unlock(&queue->lock);
		return false;
	}
	if (queue->tail)
		queue->tail->next = req;
	else
		queue->head = req;
	queue->tail = req;
	pthread_mutex_unlock(&queue->lock);

	/* EAGAIN means the counter is saturated: the main thread wakes anyway */
	do
		rc = write(queue->wake_fd, &one, sizeof(one));
	while (rc < 0 && errno == EINTR);
	return true;
}

/* Takes every queued request, oldest first, and clears the wakeup. */
ShapeRequest *
request_queue_take_all(RequestQueue *queue)
{
	ShapeRequest *list;
	uint64_t	count;

	while (read(queue->wake_fd, &count, sizeof(count)) < 0 && errno == EINTR)
		;
	pthread_mutex_lock(&queue->lock);
	list = queue->head;
	queue->head = queue->tail = NULL;
	pthread_mutex_unlock(&queue->lock);
	return list;
}

/* Refuses further pushes and returns what was still queued. */
ShapeRequest *
request_queue_close(RequestQueue *queue)
{
	ShapeRequest *list;

	pthread_mutex_lock(&queue->lock);
	queue->closed = true;
	list = queue->head;
	queue->head = queue->tail = NULL;
	pthread_mutex_unlock(&queue->lock);
	return list;
}
