/*
 * deadline_bench.c: the cost per write of arming and clearing a stall
 * deadline, three ways, with 1 and with several writer threads.
 *
 *   slot   shape_sync's design (src/net/conn_table.h): each connection stores
 *          its deadline in its own cache-line-aligned slot; arm and clear are
 *          one relaxed atomic store each.  The deadline thread's sweep is
 *          measured separately (its cost grows with connections, not writes).
 *   heap   a shared min-heap of deadlines under one mutex: insert on arm,
 *          remove on clear (a timer structure updated per write).
 *   queue  a message per arm and per clear to one consumer thread that keeps
 *          the deadlines (the "cast to a GenServer" design of the seed); the
 *          time includes draining what the writers left queued.
 *
 * Each "write" is one arm/clear pair.  Prints one line per (design,
 * threads): nanoseconds per write, aggregate over all threads (wall time /
 * total writes).  Usage: deadline_bench [writes_per_thread] [max_threads]
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static long writes_per_thread = 2000000;

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int64_t
coarse_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (int64_t) ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ------------------------------------------------------------------ slot */

typedef struct
{
	_Alignas(128) _Atomic int64_t deadline;
} Slot;

static Slot *slots;

static void *
slot_writer(void *arg)
{
	Slot	   *s = &slots[(intptr_t) arg];

	for (long i = 0; i < writes_per_thread; i++)
	{
		atomic_store_explicit(&s->deadline, coarse_ms() + 60000, memory_order_relaxed);
		atomic_store_explicit(&s->deadline, 0, memory_order_relaxed);
	}
	return NULL;
}

/* ------------------------------------------------------------------ heap */

typedef struct
{
	int64_t		deadline;
	int			owner;
} HeapEntry;

static pthread_mutex_t heap_lock = PTHREAD_MUTEX_INITIALIZER;
static HeapEntry *heap;
static int	heap_len;
static int *heap_pos;			/* owner -> index */

static void
heap_swap(int a, int b)
{
	HeapEntry	t = heap[a];

	heap[a] = heap[b];
	heap[b] = t;
	heap_pos[heap[a].owner] = a;
	heap_pos[heap[b].owner] = b;
}

static void
heap_fix(int i)
{
	while (i > 0 && heap[(i - 1) / 2].deadline > heap[i].deadline)
	{
		heap_swap(i, (i - 1) / 2);
		i = (i - 1) / 2;
	}
	for (;;)
	{
		int			l = 2 * i + 1,
					m = i;

		if (l < heap_len && heap[l].deadline < heap[m].deadline)
			m = l;
		if (l + 1 < heap_len && heap[l + 1].deadline < heap[m].deadline)
			m = l + 1;
		if (m == i)
			return;
		heap_swap(i, m);
		i = m;
	}
}

static void *
heap_writer(void *arg)
{
	int			me = (int) (intptr_t) arg;

	for (long i = 0; i < writes_per_thread; i++)
	{
		pthread_mutex_lock(&heap_lock);
		heap[heap_len].deadline = coarse_ms() + 60000;
		heap[heap_len].owner = me;
		heap_pos[me] = heap_len++;
		heap_fix(heap_len - 1);
		pthread_mutex_unlock(&heap_lock);

		pthread_mutex_lock(&heap_lock);
		{
			int			at = heap_pos[me];

			heap_len--;
			if (at != heap_len)
			{
				heap[at] = heap[heap_len];
				heap_pos[heap[at].owner] = at;
				heap_fix(at);
			}
		}
		pthread_mutex_unlock(&heap_lock);
	}
	return NULL;
}

/* ----------------------------------------------------------------- queue */

typedef struct
{
	int			owner;
	int64_t		deadline;		/* 0: clear */
} Msg;

#define QCAP 65536
static Msg	queue[QCAP];
static long q_head,
			q_tail;
static pthread_mutex_t q_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t q_nonempty = PTHREAD_COND_INITIALIZER;
static pthread_cond_t q_nonfull = PTHREAD_COND_INITIALIZER;
static int	q_producers_left;
static int64_t *consumer_deadlines;

static void
q_send(Msg m)
{
	pthread_mutex_lock(&q_lock);
	while (q_tail - q_head == QCAP)
		pthread_cond_wait(&q_nonfull, &q_lock);
	queue[q_tail++ % QCAP] = m;
	pthread_cond_signal(&q_nonempty);
	pthread_mutex_unlock(&q_lock);
}

