#!/usr/bin/env bash
#
# The randomized end-to-end integrity test of live mode (test/integrity/), run as one
# integration test, with its chaos events (schema changes, replica identity, TRUNCATE,
# prepared and big transactions, a terminated worker) and its restart phase (a fast or
# immediate restart of PostgreSQL, or a SIGKILL of the worker), across which no client may get
# a 409: only a table event that changes a shape explains one. Three random seeds per run,
# printed first, which take the three restart modes in turn; replay one with the line its run
# printed (SEED=<n> INTEGRITY_RESTART_MODE=<mode>), or give seeds as arguments.  integrity_standby.sh adds a synchronous standby.
# Each seed writes for 16 s and 7 s after the restart (run.sh's defaults).
set -euo pipefail
if (($# == 0)) && [[ -z ${SEED:-} ]]; then
	set -- $(for _ in 1 2 3; do od -An -N4 -tu4 /dev/urandom | tr -d ' '; done)
fi
exec "$(dirname "$0")/../integrity/run.sh" "$@"
