#!/usr/bin/env bash
# Print the python of tpuscope's test env NAME (jax | torch_xla | torch_tpu), or exit 1.
#   "$(scripts/env-path.sh jax)" tests/workloads/jax_shapes.py
set -euo pipefail
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ENVS_ROOT="${TPUSCOPE_ENVS:-$HOME/.cache/tpuscope/envs}"
name="${1:-}"
if [ -z "$name" ]; then
  echo "usage: $0 NAME   (jax | torch_xla | torch_tpu)" >&2
  exit 1
fi
venv="$ENVS_ROOT/$name"
req="$SCRIPT_DIR/envs/$name.txt"
if [ ! -f "$req" ]; then
  echo "env-path: unknown env '$name' (no $req)" >&2
  exit 1
fi
if [ ! -x "$venv/bin/python" ] || [ ! -f "$venv/.tpuscope-stamp" ]; then
  echo "env-path: env '$name' is not set up: run scripts/setup-envs.sh $name" >&2
  exit 1
fi
if [ "$(cat "$venv/.tpuscope-stamp")" != "$(sha256sum "$req" | cut -d' ' -f1)" ]; then
  echo "env-path: env '$name' is out of date with $req: run scripts/setup-envs.sh $name" >&2
  exit 1
fi
echo "$venv/bin/python"
