#!/usr/bin/env bash
#
# Compaction of a log that left memory for its file (durable logs): before, such a log was never
# compacted and kept its whole history. With shape_sync.log_memory = 8MB, every row of a 3 MB
# table is updated again and again while compaction is off, so that the shape's log grows to
# about 25 MB (most of it only in its file). Compaction is then turned on: it reads the log
# from its file and writes its next generation as it builds it (about 8 MB, more than memory
# has free), and the log shrinks. A response of the previous log from its file, which its
# client holds unfinished meanwhile, is then sent whole and byte for byte (that generation's
# file stays until it is done) and the file goes afterwards. Clients that stopped before and inside the compacted history, and a new one, end
# equal to the table on the same handle; after a restart the compacted shape is restored and
# they go on at their offsets, without 409.
set -euo pipefail
source "$(dirname "$0")/../lib/lib.sh"
init_work
shape_client_init

export SHAPE_SYNC_EXTRA_CONF="shape_sync.log_memory = '8MB'
shape_sync.chunk_bytes_threshold = 1048576
shape_sync.compaction_factor = 0
shape_sync.stalled_serve_timeout = 300000${SHAPE_SYNC_EXTRA_CONF:+
$SHAPE_SYNC_EXTRA_CONF}"
start_cluster_retrying 4790
cluster_psql >/dev/null <<'SQL'
CREATE EXTENSION shape_sync;
CREATE TABLE t (id int PRIMARY KEY, v text);
INSERT INTO t SELECT g, repeat(md5(g::text), 32) FROM generate_series(1, 3000) g;
SQL

serving() { [[ $(http_status "$SHAPE_SYNC_URL/v1/health") == 200 ]]; }
shape_field() { cluster_psql -At -c "SELECT $1 FROM shape_sync.shapes WHERE handle = '$handle'"; }
data_files() { { _cluster_as_pg ls "$SHAPE_SYNC_PGDATA/pg_shape_sync" | grep "^$handle\..*\.log$" || true; } | sort | tr '\n' ' '; }
same_rows() {
	sc rows "$work/$1.json" id v >"$work/$1.client"
	cluster_psql -At -c "SELECT id, v FROM t ORDER BY id" >"$work/$1.table"
	cmp -s "$work/$1.client" "$work/$1.table"
}
# update_all N: N rounds that update every row (about 7 MB of log each: old values too), a
# transaction per row: a chunk ends where a transaction does, and updates merge across such
# ends only (log_compact.c). No pause: a decoding batch of more than the memory left ends
# early so that what the log gained leaves memory (durable_burst.sh)
round=0
update_all() {
	for ((r = 0; r < $1; r++)); do
		round=$((round + 1))
		cluster_psql -q >/dev/null <<SQL
SET synchronous_commit = off;
DO \$\$
BEGIN
	FOR i IN 1..3000 LOOP
		UPDATE t SET v = repeat(md5(id::text || ' $round'), 32) WHERE id = i;
		COMMIT;
	END LOOP;
END
\$\$;
SQL
	done
}
synced() { [[ $(sc sync "$work/$1.json") == "up-to-date 200 $handle 0" ]]; }

out=$(sc sync "$work/early.json" --url "$SHAPE_SYNC_URL" --query "table=t")
handle=$(cut -d' ' -f3 <<<"$out")
expect_match "a client reads the shape ($handle)" '^up-to-date 200 [0-9]+-[0-9]+ 0$' "$out"
update_all 3
out=$(sc sync "$work/middle.json" --url "$SHAPE_SYNC_URL" --query "table=t")
expect_eq "a second client reads it after 3 rounds of updates" "up-to-date 200 $handle 0" "$out"
update_all 3
grown() { (($(shape_field log_bytes) > 2 * 8 * 1024 * 1024)); }
check "with compaction off the log grows past twice shape_sync.log_memory" wait_for 60 grown
before=$(shape_field log_bytes)
expect_eq "and is not compacted" 0 "$(shape_field compactions)"
first_file=$(data_files)
expect_match "its data file is generation 1 ($first_file)" "^$handle\.1\.log $" "$first_file"

