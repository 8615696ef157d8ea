#!/usr/bin/env bash
#
# The randomized end-to-end integrity test (test/integrity/) with a synchronous standby that
# its chaos loop stops and starts, so that commits stall while shapes are made: one random
# seed per run, printed first; replay with SEED=<n> INTEGRITY_SYNC_STANDBY=1.
set -euo pipefail
INTEGRITY_SYNC_STANDBY=1 exec "$(dirname "$0")/../integrity/run.sh" "$@"
