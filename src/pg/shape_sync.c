/*-------------------------------------------------------------------------
 *
 * shape_sync.c
 *		Module entry: _PG_init, the preload guard and worker registration.
 *
 * shape_sync must be in shared_preload_libraries: it sizes shared memory
 * and registers its background worker while the postmaster starts.
 * Loading it any other way (CREATE EXTENSION without preloading, LOAD)
 * raises an error that says how to fix the configuration.
 *
 * The files of this module, by concern:
 *	 src/pg/    PostgreSQL side: this file, guc.c, shared_state.c, worker.c
 *	            (the main loop), registry.c (shapes by definition),
 *	            shape_def.c (validation), shape_where.c (where clauses),
 *	            shape_relation.c (a shape's table), row_encoder.c,
 *	            snapshot.c, sql_api.c
 *	 src/net/   the HTTP threads, which never call PostgreSQL, and the
 *	            request queue through which they ask the main thread
 *	 src/contract/   shared memory both sides read: shape table, shape logs,
 *	            admission slots, offsets
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
