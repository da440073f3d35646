#!/usr/bin/env bash
# test-stages.sh: make test's stages, inside with-redis.sh. The unit tests
# run with the race detector on; then, on a machine they no longer load,
# the fleet and chaos tests, which measure what a fleet admits under load.
# The simulator's seeds run from the start to the end at the idle
# scheduling class (chrt --idle, and nice 19): it
# shares nothing between seeds and only uses the CPU the others leave, so
# it does not disturb what they measure, and its output is printed last.
# Make passes GO, TESTFLAGS, UNIT_PKGS, SIM_PKG, SIM_SEEDS, FLEETFLAGS and
# FLEET_PKGS.
set -uo pipefail

sim_out=$(mktemp)
sim_pid=""
cleanup() {
	if [ -n "$sim_pid" ] && kill -0 "$sim_pid" 2>/dev/null; then
		kill -- "$sim_pid" 2>/dev/null
		wait "$sim_pid" 2>/dev/null
	fi
	rm -f "$sim_out"
}
trap cleanup EXIT

# (niced too: /proc/stat counts its time as nice, which the fleet tests'
# machine figure leaves out)
idle=(nice -n 19)
if command -v chrt >/dev/null 2>&1 && chrt --idle 0 true 2>/dev/null; then
	idle=(nice -n 19 chrt --idle 0)
fi
"${idle[@]}" $GO test -timeout 15m "$SIM_PKG" -args -seeds "$SIM_SEEDS" >"$sim_out" 2>&1 &
sim_pid=$!

# shellcheck disable=SC2086 # the flags and packages are lists
$GO test $TESTFLAGS $UNIT_PKGS
unit=$?
fleet=1
if [ "$unit" -eq 0 ]; then
	# shellcheck disable=SC2086
	$GO test $FLEETFLAGS $FLEET_PKGS
	fleet=$?
else
	echo "test-stages: the unit tests failed: the fleet tests do not run" >&2
fi

wait "$sim_pid"
sim=$?
sim_pid=""
cat "$sim_out"

if [ "$unit" -ne 0 ] || [ "$fleet" -ne 0 ] || [ "$sim" -ne 0 ]; then
	echo "test-stages: unit tests exit $unit, fleet tests exit $fleet, simulator exit $sim" >&2
	exit 1
fi
