#!/usr/bin/env bash
#
# Decoder lag is visible and logged.  A commit that waits for a synchronous
# standby that does not exist stays in progress at its commit record, where
# decoding stops (src/pg/worker/decoder.c), while 200 one-row transactions commit
# behind it (synchronous_commit = local).  Meanwhile shape_sync.decoder shows
# WAL not yet decoded.  After 2.5 s the wait is cancelled: decoding reads the
# 200 commits, each more than shape_sync.decoder_lag_warning (1 s) after it
# was made, and logs one warning for all of them (at most one a minute), the
# view shows the last one's lag, and the metrics count it in the commit lag
# histogram's buckets above 1 s.  A commit after that, decoded at once, logs
# that decoding caught up.  Before shape_sync.decoder_lag_warning existed
# nothing was logged and the view did not exist.
set -euo pipefail
source "$(dirname "$0")/../lib/lib.sh"
init_work

SHAPE_SYNC_EXTRA_CONF="shape_sync.decoder_lag_warning = 1s
synchronous_standby_names = 'lag_gate'
synchronous_commit = local" start_cluster_retrying 4520
cluster_psql <<'SQL' >/dev/null
CREATE EXTENSION shape_sync;
CREATE TABLE lagged (id int PRIMARY KEY, v text);
CREATE TABLE gate (id int);
SQL
decoder() { cluster_psql -At -c "SELECT $1 FROM shape_sync.decoder"; }
lsn=$(cluster_psql -At -c "SELECT pg_current_wal_insert_lsn()")
caught_up_to() { [[ $(decoder "decoded_lsn >= '$1' AND lag_bytes = 0") == t ]]; }
check "decoding reaches the end of the WAL, and the view says so" wait_for 60 caught_up_to "$lsn"

PGOPTIONS='-c synchronous_commit=on' cluster_psql -c "INSERT INTO gate VALUES (1)" >"$work/gate.out" 2>&1 &
gate_pid=$!
helpers+=("$gate_pid")
check "the gate's commit waits for the standby that does not exist" wait_for 60 sync_rep_waits 1
for i in $(seq 1 200); do echo "INSERT INTO lagged VALUES ($i, 'v$i');"; done | cluster_psql >/dev/null
behind=$(cluster_psql -At -c "SELECT pg_current_wal_insert_lsn()")
held() { [[ $(decoder "wal_end_lsn >= '$behind' AND decoded_lsn < '$behind' AND lag_bytes > 0") == t ]]; }
check "shape_sync.decoder shows WAL written and not decoded" wait_for 60 held
expect_eq "nothing is logged while nothing behind is decoded" 0 \
	"$(grep -c "decoding is .* behind the commits" "$SHAPE_SYNC_LOG" || true)"
sleep 2.5
check "the gate's wait is cancelled" \
	test "$(cluster_psql -At -c "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE wait_event = 'SyncRep'")" = t
wait "$gate_pid" || true
check "decoding catches up" wait_for 60 caught_up_to "$behind"
expect_eq "one warning for the 200 late commits" 1 \
	"$(grep -c "WARNING:  shape_sync's decoding is [0-9.]* s behind the commits" "$SHAPE_SYNC_LOG" || true)"
# at least the 2.5 s the gate was held; more on a busy machine (the 200 commits, psql's start)
expect_match "it says how far behind, and how much WAL is left" \
	"decoding is ([2-9]|[1-9][0-9]+)\.[0-9] s behind the commits" "$(grep "behind the commits" "$SHAPE_SYNC_LOG")"
expect_eq "with the detail and the setting's name" 1 \
	"$(grep -A2 "behind the commits" "$SHAPE_SYNC_LOG" | grep -c 'HINT:.*shape_sync.decoder_lag_warning')"
expect_eq "the view shows the last commit's lag" t "$(decoder "commit_lag > interval '2 s'")"
late_lag=$(decoder commit_lag)
expect_eq "the commit lag histogram counts 200 commits over 1 s" t \
	"$(cluster_psql -At -c "SELECT (SELECT value FROM shape_sync.metrics WHERE name = 'shape_sync_decoder_commit_lag_seconds_count') -
	                               (SELECT value FROM shape_sync.metrics WHERE name = 'shape_sync_decoder_commit_lag_seconds_bucket' AND labels->>'le' = '1') >= 200")"
expect_eq "not caught up yet" 0 "$(grep -c "decoding caught up" "$SHAPE_SYNC_LOG" || true)"

cluster_psql -c "INSERT INTO lagged VALUES (0, 'now')" >/dev/null
logged_caught_up() { grep -q "LOG:  shape_sync's decoding caught up" "$SHAPE_SYNC_LOG"; }
check "a commit decoded at once logs that decoding caught up" wait_for 60 logged_caught_up
expect_eq "the view shows the new commit's lag, below the late commits' ($late_lag)" t \
	"$(decoder "commit_lag < interval '$late_lag'")"
expect_eq "decoding never failed" 0 "$(grep -c 'ERROR' "$SHAPE_SYNC_LOG" || true)"
finish
