#!/usr/bin/env bash
#
# The randomized end-to-end integrity test (test/integrity/) with 300 more shapes on one
# table that the equality index routes (`n = k`, `n IN (k, j)`, `m = k`, `n = k AND m > j`;
# src/pg/worker/equality_index.c), each followed by a raw materializer, beside the usual shapes that
# are evaluated on every change, under the usual writers and chaos events.  Every client must
# end equal to PostgreSQL.  One random seed per run, printed first; replay with SEED=<n>
# INTEGRITY_EQUALITY_SHAPES=300.
set -euo pipefail
INTEGRITY_EQUALITY_SHAPES=${INTEGRITY_EQUALITY_SHAPES:-300} exec "$(dirname "$0")/../integrity/run.sh" "$@"
