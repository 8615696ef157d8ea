#!/usr/bin/env bash
#
# A shape larger than shape_sync.log_memory (8 MB here, chunks of 1 MB): its changes grow its
# log to five times the arena while a client follows it live; its closed chunks leave memory for
# its data file and are read back from there.  The live client never gets 409 (the shape is
# neither rotated nor evicted), a new client reads all of it from offset -1 and holds the
# table's rows, a fast restart restores it (read back chunk by chunk into a smaller arena than
# it needs) and both clients go on at their (handle, offset); a third client after the restart
# holds the table's rows too.  A shape whose snapshot is five times the arena is taken (written
# to its file as it goes), read whole, and restored; another, deleted while it is written, leaves
# nothing behind.  Four shapes whose open chunks together
# are twice the arena stay (their written logs leave memory) instead of being evicted.  With
# its data file cut to nothing by hand, what left memory is
# answered 503 (also to live and SSE requests), with one warning that names the file.  Once
# every shape is deleted, no file of theirs stays open in the worker.
set -euo pipefail
source "$(dirname "$0")/../lib/lib.sh"
init_work
shape_client_init

export SHAPE_SYNC_EXTRA_CONF="shape_sync.log_memory = '8MB'
shape_sync.chunk_bytes_threshold = 1048576
shape_sync.allow_shape_deletion = on${SHAPE_SYNC_EXTRA_CONF:+
$SHAPE_SYNC_EXTRA_CONF}"
start_cluster_retrying 4730
cluster_psql >/dev/null <<'SQL'
CREATE EXTENSION shape_sync;
CREATE TABLE t (id int PRIMARY KEY, v text);
INSERT INTO t SELECT g, 'r' || g FROM generate_series(1, 100) g;
SQL

serving() { [[ $(http_status "$SHAPE_SYNC_URL/v1/health") == 200 ]]; }
# shapes evicted or rotated so far, less those deleted on purpose
gone_shapes() {
	curl -s "$SHAPE_SYNC_URL/metrics" |
		awk '$1 ~ /^shape_sync_shape_(evictions|rotations)_total/ && $1 !~ /cause="deleted"/ { s += $2 } END { print s + 0 }'
}
manifest() { _cluster_as_pg cat "$SHAPE_SYNC_PGDATA/pg_shape_sync/manifest" 2>/dev/null | sc manifest - "$@"; }
same_rows() {
	sc rows "$work/$1.json" id v >"$work/$1.client"
	cluster_psql -At -c "SELECT id, v FROM t ORDER BY id" >"$work/$1.table"
	cmp -s "$work/$1.client" "$work/$1.table"
}
# write N: N transactions of 100 rows of 4 kB each (about 400 kB of log each), inserts, then
# updates of earlier rows
write() {
	for ((k = 0; k < $1; k++)); do
		cluster_psql -q >/dev/null <<SQL
INSERT INTO t SELECT g, repeat(md5(g::text), 128) FROM generate_series($next, $((next + 99))) g;
UPDATE t SET v = 'updated ' || id WHERE id = $((next / 2));
SQL
		next=$((next + 100))
	done
}
next=1000

out=$(sc sync "$work/live.json" --url "$SHAPE_SYNC_URL" --query "table=t")
handle=$(cut -d' ' -f3 <<<"$out")
expect_match "a client reads the shape ($handle)" '^up-to-date 200 [0-9]+-[0-9]+ 0$' "$out"
write 50
check "the worker decodes them" wait_decoded
expect_eq "the live client follows 20 MB of changes on its handle" "up-to-date 200 $handle 0" \
	"$(sc sync "$work/live.json")"
check "and holds the table's rows" same_rows live
write 50
check "the worker decodes them" wait_decoded
expect_eq "and 20 MB more" "up-to-date 200 $handle 0" "$(sc sync "$work/live.json")"
check "and holds the table's rows" same_rows live
big() { (($(manifest 'm["shapes"][0]["length"]') > 5 * 8 * 1024 * 1024)); }
check "the manifest lists a log of more than 5 times shape_sync.log_memory" wait_for 60 big

out=$(sc sync "$work/new.json" --url "$SHAPE_SYNC_URL" --query "table=t")
expect_eq "a new client reads all of it from offset -1, on the same handle" "up-to-date 200 $handle 0" "$out"
check "and holds the table's rows" same_rows new
expect_eq "no shape was evicted or rotated" "0" \
	"$(gone_shapes)"

