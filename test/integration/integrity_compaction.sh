#!/usr/bin/env bash
#
# The randomized end-to-end integrity test (test/integrity/) with aggressive compaction: a
# log is compacted once it grew by a fifth, so that clients resume from offsets before,
# inside and after compacted parts all the time, and must end equal to PostgreSQL with every
# transaction they read ending in last:true. One random seed per run, printed first; replay
# with SEED=<n> INTEGRITY_COMPACTION_FACTOR=1.2.
set -euo pipefail
INTEGRITY_COMPACTION_FACTOR=${INTEGRITY_COMPACTION_FACTOR:-1.2} exec "$(dirname "$0")/../integrity/run.sh" "$@"
