#!/usr/bin/env bash
#
# The crash test of durable shape logs: a writer changes three tables all the time while the
# instance is killed at random moments, and every client still converges.
#
# One cluster that compacts and closes chunks often (shape_sync.compaction_factor = 1.5,
# shape_sync.chunk_bytes_threshold = 64kB). Tables: hot (3,000 rows, updated all the time:
# its shapes are compacted every few seconds), app (inserts, updates, deletes; rows move in
# and out of a where clause) and big (200,000 rows, for snapshots; a few updates). Five
# shapes, with and without where clauses and column lists, each followed by a
# test/lib/shape_client.py client that keeps its (handle, offset) and rows across restarts.
# Then CRASH_ROUNDS rounds (default 5), drawn from SEED (default random, printed first): after
# a random sleep (0.1-2 s), the instance is killed, alternately by SIGKILL of the shape_sync
# worker (PostgreSQL restarts every process) and by `pg_ctl stop -m immediate` and a start.
# Each round is one of:
#   snapshot    a new shape of the whole big table is requested by a client of its own just
#               before the kill, which comes 0-0.2 s after its first chunk is in the log,
#               mostly while the snapshot still runs (counted) and its client holds the
#               handle of its first chunks;
#   compaction  the kill comes 0-1 s after the hot shapes' compactions counter moved;
#   plain       the clients read up to the end of the log just before the kill, so that they
#               often hold offsets past what the manifest holds (printed).
# The checks: the server serves again after every kill, and restores every shape its manifest
# lists; a client whose shape the manifest listed at every kill since its last read goes on
# at its (handle, offset) with 200 and no violation (an insert of a row it has, an update or
# delete of one it lacks): a 409 for it fails the test, with its handle, offsets, manifest
# entry and the server's lines about it; a client of a shape not yet listed (its snapshot
# running, or done but not yet in the manifest) may get 409 and fetches the shape again
# (counted); after the writer stops, every client's rows are exactly its shape's SELECT; no
# PANIC, no assertion failure, no crash but the SIGKILLs the test announced
# (cluster_expect_crash). It prints the kills by kind, the snapshots running at a kill, the
# compactions seen and the 409s.
#
# shape_sync.log_memory is 512MB for odd seeds and 12MB for even ones (CRASH_LOG_MEMORY sets
# it): then the big shapes' logs leave memory for their files, and some compactions of the hot
# shapes read theirs from their files (2 of 6 in a run with SEED=3004).
#
# Replay a run with SEED=<n> (and the same CRASH_ROUNDS); the moments of the kills are drawn
# from the seed, what the server is doing at them is not. The default 5 rounds take about 60 s
# on a quiet 2-core machine (each snapshot round adds a client of 200,000 rows).
set -euo pipefail
source "$(dirname "$0")/../lib/lib.sh"
init_work
shape_client_init
rounds=${CRASH_ROUNDS:-5}
seed=${SEED:-$(((RANDOM << 15) | RANDOM))}
echo "# seed $seed, $rounds rounds (replay: SEED=$seed CRASH_ROUNDS=$rounds $0)"
trap 'touch "$work/stop"; cleanup_work' EXIT

# every other seed, logs larger than memory (see the head of this file)
log_memory=${CRASH_LOG_MEMORY:-$((seed % 2 ? 512 : 12))MB}
echo "# shape_sync.log_memory = $log_memory"
SHAPE_SYNC_EXTRA_CONF="shape_sync.compaction_factor = 1.5
shape_sync.chunk_bytes_threshold = '64kB'
shape_sync.log_memory = '$log_memory'" start_cluster_retrying 4780
cluster_psql >/dev/null <<'SQL'
CREATE EXTENSION shape_sync;
CREATE TABLE hot (id int PRIMARY KEY, n int NOT NULL, v text);
INSERT INTO hot SELECT g, 0, 'h' || g FROM generate_series(1, 3000) g;
CREATE TABLE app (id serial PRIMARY KEY, n int NOT NULL, v text);
INSERT INTO app (n, v) SELECT g % 100, 'a' || g FROM generate_series(1, 500) g;
CREATE TABLE big (id int PRIMARY KEY, grp int NOT NULL, payload text);
INSERT INTO big SELECT g, g % 10, md5(g::text) || md5((g + 1)::text) FROM generate_series(1, 200000) g;
ALTER TABLE hot REPLICA IDENTITY FULL;
ALTER TABLE app REPLICA IDENTITY FULL;
ALTER TABLE big REPLICA IDENTITY FULL;
SQL