# its file, cut to nothing by hand, cannot be read (also through the descriptors the HTTP
# threads keep open): a 503 with retry-after (never a wrong or cut body, never a wait), and one
# warning that names the file; its bytes back in place, all is well
# (the file the manifest names: a generation that a compaction replaced may linger a moment)
data="$handle.$(manifest 'm["shapes"][0]["generation"]').log"
_cluster_as_pg cp "$SHAPE_SYNC_PGDATA/pg_shape_sync/$data" "$SHAPE_SYNC_PGDATA/pg_shape_sync/$data.aside"
_cluster_as_pg truncate -s 0 "$SHAPE_SYNC_PGDATA/pg_shape_sync/$data"
url="$SHAPE_SYNC_URL/v1/shape?table=t&offset=-1"
expect_eq "without its file, a read of what left memory gets 503" 503 "$(http_status "$url")"
expect_match "with retry-after" 'retry-after: 1' "$(curl -s -D - -o /dev/null "$url" | tr -d '\r' | tr 'A-Z' 'a-z')"
live_url="$SHAPE_SYNC_URL/v1/shape?table=t&handle=$handle&offset=0_0&live=true"
expect_eq "a live request there too, at once" 503 "$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 "$live_url")"
expect_eq "and an SSE one" 503 "$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 "$live_url&live_sse=true")"
warned() { grep -q "WARNING:  shape_sync http: could not read file \"pg_shape_sync/$data\": No data available" "$SHAPE_SYNC_LOG"; }
check "the log names the file and why" wait_for 10 warned
_cluster_as_pg sh -c "cat '$SHAPE_SYNC_PGDATA/pg_shape_sync/$data.aside' >'$SHAPE_SYNC_PGDATA/pg_shape_sync/$data'"
_cluster_as_pg rm "$SHAPE_SYNC_PGDATA/pg_shape_sync/$data.aside"
expect_eq "back in place, it is read again" 200 "$(http_status "$url")"

# a snapshot five times larger than memory: written to its file as it is taken, its chunks
# leave memory while it goes on
cluster_psql -q >/dev/null <<'SQL'
CREATE TABLE big (id int PRIMARY KEY, v text);
INSERT INTO big SELECT g, repeat(md5(g::text), 128) FROM generate_series(1, 10000) g;
-- chunks of half the arena: the snapshot makes room for the next one itself (the other shapes
-- are idle; eviction would take them)
ALTER SYSTEM SET shape_sync.chunk_bytes_threshold = '4MB';
SELECT pg_reload_conf();
SQL
sleep 1
same_big() {
	sc rows "$work/big.json" id v >"$work/big.client"
	cluster_psql -At -c "SELECT id, v FROM big ORDER BY id" >"$work/big.table"
	cmp -s "$work/big.client" "$work/big.table"
}
out=$(sc sync "$work/big.json" --url "$SHAPE_SYNC_URL" --query "table=big" --timeout 300)
big_handle=$(cut -d' ' -f3 <<<"$out")
expect_match "a shape of a 40 MB table is read whole ($big_handle)" '^up-to-date 200 [0-9]+-[0-9]+ 0$' "$out"
check "and its client holds the table's rows" same_big
expect_eq "no shape was evicted or rotated for it" "0" \
	"$(gone_shapes)"
big_listed() { [[ $(manifest 'len(m["shapes"])') == 2 ]]; }
check "the manifest lists it" wait_for 60 big_listed

