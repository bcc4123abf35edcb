#!/usr/bin/env bash
# System tools the end-to-end tests drive: tmux (a real terminal for the live view), Xvfb with
# Mesa and a font (a display for the GUI's screenshots), strace (another tracer, which an attach
# must refuse to compete with). Installs them with apt when missing and possible;
# otherwise stops with the command to run.
set -euo pipefail

need=()
command -v tmux >/dev/null || need+=(tmux)
command -v strace >/dev/null || need+=(strace)
command -v xvfb-run >/dev/null || need+=(xvfb xauth)
# The GUI draws →, ≠, ≥ with a system font (egui's own lacks them).
[ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || need+=(fonts-dejavu-core)
[ -e /usr/lib/x86_64-linux-gnu/dri/swrast_dri.so ] || [ -e /usr/lib/x86_64-linux-gnu/dri/llvmpipe_dri.so ] \
  || [ -d /usr/lib/x86_64-linux-gnu/dri ] || need+=(libgl1-mesa-dri)
[ ${#need[@]} -eq 0 ] && exit 0

echo "setup-system: installing ${need[*]}" >&2
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q "${need[@]}" >/dev/null 2>&1 \
    || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q "${need[@]}" >/dev/null; } \
    || { echo "setup-system: FAILED to install ${need[*]} with apt-get" >&2; exit 1; }
elif command -v sudo >/dev/null && command -v apt-get >/dev/null; then
  sudo apt-get install -y -q "${need[@]}" \
    || { echo "setup-system: FAILED: sudo apt-get install ${need[*]}" >&2; exit 1; }
else
  echo "setup-system: FAILED: missing ${need[*]}; install them (Debian/Ubuntu: apt-get install ${need[*]})" >&2
  exit 1
fi
