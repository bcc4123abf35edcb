#!/usr/bin/env bash
# `tpuscope attach` on a run that wrote N events (issue 23: the live view and `attach` keep up
# with a long run and never stop): a fake live socket (scripts/bench/fake_live.py) plays a
# generated training trace of N event records (the ones scripts/bench/report.sh makes) as a
# process's backlog, as fast as the viewer takes it. Prints, per event count:
#   snapshot: `attach --snapshot --json` under /usr/bin/time: wall, CPU, peak RSS, MB/s, and the
#             events its report counts (all N when it read to the end);
#   view:     `attach` in a tmux pane (200x50): seconds until its counters show every step of
#             the run (as `tpuscope report` counts them), its peak RSS, and whether the stream
#             stopped.
# Then PASS/MISS for the largest (>= 10 M events): both read the run to its end. A miss is
# reported, never an error exit. Needs tmux for the view part. Saved as target/bench/live_long.txt
# by scripts/bench.sh.
#   scripts/bench/live_long.sh [EVENTS...]     (default: 1000000 10000000)
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=scripts/bench/trace_len.sh
source scripts/bench/trace_len.sh report "$@"
command -v tmux >/dev/null || { echo "bench: tmux is needed (apt install tmux)" >&2; exit 1; }
python=$(command -v python3) || { echo "bench: python3 is needed" >&2; exit 1; }

xdg=$(mktemp -d)
session="tpuscope-bench-live-$$"
server=""
cleanup() {
  [ -z "$server" ] || kill "$server" 2>/dev/null || true
  tmux kill-session -t "$session" 2>/dev/null || true
  rm -rf "$xdg"
}
trap cleanup EXIT

# Starts the fake socket on TRACE (extra args to fake_live.py); sets `server` and `pid`.
start_server() {
  XDG_RUNTIME_DIR="$xdg" "$python" scripts/bench/fake_live.py "$@" >"$xdg/pid" &
  server=$!
  for _ in $(seq 100); do [ -s "$xdg/pid" ] && break; sleep 0.1; done
  pid=$(head -1 "$xdg/pid")
}
stop_server() { kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; server=""; }

printf '%-10s %-9s %8s %8s %9s %8s  %s\n' events mode wall-s cpu-s "peak MB" "MB/s" "read"
for n in "${counts[@]}"; do
  trace="$dir/train-$n.tps"
  [ "$trace" -nt "$gen" ] || "$gen" "$n" "$trace" --from sample_traces/real/jax_lr.tps
  mb=$(awk -v b="$(stat -c %s "$trace")" 'BEGIN { printf "%.1f", b / 1e6 }')
  read -r want_events want_steps < <("$bin" report "$trace" --format json | "$python" -c \
    'import json, sys; r = json.load(sys.stdin); print(r["traces"][0]["events"], r["steps"]["count"])')

  start_server "$trace"
  /usr/bin/time -o "$xdg/time" -f '%e %U %S %M' env XDG_RUNTIME_DIR="$xdg" "$bin" attach "$pid" \
    --snapshot --json >"$xdg/snap.json" 2>"$xdg/snap.err" || true
  stop_server
  read -r wall user sys kb < <(tail -1 "$xdg/time")
  got=$("$python" -c 'import json, sys; print(json.load(open(sys.argv[1]))["traces"][0]["events"])' \
    "$xdg/snap.json" 2>/dev/null || echo 0)
  snap_ok=$([ "$got" = "$want_events" ] && echo yes || echo no)
  why=""
  [ "$snap_ok" = yes ] || why="  ($(grep -m1 . "$xdg/snap.err" || true))"
  awk -v n="$n" -v w="$wall" -v u="$user" -v y="$sys" -v kb="$kb" -v mb="$mb" -v g="$got" \
    -v e="$want_events" -v why="$why" 'BEGIN {
      printf "%-10d %-9s %8.2f %8.2f %9.1f %8.0f  %d of %d events%s\n", n, "snapshot", w, u + y, kb / 1024, mb / w, g, e, why
    }'

  # The live view: counters until every step shows; its peak RSS from /proc before it quits.
  start_server "$trace" --hang
  tmux new-session -d -s "$session" -x 200 -y 50 \
    "env XDG_RUNTIME_DIR='$xdg' '$PWD/$bin' attach $pid; sleep 600"
  t0=$(date +%s.%N)
  viewer=""
  view_ok=no
  stopped=""
  for _ in $(seq 3000); do
    [ -n "$viewer" ] || viewer=$(pgrep -f "tpuscope attach $pid\$" | head -1 || true)
    pane=$(tmux capture-pane -p -t "$session" 2>/dev/null || true)
    if grep -Eq "steps +$want_steps( |\$)" <<<"$pane"; then view_ok=yes; break; fi
    if grep -q "stream stopped" <<<"$pane"; then stopped=$(grep -m1 -o "stream stopped.*" <<<"$pane"); break; fi
    sleep 0.2
  done
  t1=$(date +%s.%N)
  kb=$(awk '/VmHWM/ { print $2 }' "/proc/$viewer/status" 2>/dev/null || echo 0)
  cpu=$(awk '{ print ($14 + $15) / 100 }' "/proc/$viewer/stat" 2>/dev/null || echo 0)
  tmux kill-session -t "$session" 2>/dev/null || true
  stop_server
  awk -v n="$n" -v t0="$t0" -v t1="$t1" -v c="$cpu" -v kb="$kb" -v mb="$mb" -v ok="$view_ok" \
    -v s="$want_steps" -v why="$stopped" 'BEGIN {
      w = t1 - t0
      printf "%-10d %-9s %8.2f %8.2f %9.1f %8.0f  %s%s\n", n, "view", w, c, kb / 1024, mb / w,
        (ok == "yes" ? "all " s " steps shown" : "not all steps shown"), (why == "" ? "" : " (" why ")")
    }'
  if [ "$n" -ge 10000000 ]; then
    echo "$n events: snapshot $([ "$snap_ok" = yes ] && echo PASS || echo MISS) (reads to the end)," \
      "view $([ "$view_ok" = yes ] && echo PASS || echo MISS) (keeps up to the end, never stops)"
  fi
done