# the clients: NAME -> query, the SELECT of its rows, its columns, the field and value of the
# last change (made after the writer stopped) that it waits for
shapes=(hot_all hot_low app_all app_mix big_grp)
declare -A query=([hot_all]="table=hot" [hot_low]="table=hot&where=$(uri 'id <= 500')"
	[app_all]="table=app" [app_mix]="table=app&columns=id,n&where=$(uri 'n < 30')"
	[big_grp]="table=big&where=$(uri 'grp = 3')")
declare -A rows_sql=([hot_all]="SELECT id, n, v FROM hot ORDER BY id"
	[hot_low]="SELECT id, n, v FROM hot WHERE id <= 500 ORDER BY id"
	[app_all]="SELECT id, n, v FROM app ORDER BY id"
	[app_mix]="SELECT id, n FROM app WHERE n < 30 ORDER BY id"
	[big_grp]="SELECT id, grp, payload FROM big WHERE grp = 3 ORDER BY id")
declare -A columns=([hot_all]="id n v" [hot_low]="id n v" [app_all]="id n v" [app_mix]="id n"
	[big_grp]="id grp payload")
declare -A last_change=([hot_all]="v=final" [hot_low]="v=final" [app_all]="n=-3" [app_mix]="n=-3"
	[big_grp]="id=2000003")
# handle[NAME]: its client's handle; unsafe[NAME]: at a kill since its client's last read, its
# shape was not in the manifest (why[NAME] says how it stood), so a 409 is allowed (a shape is
# read whole after it is made: until the next kill, it is safe)
declare -A handle unsafe why

