#!/usr/bin/env bash
# The collector overhead benchmark: builds the release collector, runs every part, prints a table
# with PASS/MISS against the targets and saves it as JSON (target/bench/collector.json).
#   scripts/bench.sh [--rounds N] [--steps N] [--skip-hooks] [--skip-capture] [--skip-steps]
#                    [--skip-analyze | --analyze-only] [--skip-xla] [--skip-live] [--skip-attach]
#                    [--skip-whatif] [--skip-real]
# First, the analysis throughput: analyzers/benches/analyze.rs (read_trace, report::analyze, and
# the two in sequence, on a generated 100 MB training trace, one core; PASS/FAIL of the sequence
# against 100 MB/s and 1 M events/s), saved as text (target/bench/analyze.txt), and the export
# benchmark (scripts/bench/export.sh: events/s and peak RSS of `tpuscope export` on generated
# 1 M and 10 M event traces; target/bench/export.txt), and the report benchmark
# (scripts/bench/report.sh: CPU-s, MB/s and peak RSS of `tpuscope report` on generated 1 M and
# 10 M event traces, PASS/MISS against issue 23's targets; target/bench/report.txt), and the pod
# benchmark (scripts/bench/pod.sh: `tpuscope merge` and `report` of 16 generated hosts x 1 M
# events, wall, CPU and peak RSS, PASS/MISS against 5 s; target/bench/pod.txt), and the view
# benchmark (scripts/bench/view.sh: the GUI's first frame on generated 1 M and 10 M event traces
# under Xvfb, wall, CPU and peak RSS, PASS/MISS against 2 s and 500 MB, read from the trace and
# then from the cache of reads; target/bench/view.txt),
# and the long live run (scripts/bench/live_long.sh: `attach --snapshot` and the live view in
# tmux on a fake socket that plays generated 1 M and 10 M event traces, wall, CPU, peak RSS,
# PASS/MISS: read to the end; target/bench/live_long.txt). They need no Python env (the fake
# socket is plain python3). Then the real long trace (scripts/bench/real_trace.sh: a JAX loop
# recorded for 180 s under tpuscope run, once, then report and view on it; target/bench/real.txt;
# needs the JAX env; --skip-real leaves it out).
# Parts: collector/benches/hooks.rs (ns added per hooked call, execute cost, writer ceiling),
# scripts/bench/capture.py (cost per captured Python stack), scripts/bench/jax_step.py (step-time
# ratio of a jitted JAX loop with and without the collector), scripts/bench/xla_ir_debug.py (the
# per-step tracing cost of torch_xla's IR debug, which the agent switches on while a graph keeps
# recompiling), scripts/bench/live_viewers.py (workload RSS with 16 viewers that never read
# against none, `attach --snapshot` latency on a loop that never pauses, client VmHWM under a
# flooding socket), scripts/bench/attach.py (what `tpuscope attach` into a JAX loop started
# without tpuscope costs it: the borrowed thread's stop, the loop's stall at attach and at detach,
# the iteration ratio while attached), scripts/bench/whatif.py (`tpuscope whatif` of ~100
# programs for v5e:2x2, cold and cached). Speed targets are ratios and
# differences measured within one run; a miss is reported, never an error exit.
set -euo pipefail
cd "$(dirname "$0")/.."

analyze=1 analyze_only=0 xla=1 live=1 attach=1 whatif=1 real=1 rest=()
for a in "$@"; do
  case "$a" in
    --skip-analyze) analyze=0 ;;
    --analyze-only) analyze_only=1 ;;
    --skip-xla) xla=0 ;;
    --skip-live) live=0 ;;
    --skip-attach) attach=0 ;;
    --skip-whatif) whatif=0 ;;
    --skip-real) real=0 ;;
    *) rest+=("$a") ;;
  esac
done
if [ "$analyze" = 1 ]; then
  echo "== analyzers: decode + analysis throughput (one core)" >&2
  mkdir -p target/bench
  { echo "machine: $(nproc) cores, $(uptime)"; cargo bench -p tpuscope-analyzers --bench analyze; } \
    | tee target/bench/analyze.txt
fi
if [ "$analyze" = 1 ]; then
  echo "== tui: CPU per frame while 10k events/s stream in (up to 100k), and when idle" >&2
  { echo "machine: $(nproc) cores, $(uptime)"; cargo bench -p tpuscope-tui --bench frame; } \
    | tee target/bench/tui.txt
fi
if [ "$analyze" = 1 ]; then
  echo "== gui: first frame and CPU per frame while panning a 1 M-event trace" >&2
  { echo "machine: $(nproc) cores, $(uptime)"; cargo bench -p tpuscope-gui --bench frame; } \
    | tee target/bench/gui.txt
fi
if [ "$analyze" = 1 ]; then
  echo "== export: events/s and peak RSS of tpuscope export (1 M and 10 M events, streamed)" >&2
  { echo "machine: $(nproc) cores, $(uptime)"; scripts/bench/export.sh; } | tee target/bench/export.txt
