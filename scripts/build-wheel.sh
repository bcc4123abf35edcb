#!/usr/bin/env bash
# Build the `pip install tpuscope` wheel: the tpuscope binary with the collector library and the
# Python agent embedded, linked by zig against glibc 2.28 and tagged manylinux_2_28, so it
# installs on Ubuntu 22.04 TPU VMs (and anything newer).
#
#   scripts/build-wheel.sh            # prints the wheel's path as the last line of stdout
#
# maturin and ziglang (pinned below) live in a build venv under
# ${TPUSCOPE_WHEEL_VENV:-$HOME/.cache/tpuscope/wheel-build}, made once. Cargo builds into
# ${CARGO_TARGET_DIR:-target/wheel} (apart from the dev build, and incremental); the wheel is
# written to ${TPUSCOPE_WHEEL_OUT:-target/wheel/dist}, which is emptied first. After the build,
# the wheel is checked: its tag, and that neither the binary nor the embedded collector needs a
# glibc symbol newer than 2.28 or a library outside the manylinux set.
# TPUSCOPE_WHEEL_PROFILE=dev builds the tpuscope binary unoptimized (the test suite's wheel: the
# same packaging, minutes less on 2 cores); the embedded collector is a release build either way.
# Interpreter for the build venv: $TPUSCOPE_PYTHON, else python3.11/python3 on PATH.
set -euo pipefail

MATURIN_PIN="maturin==1.16.0"
ZIG_PIN="ziglang==0.17.0"
GLIBC_MAX="2.28"
PLATFORM_TAG="manylinux_2_28_x86_64"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${TPUSCOPE_WHEEL_VENV:-$HOME/.cache/tpuscope/wheel-build}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$ROOT/target/wheel}"
OUT="${TPUSCOPE_WHEEL_OUT:-$CARGO_TARGET_DIR/dist}"
# The wheel's binary is stripped: line tables (the workspace's release profile) would only cost
# build time here, and size in the embedded collector.
export CARGO_PROFILE_RELEASE_DEBUG="${CARGO_PROFILE_RELEASE_DEBUG:-0}"
PROFILE="${TPUSCOPE_WHEEL_PROFILE:-release}"
STAMP="$VENV/.tpuscope-stamp"

die() { echo "build-wheel: error: $*" >&2; exit 1; }
log() { echo "build-wheel: $*" >&2; }

case "$PROFILE" in
  release|dev) ;;
  *) die "TPUSCOPE_WHEEL_PROFILE=$PROFILE: release or dev" ;;
esac
case "${1:-}" in
  "") ;;
  -h|--help) sed -n '2,16p' "${BASH_SOURCE[0]}"; exit 0 ;;
  *) die "unknown argument '$1' (see --help)" ;;
esac
[ "$(uname -m)" = x86_64 ] || die "only x86_64 wheels are built here (this is $(uname -m))"
for tool in cargo objdump readelf; do
  command -v "$tool" >/dev/null || die "$tool not found (rustup; binutils)"
done

# ---- pinned build venv (made once; remade when the pins change) ------------------------
if [ ! -x "$VENV/bin/maturin" ] || [ "$(cat "$STAMP" 2>/dev/null)" != "$MATURIN_PIN $ZIG_PIN" ]; then
  py=""
  for cand in "${TPUSCOPE_PYTHON:-}" python3.11 python3; do
    [ -n "$cand" ] && command -v "$cand" >/dev/null && { py="$cand"; break; }
  done
  [ -n "$py" ] || die "no python3 found to make the build venv (set TPUSCOPE_PYTHON)"
  log "making the build venv $VENV ($MATURIN_PIN $ZIG_PIN)"
  rm -rf "$VENV"
  "$py" -m venv "$VENV" || die "python -m venv $VENV failed"
  "$VENV/bin/python" -m pip install --no-input --progress-bar off --disable-pip-version-check -q \
    "$MATURIN_PIN" "$ZIG_PIN" || die "pip install $MATURIN_PIN $ZIG_PIN failed"
  echo "$MATURIN_PIN $ZIG_PIN" > "$STAMP"
