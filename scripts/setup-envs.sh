#!/usr/bin/env bash
# Create tpuscope's pinned Python 3.11 test environments.
#
#   scripts/setup-envs.sh                 # all envs: jax torch_xla torch_tpu
#   scripts/setup-envs.sh jax torch_xla   # only these
#
# Envs live in ${TPUSCOPE_ENVS:-$HOME/.cache/tpuscope/envs}/<name>/. Pins are in
# scripts/envs/<name>.txt (a pip requirements file; lines "#nodeps: SPEC" are installed
# afterwards with --no-deps). Each venv holds a stamp with the sha256 of its requirements
# file; a venv whose stamp matches is reused without touching the network.
# Interpreter: $TPUSCOPE_PYTHON, else python3.11 on PATH, else pyenv's 3.11.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REQ_DIR="$SCRIPT_DIR/envs"
ENVS_ROOT="${TPUSCOPE_ENVS:-$HOME/.cache/tpuscope/envs}"
ALL_ENVS=(jax torch_xla torch_tpu)
STAMP_NAME=".tpuscope-stamp"

die() { echo "setup-envs: error: $*" >&2; exit 1; }
log() { echo "setup-envs: $*" >&2; }

# GB of free disk each env needs (download cache + unpacked venv, with margin).
need_gb() {
  case "$1" in
    jax) echo 1 ;;
    torch_xla|torch_tpu) echo 8 ;;
    *) echo 8 ;;
  esac
}

smoke_code() {
  case "$1" in
    jax) echo 'import jax; print("jax", jax.__version__)' ;;
    torch_xla) echo 'import torch, torch_xla; print("torch", torch.__version__, "torch_xla", torch_xla.__version__)' ;;
    torch_tpu) echo 'import torch, torch_tpu, libtpu; from importlib.metadata import version as v; print("torch", torch.__version__, "torch_tpu", v("torch_tpu"), "libtpu", v("libtpu"), libtpu.get_library_path())' ;;
  esac
}

PLUGIN_CODE='import lammps_jax_pjrt_cpu as m; print(m.PLUGIN_PATH)'

find_python() {
  local cand
  for cand in "${TPUSCOPE_PYTHON:-}" python3.11 /root/.pyenv/versions/3.11*/bin/python3.11 \
              "$HOME"/.pyenv/versions/3.11*/bin/python3.11 /usr/bin/python3.11 /usr/local/bin/python3.11; do
    [ -n "$cand" ] || continue
    command -v "$cand" >/dev/null 2>&1 || continue
    # A pyenv shim may exist on PATH without 3.11 being selected: ask the interpreter itself.
    if "$cand" -c 'import sys, venv; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)' >/dev/null 2>&1; then
      "$cand" -c 'import sys; print(sys.executable)'
      return 0
    fi
  done
  return 1
}

sha_of() { sha256sum "$1" | cut -d' ' -f1; }

# Free GB on the filesystem that will hold $1 (nearest existing ancestor).
free_gb() {
  local d="$1"
  while [ ! -d "$d" ]; do d="$(dirname "$d")"; done
  df -Pk "$d" | awk 'NR==2 { printf "%d\n", $4 / 1048576 }'
}

# ---- arguments -------------------------------------------------------------------------
if [ "$#" -eq 0 ]; then
  set -- "${ALL_ENVS[@]}"
fi
for name in "$@"; do
  case "$name" in
    -h|--help) sed -n '2,12p' "${BASH_SOURCE[0]}"; exit 0 ;;
    jax|torch_xla|torch_tpu) [ -f "$REQ_DIR/$name.txt" ] || die "missing requirements file $REQ_DIR/$name.txt" ;;
    *) die "unknown env '$name' (known: ${ALL_ENVS[*]})" ;;
  esac
done

# ---- fast path: which envs are already up to date? -------------------------------------
todo=()
for name in "$@"; do
  venv="$ENVS_ROOT/$name"
  if [ -x "$venv/bin/python" ] && [ -f "$venv/$STAMP_NAME" ] \
     && [ "$(cat "$venv/$STAMP_NAME")" = "$(sha_of "$REQ_DIR/$name.txt")" ]; then
    continue
  fi
  todo+=("$name")
done

