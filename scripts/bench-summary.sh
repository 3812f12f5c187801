#!/usr/bin/env bash
# Runs every benchmark of the workspace and prints one table of issue 14's figures (and issue
# 17's gateway figures, row 7) with their targets, so anyone can re-check them:
#
#   scripts/bench-summary.sh              # every bench of every crate
#   scripts/bench-summary.sh ccare-llm    # one crate's benches only (`llm` works too)
#
# The benches are found from each crate's `[[bench]]` entries in `crates/*/Cargo.toml`.
# Each runs as `cargo bench -p <crate> --bench <name>`; its full output is kept in
# `target/bench-summary/<crate>.<name>.txt` (override the folder with BENCH_SUMMARY_DIR).
# Figures are read from divan's median column (time per iteration, and the
# throughput line under it); every ratio compares rows of the same bench run. A figure
# whose bench row does not exist yet prints "not measured yet"; one whose crate was not
# run (a crate argument was given) prints "not run". The exit status is 0 when every
# bench ran, whatever the figures say, and 1 when a bench failed to build or run.
#
# Machines are noisy: run it when nothing else is building, and re-run to confirm.
set -euo pipefail

cd "$(dirname "$0")/.."
only="${1:-}"
if [[ -n "$only" && "$only" != ccare-* && "$only" != ccare ]]; then
    only="ccare-$only"
fi
out="${BENCH_SUMMARY_DIR:-target/bench-summary}"
mkdir -p "$out"

# Every `<crate> <bench>` pair, from the [[bench]] entries.
benches=()
for manifest in crates/*/Cargo.toml; do
    crate="$(sed -n 's/^name = "\(.*\)"$/\1/p' "$manifest" | head -n 1)"
    [[ -n "$only" && "$crate" != "$only" ]] && continue
    while read -r bench; do
        [[ -n "$bench" ]] && benches+=("$crate $bench")
    done < <(awk '/^\[\[bench\]\]/ { inbench = 1; next }
                  /^\[/ { inbench = 0 }
                  inbench && /^name *=/ { gsub(/.*= *"|".*/, ""); print }' "$manifest")
