#!/usr/bin/env bash
#
# The randomized end-to-end integrity test of live mode (test/integrity/), run as one
# integration test: one random seed per run, printed first; replay with SEED=<n>.
set -euo pipefail
exec "$(dirname "$0")/../integrity/run.sh" "$@"
