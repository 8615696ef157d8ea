#!/usr/bin/env bash
#
# Durable shape logs that must not be trusted: each way the store in $PGDATA/pg_shape_sync no
# longer matches the cluster, the slot, its own bytes or the catalog makes the worker purge
# the whole store or the one shape concerned, with its own line in the server log; the old
# handle then gets 409 and a new request (offset=-1) serves the table's rows.  The whole store
# goes when the slot was dropped while the worker was away, when shape_sync.database changes,
# when the manifest has another format version or a broken checksum, and on a copy of the
# cluster (a base backup: the slot is not in it; a promoted standby: another timeline; a
# point-in-time recovery: both).  One
# shape alone goes when its data file is shorter than its durable length (and the journal
# does not hold what it lacks), when its table
# changed or was made again, or when shape_sync.role lost its SELECT on it, all while the
# worker was away; a data file with bytes past its durable length is cut back and restored.
set -euo pipefail
source "$(dirname "$0")/../lib/lib.sh"
init_work
shape_client_init

start_cluster_retrying 4760
cluster_psql >/dev/null <<'SQL'
CREATE EXTENSION shape_sync;
CREATE TABLE t (id int PRIMARY KEY, v text);
INSERT INTO t SELECT g, 'r' || g FROM generate_series(1, 300) g;
CREATE TABLE u (id int PRIMARY KEY, name text, note text);
INSERT INTO u SELECT g, 'n' || g, 'x' || g FROM generate_series(1, 50) g;
CREATE TABLE w (id int PRIMARY KEY, v text);
INSERT INTO w SELECT g, 'w' || g FROM generate_series(1, 20) g;
CREATE TABLE x (id int PRIMARY KEY, v text);
INSERT INTO x SELECT g, 'x' || g FROM generate_series(1, 20) g;
CREATE TABLE p (id int PRIMARY KEY, v text);
INSERT INTO p SELECT g, 'p' || g FROM generate_series(1, 20) g;
ALTER TABLE t REPLICA IDENTITY FULL;
ALTER TABLE u REPLICA IDENTITY FULL;
ALTER TABLE w REPLICA IDENTITY FULL;
ALTER TABLE x REPLICA IDENTITY FULL;
ALTER TABLE p REPLICA IDENTITY FULL;
CREATE DATABASE other;
CREATE ROLE reader NOLOGIN;
GRANT USAGE ON SCHEMA public TO reader;
GRANT SELECT ON t, u, w, x, p TO reader;
ALTER SYSTEM SET shape_sync.role = 'reader';
SQL
cluster_restart # shape_sync.role for the worker from its start

declare -A query=([t]="table=t" [u]="table=u&columns=id,name" [w]="table=w" [x]="table=x" [p]="table=p")
declare -A rows_sql=([t]="SELECT id, v FROM t ORDER BY id" [u]="SELECT id, name FROM u ORDER BY id"
	[w]="SELECT id, v FROM w ORDER BY id" [x]="SELECT id, v FROM x ORDER BY id"
	[p]="SELECT id, v FROM p ORDER BY id")
declare -A columns=([t]="id v" [u]="id name" [w]="id v" [x]="id v" [p]="id v")
declare -A handle

