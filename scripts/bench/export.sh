#!/usr/bin/env bash
# Export throughput and memory: generates synthetic training traces of N event records
# (core/examples/gen_trace.rs, core's TraceWriter) and converts each with the release
# `tpuscope export` under /usr/bin/time. Prints, per event count and format: seconds, events/s,
# peak RSS and bytes of RSS per event, with PASS/MISS against the targets (chrome-json of
# 10 M events in <= 300 MB peak RSS, >= 1 M events/s). Output goes to /dev/null (written in
# place, as a device) so that the disk is not what is measured. A miss is reported, never an
# error exit. Saved as target/bench/export.txt by scripts/bench.sh.
#   scripts/bench/export.sh [EVENTS...]     (default: 1000000 10000000)
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=scripts/bench/trace_len.sh
source scripts/bench/trace_len.sh export "$@"

# events/s is per CPU second (user + sys): on a shared machine wall time counts other loads.
printf '%-10s %-15s %8s %8s %12s %10s %10s  %s\n' events format wall-s cpu-s events/s "peak MB" "B/event" target
for n in "${counts[@]}"; do
  trace="$dir/train-$n.tps"
  [ "$trace" -nt "$gen" ] || "$gen" "$n" "$trace"
  for format in chrome-json flamegraph-svg; do
    args=(export "$trace" --format "$format" -o /dev/null)
    [ "$format" = flamegraph-svg ] && args+=(--flame sync)
    # GNU time: elapsed, user and sys seconds and peak RSS in KB on the last line of stderr.
    stats="$({ /usr/bin/time -f '%e %U %S %M' "$bin" "${args[@]}" 2>&1 >/dev/null; } | tail -1)"
    read -r wall user sys kb <<<"$stats"
    awk -v n="$n" -v w="$wall" -v s="$(awk -v u="$user" -v y="$sys" 'BEGIN { print u + y }')" \
        -v kb="$kb" -v f="$format" 'BEGIN {
      rate = (s > 0) ? n / s : n * 1000;
      mb = kb / 1024;
      verdict = "";
      if (f == "chrome-json") {
        verdict = (rate >= 1e6 ? "PASS" : "MISS") " >= 1 M events/s";
        if (n >= 1e7) verdict = verdict ", " (mb <= 300 ? "PASS" : "MISS") " <= 300 MB";
      }
      printf "%-10d %-15s %8.2f %8.2f %12.0f %10.1f %10.1f  %s\n", n, f, w, s, rate, mb, kb * 1024 / n, verdict
    }'
  done
done
