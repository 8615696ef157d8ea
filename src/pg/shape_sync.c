/*-------------------------------------------------------------------------
 *
 * shape_sync.c
 *		Module entry: _PG_init, the preload guard and worker registration.
 *
 * shape_sync must be in shared_preload_libraries: it sizes shared memory
 * and registers its background worker while the postmaster starts.
 * Loading it any other way (CREATE EXTENSION without preloading, LOAD)
 * raises an error that says how to fix the configuration.  Every backend
 * wakes the worker when a transaction that wrote something commits (a
 * transaction callback registered here), so commits reach the shape logs
 * without polling.
 *
 * The source is in three floors (src/pg/ runs in PostgreSQL processes,
 * src/net/ on the HTTP threads, src/contract/ is what both share: the
 * types they hand each other and shared memory), and src/pg/ in folders
 * by process: the worker's main loop and decoding (worker/), the snapshot
 * workers (snapshot/), the SQL functions (sql/), and what all of them use
 * to work with a shape (shape/).  src/README.md maps every file in one
 * line.
 *
 * IDENTIFICATION
 *	  src/pg/shape_sync.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "postmaster/bgworker.h"

#include "extension_drop.h"
#include "guc.h"
#include "shared_state.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

/*
 * Runs in every backend: a transaction that wrote something has committed,
 * so the worker may have WAL to decode.  Waking it here, rather than
 * having it poll, keeps polling out of the commit-to-client latency.
 */
static void
shape_sync_xact_callback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_COMMIT && TransactionIdIsValid(GetTopTransactionIdIfAny()))
		shape_sync_wake_worker();
}

void
_PG_init(void)
{
	BackgroundWorker worker;

	if (IsBinaryUpgrade)
		return;
	if (!process_shared_preload_libraries_in_progress)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("shape_sync can only be loaded via \"shared_preload_libraries\""),
				 errhint("Add shape_sync to the \"shared_preload_libraries\" configuration parameter and restart the server.")));

	shape_sync_define_gucs();
	shape_sync_shmem_install_hooks();
	RegisterXactCallback(shape_sync_xact_callback, NULL);
	extension_drop_install_hooks();

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = 5;
	strlcpy(worker.bgw_library_name, "shape_sync", BGW_MAXLEN);
	strlcpy(worker.bgw_function_name, "shape_sync_worker_main", BGW_MAXLEN);
	strlcpy(worker.bgw_name, "shape_sync server", BGW_MAXLEN);
	strlcpy(worker.bgw_type, "shape_sync", BGW_MAXLEN);
	RegisterBackgroundWorker(&worker);
}
