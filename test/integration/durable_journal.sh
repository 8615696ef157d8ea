#!/usr/bin/env bash
#
# The journal of the shape log files: 40 shapes of one table, and transactions that change all
# of them, a round apart. Each round makes what the 40 files gained durable with one fsync of
# the journal (plus the manifest and its directory), not one per file: the fsync counter grows
# by far less than 40 a round (with one fsync per file it grows by 40 and more). Then the
# files lose what the page cache would lose in a crash of the operating system (two data files
# cut back, one to nothing) while PostgreSQL is stopped at once: the start replays the journal
# into them, and every client goes on at its (handle, offset), with no 409, and holds the
# table's rows. A file with records in the journal is held open by the worker until the journal
# is emptied (a writeback error stays with its inode only while it is in memory): a shape
# deleted meanwhile lets go of its file, and deleting every shape empties the journal and lets
# go of them all.
set -euo pipefail
source "$(dirname "$0")/../lib/lib.sh"
init_work
shape_client_init

SHAPE_SYNC_EXTRA_CONF="shape_sync.allow_shape_deletion = on" start_cluster_retrying 4770
cluster_psql >/dev/null <<'SQL'
CREATE EXTENSION shape_sync;
CREATE TABLE t (id int PRIMARY KEY, v text);
INSERT INTO t SELECT g, 'r' || g FROM generate_series(1, 400) g;
SQL

