#!/usr/bin/env bash
# The whole test suite: pinned Python environments (installed once, cached), build, lint, tests.
# `.ci/run` calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

start=$(date +%s)
step() { printf '\n=== %s (+%ss)\n' "$1" "$(( $(date +%s) - start ))"; }

# A fresh clone builds once: incremental state would only take disk (it is most of target/).
if [ "${CI:-}" = true ]; then export CARGO_INCREMENTAL=0; fi

step "Python test environments"
scripts/setup-envs.sh

step "system tools (tmux, Xvfb + Mesa)"
scripts/setup-system.sh

step "format and lint"
cargo fmt --all -- --check
# fuzz/ is its own workspace: a dependency added to a crate it uses must reach its lock file too,
# and that should fail here, not after the tests.
cargo metadata --locked --format-version 1 --manifest-path fuzz/Cargo.toml >/dev/null ||
    { echo "fuzz/Cargo.lock is stale: run (cd fuzz && cargo metadata >/dev/null) and commit it" >&2; exit 1; }
cargo clippy --workspace --all-targets --locked -- -D warnings

step "build"
cargo build --workspace --all-targets --locked

step "tests"
# The reader fuzz loop, and each fuzz target below, run half a minute in CI, a few seconds locally.
export TPUSCOPE_FUZZ_SECS="${TPUSCOPE_FUZZ_SECS:-$([ "${CI:-}" = true ] && echo 30 || echo 5)}"
cargo test --workspace --locked --no-fail-fast -- --test-threads=2

step "fuzz (${TPUSCOPE_FUZZ_SECS} s a target)"
# libFuzzer targets for the trace readers, live decoders, HLO decoder and TORCH_TRACE parser
# (fuzz/README.md); nightly toolchain, own target dir; fails on any crash, naming the input.
scripts/fuzz.sh

step "done"
