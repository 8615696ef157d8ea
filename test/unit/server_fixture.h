/*
 * server_fixture.h
 *		The in-process server fixture of test_http_server.c and
 *		test_waiters.c: a shape table and log arena in malloc'd memory, the
 *		real libmicrohttpd server on a free loopback port, and a fake main
 *		thread that resolves the server's shape requests from the request
 *		queue with the including file's resolver.
 *
 * The including file defines, before it includes this header, the enum of
 * its shapes ending in SH_COUNT and `shape_names[SH_COUNT]`, the table names
 * its resolver knows them by.  Everything here is static: each test program
 * has its own fixture.
 */
#ifndef SERVER_FIXTURE_H
#define SERVER_FIXTURE_H

#include <poll.h>
#include <pthread.h>

#include "unit.h"
#include "http_client.h"
#include "http_server.h"
#include "request_queue.h"
#include "shape_table.h"
#include "subset_results.h"
#include "unit_metrics.h"

#define PIECE_SIZE	16384		/* the server's write piece */
#define CONNECTION_MEMORY (12 * 1024)	/* libmicrohttpd's pool per connection */
#define TIMEOUT_S	20			/* a client's connect/receive timeout */

static void *arena_mem;
static void *table_mem;
static ShapeLogArena *arena;
static ShapeTable *table;
static RequestQueue queue;
static Admission admission;
static SubsetResults subsets;
static HttpServer *server;
static int	port;

static pthread_t main_thread;
static bool main_running;
static _Atomic bool main_stop;
static void (*main_resolver) (ShapeRequest *req);

static uint32_t handle_hash_base;
static uint32_t slot_of[SH_COUNT];
static uint32_t gen_of[SH_COUNT];

/* ------------------------------------------------ table, log and shapes */

/*
 * Allocates the arena (nblocks log blocks) and the table (nslots), opens
 * the queue and lets the admission take 1000 clients of each kind; shape
 * `which` will get its handle from hash hash_base + which.  False when
 * something could not be had.
 */
static inline bool
fixture_init(uint32_t nslots, uint64_t nblocks, uint32_t hash_base)
{
	size_t		asize = slog_arena_size(nblocks * SLOG_BLOCK_SIZE);

	arena_mem = aligned_alloc(SLOG_BLOCK_SIZE, asize);
	table_mem = malloc(shape_table_size(nslots));
	if (arena_mem == NULL || table_mem == NULL)
		return false;
	arena = slog_arena_init(arena_mem, asize);
	subset_results_init(&subsets);
	table = shape_table_init(table_mem, nslots, arena);
	handle_hash_base = hash_base;
	admission_init(&admission, 1000, 1000);
	unit_metrics_fresh();
	server_metrics.shapes = table;	/* for the sampled gauges */
	server_metrics.admission_in_use = admission.in_use;
	server_metrics.admission_limit = admission.limit;
	return request_queue_init(&queue) == 0;
}

/* Appends one record of `kind` to a slot's log at offset o. */
static inline void
append(uint32_t slot, LogOffset o, uint32_t kind, const char *payload, size_t len)
{
	SlogResult	res = slog_append(arena, shape_table_log(table, slot), o, kind, payload,
								  (uint32_t) len);

	if (res != SLOG_OK)
		FAIL("slog_append: %d", res);
}

/* Appends a NUL-terminated change record. */
static inline void
append_str(uint32_t slot, LogOffset o, const char *payload)
{
	append(slot, o, SLOG_RECORD_CHANGE, payload, strlen(payload));
}

/* Closes a slot's open chunk at `end`. */
static inline void
close_chunk(uint32_t slot, LogOffset end)
{
	if (slog_close_chunk(arena, shape_table_log(table, slot), end) != SLOG_OK)
		FAIL("slog_close_chunk failed");
}

