/*-------------------------------------------------------------------------
 *
 * worker.c
 *		The shape_sync background worker: its main thread and main loop.
 *
 * The main thread is the only thread of the worker that calls PostgreSQL.
 * It starts the HTTP server (whose threads never call PostgreSQL), then
 * waits on one WaitEventSet for three things:
 *
 *	- its latch: set by signals (SIGHUP, SIGTERM), by snapshot workers when
 *	  a shape log grows or a job ends, by backends when a transaction that
 *	  wrote something commits, and by the postmaster when a snapshot worker
 *	  ends;
 *	- the request queue's eventfd: HTTP threads need a shape resolved;
 *	- postmaster death, which ends the worker.
 *
 * Each iteration resolves queued requests in one transaction, lets the
 * registry start and reap snapshot workers (snapshot_pool.c), reaps and
 * launches subset jobs (subset_jobs.c), checks the shape streams
 * (shape_stream_maintain.c), decodes a batch of WAL (decoder.c), and resumes
 * the connections parked on shapes whose logs changed: O(shapes changed),
 * whatever the number of waiting clients.  After a start, each idle iteration also makes
 * a slice of the log memory resident (log_prefault.c).
 *
 * SIGTERM only sets a flag (SignalHandlerForShutdownRequest); the loop
 * then leaves, and the HTTP server is stopped from a before_shmem_exit
 * callback, which also runs when the worker exits through an ERROR or
 * FATAL, so no thread ever outlives the worker's shared memory.
 *
 * IDENTIFICATION
 *	  src/pg/worker/worker.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <sys/resource.h>

#include "access/xact.h"
#include "access/xlog.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/fd.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

#include "catalog_use.h"
#include "decoder.h"
#include "extension_drop.h"
#include "eval_deadline.h"
#include "guc.h"
#include "http_server.h"
#include "log_files.h"
#include "log_trim.h"
#include "log_prefault.h"
#include "log_restore.h"
#include "reader_files.h"
#include "registry.h"
#include "row_encoder.h"
#include "shape_role.h"
#include "shape_stream.h"
#include "shared_state.h"
#include "subset_jobs.h"
#include "thread_log.h"

PGDLLEXPORT void shape_sync_worker_main(Datum arg);

static HttpServer *worker_http = NULL;
static RequestQueue worker_queue;
static ShapeRequest *worker_deferred = NULL;	/* waiting to retry a lock */
static uint32 *worker_changed;	/* shapes to wake once their logs are durable */
static uint32 worker_nchanged;
static uint32 worker_changed_cap;
static bool worker_resuming;	/* restored shapes; decoding not caught up yet */
static XLogRecPtr worker_resume_until;	/* ... with the WAL flushed at start */

static void
worker_emit_thread_log(ThreadLogLevel level, const char *line)
{
	int			elevel = level == THREAD_LOG_WARNING ? WARNING :
		level == THREAD_LOG_LOG ? LOG : DEBUG1;

	ereport(elevel, (errmsg("shape_sync http: %s", line)));
}

static void
worker_drain_thread_log(void)
{
	unsigned	dropped;

	thread_log_drain(worker_emit_thread_log);
	dropped = thread_log_dropped();
	if (dropped > 0)
		ereport(LOG,
				(errmsg("shape_sync dropped %u log lines from HTTP threads", dropped)));
}

static HttpRuntimeSettings
worker_runtime_settings(void)
{
	HttpRuntimeSettings settings;

	settings.cache_max_age = shape_sync_cache_max_age;
	settings.cache_stale_age = shape_sync_cache_stale_age;
	settings.long_poll_timeout_ms = shape_sync_long_poll_timeout;
	settings.allow_shape_deletion = shape_sync_allow_shape_deletion;
	settings.stalled_serve_timeout_ms = shape_sync_stalled_serve_timeout;
	settings.request_header_timeout_ms = shape_sync_request_header_timeout;
	settings.snapshot_wait_timeout_ms = shape_sync_snapshot_wait_timeout;
	settings.max_where_length = shape_sync_max_where_length;
	settings.access.secret = shape_sync_secret();
	settings.access.insecure = shape_sync_insecure;
	settings.access.cors_allowed_origins = shape_sync_cors_allowed_origins;
	settings.access.trusted_proxies = shape_sync_trusted_proxies;
	admission_set_limits(&shape_sync_shared->admission,
						 (uint32) shape_sync_max_concurrent_initial,
						 (uint32) shape_sync_max_concurrent_existing);
	return settings;
}