static void *
queue_writer(void *arg)
{
	int			me = (int) (intptr_t) arg;

	for (long i = 0; i < writes_per_thread; i++)
	{
		q_send((Msg) {me, coarse_ms() + 60000});
		q_send((Msg) {me, 0});
	}
	pthread_mutex_lock(&q_lock);
	q_producers_left--;
	pthread_cond_signal(&q_nonempty);
	pthread_mutex_unlock(&q_lock);
	return NULL;
}

static void *
queue_consumer(void *unused)
{
	Msg			batch[1024];

	(void) unused;

	for (;;)
	{
		int			n = 0;

		pthread_mutex_lock(&q_lock);
		while (q_tail == q_head && q_producers_left > 0)
			pthread_cond_wait(&q_nonempty, &q_lock);
		if (q_tail == q_head && q_producers_left == 0)
		{
			pthread_mutex_unlock(&q_lock);
			return NULL;
		}
		while (q_head < q_tail && n < 1024)
			batch[n++] = queue[q_head++ % QCAP];
		pthread_cond_broadcast(&q_nonfull);
		pthread_mutex_unlock(&q_lock);
		for (int i = 0; i < n; i++)
			consumer_deadlines[batch[i].owner] = batch[i].deadline;
	}
}

/* ------------------------------------------------------------------ main */

static double
run(const char *design, int nthreads)
{
	pthread_t	threads[256];
	pthread_t	consumer;
	void	   *(*writer) (void *) = strcmp(design, "slot") == 0 ? slot_writer :
		strcmp(design, "heap") == 0 ? heap_writer : queue_writer;
	double		start;

	heap_len = 0;
	q_head = q_tail = 0;
	q_producers_left = nthreads;
	if (strcmp(design, "queue") == 0)
		pthread_create(&consumer, NULL, queue_consumer, NULL);
	start = now_s();
	for (int i = 0; i < nthreads; i++)
		pthread_create(&threads[i], NULL, writer, (void *) (intptr_t) i);
	for (int i = 0; i < nthreads; i++)
		pthread_join(threads[i], NULL);
	if (strcmp(design, "queue") == 0)
		pthread_join(consumer, NULL);
	return (now_s() - start) * 1e9 / ((double) writes_per_thread * nthreads);
}

/* Time to sweep n slots, as the deadline thread does, none expired. */
static double
sweep_ns(int n)
{
	Slot	   *many = aligned_alloc(128, sizeof(Slot) * (size_t) n);
	double		start;
	int			expired = 0;
	int64_t		now = coarse_ms();

	for (int i = 0; i < n; i++)
		atomic_init(&many[i].deadline, i % 2 ? now + 60000 : 0);
	start = now_s();
	for (int rep = 0; rep < 20; rep++)
		for (int i = 0; i < n; i++)
		{
			int64_t		d = atomic_load_explicit(&many[i].deadline, memory_order_relaxed);

			if (d != 0 && d <= now)
				expired++;
		}
	free(many);
	return (now_s() - start) * 1e9 / 20 + expired;
}

int
main(int argc, char **argv)
{
	int			max_threads = 8;

	if (argc > 1)
		writes_per_thread = atol(argv[1]);
	if (argc > 2)
		max_threads = atoi(argv[2]);
	if (max_threads > 256)
		max_threads = 256;
	slots = aligned_alloc(128, sizeof(Slot) * 256);
	heap = calloc(256, sizeof(HeapEntry));
	heap_pos = calloc(256, sizeof(int));
	consumer_deadlines = calloc(256, sizeof(int64_t));
	for (int i = 0; i < 256; i++)
		atomic_init(&slots[i].deadline, 0);

	printf("design threads ns_per_write\n");
	for (int t = 1; t <= max_threads; t *= 2)
	{
		const char *designs[] = {"slot", "heap", "queue"};

		for (int d = 0; d < 3; d++)
			printf("%s %d %.1f\n", designs[d], t, run(designs[d], t));
		fflush(stdout);
	}
	printf("sweep_10k_ns %.0f\n", sweep_ns(10000));
	printf("sweep_100k_ns %.0f\n", sweep_ns(100000));
	return 0;
}
