#!/usr/bin/env bash
#
# shape_sync behind nginx (issue 28, item 2), with examples/nginx/shape_sync.conf as
# documented, only its addresses, ports, paths and secret replaced: TLS and HTTP/2 to clients,
# the application's auth_request on every shape request, the secret added by nginx,
# proxy_cache with proxy_cache_lock, keys with the query string, cache-control honoured. The
# application is the example's server (examples/web/serve.mjs), whose /authorise wants a token.
#
# Here: HTTP/2 is spoken; a snapshot comes from the cache the second time (shape_sync sees one
# request), but not for a request the application refuses; the secret shows nowhere; every kind
# of answer (catch-up, 409, 400, an unknown table, a subset, a 503) is cached exactly when its
# cache-control allows it. test/web/nginx_proxy.mjs does the rest: the example's page of
# 12 live shapes stays live through nginx in Chromium, and is shown to stall without it (6
# requests reach shape_sync, and a change for a shape whose request is queued in the browser
# does not arrive); 1,000 live clients of one shape through nginx cause about one request to
# shape_sync per change, and every one of them sees it; a rotation behind nginx ends with the
# official client re-synced, not in a loop of 409s.
#
# NGINX_PROXY_KEEP_LOG=PATH keeps nginx's error log as PATH.
set -euo pipefail
source "$(dirname "$0")/../lib/lib.sh"
source "$(dirname "$0")/../../scripts/lib/nginx.sh"
init_work
root=$(cd "$here/../.." && pwd)
nginx_dir=$work/nginx
mkdir -p "$nginx_dir"

trap 'nginx_stop "$nginx_dir"; [[ -n ${NGINX_PROXY_KEEP_LOG:-} ]] && cp "$nginx_dir/error.log" "$NGINX_PROXY_KEEP_LOG"; cleanup_work' EXIT

if ! command -v nginx >/dev/null; then
	fail "nginx is not installed (scripts/install-deps.sh installs it)"
	finish
fi

# long polls that outlast the stall check; the proxy names the browsers; a secret, as any
# server that serves more than its own machine has
secret=nginx-test-secret-$RANDOM$RANDOM
token=app-session-$RANDOM
SHAPE_SYNC_EXTRA_CONF="shape_sync.long_poll_timeout = '60s'
shape_sync.trusted_proxies = '127.0.0.1'
shape_sync.secret = '$secret'" start_cluster_retrying 4860
tls_port=$(cluster_free_port 8440)
app_port=$(cluster_free_port 5180)

# the application: the example app's server, whose /authorise wants the token
(cd "$root/examples/web" && node build.mjs >/dev/null)
EXAMPLE_PORT=$app_port EXAMPLE_TOKEN=$token node "$root/examples/web/serve.mjs" >"$work/app.log" 2>&1 &
helpers+=($!)

# the documented configuration with this run's places
chmod 755 "$work"
check "nginx accepts the configuration and starts" \
	nginx_start "$nginx_dir" "$SHAPE_SYNC_HTTP_PORT" "$app_port" "$secret" "$tls_port"
proxy=https://localhost:$tls_port
up() { [[ $(curl -sk -o /dev/null -w '%{http_code}' "$proxy/v1/health") == 200 ]]; }
check "nginx passes requests on to shape_sync" wait_for 30 up
expect_eq "browsers get HTTP/2" 2 "$(curl -sk --http2 -o /dev/null -w '%{http_version}' "$proxy/v1/health")"

cluster_psql -q <<'SQL'
CREATE EXTENSION shape_sync;
CREATE TABLE px (id int PRIMARY KEY, v text);
ALTER TABLE px REPLICA IDENTITY FULL;
INSERT INTO px SELECT g, 'v' || g FROM generate_series(1, 50) g;
SQL
# shape requests that reached shape_sync, from its own counters
upstream_shape_requests() {
	curl -s "$SHAPE_SYNC_URL/metrics?secret=$secret" |
		awk '/^shape_sync_http_requests_total\{route="shape"/ { n += $2 } END { print n + 0 }'
}
# get NAME URL: the answer's status, headers and body in $work/NAME.{code,h,b}, through nginx
get() {
	curl -sk --http2 -H "Authorization: Bearer $token" -D "$work/$1.h" -o "$work/$1.b" \
		-w '%{http_code}' "$2" >"$work/$1.code"
}
cache_status() { header x-cache-status "$work/$1.h"; }

