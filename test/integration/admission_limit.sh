#!/usr/bin/env bash
#
# Admission limits (seed 000): concurrent requests per kind, initial (waiting for a
# snapshot, or about to make a shape) and existing, each with its limit; a request over the limit
# gets Electric's 503: retry-after between 5 and 10, cache-control no-store and
# the body {"code":"concurrent_request_limit_exceeded",...}; shape_sync.admission
# shows in_use, max and rejected; the limits are reloadable.
#
# 1. max_concurrent_existing = 2: two live requests parked on a known handle fill
#    it; further existing requests get the 503 and `rejected` grows; an initial
#    request is still admitted; once the parked ones are answered, requests
#    succeed again.
# 2. A new shape on a table another session holds locked gets a 503 to retry
#    at once: the worker's main thread never waits on a user's lock. Then
#    max_concurrent_initial = 0 (by reload) turns away every request for a
#    new shape with the 503, while shapes the server holds are served, with or
#    without their handle (before, offset=-1 took an initial slot even for them).
# 3. A new shape's large snapshot read slowly holds one slot for its whole
#    response: as designed (src/contract/admission.c), the initial slot is promoted
#    to an existing one once the shape is known, so it shows as existing.
# 4. ALTER SYSTEM + pg_reload_conf() changes the limits without a restart.
set -euo pipefail
source "$(dirname "$0")/../lib/lib.sh"
init_work
# the writer of the locking session's fifo (section 2) is closed first
cleanup() {
	exec 7>&- 2>/dev/null || true
	cleanup_work
}
trap cleanup EXIT

SHAPE_SYNC_EXTRA_CONF="shape_sync.max_concurrent_existing = 2
shape_sync.max_concurrent_initial = 1
shape_sync.long_poll_timeout = '20s'" start_cluster_retrying 5150
cluster_psql <<'SQL'
CREATE EXTENSION shape_sync;
CREATE TABLE lp (id int PRIMARY KEY, v text);
INSERT INTO lp VALUES (1, 'a');
CREATE TABLE lk (id int PRIMARY KEY);
CREATE TABLE other (id int PRIMARY KEY);
INSERT INTO other VALUES (1);
SQL
create_big_table 10000

# get NAME URL: status into $work/NAME.status, headers and body beside it
get() {
	curl -s --max-time 30 -D "$work/$1.h" -o "$work/$1.b" -w '%{http_code}' "$2" >"$work/$1.status" || true
}
# check_503 WHAT NAME KIND LIMIT: the response saved as NAME is Electric's 503
check_503() {
	local what=$1 name=$2 kind=$3 limit=$4 ra
	expect_eq "$what: 503" 503 "$(cat "$work/$name.status")"
	ra=$(header retry-after "$work/$name.h")
	check "$what: retry-after is between 5 and 10 (${ra:-none})" test -n "$ra" -a "${ra:-0}" -ge 5 -a "${ra:-0}" -le 10
	expect_eq "$what: cache-control" "no-store" "$(header cache-control "$work/$name.h")"
	expect_eq "$what: body" \
		"{\"code\":\"concurrent_request_limit_exceeded\",\"message\":\"Concurrent $kind request limit exceeded (limit: $limit), please retry\"}" \
		"$(cat "$work/$name.b")"
}
# wait_status FILE SECONDS: waits for a background get to write its status
wait_status() { wait_for "$2" test -s "$1"; }

read -r handle offset _ < <(follow lp) || true
check "the lp shape exists" test -n "$handle"
pid_before=$(worker_pid)
live="$SHAPE_SYNC_URL/v1/shape?table=lp&handle=$handle&offset=$offset&live=true"
catchup="$SHAPE_SYNC_URL/v1/shape?table=lp&handle=$handle&offset=$offset" # not live
expect_eq "admission.max shows the configured limits" "1 2" "$(adm initial max) $(adm existing max)"

# ------------------------------------------------------------ 1. existing = 2
get park1 "$live" &
helpers+=($!)
get park2 "$live" &
helpers+=($!)
two_parked() { [[ $(adm existing in_use) == 2 ]]; }
check "two live requests are parked (existing in_use = 2)" wait_for 60 two_parked
rejected_before=$(adm existing rejected)

get third "$live"
check_503 "a third live request" third existing 2
get catchup "$catchup"
check_503 "a (non-live) catch-up request on the known handle" catchup existing 2
ras=()
for i in $(seq 1 20); do
	get "r$i" "$live"
	ras+=("$(cat "$work/r$i.status"):$(header retry-after "$work/r$i.h")")