fi
if [ "$analyze" = 1 ]; then
  echo "== report: CPU-s and peak RSS of tpuscope report against trace length (1 M and 10 M events)" >&2
  { echo "machine: $(nproc) cores, $(uptime)"; scripts/bench/report.sh; } | tee target/bench/report.txt
  echo "== pod: merge + report of 16 hosts x 1 M events" >&2
  { echo "machine: $(nproc) cores, $(uptime)"; scripts/bench/pod.sh; } | tee target/bench/pod.txt
  echo "== view: first frame of the GUI against trace length (1 M and 10 M events)" >&2
  { echo "machine: $(nproc) cores, $(uptime)"; scripts/bench/view.sh; } | tee target/bench/view.txt
  echo "== live: attach --snapshot and the live view on a run of 1 M and 10 M events" >&2
  { echo "machine: $(nproc) cores, $(uptime)"; scripts/bench/live_long.sh; } | tee target/bench/live_long.txt
fi
if [ "$analyze" = 1 ] && [ "$real" = 1 ]; then
  echo "== real: report and view on a JAX loop recorded for 180 s" >&2
  { echo "machine: $(nproc) cores, $(uptime)"; scripts/bench/real_trace.sh 180; } | tee target/bench/real.txt
fi
if [ "$analyze_only" = 1 ]; then exit 0; fi
if [ "$xla" = 1 ]; then
  # What the agent's IR-debug switch (on while a torch_xla graph keeps recompiling) costs a step.
  xla_python="$(scripts/env-path.sh torch_xla)" \
    || { echo "bench: run scripts/setup-envs.sh torch_xla first (or --skip-xla)" >&2; exit 1; }
  echo "== torch_xla: tracing cost per step with IR debug on vs off" >&2
  mkdir -p target/bench
  PJRT_DEVICE=CPU HF_HUB_OFFLINE=1 "$xla_python" scripts/bench/xla_ir_debug.py \
    --json target/bench/xla_ir_debug.json | tee target/bench/xla_ir_debug.txt
fi
python="$(scripts/env-path.sh jax)" || { echo "bench: run scripts/setup-envs.sh jax first" >&2; exit 1; }
plugin="${TPUSCOPE_TEST_CPU_PLUGIN:-$("$python" -c 'import lammps_jax_pjrt_cpu as m, os; print(os.path.join(os.path.dirname(m.__file__), "pjrt_c_api_cpu_plugin.so"))')}"
[ -f "$plugin" ] || { echo "bench: CPU plugin not found at $plugin" >&2; exit 1; }

echo "== build (release)" >&2
cargo build --release -p tpuscope-collector >&2
hooks_bin="$(cargo bench -p tpuscope-collector --bench hooks --no-run --message-format=json 2>/dev/null \
  | "$python" -c 'import sys, json
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "hooks":
        print(m["executable"])')"
[ -x "$hooks_bin" ] || { echo "bench: building the hooks benchmark failed" >&2; exit 1; }

if [ "$live" = 1 ]; then
  # What live viewers cost a busy workload, how fast a snapshot answers, and what a flooding
  # socket costs the client (scripts/bench/live_viewers.py).
  echo "== live viewers: 16 idle viewers, snapshot latency, flooding socket" >&2
  cargo build --release -p tpuscope >&2
  mkdir -p target/bench
  "$python" scripts/bench/live_viewers.py --tpuscope "$PWD/target/release/tpuscope" \
    --collector "$PWD/target/release/libtpuscope_collector.so" --python "$python" \
    --plugin "$plugin" --json target/bench/live_viewers.json | tee target/bench/live_viewers.txt
fi

if [ "$attach" = 1 ]; then
  echo "== attach: a plain JAX loop's stall when tpuscope attaches and detaches" >&2
  cargo build --release -p tpuscope >&2
  mkdir -p target/bench
  "$python" scripts/bench/attach.py --tpuscope "$PWD/target/release/tpuscope" --python "$python" \
    --plugin "$plugin" --json target/bench/attach.json | tee target/bench/attach.txt
fi

if [ "$whatif" = 1 ]; then
  echo "== whatif: ~100 programs compiled for v5e:2x2 with libtpu, cold and cached" >&2
  libtpu="$(dirname "$(scripts/env-path.sh torch_tpu)")/../lib/python3.11/site-packages/libtpu/libtpu.so" \
    || { echo "bench: run scripts/setup-envs.sh torch_tpu first (or --skip-whatif)" >&2; exit 1; }
  cargo build --release -p tpuscope >&2
  mkdir -p target/bench
  "$python" scripts/bench/whatif.py --tpuscope "$PWD/target/release/tpuscope" --python "$python" \
    --libtpu "$libtpu" --json target/bench/whatif.json | tee target/bench/whatif.txt
fi

exec "$python" scripts/bench/run.py \
  --hooks-bin "$hooks_bin" \
  --collector "$PWD/target/release/libtpuscope_collector.so" \
  --plugin "$plugin" \
  --agent-dir "$PWD/collector/python" \
  --json target/bench/collector.json \
  "${rest[@]}"