fi
"$VENV/bin/python" -m ziglang version >/dev/null || die "zig from $ZIG_PIN does not run"

# ---- build -----------------------------------------------------------------------------
rm -rf "$OUT"
mkdir -p "$OUT"
t0=$(date +%s)
log "maturin build ($PROFILE, zig, glibc $GLIBC_MAX) into $CARGO_TARGET_DIR"
# maturin finds zig as `python -m ziglang` of the interpreter on PATH: the build venv's. The
# embedded collector's nested cargo build (cli/build.rs) inherits maturin's zig linker settings.
(cd "$ROOT" && PATH="$VENV/bin:$PATH" "$VENV/bin/maturin" build --profile "$PROFILE" --locked \
    --zig --compatibility manylinux_2_28 --auditwheel check --out "$OUT" >&2) \
  || die "maturin build failed"
shopt -s nullglob
wheels=("$OUT"/tpuscope-*.whl)
[ "${#wheels[@]}" -eq 1 ] || die "expected one wheel in $OUT, found ${#wheels[@]}"
wheel="${wheels[0]}"
log "built $(basename "$wheel") ($(du -h "$wheel" | cut -f1)) in $(( $(date +%s) - t0 )) s"

# ---- check what a TPU VM will load -----------------------------------------------------
case "$(basename "$wheel")" in
  *-py3-none-"$PLATFORM_TAG".whl) ;;
  *) die "wheel tag is not py3-none-$PLATFORM_TAG: $(basename "$wheel")" ;;
esac
check="$(mktemp -d)"
trap 'rm -rf "$check"' EXIT
"$VENV/bin/python" -m zipfile -e "$wheel" "$check/wheel" || die "cannot unpack $wheel"
bin=("$check"/wheel/tpuscope-*.data/scripts/tpuscope)
[ -f "${bin[0]:-}" ] || die "no tpuscope binary under .data/scripts in the wheel"
chmod +x "${bin[0]}"   # zipfile does not keep modes; pip sets scripts executable
# The collector is embedded: let the binary unpack it into a scratch cache (`env` only prints
# paths; the plugin it is given is never loaded).
: > "$check/placeholder-plugin.so"
XDG_CACHE_HOME="$check/cache" "${bin[0]}" env --plugin "$check/placeholder-plugin.so" --out "$check" >/dev/null \
  || die "the wheel's tpuscope cannot run \`tpuscope env\`"
collector=("$check"/cache/tpuscope/collector-*/libtpuscope_collector.so)
[ -f "${collector[0]:-}" ] || die "the wheel's tpuscope has no embedded collector"

# Libraries every manylinux system has (PEP 599/600 policy; the GUI dlopens X11 and GL).
allowed='^(libc\.so\.6|libm\.so\.6|libdl\.so\.2|libpthread\.so\.0|librt\.so\.1|libgcc_s\.so\.1|ld-linux-x86-64\.so\.2)$'
for f in "${bin[0]}" "${collector[0]}"; do
  name="$(basename "$f")"
  newest="$(objdump -T "$f" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1)"
  [ -n "$newest" ] || die "$name: no GLIBC symbol versions found (objdump -T)"
  [ "$(printf '%s\n%s\n' "$newest" "$GLIBC_MAX" | sort -V | tail -1)" = "$GLIBC_MAX" ] \
    || die "$name needs GLIBC_$newest, newer than $GLIBC_MAX"
  # A strong undefined symbol without a version binds to whatever the running glibc has: one that
  # glibc 2.28 lacks (gettid, say) makes the load fail there, and carries no GLIBC_ tag to catch.
  unversioned="$(objdump -T "$f" | awk '$2 != "w" && $3 == "*UND*" && NF == 5 { print $5 }' | tr '\n' ' ')"
  [ -z "$unversioned" ] || die "$name has undefined symbols without a version: $unversioned"
  needed="$(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')"
  while read -r lib; do
    [[ "$lib" =~ $allowed ]] || die "$name needs $lib, which manylinux does not guarantee"
  done <<< "$needed"
  log "$name: newest glibc symbol GLIBC_$newest; needs $(echo $needed)"
done
echo "$wheel"
