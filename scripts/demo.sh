#!/usr/bin/env bash
#
# scripts/demo.sh: build and install shape_sync, start a throwaway PostgreSQL 15 cluster that
# serves the Shape API on http://localhost:3000 with sample data (scripts/sample-data.sql), and
# keep it running until Ctrl-C (or SIGTERM); then everything is torn down.
#
#   ./scripts/demo.sh [--example]
#
#   --example              also build the example web app (examples/web) and serve it on
#                          http://localhost:$EXAMPLE_PORT (default 5173), another origin
#   SHAPE_SYNC_DEMO_PORT   HTTP port (default 3000)
#   SHAPE_SYNC_SKIP_APT=1  do not touch apt (see scripts/install-deps.sh)
set -euo pipefail

EXAMPLE=0
case "${1:-}" in
	--example) EXAMPLE=1 ;;
	"") ;;
	*) echo "usage: $0 [--example]" >&2; exit 2 ;;
esac

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
# shellcheck source=scripts/lib/cluster.sh
source "$ROOT/scripts/lib/cluster.sh"

HTTP_PORT=${SHAPE_SYNC_DEMO_PORT:-3000}
PG_CONFIG=${PG_CONFIG:-pg_config}
export PG_CONFIG
SUDO=()
if [[ $(id -u) -ne 0 ]]; then
	SUDO=(sudo)
fi
SLEEP_PID=
EXAMPLE_PID=

cleanup() {
	local rc=$?
	trap - INT TERM
	if [[ -n $SLEEP_PID ]]; then
		kill "$SLEEP_PID" 2>/dev/null || true
	fi
	if [[ -n $EXAMPLE_PID ]]; then
		kill "$EXAMPLE_PID" 2>/dev/null || true
	fi
	if [[ -n ${SHAPE_SYNC_PGDATA:-} ]]; then
		echo
		echo "stopping the cluster..."
	fi
	cluster_stop
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

bash "$ROOT/scripts/install-deps.sh"

echo "==> make"
make
echo "==> make install"
"${SUDO[@]}" make install PG_CONFIG="$(command -v "$PG_CONFIG")"

if cluster_port_in_use "$HTTP_PORT"; then
	echo "error: port $HTTP_PORT is already in use; stop whatever listens there" >&2
	if command -v ss >/dev/null 2>&1; then
		ss -Htlnp "sport = :$HTTP_PORT" >&2 || true
	fi
	echo "(or pick another port: SHAPE_SYNC_DEMO_PORT=3001 $0)" >&2
	exit 1
fi

echo "==> starting PostgreSQL with shape_sync on port $HTTP_PORT"
# the server's defaults: loopback clients only (no secret), no DDL on a client's say-so
SHAPE_SYNC_MANAGE_REPLICA_IDENTITY=off cluster_start "$HTTP_PORT"
cluster_psql -c 'CREATE EXTENSION shape_sync;'
cluster_psql -f "$ROOT/scripts/sample-data.sql"

PSQL="psql -h $PGHOST -p $PGPORT -U postgres postgres"
cat <<MSG

shape_sync is serving $SHAPE_SYNC_URL (tables: items, 300 rows; users, 200 rows)

  # the initial snapshot of a shape (note the electric-handle and electric-offset headers)
  curl -i '$SHAPE_SYNC_URL/v1/shape?table=items&offset=-1'

  # a where clause and a column list
  curl -i -G '$SHAPE_SYNC_URL/v1/shape' --data-urlencode 'table=items' --data-urlencode 'offset=-1' \\
       --data-urlencode 'where=done = false AND id < 20' --data-urlencode 'columns=id,title'
  curl -i '$SHAPE_SYNC_URL/v1/shape?table=users&offset=-1'

  # follow live changes: use the handle and offset from the previous response's headers
  curl -i '$SHAPE_SYNC_URL/v1/shape?table=items&handle=HANDLE&offset=OFFSET&live=true'

  # and make one, in another terminal
  $PSQL -c "INSERT INTO items (title) VALUES ('hello')"

  # a table of your own needs REPLICA IDENTITY FULL first: the server runs no DDL
  $PSQL -c "CREATE TABLE notes (id int PRIMARY KEY, body text)" \\
        -c "ALTER TABLE notes REPLICA IDENTITY FULL"

  # only loopback clients are served until shape_sync.secret is set (see docs/security.md)

  # what the server holds
  $PSQL -c 'SELECT * FROM shape_sync.shapes'
  curl -s '$SHAPE_SYNC_URL/v1/health'

  # the operator's status page, in a browser on this machine
  $SHAPE_SYNC_URL/

server log: $SHAPE_SYNC_LOG
MSG

if ((EXAMPLE)); then
	echo "==> building the example web app (examples/web)"
	(cd "$ROOT/examples/web" && node build.mjs)
	SHAPE_SYNC_URL=$SHAPE_SYNC_URL node "$ROOT/examples/web/serve.mjs" &
	EXAMPLE_PID=$!
	sleep 1
fi
echo "Press Ctrl-C to stop and remove everything."

# From here on, Ctrl-C is the normal way to stop: exit 0.
trap 'exit 0' INT TERM
while :; do
	sleep 3600 &
	SLEEP_PID=$!
	wait "$SLEEP_PID" || true
	SLEEP_PID=
done
