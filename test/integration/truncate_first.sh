#!/usr/bin/env bash
#
# A TRUNCATE decoded before any shape exists (a fresh or restarted worker) must not
# crash the worker: it dereferenced its not yet allocated streams and restarted in a loop.
set -euo pipefail
source "$(dirname "$0")/../lib/lib.sh"
init_work

start_cluster_retrying 4480
pid=$(worker_pid)
cluster_psql -c "CREATE TABLE tt (id int PRIMARY KEY)" -c "INSERT INTO tt VALUES (1)" -c "TRUNCATE tt"
sleep 2
expect_eq "the worker did not crash" 0 "$(grep -c 'terminated by signal' "$SHAPE_SYNC_LOG" || true)"
expect_eq "it is the same worker" "$pid" "$(worker_pid)"
finish
