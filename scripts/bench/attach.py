"""Attach benchmark: what `tpuscope attach` costs a running JAX loop that was not started under
tpuscope, at the attach and at the detach.

Usage: attach.py --tpuscope BIN --python PY --plugin SO [--rounds N] [--hold S] [--json OUT]

tests/workloads/attach_jax.py runs plainly on the CPU plugin (no recompiles, a 10 ms sleep per
iteration, each iteration's end time written at exit). Each round attaches for `--hold` seconds
(`tpuscope attach PID --duration S --out …`, no terminal) and detaches by exiting. Measured:

- thread stop: how long the one target thread the injector borrowed was away from its own code
  (what tpuscope prints: interrupt stop to detach; it includes loading the collector and
  `tpuscope_attach`), the first attach (which loads the collector) apart from the later ones;
- loop stall at attach / at detach: the longest iteration that overlaps the moment tpuscope
  started injecting / exited, minus the median iteration of the rounds' quiet stretches. This
  is what the workload felt (it includes the agent started on its main thread by the attach);
- loop slowdown while attached: median iteration while attached / median iteration detached.

Numbers are per-round maxima over the attach or detach window (wall clock of one machine,
comparable within the run); medians and maxima over the rounds are printed. A benchmark, not a
test: the exit status stays 0 unless the workload or tpuscope failed.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def start_target(args, tmp):
    env = dict(os.environ)
    env.update(
        PJRT_NAMES_AND_LIBRARY_PATHS=f"cpuplugin:{args.plugin}",
        JAX_PLATFORMS="cpuplugin",
        ATTACH_STOP_FILE=os.path.join(tmp, "stop"),
        ATTACH_TIMES_FILE=os.path.join(tmp, "times"),
        ATTACH_RECOMPILE_EVERY="0",
        XDG_RUNTIME_DIR=tmp,
    )
    env.pop("PYTHONPATH", None)
    p = subprocess.Popen(
        [args.python, os.path.join(ROOT, "tests/workloads/attach_jax.py")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    line = p.stdout.readline()
    if not line.startswith("READY"):
        raise SystemExit(f"bench: the workload did not start: {line!r}")
    return p


def attach_round(args, tmp, pid, n):
    env = dict(os.environ, XDG_RUNTIME_DIR=tmp)
    out = os.path.join(tmp, f"round{n}.tps")
    t0 = time.time()
    r = subprocess.run(
        [args.tpuscope, "attach", str(pid), "--duration", str(args.hold), "--out", out],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
    )
    t1 = time.time()
    if r.returncode != 0:
        raise SystemExit(f"bench: attach failed: {r.stderr.strip()}")
    m = re.search(r"was stopped ([0-9.]+) ms", r.stderr)
    stop_ms = float(m.group(1)) if m else None
    # The socket disappears when the collector has detached.
    sock = os.path.join(tmp, "tpuscope", f"{pid}.sock")
    deadline = time.time() + 10
    while os.path.exists(sock) and time.time() < deadline:
        time.sleep(0.005)
    return t0, t1, stop_ms


def worst_iteration(ends, lo, hi):
    """Longest iteration (seconds) that overlaps [lo, hi]."""
    worst = 0.0
    for a, b in zip(ends, ends[1:]):
        if b >= lo and a <= hi:
            worst = max(worst, b - a)
    return worst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tpuscope", required=True)
    ap.add_argument("--python", required=True)
    ap.add_argument("--plugin", required=True)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--hold", type=float, default=1.0)
    ap.add_argument("--json")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        p = start_target(args, tmp)
        time.sleep(1.0)
        windows = []
        for n in range(args.rounds):
            windows.append(attach_round(args, tmp, p.pid, n))
            time.sleep(0.5)
        open(os.path.join(tmp, "stop"), "w").close()
        rest = p.stdout.read()
        if p.wait() != 0 or "RESULT" not in rest:
            raise SystemExit("bench: the workload failed")
        with open(os.path.join(tmp, "times")) as f:
            ends = [float(x) for x in f.read().split()]
    steps = list(zip(ends, ends[1:]))
    inside = [b - a for a, b in steps if any(t0 + 0.2 <= a and b <= t1 - 0.1 for t0, t1, _ in windows)]
    quiet = [
        b - a
        for a, b in steps
        if all(b < t0 - 0.05 or a > t1 + 0.3 for t0, t1, _ in windows)
    ]
    base = statistics.median(quiet)
    at_attach = [max(0.0, worst_iteration(ends, t0, t0 + 0.2) - base) * 1e3 for t0, _, _ in windows]
    at_detach = [max(0.0, worst_iteration(ends, t1 - 0.05, t1 + 0.3) - base) * 1e3 for _, t1, _ in windows]
    stops = [s for _, _, s in windows]
    later = range(1, len(windows))

    def spread(xs):
        xs = [x for x in xs if x is not None]
        return {"median": statistics.median(xs), "max": max(xs)} if xs else None

    res = {
        "rounds": args.rounds,
        "iteration_ms_detached_median": base * 1e3,
        "iteration_ms_attached_median": statistics.median(inside) * 1e3 if inside else None,
        # The first attach loads the collector (dlopen) and maps the injector's code page.
        "first_attach": {"thread_stop_ms": stops[0], "loop_stall_ms": at_attach[0]},
        "later_attaches": {
            "thread_stop_ms": spread(stops[i] for i in later),
            "loop_stall_ms": spread(at_attach[i] for i in later),
        },
        "loop_stall_at_detach_ms": spread(at_detach),
    }
    ratio = (
        res["iteration_ms_attached_median"] / res["iteration_ms_detached_median"]
        if inside
        else float("nan")
    )
    first, rest_ = res["first_attach"], res["later_attaches"]
    print(f"attach benchmark: {args.rounds} rounds, {args.hold} s attached each, JAX loop (10 ms sleep/iteration)")
    print(f"  first attach (loads the collector): thread stopped {first['thread_stop_ms']:.2f} ms, loop stall {first['loop_stall_ms']:.2f} ms")
    if rest_["thread_stop_ms"]:
        print(f"  later attaches ({len(later)}): thread stopped median {rest_['thread_stop_ms']['median']:.2f} ms max {rest_['thread_stop_ms']['max']:.2f} ms; "
              f"loop stall median {rest_['loop_stall_ms']['median']:.2f} ms max {rest_['loop_stall_ms']['max']:.2f} ms")
    d = res["loop_stall_at_detach_ms"]
    print(f"  loop stall at detach       median {d['median']:.2f} ms   max {d['max']:.2f} ms")
    print(f"  iteration attached/detached (medians): {ratio:.3f} ({res['iteration_ms_attached_median']:.2f} / {base * 1e3:.2f} ms)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2)


if __name__ == "__main__":
    main()
