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
 * shape_sync.secret is never shown and never logged.  PostgreSQL logs
 * "parameter changed to <value>" when the postmaster reloads a changed
 * setting, and prints the value of a setting its check hook refuses, so
 * the check hook moves the secret into the setting's `extra` (which
 * PostgreSQL keeps, copies and frees with the value but never prints) and
 * blanks the value itself: to PostgreSQL the setting is always "", so no
 * reload ever reports a change, SHOW and pg_settings print "********"
 * through the show hook, and GUC_SUPERUSER_ONLY hides even that from
 * other roles.  The worker reads the real value through
 * shape_sync_secret().
 *
 * IDENTIFICATION
 *	  src/pg/guc.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>
#include <string.h>

#include "utils/guc.h"
#include "utils/varlena.h"

#include "http_server.h"
#include "log_manifest.h"
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
int			shape_sync_shape_eviction = SHAPE_EVICTION_LRU;
bool		shape_sync_durable_logs = true;
int			shape_sync_log_fsync = LOG_FSYNC_BATCH;
int			shape_sync_log_disk_budget = 0;
double		shape_sync_compaction_factor = 4.0;
int			shape_sync_shape_idle_timeout = 30 * 60;
int			shape_sync_max_new_shapes_per_client = 100;
int			shape_sync_write_piece_size = 64;
int			shape_sync_connection_memory = 10;
int			shape_sync_cache_max_age = 60;
int			shape_sync_cache_stale_age = 300;
int			shape_sync_long_poll_timeout = 20000;
bool		shape_sync_prefault_log_memory = true;
bool		shape_sync_allow_shape_deletion = false;
int			shape_sync_max_concurrent_initial = 300;
int			shape_sync_max_concurrent_existing = 10000;
int			shape_sync_stalled_serve_timeout = 60000;
int			shape_sync_request_header_timeout = 10000;
int			shape_sync_snapshot_wait_timeout = 45000;
int			shape_sync_socket_send_buffer = 64;
bool		shape_sync_insecure = false;
char	   *shape_sync_cors_allowed_origins = NULL;
char	   *shape_sync_trusted_proxies = NULL;
char	   *shape_sync_role = NULL;
bool		shape_sync_manage_replica_identity = false;
int			shape_sync_max_where_length = 8192;
int			shape_sync_max_where_constant_size = 64 * 1024;
int			shape_sync_snapshot_statement_timeout = 300000;
int			shape_sync_where_evaluation_timeout = 1000;
int			shape_sync_subquery_max_values = 100000;
int			shape_sync_decoder_lag_warning = 10000;
char	   *shape_sync_trusted_owners = NULL;
int			shape_sync_subset_columns = SUBSET_COLUMNS_SHAPE;
int			shape_sync_subset_statement_timeout = 10000;
int			shape_sync_debug_snapshot_gate = 0;

static char *guc_secret_blank = NULL;	/* the GUC's own value: always "" */
static const char *guc_secret_value = "";	/* its extra: the secret */

/* See the file header: the secret goes to `extra`, the value becomes "". */
static bool
guc_check_secret(char **newval, void **extra, GucSource source)
{
	size_t		len = strlen(*newval);
	char	   *secret = malloc(len + 1);

	if (secret != NULL)
		memcpy(secret, *newval, len + 1);
	explicit_bzero(*newval, len);	/* even a refusal below prints "" */
	if (secret == NULL)
	{
		GUC_check_errcode(ERRCODE_OUT_OF_MEMORY);
		GUC_check_errmsg("out of memory");
		return false;
	}
	*extra = secret;
	return true;
}

static void
guc_assign_secret(const char *newval, void *extra)
{
	guc_secret_value = extra ? (const char *) extra : "";
}

static const char *
guc_show_secret(void)
{
	return guc_secret_value[0] != '\0' ? "********" : "";
}

const char *
shape_sync_secret(void)
{
	return guc_secret_value;
}

static bool
guc_check_origins(char **newval, void **extra, GucSource source)
{
	char		err[256];

	if (http_settings_origins_valid(*newval, err, sizeof(err)))
		return true;
	GUC_check_errdetail("%s.", err);
	return false;
}

/* A list of role names; whether each exists is decided when it is used. */
static bool
guc_check_role_list(char **newval, void **extra, GucSource source)
{
	char	   *raw = pstrdup(*newval);
	List	   *names;
	bool		ok = SplitIdentifierString(raw, ',', &names);

	list_free(names);
	pfree(raw);
	if (!ok)
		GUC_check_errdetail("List syntax is invalid.");
	return ok;
}

