#!/usr/bin/env bash
#
# Many subset queries at once (issue 13, item 3): each runs in the snapshot
# pool, never on the main thread; at most 64 are in flight, and the rest get
# 503 with retry-after at once, not a stalled server; every one that waits
# longer than shape_sync.snapshot_wait_timeout gets 503 with retry-after;
# whatever way a request ended, its cell comes back.
#
# 1. 200 subset requests at once, each a scan of a 200,000-row table, with
#    one snapshot worker: every answer is 200 with the SELECT's row count, or
#    503 with retry-after; some are 503 (more than one client's 16 were in
#    flight); while they run (some are still unanswered), a plain shape
#    request and the health check are answered.
# 2. Then 16 at once, a client's share, all succeed: every cell came back.
# 3. With snapshot_wait_timeout = 1s and a query that takes longer, a subset
#    answers 503 with retry-after; the next one, fast, succeeds.
# 4. A subset whose answer outgrows an eighth of shape_sync.log_memory (16 MB
#    here) answers 400 and evicts no shape: the shape keeps its handle.
set -euo pipefail
source "$(dirname "$0")/../lib/lib.sh"
init_work
trap cleanup_work EXIT

SHAPE_SYNC_EXTRA_CONF="shape_sync.max_snapshot_workers = 1
shape_sync.log_memory = '16MB'
shape_sync.max_concurrent_existing = 1000
shape_sync.max_concurrent_initial = 1000" start_cluster_retrying 5190
cluster_psql <<'SQL'
CREATE TABLE wide (id int PRIMARY KEY, grp int, v text);
INSERT INTO wide SELECT g, g % 1000, md5(g::text) FROM generate_series(1, 200000) g;
ANALYZE wide;
SQL
base="$SHAPE_SYNC_URL/v1/shape?table=wide&offset=-1&log=changes_only"
want=$(cluster_psql -At -c "SELECT count(*) FROM wide WHERE v LIKE '%ab%' AND grp < 20")
q="subset__where=v%20LIKE%20%27%25ab%25%27%20AND%20grp%20%3C%2020"

# burst N PREFIX: N subset requests at once, each saved as PREFIX.i.{h,b,status}
burst() {
	local n=$1 prefix=$2 i
	for ((i = 0; i < n; i++)); do
		curl -s --max-time 60 -D "$work/$prefix.$i.h" -o "$work/$prefix.$i.b" -w '%{http_code}' \
			"$base&$q" >"$work/$prefix.$i.status" &
	done
}

# count_status PREFIX N CODE: how many of PREFIX.0 .. PREFIX.N-1 answered CODE
count_status() {
	local i n=0
	for ((i = 0; i < $2; i++)); do
		[[ $(cat "$work/$1.$i.status") == "$3" ]] && n=$((n + 1))
	done
	echo "$n"
}

# --- 1 ------------------------------------------------------------------------------
burst 200 b
t0=$(now)
plain=$(http_status "$base")
health=$(http_status "$SHAPE_SYNC_URL/v1/health")
t1=$(now)
unanswered=0
for ((i = 0; i < 200; i++)); do [[ -s $work/b.$i.status ]] || unanswered=$((unanswered + 1)); done
wait
expect_eq "a plain request during the burst" 200 "$plain"
expect_eq "the health check during the burst" 200 "$health"
echo "# both answered in $(diff_s "$t0" "$t1") s, with $unanswered subset requests still unanswered"
check "both answered while the burst still runs, not behind it ($unanswered unanswered)" test "$unanswered" -gt 0
ok=0 busy=0 other=0 bad_rows=0 bad_retry=0
for ((i = 0; i < 200; i++)); do
	case $(cat "$work/b.$i.status") in
	200)
		ok=$((ok + 1))
		rows=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["data"]))' "$work/b.$i.b")
		[[ $rows == "$want" ]] || bad_rows=$((bad_rows + 1))
		;;
	503)
		busy=$((busy + 1))
		[[ -n $(header retry-after "$work/b.$i.h") ]] || bad_retry=$((bad_retry + 1))
		;;
	*) other=$((other + 1)) ;;
	esac
done
echo "# 200 at once: $ok answered 200, $busy 503, $other other"
expect_eq "every answer is 200 or 503" 0 "$other"
expect_eq "every 200 has the SELECT's $want rows" 0 "$bad_rows"
expect_eq "every 503 has retry-after" 0 "$bad_retry"
check "some were turned away (over a client's 16 in flight)" test "$busy" -gt 0
# (not necessarily the first 503: on a busy machine some wait past snapshot_wait_timeout)
check "a turned-away one names the client's share" grep -q -s "This client has 16 subset queries running" /dev/null \
	$(for ((i = 0; i < 200; i++)); do [[ $(cat "$work/b.$i.status") == 503 ]] && echo "$work/b.$i.b"; done)
check "some were answered" test "$ok" -gt 0

# --- 2 ------------------------------------------------------------------------------
burst 16 c
wait
n200=$(count_status c 16 200)
expect_eq "16 at once after the burst all answer 200 (every cell came back)" 16 "$n200"

# --- 3 ------------------------------------------------------------------------------
cluster_psql -c "ALTER SYSTEM SET shape_sync.snapshot_wait_timeout = '1s'" -c "SELECT pg_reload_conf()" >/dev/null
sleep 1
# no row matches, but every row is hashed twice: a scan that takes a while
slow="subset__where=md5(md5(v))%20%3D%20%27x%27%20AND%20md5(v%20%7C%7C%20v)%20%3C%3E%20%27%27"
for ((i = 0; i < 8; i++)); do
	curl -s --max-time 60 -D "$work/s.$i.h" -o "$work/s.$i.b" -w '%{http_code}' "$base&$slow" >"$work/s.$i.status" &
done
wait
slow503=$(count_status s 8 503)
check "queries queued past snapshot_wait_timeout answer 503 ($slow503 of 8)" test "$slow503" -gt 0
for ((i = 0; i < 8; i++)); do
	if [[ $(cat "$work/s.$i.status") == 503 ]]; then
		expect_match "a timed-out subset's body" 'snapshot_wait_timeout' "$(cat "$work/s.$i.b")"
		check "a timed-out subset has retry-after" test -n "$(header retry-after "$work/s.$i.h")"
		break
	fi
done
wait_for 30 test "$(http_status "$base&subset__where=id%3D1")" = 200 >/dev/null 2>&1 || true
expect_eq "a fast subset afterwards" 200 "$(http_status "$base&subset__where=id%3D1")"

# --- 4 ------------------------------------------------------------------------------
cluster_psql -c "ALTER SYSTEM SET shape_sync.snapshot_wait_timeout = '30s'" -c "SELECT pg_reload_conf()" >/dev/null
sleep 1
handle_before=$(curl -s -D - -o /dev/null "$base" | tr -d '\r' | sed -n 's/^electric-handle: //Ip')
curl -s --max-time 60 -D "$work/all.h" -o "$work/all.b" -w '%{http_code}' "$base&subset__where=id%3E0" >"$work/all.status"
expect_eq "a subset of all 200,000 rows (over 2 MB of answer)" 400 "$(cat "$work/all.status")"
expect_match "its body asks for a narrower subset" 'eighth of the shape log memory' "$(cat "$work/all.b")"
handle_after=$(curl -s -D - -o /dev/null "$base" | tr -d '\r' | sed -n 's/^electric-handle: //Ip')
check "the shape was not evicted for it (handle $handle_before)" test -n "$handle_before" -a "$handle_before" = "$handle_after"
expect_eq "a small subset still answers" 200 "$(http_status "$base&subset__where=id%3D1")"
finish