declare -A TIME_S=()
if [ "${#todo[@]}" -gt 0 ]; then
  PY="$(find_python)" || die "no Python 3.11 found (tried \$TPUSCOPE_PYTHON, python3.11 on PATH, ~/.pyenv/versions/3.11*/bin/python3.11, /usr/bin/python3.11); install one or set TPUSCOPE_PYTHON"
  log "using $PY"

  needed=0
  for name in "${todo[@]}"; do needed=$((needed + $(need_gb "$name"))); done
  have="$(free_gb "$ENVS_ROOT")"
  if [ "$have" -lt "$needed" ]; then
    die "not enough disk for envs (${todo[*]}): need ~${needed} GB free under $ENVS_ROOT, have ${have} GB"
  fi

  mkdir -p "$ENVS_ROOT"
  for name in "${todo[@]}"; do
    venv="$ENVS_ROOT/$name"
    req="$REQ_DIR/$name.txt"
    t0=$(date +%s)
    log "[$name] creating venv at $venv"
    rm -rf "$venv"
    "$PY" -m venv "$venv" || die "[$name] python -m venv failed"
    vpy="$venv/bin/python"
    # No byte-compiling at install: torch and jax ship tens of thousands of modules, of which
    # a run imports a few thousand (compiled then, once, into the venv's __pycache__).
    pipq=(--no-input --progress-bar off --disable-pip-version-check --no-compile)
    "$vpy" -m pip install "${pipq[@]}" -q --upgrade pip \
      || die "[$name] pip self-upgrade failed"
    log "[$name] pip install -r $req"
    "$vpy" -m pip install "${pipq[@]}" -r "$req" \
      || die "[$name] pip install -r $req failed"
    nodeps=$(sed -n 's/^#[[:space:]]*nodeps:[[:space:]]*//p' "$req")
    if [ -n "$nodeps" ]; then
      log "[$name] pip install --no-deps $nodeps"
      # shellcheck disable=SC2086
      "$vpy" -m pip install "${pipq[@]}" --no-deps $nodeps \
        || die "[$name] pip install --no-deps $nodeps failed"
    fi
    log "[$name] smoke import"
    # Run from the venv dir, never from a directory that may hold a stray libtpu.so.
    # The smoke import also byte-compiles the frontend's modules for the runs to come.
    (cd "$venv" && env -u PYTHONDONTWRITEBYTECODE TPU_SKIP_MDS_QUERY=1 "$vpy" -c "$(smoke_code "$name")") || die "[$name] smoke import failed"
    plugin="$(cd "$venv" && "$vpy" -c "$PLUGIN_CODE")" || die "[$name] cannot locate the CPU plugin (lammps_jax_pjrt_cpu.PLUGIN_PATH)"
    [ -f "$plugin" ] || die "[$name] CPU plugin path does not exist: $plugin"
    echo "$plugin" > "$venv/.tpuscope-plugin-path"
    "$vpy" -m pip freeze > "$venv/.tpuscope-freeze.txt" || die "[$name] pip freeze failed"
    t1=$(date +%s)
    TIME_S[$name]=$((t1 - t0))
    du -sh "$venv" | cut -f1 > "$venv/.tpuscope-disk"
    echo "$((t1 - t0))" > "$venv/.tpuscope-install-seconds"
    sha_of "$req" > "$venv/$STAMP_NAME"   # written last: marks the env complete
    log "[$name] done in $((t1 - t0)) s"
  done
fi

# ---- summary ---------------------------------------------------------------------------
printf '%-10s %-8s %-10s %-7s %s\n' ENV STATUS TIME DISK PYTHON
for name in "$@"; do
  venv="$ENVS_ROOT/$name"
  if [ -n "${TIME_S[$name]:-}" ]; then
    status=installed; t="${TIME_S[$name]}s"
  else
    status=cached; t="(was $(cat "$venv/.tpuscope-install-seconds" 2>/dev/null || echo '?')s)"
  fi
  printf '%-10s %-8s %-10s %-7s %s\n' "$name" "$status" "$t" \
    "$(cat "$venv/.tpuscope-disk" 2>/dev/null || echo '?')" "$venv/bin/python"
  echo "           cpu plugin: $(cat "$venv/.tpuscope-plugin-path" 2>/dev/null || echo '?')"
done
