#!/usr/bin/env bash
# Builds tpuscope, runs a bundled example workload under it on the XLA CPU PJRT plugin (standing in
# for a TPU), and ends in the report of what went wrong in it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-envs.sh jax
cargo build --release -p tpuscope -p tpuscope-collector
python="$(scripts/env-path.sh jax)"
mkdir -p demo-out
before="$(ls demo-out/*.tps 2>/dev/null || true)"
target/release/tpuscope run --out demo-out/ -- "$python" examples/jax/lr_python_float.py
trace="$(ls -t demo-out/*.tps | head -n 1)"
if [ -z "$trace" ] || grep -qxF "$trace" <<<"$before"; then
    echo "demo: the run wrote no new trace in demo-out/" >&2
    exit 1
fi
echo
exec target/release/tpuscope report "$trace"
