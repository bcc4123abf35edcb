#!/usr/bin/env bash
# Where the collector's time goes, with perf (cpu-clock sampling: works on VMs without hardware
# counters; Debian: apt-get install -y linux-perf).
#   scripts/bench/profile.sh plain   [SECONDS]  the plain hook (PJRT_Event_Await → Sync), by part
#   scripts/bench/profile.sh execute [SECONDS]  PJRT_LoadedExecutable_Execute with 4 args, by part
#   scripts/bench/profile.sh jax     [STEPS]    share of a JAX training loop's CPU samples spent
#                                               in collector code (its threads and its hooks)
# Run scripts/bench.sh once first (it builds the release collector and the bench binary).
set -euo pipefail
cd "$(dirname "$0")/../.."
what="${1:-plain}"
case "$what" in plain|execute|jax) ;; *) echo "usage: $0 plain|execute|jax [SECONDS|STEPS]" >&2; exit 2 ;; esac
command -v perf >/dev/null || { echo "perf is missing (apt-get install -y linux-perf)" >&2; exit 1; }
python="$(scripts/env-path.sh jax)"
plugin="${TPUSCOPE_TEST_CPU_PLUGIN:-$("$python" -c 'import lammps_jax_pjrt_cpu as m, os; print(os.path.join(os.path.dirname(m.__file__), "pjrt_c_api_cpu_plugin.so"))')}"
collector="$PWD/target/release/libtpuscope_collector.so"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/out"
export TPUSCOPE_QUIET=1

if [ "$what" = jax ]; then
  steps="${2:-600}"
  line="$(PJRT_NAMES_AND_LIBRARY_PATHS="tpuscope:$collector" JAX_PLATFORMS=tpuscope \
    TPUSCOPE_REAL_PLUGIN="$plugin" TPUSCOPE_OUT="$work/out" \
    perf record -q -k mono -F 3999 --call-graph dwarf,4096 -o "$work/perf.data" \
      "$python" scripts/bench/jax_step.py --steps "$steps" 2>/dev/null | grep '^STEP ')"
  echo "$line"
  read -r t0 t1 < <("$python" -c 'import json, sys; print(*json.loads(sys.argv[1][5:])["loop_monotonic_s"])' "$line")
  # Without inlined frames: resolving them for a whole JAX process takes many minutes.
  perf script --no-inline -i "$work/perf.data" -F comm,tid,time,ip,sym,dso 2>/dev/null >"$work/perf.txt"
  exec "$python" scripts/bench/attribute.py jax "$work/perf.txt" "$t0" "$t1"
fi

secs="${2:-6}"
bin="$(cargo bench -p tpuscope-collector --bench hooks --no-run --message-format=json 2>/dev/null \
  | "$python" -c 'import sys, json
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "hooks":
        print(m["executable"])')"
TPUSCOPE_REAL_PLUGIN="$plugin" TPUSCOPE_BENCH_COLLECTOR="$collector" TPUSCOPE_OUT="$work/out" \
  TPUSCOPE_STACKS=0 TPUSCOPE_BENCH_PROFILE_SECS="$secs" \
  perf record -q -F 4999 --call-graph dwarf,16384 -o "$work/perf.data" "$bin" --child "profile-$what" >/dev/null
# With inlined frames (slower to resolve, but the hooks are mostly inlined code).
perf script -i "$work/perf.data" -F comm,tid,time,ip,sym,dso 2>/dev/null >"$work/perf.txt"
"$python" scripts/bench/attribute.py "$what" "$work/perf.txt"
