#!/usr/bin/env bash
# Coverage-guided fuzzing of tpuscope's decoders (libFuzzer, cargo-fuzz layout; targets in fuzz/, see
# fuzz/README.md): builds the targets, writes seed corpora from sample_traces/, and runs each
# target for a bounded time. Exits non-zero if any target crashed (a panic, a broken invariant,
# a hang or an allocation past the memory limit), printing the input that did it.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]
#
# Seconds per target: the argument, else TPUSCOPE_FUZZ_SECS (scripts/test.sh sets 20 in CI and 5
# locally), else 5. TPUSCOPE_FUZZ_BUILD_ONLY=1 builds the targets and stops. The working corpus
# grows across runs in TPUSCOPE_FUZZ_CORPUS (default ~/.cache/tpuscope/fuzz-corpus/TARGET), so
# each run goes on from where the last one stopped.
set -euo pipefail
cd "$(dirname "$0")/.."

secs="${1:-${TPUSCOPE_FUZZ_SECS:-5}}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(reader live_stream hlo torch_trace)

cache="${XDG_CACHE_HOME:-$HOME/.cache}/tpuscope"
corpus_root="${TPUSCOPE_FUZZ_CORPUS:-$cache/fuzz-corpus}"
# cargo-fuzz's own build (`cargo fuzz build --sanitizer none`), without installing cargo-fuzz
# (5 minutes of a fresh CI machine): libfuzzer-sys links libFuzzer's main, these flags add the
# coverage instrumentation it feeds on. `--target` keeps build scripts uninstrumented. No
# sanitizer: the code under test is safe Rust, and ASan would halve the runs; debug assertions
# and overflow checks are on (fuzz/Cargo.toml's release profile).
host=$(rustc +nightly -vV 2>/dev/null | sed -n 's/^host: //p')
fuzz_rustflags="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares -Cllvm-args=-sanitizer-coverage-stack-depth \
-Cllvm-args=-simplifycfg-branch-fold-threshold=0 --cfg fuzzing -Ccodegen-units=4 -Cdebug-assertions"
# Inputs up to 64 KiB (the sample traces' size); 2 GiB of memory at most, a single allocation
# included (a decoder trusting a length field fails here); 20 s per input at most.
libfuzzer_flags=(-max_len=65538 -rss_limit_mb=2048 -timeout=20 -print_final_stats=1)

die() { echo "fuzz: $*" >&2; exit 1; }

start=$(date +%s)
[ -n "$host" ] || die "no nightly Rust toolchain (libFuzzer instrumentation needs one): rustup toolchain install nightly"

echo "fuzz: building the targets (fuzz/target)"
RUSTFLAGS="$fuzz_rustflags" cargo +nightly build --quiet --locked --release \
    --manifest-path fuzz/Cargo.toml -p tpuscope-fuzz --bins --target "$host" ||
    die "building the fuzz targets failed"
cargo build --quiet --locked --release --manifest-path fuzz/Cargo.toml -p tpuscope-fuzz-seedgen ||
    die "building the seed generator failed"
rm -rf fuzz/seeds
fuzz/target/release/tpuscope-fuzz-seedgen sample_traces fuzz/seeds || die "writing the seeds failed"
built=$(date +%s)
if [ -n "${TPUSCOPE_FUZZ_BUILD_ONLY:-}" ]; then
    echo "fuzz: built in $((built - start)) s (TPUSCOPE_FUZZ_BUILD_ONLY: not run)"
    exit 0
fi
echo "fuzz: built in $((built - start)) s; ${secs} s per target: ${targets[*]}"

mkdir -p fuzz/target/fuzz-logs
failed=()
for t in "${targets[@]}"; do
    corpus="$corpus_root/$t"
    artifacts="fuzz/artifacts/$t"
    log="fuzz/target/fuzz-logs/$t.log"
    mkdir -p "$corpus" "$artifacts"
    if "fuzz/target/$host/release/$t" "$corpus" "fuzz/seeds/$t" \
        "${libfuzzer_flags[@]}" -max_total_time="$secs" -artifact_prefix="$artifacts/" \
        >"$log" 2>&1; then
        runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
        echo "fuzz: $t: ${runs:-?} runs, corpus $(find "$corpus" -type f | wc -l) inputs, no crash"
    else
        failed+=("$t")
        echo "fuzz: $t FAILED (whole log: $log):" >&2
        grep -E -A3 'panicked at|ERROR: libFuzzer|==[0-9]+== ERROR' "$log" | head -20 >&2 ||
            tail -20 "$log" >&2
        sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | sort -u |
            while read -r f; do echo "fuzz: $t: crashing input: $f" >&2; done
        echo "fuzz: replay with: fuzz/target/$host/release/$t <input>" >&2
    fi
done

echo "fuzz: done in $(($(date +%s) - start)) s (build $((built - start)) s)"
[ ${#failed[@]} -eq 0 ] || die "crashed: ${failed[*]}"