# a response of the log as it is now, from its file (its first chunk left memory long ago):
# once at full speed, as the reference, then by a client that stops reading (a tiny receive
# buffer) and holds it, unfinished, while the shape is compacted
first_path="/v1/shape?table=t&offset=-1"
curl -s -o "$work/first.body" "$SHAPE_SYNC_URL$first_path"
first_bytes=$(stat -c %s "$work/first.body")
# more than the server's write piece (256 kB) and the sockets' buffers hold: the rest is still
# to be read from the file when the shape is compacted
check "the first chunk is read from the file ($first_bytes bytes)" test "$first_bytes" -gt 1000000
python3 "$stall_client" hold --url "$SHAPE_SYNC_URL" --path "$first_path" --rcvbuf 4096 \
	--stop-file "$work/release" --max-seconds 300 --drain-seconds 60 --save-body "$work/held" \
	>"$work/hold.out" &
holder=$!
check "a client holds the response unfinished" wait_event "$work/hold.out" stalled 60
held=$(j "$work/hold.out" stalled 'd["received"][0]')
check "with $held of $first_bytes bytes received" test "$held" -lt 100000

cluster_psql -q -c "ALTER SYSTEM SET shape_sync.compaction_factor = 2" -c "SELECT pg_reload_conf()" >/dev/null
# a change after the worker took the new setting compacts the log: one at each try
compacted() {
	cluster_psql -q -c "UPDATE t SET v = 'compaction ' || id WHERE id = 1" >/dev/null
	sleep 0.3
	(($(shape_field compactions) >= 1))
}
check "compaction on, the next change compacts the log that left memory" wait_for 60 compacted
after=$(shape_field log_bytes)
check "from $before to $after bytes (less than a third)" test "$after" -lt "$((before / 3))"
check "more than memory had free: the copy was written as it was built ($after bytes)" \
	test "$after" -gt "$((4 * 1024 * 1024))"
second_listed() { _cluster_as_pg cat "$SHAPE_SYNC_PGDATA/pg_shape_sync/manifest" | sc manifest - 'm["shapes"][0]["generation"]' | grep -qx 2; }
check "the manifest names generation 2" wait_for 60 second_listed
# a later round: the one that named generation 2 has let go of what it made obsolete
length() { _cluster_as_pg cat "$SHAPE_SYNC_PGDATA/pg_shape_sync/manifest" | sc manifest - 'm["shapes"][0]["length"]'; }
listed_length=$(length)
cluster_psql -q -c "UPDATE t SET v = 'a later round' WHERE id = 2" >/dev/null
later_round() { (($(length) > listed_length)); }
check "a later round lists the shape's next change" wait_for 60 later_round
both="$handle.1.log $handle.2.log "
expect_eq "while the held response reads it, generation 1 stays beside generation 2" "$both" "$(data_files)"
touch "$work/release"
wait "$holder"
expect_eq "the held response of the previous log is then sent whole" "True $first_bytes" \
	"$(j "$work/hold.out" done '"%s %s" % (d["conns"][0]["complete"], d["conns"][0]["body_bytes"])')"
check "byte for byte as the reference" cmp -s "$work/first.body" "$work/held.0"
only_second() { [[ $(data_files) == "$handle.2.log " ]]; }
check "once it is done, generation 1 goes" wait_for 60 only_second

for c in early middle; do
	expect_eq "client $c goes on from its offset in the compacted history, same handle" \
		"up-to-date 200 $handle 0" "$(sc sync "$work/$c.json")"
	check "and holds the table's rows" same_rows "$c"
done
out=$(sc sync "$work/new.json" --url "$SHAPE_SYNC_URL" --query "table=t")
expect_eq "a new client reads the compacted log, same handle" "up-to-date 200 $handle 0" "$out"
check "and holds the table's rows" same_rows new

# the compacted log grows past memory again, and survives a restart
update_all 2
cluster_restart
check "after a restart shape_sync serves again" wait_for 90 serving
restored() { grep -q "shape_sync restored 1 of 1 shapes from disk" "$SHAPE_SYNC_LOG"; }
check "the log says \"restored 1 of 1 shapes\"" wait_for 60 restored
cluster_psql -q -c "UPDATE t SET v = 'after the restart' WHERE id % 100 = 0" >/dev/null
check "the worker decodes the update" wait_decoded
for c in early middle new; do
	check "client $c goes on at its (handle, offset) after the restart" wait_for 30 synced "$c"
	check "and holds the table's rows" same_rows "$c"
done
rotations=$(curl -s "$SHAPE_SYNC_URL/metrics" |
	awk '$1 ~ /^shape_sync_shape_(evictions|rotations)_total/ { s += $2 } END { print s + 0 }')
expect_eq "no shape was evicted or rotated" 0 "$rotations"
expect_eq "nothing was compacted with a warning" 0 \
	"$(grep -c 'was not compacted\|is not compacted\|cannot be compacted' "$SHAPE_SYNC_LOG" || true)"
finish
