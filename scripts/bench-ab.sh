#!/usr/bin/env bash
# Compares two builds of one divan bench on a noisy machine: runs them in alternating
# rounds (A, B, A, B, ...) so both meet the same noise, and prints each round's figures and
# the median over the rounds for each build.
#
#   cargo bench -p ccare-server --bench gateway --no-run    # prints the binary's path
#   cp target/release/deps/gateway-<hash> /tmp/gateway-before
#   ... change the code, build again, copy it to /tmp/gateway-after ...
#   scripts/bench-ab.sh /tmp/gateway-before /tmp/gateway-after 5 --sample-count 200 first_byte
#
# Arguments: the two bench binaries, the number of rounds, then what each run is given
# (divan's options and row filter). A figure is every line of a run's output that reads
# `<label>: ... added <N> µs` (the gateway bench's summary lines, e.g. `gateway first byte
# (care on)`); each label gets its median per build. Runs use TMPDIR=/dev/shm unless
# TMPDIR is set, so durable commits cost their CPU, not the disk's fsync.
set -euo pipefail

if [[ $# -lt 3 ]]; then
    echo "usage: $0 <bench-binary-A> <bench-binary-B> <rounds> [bench args...]" >&2
    exit 2
fi
a="$1"
b="$2"
rounds="$3"
shift 3
export TMPDIR="${TMPDIR:-/dev/shm}"
results="$(mktemp)"
trap 'rm -f "$results"' EXIT

for round in $(seq 1 "$rounds"); do
    for side in A B; do
        binary="$a"
        [[ "$side" == B ]] && binary="$b"
        # `<label>: p50 ... added <N> µs ...` -> `<side> <label> <N>`.
        "$binary" --bench "$@" 2>&1 |
            sed -n 's/^\([^:]*\): .* added \(-\{0,1\}[0-9.]*\) µs.*$/\1|\2/p' |
            while IFS='|' read -r label added; do
                echo "round $round $side: $label added $added µs"
                echo "$side|$label|$added" >> "$results"
            done
    done
done

echo
echo "median over $rounds rounds (A: $a, B: $b):"
for side in A B; do
    cut -d'|' -f2 "$results" | sort -u | while read -r label; do
        median="$(awk -F'|' -v side="$side" -v label="$label" \
            '$1 == side && $2 == label { print $3 }' "$results" | sort -n |
            awk '{ values[NR] = $1 } END {
                if (NR == 0) { print "none"; exit }
                if (NR % 2) { print values[(NR + 1) / 2] }
                else { printf "%.1f\n", (values[NR / 2] + values[NR / 2 + 1]) / 2 } }')"
        echo "  $side $label: added $median µs"
    done
done
