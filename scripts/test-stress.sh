#!/usr/bin/env bash
# test-stress.sh — run the timing-sensitive packages while a CPU hog keeps
# every core busy, RUNS times in a row, and stop at the first failure.
#
# The tests must pass on a loaded 2-core machine: their deadlines come from
# the injectable clock or the lease maths, never from how fast a goroutine
# happens to be scheduled. This script is how that is checked.
#
# Usage: scripts/test-stress.sh                  # 5 runs of the default packages
#        RUNS=10 scripts/test-stress.sh
#        HOGS=4 scripts/test-stress.sh ./etcdstore/ ./zkstore/
# Environment: RUNS (default 5), HOGS (busy loops, default 2 per core),
# GO (default go), GOTESTFLAGS (default -race -count=1 -p 1 -parallel 4
# -timeout 10m, as make test runs them).
set -euo pipefail

log() { printf 'test-stress: %s\n' "$*" >&2; }

RUNS=${RUNS:-5}
GO=${GO:-go}
GOTESTFLAGS=${GOTESTFLAGS:--race -count=1 -p 1 -parallel 4 -timeout 10m}
cores=$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2)
HOGS=${HOGS:-$((2 * cores))}

# The packages whose tests check timings: the Locker core, the conformance
# suite on the stores with their own lease clocks, and the scheduler.
pkgs=("$@")
if [[ ${#pkgs[@]} -eq 0 ]]; then
	pkgs=(. ./memstore/ ./redisstore/ ./redlock/ ./etcdstore/ ./zkstore/ ./schedule/)
fi

[[ $RUNS =~ ^[1-9][0-9]*$ ]] || { log "error: RUNS must be a positive integer, got '$RUNS'"; exit 2; }
[[ $HOGS =~ ^[0-9]+$ ]] || { log "error: HOGS must be a non-negative integer, got '$HOGS'"; exit 2; }

# Build the test binaries first, without the hog, so that the runs time the
# tests and not the compiler.
log "building ${pkgs[*]}"
# shellcheck disable=SC2086
$GO test $GOTESTFLAGS -run '^$' "${pkgs[@]}" >/dev/null

hogs=()
stop_hogs() {
	local pid
	for pid in "${hogs[@]}"; do
		kill "$pid" 2>/dev/null || true
	done
	for pid in "${hogs[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	hogs=()
}
trap stop_hogs EXIT
trap 'exit 130' INT TERM

for ((i = 0; i < HOGS; i++)); do
	( trap - EXIT INT TERM; while :; do :; done ) &
	hogs+=($!)
done
log "CPU hog: $HOGS busy loops on $cores cores (pids ${hogs[*]})"

for ((run = 1; run <= RUNS; run++)); do
	start=$SECONDS
	log "run $run/$RUNS: go test $GOTESTFLAGS ${pkgs[*]}"
	# shellcheck disable=SC2086
	if ! $GO test $GOTESTFLAGS "${pkgs[@]}"; then
		log "FAIL in run $run/$RUNS after $((SECONDS - start))s (load: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null))"
		exit 1
	fi
	log "run $run/$RUNS passed in $((SECONDS - start))s (load: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null))"
done
log "all $RUNS runs passed under the CPU hog"