static bool
guc_check_trusted_proxies(char **newval, void **extra, GucSource source)
{
	char		err[256];

	if (http_settings_proxies_valid(*newval, err, sizeof(err)))
		return true;
	GUC_check_errdetail("%s.", err);
	return false;
}

/* 0, or a growth worth a rewrite */
static bool
guc_check_compaction_factor(double *newval, void **extra, GucSource source)
{
	if (*newval == 0.0 || *newval >= 1.1)
		return true;
	GUC_check_errdetail("\"shape_sync.compaction_factor\" must be 0 (off) or at least 1.1.");
	return false;
}

static const struct config_enum_entry guc_subset_columns_options[] = {
	{"shape", SUBSET_COLUMNS_SHAPE, false},
	{"table", SUBSET_COLUMNS_TABLE, false},
	{NULL, 0, false}
};

static const struct config_enum_entry guc_log_fsync_options[] = {
	{"off", LOG_FSYNC_OFF, false},
	{"batch", LOG_FSYNC_BATCH, false},
	{"commit", LOG_FSYNC_COMMIT, false},
	{NULL, 0, false}
};

static const struct config_enum_entry guc_shape_eviction_options[] = {
	{"lru", SHAPE_EVICTION_LRU, false},
	{"none", SHAPE_EVICTION_NONE, false},
	{NULL, 0, false}
};

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

	DefineCustomEnumVariable("shape_sync.shape_eviction",
							 "Sets what happens when a new shape finds shape_sync.max_shapes or shape_sync.log_memory reached.",
							 "lru drops the least recently read shape that no live request waits on; "
							 "none refuses the new shape with 503.",
							 &shape_sync_shape_eviction,
							 SHAPE_EVICTION_LRU, guc_shape_eviction_options,
							 PGC_SIGHUP, 0,
							 NULL, NULL, NULL);

	DefineCustomBoolVariable("shape_sync.durable_logs",
							 "Keeps shape logs on disk under the data directory, so that shapes survive restarts.",
							 "off keeps them in shared memory only: a restart drops every shape and its clients fetch them again.",
							 &shape_sync_durable_logs,
							 true,
							 PGC_POSTMASTER, 0,
							 NULL, NULL, NULL);

	DefineCustomEnumVariable("shape_sync.log_fsync",
							 "Sets when shape logs written to disk are flushed to stable storage.",
							 "batch flushes them about once a second; commit before the clients of a decoded change are woken; "
							 "off never, and the logs then survive restarts of the server but not of the operating system.",
							 &shape_sync_log_fsync,
							 LOG_FSYNC_BATCH, guc_log_fsync_options,
							 PGC_SIGHUP, 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("shape_sync.log_disk_budget",
							"Sets the disk space the shape logs' files may take.",
							"Past it, the least recently read shapes are evicted, and a snapshot larger than it fails. 0 sets no limit.",
							&shape_sync_log_disk_budget,
							0, 0, INT_MAX / 2,
							PGC_SIGHUP, GUC_UNIT_MB,
							NULL, NULL, NULL);

	DefineCustomRealVariable("shape_sync.compaction_factor",
							 "Compacts a shape's log once it has grown to this many times its size after its snapshot or its last compaction.",
							 "Compaction keeps one insert and one update per row, and a delete per row deleted since. 0 turns it off.",
							 &shape_sync_compaction_factor,
							 4.0, 0.0, 1000.0,
							 PGC_SIGHUP, 0,
							 guc_check_compaction_factor, NULL, NULL);

	DefineCustomIntVariable("shape_sync.shape_idle_timeout",
							"Drops shapes that no request has read for this long.",
							"Shapes with live requests waiting on them are never idle. 0 keeps idle shapes.",
							&shape_sync_shape_idle_timeout,
							30 * 60, 0, INT_MAX / 1000,
							PGC_SIGHUP, GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("shape_sync.max_new_shapes_per_client",
							"Sets how many new shapes, and how many refused definitions, one client address may have per minute.",
							"Past either, its further definitions get 503 with retry-after until the minute is over. "
							"IPv6 clients are counted by /64 prefix; behind shape_sync.trusted_proxies, by the address X-Forwarded-For names. 0 sets no limit.",
							&shape_sync_max_new_shapes_per_client,
							100, 0, 1000000,
							PGC_SIGHUP, 0,
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
							64, 16, 16 * 1024,
							PGC_POSTMASTER, GUC_UNIT_KB,
							NULL, NULL, NULL);

	DefineCustomIntVariable("shape_sync.connection_memory",
							"Sets the memory each HTTP connection keeps for a request's line and headers and a response's headers.",
							"A request target longer than a quarter of it is answered 414; a response body never takes from it.",
							&shape_sync_connection_memory,
							10, 8, 1024,
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

	DefineCustomBoolVariable("shape_sync.prefault_log_memory",
							 "Makes shape_sync.log_memory resident in the background after the worker starts.",
							 "Then the first snapshots do not pay the kernel's first touch of each page; off leaves pages to be allocated as shapes first use them.",
							 &shape_sync_prefault_log_memory,
							 true,
							 PGC_SIGHUP, 0,
							 NULL, NULL, NULL);

	DefineCustomBoolVariable("shape_sync.allow_shape_deletion",
							 "Allows clients to delete shapes with DELETE /v1/shape.",
							 NULL,
							 &shape_sync_allow_shape_deletion,
							 false,
							 PGC_SIGHUP, 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("shape_sync.max_concurrent_initial",
							"Sets the maximum number of concurrent requests that make a shape or wait for a shape's snapshot.",
							"Requests over the limit get 503 with retry-after; requests for shapes the server holds count against shape_sync.max_concurrent_existing.",
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

	/*
	 * 10 s: longer than the idle keep-alive time of most servers (Node's
	 * 5 s, Apache's 5 s) and than any live client needs between a response
	 * and its next request, short enough that a client trickling its
	 * headers holds a connection and a file descriptor only briefly.
	 */
	DefineCustomIntVariable("shape_sync.request_header_timeout",
							"Sets how long an HTTP connection may wait for a whole request before it is closed.",
							"Counted from the connection's start or its previous response, however often bytes arrive; the connection is closed without an answer. 0 disables the limit.",
							&shape_sync_request_header_timeout,
							10000, 0, 3600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);

	/*
	 * 45 s: the client should get this 503 and its retry-after, not the 504
	 * of a proxy in front that gives up on a response that sends nothing
	 * for 60 s (nginx's proxy_read_timeout, an AWS load balancer's idle
	 * timeout); and a waiting request should outlast a long-poll.
	 */
	DefineCustomIntVariable("shape_sync.snapshot_wait_timeout",
							"Sets how long a request may wait for its shape's snapshot before answering 503.",
							"The client gets retry-after and comes back; the snapshot goes on. A waiting request counts against shape_sync.max_concurrent_initial. 0 disables the limit.",
							&shape_sync_snapshot_wait_timeout,
							45000, 0, 24 * 3600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("shape_sync.socket_send_buffer",
							"Sets the kernel send buffer of each HTTP connection.",
							"Bounds what a client that stops reading pins in the kernel; 0 keeps the kernel's autotuning.",
							&shape_sync_socket_send_buffer,
							64, 0, 64 * 1024,
							PGC_POSTMASTER, GUC_UNIT_KB,
							NULL, NULL, NULL);

	DefineCustomStringVariable("shape_sync.secret",
							   "Sets the secret every shape request must carry as secret= or api_secret=.",
							   "Without a secret, and unless shape_sync.insecure is on, only loopback clients are served. The value is never shown or logged.",
							   &guc_secret_blank,
							   "",
							   PGC_SIGHUP, GUC_SUPERUSER_ONLY,
							   guc_check_secret, guc_assign_secret, guc_show_secret);

	DefineCustomBoolVariable("shape_sync.insecure",
							 "Serves clients of every address without a secret.",
							 "Anyone who can reach the port then reads every table shape_sync.role can read.",
							 &shape_sync_insecure,
							 false,
							 PGC_SIGHUP, 0,
							 NULL, NULL, NULL);

	DefineCustomStringVariable("shape_sync.cors_allowed_origins",
							   "Sets the browser origins allowed to make shape requests.",
							   "A comma-separated list of scheme://host[:port]; \"*\" allows every origin once a secret is set, and only loopback origins while loopback clients only are served.",
							   &shape_sync_cors_allowed_origins,
							   "*",
							   PGC_SIGHUP, GUC_LIST_INPUT,
							   guc_check_origins, NULL, NULL);

	DefineCustomStringVariable("shape_sync.trusted_proxies",
							   "Sets the reverse proxies whose X-Forwarded-For header names the client.",
							   "A comma-separated list of IPv4 and IPv6 addresses and CIDR ranges. Per-client limits count their requests by the forwarded client, which is never a loopback client; other peers' X-Forwarded-For is ignored.",
							   &shape_sync_trusted_proxies,
							   "",
							   PGC_SIGHUP, GUC_LIST_INPUT,
							   guc_check_trusted_proxies, NULL, NULL);

	DefineCustomStringVariable("shape_sync.role",
							   "Sets the role whose privileges shapes are read with.",
							   "Validation, snapshots and where clauses run as this role; it must not be a superuser. Tables it cannot SELECT, or whose row-level security applies to it, are refused.",
							   &shape_sync_role,
							   "pg_read_all_data",
							   PGC_SIGHUP, 0,
							   NULL, NULL, NULL);

	DefineCustomBoolVariable("shape_sync.manage_replica_identity",
							 "Lets the worker set REPLICA IDENTITY FULL on tables that get a shape.",
							 "Off: a table without REPLICA IDENTITY FULL is refused. On: the table's owner's ALTER TABLE runs with a short lock_timeout.",
							 &shape_sync_manage_replica_identity,
							 false,
							 PGC_SIGHUP, 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("shape_sync.max_where_length",
							"Sets the longest where clause a shape may have.",
							NULL,
							&shape_sync_max_where_length,
							8192, 64, 1024 * 1024,
							PGC_SIGHUP, GUC_UNIT_BYTE,
							NULL, NULL, NULL);

	DefineCustomIntVariable("shape_sync.max_where_constant_size",
							"Sets the largest total size of the constants folding a where clause may make.",
							"Every constant made while folding counts, the parameters and the intermediate ones included; the folded clause is kept for the shape's life.",
							&shape_sync_max_where_constant_size,
							64 * 1024, 1024, 256 * 1024 * 1024,
							PGC_SIGHUP, GUC_UNIT_BYTE,
							NULL, NULL, NULL);

	DefineCustomIntVariable("shape_sync.snapshot_statement_timeout",
							"Sets how long a shape's snapshot query may run.",
							"A snapshot that takes longer fails; 0 disables the limit.",
							&shape_sync_snapshot_statement_timeout,
							300000, 0, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("shape_sync.subset_statement_timeout",
							"Sets how long a subset query may run.",
							"A subset query that takes longer fails with 400; 0 disables the limit.",
							&shape_sync_subset_statement_timeout,
							10000, 0, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomEnumVariable("shape_sync.subset_columns",
							 "Sets which columns a subset query's where clause and order_by may read.",
							 "shape: the shape's own columns, so that a subset cannot probe a column the shape hides; table: any column of the table that shape_sync.role may read.",
							 &shape_sync_subset_columns,
							 SUBSET_COLUMNS_SHAPE, guc_subset_columns_options,
							 PGC_SIGHUP, 0,
							 NULL, NULL, NULL);

	DefineCustomStringVariable("shape_sync.trusted_owners",
							   "Lists the roles whose functions may run while a shape's table is read.",
							   "A table whose index expressions, partial index predicates, statistics, partition keys, CHECK constraints or column domains call a function owned by a role that is neither a superuser nor listed here is refused.",
							   &shape_sync_trusted_owners,
							   "",
							   PGC_SIGHUP, GUC_LIST_INPUT,
							   guc_check_role_list, NULL, NULL);

	DefineCustomIntVariable("shape_sync.where_evaluation_timeout",
							"Sets how long evaluating a where clause may take, folded at validation or on one change.",
							"A clause that takes longer is refused, or its shape fails; 0 disables the limit.",
							&shape_sync_where_evaluation_timeout,
							1000, 0, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);

	DefineCustomIntVariable("shape_sync.subquery_max_values",
							"Sets how many rows a subquery of a shape's where clause may select when it is first read.",
							"The worker keeps the values of each subquery in its memory; a subquery selecting more is refused.",
							&shape_sync_subquery_max_values,
							100000, 1, INT_MAX,
							PGC_SIGHUP, 0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("shape_sync.decoder_lag_warning",
							"Sets how far decoding may fall behind the commits before a warning is logged.",
							"The lag is the time from a transaction's commit until its changes reach the shape logs; 0 disables the warning.",
							&shape_sync_decoder_lag_warning,
							10000, 0, INT_MAX,
							PGC_SIGHUP, GUC_UNIT_MS,
							NULL, NULL, NULL);

	/* a developer option, for tests: not in the sample file, not in SHOW ALL */
	DefineCustomIntVariable("shape_sync.debug_snapshot_gate",
							"Makes snapshots wait at each chunk while an advisory lock on this key is held.",
							"Tests hold pg_advisory_lock(key) to keep a snapshot going after its first chunk; 0 turns it off.",
							&shape_sync_debug_snapshot_gate,
							0, 0, INT_MAX,
							PGC_SIGHUP, GUC_NOT_IN_SAMPLE | GUC_NO_SHOW_ALL,
							NULL, NULL, NULL);

	MarkGUCPrefixReserved("shape_sync");
}
