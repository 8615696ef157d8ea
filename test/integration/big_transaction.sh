#!/usr/bin/env bash
#
# A transaction of a million rows is replayed whole at its commit, for seconds: meanwhile the
# worker still obeys SIGTERM within a fraction of a second (the replay hook of decoder.c;
# before, it finished the replay first), and once back it serves the table's shapes.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
init_work

start_cluster_retrying 4640
cluster_psql <<'SQL'
CREATE EXTENSION shape_sync;
CREATE TABLE big (id int PRIMARY KEY, payload text);
ALTER TABLE big REPLICA IDENTITY FULL;
INSERT INTO big VALUES (0, 'first');
SQL
url="$SHAPE_SYNC_URL/v1/shape?table=big"
expect_eq "the table's shape is served" 200 "$(http_status "$url&offset=-1")"
pid=$(worker_pid)

cluster_psql -c "INSERT INTO big SELECT g, md5(g::text) FROM generate_series(1, 1000000) g" >/dev/null
# SIGTERM once the replay is under way: the worker reads the transaction back from its spill
# files (logical_decoding_work_mem is 1MB here), waiting on ReorderBufferRead
cluster_psql -At >"$work/term.out" <<SQL
DO \$\$
BEGIN
	FOR i IN 1..4000 LOOP
		PERFORM pg_stat_clear_snapshot();
		IF EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $pid AND wait_event = 'ReorderBufferRead') THEN
			PERFORM pg_terminate_backend($pid);
			RAISE NOTICE 'terminated at %', extract(epoch FROM clock_timestamp());
			RETURN;
		END IF;
		PERFORM pg_sleep(0.002);
	END LOOP;
	RAISE EXCEPTION 'the replay was never seen';
END
\$\$;
SQL
t0=$(now)
gone() { [[ $(cluster_psql -At -c "SELECT count(*) FROM pg_stat_activity WHERE pid = $pid") == 0 ]]; }
check "the worker exits" wait_for 30 gone
took=$(diff_s "$t0" "$(now)")
check "within 1 s of SIGTERM (${took} s; the replay takes longer)" le "$took" 1
expect_match "it was stopped in the middle of the replay" 'shape_sync shutting down during the replay of a transaction' \
	"$(cat "$SHAPE_SYNC_LOG")"
back() { local p; p=$(worker_pid); [[ -n $p && $p != "$pid" ]] && [[ $(http_status "$SHAPE_SYNC_URL/v1/health") == 200 ]]; }
check "it comes back" wait_for 30 back
body=$(curl -s -m 60 "$url&offset=-1&where=$(python3 -c 'import urllib.parse; print(urllib.parse.quote("id <= 10"))')")
expect_eq "and serves the table's shapes with its rows" 11 "$(grep -o '"operation":"insert"' <<<"$body" | wc -l)"
check "no crash in the log" bash -c '! grep -E "PANIC|terminated by signal|TRAP:" "$1"' _ "$SHAPE_SYNC_LOG"
finish