/*
 * Says who can reach the shapes, at start and whenever a reload changes
 * it: a WARNING when every address is served without a secret.
 */
static void
worker_report_exposure(void)
{
	static int	reported = -1;
	int			exposure = shape_sync_secret()[0] != '\0' ? 0 :
		shape_sync_insecure ? 1 : 2;

	if (exposure == reported)
		return;
	reported = exposure;
	if (exposure == 1)
		ereport(WARNING,
				(errmsg("shape_sync serves every client without a secret"),
				 errdetail("\"%s\" is on and \"%s\" is not set: anyone who can reach port %d can read every table that \"%s\" can read.",
						   "shape_sync.insecure", "shape_sync.secret", shape_sync_port,
						   "shape_sync.role"),
				 errhint("Set \"%s\", or turn \"%s\" off to serve loopback clients only.",
						 "shape_sync.secret", "shape_sync.insecure")));
	else if (exposure == 2 && !http_settings_loopback_only(shape_sync_listen_addresses))
		ereport(LOG,
				(errmsg("shape_sync serves loopback clients only"),
				 errdetail("\"%s\" is not set, so requests from other addresses get 403.",
						   "shape_sync.secret"),
				 errhint("Set \"%s\" to serve them.", "shape_sync.secret")));
}

/*
 * Warns, at start and whenever a reload changes it, when a shape's open
 * chunk may take more than a quarter of the log memory while logs are on
 * disk: what they wrote leaves memory, but an open chunk stays (live
 * clients read it: log_trim.c), so a few of them fill it, and a shape that
 * no longer fits is rotated.  (In memory only, every byte stays anyway.)
 */
static void
worker_check_chunk_size(void)
{
	static int	warned = -1;
	uint64		memory = (uint64) shape_sync_log_memory * 1024 * 1024;

	if (!shape_sync_durable_logs || (uint64) shape_sync_chunk_bytes_threshold * 4 <= memory)
	{
		warned = -1;
		return;
	}
	if (warned == shape_sync_chunk_bytes_threshold)
		return;
	warned = shape_sync_chunk_bytes_threshold;
	ereport(WARNING,
			(errmsg("\"%s\" is more than a quarter of \"%s\"",
					"shape_sync.chunk_bytes_threshold", "shape_sync.log_memory"),
			 errdetail("A shape's open chunk, up to %d kB, stays in the %d MB of log memory; a few of them fill it, and a shape that no longer fits is rotated.",
					   shape_sync_chunk_bytes_threshold / 1024, shape_sync_log_memory),
			 errhint("Set \"%s\" to %llu kB or less, or raise \"%s\".",
					 "shape_sync.chunk_bytes_threshold",
					 (unsigned long long) (memory / 4 / 1024), "shape_sync.log_memory")));
}

/*
 * Warns, at start and whenever a reload changes it, when shape_sync.role
 * cannot be used; shape requests then get 503 until it is fixed.
 */
static void
worker_check_role(void)
{
	static char *reported = NULL;
	char	   *problem;

	catalog_use_current();
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	problem = shape_role_problem();
	if (problem != NULL && (reported == NULL || strcmp(problem, reported) != 0))
		ereport(WARNING,
				(errmsg("shape_sync cannot serve shapes: %s", problem),
				 errhint("Set \"%s\" to a role without SUPERUSER that may SELECT the tables to serve, such as pg_read_all_data.",
						 "shape_sync.role")));
	if (reported != NULL)
		pfree(reported);
	reported = problem ? MemoryContextStrdup(TopMemoryContext, problem) : NULL;
	CommitTransactionCommand();
}