serving() { [[ $(http_status "$SHAPE_SYNC_URL/v1/health") == 200 ]]; }
store() { _cluster_as_pg ls "$SHAPE_SYNC_PGDATA/pg_shape_sync"; }
# manifest [EXPR ARG...]: the manifest, or EXPR over it (see shape_client.py)
manifest() { _cluster_as_pg cat "$SHAPE_SYNC_PGDATA/pg_shape_sync/manifest" 2>/dev/null | sc manifest - "$@"; }
# durable_length NAME: the length the manifest lists for shape NAME (nothing when it does not)
durable_length() { manifest 'next((s["length"] for s in m["shapes"] if s["handle"] == a[0]), "")' "${handle[$1]}"; }
# listed HANDLE...: the manifest lists these shapes
listed() {
	[[ $(manifest 'set(a) <= {s["handle"] for s in m["shapes"]}' "$@") == True ]]
}
# no_file DIR HANDLE: the store in data directory DIR holds no file of shape HANDLE
no_file() { ! _cluster_as_pg ls "$1/pg_shape_sync" | grep -q "^$2\."; }
# lists DIR HANDLE: the manifest in data directory DIR lists shape HANDLE
lists() { [[ $(_cluster_as_pg cat "$1/pg_shape_sync/manifest" | sc manifest - 'a[0] in [s["handle"] for s in m["shapes"]]' "$2") == True ]]; }
# file_has FILE TEXT
file_has() { _cluster_as_pg cat "$1" | grep -q "$2"; }
pg_stop() { _cluster_as_pg "$SHAPE_SYNC_PG_BINDIR/pg_ctl" -D "$SHAPE_SYNC_PGDATA" -m fast -w -t 60 stop >/dev/null; }
pg_start() {
	_cluster_as_pg "$SHAPE_SYNC_PG_BINDIR/pg_ctl" -D "$SHAPE_SYNC_PGDATA" -l "$SHAPE_SYNC_LOG" -w -t 60 start >/dev/null
}
# away / back: a restart without shape_sync in shared_preload_libraries, and one with it again
away() {
	cluster_psql -c "ALTER SYSTEM SET shared_preload_libraries = 'plpgsql'" >/dev/null
	cluster_restart
}
back() {
	cluster_psql -c "ALTER SYSTEM RESET shared_preload_libraries" >/dev/null
	cluster_restart
}
# mark [LOG]: the log's length now; logged MARK REGEX [LOG]: a line after MARK matches
mark() { wc -l <"${1:-$SHAPE_SYNC_LOG}"; }
logged() { tail -n "+$(($1 + 1))" "${3:-$SHAPE_SYNC_LOG}" | grep -Eq "$2"; }
not_logged() { ! logged "$@"; }
# fresh NAME: a new client of shape NAME reads it from offset=-1 (its handle in handle[NAME])
fresh() {
	local out
	rm -f "$work/$1.json"
	out=$(sc sync "$work/$1.json" --url "$SHAPE_SYNC_URL" --query "${query[$1]}")
	handle[$1]=$(cut -d' ' -f3 <<<"$out")
	[[ $out =~ ^up-to-date\ 200\ [0-9]+-[0-9]+\ 0$ ]]
}
# same_rows NAME: the client of shape NAME holds the table's rows
same_rows() {
	# shellcheck disable=SC2086 # the column names
	sc rows "$work/$1.json" ${columns[$1]} >"$work/$1.client"
	cluster_psql -At -c "${rows_sql[$1]}" >"$work/$1.table"
	cmp -s "$work/$1.client" "$work/$1.table"
}
# resumes NAME: the old client of shape NAME goes on at its (handle, offset) with 200
resumes() { [[ $(sc sync "$work/$1.json") == "up-to-date 200 ${handle[$1]} 0" ]]; }
# refused NAME: the old client of shape NAME gets 409
refused() { [[ $(sc sync "$work/$1.json") == 409\ * ]]; }
# purged WHAT NAME...: the old handles of shapes NAME get 409, the store holds no file of
# theirs, and a new client of each reads the table's rows
purged() {
	local what=$1 name
	shift
	for name in "$@"; do
		check "$what: the old handle of shape $name (${handle[$name]}) gets 409" refused "$name"
		check "$what: the store holds no file of it" no_file "$SHAPE_SYNC_PGDATA" "${handle[$name]}"
		check "$what: a new request of shape $name (offset=-1) is served" fresh "$name"
		check "$what: with the table's rows" same_rows "$name"
	done
}
# patch_manifest PYTHON: runs PYTHON on the manifest's bytes (`data`, a bytearray; `struct`),
# as the PostgreSQL user writes it back
patch_manifest() {
	local path=$SHAPE_SYNC_PGDATA/pg_shape_sync/manifest
	_cluster_as_pg cat "$path" >"$work/manifest"
	"$py" -c "import struct, sys
data = bytearray(open(sys.argv[1], 'rb').read())
$1
open(sys.argv[1], 'wb').write(data)" "$work/manifest"
	_cluster_as_pg tee "$path" <"$work/manifest" >/dev/null
}
restarted() { check "$1: shape_sync serves again" wait_for 90 serving; }

check "shape_sync serves as shape_sync.role = reader" wait_for 90 serving
check "shape t is read whole" fresh t
check "shape u is read whole" fresh u
check "the manifest lists them" wait_for 60 listed "${handle[t]}" "${handle[u]}"

