#!/usr/bin/env bash
# test-stages.sh: make test's stages, inside with-redis.sh. The unit tests
# (race detector on) and the simulator's seeds run side by side: the unit
# tests wait on sockets and timers for half their time, and the simulator,
# which shares nothing between seeds, uses what they leave of the CPU. Its
# output is held back and printed after theirs. Then, on a quiet machine,
# the fleet and chaos tests, which measure what a fleet admits under load.
# Make passes GO, TESTFLAGS, UNIT_PKGS, SIM_PKG, SIM_SEEDS, FLEETFLAGS and
# FLEET_PKGS.
set -uo pipefail

sim_out=$(mktemp)
trap 'rm -f "$sim_out"' EXIT

$GO test -timeout 8m "$SIM_PKG" -args -seeds "$SIM_SEEDS" >"$sim_out" 2>&1 &
sim_pid=$!

# shellcheck disable=SC2086 # the flags and packages are lists
$GO test $TESTFLAGS $UNIT_PKGS
unit=$?

wait "$sim_pid"
sim=$?
cat "$sim_out"

if [ "$unit" -ne 0 ] || [ "$sim" -ne 0 ]; then
	echo "test-stages: unit tests exit $unit, simulator exit $sim: the fleet tests do not run" >&2
	exit 1
fi

# shellcheck disable=SC2086
exec $GO test $FLEETFLAGS $FLEET_PKGS
