#!/usr/bin/env bash
#
# Durable shape logs across restarts: after a fast restart, an immediate stop, a SIGKILL of
# the worker (PostgreSQL restarts the instance) and a pg_terminate_backend() of the worker
# (it comes back by itself), and with shape_sync.log_fsync = commit and off, every shape is
# restored from $PGDATA/pg_shape_sync with its handle: its clients go on at their (handle,
# offset) with 200, get the changes committed before the stop exactly once and those after
# it live, and no snapshot runs again; each client's rows equal the table's.  A shape deleted
# with DELETE /v1/shape loses its files, and after a restart its handle gets 409.
set -euo pipefail
source "$(dirname "$0")/../lib/lib.sh"
init_work
shape_client_init

start_cluster_retrying 4720
cluster_psql >/dev/null <<'SQL'
CREATE EXTENSION shape_sync;
CREATE TABLE t (id int PRIMARY KEY, v text);
ALTER TABLE t REPLICA IDENTITY FULL;
INSERT INTO t SELECT g, 'r' || g FROM generate_series(1, 2000) g;
CREATE TABLE u (id int PRIMARY KEY, name text, note text);
ALTER TABLE u REPLICA IDENTITY FULL;
INSERT INTO u SELECT g, 'n' || g, 'x' || g FROM generate_series(1, 50) g;
SQL

shapes=(all low cols)
declare -A query=([all]="table=t" [low]="table=t&where=$(uri 'id <= 100')" [cols]="table=u&columns=id,name")
declare -A rows_sql=([all]="SELECT id, v FROM t ORDER BY id"
	[low]="SELECT id, v FROM t WHERE id <= 100 ORDER BY id"
	[cols]="SELECT id, name FROM u ORDER BY id")
declare -A columns=([all]="id v" [low]="id v" [cols]="id name")
declare -A field=([all]=v [low]=v [cols]=name)
declare -A handle

