#!/usr/bin/env bash
#
# A disconnect storm, scaled down (issue 10, item 7; bench/storm.sh measures the big ones):
# a couple of thousand live clients parked on one shape (bench/build/loadgen) reset their
# connections at once. The worker notices through the sockets (libmicrohttpd does not poll a
# suspended connection: waiters.c watches them) and frees everything: every dropped socket is
# closed, every admission slot is free, the memory the connections had goes back (the
# worker's private memory falls to within a fraction of what they held), the log stays
# quiet (a client leaving is not an error), and meanwhile and afterwards the server serves:
# a client on another table parked through the storm gets its change, and the same shape
# is served to new clients.
set -euo pipefail
source "$(dirname "$0")/../lib/lib.sh"
init_work

root=$(cd "$here/../.." && pwd)
make -s -f "$root/bench/Makefile.tools" >/dev/null
loadgen=$root/bench/build/loadgen
ulimit -n "$(ulimit -Hn)"
SHAPE_SYNC_EXTRA_CONF="shape_sync.max_connections = 4000
shape_sync.max_concurrent_existing = 4000
shape_sync.long_poll_timeout = '60s'" start_cluster_retrying 5190
cluster_psql <<'SQL'
CREATE EXTENSION shape_sync;
CREATE TABLE storm (id int PRIMARY KEY, v text);
INSERT INTO storm VALUES (1, 'one');
CREATE TABLE calm (id int PRIMARY KEY, v text);
INSERT INTO calm VALUES (1, 'one');
SQL
pid=$(worker_pid)
port=${SHAPE_SYNC_URL##*:}
# as many clients as both sides' file descriptors allow, up to 2,000
worker_fds=$(awk '/^Max open files/ { print $4 }' "/proc/$pid/limits")
clients=2000
((clients > worker_fds - 300)) && clients=$((worker_fds - 300))
((clients > $(ulimit -n) - 100)) && clients=$(($(ulimit -n) - 100))
echo "# $clients clients (the worker may open $worker_fds files, this shell $(ulimit -n))"
check "room for at least 500 clients" test "$clients" -ge 500

# the worker's sockets (its other descriptors come and go with the log files: log_rounds.c holds
# the data files the journal has records of)
# (find fails when a descriptor closes while it walks the folder: with pipefail, that failed the
# assignment, and set -e ended the script without a word)
fds() { { find "/proc/$pid/fd" -lname 'socket:*' 2>/dev/null || true; } | wc -l; }
rss_anon() { awk '/^RssAnon:/ { print $2 }' "/proc/$pid/status"; }
read -r chandle coffset _ < <(follow calm) || true
read -r _ _ _ < <(follow storm) || true
sleep 0.5
fds_before=$(fds)
rss_before=$(rss_anon)

# the storm's clients park; their live requests hold existing slots
"$loadgen" --port "$port" --clients "$clients" --path '/v1/shape?table=storm' --drop --rst \
	--rounds 0 --timeout 120 >"$work/storm.out" 2>"$work/storm.err" &
storm_pid=$!
helpers+=("$storm_pid")
parked() { grep -q '^ready' "$work/storm.out"; }
check "$clients clients park" wait_for 60 parked
in_use_parked=$(adm existing in_use)
check "they hold $clients existing slots ($in_use_parked)" test "$in_use_parked" -ge "$clients"
# one more, on another table, parked through the storm
curl -s -m 60 -o "$work/calm.b" -w '%{http_code}' \
	"$SHAPE_SYNC_URL/v1/shape?table=calm&handle=$chandle&offset=$coffset&live=true" >"$work/calm.status" &
helpers+=($!)
sleep 1
rss_held=$(rss_anon)
fds_held=$(fds)
echo "# parked: $((fds_held - fds_before)) more sockets, $((rss_held - rss_before)) kB more private memory"

# the storm: every connection reset at once
kill -USR1 "$storm_pid"
t0=$(now)
drained() { (($(fds) <= fds_before + 1)); } # + the calm client's socket
check "every dropped socket is closed" wait_for 60 drained
took=$(diff_s "$t0" "$(now)")
echo "# drained in ${took} s"
wait "$storm_pid" || true
expect_match "the generator reset them all" "\"closed\":$clients" "$(cat "$work/storm.out")"
slots_back() { [[ $(adm existing in_use) == 1 && $(adm initial in_use) == 0 ]]; }
check "every admission slot of theirs is free (the calm client keeps one)" wait_for 60 slots_back

# the server serves meanwhile and after
cluster_psql -c "INSERT INTO calm VALUES (2, 'two')" >/dev/null
wait_status() { test -s "$work/calm.status"; }
check "the client parked through the storm is answered" wait_for 60 wait_status
expect_eq "with 200" 200 "$(cat "$work/calm.status")"
expect_match "and its change" '"two"' "$(cat "$work/calm.b")"
read -r _ _ inserts < <(follow storm) || true
expect_eq "the storm's shape is served to a new client" 1 "${inserts:-0}"

# the memory the connections had goes back (at most once a second: http_server_release_memory)
memory_back() { (($(rss_anon) - rss_before < (rss_held - rss_before) / 4)); }
check "the worker's private memory falls back (held $((rss_held - rss_before)) kB)" wait_for 60 memory_back
echo "# private memory after: $(($(rss_anon) - rss_before)) kB above before"
check "the log is quiet: no error, no line per client" \
	bash -c '! grep -E "ERROR|WARNING|internal error|application error|dropped .* log lines" "$1"' _ "$SHAPE_SYNC_LOG"
check "no crash" bash -c '! grep -E "PANIC|terminated by signal|TRAP:" "$1"' _ "$SHAPE_SYNC_LOG"
expect_eq "the worker is the same process" "$pid" "$(worker_pid)"
finish