/* Claims a slot for shape `which` in `state` and publishes its handle, as the registry does. */
static inline uint32_t
new_shape(int which, ShapeState state)
{
	uint32_t	slot = shape_table_claim(table);
	ShapeSlot  *s;

	if (slot == SHAPE_NO_SLOT)
	{
		FAIL("no free slot");
		return slot;
	}
	s = &table->slots[slot];
	shape_table_new_handle(table, handle_hash_base + (uint32_t) which, 1700000000000000LL,
						   s->handle);
	snprintf(s->relation, sizeof(s->relation), "\"public\".\"%s\"", shape_names[which]);
	shape_table_set_state(table, slot, state);
	slot_of[which] = slot;
	gen_of[which] = atomic_load(&s->generation);
	return slot;
}

/* A shape with a one-record snapshot (`record`), done: live requests park at its end. */
static inline uint32_t
new_live_shape(int which, const char *record)
{
	uint32_t	s = new_shape(which, SHAPE_SNAPSHOTTING);

	append_str(s, (LogOffset) {0, 0}, record);
	close_chunk(s, (LogOffset) {0, 0});
	shape_table_set_state(table, s, SHAPE_READY);
	slog_publish(shape_table_log(table, s), LOG_OFFSET_SNAPSHOT_END, SLOG_SNAPSHOT_DONE);
	return s;
}

/* A live shape's log grows by one change at (tx, 0), published; last_seen_lsn stays. */
static inline void
live_change(int which, int64_t tx, const char *payload)
{
	uint32_t	s = slot_of[which];

	append_str(s, (LogOffset) {tx, 0}, payload);
	slog_publish(shape_table_log(table, s), (LogOffset) {tx, 0}, SLOG_SNAPSHOT_DONE);
	shape_table_note_published(table, s);	/* as the main thread does */
}

/*
 * Serves a copy of a shape's log from now on, as compaction does: the same
 * records and chunks in the other version, swapped in; the old version goes
 * back to the arena when its last reader lets go.
 */
static inline void
swap_in_copy(int which)
{
	uint32_t	s = slot_of[which];
	ShapeLog   *old = shape_table_log(table, s);
	ShapeLog   *copy = shape_table_spare_log(table, s);
	SlogPublished pub;
	uint32_t	chunk = 0;
	char		buf[65536];

	if (copy == NULL)
	{
		FAIL("the spare log version is still read");
		return;
	}
	slog_read_published(old, &pub);
	for (uint64_t pos = 0; pos < pub.data_end;)
	{
		SlogRecordHeader hdr;
		SlogChunk	c;

		slog_read_header(arena, old, pos, &hdr);
		slog_copy_out(arena, old, pos + sizeof(hdr), buf, hdr.len);
		if (slog_append(arena, copy, (LogOffset) {hdr.tx, hdr.op}, hdr.kind, buf, hdr.len) != SLOG_OK)
			FAIL("copying the log");
		pos += slog_record_span(hdr.len);
		if (chunk < pub.chunk_count)
		{
			slog_chunk_read(arena, old, chunk, &c);
			if (pos == c.end_pos)
			{
				slog_close_chunk(arena, copy, (LogOffset) {c.end_tx, c.end_op});
				chunk++;
			}
		}
	}
	slog_publish(copy, pub.last, pub.flags);
	shape_table_swap_log(table, s);
}

static inline const char *
handle_of(int which)
{
	return table->slots[slot_of[which]].handle;
}

/* ------------------------------------------------ the fake main thread */

static void *
fake_main(void *arg)
{
	while (!atomic_load(&main_stop))
	{
		struct pollfd p = {queue.wake_fd, POLLIN, 0};
		ShapeRequest *list;

		poll(&p, 1, 20);
		list = request_queue_take_all(&queue);
		while (list != NULL)
		{
			ShapeRequest *next = list->next;	/* done() gives req away */

			main_resolver(list);
			list->done(list);
			list = next;
		}
	}
	return NULL;
}

/* Stops the fake main thread, if it runs: queued requests stay queued. */
static inline void
stop_fake_main(void)
{
	if (main_running)
	{
		atomic_store(&main_stop, true);
		pthread_join(main_thread, NULL);
		main_running = false;
	}
}

