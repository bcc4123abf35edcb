#!/usr/bin/env bash
# The whole test suite: pinned Python environments (installed once, cached), build, lint, tests.
# `.ci/run` calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

start=$(date +%s)
step() { printf '\n=== %s (+%ss)\n' "$1" "$(( $(date +%s) - start ))"; }

# Python byte-compiles what a test env's interpreter imports into the venv's __pycache__, once.
# An inherited PYTHONDONTWRITEBYTECODE (some images set it) makes each of the suite's interpreter
# starts compile its imports again: `import torch, torch_xla, transformers` 28 s against 11 s,
# `import jax, flax, optax` 5.9 s against 1.8 s, on 2 cores.
unset PYTHONDONTWRITEBYTECODE

# A fresh clone builds once: incremental state would only take disk (it is most of target/).
if [ "${CI:-}" = true ]; then export CARGO_INCREMENTAL=0; fi

step "system tools (tmux, Xvfb + Mesa)"
scripts/setup-system.sh

# A fresh machine spends minutes downloading and unpacking the pinned Python environments:
# that runs beside the lint and the build (which need none of it), and the tests wait for it.
step "Python test environments (in the background, beside the lint and the build)"
envs_log="$(mktemp)"
scripts/setup-envs.sh >"$envs_log" 2>&1 &
envs_pid=$!
trap 'kill "$envs_pid" 2>/dev/null || true; rm -f "$envs_log"' EXIT

step "format and lint"
cargo fmt --all -- --check
# fuzz/ is its own workspace: a dependency added to a crate it uses must reach its lock file too,
# and that should fail here, not after the tests.
cargo metadata --locked --format-version 1 --manifest-path fuzz/Cargo.toml >/dev/null ||
    { echo "fuzz/Cargo.lock is stale: run (cd fuzz && cargo metadata >/dev/null) and commit it" >&2; exit 1; }
cargo clippy --workspace --all-targets --locked -- -D warnings

step "build"
cargo build --workspace --all-targets --locked
# fuzz/ is a workspace of its own (nightly): built now, so that code it fails to compile fails
# here and not after the tests; the targets run after them.
TPUSCOPE_FUZZ_BUILD_ONLY=1 scripts/fuzz.sh

step "Python test environments (waiting)"
envs_rc=0
wait "$envs_pid" || envs_rc=$?
cat "$envs_log" >&2
[ "$envs_rc" -eq 0 ] || { echo "setup-envs.sh failed (exit $envs_rc)" >&2; exit 1; }

step "tests"
# The reader fuzz loop, and each fuzz target below, run 20 s in CI, a few seconds locally.
export TPUSCOPE_FUZZ_SECS="${TPUSCOPE_FUZZ_SECS:-$([ "${CI:-}" = true ] && echo 20 || echo 5)}"
cargo test --workspace --locked --no-fail-fast -- --test-threads=2

step "fuzz (${TPUSCOPE_FUZZ_SECS} s a target)"
# libFuzzer targets for the trace readers, live decoders, HLO decoder and TORCH_TRACE parser
# (fuzz/README.md); nightly toolchain, own target dir; fails on any crash, naming the input.
scripts/fuzz.sh

step "done"
