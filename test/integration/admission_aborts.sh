#!/usr/bin/env bash
#
# Admission slots survive clients that leave at any moment (seed 000): a slot is
# released exactly once on every path, and a parked request whose client left is
# noticed from its socket at once, not at the long-poll timeout.
#
# 1. 300 parked requests (200 long-polls, 100 SSE streams) on never-reading
#    sockets; their clients all leave at once (half with an RST): in_use must
#    be back to 0 long before the long-poll timeout: within 60 s, with
#    long_poll_timeout at 300 s (60 s is a deadline against a slot that waits
#    for the timeout, not a time target: the test runs on busy machines).
# 2. 2000 requests with 50 at a time, each aborted at a random point:
#    mid-snapshot (after reading a random amount), for one of 20 shapes being created
#    (resolution, snapshot wait), mid-long-poll (while parked), mid-SSE stream,
#    before the request is even complete; 15 % of the closes are RSTs
#    (SO_LINGER 0).  Afterwards in_use is 0 for both kinds within 60 s, the worker
#    did not restart, and it still serves snapshots, catch-up and live requests.
set -euo pipefail
source "$(dirname "$0")/../lib/lib.sh"
init_work

LONG_POLL_S=300
PROMPT_S=60

SHAPE_SYNC_EXTRA_CONF="shape_sync.long_poll_timeout = '${LONG_POLL_S}s'
shape_sync.stalled_serve_timeout = '60s'
shape_sync.max_connections = 1000" start_cluster_retrying 5140
cluster_psql -c 'CREATE EXTENSION shape_sync'
create_big_table 20000
cluster_psql <<'SQL'
CREATE TABLE mid (id int PRIMARY KEY, payload text);
INSERT INTO mid SELECT g, repeat(md5(g::text), 4) FROM generate_series(1, 5000) g;
CREATE TABLE lp (id int PRIMARY KEY, v text);
INSERT INTO lp VALUES (1, 'a');
SQL

# drained SECONDS: waits for both kinds to reach 0; prints how long it took
drained() {
	local t0 t1
	t0=$1
	echo "# in_use right after: initial $(in_use initial), existing $(in_use existing) ($(diff_s "$t0" "$(now)")s)" >&2
	if wait_for "$PROMPT_S" slots_free; then
		t1=$(now)
		diff_s "$t0" "$t1"
	else
		echo "never (initial $(in_use initial), existing $(in_use existing))"
		return 1
	fi
}

read -r lp_handle lp_offset _ < <(follow lp) || true
read -r big_handle _ big_rows < <(follow big) || true
check "the shapes exist" test -n "$lp_handle" -a -n "$big_handle"
expect_eq "the big shape holds every row" 20000 "$big_rows"
pid_before=$(worker_pid)
live="/v1/shape?table=lp&handle=$lp_handle&offset=$lp_offset&live=true"

# ------------------------------------------------------- 1. parked clients leave at once
start_hold parked --path "$live" --path "$live" --path "$live&live_sse=true" \
	--count 300 --quiet 0.5 --drain-seconds 0.2 --rst-every 2 --max-seconds 60
all_parked() { [[ $(in_use existing) == 300 ]]; }
check "300 live requests (long-poll and SSE) are parked" wait_for 60 all_parked
touch "$work/stop"
wait "$hold_pid" || true
t_left=$(now)
if took=$(drained "$t_left"); then
	echo "# the slots of 300 parked requests came back ${took}s after their clients left"
	pass "every slot of the parked requests comes back within ${PROMPT_S}s of the clients leaving (took ${took}s; long_poll_timeout ${LONG_POLL_S}s)"
else
	fail "the slots of parked requests whose clients left did not come back within ${PROMPT_S}s: $took"
fi

# ------------------------------------------------------- 2. 2000 random aborts
enc_where=$(python3 -c 'import urllib.parse; print(urllib.parse.quote("id % 97 = "))')
python3 "$stall_client" aborts --url "$SHAPE_SYNC_URL" --total 2000 --concurrency 50 --seed "${SEED:-$RANDOM}" \
	--kind snap_initial=2 --kind-path "snap_initial=/v1/shape?table=big&offset=-1" \
	--kind snap_existing=2 --kind-path "snap_existing=/v1/shape?table=big&offset=-1&handle=$big_handle" \
	--kind new_shape=1 --kind-path "new_shape=/v1/shape?table=mid&offset=-1&where=${enc_where}{n}" \
	--kind long_poll=3 --kind-path "long_poll=$live" \
	--kind sse=2 --kind-path "sse=$live&live_sse=true" \
	--kind partial=0.3 --kind-path "partial=$live" \
	--new-shapes 20 --rst 0.15 --read-max 262144 --park-ms 300 --max-seconds 90 >"$work/aborts.out"
# poll first: the server must have noticed every departure by now
t_end=$(j "$work/aborts.out" "" 'd["t_end"]')
if took=$(drained "$t_end"); then
	echo "# the slots came back ${took}s after the last abort"
	pass "in_use is 0 for both kinds within ${PROMPT_S}s of the storm (took ${took}s; long_poll_timeout ${LONG_POLL_S}s)"
else
	fail "in_use did not return to 0 within ${PROMPT_S}s of the storm: $took"
fi
echo "# storm: $(j "$work/aborts.out" "" '{k: d[k] for k in ("seconds", "done", "rst", "by_kind", "errors")}')"
echo "# statuses seen before leaving: $(j "$work/aborts.out" "" 'd["by_kind_status"]')"
expect_eq "all 2000 requests ran" 2000 "$(j "$work/aborts.out" "" 'd["done"]')"
expect_eq "no connection was refused or failed" "{}" "$(j "$work/aborts.out" "" 'd["errors"]')"
check "most long-polls left while parked (no answer yet)" test "$(j "$work/aborts.out" "" 'd["by_kind_status"].get("long_poll:None", 0)')" -gt 100
expect_eq "no request was turned away (the limits were not reached)" "0 0" \
	"$(cluster_psql -At -c "SELECT string_agg(rejected::text, ' ' ORDER BY kind) FROM shape_sync.admission")"

# ------------------------------------------------------- the server is intact
expect_eq "the worker did not restart" "$pid_before" "$(worker_pid)"
expect_eq "health answers" 200 "$(http_status "$SHAPE_SYNC_URL/v1/health")"
read -r _ _ rows < <(follow big) || rows=0
expect_eq "a full read of the big shape gets every row" 20000 "$rows"
curl -s --max-time 20 -o "$work/live.body" -w '%{http_code}' "$SHAPE_SYNC_URL$live" >"$work/live.status" &
helpers+=($!)
live_pid=$!
one_parked() { [[ $(in_use existing) == 1 ]]; }
check "a new live request parks" wait_for 60 one_parked
cluster_psql -c "INSERT INTO lp VALUES (2, 'after the storm')"
wait "$live_pid" || true
expect_eq "and is answered with the change" 200 "$(cat "$work/live.status")"
expect_match "its body holds the new row" '"after the storm"' "$(cat "$work/live.body")"
check "slots are free again" wait_for 60 slots_free
check "no crash or assertion failure in the log" \
	bash -c '! grep -E "PANIC|TRAP:|terminated by signal|libmicrohttpd panic" "$1"' _ "$SHAPE_SYNC_LOG"
finish
