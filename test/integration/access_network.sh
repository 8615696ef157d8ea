#!/usr/bin/env bash
#
# Who may reach the shapes from another address.  A client in a network
# namespace of this test's own (a veth pair, 198.18.77.0/30, the benchmarking
# range; nothing leaves the machine) talks to the server on the host side:
#
#   - no secret, insecure off: it gets 403, a loopback client is served, and the
#     start is logged as loopback-only;
#   - a secret: it needs the secret (401 without, 200 with);
#   - insecure on, no secret: it is served, and a WARNING says so.
#
# Needs root (ip netns); CI runs as root.  Elsewhere it says so and fails,
# rather than pass without having looked.
set -euo pipefail
source "$(dirname "$0")/../lib/lib.sh"

if [[ $(id -u) -ne 0 ]] || ! command -v ip >/dev/null 2>&1; then
	echo "not ok - this test needs root and ip(8) for its network namespace"
	exit 1
fi

ns=ss_peer_$$
host_if=ssh$$
peer_if=ssp$$
host_ip=198.18.77.1
peer_ip=198.18.77.2

cleanup() {
	cluster_stop
	ip link del "$host_if" 2>/dev/null || true
	ip netns del "$ns" 2>/dev/null || true
}
trap cleanup EXIT

ip netns add "$ns"
ip link add "$host_if" type veth peer name "$peer_if"
ip link set "$peer_if" netns "$ns"
ip addr add "$host_ip/30" dev "$host_if"
ip link set "$host_if" up
ip netns exec "$ns" ip addr add "$peer_ip/30" dev "$peer_if"
ip netns exec "$ns" ip link set "$peer_if" up
ip netns exec "$ns" ip link set lo up

SHAPE_SYNC_EXTRA_CONF="shape_sync.listen_addresses = 'localhost, $host_ip'" \
	cluster_start "$(cluster_free_port 4370)"
cluster_psql <<'SQL'
CREATE TABLE t (id int PRIMARY KEY, v text);
ALTER TABLE t REPLICA IDENTITY FULL;
INSERT INTO t VALUES (1, 'a');
SQL
remote="http://$host_ip:$SHAPE_SYNC_HTTP_PORT/v1/shape?table=t&offset=-1"
remote_status() { ip netns exec "$ns" curl -s -o "$1" -w '%{http_code}' --max-time 10 "$2"; }
body=$(mktemp)

expect_eq "the peer is not on loopback: it reaches the server" 200 \
	"$(remote_status /dev/null "http://$host_ip:$SHAPE_SYNC_HTTP_PORT/v1/health")"
expect_eq "no secret: a client of another address gets 403" 403 "$(remote_status "$body" "$remote")"
expect_match "and is told why" 'loopback clients only' "$(cat "$body")"
expect_eq "... even with a secret parameter" 403 "$(remote_status /dev/null "$remote&secret=x")"
expect_eq "a loopback client is served" 200 "$(http_status "$SHAPE_SYNC_URL/v1/shape?table=t&offset=-1")"
expect_match "the start says loopback clients only are served" \
	'LOG:  shape_sync serves loopback clients only' "$(cat "$SHAPE_SYNC_LOG")"

cluster_psql -c "ALTER SYSTEM SET shape_sync.secret = 'net-secret-1'"
cluster_reload
secret_on() { [[ $(remote_status /dev/null "$remote") == 401 ]]; }
check "with a secret, a client of another address without it gets 401" wait_for 60 secret_on
expect_eq "... and with it 200" 200 "$(remote_status /dev/null "$remote&secret=net-secret-1")"
expect_eq "a loopback client needs it too" 401 "$(http_status "$SHAPE_SYNC_URL/v1/shape?table=t&offset=-1")"

cluster_psql -c "ALTER SYSTEM RESET shape_sync.secret" -c "ALTER SYSTEM SET shape_sync.insecure = on"
cluster_reload
insecure_on() { [[ $(remote_status /dev/null "$remote") == 200 ]]; }
check "insecure and no secret: a client of another address is served" wait_for 60 insecure_on
expect_match "and a WARNING says every client is served without a secret" \
	'WARNING:  shape_sync serves every client without a secret' "$(cat "$SHAPE_SYNC_LOG")"

cluster_psql -c "ALTER SYSTEM RESET shape_sync.insecure"
cluster_reload
back_to_loopback() { [[ $(remote_status /dev/null "$remote") == 403 ]]; }
check "insecure off again: back to loopback only" wait_for 60 back_to_loopback
rm -f "$body"
finish
