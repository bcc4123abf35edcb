# Sourced by the benches that measure a command against trace length (export.sh, report.sh), from
# the repository root with their arguments: sets `counts` (the event counts asked for, else 1 M
# and 10 M), builds the release tpuscope and core's gen_trace example (`bin`, `gen`), and makes
# `dir` (target/bench/NAME) for the generated traces (made again when older than `gen`: a trace
# written by an older generator, or format, would measure the past).
#   source scripts/bench/trace_len.sh NAME "$@"
name="$1"
shift
counts=("$@")
[ ${#counts[@]} -gt 0 ] || counts=(1000000 10000000)
[ -x /usr/bin/time ] || { echo "bench: /usr/bin/time (GNU time) is needed for peak RSS" >&2; exit 1; }

cargo build --release -p tpuscope >&2
cargo build --release -p tpuscope-core --example gen_trace >&2
bin=target/release/tpuscope
gen=target/release/examples/gen_trace
dir="target/bench/$name"
mkdir -p "$dir"
