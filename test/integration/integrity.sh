#!/usr/bin/env bash
#
# The randomized end-to-end integrity test of live mode (test/integrity/), run as one
# integration test, with its chaos events (schema changes, replica identity, TRUNCATE,
# prepared and big transactions, a terminated worker): one random seed per run, printed
# first; replay with SEED=<n>.  integrity_standby.sh adds a synchronous standby.
set -euo pipefail
exec "$(dirname "$0")/../integrity/run.sh" "$@"