# 1. the slot is dropped while the worker is away
away
slot=$(cluster_psql -At -c "SELECT slot_name FROM pg_replication_slots WHERE plugin = 'shape_sync'")
check "1: the slot ($slot) is there while the worker is away" test -n "$slot"
cluster_psql -c "SELECT pg_drop_replication_slot('$slot')" >/dev/null
m=$(mark)
back
restarted 1
check "1: the log says the store is discarded: the slot was made again" wait_for 60 logged "$m" \
	"LOG:  shape_sync discards its stored shape logs: replication slot \"$slot\" was made again"
purged 1 t u

# 2. shape_sync.database changes, then changes back
check "2: the manifest lists shape t" wait_for 60 listed "${handle[t]}"
m=$(mark)
cluster_psql -c "ALTER SYSTEM SET shape_sync.database = 'other'" >/dev/null
cluster_restart
restarted "2 (database other)"
check "2: the log says the store is discarded: another database" wait_for 60 logged "$m" \
	'LOG:  shape_sync discards its stored shape logs: the database is not the one they were written for'
check "2: the store holds no file of shape t" no_file "$SHAPE_SYNC_PGDATA" "${handle[t]}"
cluster_psql -c "ALTER SYSTEM RESET shape_sync.database" >/dev/null
cluster_restart
restarted "2 (database postgres again)"
purged "2 (database postgres again)" t

# 3. the manifest has another format version (bytes 8..11; the checksum is not made again)
check "3: the manifest lists shape t" wait_for 60 listed "${handle[t]}"
pg_stop
patch_manifest 'struct.pack_into("<I", data, 8, 3)'
expect_eq "3: the manifest now says format version 3" 3 \
	"$(manifest 'm["version"]')"
m=$(mark)
pg_start
restarted 3
check "3: the log says the store is discarded: format version 3" wait_for 60 logged "$m" \
	'LOG:  shape_sync discards its stored shape logs: file "pg_shape_sync/manifest" cannot be used: it has format version 3, not 2'
purged 3 t

# 4. a payload byte of the manifest is flipped
check "4: the manifest lists shape t" wait_for 60 listed "${handle[t]}"
pg_stop
expect_eq "4: the manifest's whole frame ends with the FNV-1a 64 of its bytes from 8 on" ok \
	"$(_cluster_as_pg cat "$SHAPE_SYNC_PGDATA/pg_shape_sync/manifest" | sc fnv -)"
patch_manifest 'data[16] ^= 0xFF'
expect_eq "4: it does not any more" bad \
	"$(_cluster_as_pg cat "$SHAPE_SYNC_PGDATA/pg_shape_sync/manifest" | sc fnv -)"
m=$(mark)
pg_start
restarted 4
check "4: the log says the store is discarded: the checksum" wait_for 60 logged "$m" \
	'LOG:  shape_sync discards its stored shape logs: file "pg_shape_sync/manifest" cannot be used: its checksum does not match its contents'
purged 4 t

# 5 and 6. shape t's data file is cut below its durable length; shape u's has bytes past it
check "5: shape u is read whole" fresh u
cluster_psql -c "UPDATE u SET name = 'before-stop' WHERE id <= 5" >/dev/null # u's client is behind
# durable: the manifest lists shape NAME with the length its data file has
durable() {
	local n
	n=$(durable_length "$1")
	[[ -n $n && $n == $(_cluster_as_pg stat -c %s "$SHAPE_SYNC_PGDATA/pg_shape_sync/${handle[$1]}.1.log") ]]
}
check "5: the manifest lists shape t with its file's length" wait_for 60 durable t
check "6: shape u's file has the update" wait_for 60 \
	file_has "$SHAPE_SYNC_PGDATA/pg_shape_sync/${handle[u]}.1.log" before-stop
