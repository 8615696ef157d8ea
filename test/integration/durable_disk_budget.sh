#!/usr/bin/env bash
#
# shape_sync.log_disk_budget: three shapes of about 5 MB each under a budget of 12 MB. Once the
# third is made, the least recently read of them that no request holds is evicted (its clients
# get 409, its files go, the metric counts cause="log_disk") and the data files fit the budget
# again; the two others keep their handles. A shape whose snapshot alone is larger than the
# budget fails with a 400 that names the setting, and leaves no file. The journal keeps within
# an eighth of the budget, and is emptied to stay there. With the budget at 0 (no limit) the
# same shape is made.
set -euo pipefail
source "$(dirname "$0")/../lib/lib.sh"
init_work
shape_client_init

export SHAPE_SYNC_EXTRA_CONF="shape_sync.log_disk_budget = '12MB'
shape_sync.chunk_bytes_threshold = 1048576${SHAPE_SYNC_EXTRA_CONF:+
$SHAPE_SYNC_EXTRA_CONF}"
start_cluster_retrying 4740
cluster_psql >/dev/null <<'SQL'
CREATE EXTENSION shape_sync;
CREATE TABLE t (id int PRIMARY KEY, v text);
INSERT INTO t SELECT g, repeat(md5(g::text), 128) FROM generate_series(1, 3600) g;
SQL

store() { _cluster_as_pg ls "$SHAPE_SYNC_PGDATA/pg_shape_sync"; }
data_bytes() { _cluster_as_pg sh -c "cat '$SHAPE_SYNC_PGDATA'/pg_shape_sync/*.log 2>/dev/null | wc -c"; }
metric() { curl -s "$SHAPE_SYNC_URL/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }
declare -A handle
for k in 0 1 2; do
	out=$(sc sync "$work/s$k.json" --url "$SHAPE_SYNC_URL" --query "table=t&where=$(uri "id % 3 = $k")" --log off)
	handle[$k]=$(cut -d' ' -f3 <<<"$out")
	expect_match "shape $k is read whole (${handle[$k]})" '^up-to-date 200 [0-9]+-[0-9]+ 0$' "$out"
	sleep 1.5			# its files written, and the order of last reads plain
done

evicted() { [[ $(metric 'shape_sync_shape_evictions_total{cause="log_disk"}') == 1 ]]; }
check "past the budget, one shape is evicted for it" wait_for 30 evicted
for k in 1 2; do
	expect_eq "shape $k keeps its handle" "up-to-date 200 ${handle[$k]} 0" "$(sc sync "$work/s$k.json")"
done
gone() { ! store | grep -q "^${handle[0]}\."; }
check "the evicted shape's files go" wait_for 30 gone
within() { (($(data_bytes) <= 12 * 1024 * 1024)); }
check "the data files fit the budget again" wait_for 30 within
# (its 409 makes the shape again, which evicts the least recently read of the others)
expect_eq "the least recently read one, shape 0: its client gets 409" "409" "$(sc sync "$work/s0.json" | cut -d' ' -f1)"

# a shape larger than the budget by itself
files_before=$(store | sort)
status=$(curl -s -o "$work/big.json" -w '%{http_code}' --max-time 60 "$SHAPE_SYNC_URL/v1/shape?table=t&offset=-1")
refused() {
	[[ $status == 400 ]] && grep -q 'shape_sync.log_disk_budget' "$work/big.json" && return 0
	# the first chunks may be answered before the snapshot fails: its next request says why
	status=$(curl -s -o "$work/big.json" -w '%{http_code}' --max-time 60 "$SHAPE_SYNC_URL/v1/shape?table=t&offset=-1")
	return 1
}
check "a shape whose snapshot alone passes the budget fails with 400 naming the setting" wait_for 30 refused
same_files() { [[ $(store | sort) == "$files_before" ]]; }
check "and leaves no file" wait_for 30 same_files

# the journal keeps within an eighth of the budget (2.5 MB of 20 MB): transactions a round apart
# that make the files gain about 4 MB in all; sampled every 0.1 s, it never passes 2.5 MB and is
# emptied at least once (with 64 MB as its only limit it would hold all of it)
cluster_psql -q -c "ALTER SYSTEM SET shape_sync.log_disk_budget = '20MB'" -c "SELECT pg_reload_conf()" >/dev/null
sleep 1.5
python3 - "$SHAPE_SYNC_PGDATA/pg_shape_sync/journal" >"$work/journal_sizes" <<'PY' &
import os, sys, time
end = time.time() + 600  # killed when the writes are done; this only bounds a stray one
last = None
while time.time() < end:
    try:
        size = os.stat(sys.argv[1]).st_size
    except OSError:
        size = 0
    if size != last:
        print(size, flush=True)
        last = size
    time.sleep(0.1)
PY
sampler=$!
evictions_before=$(metric 'shape_sync_shape_evictions_total{cause="log_disk"}')
for ((i = 1; i <= 16; i++)); do
	cluster_psql -q -c "UPDATE t SET v = repeat(md5((g.i * 1000 + $i)::text), 128) FROM generate_series(1, 90) g(i) WHERE id = g.i"
	sleep 1.2
done
kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null || true
max=$(sort -n "$work/journal_sizes" | tail -1)
expect_eq "the journal grew" 1 "$((max > 0))"
expect_eq "and never passed an eighth of the budget ($max bytes)" 1 "$((max <= 20 * 1024 * 1024 / 8))"
emptied=$(awk 'NR > 1 && $1 < prev { n++ } { prev = $1 } END { print n + 0 }' "$work/journal_sizes")
expect_eq "it was emptied meanwhile" 1 "$((emptied > 0))"
expect_eq "no shape was evicted for it" "$evictions_before" "$(metric 'shape_sync_shape_evictions_total{cause="log_disk"}')"

cluster_psql -q -c "ALTER SYSTEM SET shape_sync.log_disk_budget = 0" -c "SELECT pg_reload_conf()" >/dev/null
made() { [[ $(curl -s -o /dev/null -w '%{http_code}' --max-time 60 "$SHAPE_SYNC_URL/v1/shape?table=t&offset=-1") == 200 ]]; }
check "with no budget, the same shape is made" wait_for 30 made

check "no ERROR, PANIC or WARNING from shape_sync" \
	bash -c '! grep -E "PANIC|TRAP:|(ERROR|WARNING):.*shape" "$1" | grep -v "disk budget"' _ "$SHAPE_SYNC_LOG"
out=$(cluster_crash_check "$SHAPE_SYNC_LOG") || true
expect_eq "no crash" "" "$out"
finish
