/*-------------------------------------------------------------------------
 *
 * extension_drop.c
 *		DROP EXTENSION shape_sync, committed in the served database, tells
 *		the worker to let go of every shape and its files.
 *
 * The worker serves whether the extension exists or not, but its shape
 * logs live under $PGDATA/pg_shape_sync; dropping the extension is how an
 * operator says shape_sync's data is to go (docs/storage.md).  An object
 * access hook, in every backend, notes a drop of the extension named
 * shape_sync in the database shape_sync.database, with the transaction
 * nesting level it happened at; the transaction callbacks forget it when
 * that (sub)transaction aborts, and when the top transaction commits they
 * count it in shared memory and wake the worker, which rotates every shape
 * (registry_rotate_all: clients get 409, each shape's files go once no
 * reader holds them) and writes a manifest without them.  A drop in a
 * transaction that is prepared (two-phase commit) is not followed: a
 * COMMIT PREPARED runs no callback of this backend's.
 *
 * Notes on synchronization
 * ------------------------
 * - `extension_drops` in ShapeSyncShared is incremented by backends
 *   (fetch_add) after their commit; the main worker alone reads it and
 *   keeps what it handled in `extension_drops_handled` (shared memory, so
 *   that a drop while the worker restarts is still followed).  A drop
 *   counted twice only rotates shapes made in between, which is harmless.
 *
 * IDENTIFICATION
 *	  src/pg/extension_drop.c
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/objectaccess.h"
#include "catalog/pg_extension.h"
#include "commands/dbcommands.h"
#include "commands/extension.h"
#include "miscadmin.h"

#include "extension_drop.h"
#include "guc.h"
#include "shared_state.h"

static object_access_hook_type prev_object_access_hook = NULL;

/* the nesting level of the (sub)transaction that dropped it; 0: none */
static int	drop_nest_level = 0;

static bool
extdrop_is_ours(Oid extension)
{
	char	   *name;
	char	   *database;

	if (shape_sync_database == NULL || !OidIsValid(MyDatabaseId))
		return false;
	name = get_extension_name(extension);
	if (name == NULL || strcmp(name, "shape_sync") != 0)
		return false;
	database = get_database_name(MyDatabaseId);
	return database != NULL && strcmp(database, shape_sync_database) == 0;
}

static void
extdrop_object_access(ObjectAccessType access, Oid class_id, Oid object_id, int sub_id,
					  void *arg)
{
	if (prev_object_access_hook)
		prev_object_access_hook(access, class_id, object_id, sub_id, arg);
	if (access == OAT_DROP && class_id == ExtensionRelationId && sub_id == 0 &&
		drop_nest_level == 0 && extdrop_is_ours(object_id))
		drop_nest_level = GetCurrentTransactionNestLevel();
}

static void
extdrop_xact_callback(XactEvent event, void *arg)
{
	if (drop_nest_level == 0)
		return;
	if (event == XACT_EVENT_COMMIT)
	{
		atomic_fetch_add(&shape_sync_shared->extension_drops, 1);
		shape_sync_wake_worker();
	}
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_ABORT ||
		event == XACT_EVENT_PREPARE)
		drop_nest_level = 0;
}

static void
extdrop_subxact_callback(SubXactEvent event, SubTransactionId sub, SubTransactionId parent,
						 void *arg)
{
	int			level = GetCurrentTransactionNestLevel();

	if (drop_nest_level < level)
		return;
	if (event == SUBXACT_EVENT_ABORT_SUB)
		drop_nest_level = 0;
	else if (event == SUBXACT_EVENT_COMMIT_SUB)
		drop_nest_level = level - 1;	/* the parent's now */
}

void
extension_drop_install_hooks(void)
{
	prev_object_access_hook = object_access_hook;
	object_access_hook = extdrop_object_access;
	RegisterXactCallback(extdrop_xact_callback, NULL);
	RegisterSubXactCallback(extdrop_subxact_callback, NULL);
}

bool
extension_drop_take(void)
{
	uint64		drops = atomic_load(&shape_sync_shared->extension_drops);

	if (drops == atomic_load(&shape_sync_shared->extension_drops_handled))
		return false;
	atomic_store(&shape_sync_shared->extension_drops_handled, drops);
	return true;
}
