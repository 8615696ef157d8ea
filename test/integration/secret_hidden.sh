#!/usr/bin/env bash
#
# shape_sync.secret guards every shape request and is never shown or logged:
# not in pg_settings or SHOW for other roles, not as a superuser (masked), not
# in the server log when the postmaster reloads a changed secret (PostgreSQL
# logs "parameter ... changed to ..." for every other setting), and not when
# clients send it right or wrong in their URLs.
set -euo pipefail
source "$(dirname "$0")/../lib/lib.sh"
trap cluster_stop EXIT

first='first-Secret-7f3a9c'
second='second-Secret-b81e44'
SHAPE_SYNC_EXTRA_CONF="shape_sync.secret = '$first'
log_min_messages = debug1" cluster_start "$(cluster_free_port 4350)"
cluster_psql <<'SQL'
CREATE TABLE t (id int PRIMARY KEY, v text);
ALTER TABLE t REPLICA IDENTITY FULL;
INSERT INTO t VALUES (1, 'a');
CREATE ROLE secret_reader LOGIN;
SQL
url="$SHAPE_SYNC_URL/v1/shape?table=t&offset=-1"

expect_eq "no secret: 401" 401 "$(http_status "$url")"
expect_eq "the wrong secret: 401" 401 "$(http_status "$url&secret=${first}x")"
expect_eq "a prefix of the secret: 401" 401 "$(http_status "$url&secret=${first:0:10}")"
expect_eq "secret=: 200" 200 "$(http_status "$url&secret=$first")"
expect_eq "api_secret=: 200" 200 "$(http_status "$url&api_secret=$first")"
expect_eq "/v1/%73hape is /v1/shape and needs the secret" 401 \
	"$(curl -s -o /dev/null -w '%{http_code}' --path-as-is "$SHAPE_SYNC_URL/v1/%73hape?table=t&offset=-1")"
expect_eq "/v1/shape/ is no route" 404 \
	"$(curl -s -o /dev/null -w '%{http_code}' --path-as-is "$SHAPE_SYNC_URL/v1/shape/?table=t&offset=-1")"
expect_eq "/v1/health stays open" 200 "$(http_status "$SHAPE_SYNC_URL/v1/health")"
expect_eq "the preflight stays open" 204 \
	"$(curl -s -o /dev/null -w '%{http_code}' -X OPTIONS "$SHAPE_SYNC_URL/v1/shape")"

expect_eq "a superuser's SHOW masks it" '********' "$(cluster_psql -At -c 'SHOW shape_sync.secret')"
expect_eq "pg_settings masks it for a superuser" '********||' \
	"$(cluster_psql -At -c "SELECT setting, reset_val, boot_val FROM pg_settings WHERE name = 'shape_sync.secret'")"
expect_eq "pg_settings has no row for another role" 0 \
	"$(cluster_psql -At -U secret_reader -c "SELECT count(*) FROM pg_settings WHERE name = 'shape_sync.secret'")"
shown=$(cluster_psql -At -U secret_reader -c 'SHOW shape_sync.secret' 2>&1 || true)
expect_match "SHOW is refused to another role" 'must be superuser or have privileges of pg_read_all_settings' "$shown"
expect_eq "current_setting() is refused to another role" 1 \
	"$(cluster_psql -At -U secret_reader -c "SELECT current_setting('shape_sync.secret')" 2>&1 | grep -c 'must be superuser' || true)"

# a reload with another secret: the old one stops working, nothing is logged
cluster_psql -c "ALTER SYSTEM SET shape_sync.secret = '$second'" -c "ALTER SYSTEM SET shape_sync.cache_max_age = 33"
cluster_reload
new_secret() { [[ $(http_status "$url&secret=$second") == 200 ]]; }
check "a reload applies the new secret" wait_for 60 new_secret
expect_eq "the old secret gets 401 after the reload" 401 "$(http_status "$url&secret=$first")"
# an invalid value of another setting in the same reload must not drag the secret along
printf "shape_sync.cors_allowed_origins = 'not-an-origin'\n" | _cluster_as_pg tee -a "$SHAPE_SYNC_PGDATA/postgresql.conf" >/dev/null
cluster_reload
sleep 1
expect_eq "a refused setting leaves the secret in force" 200 "$(http_status "$url&secret=$second")"
_cluster_as_pg sed -i '/not-an-origin/d' "$SHAPE_SYNC_PGDATA/postgresql.conf"
cluster_reload

# clients with the official client's parameter order, right and wrong
curl -s -o /dev/null "$SHAPE_SYNC_URL/v1/shape?log=full&offset=-1&secret=$second&table=t"
curl -s -o /dev/null "$SHAPE_SYNC_URL/v1/shape?log=full&offset=-1&secret=${second}wrong&table=t"
sleep 1

for s in "$first" "$second"; do
	count=$(grep -c -- "$s" "$SHAPE_SYNC_LOG" || true)
	expect_eq "the server log never holds the secret ${s:0:6}..." 0 "$count"
done
expect_match "the refused origin list was logged (so the log was being written)" \
	'invalid value for parameter "shape_sync.cors_allowed_origins"' "$(cat "$SHAPE_SYNC_LOG")"
expect_match "the same reload logged the change of another setting, value and all" \
	'parameter "shape_sync.cache_max_age" changed to "33"' "$(cat "$SHAPE_SYNC_LOG")"
finish
