#!/usr/bin/env bash
#
# Clients behind a reverse proxy (shape_sync.trusted_proxies).  The proxy is
# played by curl from 127.0.0.1 with an X-Forwarded-For header; other
# loopback addresses are peers that are not trusted.
#
#   - from a trusted proxy, each forwarded client has its own
#     max_new_shapes_per_client: one that used up its quota leaves another's
#     and the proxy's own untouched;
#   - from a peer that is not trusted, X-Forwarded-For is ignored: every
#     request counts against the peer, whatever the header names;
#   - the list is reloaded (SIGHUP): once 127.0.0.1 is no longer trusted, its
#     X-Forwarded-For is ignored too;
#   - without a secret (loopback-only), a request a trusted proxy forwards
#     is not a loopback client (403), while the proxy's own request is.
#
# Before: the limit counted the TCP peer only, so the second forwarded
# client got 503 once the first had used up "its" quota.
set -euo pipefail
source "$(dirname "$0")/../lib/lib.sh"
init_work

SHAPE_SYNC_EXTRA_CONF="shape_sync.max_new_shapes_per_client = 3
shape_sync.secret = 'k'
shape_sync.trusted_proxies = '127.0.0.1, 2001:db8::/32'" \
	start_cluster_retrying "${SHAPE_SYNC_HTTP_PORT_FROM:-4580}"
cluster_psql <<'SQL'
CREATE EXTENSION shape_sync;
CREATE TABLE t (id int PRIMARY KEY, v text);
ALTER TABLE t REPLICA IDENTITY FULL;
INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 100) g;
SQL
base="http://127.0.0.1:${SHAPE_SYNC_URL##*:}/v1/shape?table=t"
# new FROM XFF ID [SECRET]: status of a request for a new shape (where id = ID) from address
# FROM, with X-Forwarded-For XFF (none when empty); body in $work/b
new() {
	local xff=()
	[[ -n $2 ]] && xff=(-H "X-Forwarded-For: $2")
	curl -s --interface "$1" "${xff[@]}" -o "$work/b" -w '%{http_code}' \
		"$base&where=id%20%3D%20$3&offset=-1${4-&secret=k}"
}

# one forwarded client uses up its quota
codes=()
for i in 1 2 3 4; do codes+=("$(new 127.0.0.1 203.0.113.1 "$i")"); done
expect_eq "a forwarded client gets its 3 new shapes, then 503" "200 200 200 503" "${codes[*]}"
expect_match "naming the limit" 'max_new_shapes_per_client' "$(cat "$work/b")"
# another behind the same proxy still has its own
expect_eq "another forwarded client is served" 200 "$(new 127.0.0.1 203.0.113.2 5)"
expect_eq "... also when the proxy appends itself after it" 200 \
	"$(new 127.0.0.1 '198.51.100.9, 203.0.113.3, 127.0.0.1' 6)"
expect_eq "... and the proxy's own request too" 200 "$(new 127.0.0.1 '' 7)"
expect_eq "the first is still refused" 503 "$(new 127.0.0.1 203.0.113.1 8)"

# a peer that is not trusted: the header is ignored, all count against 127.0.0.2
codes=()
for i in 1 2 3 4; do codes+=("$(new 127.0.0.2 "203.0.113.$((10 + i))" "$((10 + i))")"); done
expect_eq "from an untrusted peer every X-Forwarded-For is one client" "200 200 200 503" "${codes[*]}"

# reload: 127.0.0.1 no longer trusted, and no secret (loopback-only)
cluster_psql -c "ALTER SYSTEM SET shape_sync.trusted_proxies = '192.0.2.1'" \
	-c "ALTER SYSTEM SET shape_sync.secret = ''"
cluster_reload
applied() { [[ $(new 127.0.0.1 203.0.113.1 1 '') == 200 ]]; }
check "the reload applies (a known shape, no secret, an ignored header)" wait_for 60 applied
# 127.0.0.1 made one shape of its own above: two more, whatever the header says
codes=()
for i in 1 2 3; do codes+=("$(new 127.0.0.1 "203.0.113.$((20 + i))" "$((20 + i))" '')"); done
expect_eq "once untrusted, its X-Forwarded-For is ignored" "200 200 503" "${codes[*]}"

# trusted again, still loopback-only: a forwarded request is not a loopback client
cluster_psql -c "ALTER SYSTEM SET shape_sync.trusted_proxies = '127.0.0.1'"
cluster_reload
refused() { [[ $(new 127.0.0.1 203.0.113.1 1 '') == 403 ]]; }
check "loopback-only: a forwarded request gets 403" wait_for 60 refused
expect_match "saying loopback clients only are served" 'loopback clients only' "$(cat "$work/b")"
expect_eq "... even one that names a loopback address" 403 "$(new 127.0.0.1 127.0.0.1 1 '')"
expect_eq "the proxy's own request is served" 200 "$(new 127.0.0.1 '' 1 '')"
expect_eq "an untrusted loopback peer's header changes nothing" 200 "$(new 127.0.0.2 203.0.113.1 1 '')"

finish