serving() { [[ $(http_status "$SHAPE_SYNC_URL/v1/health") == 200 ]]; }
metric() { curl -s "$SHAPE_SYNC_URL/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }
store() { _cluster_as_pg ls "$SHAPE_SYNC_PGDATA/pg_shape_sync"; }
# manifest [EXPR ARG...]: the manifest, or EXPR over it (see shape_client.py)
manifest() { _cluster_as_pg cat "$SHAPE_SYNC_PGDATA/pg_shape_sync/manifest" 2>/dev/null | sc manifest - "$@"; }
# restored_lines TEXT: how many times the log says "shape_sync restored TEXT shapes from disk"
restored_lines() { grep -c "shape_sync restored $1 shapes from disk in [0-9]* ms" "$SHAPE_SYNC_LOG" || true; }
more_restored() { (($(restored_lines "$1") > $2)); }
ready_lines() { grep -c 'database system is ready to accept connections' "$SHAPE_SYNC_LOG" || true; }
more_ready() { (($(ready_lines) > $1)); }
new_worker() { local p; p=$(worker_pid 2>/dev/null) || return 1; [[ -n $p && $p != "$1" ]]; }
# same_rows NAME: the rows the client of shape NAME holds are the table's
same_rows() {
	local name=$1
	# shellcheck disable=SC2086 # the column names
	sc rows "$work/$name.json" ${columns[$name]} >"$work/$name.client"
	cluster_psql -At -c "${rows_sql[$name]}" >"$work/$name.table"
	cmp -s "$work/$name.client" "$work/$name.table"
}
shapes_view() { cluster_psql -At -c "SELECT handle, created_at, snapshot_rows FROM shape_sync.shapes ORDER BY handle"; }

# every shape read whole, as a client that keeps (handle, offset)
for s in "${shapes[@]}"; do
	out=$(sc sync "$work/$s.json" --url "$SHAPE_SYNC_URL" --query "${query[$s]}")
	handle[$s]=$(cut -d' ' -f3 <<<"$out")
	expect_match "shape $s is read whole (${handle[$s]})" '^up-to-date 200 [0-9]+-[0-9]+ 0$' "$out"
	check "its client holds the table's rows" same_rows "$s"
done
expect_eq "the three snapshots ran" 3 "$(metric shape_sync_snapshots_started_total)"
stored() { [[ $(manifest 'len(m["shapes"])') == 3 ]]; }
check "the manifest lists the three shapes" wait_for 60 stored
listing=$(store)
for s in "${shapes[@]}"; do
	expect_match "shape $s has its data and shape files" "${handle[$s]}\.1\.log.*${handle[$s]}\.shape|${handle[$s]}\.shape.*${handle[$s]}\.1\.log" "$(tr '\n' ' ' <<<"$listing")"
done
view=$(shapes_view)

# the ways the server goes away
fast_restart() { cluster_restart; }
immediate_restart() {
	_cluster_as_pg "$SHAPE_SYNC_PG_BINDIR/pg_ctl" -D "$SHAPE_SYNC_PGDATA" -m immediate -w -t 60 stop >/dev/null
	_cluster_as_pg "$SHAPE_SYNC_PG_BINDIR/pg_ctl" -D "$SHAPE_SYNC_PGDATA" -l "$SHAPE_SYNC_LOG" -w -t 60 start >/dev/null
}
kill_worker() {
	local pid ready
	pid=$(worker_pid)
	ready=$(ready_lines)
	cluster_expect_crash "durable_restart.sh: SIGKILL to the shape_sync worker $pid"
	kill -KILL "$pid"
	wait_for 90 more_ready "$ready"
}
terminate_worker() {
	local pid
	pid=$(worker_pid)
	cluster_psql -At -c "SELECT pg_terminate_backend($pid)" >/dev/null
	wait_for 90 new_worker "$pid"
}

# cycle NAME HOW SNAPSHOTS [read]: changes, then HOW; the shapes must be restored and go on.
# SNAPSHOTS: what shape_sync_snapshots_started_total must read after it (shared memory is made
# anew when the instance restarts, so 0; it stays when only the worker is restarted). With
# "read", shape all's client reads the changes before HOW, often before they are durable (the
# test prints which): its offset is then past what the files hold, and the changes must not
# come again.
appended() { (($(manifest 'm["deltas"]') > 0)); }
k=0
cycle() {
	local name=$1 how=$2 snapshots=$3 read=${4:-} before s out pids=()
	k=$((k + 1))
	before=$(restored_lines "3 of 3")
	cluster_psql >/dev/null \
		-c "UPDATE t SET v = '$name' WHERE id IN (1, 50, 1500)" \
		-c "INSERT INTO t VALUES (2000 + $k, '$name')" \
		-c "DELETE FROM t WHERE id = 1900 + $k" \
		-c "UPDATE u SET name = '$name', note = 'changed' WHERE id = $k"
	if [[ -n $read ]]; then
		# one shape only, so that the stop comes soon after (a round is due every second)
		sc sync "$work/all.json" --until "v=$name" >"$work/all.live"
		expect_eq "$name: shape all's client reads the changes before the stop" \
			"found 200 ${handle[all]} 0" "$(cat "$work/all.live")"
		echo "# $name: shape all's client is at $(sc get "$work/all.json" 'd["offset"]'); the manifest holds it up to $(manifest '"%d_%d" % tuple(next(s["last"] for s in m["shapes"] if s["handle"] == a[0]))' "${handle[all]}")"
	else
		# the rounds since the last start append deltas to the manifest the first one wrote whole
		check "$name: the manifest is brought up to date by deltas appended to it" wait_for 60 appended
		echo "# $name: the manifest: $(manifest '"%d bytes whole, %d deltas after it" % (m["payload"] + 24, m["deltas"])')"
	fi
	check "$name: the server goes away and comes back" "$how"
	check "$name: shape_sync serves again" wait_for 90 serving
	check "$name: the log says \"restored 3 of 3 shapes\"" wait_for 60 more_restored "3 of 3" "$before"
	check "$name: the worker decodes what was written before the stop" wait_decoded
	for s in "${shapes[@]}"; do
		expect_eq "$name: shape $s answers its old (handle, offset) with 200 and its handle" \
			"up-to-date 200 ${handle[$s]} 0" "$(sc sync "$work/$s.json")"
	done
	expect_eq "$name: the changes before the stop arrive once (shape all)" 4 "$(sc count "$work/all.json" v "$name")"
	expect_eq "$name: the changes before the stop arrive once (shape low)" 2 "$(sc count "$work/low.json" v "$name")"
	expect_eq "$name: the changes before the stop arrive once (shape cols)" 1 "$(sc count "$work/cols.json" name "$name")"
	expect_eq "$name: no snapshot ran again (shape_sync_snapshots_started_total)" "$snapshots" \
		"$(metric shape_sync_snapshots_started_total)"
	expect_eq "$name: shape_sync.shapes shows the same shapes, made when they were" "$view" "$(shapes_view)"
	for s in "${shapes[@]}"; do
		sc sync "$work/$s.json" --until "${field[$s]}=live-$name" >"$work/$s.live" &
		pids+=($!)
		helpers+=($!)
	done
	sleep 1 # the requests are parked by now (or get the change at once: either must show it)
	cluster_psql >/dev/null -c "UPDATE t SET v = 'live-$name' WHERE id = 2" \
		-c "UPDATE u SET name = 'live-$name' WHERE id = 2"
	for s in "${shapes[@]}"; do
		wait "${pids[0]}" || true
		pids=("${pids[@]:1}")
		expect_eq "$name: a live request of shape $s gets a change made after the restart" \
			"found 200 ${handle[$s]} 0" "$(cat "$work/$s.live")"
		check "$name: the client of shape $s holds the table's rows" same_rows "$s"
	done
}

cycle fast fast_restart 0
cycle immediate immediate_restart 0
cycle immediate-after-read immediate_restart 0 read
cycle sigkill kill_worker 0
terminated=$(metric shape_sync_snapshots_started_total)
cycle terminate terminate_worker "$terminated"

# shape_sync.log_fsync = commit, then off: an immediate stop keeps the shapes too
# policy N: the manifest is written with shape_sync.log_fsync N (0 off, 1 batch, 2 commit); with
# commit a manifest is written after a change only, so this makes one
policy() {
	cluster_psql -c "UPDATE t SET v = 'policy-$1' WHERE id = 3" >/dev/null
	[[ $(manifest 'm["header"]["fsync_policy"]') == "$1" ]]
}
cluster_psql -c "ALTER SYSTEM SET shape_sync.log_fsync = commit" >/dev/null
cluster_reload
check "the manifest is written with shape_sync.log_fsync = commit" wait_for 60 policy 2
cycle fsync-commit immediate_restart 0
cluster_psql -c "ALTER SYSTEM SET shape_sync.log_fsync = off" >/dev/null
cluster_reload
check "the manifest is written with shape_sync.log_fsync = off" wait_for 60 policy 0
cycle fsync-off immediate_restart 0

# DELETE /v1/shape removes the shape's files; after a restart its handle gets 409
cluster_psql -c "ALTER SYSTEM SET shape_sync.log_fsync = batch" \
	-c "ALTER SYSTEM SET shape_sync.allow_shape_deletion = on" >/dev/null
cluster_reload
deleted() {
	[[ $(curl -s -o /dev/null -w '%{http_code}' -X DELETE \
		"$SHAPE_SYNC_URL/v1/shape?${query[cols]}&handle=${handle[cols]}") == 202 ]]
}
check "DELETE /v1/shape of shape cols answers 202" wait_for 60 deleted
files_gone() { ! store | grep -q "${handle[cols]}"; }
check "its files leave pg_shape_sync" wait_for 60 files_gone
listing=$(store | tr '\n' ' ')
expect_match "the other shapes' files stay" "${handle[all]}\.1\.log.*${handle[low]}|${handle[low]}.*${handle[all]}\.1\.log" "$listing"
before=$(restored_lines "2 of 2")
cluster_restart
check "after a restart shape_sync serves again" wait_for 90 serving
check "the log says \"restored 2 of 2 shapes\"" wait_for 60 more_restored "2 of 2" "$before"
expect_eq "the deleted shape's handle gets 409" 409 \
	"$(http_status "$SHAPE_SYNC_URL/v1/shape?${query[cols]}&handle=${handle[cols]}&offset=$(sc get "$work/cols.json" 'd["offset"]')")"
for s in all low; do
	expect_eq "shape $s still answers its old (handle, offset)" "up-to-date 200 ${handle[$s]} 0" \
		"$(sc sync "$work/$s.json")"
	check "and its client holds the table's rows" same_rows "$s"
done

log=$(cat "$SHAPE_SYNC_LOG")
check "no shape was refused at a restart" bash -c '! grep -E "is not restored|cannot be restored|discards its stored shape logs" "$1"' _ "$SHAPE_SYNC_LOG"
# (but the decoder's lag warning: after a crash the slot is back where the last checkpoint saved
# it, and the commits decoded again, which the restored shapes skip, may be older than
# shape_sync.decoder_lag_warning)
check "no ERROR, PANIC or WARNING from shape_sync" \
	bash -c '! grep -E "PANIC|TRAP:|(ERROR|WARNING):.*shape" "$1" | grep -v "WARNING:  shape_sync.s decoding is [0-9.]* s behind the commits"' _ "$SHAPE_SYNC_LOG"
expect_match "the worker logs its restores" 'shape_sync restored 3 of 3 shapes from disk in [0-9]+ ms' "$log"
out=$(cluster_crash_check "$SHAPE_SYNC_LOG") || true
expect_eq "no crash but the SIGKILL the test made" "" "$out"
finish