/*
 * Each HTTP connection is a file descriptor of this process: raise the soft
 * limit as far as the hard one allows, and cap the connection limit to
 * what fits beside PostgreSQL's own files.
 */
static unsigned
worker_connection_limit(void)
{
	struct rlimit rl;
	unsigned	wanted = (unsigned) shape_sync_max_connections;
	/*
	 * PostgreSQL's own files, the connections turned away past the limit,
	 * the shape log file each HTTP thread keeps open (reader_files.c: one
	 * at a time) and the flusher thread's (log_flusher.c: a data file, the
	 * journal, the manifest)
	 */
	rlim_t		reserve = (rlim_t) max_files_per_process + 64 +
		(HTTP_MHD_CONNECTION_LIMIT(0, shape_sync_http_threads)) +
		(rlim_t) shape_sync_http_threads + 4;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return wanted;
	if (rl.rlim_cur < rl.rlim_max)
	{
		rl.rlim_cur = rl.rlim_max;
		(void) setrlimit(RLIMIT_NOFILE, &rl);
		(void) getrlimit(RLIMIT_NOFILE, &rl);
	}
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < wanted + reserve)
	{
		unsigned	fits = rl.rlim_cur > reserve + 16 ? (unsigned) (rl.rlim_cur - reserve) : 16;

		ereport(WARNING,
				(errmsg("shape_sync can accept only %u HTTP connections", fits),
				 errdetail("The open files limit of the server process is %llu, and \"%s\" is %d.",
						   (unsigned long long) rl.rlim_cur, "shape_sync.max_connections", shape_sync_max_connections),
				 errhint("Raise the open files limit (ulimit -n) of the PostgreSQL server.")));
		return fits;
	}
	return wanted;
}

/* Stops the HTTP threads; runs on every exit path of the worker. */
static void
worker_shutdown(int code, Datum arg)
{
	subset_jobs_stop();
	/*
	 * Requests waiting for a lock get their 503 now; so do those waiting
	 * for the end of a replay, which were never resolved (their shape
	 * exists, and is restored at the next start: not a 409).
	 */
	while (worker_deferred != NULL)
	{
		ShapeRequest *next = worker_deferred->next;

		if (worker_deferred->result.status == SHAPE_RESOLVE_OK &&
			worker_deferred->result.handle[0] == '\0')
			worker_deferred->result.status = SHAPE_RESOLVE_UNAVAILABLE;
		worker_deferred->done(worker_deferred);
		worker_deferred = next;
	}
	if (worker_http != NULL)
	{
		http_server_stop(worker_http);
		worker_http = NULL;
		request_queue_destroy(&worker_queue);
	}
	log_trim_shutdown();		/* no reader is left */
	thread_log_drain(worker_emit_thread_log);
	atomic_store(&shape_sync_shared->worker_latch, 0);
	decoder_stop();
	registry_stop();
	/* every thread has stopped: their metric stripes are free for others */
	server_metrics_detach_process();
}

/*
 * Requests whose table was locked by another session when last tried: the
 * main thread never waits on a lock, it tries again on a later iteration,
 * for up to RESOLVE_RETRY_MS, before answering 503.  A snapshot worker
 * setting REPLICA IDENTITY FULL holds such a lock for a moment.
 */
#define RESOLVE_RETRY_MS	3000

/*
 * DROP EXTENSION shape_sync committed in the served database
 * (extension_drop.c): every shape goes, its clients get 409, and its files
 * are removed once no reader holds them.  The server goes on serving.
 */
static void
worker_follow_extension_drop(void)
{
	uint32		rotated = registry_rotate_all(SM_ROTATION_EXTENSION_DROPPED);

	ereport(LOG,
			(errmsg("shape_sync dropped every shape (%u): extension \"shape_sync\" was dropped",
					rotated),
			 errdetail("Their clients get 409 and start over, and the files of their logs are removed.")));
}

