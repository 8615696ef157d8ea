/*-------------------------------------------------------------------------
 *
 * guc.c
 *		The shape_sync.* configuration parameters.
 *
 * Every parameter is defined here, with its unit, bounds and reload
 * behaviour.  Parameters that size shared memory or the HTTP daemons need a
 * restart (PGC_POSTMASTER); the rest take effect on reload (PGC_SIGHUP), the
 * worker applying them at its next loop iteration.  The names are part of
 * the interface: operators' configuration files use them.
 *
 * IDENTIFICATION
 *	  src/pg/guc.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "utils/guc.h"

#include "guc.h"

int			shape_sync_port = 3000;
char	   *shape_sync_listen_addresses = NULL;
char	   *shape_sync_database = NULL;
int			shape_sync_http_threads = 4;
int			shape_sync_max_connections = 10000;
int			shape_sync_chunk_bytes_threshold = 10 * 1024 * 1024;
int			shape_sync_log_memory = 128;
int			shape_sync_max_shapes = 1024;
int			shape_sync_max_snapshot_workers = 4;
int			shape_sync_write_piece_size = 256;
int			shape_sync_cache_max_age = 60;
int			shape_sync_cache_stale_age = 300;
int			shape_sync_long_poll_timeout = 20000;
bool		shape_sync_allow_shape_deletion = false;
int			shape_sync_max_concurrent_initial = 300;
int			shape_sync_max_concurrent_existing = 10000;
int			shape_sync_stalled_serve_timeout = 60000;
int			shape_sync_socket_send_buffer = 64;

void
shape_sync_define_gucs(void)
{
	DefineCustomIntVariable("shape_sync.port",
							"Sets the TCP port the HTTP server listens on.",
							NULL,
							&shape_sync_port,
							3000, 1, 65535,
							PGC_POSTMASTER, 0,
							NULL, NULL, NULL);

	DefineCustomStringVariable("shape_sync.listen_addresses",
							   "Sets the host names or IP addresses the HTTP server listens on.",
							   "A comma-separated list; \"*\" listens on every address.",
							   &shape_sync_listen_addresses,
							   "localhost",
							   PGC_POSTMASTER, GUC_LIST_INPUT,
							   NULL, NULL, NULL);

	DefineCustomStringVariable("shape_sync.database",
							   "Sets the database whose tables are served.",
							   NULL,
							   &shape_sync_database,
							   "postgres",
							   PGC_POSTMASTER, 0,
							   NULL, NULL, NULL);

	DefineCustomIntVariable("shape_sync.http_threads",
							"Sets the number of HTTP worker threads.",
							NULL,
							&shape_sync_http_threads,
							4, 1, 256,
							PGC_POSTMASTER, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("shape_sync.max_connections",
							"Sets the maximum number of concurrent HTTP connections.",
							"Each connection uses a file descriptor of the worker process.",
							&shape_sync_max_connections,
							10000, 16, 1000000,
							PGC_POSTMASTER, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("shape_sync.chunk_bytes_threshold",
							"Sets the size at which a shape log chunk is closed.",
							"Clients fetch a shape's log one chunk per request.",
							&shape_sync_chunk_bytes_threshold,
							10 * 1024 * 1024, 1024, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_BYTE,
							NULL, NULL, NULL);

	DefineCustomIntVariable("shape_sync.log_memory",
							"Sets the shared memory that holds shape logs.",
							NULL,
							&shape_sync_log_memory,
							128, 1, INT_MAX / 2,
							PGC_POSTMASTER, GUC_UNIT_MB,
							NULL, NULL, NULL);

	DefineCustomIntVariable("shape_sync.max_shapes",
							"Sets the maximum number of shapes held at once.",
							NULL,
							&shape_sync_max_shapes,
							1024, 1, 1000000,
							PGC_POSTMASTER, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("shape_sync.max_snapshot_workers",
							"Sets the maximum number of snapshots taken at once.",
							"Each snapshot runs in a background worker, counted against max_worker_processes.",
							&shape_sync_max_snapshot_workers,
							4, 1, 64,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("shape_sync.write_piece_size",
							"Sets the largest piece of a response written to a socket at once.",
							"Only a single message larger than this is split across pieces.",
							&shape_sync_write_piece_size,
							256, 16, 16 * 1024,
							PGC_POSTMASTER, GUC_UNIT_KB,
							NULL, NULL, NULL);

	DefineCustomIntVariable("shape_sync.cache_max_age",
							"Sets max-age in the cache-control header of catch-up responses.",
							NULL,
							&shape_sync_cache_max_age,
							60, 0, 365 * 24 * 3600,
							PGC_SIGHUP, GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("shape_sync.cache_stale_age",
							"Sets stale-while-revalidate in the cache-control header of catch-up responses.",
							NULL,
							&shape_sync_cache_stale_age,
							300, 0, 365 * 24 * 3600,
							PGC_SIGHUP, GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("shape_sync.long_poll_timeout",
							"Sets how long a live request waits for a change before answering up-to-date.",
							"Requests past the end of a shape's log wait half as long.",
							&shape_sync_long_poll_timeout,
							20000, 100, 3600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomBoolVariable("shape_sync.allow_shape_deletion",
							 "Allows clients to delete shapes with DELETE /v1/shape.",
							 NULL,
							 &shape_sync_allow_shape_deletion,
							 false,
							 PGC_SIGHUP, 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("shape_sync.max_concurrent_initial",
							"Sets the maximum number of concurrent requests for shapes the server does not know yet.",
							"Requests over the limit get 503 with retry-after.",
							&shape_sync_max_concurrent_initial,
							300, 0, 1000000,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("shape_sync.max_concurrent_existing",
							"Sets the maximum number of concurrent requests for known shapes.",
							"Live requests hold their slot while they wait; requests over the limit get 503 with retry-after.",
							&shape_sync_max_concurrent_existing,
							10000, 0, 1000000,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("shape_sync.stalled_serve_timeout",
							"Sets how long one write of a response may make no progress before the connection is closed.",
							"A client must drain about one socket send buffer plus one write piece in this time; 0 disables the check.",
							&shape_sync_stalled_serve_timeout,
							60000, 0, 24 * 3600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("shape_sync.socket_send_buffer",
							"Sets the kernel send buffer of each HTTP connection.",
							"Bounds what a client that stops reading pins in the kernel; 0 keeps the kernel's autotuning.",
							&shape_sync_socket_send_buffer,
							64, 0, 64 * 1024,
							PGC_POSTMASTER, GUC_UNIT_KB,
							NULL, NULL, NULL);

	MarkGUCPrefixReserved("shape_sync");
}