done
bad=$(printf '%s\n' "${ras[@]}" | awk -F: '$1 != 503 || $2 < 5 || $2 > 10' | wc -l)
expect_eq "20 more are all 503 with retry-after in 5..10 ($(printf '%s ' "${ras[@]}" | tr -d '\n' | cut -c1-60)...)" 0 "$bad"
distinct=$(printf '%s\n' "${ras[@]}" | sort -u | wc -l)
check "retry-after is jittered (${distinct} distinct values in 20)" test "$distinct" -ge 2
expect_eq "rejected (existing) grew by 22" $((rejected_before + 22)) "$(adm existing rejected)"
expect_eq "in_use stays at the limit" 2 "$(adm existing in_use)"

get initial_ok "$SHAPE_SYNC_URL/v1/shape?table=other&offset=-1"
expect_eq "an initial request is admitted while existing is full (kinds are separate)" 200 "$(cat "$work/initial_ok.status")"

cluster_psql -c "INSERT INTO lp VALUES (2, 'wake')"
check "the parked requests are answered" wait_for 60 bash -c "test -s '$work/park1.status' && test -s '$work/park2.status'"
expect_eq "both with the change" "200 200" "$(cat "$work/park1.status") $(cat "$work/park2.status")"
expect_match "whose body holds the new row" '"wake"' "$(cat "$work/park1.b")"
check "the slots come back" wait_for 60 slots_free
get after "$catchup"
expect_eq "a catch-up request succeeds again" 200 "$(cat "$work/after.status")"
get after_live "$live"
expect_eq "and a live request at the old offset gets the change at once" 200 "$(cat "$work/after_live.status")"

# ------------------------------------------------------------ 2. initial
# A table locked by another session: the worker's main thread never waits on
# a user's lock; it tries the request again for a few seconds, serving other
# shapes meanwhile, and answers 503 to retry if the lock stays.
mkfifo "$work/sql"
cluster_psql <"$work/sql" >"$work/locker.out" 2>&1 &
helpers+=($!)
exec 7>"$work/sql"
echo "BEGIN; LOCK TABLE lk IN ACCESS EXCLUSIVE MODE; SELECT 'locked';" >&7
check "a session locks table lk" wait_for 60 grep -q locked "$work/locker.out"
# lock requests on lk that wait (not granted), by any session
lk_waiters() { cluster_psql -At -c "SELECT count(*) FROM pg_locks WHERE relation = 'lk'::regclass AND NOT granted"; }
t_locked=$(now)
get locked "$SHAPE_SYNC_URL/v1/shape?table=lk&offset=-1" &
helpers+=($!)
locked_pid=$!
sleep 0.5
get during "$catchup"
# the lock is held until the COMMIT below: a main thread that waited on it could not answer
expect_eq "another shape is served while the table is locked" 200 "$(cat "$work/during.status")"
# while the request retries (about 3 s), nobody waits for the lock: each try gives up at once
waited=0
while kill -0 "$locked_pid" 2>/dev/null; do
	(($(lk_waiters) == 0)) || waited=$((waited + 1))
	sleep 0.1
done
expect_eq "the main thread does not wait on the lock (no waiting lock on lk seen during the retries)" 0 "$waited"
wait "$locked_pid" 2>/dev/null || true
took=$(diff_s "$t_locked" "$(now)")
echo "# the 503 came ${took} s after the request"
expect_eq "a new shape on the table still locked after the retries gets 503" 503 "$(cat "$work/locked.status")"
# the lock's own error: not a long-poll timeout's answer (20 s; the request waits 30 s at most)
expect_match "saying the lock was not granted" 'could not obtain lock on relation' "$(cat "$work/locked.b")"
check "after the retries (3 s), not at the first try (${took} s)" le 2.9 "$took"
get retried "$SHAPE_SYNC_URL/v1/shape?table=lk&offset=-1" &
helpers+=($!)
retried_pid=$!
sleep 1
echo "COMMIT;" >&7
exec 7>&-
wait "$retried_pid" 2>/dev/null || true
expect_eq "a request whose lock goes away within the retries is served" 200 "$(cat "$work/retried.status")"
get unlocked "$SHAPE_SYNC_URL/v1/shape?table=lk&offset=-1"
expect_eq "once the lock is gone the shape is served" 200 "$(cat "$work/unlocked.status")"
check "the slots come back" wait_for 60 slots_free