# a snapshot and its catch-up: the second request is the cache's
before=$(upstream_shape_requests)
get snap1 "$proxy/v1/shape?table=px&offset=-1"
expect_eq "the snapshot through nginx" 200 "$(cat "$work/snap1.code")"
expect_eq "the first is a miss" MISS "$(cache_status snap1)"
get snap2 "$proxy/v1/shape?table=px&offset=-1"
expect_eq "the second comes from the cache" HIT "$(cache_status snap2)"
check "with the same body" cmp -s "$work/snap1.b" "$work/snap2.b"
expect_eq "and shape_sync saw one request" 1 "$(($(upstream_shape_requests) - before))"
expect_eq "without the application's yes, a cached answer is refused too" 401 \
	"$(curl -sk -o /dev/null -w '%{http_code}' "$proxy/v1/shape?table=px&offset=-1")"
expect_eq "and so is a wrong token" 401 \
	"$(curl -sk -H 'Authorization: Bearer wrong' -o /dev/null -w '%{http_code}' "$proxy/v1/shape?table=px&offset=-1")"
check "the secret is in no answer's headers or body" \
	bash -c '! grep -qF "$1" "$2" "$3"' _ "$secret" "$work/snap1.h" "$work/snap1.b"
handle=$(header electric-handle "$work/snap1.h")
offset=$(header electric-offset "$work/snap1.h")

# Every kind of answer, twice: cached exactly when its cache-control says it may be (a 409
# names a handle that is gone for good: shape_sync lets it be cached).
cacheable() {  # cacheable CACHE_CONTROL: public with a max-age, and nothing that forbids it
	[[ $1 == *max-age=* && $1 != *no-store* && $1 != *no-cache* && $1 != *private* ]]
}
for case in \
	"catch-up|$proxy/v1/shape?table=px&handle=$handle&offset=$offset" \
	"a handle that is gone|$proxy/v1/shape?table=px&handle=1-2&offset=0_0" \
	"a bad where clause|$proxy/v1/shape?table=px&offset=-1&where=nonsense%20%3D" \
	"a table that is not there|$proxy/v1/shape?table=no_such_table&offset=-1" \
	"a subset|$proxy/v1/shape?table=px&handle=$handle&offset=$offset&subset__where=id%20%3C%205"; do
	what=${case%%|*} url=${case#*|}
	get first "$url"
	get second "$url"
	cc=$(header cache-control "$work/first.h")
	if cacheable "$cc"; then
		expect_eq "$what ($(cat "$work/first.code"), cache-control: $cc): cached" HIT "$(cache_status second)"
	else
		check "$what ($(cat "$work/first.code"), cache-control: ${cc:-none}): not cached" \
			test "$(cache_status second)" != HIT
	fi
done

# a 503 (no admission slot for a new shape): not cached either, and its retry-after passes
cluster_psql -q -c "ALTER SYSTEM SET shape_sync.max_concurrent_initial = 0" -c "SELECT pg_reload_conf()" >/dev/null
busy_url="$proxy/v1/shape?table=px&offset=-1&where=id%20%3E%2040"
busy() { get busy1 "$busy_url" && [[ $(cat "$work/busy1.code") == 503 ]]; }
check "with no admission slot for new shapes, nginx passes shape_sync's 503 on" wait_for 30 busy
get busy2 "$busy_url"
expect_eq "a 503 (cache-control: $(header cache-control "$work/busy1.h")) is not cached" "503 MISS" \
	"$(cat "$work/busy2.code") $(cache_status busy2)"
check "with its retry-after" test -n "$(header retry-after "$work/busy2.h")"
cluster_psql -q -c "ALTER SYSTEM RESET shape_sync.max_concurrent_initial" -c "SELECT pg_reload_conf()" >/dev/null
served() { get busy3 "$busy_url" && [[ $(cat "$work/busy3.code") == 200 ]]; }
check "once slots are back, the same request is served (no 503 was kept)" wait_for 30 served

# the browser, the 1,000 clients and the rotation
if [[ ! -d $root/test/node_modules/playwright-core || ! -d $root/examples/web/node_modules ]]; then
	fail "test/node_modules or examples/web/node_modules is missing (run scripts/install-deps.sh)"
	finish
fi
rc=
while IFS= read -r line; do
	case $line in
	'ok - '*) pass "${line#ok - }" ;;
	'not ok - '*) fail "${line#not ok - }" ;;
	'#nginx_proxy.mjs exit '*) rc=${line#\#nginx_proxy.mjs exit } ;;
	*) printf '%s\n' "$line" ;;
	esac
done < <(
	cd "$root/test" && PROXY_URL=$proxy NODE_TLS_REJECT_UNAUTHORIZED=0 \
		SHAPE_SYNC_SECRET=$secret EXAMPLE_TOKEN=$token \
		timeout -k 10 600 node web/nginx_proxy.mjs 2>&1
	echo "#nginx_proxy.mjs exit $?"
)
if [[ ${rc:-1} != 0 ]]; then
	fail "nginx_proxy.mjs exited ${rc:-?}"
fi
check "nginx logged no error" bash -c '! grep -E "\[(error|crit|alert|emerg)\]" "$1"' _ "$nginx_dir/error.log"
finish