/*
 * Resolves every queued shape request, then hands each answer back.
 * Returns whether there was one.
 */
static bool
worker_resolve_requests(void)
{
	ShapeRequest *list = request_queue_take_all(&worker_queue);
	int64		now_ms = GetCurrentTimestamp() / 1000;

	/* the deferred ones go first: they came first */
	if (worker_deferred != NULL)
	{
		ShapeRequest *last = worker_deferred;

		while (last->next != NULL)
			last = last->next;
		last->next = list;
		list = worker_deferred;
		worker_deferred = NULL;
	}
	if (list == NULL)
		return false;
	pgstat_report_activity(STATE_RUNNING, "resolving shape requests");
	catalog_use_current();
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	for (ShapeRequest *req = list; req != NULL; req = req->next)
	{
		if (req->first_try_ms == 0)
			req->first_try_ms = now_ms;
		shape_resolution_free(&req->result);
		memset(&req->result, 0, sizeof(req->result));
		registry_resolve(req);
	}
	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_activity(STATE_IDLE, NULL);

	/* only now that the catalog work committed may the clients go on */
	while (list != NULL)
	{
		ShapeRequest *next = list->next;

		if (list->result.retry && now_ms - list->first_try_ms < RESOLVE_RETRY_MS)
		{
			list->next = worker_deferred;
			worker_deferred = list;
		}
		else if (!subset_jobs_take(list))
			list->done(list);	/* a subset query is answered once it ran */
		list = next;
	}
	return true;
}

static void worker_wake_changed_shapes(bool between_transactions);

/*
 * Resolves the queued requests inside the replay's transaction, under its
 * catalog (registry.c says what is answered then); the others wait, with
 * those deferred before, for the end of the replay.
 */
static void
worker_resolve_during_replay(void)
{
	ShapeRequest *list = request_queue_take_all(&worker_queue);
	ShapeRequest **tail = &worker_deferred;
	int64		now_ms = GetCurrentTimestamp() / 1000;

	if (list == NULL)
		return;
	while (*tail != NULL)
		tail = &(*tail)->next;
	/* the replay's historic snapshot, for what validation evaluates */
	PushActiveSnapshot(GetTransactionSnapshot());
	while (list != NULL)
	{
		ShapeRequest *next = list->next;

		if (list->first_try_ms == 0)
			list->first_try_ms = now_ms;
		shape_resolution_free(&list->result);
		memset(&list->result, 0, sizeof(list->result));
		if (registry_resolve_during_replay(list))
			list->done(list);
		else
		{
			list->next = NULL;
			*tail = list;
			tail = &list->next;
		}
		list = next;
	}
	PopActiveSnapshot();
}

/*
 * Runs every few ms while decoding replays a long transaction (decoder.c):
 * new requests are resolved and their snapshots started, clients of
 * shapes whose logs grew are woken, and a shutdown request is obeyed at
 * once (worker_shutdown answers what waits) instead of after the replay.
 * Meanwhile no HTTP thread reuses a resolution (resolved_shapes.c): the
 * catalog changes a replay holds up are not seen, and requests for
 * existing shapes wait for its end, as they would without the reuse.
 */
static void
worker_during_replay(void)
{
	shape_stream_catalog_changed();
	worker_resolve_during_replay();
	registry_maintain_during_replay();
	shape_stream_maintain_during_replay();
	subset_jobs_reap();			/* no catalog needed: answers and deadlines go on */
	subset_jobs_launch();
	worker_wake_changed_shapes(false);
	if (ShutdownRequestPending)
	{
		ereport(LOG, (errmsg("shape_sync shutting down during the replay of a transaction")));
		decoder_abandon();
		proc_exit(1);
	}
}

/*
 * Resumes the connections parked on shapes whose logs changed, and has
 * what the logs gained written to disk: after the wake-ups, or, with
 * shape_sync.log_fsync = commit, made durable before them.  Disk is
 * written only between transactions: in the middle of a replay, the
 * decoder's position is past a commit whose changes are not all in.
 */