shapes=40
store_dir="$SHAPE_SYNC_PGDATA/pg_shape_sync"
manifest() { _cluster_as_pg cat "$store_dir/manifest" 2>/dev/null | sc manifest - "$@"; }
metric() { curl -s "$SHAPE_SYNC_URL/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }
serving() { [[ $(http_status "$SHAPE_SYNC_URL/v1/health") == 200 ]]; }
file_length() { _cluster_as_pg stat -c %s "$store_dir/$1.1.log"; }
# every shape's durable length in the manifest is its data file's length
all_durable() {
	local k listed
	listed=$(manifest "' '.join(f'{s[\"handle\"]}={s[\"length\"]}' for s in m['shapes'])") || return 1
	for ((k = 0; k < shapes; k++)); do
		[[ " $listed " == *" ${handle[$k]}=$(file_length "${handle[$k]}") "* ]] || return 1
	done
}
# sync_all [--new]: `sc sync $work/s<k>.json` of every shape k (--new: its first request,
# for the rows with id % shapes = k), eight at a time, its output line in $work/s<k>.out
sync_all() {
	local k pids=()
	for ((k = 0; k < shapes; k++)); do
		if [[ ${1:-} == --new ]]; then
			sc sync "$work/s$k.json" --url "$SHAPE_SYNC_URL" \
				--query "table=t&where=$(uri "id % $shapes = $k")" >"$work/s$k.out" &
		else
			sc sync "$work/s$k.json" >"$work/s$k.out" &
		fi
		pids+=($!)
		if (((k + 1) % 8 == 0)); then
			wait "${pids[@]}" || true	# a failed sync prints no "up-to-date" line
			pids=()
		fi
	done
	wait "${pids[@]}" || true
}
same_rows() {
	sc rows "$work/s$1.json" id v >"$work/s$1.client"
	cluster_psql -At -c "SELECT id, v FROM t WHERE id % $shapes = $1 ORDER BY id" >"$work/s$1.table"
	cmp -s "$work/s$1.client" "$work/s$1.table"
}

declare -A handle
sync_all --new
for ((k = 0; k < shapes; k++)); do
	out=$(<"$work/s$k.out")
	handle[$k]=$(cut -d' ' -f3 <<<"$out")
	[[ $out =~ ^up-to-date\ 200\ [0-9]+-[0-9]+\ 0$ ]] || fail "shape $k is read whole: $out"
done
listed() { [[ $(manifest 'len(m["shapes"])') == "$shapes" ]]; }
check "the manifest lists the $shapes shapes" wait_for 60 listed
check "and every file is durable" wait_for 60 all_durable

before=$(metric shape_sync_log_fsyncs_total)
rounds=10
for ((r = 0; r < rounds; r++)); do
	cluster_psql -q -c "UPDATE t SET v = v || '.$r' WHERE id <= 2 * $shapes"
	sleep 1.2			# a round apart (rounds are about a second)
done
check "what the $rounds transactions wrote becomes durable" wait_for 60 all_durable
after=$(metric shape_sync_log_fsyncs_total)
fsyncs=$((after - before))
echo "# $rounds transactions, each changing $shapes shapes: $fsyncs fsyncs"
check "far fewer fsyncs than one per shape per round ($fsyncs < $((shapes * rounds / 4)))" \
	test "$fsyncs" -lt $((shapes * rounds / 4))
check "the journal holds them" test "$(_cluster_as_pg stat -c %s "$store_dir/journal")" -gt 0

# a crash of the operating system, as far as the files can tell: PostgreSQL stops at once, and
# two data files lose bytes the journal holds
_cluster_as_pg "$SHAPE_SYNC_PG_BINDIR/pg_ctl" -D "$SHAPE_SYNC_PGDATA" -m immediate -w -t 60 stop >/dev/null
_cluster_as_pg truncate -s 0 "$store_dir/${handle[0]}.1.log"
half=$(($(file_length "${handle[1]}") / 2))
_cluster_as_pg truncate -s "$half" "$store_dir/${handle[1]}.1.log"
_cluster_as_pg "$SHAPE_SYNC_PG_BINDIR/pg_ctl" -D "$SHAPE_SYNC_PGDATA" -l "$SHAPE_SYNC_LOG" -w -t 60 start >/dev/null
check "after the start shape_sync serves again" wait_for 90 serving
restored() { grep -q "shape_sync restored $shapes of $shapes shapes from disk" "$SHAPE_SYNC_LOG"; }
check "every shape is restored, the two cut back too" wait_for 60 restored
cluster_psql -q -c "UPDATE t SET v = v || '.after' WHERE id <= 2 * $shapes"
check "the worker decodes the update" wait_decoded
bad=0
sync_all
for ((k = 0; k < shapes; k++)); do
	out=$(<"$work/s$k.out")
	if [[ $out != "up-to-date 200 ${handle[$k]} 0" ]] || ! same_rows "$k"; then
		echo "# shape $k: $out"
		bad=$((bad + 1))
	fi
done
expect_eq "every client goes on at its (handle, offset), no 409, and holds the table's rows" 0 "$bad"
expect_eq "no snapshot was taken again" 0 "$(metric shape_sync_snapshots_started_total)"

# the worker's read-only descriptors of data files (its own writes go through read-write
# descriptors; held ones are read-only), and those of removed files
held() {
	# one shell as the server's user for every descriptor; O_RDONLY: the last octal digit
	# of the flags (the access mode) is 0
	# shellcheck disable=SC2016
	_cluster_as_pg bash -c '
		[[ $1 =~ ^[0-9]+$ && -r /proc/$1/fd ]] || { echo "no worker"; exit 1; }
		n=0
		for f in /proc/"$1"/fd/*; do
			[[ $(readlink "$f") == */pg_shape_sync/*.log ]] || continue
			[[ $(sed -n "s/^flags:[[:space:]]*//p" "/proc/$1/fdinfo/${f##*/}") == *0 ]] && n=$((n + 1))
		done
		echo "$n"' _ "$(worker_pid)" 2>/dev/null
}
held_removed() { _cluster_as_pg ls -l "/proc/$(worker_pid)/fd" 2>/dev/null | grep -c 'pg_shape_sync/.*(deleted)' || true; }
cluster_psql -q -c "UPDATE t SET v = v || '.held' WHERE id <= 2 * $shapes"
check "what it wrote becomes durable" wait_for 60 all_durable
all_held() { [[ $(held) == "$shapes" ]]; }
check "the worker holds each of the $shapes files with records in the journal open" wait_for 60 all_held
expect_eq "DELETE /v1/shape of shape 0 answers 202" 202 \
	"$(curl -s -o /dev/null -w '%{http_code}' -X DELETE "$SHAPE_SYNC_URL/v1/shape?handle=${handle[0]}")"
file_gone() { ! _cluster_as_pg test -e "$store_dir/${handle[0]}.1.log"; }
check "shape 0's file is removed" wait_for 60 file_gone
expect_eq "and the worker holds no removed file open" 0 "$(held_removed)"
expect_eq "it holds the others' still" $((shapes - 1)) "$(held)"
check "the journal is not emptied yet" test "$(_cluster_as_pg stat -c %s "$store_dir/journal")" -gt 0
for ((k = 1; k < shapes; k++)); do
	curl -s -o /dev/null -X DELETE "$SHAPE_SYNC_URL/v1/shape?handle=${handle[$k]}"
done
emptied() { [[ $(_cluster_as_pg stat -c %s "$store_dir/journal") == 0 && $(held) == 0 && $(held_removed) == 0 ]]; }
check "once every shape is deleted, the journal is emptied and no file is held" wait_for 60 emptied

check "no ERROR, PANIC or WARNING from shape_sync" \
	bash -c '! grep -E "PANIC|TRAP:|(ERROR|WARNING):.*shape" "$1"' _ "$SHAPE_SYNC_LOG"
out=$(cluster_crash_check "$SHAPE_SYNC_LOG") || true
expect_eq "no crash" "" "$out"
finish