done
if [[ ${#benches[@]} -eq 0 ]]; then
    echo "bench-summary: no benches found${only:+ for $only}" >&2
    exit 2
fi

status=0
ran=()
for entry in "${benches[@]}"; do
    read -r crate bench <<<"$entry"
    log="$out/$crate.$bench.txt"
    echo "bench-summary: cargo bench -p $crate --bench $bench  (output: $log)" >&2
    if cargo bench -p "$crate" --bench "$bench" >"$log" 2>&1; then
        ran+=("$crate/$bench")
    else
        echo "bench-summary: cargo bench -p $crate --bench $bench failed; see $log" >&2
        status=1
    fi
done

# The throughput figures depend on the cores the benches shared with their own client
# and fake upstream; say how many there were.
echo "cores: $(nproc)"
RAN="${ran[*]:-}" OUT="$out" perl -CSD -Mutf8 -e '
use strict;
use warnings;

my %ran = map { $_ => 1 } split " ", $ENV{RAN};
my $out = $ENV{OUT};

# Seconds in a divan time, items (or bytes) per second in a divan rate.
my %time_unit = (ns => 1e-9, "µs" => 1e-6, "us" => 1e-6, ms => 1e-3, s => 1);
my %rate_prefix = ("" => 1, K => 1e3, M => 1e6, G => 1e9, T => 1e12,
                   Ki => 1024, Mi => 1024**2, Gi => 1024**3);
sub time_of { my ($text) = @_;
    return $text =~ /^\s*([\d.]+)\s*(ns|µs|us|ms|s)\s*$/ ? $1 * $time_unit{$2} : undef }
sub rate_of { my ($text) = @_;
    return $text =~ /^\s*([\d.]+)\s*(Ki|Mi|Gi|K|M|G|T|)(?:item|B)\/s\s*$/
        ? $1 * $rate_prefix{$2} : undef }
sub count_of { my ($text) = @_;
    return $text =~ /^\s*([\d.]+)\s*$/ ? $1 : undef }

# "crate/bench/row[/child]" => { time, rate, allocs }; "crate/bench:memory" => ratio.
my %rows;
for my $key (keys %ran) {
    my ($crate, $bench) = split m{/}, $key;
    open my $log, "<", "$out/$crate.$bench.txt" or next;
    my (@path, $last, $want_alloc, $profiled);
    my @bench_rows;
    while (my $line = <$log>) {
        chomp $line;
        if ($line =~ /= ([\d.]+)x JSON/) { $rows{"$key:memory"} = $1 }
        my @fields = split /│/, $line, -1;
        if ($line =~ /^((?:[│ ] {2})*)(?:├─|╰─) (\S+)/) {
            my ($depth, $name) = (length($1) / 3, $2);
            $#path = $depth - 1;
            push @path, $name;
            $last = undef;
            next if @fields < 5;
            my $time = time_of($fields[-4]);
            next unless defined $time;
            $last = $rows{"$key/" . join("/", @path)} = { time => $time };
            push @bench_rows, $last;
            $want_alloc = 0;
        } elsif (defined $last && @fields >= 5) {
            if ($line =~ /\balloc:/) { $want_alloc = 1; $profiled = 1; next }
            if ($want_alloc) {
                my $count = count_of($fields[-4]);
                $last->{allocs} = $count if defined $count;
                $want_alloc = 0;
                next;
            }
            my $rate = rate_of($fields[-4]);
            $last->{rate} //= $rate if defined $rate;
        }
    }
    # divan prints no alloc lines for a row that allocated nothing: in a bench that
    # counts allocations, such a row made 0.
    if ($profiled) { $_->{allocs} //= 0 for @bench_rows }
}

sub row { my ($key) = @_; return $rows{$key} }
sub show_time { my ($s) = @_;
    return $s >= 1 ? sprintf("%.2f s", $s) : $s >= 1e-3 ? sprintf("%.2f ms", $s * 1e3)
         : $s >= 1e-6 ? sprintf("%.2f µs", $s * 1e6) : sprintf("%.1f ns", $s * 1e9) }

# Each figure: label, how to measure it, the rows it reads, the comparison, the target.
#   time R            median time per iteration of row R
#   per_item R        time per counted item (divan throughput line), in seconds
#   mbps R            bytes per second of row R, in MB/s
#   ratio A B         median time of A / median time of B
#   diff A B          median time of A - median time of B (an added latency)
#   allocs_per_item R allocations per counted item (divan AllocProfiler)
#   memory B          the "= N.NNx JSON" line bench B prints
my @figures = (
    ["1 care boundary, 10,000 messages",        "time",     ["ccare-care/plan/boundary_10k"], "<=", 1e-3],
    ["1 boundary 10,000 / 1,000 messages",      "ratio",    ["ccare-care/plan/boundary_10k", "ccare-care/plan/boundary_1k"], "<=", 1.5],
    ["1 plan a maintenance action, 10,000",     "time",     ["ccare-care/plan/plan_10k"], "<=", 10e-3],
    ["2 boundary, 1,000 / 1 other sessions",    "ratio",    ["ccare-care/plan/boundary_1000_sessions", "ccare-care/plan/boundary_1_session"], "<=", 1.2],
    ["3 stream watch per 1-4 char delta",       "per_item", ["ccare-watch/watch/reply_20000_deltas"], "<=", 33e-9],
    ["3 watch delta after 1 MB / after 1 KB",   "ratio",    ["ccare-watch/watch/deltas_after_1mb", "ccare-watch/watch/deltas_after_1kb"], "<=", 1.2],
    ["3 watch allocations per delta (steady)",  "allocs_per_item", ["ccare-watch/watch/deltas_after_1mb"], "<=", 0],
    ["4 durable appends / raw SQLite (20k)",    "ratio",    ["ccare-session/session/raw_sqlite_20k", "ccare-session/session/durable_append_20k"], ">=", 0.6],
    ["4 single durable append / raw commit",    "ratio",    ["ccare-session/session/single_durable_append", "ccare-session/session/raw_sqlite_single"], "<=", 1.3],
    ["5 open 100,000 events + model view",      "time",     ["ccare-session/session/open_100k"], "<=", 300e-3],
    ["5 open session memory / JSON size",       "memory",   ["ccare-session/memory"], "<=", 3],
    ["6 adapter per chunk (decode+assemble)",   "per_item", ["ccare-llm/adapter/per_chunk"], "<=", 2e-6],
    ["6 call per chunk (task hand-off incl.)",  "per_item", ["ccare-llm/adapter/call_per_chunk"], "<=", 2e-6],
    ["6 SSE parse, 4 KiB pieces",               "mbps",     ["ccare-llm/sse/feed_4k_pieces"], ">=", 100],
    ["6 adapter stream (parse+decode+assemble)","mbps",     ["ccare-llm/adapter/stream_bytes"], ">=", 100],
    ["7 gateway added first-byte latency",      "diff",     ["ccare-server/gateway/gateway_first_byte", "ccare-server/gateway/direct_first_byte"], "<=", 1e-3],
    ["7 gateway added first-byte latency, care off", "diff", ["ccare-server/gateway/gateway_first_byte_care_off", "ccare-server/gateway/direct_first_byte"], "<=", 1e-3],
    ["7 gateway added first byte, continuing",  "diff",     ["ccare-server/gateway/gateway_continuing_first_byte", "ccare-server/gateway/direct_continuing_first_byte"], "<=", 1e-3],
    ["7 same, care off",                        "diff",     ["ccare-server/gateway/gateway_continuing_first_byte_care_off", "ccare-server/gateway/direct_continuing_first_byte"], "<=", 1e-3],
    ["7 gateway burst throughput / direct (c=20, fast model)", "ratio", ["ccare-server/gateway/direct_paced_c20", "ccare-server/gateway/gateway_paced_c20"], ">=", 0.9],
    ["7 same, care off",                        "ratio",    ["ccare-server/gateway/direct_paced_c20", "ccare-server/gateway/gateway_paced_c20_care_off"], ">=", 0.9],
    ["7 gateway burst throughput / direct (c=20, hosted model)", "ratio", ["ccare-server/gateway/direct_real_pace_c20", "ccare-server/gateway/gateway_real_pace_c20"], ">=", 0.9],
    ["7 same, care off",                        "ratio",    ["ccare-server/gateway/direct_real_pace_c20", "ccare-server/gateway/gateway_real_pace_c20_care_off"], ">=", 0.9],
    ["7 gateway burst throughput / direct (c=20, continuing, fast model)", "ratio", ["ccare-server/gateway/direct_continuing_c20", "ccare-server/gateway/gateway_continuing_c20"], ">=", 0.9],
    ["7 same, care off",                        "ratio",    ["ccare-server/gateway/direct_continuing_c20", "ccare-server/gateway/gateway_continuing_c20_care_off"], ">=", 0.9],
    ["7 gateway sustained throughput / direct (c=20 closed loop, fast model)", "ratio", ["ccare-server/gateway/direct_sustained_c20", "ccare-server/gateway/gateway_sustained_c20"], ">=", 0.9],
    ["7 same, care off",                        "ratio",    ["ccare-server/gateway/direct_sustained_c20", "ccare-server/gateway/gateway_sustained_c20_care_off"], ">=", 0.9],
    ["7 same, continuing conversations",        "ratio",    ["ccare-server/gateway/direct_sustained_continuing_c20", "ccare-server/gateway/gateway_sustained_continuing_c20"], ">=", 0.9],
    ["7 same, continuing, care off",            "ratio",    ["ccare-server/gateway/direct_sustained_continuing_c20", "ccare-server/gateway/gateway_sustained_continuing_c20_care_off"], ">=", 0.9],
    ["7 gateway throughput / direct (c=20, instant upstream: own cost)", "ratio", ["ccare-server/gateway/direct_throughput_c20", "ccare-server/gateway/gateway_throughput_c20"], ">=", 0.9],
    ["7 same, care off",                        "ratio",    ["ccare-server/gateway/direct_throughput_c20", "ccare-server/gateway/gateway_throughput_c20_care_off"], ">=", 0.9],
);

sub bench_of { my ($key) = @_; my @parts = split m{/}, $key; return "$parts[0]/$parts[1]" }

printf "%-48s %-18s %-12s %s\n", "figure", "measured", "target", "ok?";
printf "%-48s %-18s %-12s %s\n", "-" x 48, "-" x 18, "-" x 12, "---";
for my $figure (@figures) {
    my ($label, $kind, $keys, $cmp, $target) = @$figure;
    my ($value, $shown, $target_shown);
    my @benches = map { bench_of($_) } @$keys;
    if (grep { !$ran{$_} } @benches) {
        $shown = "not run";
    } elsif ($kind eq "memory") {
        $value = $rows{"$keys->[0]:memory"};
        $shown = sprintf("%.2fx", $value) if defined $value;
    } elsif ($kind eq "ratio") {
        my ($a, $b) = map { row($_) } @$keys;
        if ($a && $b && $b->{time} > 0) {
            $value = $a->{time} / $b->{time};
            $shown = sprintf("%.2f", $value);
        }
    } elsif ($kind eq "diff") {
        my ($a, $b) = map { row($_) } @$keys;
        if ($a && $b) {
            $value = $a->{time} - $b->{time};
            $shown = $value < 0 ? "-" . show_time(-$value) : show_time($value);
        }
    } else {
        my $row = row($keys->[0]);
        if ($row && $kind eq "time") {
            $value = $row->{time};
            $shown = show_time($value);
        } elsif ($row && $kind eq "per_item" && $row->{rate}) {
            $value = 1 / $row->{rate};
            $shown = show_time($value);
        } elsif ($row && $kind eq "mbps" && $row->{rate}) {
            $value = $row->{rate} / 1e6;
            $shown = sprintf("%.0f MB/s", $value);
        } elsif ($row && $kind eq "allocs_per_item" && defined $row->{allocs} && $row->{rate}) {
            my $items = $row->{time} * $row->{rate};
            $value = $items > 0 ? $row->{allocs} / $items : undef;
            $shown = sprintf("%.3f", $value) if defined $value;
        }
    }
    $target_shown = $kind =~ /^(time|per_item|diff)$/ ? show_time($target)
                  : $kind eq "mbps" ? "$target MB/s"
                  : $kind eq "memory" ? "${target}x" : "$target";
    $target_shown = ($cmp eq "<=" ? "≤ " : "≥ ") . $target_shown;
    my $ok = !defined $value ? "-"
           : ($cmp eq "<=" ? $value <= $target : $value >= $target) ? "ok" : "MISSED";
    printf "%-48s %-18s %-12s %s\n", $label, $shown // "not measured yet", $target_shown, $ok;
}
'
exit "$status"