static void
worker_wake_changed_shapes(bool between_transactions)
{
	uint32		slots[256];
	uint32		n;
	bool		durable_first = shape_sync_log_fsync == LOG_FSYNC_COMMIT;

	do
	{
		n = shape_table_take_dirty(shape_sync_shared->table, slots, lengthof(slots));
		for (uint32 i = 0; i < n; i++)
		{
			log_files_appended(slots[i]);
			if (durable_first && worker_nchanged < worker_changed_cap)
				worker_changed[worker_nchanged++] = slots[i];
			else
				http_server_wake_shape(worker_http, slots[i]);
		}
	} while (n == lengthof(slots));
	if (!between_transactions)
		return;					/* with commit, woken after the replay's round */
	log_files_step(decoder_position(), log_trim_wanted());
	log_trim_step();			/* what was just written may leave memory */
	decoder_confirm_durable();
	for (uint32 i = 0; i < worker_nchanged; i++)
		http_server_wake_shape(worker_http, worker_changed[i]);
	worker_nchanged = 0;
}

void
shape_sync_worker_main(Datum arg)
{
	HttpServerOptions options;
	HttpRuntimeSettings settings;
	WaitEventSet *events;
	char		err[256];
	bool		more_wal = false;
	bool		more_prefault = true;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(shape_sync_database, NULL, 0);
	pgstat_report_appname("shape_sync");

	/* decoded values are printed as the snapshot prints them */
	row_encoder_set_display_settings(PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SET);
	/* where clauses folded or evaluated here get shape_sync.where_evaluation_timeout */
	eval_deadline_enable();

	/* the readers of an earlier life of this worker are gone with it */
	reader_epochs_reset(&shape_sync_shared->epochs);
	/* its threads keep the log file they read last open (log_files.c lets go) */
	reader_files_enable();
	registry_start();
	log_files_start(shape_sync_shared->table->nslots);
	worker_changed_cap = shape_sync_shared->table->nslots;
	worker_changed = MemoryContextAlloc(TopMemoryContext, sizeof(uint32) * worker_changed_cap);
	{
		bool		slot_made_now;
		XLogRecPtr	slot_confirmed;
		const LogStoreManifest *stored;
		int			restored = 0;
		XLogRecPtr	stored_up_to;

		decoder_open_slot(worker_during_replay, &slot_made_now, &slot_confirmed);
		stored = log_restore_check_header(slot_made_now, slot_confirmed);
		if (stored != NULL)
			restored = registry_restore_shapes(stored);
		/*
		 * What the server has seen (shape_table.c): what the restored logs
		 * hold, not what an earlier life of the worker saw past them.
		 */
		stored_up_to = restored > 0 ? stored->header.durable_lsn : InvalidXLogRecPtr;
		atomic_store(&shape_sync_shared->table->last_seen_lsn, stored_up_to);
		worker_resuming = restored > 0;
		worker_resume_until = GetFlushRecPtr(NULL);
		log_restore_done();
		decoder_start(restored > 0 ? stored_up_to : InvalidXLogRecPtr);
	}
	if (request_queue_init(&worker_queue) != 0)
		ereport(ERROR,
				(errcode_for_file_access(),
				 errmsg("could not create eventfd: %m")));

	memset(&options, 0, sizeof(options));
	options.listen_addresses = shape_sync_listen_addresses;
	options.port = shape_sync_port;
	options.threads = shape_sync_http_threads;
	options.write_piece_size = (size_t) shape_sync_write_piece_size * 1024;
	options.connection_memory = (size_t) shape_sync_connection_memory * 1024;
	options.shapes = shape_sync_shared->table;
	options.queue = &worker_queue;
	options.admission = &shape_sync_shared->admission;
	options.subsets = &shape_sync_shared->subsets;
	options.activity = shape_sync_shared->connections;
	options.socket_send_buffer = (size_t) shape_sync_socket_send_buffer * 1024;
	options.connection_limit = worker_connection_limit();
	settings = worker_runtime_settings();
	worker_check_role();

	before_shmem_exit(worker_shutdown, 0);
	worker_http = http_server_start(&options, &settings, err, sizeof(err));
	if (worker_http == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("shape_sync could not start its HTTP server: %s", err),
				 errhint("Check \"%s\" and \"%s\"; another process may use the port.",
						 "shape_sync.listen_addresses", "shape_sync.port")));
	atomic_store(&shape_sync_shared->worker_latch, (uintptr_t) MyLatch);
	ereport(LOG,
			(errmsg("shape_sync serving database \"%s\" on %s port %d",
					shape_sync_database, shape_sync_listen_addresses, shape_sync_port)));
	worker_report_exposure();
	worker_check_chunk_size();

	events = CreateWaitEventSet(TopMemoryContext, 3);
	AddWaitEventToSet(events, WL_LATCH_SET, PGINVALID_SOCKET, MyLatch, NULL);
	AddWaitEventToSet(events, WL_EXIT_ON_PM_DEATH, PGINVALID_SOCKET, NULL, NULL);
	AddWaitEventToSet(events, WL_SOCKET_READABLE, worker_queue.wake_fd, NULL, NULL);

	while (!ShutdownRequestPending)
	{
		WaitEvent	fired[3];
		long		timeout = more_wal || more_prefault || log_files_writing() ? 0 :
			decoder_holds_commit() ? DECODER_HOLD_RECHECK_MS :
			decoder_wal_pending() || shape_stream_moves_waiting() ? 2 :
			worker_deferred != NULL ? 20 : 1000;
		int			release_in = http_server_release_due_ms(worker_http);
		int			nfired;
		bool		resolved;

		if (release_in >= 0 && release_in < timeout)
			timeout = release_in;	/* memory to hand back soon */

		nfired = WaitEventSetWait(events, timeout, fired, lengthof(fired), PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();

		if (ConfigReloadPending)
		{
			char	   *role_before = pstrdup(shape_sync_role);

			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			atomic_fetch_add(&shape_sync_shared->config_reloads, 1);	/* before any job made under it */
			shape_stream_catalog_changed();	/* shape_sync.role, for one */
			settings = worker_runtime_settings();
			if (http_server_apply_settings(worker_http, &settings, err, sizeof(err)) != 0)
				ereport(WARNING,
						(errmsg("shape_sync kept its previous access settings: %s", err)));
			worker_report_exposure();
			worker_check_chunk_size();
			worker_check_role();
			if (strcmp(role_before, shape_sync_role) != 0)
				shape_stream_recheck_all();	/* shapes read as the old role go */
			pfree(role_before);
		}
		if (extension_drop_take())
			worker_follow_extension_drop();
		resolved = worker_resolve_requests();
		registry_maintain();
		subset_jobs_reap();
		subset_jobs_launch();
		shape_stream_maintain(registry_rotate);
		more_wal = decoder_step();
		if (worker_resuming && !more_wal &&
			shape_table_seen_lsn(shape_sync_shared->table) >= worker_resume_until)
		{
			/*
			 * Decoding caught up with what was written while the worker was
			 * away: requests parked as past the end of a restored log (an
			 * offset its earlier life had reached) look again.
			 */
			worker_resuming = false;
			http_server_wake_all(worker_http);
		}
		more_prefault = log_prefault_step(nfired == 0 && !resolved && !more_wal);
		worker_wake_changed_shapes(true);
		worker_drain_thread_log();
		http_server_note_freed(worker_http, shape_stream_take_freed_bytes());
		http_server_release_memory(worker_http);
	}

	ereport(LOG, (errmsg("shape_sync shutting down")));
	log_files_shutdown(decoder_position());

	/*
	 * Exit code 1 asks the postmaster to start the worker again after
	 * bgw_restart_time, which it does unless the whole server is shutting
	 * down: pg_terminate_backend() on the worker restarts the service.
	 */
	proc_exit(1);
}