/* ------------------------------------------------------------ the server */

static inline int
probe_free_port(void)
{
	struct sockaddr_in sa;
	socklen_t	len = sizeof(sa);
	int			fd = socket(AF_INET, SOCK_STREAM, 0);
	int			p = -1;

	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd >= 0 && bind(fd, (struct sockaddr *) &sa, sizeof(sa)) == 0 &&
		getsockname(fd, (struct sockaddr *) &sa, &len) == 0)
		p = ntohs(sa.sin_port);
	if (fd >= 0)
		close(fd);
	return p;
}

/* Options for the fixture's server: 127.0.0.1, 4 threads, the fixture's table, queue and admission. */
static inline void
fixture_options(HttpServerOptions *opts, unsigned connection_limit, size_t send_buffer)
{
	memset(opts, 0, sizeof(*opts));
	opts->listen_addresses = "127.0.0.1";
	opts->admission = &admission;
	opts->subsets = &subsets;
	opts->threads = 4;
	opts->connection_limit = connection_limit;
	opts->write_piece_size = PIECE_SIZE;
	opts->connection_memory = CONNECTION_MEMORY;
	opts->socket_send_buffer = send_buffer;
	opts->shapes = table;
	opts->queue = &queue;
}

/*
 * Starts the server on a free port (a new one for each of ten tries, in
 * case another process takes it first), then the fake main thread
 * answering with `resolver`.  Fails the test and returns false when the
 * server did not start.
 */
static inline bool
fixture_start(HttpServerOptions *opts, const HttpRuntimeSettings *settings,
			  void (*resolver) (ShapeRequest *req))
{
	char		err[256] = "";

	for (int attempt = 0; attempt < 10 && server == NULL; attempt++)
	{
		port = probe_free_port();
		if (port <= 0)
			continue;
		opts->port = port;
		server = http_server_start(opts, settings, err, sizeof(err));
	}
	if (server == NULL)
	{
		FAIL("http_server_start: %s", err);
		return false;
	}
	main_resolver = resolver;
	pthread_create(&main_thread, NULL, fake_main, NULL);
	main_running = true;
	return true;
}

/* Stops the main thread and the server, closes the queue, frees the table and the arena. */
static inline void
fixture_cleanup(void)
{
	stop_fake_main();
	if (server != NULL)
	{
		http_server_stop(server);
		server = NULL;
	}
	request_queue_destroy(&queue);
	free(arena_mem);
	free(table_mem);
}

/* ------------------------------------------------------- observations */

/* A shape's pins, without the retired bit. */
static inline uint64_t
pins(int which)
{
	return atomic_load(&table->slots[slot_of[which]].pins) & ~SHAPE_PIN_RETIRED;
}

/* Waits until a shape's pin count is `want`; false after timeout_s. */
static inline bool
wait_pins(int which, uint64_t want, double timeout_s)
{
	double		until = unit_now() + timeout_s;

	while (unit_now() < until)
	{
		if (pins(which) == want)
			return true;
		usleep(2000);
	}
	return pins(which) == want;
}

/* Admitted requests of both kinds. */
static inline uint32_t
in_use(void)
{
	return atomic_load(&admission.in_use[ADMISSION_INITIAL]) +
		atomic_load(&admission.in_use[ADMISSION_EXISTING]);
}

/* ------------------------------------------------------------- clients */

/* A client connection left open, e.g. while its request is parked. */
typedef struct Client
{
	HcConn		c;
	bool		open;
} Client;

/* Opens a connection and sends one GET (Connection: close). */
static inline bool
client_get(Client *cl, const char *target)
{
	char		req[2048];

	cl->open = hc_open(&cl->c, port, TIMEOUT_S);
	if (!cl->open)
		return false;
	snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
			 target);
	return hc_send(&cl->c, req, strlen(req));
}

static inline void
client_close(Client *cl)
{
	if (cl->open)
		hc_close(&cl->c);
	cl->open = false;
}

#endif							/* SERVER_FIXTURE_H */
