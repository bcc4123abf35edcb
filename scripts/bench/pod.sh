#!/usr/bin/env bash
# A pod's traces (issue 23): generates HOSTS synthetic traces of N event records each (hosts of
# one job: core/examples/gen_trace.rs --host K), then times `tpuscope merge` of them into one job
# file and `tpuscope report` of that file under /usr/bin/time. Prints wall seconds, CPU seconds
# and peak RSS of each, then PASS/MISS against the target: merge + report of 16 hosts x 1 M
# events in <= 5 s wall here. Then the report again with the cache of reads (written by a
# first report, read host by host by the second). Memory is printed against one host's
# report: what each further host adds is its summaries (a host's digest goes once its own
# analyses are made), so the MB per further host is printed too. A miss is reported, never an
# error exit. Saved as target/bench/pod.txt by scripts/bench.sh.
#   scripts/bench/pod.sh [HOSTS [EVENTS]]     (default: 16 1000000)
set -euo pipefail
# Every report here reads its trace: a second one must not find the first's cache.
export TPUSCOPE_DIGEST_CACHE=0
cd "$(dirname "$0")/../.."
hosts="${1:-16}"
n="${2:-1000000}"
# shellcheck source=scripts/bench/trace_len.sh
source scripts/bench/trace_len.sh pod "$n"

traces=()
for k in $(seq 0 $((hosts - 1))); do
  trace="$dir/h$k-$n.tps"
  [ "$trace" -nt "$gen" ] || "$gen" "$n" "$trace" --from sample_traces/real/jax_lr.tps --host "$k"
  traces+=("$trace")
done
job="$dir/job-$hosts-$n.tps"
rm -f "$job"

# GNU time: elapsed, user and sys seconds and peak RSS in KB on the last line of stderr.
timed() { { /usr/bin/time -f '%e %U %S %M' "$@" 2>&1 >/dev/null; } | tail -1; }
printf '%-28s %8s %8s %9s\n' step wall-s cpu-s "peak MB"
row() {
  read -r wall user sys kb <<<"$2"
  awk -v s="$1" -v w="$wall" -v u="$user" -v y="$sys" -v kb="$kb" \
    'BEGIN { printf "%-28s %8.2f %8.2f %9.1f\n", s, w, u + y, kb / 1024 }'
}
one="$(timed "$bin" report "${traces[0]}")"
row "report of one host" "$one"
merge="$(timed "$bin" merge -o "$job" "${traces[@]}")"
[ -s "$job" ] || { echo "bench: merge wrote no $job" >&2; exit 1; }
row "merge of $hosts hosts" "$merge"
report="$(timed "$bin" report "$job")"
row "report of the job" "$report"
# The cache of reads, in a home of its own: the first report writes it, the second reads it.
cache_home="$(mktemp -d)"
trap 'rm -rf "$cache_home"' EXIT
XDG_CACHE_HOME="$cache_home" TPUSCOPE_DIGEST_CACHE=1 "$bin" report "$job" >/dev/null
again="$(XDG_CACHE_HOME="$cache_home" TPUSCOPE_DIGEST_CACHE=1 timed "$bin" report "$job")"
row "report again (cache of reads)" "$again"
awk -v one="${one##* }" -v job="${report##* }" -v h="$hosts" 'BEGIN {
  printf "memory: the job report %.1f MB = one host'"'"'s %.1f MB + %.1f MB per further host\n", job / 1024, one / 1024, (job - one) / 1024 / (h - 1)
}'
awk -v m="${merge%% *}" -v r="${report%% *}" -v h="$hosts" -v n="$n" 'BEGIN {
  w = m + r;
  printf "merge + report of %d hosts x %d events: %.2f s wall  %s <= 5 s\n", h, n, w, (w <= 5 ? "PASS" : "MISS")
}'
