#!/usr/bin/env bash
# Re-records the real sample traces in sample_traces/real/ from the workloads in tests/workloads/,
# through the real collector on the pinned environments. The committed files are what tests and
# the GUI demo read; re-record only on purpose (a format or collector change worth showing).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-envs.sh
cargo build -p tpuscope -p tpuscope-collector
out=sample_traces/real
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
record() { # name env-name script [args...]
  local name=$1 env=$2; shift 2
  rm -f "$out/$name.tps"
  (cd "$tmp" && env TPUSCOPE_QUIET=1 "$OLDPWD/target/debug/tpuscope" run --quiet --out "$OLDPWD/$out/$name.tps" -- \
    "$("$OLDPWD/scripts/env-path.sh" "$env")" "$OLDPWD/tests/workloads/$1" "${@:2}")
}
record jax_lr jax jax_lr.py
record jax_shapes jax jax_shapes.py
record torch_xla_item torch_xla torch_xla_item.py
TORCH_TPU_TIER2_COMPILATION_CACHE="tpuscope-samples-$$" TORCH_TPU_TIER3_COMPILATION_CACHE_ROOT="$tmp/tier3" \
  TPUSCOPE_WORKLOAD_NO_FORCE_INIT=1 record torch_tpu_cache torch_tpu torch_tpu_cache.py
rm -rf "/dev/shm/torch_tpu_cache/tpuscope-samples-$$"
libtpu="$(dirname "$(scripts/env-path.sh torch_tpu)")/../lib/python3.11/site-packages/libtpu/libtpu.so"
(cd "$tmp" && JAX_PLATFORMS=cpu "$OLDPWD/target/debug/tpuscope" run --quiet --plugin "$libtpu" \
  --out "$OLDPWD/$out/jax_aot_v5e.tps" -- "$("$OLDPWD/scripts/env-path.sh" jax)" "$OLDPWD/tests/workloads/jax_aot_tpu.py" v5e:2x2)
# A session of `tpuscope attach` into attach_jax.py started without tpuscope: 3 s from the
# middle of its loop (executables compiled before the attach, recompiles after it), then detach.
attach_sample() {
  local py plugin pid
  py="$(scripts/env-path.sh jax)"
  plugin="$("$py" -c 'import lammps_jax_pjrt_cpu as m, os; print(os.path.join(os.path.dirname(m.__file__), "pjrt_c_api_cpu_plugin.so"))')"
  rm -f "$out/jax_attach.tps"
  (cd "$tmp" && PJRT_NAMES_AND_LIBRARY_PATHS="cpuplugin:$plugin" JAX_PLATFORMS=cpuplugin \
    ATTACH_STOP_FILE="$tmp/stop" exec "$py" "$OLDPWD/tests/workloads/attach_jax.py" > "$tmp/attach.out") &
  pid=$!
  until grep -q READY "$tmp/attach.out" 2>/dev/null; do sleep 0.1; done
  sleep 1
  target/debug/tpuscope attach "$pid" --duration 3 --out "$PWD/$out/jax_attach.tps" > /dev/null
  touch "$tmp/stop"
  wait "$pid"
}
attach_sample
# jax_until_killed.py under `tpuscope run`, killed with SIGKILL half a second after its 10th step:
# a trace with no end record, whose report says when recording stopped and in which step.
killed_sample() {
  local runner
  rm -f "$out/jax_killed.tps" "$tmp/ready"
  (cd "$tmp" && LIVE_GATE_DIR="$tmp" "$OLDPWD/target/debug/tpuscope" run --quiet --no-tui \
    --out "$OLDPWD/$out/jax_killed.tps" -- "$("$OLDPWD/scripts/env-path.sh" jax)" \
    "$OLDPWD/tests/workloads/jax_until_killed.py" > /dev/null 2>&1) &
  runner=$!
  until [ -f "$tmp/ready" ]; do sleep 0.1; done
  sleep 0.5
  kill -9 "$(cat "$tmp/ready")"
  wait "$runner" || true # the run fails: its workload was killed
}
killed_sample
# What jax_lr's programs would do on v5e:2x2 (`tpuscope whatif`, libtpu compile-only), as JSON:
# the What-if tab's demo and the whatif text snapshot read it. No cache: every program compiled.
XDG_CACHE_HOME="$tmp/cache" target/debug/tpuscope whatif "$out/jax_lr.tps" --topology v5e:2x2 \
  --libtpu "$libtpu" --price-per-chip-hour 1.2 --format json > "$out/jax_lr.whatif-v5e-2x2.json"
ls -la "$out"