check "6: the manifest lists shape u with its file's length" wait_for 60 durable u
pg_stop
t_file=$SHAPE_SYNC_PGDATA/pg_shape_sync/${handle[t]}.1.log
u_file=$SHAPE_SYNC_PGDATA/pg_shape_sync/${handle[u]}.1.log
t_len=$(durable_length t)
u_size=$(_cluster_as_pg stat -c %s "$u_file")
expect_eq "5: shape t's file has its durable length ($t_len bytes)" "$t_len" "$(_cluster_as_pg stat -c %s "$t_file")"
_cluster_as_pg truncate -s "$((t_len - 7))" "$t_file"
# (and the journal lost them too: it would give them back otherwise, test/integration/durable_journal.sh)
_cluster_as_pg truncate -s 0 "$SHAPE_SYNC_PGDATA/pg_shape_sync/journal"
printf '\007garbage past the durable length%.0s' 1 2 3 4 | _cluster_as_pg tee -a "$u_file" >/dev/null
m=$(mark)
pg_start
restarted "5 and 6"
check "5: the log says shape t is not restored: its file is short" wait_for 60 logged "$m" \
	"LOG:  shape ${handle[t]} on \"public\".\"t\" is not restored: file \"pg_shape_sync/${handle[t]}\\.1\\.log\" has $((t_len - 7)) bytes, fewer than the $t_len it held"
check "5 and 6: the log says 1 of 2 shapes are restored" wait_for 60 logged "$m" \
	'LOG:  shape_sync restored 1 of 2 shapes from disk in [0-9]+ ms'
check "6: the log says nothing about shape u" not_logged "$m" "${handle[u]}"
expect_eq "6: shape u's file is cut back to what it was before the garbage" "$u_size" \
	"$(_cluster_as_pg stat -c %s "$u_file")"
check "6: shape u's old handle is served (200, same handle)" resumes u
check "6: with the table's rows" same_rows u
expect_eq "6: and the update before the stop arrived once" 5 "$(sc count "$work/u.json" name before-stop)"
purged 5 t

# 7 and 8. while the worker is away: t's column changes type, w is dropped and made again with
# the same columns, x gets a column, and shape_sync.role loses SELECT on p; u is left alone
check "7: shape w is read whole" fresh w
check "7: shape x is read whole" fresh x
check "8: shape p is read whole" fresh p
check "7 and 8: the manifest lists shapes t, u, w, x, p" wait_for 60 listed \
	"${handle[t]}" "${handle[u]}" "${handle[w]}" "${handle[x]}" "${handle[p]}"
away
cluster_psql >/dev/null <<'SQL'
ALTER TABLE t ALTER COLUMN v TYPE varchar(10);
DROP TABLE w;
CREATE TABLE w (id int PRIMARY KEY, v text);
ALTER TABLE w REPLICA IDENTITY FULL;
INSERT INTO w SELECT g, 'again' || g FROM generate_series(101, 110) g;
GRANT SELECT ON w TO reader;
ALTER TABLE x ADD COLUMN extra int;
REVOKE SELECT ON p FROM reader;
UPDATE u SET name = 'while-away' WHERE id = 7;
SQL
m=$(mark)
back
restarted "7 and 8"
for name in t w x p; do
	check "7 and 8: the log says shape $name is not restored" wait_for 60 logged "$m" \
		"LOG:  shape ${handle[$name]} on \"public\"\\.\"$name\" is not restored: "
done
check "7 and 8: the log says 1 of 5 shapes are restored" wait_for 60 logged "$m" \
	'LOG:  shape_sync restored 1 of 5 shapes from disk in [0-9]+ ms'
check "7: the worker decodes what was written while it was away" wait_decoded
check "7: shape u's old handle is served (200, same handle)" resumes u
check "7: with the table's rows, the update made while away included" same_rows u
purged 7 t w x
# a request the role may not read is refused before its handle is looked at: 403, as the next
# request after a REVOKE while the worker runs (docs/security.md)
expect_eq "8: the old handle of shape p gets 403" "403 403 - 0" "$(sc sync "$work/p.json")"
expect_eq "8: a new request of shape p gets 403" 403 "$(http_status "$SHAPE_SYNC_URL/v1/shape?${query[p]}&offset=-1")"

# 9. a copy of the cluster: a base backup started as a cluster of its own (no slot in it), and
# a promoted standby (another timeline); each has its own shape_sync.port
check "9: the manifest lists shape t" wait_for 60 listed "${handle[t]}"
dir=$(dirname "$SHAPE_SYNC_PGDATA")
copy=$dir/standby
_cluster_as_pg "$SHAPE_SYNC_PG_BINDIR/pg_basebackup" -h "$PGHOST" -p "$PGPORT" -U postgres -D "$copy" \
	-X stream --no-sync >"$work/basebackup.log" 2>&1
