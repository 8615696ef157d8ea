#!/usr/bin/env bash
#
# Loading shape_sync without shared_preload_libraries fails with an error
# that says how to fix the configuration, and breaks nothing else.
set -euo pipefail
source "$(dirname "$0")/../lib/lib.sh"
trap cluster_stop EXIT

SHAPE_SYNC_PRELOAD='' SHAPE_SYNC_HEALTH_TIMEOUT=0 cluster_start "$(cluster_free_port 4100)"

out=$(cluster_psql -c 'CREATE EXTENSION shape_sync' 2>&1 || true)
expect_match "CREATE EXTENSION without preloading is refused" \
	'shape_sync can only be loaded via "shared_preload_libraries"' "$out"
expect_match "the error hints at the fix" \
	'HINT:  Add shape_sync to the "shared_preload_libraries" configuration parameter and restart the server.' "$out"
out=$(cluster_psql -c "LOAD 'shape_sync'" 2>&1 || true)
expect_match "LOAD without preloading is refused" 'can only be loaded via' "$out"
expect_eq "the server still answers" "1" "$(cluster_psql -At -c 'SELECT 1')"
finish