serving() { [[ $(http_status "$SHAPE_SYNC_URL/v1/health") == 200 ]]; }
metric() { curl -s "$SHAPE_SYNC_URL/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }
manifest_file() { _cluster_as_pg cat "$SHAPE_SYNC_PGDATA/pg_shape_sync/manifest" 2>/dev/null; }
restored_lines() { grep -c 'shape_sync restored [0-9]* of [0-9]* shapes from disk' "$SHAPE_SYNC_LOG" || true; }
more_restored() { (($(restored_lines) > $1)); }
ready_lines() { grep -c 'database system is ready to accept connections' "$SHAPE_SYNC_LOG" || true; }
more_ready() { (($(ready_lines) > $1)); }
offset_of() { sc get "$work/$1.json" 'd["offset"]'; }
# same_rows NAME: the rows the client of NAME holds are its shape's SELECT
same_rows() {
	local name=$1
	# shellcheck disable=SC2086 # the column names
	sc rows "$work/$name.json" ${columns[$name]} >"$work/$name.client"
	cluster_psql -At -c "${rows_sql[$name]}" >"$work/$name.table"
	cmp -s "$work/$name.client" "$work/$name.table"
}
rows_differ() {
	echo "# $1: client rows $(wc -l <"$work/$1.client"), table rows $(wc -l <"$work/$1.table"); first differences:"
	diff "$work/$1.client" "$work/$1.table" | head -n 10 | sed 's/^/#   /' || true
}

# the first read of a shape: from offset -1 to up-to-date
first_read() {
	local s=$1 out
	rm -f "$work/$s.json"
	out=$(sc sync "$work/$s.json" --url "$SHAPE_SYNC_URL" --query "${query[$s]}" --log off --timeout 300)
	handle[$s]=$(awk '{ print $(NF - 1) }' <<<"$out")
	unsafe[$s]=0
	expect_match "shape $s is read whole (${handle[$s]})" '^up-to-date [^ ]+ [0-9]+-[0-9]+ 0$' "$out"
}
for s in "${shapes[@]}"; do
	first_read "$s"
	check "its client holds its rows" same_rows "$s"
done
# listed HANDLE...: the manifest lists every HANDLE
listed() { manifest_file | sc manifest - 'all(h in {s["handle"] for s in m["shapes"]} for h in a)' "$@" | grep -q True; }
check "the manifest lists the five shapes" wait_for 120 listed "${handle[@]}"

# the writer: one transaction after another (most commit, a few roll back) until $work/stop
# exists; a session the server drops is followed by a new one
cat >"$work/writer.py" <<'PY'
import os, random, sys, time
seed, session, stop = sys.argv[1], int(sys.argv[2]), sys.argv[3]
r = random.Random(f"{seed}/{session}")
k = 0
try:
    while not os.path.exists(stop):
        k += 1
        tag = f"s{session}t{k}"
        sql = ["BEGIN;"]
        if r.random() < 0.01:  # a long transaction: chunks close inside it
            lo = r.randrange(1, 2000)
            sql.append(f"UPDATE hot SET n = n + 1, v = '{tag}' WHERE id BETWEEN {lo} AND {lo + 999};")
        else:
            ids = ",".join(str(r.randrange(1, 3001)) for _ in range(r.randrange(5, 30)))
            sql.append(f"UPDATE hot SET n = n + 1, v = '{tag}' WHERE id IN ({ids});")
        pick = "(SELECT id FROM app WHERE id >= (SELECT max(id) FROM app) * %.4f ORDER BY id LIMIT 1)"
        for _ in range(r.randrange(0, 4)):
            op = r.random()
            if op < 0.4:
                sql.append(f"INSERT INTO app (n, v) VALUES ({r.randrange(0, 100)}, '{tag}');")
            elif op < 0.75:
                sql.append(f"UPDATE app SET n = {r.randrange(0, 100)}, v = '{tag}' WHERE id = {pick % r.random()};")
            else:
                sql.append(f"DELETE FROM app WHERE id = {pick % r.random()};")
        if r.random() < 0.15:
            sql.append(f"UPDATE big SET grp = {r.randrange(0, 10)}, payload = '{tag}' WHERE id = {r.randrange(1, 200001)};")
        sql.append("ROLLBACK;" if r.random() < 0.05 else "COMMIT;")
        sys.stdout.write("\n".join(sql) + "\n")
        sys.stdout.flush()
        time.sleep(r.uniform(0.01, 0.05))
except (BrokenPipeError, OSError):
    pass
PY
writer() {
	local session=0
	while [[ ! -e $work/stop ]]; do
		session=$((session + 1))
		"$py" "$work/writer.py" "$seed" "$session" "$work/stop" 2>/dev/null |
			cluster_psql >/dev/null 2>>"$work/writer.err" || true
		echo "$session" >"$work/writer.sessions"
		sleep 0.2
	done
}
writer &
writer_pid=$!
helpers+=("$writer_pid")

# the rounds, drawn from the seed: ROUND KIND MODE SLEEP DELAY
"$py" - "$seed" "$rounds" >"$work/schedule" <<'PY'
import random, sys
r = random.Random(int(sys.argv[1]))
n = int(sys.argv[2])
modes = ["snapshot", "compaction", "plain"]
kinds = ["sigkill", "immediate"]
r.shuffle(modes)
r.shuffle(kinds)
for i in range(n):
    mode = modes[i % 3]
    delay = r.uniform(0.0, 0.2 if mode == "snapshot" else 0.5)
    print(i + 1, kinds[i % 2], mode, "%.2f" % r.uniform(0.1, 2.0), "%.2f" % delay)
PY
sed 's/^/# schedule: /' "$work/schedule"

hot_compactions() { cluster_psql -At -c "SELECT coalesce(sum(compactions), 0) FROM shape_sync.shapes WHERE relation LIKE '%hot%'"; }
compacted_since() { (($(hot_compactions) > $1)); }
# snapshot_seen ROUND: the snapshot round's shape has its first chunk in the log (or is
# ready); its handle, state and snapshot rows so far in $seen (its where clause, id <> -ROUND,
# reads "(id <> '-ROUND'::integer)" in the view)
snapshot_seen() {
	seen=$(cluster_psql -At -F ' ' -c "SELECT handle, state, snapshot_rows FROM shape_sync.shapes
		WHERE \"where\" LIKE '%<> ''-$1''%' AND log_bytes > 0")
	[[ -n $seen ]]
}

# our_worker PID: PID is this cluster's shape_sync worker (a child of its postmaster)
our_worker() {
	[[ $(tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null) == "postgres: shape_sync server"* &&
		$(ps -o ppid= -p "$1" | tr -d ' ') == "$(head -n 1 "$SHAPE_SYNC_PGDATA/postmaster.pid")" ]]
}
# kill_worker ROUND PID, immediate_restart ROUND: the two kills; each copies the manifest as
# the kill left it to $work/manifest.ROUND and lists the store's files in $work/files.ROUND
# (the worker is dead, and no new one has started yet: PostgreSQL restarts the instance
# first), then waits until shape_sync serves again
kill_worker() {
	local r=$1 pid=$2 ready restored
	# (the PID was read before the round's sleep, so that no query delays the kill)
	our_worker "$pid" || pid=$(worker_pid)
	our_worker "$pid" || return 1
	ready=$(ready_lines)
	restored=$(restored_lines)
	cluster_expect_crash "durable_crash.sh round $r: SIGKILL to the shape_sync worker $pid"
	kill -KILL "$pid"
	manifest_file >"$work/manifest.$r" || true
	_cluster_as_pg ls "$SHAPE_SYNC_PGDATA/pg_shape_sync" >"$work/files.$r" 2>/dev/null || true
	wait_for 120 more_ready "$ready" && wait_for 120 more_restored "$restored" && wait_for 120 serving
}
immediate_restart() {
	local r=$1 restored
	restored=$(restored_lines)
	_cluster_as_pg "$SHAPE_SYNC_PG_BINDIR/pg_ctl" -D "$SHAPE_SYNC_PGDATA" -m immediate -w -t 60 stop >/dev/null
	manifest_file >"$work/manifest.$r" || true
	_cluster_as_pg ls "$SHAPE_SYNC_PGDATA/pg_shape_sync" >"$work/files.$r" 2>/dev/null || true
	_cluster_as_pg "$SHAPE_SYNC_PG_BINDIR/pg_ctl" -D "$SHAPE_SYNC_PGDATA" -l "$SHAPE_SYNC_LOG" -w -t 120 start >/dev/null &&
		wait_for 120 more_restored "$restored" && wait_for 120 serving
}

# evidence NAME ROUND: what is known of a client that got 409 when it should not have
evidence() {
	local s=$1 r=$2 h=${handle[$1]} m
	echo "# evidence for shape $s, handle $h (seed $seed, round $r):"
	echo "#   client offset $(offset_of "$s"), last run: $(sc get "$work/$s.json" 'd["last"]')"
	for m in "$work"/manifest.[0-9]*; do
		echo "#   ${m##*/} (at the kill of that round): durable_lsn $(sc manifest "$m" 'm["header"]["durable_lsn"]'), entry: $(sc manifest "$m" '[s for s in m["shapes"] if s["handle"] == a[0]] or "not listed"' "$h" | cut -c 1-300)"
	done
	{ grep -nE "$h|restored [0-9]+ of|not restored|cannot be restored|discards" "$SHAPE_SYNC_LOG" || true; } |
		tail -n 20 | sed 's/^/#   log: /'
}

kills_sigkill=0 kills_immediate=0 snapshots_at_kill=0 compactions=0 two_generations=0
refetch_allowed=0 refetch_failed=0
# resume NAME ROUND: the client of NAME goes on from its (handle, offset)
resume() {
	local s=$1 r=$2 out st
	out=$(sc sync "$work/$s.json" --timeout 300)
	st=${out%% *}
	if [[ $st == 409 ]] && ((unsafe[$s])); then
		refetch_allowed=$((refetch_allowed + 1))
		pass "round $r: shape $s gets 409: at a kill it was not in the manifest (${why[$s]}); it is fetched again"
		first_read "$s"
		return
	fi
	if [[ $st == 409 ]]; then
		refetch_failed=$((refetch_failed + 1))
		fail "round $r: shape $s (listed in the manifest at every kill) gets 409: $out"
		evidence "$s" "$r"
		first_read "$s"
		return
	fi
	if [[ $out =~ ^up-to-date\ .*\ ${handle[$s]}\ 0$ ]]; then
		pass "round $r: shape $s goes on at its (handle, offset) with 200: $out"
		unsafe[$s]=0
	else
		fail "round $r: shape $s goes on at its (handle, offset) with 200 (${handle[$s]}): $out"
		evidence "$s" "$r"
	fi
}

# (the schedule on fd 3, so that nothing in a round reads it from stdin)
while read -r r kind mode sleep delay <&3; do
	echo "# round $r ($SECONDS s into the test): $mode, killed by $kind after ${sleep}s"
	pid=$(worker_pid)
	big=
	sleep "$sleep"
	# how the shapes stand
	cluster_psql -At -F ' ' -c "SELECT handle, state, compactions FROM shape_sync.shapes" >"$work/view.$r"
	case $mode in
	snapshot)
		big=big_r$r
		shapes+=("$big")
		query[$big]="table=big&where=$(uri "id <> -$r")"
		rows_sql[$big]="SELECT id, grp, payload FROM big WHERE id <> -$r ORDER BY id"
		columns[$big]="id grp payload"
		last_change[$big]="id=2000003"
		rm -f "$work/$big.json"
		sc sync "$work/$big.json" --url "$SHAPE_SYNC_URL" --query "${query[$big]}" --log off --timeout 300 \
			>"$work/$big.first" &
		big_pid=$!
		helpers+=("$big_pid")
		sleep "$delay"
		# as soon as its first chunk is in the log (no pause between the looks)
		seen=
		deadline=$((SECONDS + 120))
		until snapshot_seen "$r" || ((SECONDS >= deadline)); do :; done
		check "round $r: the snapshot of a new shape of big has its first chunk in the log ($seen)" test -n "$seen"
		;;
	compaction)
		# as soon as the counter moves (no pause between the looks)
		c0=$(hot_compactions)
		deadline=$((SECONDS + 120))
		until compacted_since "$c0" || ((SECONDS >= deadline)); do :; done
		check "round $r: a hot shape is compacted" compacted_since "$c0"
		sleep "$delay"
		;;
	plain)
		# hot_all last: its log grows fastest, so that its client is most likely past the
		# manifest's end of it
		for s in big_grp app_mix hot_low app_all hot_all; do
			sc sync "$work/$s.json" --timeout 300 >/dev/null
		done
		;;
	esac
	life_compactions=$(metric shape_sync_log_compactions_total)
	compactions=$((compactions + life_compactions))
	if [[ $kind == sigkill ]]; then
		check "round $r: SIGKILL of the worker; PostgreSQL restarts, shape_sync restores its shapes and serves again" kill_worker "$r" "$pid"
		kills_sigkill=$((kills_sigkill + 1))
	else
		check "round $r: immediate stop and start; shape_sync restores its shapes and serves again" immediate_restart "$r"
		kills_immediate=$((kills_immediate + 1))
	fi
	line=$({ grep -o 'shape_sync restored [0-9]* of [0-9]* shapes from disk in [0-9]* ms' "$SHAPE_SYNC_LOG" || true; } | tail -n 1)
	echo "# round $r: $line; logs compacted since the last start: $life_compactions"
	expect_match "round $r: every shape the manifest listed is restored" '^shape_sync restored ([0-9]+) of \1 shapes' "$line"
	for s in hot_all hot_low; do
		echo "# round $r: shape $s is at generation $(sc manifest "$work/manifest.$r" 'next(s["generation"] for s in m["shapes"] if s["handle"] == a[0])' "${handle[$s]}") in the manifest; its files at the kill: $(grep -F "${handle[$s]}" "$work/files.$r" | tr '\n' ' ')"
		if (($(grep -c "^${handle[$s]}\.[0-9]*\.log$" "$work/files.$r" || true) > 1)); then
			two_generations=$((two_generations + 1))
		fi
	done
	if [[ $mode == plain ]]; then
		for s in app_all hot_all; do
			echo "# round $r: shape $s's client was at $(offset_of "$s"); the manifest held it up to $(sc manifest "$work/manifest.$r" '"%d_%d" % tuple(next(s["last"] for s in m["shapes"] if s["handle"] == a[0]))' "${handle[$s]}")"
		done
	fi
	listed_now=$(sc manifest "$work/manifest.$r" '" ".join(s["handle"] for s in m["shapes"])' 2>/dev/null || true)
	for s in "${shapes[@]}"; do
		[[ $s == "$big" ]] && continue
		if [[ " $listed_now " != *" ${handle[$s]} "* ]]; then
			unsafe[$s]=1
			why[$s]="round $r: $(awk -v h="${handle[$s]}" '$1 == h { print $2 }' "$work/view.$r") before the kill, not listed"
		fi
	done
	if [[ -n $big ]]; then
		wait "$big_pid" || true
		first=$(cat "$work/$big.first")
		# the shape the client's first request made, as last seen before the kill, and the
		# first handle the client saw
		read -r bpre bstate brows <<<"$seen" || true
		bh=$(sc get "$work/$big.json" 'd["last"]["handles"][0] if d["last"]["handles"] else "-"' 2>/dev/null || echo -)
		[[ $bstate == snapshotting ]] && snapshots_at_kill=$((snapshots_at_kill + 1))
		echo "# round $r: the new shape of big ($bpre) was $bstate ($brows rows) when last seen before the kill; its client saw first $bh, then: $first"
		if [[ $first =~ ^409\  ]]; then
			if [[ " $listed_now " == *" $bh "* ]]; then
				refetch_failed=$((refetch_failed + 1))
				fail "round $r: shape $big, listed in the manifest at the kill, gets 409: $first"
				handle[$big]=$bh
				evidence "$big" "$r"
			else
				refetch_allowed=$((refetch_allowed + 1))
				pass "round $r: shape $big gets 409 ($bstate before the kill, not in the manifest); it is fetched again"
			fi
			first_read "$big"
		else
			handle[$big]=$(awk '{ print $(NF - 1) }' <<<"$first")
			handle[$big]=${handle[$big]##*,}
			unsafe[$big]=0
			expect_match "round $r: shape $big is read whole (${handle[$big]})" '^up-to-date .* [0-9]+-[0-9]+ 0$' "$first"
		fi
	fi
	for s in "${shapes[@]}"; do
		[[ $s == "$big" || $s == big_r* ]] && continue
		resume "$s" "$r"
	done
done 3<"$work/schedule"

# the end: the writer stops, one last transaction that every shape sees, and each client
# reads up to it
echo "# the end ($SECONDS s into the test)"
touch "$work/stop"
wait "$writer_pid" || true
cluster_psql >/dev/null -c "BEGIN" -c "UPDATE hot SET v = 'final' WHERE id = 1" \
	-c "INSERT INTO app (n, v) VALUES (-3, 'final')" -c "INSERT INTO big VALUES (2000003, 3, 'final')" -c "COMMIT"
compactions=$((compactions + $(metric shape_sync_log_compactions_total)))
for s in "${shapes[@]}"; do
	out=$(sc sync "$work/$s.json" --until "${last_change[$s]}" --timeout 300)
	if [[ ${out%% *} == 409 ]] && ((unsafe[$s])); then
		refetch_allowed=$((refetch_allowed + 1))
		pass "the end: shape $s gets 409: at a kill it was not in the manifest (${why[$s]}); it is fetched again"
		first_read "$s"
		out=$(sc sync "$work/$s.json" --until "${last_change[$s]}" --timeout 300)
	fi
	if [[ $out =~ ^found\ .*\ ${handle[$s]}\ 0$ ]]; then
		pass "the end: shape $s reads the last change at its handle, with no violation: $out"
	else
		[[ ${out%% *} == 409 ]] && refetch_failed=$((refetch_failed + 1))
		fail "the end: shape $s reads the last change at its handle (${handle[$s]}), with no violation: $out"
		evidence "$s" end
	fi
	if same_rows "$s"; then
		pass "the end: the client of shape $s holds exactly its shape's rows ($(wc -l <"$work/$s.table"))"
	else
		fail "the end: the client of shape $s holds exactly its shape's rows"
		rows_differ "$s"
	fi
done

check "no PANIC or assertion failure in the server log" bash -c '! grep -nE "PANIC|TRAP:" "$1"' _ "$SHAPE_SYNC_LOG"
check "the stored logs were never discarded" bash -c '! grep -n "discards its stored shape logs" "$1"' _ "$SHAPE_SYNC_LOG"
out=$(cluster_crash_check "$SHAPE_SYNC_LOG") || true
expect_eq "no crash but the SIGKILLs the test made" "" "$out"
grep -nE "is not restored|cannot be restored" "$SHAPE_SYNC_LOG" | sed 's/^/# log: /' || true
grep -nE "(ERROR|WARNING):.*shape" "$SHAPE_SYNC_LOG" | sed 's/^/# log: /' | head -n 20 || true
echo "# seed $seed, $SECONDS s: kills: $kills_sigkill SIGKILL of the worker, $kills_immediate immediate stop;" \
	"snapshots running when last seen before a kill: $snapshots_at_kill; compactions: $compactions (a hot shape with two generations of its log on disk at a kill: $two_generations);" \
	"409s: $refetch_allowed allowed (shape not in the manifest at a kill), $refetch_failed not;" \
	"writer: $(cluster_psql -At -c "SELECT sum(n) FROM hot") row updates of hot, app at $(cluster_psql -At -c "SELECT count(*) || ' rows, last id ' || max(id) FROM app")," \
	"$(cat "$work/writer.sessions" 2>/dev/null || echo 0) sessions"
finish
