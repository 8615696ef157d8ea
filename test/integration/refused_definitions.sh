#!/usr/bin/env bash
#
# Failed validations count against the client (issue 24, item 3): each refused definition
# cost the main thread its validation (up to shape_sync.where_evaluation_timeout), and no
# per-client limit counted it.  Now a client whose definitions were refused
# shape_sync.max_new_shapes_per_client times in the minute gets 503 with retry-after before
# any more are looked at; other clients, and the shapes it had (their definitions validated
# lately), are served.
# Before: the 4th and later invalid definitions all got 400, each validated anew.
set -euo pipefail
source "$(dirname "$0")/../lib/lib.sh"
init_work

SHAPE_SYNC_EXTRA_CONF="shape_sync.max_new_shapes_per_client = 3" start_cluster_retrying 4580
cluster_psql <<'SQL'
CREATE TABLE t (id int PRIMARY KEY, v text);
ALTER TABLE t REPLICA IDENTITY FULL;
INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 10) g;
SQL
base="http://127.0.0.1:${SHAPE_SYNC_URL##*:}/v1/shape?table=t"
# get FROM WHERE [QUERY]: status of a request from address FROM; headers in $work/h, body in $work/b
get() {
	curl -s --interface "$1" -D "$work/h" -o "$work/b" -w '%{http_code}' \
		"$base&where=$(uri "$2")${3:-&offset=-1}"
}

# a shape of the client's, resolved before it goes wrong
expect_eq "the client's first shape is served" 200 "$(get 127.0.0.1 'id <= 5')"
handle=$(header electric-handle "$work/h")

codes=()
for i in 1 2 3 4 5; do
	codes+=("$(get 127.0.0.1 "nosuch_$i = 1")")
done
expect_eq "three invalid definitions are refused with 400, then 503" "400 400 400 503 503" "${codes[*]}"
retry=$(header retry-after "$work/h")
check "with a retry-after of at most a minute" test "${retry:-0}" -ge 1 -a "${retry:-0}" -le 61
expect_match "naming the limit" 'invalid shape definitions.*max_new_shapes_per_client' "$(cat "$work/b")"
expect_eq "a valid new definition of that client waits too" 503 "$(get 127.0.0.1 'id <= 6')"
expect_eq "its shape made before is still served" 200 "$(get 127.0.0.1 'id <= 5' "&offset=-1")"
expect_eq "under the same handle" "$handle" "$(header electric-handle "$work/h")"
expect_eq "another client is served" 200 "$(get 127.0.0.2 'id <= 7')"
expect_eq "and gets its own 400s" 400 "$(get 127.0.0.2 'nosuch = 1')"
finish