# another snapshot of it, deleted while it is written to its file: its worker stops quietly
# (no failure counted, no warning), its file goes, and the memory it held comes back (all of
# it once every shape is deleted, below). The snapshot takes a fraction of a second, so its
# worker (idle since the last one, a child of this postmaster) is stopped with SIGSTOP once its
# file holds its first chunk, and let go after the delete.
snapshots_failed() { curl -s "$SHAPE_SYNC_URL/metrics" | awk '$1 == "shape_sync_snapshots_failed_total" { print $2 }'; }
failed_before=$(snapshots_failed)
postmaster=$(_cluster_as_pg head -1 "$SHAPE_SYNC_PGDATA/postmaster.pid")
snapshot_workers=$(pgrep -P "$postmaster" -f 'shape_sync snapshot worker' | tr '\n' ' ')
check "the last snapshot's worker is still there, idle ($snapshot_workers)" test -n "$snapshot_workers"
# stop_when_spilling KNOWN...: prints the handle and size of a data file not of KNOWN once it
# passes 4 MB, after stopping the workers
stop_when_spilling() {
	python3 - "$SHAPE_SYNC_PGDATA/pg_shape_sync" "$*" $snapshot_workers <<'PY'
import os, signal, sys, time
store, known, pids = sys.argv[1], set(sys.argv[2].split()), [int(p) for p in sys.argv[3:]]
end = time.time() + 60
while time.time() < end:
    for name in os.listdir(store):
        handle = name[:-len(".1.log")]
        if name.endswith(".1.log") and handle not in known:
            try:
                size = os.stat(os.path.join(store, name)).st_size
            except FileNotFoundError:
                continue
            if size > 4 * 1024 * 1024:
                for pid in pids:
                    os.kill(pid, signal.SIGSTOP)
                print(handle, size)
                sys.exit(0)
    time.sleep(0.001)
sys.exit(1)
PY
}
# the whole snapshot takes a fraction of a second: a machine too busy to stop it in time gets
# another try, with another shape (the one that finished is deleted)
known="$big_handle $handle"
for ((try = 0; try < 5; try++)); do
	spill_where="id > $try"
	curl -s -o /dev/null --max-time 300 "$SHAPE_SYNC_URL/v1/shape?table=big&where=$(uri "$spill_where")&offset=-1" &
	spill_request=$!
	spill=$(stop_when_spilling $known) || true
	spill_handle=${spill%% *}
	bytes=${spill##* }
	[[ -n $spill ]] || break
	state=$(cluster_psql -At -c "SELECT state FROM shape_sync.shapes WHERE handle = '$spill_handle'")
	[[ $state == snapshotting ]] && break
	echo "# try $try: the snapshot of $spill_handle was $state before it could be stopped"
	for pid in $snapshot_workers; do kill -CONT "$pid" 2>/dev/null || true; done
	wait "$spill_request" || true
	curl -s -o /dev/null -X DELETE "$SHAPE_SYNC_URL/v1/shape?handle=$spill_handle&table=big&where=$(uri "$spill_where")"
	known="$known $spill_handle"
done
check "a second snapshot of it writes its first chunks to its file (${spill:-none seen})" test -n "$spill"
expect_eq "and, stopped with $bytes of about 40 MB written, is still under way" "snapshotting" "$state"
expect_eq "the delete is accepted" 202 \
	"$(curl -s -o /dev/null -w '%{http_code}' -X DELETE "$SHAPE_SYNC_URL/v1/shape?handle=$spill_handle&table=big&where=$(uri "$spill_where")")"
sleep 1
for pid in $snapshot_workers; do kill -CONT "$pid" 2>/dev/null || true; done
wait "$spill_request" || true
spill_gone() {
	[[ -z $(cluster_psql -At -c "SELECT handle FROM shape_sync.shapes WHERE handle = '$spill_handle'") ]] &&
		! _cluster_as_pg ls "$SHAPE_SYNC_PGDATA/pg_shape_sync" | grep -q "^$spill_handle\."
}
check "the deleted snapshot's shape and files go" wait_for 60 spill_gone
expect_eq "its snapshot counts as cancelled, not failed" "$failed_before" "$(snapshots_failed)"
cluster_psql -q -c "ALTER SYSTEM RESET shape_sync.chunk_bytes_threshold" -c "SELECT pg_reload_conf()" >/dev/null

# open chunks that together outgrow memory (chunks of 64 MB never close here): under eviction's
# reserve, the least recently read shapes on disk give back their whole written logs and stay,
# where before they were evicted (409)
cluster_psql -q >/dev/null <<'SQL'
ALTER SYSTEM SET shape_sync.chunk_bytes_threshold = '64MB';
SELECT pg_reload_conf();
CREATE TABLE tails (id int PRIMARY KEY, v text);
INSERT INTO tails VALUES (0, 'first'), (1, 'first'), (2, 'first'), (3, 'first');
SQL
sleep 1
declare -A tail_handle
for k in 0 1 2 3; do
	out=$(sc sync "$work/tail$k.json" --url "$SHAPE_SYNC_URL" --query "table=tails&where=$(uri "id % 4 = $k")" --log off)
	tail_handle[$k]=$(cut -d' ' -f3 <<<"$out")
done
for ((b = 0; b < 40; b++)); do
	cluster_psql -q -c "INSERT INTO tails SELECT g, repeat(md5(g::text), 128) FROM generate_series($((4 + b * 100)), $((3 + (b + 1) * 100))) g" >/dev/null
	for k in 0 1 2 3; do sc sync "$work/tail$k.json" >/dev/null; done
done
same_tail() {
	sc rows "$work/tail$1.json" id v >"$work/tail$1.client"
	cluster_psql -At -c "SELECT id, v FROM tails WHERE id % 4 = $1 ORDER BY id" >"$work/tail$1.table"
	cmp -s "$work/tail$1.client" "$work/tail$1.table"
}
for k in 0 1 2 3; do
	expect_eq "shape tails/$k (a 4 MB open chunk) kept its handle" "up-to-date 200 ${tail_handle[$k]} 0" \
		"$(sc sync "$work/tail$k.json")"
	check "and its client holds the table's rows" same_tail "$k"
done
expect_eq "16 MB of open chunks in 8 MB of memory: nothing evicted or rotated" "0" \
	"$(gone_shapes)"
cluster_psql -q -c "ALTER SYSTEM RESET shape_sync.chunk_bytes_threshold" -c "SELECT pg_reload_conf()" >/dev/null

cluster_restart
check "after a restart shape_sync serves again" wait_for 90 serving
restored() { grep -q "shape_sync restored 6 of 6 shapes from disk" "$SHAPE_SYNC_LOG"; }
check "the log says \"restored 6 of 6 shapes\"" wait_for 60 restored
cluster_psql -q -c "UPDATE big SET v = 'after' WHERE id % 1000 = 0" >/dev/null
check "the worker decodes the update" wait_decoded
expect_eq "the big shape's client goes on at its (handle, offset)" "up-to-date 200 $big_handle 0" \
	"$(sc sync "$work/big.json")"
check "and holds the table's rows" same_big
write 10
check "the worker decodes them" wait_decoded
for c in live new; do
	expect_eq "client $c goes on at its (handle, offset)" "up-to-date 200 $handle 0" "$(sc sync "$work/$c.json")"
	check "and holds the table's rows" same_rows "$c"
done
out=$(sc sync "$work/third.json" --url "$SHAPE_SYNC_URL" --query "table=t")
expect_eq "a client after the restart reads all of it on the same handle" "up-to-date 200 $handle 0" "$out"
check "and holds the table's rows" same_rows third

# a chunk larger than the arena: the 400 names the setting to lower
cluster_psql -q -c "ALTER SYSTEM SET shape_sync.chunk_bytes_threshold = '32MB'" -c "SELECT pg_reload_conf()" >/dev/null
chunk_refused() {
	curl -s -o "$work/chunk.json" --max-time 60 "$SHAPE_SYNC_URL/v1/shape?table=big&where=$(uri "id > 0")&offset=-1"
	grep -q 'shape_sync.chunk_bytes_threshold' "$work/chunk.json"
}
check "a chunk larger than the arena fails with a 400 that names shape_sync.chunk_bytes_threshold" \
	wait_for 60 chunk_refused
cluster_psql -q -c "ALTER SYSTEM RESET shape_sync.chunk_bytes_threshold" -c "SELECT pg_reload_conf()" >/dev/null

# every shape deleted: every block of the arena comes back, no file but the manifest stays
for c in live big tail0 tail1 tail2 tail3; do
	h=$(sc get "$work/$c.json" 'd["handle"]')
	q=$(sc get "$work/$c.json" 'd["query"]' 2>/dev/null || true)
	curl -s -o /dev/null -X DELETE "$SHAPE_SYNC_URL/v1/shape?handle=$h&$q"
done
all_free() { [[ $(cluster_psql -At -c "SELECT total_bytes = free_bytes FROM shape_sync.log_memory_usage()") == t ]]; }
check "with every shape deleted, all of shape_sync.log_memory is free again" wait_for 60 all_free
only_manifest() {
	[[ $(_cluster_as_pg ls "$SHAPE_SYNC_PGDATA/pg_shape_sync" | grep -v -e '^manifest$' -e '^journal$' | wc -l) == 0 &&
		$(_cluster_as_pg stat -c %s "$SHAPE_SYNC_PGDATA/pg_shape_sync/journal" 2>/dev/null || echo 0) == 0 ]]
}
check "and pg_shape_sync holds nothing but the manifest and an empty journal" wait_for 60 only_manifest
# the HTTP threads keep the file they read last open (reader_files.c): none of those removed
# stays open, so their space is given back
held_open() { _cluster_as_pg ls -l "/proc/$(worker_pid)/fd" 2>/dev/null | grep -c 'pg_shape_sync/.*(deleted)' || true; }
none_held() { [[ $(held_open) == 0 ]]; }
check "and the worker holds none of their files open" wait_for 30 none_held

check "no ERROR, PANIC or WARNING from shape_sync but the file cut and the chunk too large" \
	bash -c '! grep -E "PANIC|TRAP:|(ERROR|WARNING):.*shape" "$1" | grep -v -e "could not read file \"pg_shape_sync/$2\"" -e "too large for the shape log memory" -e "is more than a quarter of"' _ "$SHAPE_SYNC_LOG" "$data"
out=$(cluster_crash_check "$SHAPE_SYNC_LOG") || true
expect_eq "no crash" "" "$out"
finish
