#!/usr/bin/env bash
# Builds tpuscope and runs a bundled example workload under it on the XLA CPU PJRT plugin (standing
# in for a TPU), ending in a summary of what the collector saw.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup-envs.sh jax
cargo build --release -p tpuscope -p tpuscope-collector
python="$(scripts/env-path.sh jax)"
mkdir -p demo-out
exec target/release/tpuscope run --out demo-out/ -- "$python" tests/workloads/jax_lr.py
