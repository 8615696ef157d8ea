#!/usr/bin/env bash
#
# A shape larger than shape_sync.log_memory is refused with an error that
# names the GUC, its memory goes back to the arena, and other shapes keep
# working. A chunk threshold over a quarter of the log memory is warned of at start.
set -euo pipefail
source "$(dirname "$0")/../lib/lib.sh"
trap cluster_stop EXIT

SHAPE_SYNC_EXTRA_CONF="shape_sync.log_memory = '2MB'" cluster_start "$(cluster_free_port 4200)"
cluster_psql <<'SQL'
CREATE TABLE big (id int PRIMARY KEY, payload text);
INSERT INTO big SELECT g, repeat('x', 1000) FROM generate_series(1, 5000) g;
CREATE TABLE small (id int PRIMARY KEY, name text);
INSERT INTO small VALUES (1, 'one'), (2, 'two');
SQL
warning='WARNING:  "shape_sync.chunk_bytes_threshold" is more than a quarter of "shape_sync.log_memory"'
check "a chunk threshold (10MB) over a quarter of the log memory is warned of at start" \
	grep -qF "$warning" "$SHAPE_SYNC_LOG"
check "with the hint that fits" grep -qF 'Set "shape_sync.chunk_bytes_threshold" to 512 kB or less' "$SHAPE_SYNC_LOG"
pid_before=$(worker_pid)
total=$(cluster_psql -At -c 'SELECT total_bytes FROM shape_sync.log_memory_usage()' 2>/dev/null ||
	{ cluster_psql -q -c 'CREATE EXTENSION shape_sync'; cluster_psql -At -c 'SELECT total_bytes FROM shape_sync.log_memory_usage()'; })

body=$(mktemp)
status=$(curl -s -o "$body" -w '%{http_code}' "$SHAPE_SYNC_URL/v1/shape?table=big&offset=-1")
expect_eq "a shape larger than the log memory is refused with 400" 400 "$status"
expect_match "the error names shape_sync.log_memory" 'shape_sync\.log_memory' "$(cat "$body")"
expect_match "the error is Electric-style JSON" '^\{"message":"' "$(cat "$body")"

failures() { grep -c 'WARNING:  shape .* failed: shape is too large' "$SHAPE_SYNC_LOG" || true; }
failed_before=$(failures)
status=$(curl -s -m 60 -o "$body" -w '%{http_code}' "$SHAPE_SYNC_URL/v1/shape?table=big&offset=-1")
expect_eq "asking again at once gets the same error" 400 "$status"
expect_eq "without a new snapshot (no second failure is logged)" "$failed_before" "$(failures)"

free_is_total() {
	[[ $(cluster_psql -At -c 'SELECT free_bytes FROM shape_sync.log_memory_usage()') == "$total" ]]
}
check "the failed shape's memory goes back to the arena" wait_for 60 free_is_total

status=$(curl -s -o "$body" -w '%{http_code}' "$SHAPE_SYNC_URL/v1/shape?table=small&offset=-1")
expect_eq "a small shape is still served" 200 "$status"
expect_match "with its rows" '"value":\{"id":"2","name":"two"\}' "$(cat "$body")"
expect_eq "the worker did not restart" "$pid_before" "$(worker_pid)"
expect_match "the failure is logged as a WARNING" 'WARNING:  shape .* failed: shape is too large' "$(cat "$SHAPE_SYNC_LOG")"
rm -f "$body"
finish