# max_concurrent_initial = 0: every request for a shape the server does not
# know is turned away, and requests on known handles still go through.
cluster_psql -c "ALTER SYSTEM SET shape_sync.max_concurrent_initial = 0" -c "SELECT pg_reload_conf()" >/dev/null
zero_initial() { [[ $(adm initial max) == 0 ]]; }
check "the initial limit is reloaded to 0" wait_for 60 zero_initial
rejected_before=$(adm initial rejected)
get second_new "$SHAPE_SYNC_URL/v1/shape?table=other&offset=-1&where=id%20%3E%200"
check_503 "a request for a new shape" second_new initial 0
get no_handle "$SHAPE_SYNC_URL/v1/shape?table=big&offset=-1"
check_503 "a request without a handle" no_handle initial 0
expect_eq "rejected (initial) grew by 2" $((rejected_before + 2)) "$(adm initial rejected)"
get known "$catchup"
expect_eq "a request on a known handle is still served" 200 "$(cat "$work/known.status")"
get held "$SHAPE_SYNC_URL/v1/shape?table=lp&offset=-1"
expect_eq "and one without a handle for a shape the server holds (Electric decides by whether it exists)" \
	200 "$(cat "$work/held.status")"
expect_eq "no more refusals were counted" $((rejected_before + 2)) "$(adm initial rejected)"
cluster_psql -c "ALTER SYSTEM SET shape_sync.max_concurrent_initial = 1" -c "SELECT pg_reload_conf()" >/dev/null
one_initial_max() { [[ $(adm initial max) == 1 ]]; }
check "and back to 1" wait_for 60 one_initial_max
get new_again "$SHAPE_SYNC_URL/v1/shape?table=other&offset=-1&where=id%20%3E%200"
expect_eq "a new shape is served again" 200 "$(cat "$work/new_again.status")"

# ------------------------------------------------------------ 3. a slow snapshot
python3 "$stall_client" slow --url "$SHAPE_SYNC_URL" --path "/v1/shape?table=big&offset=-1&where=id%20%3E%200" \
	--rcvbuf 65536 --read 16384 --sleep 0.1 --max-seconds 60 >"$work/slow.out" &
helpers+=($!)
slow_pid=$!
one_existing() { [[ $(adm existing in_use) == 1 && $(adm initial in_use) == 0 ]]; }
check "a new shape's snapshot read slowly holds one slot, promoted to existing" wait_for 60 one_existing
sleep 1
expect_eq "and keeps it while the response is being read" "0 1" "$(adm initial in_use) $(adm existing in_use)"
kill "$slow_pid" 2>/dev/null || true
wait "$slow_pid" 2>/dev/null || true
check "its slot comes back when the client leaves" wait_for 60 slots_free

# ------------------------------------------------------------ 4. reload
cluster_psql -c "ALTER SYSTEM SET shape_sync.max_concurrent_existing = 3" \
	-c "ALTER SYSTEM SET shape_sync.max_concurrent_initial = 5" -c "SELECT pg_reload_conf()" >/dev/null
new_max() { [[ "$(adm initial max) $(adm existing max)" == "5 3" ]]; }
check "after ALTER SYSTEM and pg_reload_conf() admission.max shows 5 and 3" wait_for 60 new_max
read -r handle offset _ < <(follow lp) || true
live="$SHAPE_SYNC_URL/v1/shape?table=lp&handle=$handle&offset=$offset&live=true"
for i in 1 2 3; do
	get "p$i" "$live" &
	helpers+=($!)
done
three_parked() { [[ $(adm existing in_use) == 3 ]]; }
check "three live requests are admitted and parked under the new limit" wait_for 60 three_parked
get fourth "$live"
check_503 "a fourth" fourth existing 3
cluster_psql -c "INSERT INTO lp VALUES (3, 'wake again')"
check "the three are answered" wait_for 60 bash -c "test -s '$work/p1.status' && test -s '$work/p2.status' && test -s '$work/p3.status'"
expect_eq "with 200" "200 200 200" "$(cat "$work/p1.status") $(cat "$work/p2.status") $(cat "$work/p3.status")"
check "the slots come back" wait_for 60 slots_free
expect_eq "the worker did not restart" "$pid_before" "$(worker_pid)"
finish
