#!/usr/bin/env bash
# Report and view on a real long trace (issue 23): a JAX training loop (scripts/bench/jax_long.py:
# new host batches every step, a logged loss, an eval step, a learning rate baked in as a constant
# that decays, a short last batch per epoch) recorded under `tpuscope run` on the XLA CPU plugin
# for SECONDS (default 180), kept as target/bench/real/jax-long-SECONDS.tps and recorded again
# only when missing. Prints its size and events, then for `tpuscope report` (text and JSON) and
# `tpuscope view` (first frame of the Timeline tab, under Xvfb when xvfb-run is there): wall and
# CPU seconds, MB/s per CPU second, peak RSS and peak RSS over the trace's size. Measures only:
# the targets are judged on the generated traces (report.sh, view.sh), whose length is chosen.
# Needs the JAX env (scripts/setup-envs.sh jax). Saved as target/bench/real.txt by scripts/bench.sh.
#   scripts/bench/real_trace.sh [SECONDS]
set -euo pipefail
# Every report here reads its trace: a second one must not find the first's cache.
export TPUSCOPE_DIGEST_CACHE=0
cd "$(dirname "$0")/../.."
secs="${1:-180}"
[[ "$secs" =~ ^[0-9]+$ ]] || { echo "bench: SECONDS must be a whole number, not '$secs'" >&2; exit 2; }
python="$(scripts/env-path.sh jax)" \
  || { echo "bench: run scripts/setup-envs.sh jax first" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "bench: /usr/bin/time (GNU time) is needed for peak RSS" >&2; exit 1; }
cargo build --release -p tpuscope >&2
bin=target/release/tpuscope
dir=target/bench/real
mkdir -p "$dir"
trace="$dir/jax-long-${secs}s.tps"
if [ ! -s "$trace" ]; then
  echo "recording $trace: jax_long.py for ${secs} s under tpuscope run" >&2
  rm -f "$trace.part"
  "$bin" run --out "$trace.part" --no-tui --quiet -- "$python" scripts/bench/jax_long.py --seconds "$secs" >&2
  mv "$trace.part" "$trace"
fi
bytes=$(stat -c %s "$trace")
events=$("$bin" report "$trace" --format json | "$python" -c 'import json, sys; print(json.load(sys.stdin)["traces"][0]["events"])')
awk -v b="$bytes" -v n="$events" -v s="$secs" 'BEGIN {
  printf "trace: a JAX loop recorded for %d s, %.1f MB, %d events\n", s, b / 1048576, n
}'
printf '%-14s %8s %8s %9s %9s %12s\n' command wall-s cpu-s MB/s "peak MB" "RSS/trace"
row() {
  read -r wall user sys kb <<<"$2"
  awk -v c="$1" -v w="$wall" -v u="$user" -v y="$sys" -v kb="$kb" -v b="$bytes" 'BEGIN {
    s = u + y; if (s <= 0) s = 0.001;
    printf "%-14s %8.2f %8.2f %9.0f %9.1f %11.1fx\n", c, w, s, b / 1048576 / s, kb / 1024, kb * 1024 / b
  }'
}
timed() { { /usr/bin/time -f '%e %U %S %M' "$@" 2>&1 >/dev/null; } | tail -1; }
row "report text" "$(timed "$bin" report "$trace")"
row "report json" "$(timed "$bin" report "$trace" --format json)"
if command -v xvfb-run >/dev/null; then
  png="$dir/view-${secs}s.png"
  row "view" "$(timed xvfb-run -a -s "-screen 0 1600x1000x24" "$bin" view "$trace" --tab timeline --screenshot "$png" --force)"
  [ -s "$png" ] || { echo "bench: view wrote no $png" >&2; exit 1; }
else
  echo "view: skipped (no xvfb-run)"
fi