copy_http=$(cluster_free_port $((SHAPE_SYNC_HTTP_PORT + 1)))
printf 'port = %s\nshape_sync.port = %s\n' $((PGPORT + 2)) "$copy_http" |
	_cluster_as_pg tee -a "$copy/postgresql.auto.conf" >/dev/null
check "9: the copy's store lists shape t" lists "$copy" "${handle[t]}"
_cluster_as_pg "$SHAPE_SYNC_PG_BINDIR/pg_ctl" -D "$copy" -l "$dir/standby.log" -w -t 60 start >/dev/null
copy_serving() { [[ $(http_status "http://localhost:$copy_http/v1/health") == 200 ]]; }
check "9: the base backup's shape_sync serves" wait_for 90 copy_serving
check "9: its log says the store is discarded: the slot was made again" wait_for 60 logged 0 \
	'LOG:  shape_sync discards its stored shape logs: replication slot "shape_sync_[0-9]+" was made again' "$dir/standby.log"
expect_eq "9: on the base backup, the old handle of shape t gets 409" 409 \
	"$(http_status "http://localhost:$copy_http/v1/shape?${query[t]}&handle=${handle[t]}&offset=$(sc get "$work/t.json" 'd["offset"]')")"
check "9: on the base backup, the store holds no file of it" no_file "$copy" "${handle[t]}"
out=$(sc sync "$work/tcopy.json" --url "http://localhost:$copy_http" --query "${query[t]}")
expect_match "9: on the base backup, a new request of shape t is served" '^up-to-date 200 ' "$out"
sc rows "$work/tcopy.json" id v >"$work/tcopy.client"
cluster_psql -p $((PGPORT + 2)) -At -c "${rows_sql[t]}" >"$work/tcopy.table"
check "9: with the copy's rows" cmp -s "$work/tcopy.client" "$work/tcopy.table"
check "9: the original still serves shape t's old handle" resumes t
_cluster_as_pg "$SHAPE_SYNC_PG_BINDIR/pg_ctl" -D "$copy" -m fast -w -t 60 stop >/dev/null
_cluster_as_pg rm -rf "$copy"

check "9: a standby is made" cluster_standby_create copy
check "9: it is promoted" _cluster_as_pg "$SHAPE_SYNC_PG_BINDIR/pg_ctl" -D "$SHAPE_SYNC_STANDBY_PGDATA" -w -t 60 promote
cluster_psql -p "$SHAPE_SYNC_STANDBY_PORT" >/dev/null \
	-c "ALTER SYSTEM SET shared_preload_libraries = 'shape_sync'" \
	-c "ALTER SYSTEM SET shape_sync.port = $copy_http"
cluster_standby_stop
check "9: the promoted standby's store lists shape t" lists "$SHAPE_SYNC_STANDBY_PGDATA" "${handle[t]}"
m=$(mark "$dir/standby.log")
cluster_standby_start
check "9: the promoted standby's shape_sync serves" wait_for 90 copy_serving
check "9: its log says the store is discarded: the timeline" wait_for 60 logged "$m" \
	'LOG:  shape_sync discards its stored shape logs: the timeline is not the one they were written for' "$dir/standby.log"
expect_eq "9: on the promoted standby, the old handle of shape t gets 409" 409 \
	"$(http_status "http://localhost:$copy_http/v1/shape?${query[t]}&handle=${handle[t]}&offset=$(sc get "$work/t.json" 'd["offset"]')")"
rm -f "$work/tcopy.json"
out=$(sc sync "$work/tcopy.json" --url "http://localhost:$copy_http" --query "${query[t]}")
expect_match "9: on the promoted standby, a new request of shape t is served" '^up-to-date 200 ' "$out"
sc rows "$work/tcopy.json" id v >"$work/tcopy.client"
cluster_psql -p "$SHAPE_SYNC_STANDBY_PORT" -At -c "${rows_sql[t]}" >"$work/tcopy.table"
check "9: with the promoted standby's rows" cmp -s "$work/tcopy.client" "$work/tcopy.table"
check "9: the original still serves shape t's old handle" resumes t

