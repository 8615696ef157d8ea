#!/usr/bin/env bash
#
# A shape log that cannot be written to disk: the write fails for that shape alone, which is
# kept in memory only, with a warning: it is served as before (no gap), its files are removed,
# and a restart drops it (409); the server and every other shape go on, and keep their files. The disk is "full" for files over 24 MB: PostgreSQL runs under `ulimit -f`, and
# the postmaster ignores SIGXFSZ, so a write past the limit fails with EFBIG as a write on a
# full disk fails with ENOSPC (WAL segments, 16 MB, stay under it).
set -euo pipefail
source "$(dirname "$0")/../lib/lib.sh"
init_work

ulimit -f $((24 * 1024))	# 1 kB blocks
SHAPE_SYNC_EXTRA_CONF="shape_sync.log_memory = 256MB" start_cluster_retrying 4620
cluster_psql <<'SQL' >/dev/null
CREATE TABLE small (id int PRIMARY KEY, v text);
ALTER TABLE small REPLICA IDENTITY FULL;
INSERT INTO small VALUES (1, 'a');
CREATE TABLE big (id int PRIMARY KEY, payload text);
ALTER TABLE big REPLICA IDENTITY FULL;
INSERT INTO big SELECT g, repeat('x', 4000) FROM generate_series(1, 10000) g;  -- compressed in the table, 40 MB in the log
SQL
small="$SHAPE_SYNC_URL/v1/shape?table=small"
big="$SHAPE_SYNC_URL/v1/shape?table=big"
handle_of() { curl -s -D - -o /dev/null "$1&offset=-1" | tr -d '\r' | sed -n 's/^electric-handle: //Ip'; }
small_handle=$(handle_of "$small")
check "the small shape is made" test -n "$small_handle"
big_handle=$(handle_of "$big")
check "the big shape is made (its log, about 40 MB, fits in memory)" test -n "$big_handle"

warned() { grep -q "shape $big_handle is kept in memory only: could not write file" "$SHAPE_SYNC_LOG"; }
check "writing the big shape's file fails, with a warning that names it" wait_for 60 warned
gone() { ! ls "$SHAPE_SYNC_PGDATA/pg_shape_sync" | grep -q "^$big_handle"; }
check "its files are removed" wait_for 60 gone
cluster_psql -c "UPDATE big SET payload = 'changed' WHERE id = 7" >/dev/null
# follows the big shape's chunks from its start until a response holds the change
has_change() {
	local offset=0_0 i
	for ((i = 0; i < 50; i++)); do
		curl -s -D "$work/big.h" -o "$work/big.b" "$big&offset=$offset&handle=$big_handle"
		grep -q '"payload":"changed"' "$work/big.b" && return 0
		grep -qi '^electric-up-to-date' "$work/big.h" && return 1
		offset=$(tr -d '\r' <"$work/big.h" | sed -n 's/^electric-offset: //Ip')
	done
	return 1
}
check "it is still served, with its changes" wait_for 60 has_change
cluster_psql -c "UPDATE small SET v = 'b' WHERE id = 1" >/dev/null
body=$(curl -s -m 30 "$small&offset=0_0&handle=$small_handle&live=true")
expect_match "the small shape goes on" '"v":"b"' "$body"

cluster_restart
serving() { [[ $(http_status "$SHAPE_SYNC_URL/v1/health") == 200 ]]; }
check "the server serves again after a restart" wait_for 60 serving
expect_eq "the small shape was kept on disk: its handle goes on" 200 \
	"$(http_status "$small&offset=0_0&handle=$small_handle")"
expect_eq "the big one was not: 409" 409 "$(http_status "$big&offset=0_0&handle=$big_handle")"
check "no crash, PANIC or FATAL from the worker" \
	bash -c '! grep -E "PANIC|terminated by signal|TRAP:|FATAL:.*shape_sync" "$1"' _ "$SHAPE_SYNC_LOG"
finish