# 10. point-in-time recovery: a base backup restored and recovered to an LSN from the
# original's WAL, then promoted (another timeline, and no slot); its store is the backup's
check "10: the manifest lists shape t" wait_for 60 listed "${handle[t]}"
pitr=$dir/pitr
_cluster_as_pg "$SHAPE_SYNC_PG_BINDIR/pg_basebackup" -h "$PGHOST" -p "$PGPORT" -U postgres -D "$pitr" \
	-X stream --no-sync >"$work/pitr-basebackup.log" 2>&1
cluster_psql -c "UPDATE t SET v = 'pitr-in' WHERE id = 1" >/dev/null
target=$(cluster_psql -At -c "SELECT pg_current_wal_insert_lsn()")
cluster_psql -c "UPDATE t SET v = 'pitr-out' WHERE id = 2" -c "SELECT pg_switch_wal()" >/dev/null
pitr_http=$(cluster_free_port $((copy_http + 1)))
{
	printf 'port = %s\nshape_sync.port = %s\n' $((PGPORT + 3)) "$pitr_http"
	printf "restore_command = 'cp %s/pg_wal/%%f %%p'\n" "$SHAPE_SYNC_PGDATA"
	printf "recovery_target_lsn = '%s'\nrecovery_target_action = 'promote'\n" "$target"
} | _cluster_as_pg tee -a "$pitr/postgresql.auto.conf" >/dev/null
_cluster_as_pg touch "$pitr/recovery.signal"
check "10: the backup's store lists shape t" lists "$pitr" "${handle[t]}"
_cluster_as_pg "$SHAPE_SYNC_PG_BINDIR/pg_ctl" -D "$pitr" -l "$dir/pitr.log" -w -t 60 start >/dev/null
pitr_serving() { [[ $(http_status "http://localhost:$pitr_http/v1/health") == 200 ]]; }
check "10: the recovered cluster's shape_sync serves" wait_for 90 pitr_serving
check "10: it recovered to the target and was promoted" \
	grep -Eq 'recovery stopping after WAL location \(LSN\)|selected new timeline ID' "$dir/pitr.log"
check "10: its log says the store is discarded" wait_for 60 logged 0 \
	'LOG:  shape_sync discards its stored shape logs: ' "$dir/pitr.log"
expect_eq "10: on the recovered cluster, the old handle of shape t gets 409" 409 \
	"$(http_status "http://localhost:$pitr_http/v1/shape?${query[t]}&handle=${handle[t]}&offset=$(sc get "$work/t.json" 'd["offset"]')")"
check "10: its store holds no file of it" no_file "$pitr" "${handle[t]}"
rm -f "$work/tcopy.json"
out=$(sc sync "$work/tcopy.json" --url "http://localhost:$pitr_http" --query "${query[t]}")
expect_match "10: on the recovered cluster, a new request of shape t is served" '^up-to-date 200 ' "$out"
sc rows "$work/tcopy.json" id v >"$work/tcopy.client"
cluster_psql -p $((PGPORT + 3)) -At -c "${rows_sql[t]}" >"$work/tcopy.table"
check "10: with the recovered cluster's rows" cmp -s "$work/tcopy.client" "$work/tcopy.table"
expect_match "10: which have the change before the target" 'pitr-in' "$(cat "$work/tcopy.client")"
check "10: and not the one after it" bash -c '! grep -q "pitr-out" "$1"' _ "$work/tcopy.client"
_cluster_as_pg "$SHAPE_SYNC_PG_BINDIR/pg_ctl" -D "$pitr" -m fast -w -t 60 stop >/dev/null
check "10: the original still serves shape t's old handle" resumes t

check "no ERROR, PANIC or WARNING from shape_sync" \
	bash -c '! grep -hE "PANIC|TRAP:|(ERROR|WARNING):.*shape" "$@" | grep -v "WARNING:  shape_sync.s decoding is [0-9.]* s behind the commits"' _ "$SHAPE_SYNC_LOG" "$dir/standby.log" "$dir/pitr.log"
out=$(cluster_crash_check "$SHAPE_SYNC_LOG" "$dir/standby.log" "$dir/pitr.log") || true
expect_eq "no crash" "" "$out"
finish
