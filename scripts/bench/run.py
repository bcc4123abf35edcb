"""Runs the collector overhead benchmarks and prints one table (called by scripts/bench.sh).

Usage: run.py --hooks-bin BIN --collector SO --plugin SO --agent-dir DIR --json OUT
              [--epochs N] [--blocks N] [--block-steps N] [--rounds N] [--steps N]
              [--skip-hooks] [--skip-capture] [--skip-interleaved]

Parts:
- the hooks benchmark (collector/benches/hooks.rs: plain hook, execute, writer ceiling);
- the cost of a captured Python stack (capture.py, for each interpreter found);
- the step-time ratio of a jitted JAX loop (jax_step.py). Variants, each its own process: the
  plain CPU plugin (twice: `plain` and `plain_b`), through the collector, through the collector
  with the Python agent (what `tpuscope run` sets up), and the collector with TPUSCOPE_ENABLE=0.
  An epoch starts one fresh process per variant; they warm up, then take turns running blocks of
  `--block-steps` steps, `--blocks` turns each, in a random order every turn, so load from other
  work on the machine hits every variant alike within a fraction of a second (a waiting process
  uses no CPU). A variant's time in a turn is the fastest step of its block (the one least
  disturbed by other work; the block median is reported too). An epoch's ratio is the median
  over its turns of variant / baseline, the baseline being the geometric mean of the two plain
  processes' times in that turn; the result is the median over
  `--epochs` epochs (pairs of processes). `plain_b / plain` (A/A) shows the method's own noise:
  a process's speed differs by a percent or more from another one of the same configuration.
  `--rounds N` (default 0) additionally runs every variant as a fresh process timing `--steps`
  steps, N times in rotated order (much noisier on a shared machine).

A benchmark, not a test: a missed target prints MISS and the exit status stays 0.
"""
import argparse
import glob
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))

PLAIN_HOOK_TARGET_NS = 100.0
STEP_RATIO_TARGET = 1.01


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def load():
    with open("/proc/loadavg") as f:
        return f.read().split()[:3]


def run_hooks(args):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "hooks.json")
        log("== hooks benchmark (plain hook, execute, writer) ...")
        env = dict(os.environ, TPUSCOPE_BENCH_COLLECTOR=args.collector, TPUSCOPE_TEST_CPU_PLUGIN=args.plugin)
        subprocess.run([args.hooks_bin, "--json", out], check=True, env=env, stdout=sys.stderr)
        with open(out) as f:
            return json.load(f)


def other_pythons():
    """python3.12 / python3.13 from pyenv, when installed (the stack reader differs per version)."""
    found = []
    roots = [os.environ.get("PYENV_ROOT"), os.path.expanduser("~/.pyenv")]
    for minor in ("3.12", "3.13"):
        for root in filter(None, roots):
            cands = sorted(
                p
                for p in glob.glob(os.path.join(root, "versions", minor + ".*", "bin", "python" + minor))
                if not p.split(os.sep)[-3].endswith("t")  # free-threaded builds: no stable layout
            )
            if cands:
                found.append(cands[-1])
                break
    return found


def run_capture(args):
    rows = []
    for py in [sys.executable] + other_pythons():
        log("== stack capture benchmark with %s ..." % py)
        r = subprocess.run(
            [py, os.path.join(HERE, "capture.py"), args.collector, "200", "200"],
            check=True,
            capture_output=True,
            text=True,
        )
        rows.append(json.loads(r.stdout.strip().splitlines()[-1]))
    return rows


def step_variants(args, out_dir):
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TPUSCOPE_", "PJRT_", "JAX_"))}
    base["TPUSCOPE_QUIET"] = "1"
    plain = dict(base, PJRT_NAMES_AND_LIBRARY_PATHS="tpuscope:" + args.plugin, JAX_PLATFORMS="tpuscope")
    coll = dict(
        base,
        PJRT_NAMES_AND_LIBRARY_PATHS="tpuscope:" + args.collector,
        JAX_PLATFORMS="tpuscope",
        TPUSCOPE_REAL_PLUGIN=args.plugin,
    )
    agent = dict(coll, TPUSCOPE_COLLECTOR=args.collector)
    agent["PYTHONPATH"] = args.agent_dir + (":" + base["PYTHONPATH"] if base.get("PYTHONPATH") else "")
    return [
        ("plain", plain, None),
        # A second plain process: plain_b / plain is the noise floor of the method (A/A).
        ("plain_b", dict(plain), None),
        ("collector", coll, os.path.join(out_dir, "collector")),
        ("collector_agent", agent, os.path.join(out_dir, "agent")),
        ("passthrough", dict(coll, TPUSCOPE_ENABLE="0"), os.path.join(out_dir, "passthrough")),
    ]


def summarize(args, trace):
    r = subprocess.run([args.hooks_bin, "--summarize", trace], capture_output=True, text=True)
    try:
        return json.loads(r.stdout)
    except ValueError:
        return {"error": r.stderr.strip()[-300:]}


def run_steps(args):
    res = {"rounds": [], "config": {"steps": args.steps, "warmup": 30, "batch": 256, "width": 512, "donate": 1}}
    with tempfile.TemporaryDirectory() as d:
        variants = step_variants(args, d)
        for r in range(args.rounds):
            k = r % len(variants)
            order = variants[k:] + variants[:k]
            row = {}
            for name, env, out in order:
                env = dict(env)
                if out is not None:
                    run_dir = os.path.join(out, str(r))
                    os.makedirs(run_dir)
                    env["TPUSCOPE_OUT"] = run_dir
                cmd = [sys.executable, os.path.join(HERE, "jax_step.py"), "--steps", str(args.steps)]
                p = subprocess.run(cmd, env=env, capture_output=True, text=True)
                line = next((l for l in p.stdout.splitlines() if l.startswith("STEP ")), None)
                if p.returncode != 0 or line is None:
                    raise SystemExit("jax_step (%s) failed:\n%s\n%s" % (name, p.stdout, p.stderr[-3000:]))
                row[name] = json.loads(line[5:])
                if out is not None:
                    traces = sorted(glob.glob(os.path.join(run_dir, "*.tps")))
                    if traces:
                        row[name]["trace"] = summarize(args, traces[0])
                    elif name != "passthrough":
                        row[name]["trace"] = {"error": "no trace written"}
            log(
                "   round %d: %s"
                % (r + 1, "  ".join("%s %.3f ms" % (n, row[n]["median_ms"]) for n, _, _ in variants))
            )
            res["rounds"].append(row)
    for name in ("plain_b", "collector", "collector_agent", "passthrough"):
        ratios = [rw[name]["median_ms"] / base({n: v["median_ms"] for n, v in rw.items()}, name)
                  for rw in res["rounds"]]
        res[name + "_ratios"] = ratios
        res[name + "_ratio_median"] = statistics.median(ratios)
    return res


def read_tagged(proc, tag, name, errfile):
    """The next stdout line of `proc` starting with `tag`, parsed (exits if the process died)."""
    while True:
        line = proc.stdout.readline()
        if not line:
            proc.wait()
            errfile.seek(0)
            raise SystemExit("jax_step (%s) exited (%s):\n%s" % (name, proc.returncode, errfile.read()[-3000:]))
        if line.startswith(tag + " "):
            return json.loads(line[len(tag) + 1:])


def run_epoch(args, variants, epoch, d):
    """Fresh processes, one per variant, taking turns: returns per-round block medians and all
    step times per variant, and the collector's trace summaries."""
    # Random orders (the seed is saved in the JSON): a fixed rotation would give every variant
    # the same predecessor every turn, and what ran just before (cold caches, a thread pool
    # still spinning) shifts a block's time by a few percent.
    rng = random.Random(args.seed * 1000 + epoch)
    procs = []
    try:
        for name, env, out in rng.sample(variants, len(variants)):
            env = dict(env)
            if out is not None:
                run_dir = os.path.join(d, "%s-%d" % (name, epoch))
                os.makedirs(run_dir)
                env["TPUSCOPE_OUT"] = run_dir
            else:
                run_dir = None
            err = tempfile.TemporaryFile(mode="w+")
            p = subprocess.Popen(
                [sys.executable, os.path.join(HERE, "jax_step.py"), "--serve"],
                env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True, bufsize=1,
            )
            procs.append((name, p, err, run_dir))
        for name, p, err, _ in procs:
            read_tagged(p, "READY", name, err)
        times = {name: [] for name, _, _, _ in procs}
        rounds, orders = [], []
        for _ in range(args.blocks):
            row = {}
            order = rng.sample(procs, len(procs))
            orders.append([o[0] for o in order])
            for name, p, err, _ in order:
                time.sleep(0.02)  # let the previous process's thread pool go idle
                p.stdin.write("RUN %d\n" % args.block_steps)
                p.stdin.flush()
                t = read_tagged(p, "BLOCK", name, err)["times_ms"]
                times[name].extend(t)
                row[name] = {"median": statistics.median(t), "min": min(t)}
            rounds.append(row)
        for name, p, err, _ in procs:
            p.stdin.write("EXIT\n")
            p.stdin.flush()
            p.wait(timeout=60)
    finally:
        for _, p, err, _ in procs:
            if p.poll() is None:
                p.kill()
            err.close()
    traces = {}
    for name, _, _, run_dir in procs:
        if run_dir is not None:
            found = sorted(glob.glob(os.path.join(run_dir, "*.tps")))
            if found:
                traces[name] = summarize(args, found[0])
    return rounds, orders, times, traces


def base(row, name):
    """The baseline of a round (`row`: variant → step time): both plain processes (geometric
    mean), which halves the weight of one process's own speed; the A/A control `plain_b` is
    compared with `plain` alone."""
    if name == "plain_b":
        return row["plain"]
    return (row["plain"] * row["plain_b"]) ** 0.5


# Per turn, a variant's step time is its block's fastest step (`min`: the step least disturbed
# by other work on the machine; the collector's cost is in every step, so it is in the fastest
# one too) or its block's median step (`median`, reported alongside).
STATS = ("min", "median")


def run_interleaved(args):
    """`--epochs` epochs of fresh processes; within an epoch the variants take turns running
    blocks of steps. The ratio of an epoch is the median over its turns of variant / baseline."""
    res = {"config": {"epochs": args.epochs, "turns_per_epoch": args.blocks, "steps_per_block": args.block_steps,
                      "seed": args.seed,
                      "warmup": 30, "batch": 256, "width": 512, "donate": 1},
           "epochs": [], "ratio": {st: {} for st in STATS}}
    names = [v[0] for v in step_variants(args, "/")]
    with tempfile.TemporaryDirectory() as d:
        variants = step_variants(args, d)
        for e in range(args.epochs):
            rounds, orders, times, traces = run_epoch(args, variants, e, d)
            ep = {"step_median_ms": {n: statistics.median(times[n]) for n in names},
                  "step_min_ms": {n: min(times[n]) for n in names},
                  "traces": traces, "ratio": {}, "turns": rounds, "orders": orders}
            for st in STATS:
                ep["ratio"][st] = {
                    n: statistics.median(
                        r[n][st] / base({k: v[st] for k, v in r.items()}, n) for r in rounds)
                    for n in names if n != "plain"
                }
            res["epochs"].append(ep)
            log("   epoch %d: step median plain %.3f / %.3f ms, collector %.3f ms; ratios (fastest step per turn) %s" % (
                e + 1, ep["step_median_ms"]["plain"], ep["step_median_ms"]["plain_b"], ep["step_median_ms"]["collector"],
                "  ".join("%s ×%.4f" % (n, x) for n, x in ep["ratio"]["min"].items())))
    for st in STATS:
        for n in names:
            if n == "plain":
                continue
            per = [ep["ratio"][st][n] for ep in res["epochs"]]
            pooled = [r[n][st] / base({k: v[st] for k, v in r.items()}, n)
                      for ep in res["epochs"] for r in ep["turns"]]
            res["ratio"][st][n] = {"per_epoch": per, "median": statistics.median(per),
                                   "pooled_median": statistics.median(pooled)}
    res["plain_step_median_ms"] = statistics.median(ep["step_median_ms"]["plain"] for ep in res["epochs"])
    res["plain_step_min_ms"] = min(ep["step_min_ms"]["plain"] for ep in res["epochs"])
    res["collector_ratio"] = res["ratio"]["min"]["collector"]["median"]
    return res


def fmt_ns(v):
    if v is None:
        return "-"
    if abs(v) >= 10000:
        return "%.1f µs" % (v / 1000)
    if abs(v) >= 1000:
        return "%.2f µs" % (v / 1000)
    return "%.0f ns" % v if abs(v) >= 10 else "%.1f ns" % v


def verdict(ok):
    return "PASS" if ok else "MISS"


def table(res):
    out = []
    add = out.append
    m = res["machine"]
    add("")
    add("tpuscope collector overhead  (%s; %d cores; load avg %s before, %s after)"
        % (m["when"], m["cores"], "/".join(m["load_before"]), "/".join(m["load_after"])))
    add("=" * 100)
    fmtrow = "%-52s %-30s %-10s %s"
    add(fmtrow % ("measurement", "value", "target", ""))
    add("-" * 100)
    h = res.get("hooks")
    if h:
        rec, pt = h["record"], h["passthrough"]
        p = rec["plain_hook"]
        add(fmtrow % ("plain hook (Event_Await on a ready event → Sync)",
                      "+%s p50, +%s p99" % (fmt_ns(p["added_p50_ns"]), fmt_ns(p["added_p99_ns"])),
                      "≤ 100 ns", verdict(p["added_p50_ns"] <= PLAIN_HOOK_TARGET_NS)))
        add(fmtrow % ("   direct / through the collector (p50 per call)",
                      "%s / %s" % (fmt_ns(p["direct_p50_ns"]), fmt_ns(p["wrapped_p50_ns"])), "", ""))
        q = pt["plain_hook"]
        add(fmtrow % ("   same, TPUSCOPE_ENABLE=0 (pass-through)",
                      "+%s p50, +%s p99" % (fmt_ns(q["added_p50_ns"]), fmt_ns(q["added_p99_ns"])), "", ""))
        for key, label in (("execute_chained", "execute, 4 args, new buffers each call"),
                           ("execute_same_args", "execute, 4 args, same buffers each call"),
                           ("execute_chained_mt", "execute, new buffers, 4 threads at once"),
                           ("zero_copy_read_mt", "zero-copy host read, 4 threads at once")):
            if key not in rec:
                continue
            e = rec[key]
            add(fmtrow % (label,
                          "+%s p50, +%s p99" % (fmt_ns(e["added_p50_ns"]), fmt_ns(e["added_p99_ns"])), "", ""))
            add(fmtrow % ("   direct / through the collector (p50), ratio",
                          "%s / %s, ×%.3f" % (fmt_ns(e["direct_p50_ns"]), fmt_ns(e["wrapped_p50_ns"]), e["ratio_p50"]),
                          "", ""))
            pe = pt[key]
            add(fmtrow % ("   same, TPUSCOPE_ENABLE=0",
                          "+%s p50, ×%.3f" % (fmt_ns(pe["added_p50_ns"]), pe["ratio_p50"]), "", ""))
        t = rec.get("trace") or {}
        add(fmtrow % ("   hooks run recorded / dropped",
                      "%s events / %s dropped" % (t.get("events", "?"), t.get("dropped_total", "?")), "", ""))
        w = h["writer"]
        for key, label in (("sync", "writer drain ceiling: Sync events"),
                           ("execute_and_complete", "writer drain ceiling: Execute + Complete"),
                           ("sync_with_16_frame_stack", "writer drain ceiling: Sync + 16-frame stack")):
            x = w[key]
            add(fmtrow % (label, "%.2f M events/s (queue %d)" % (x["drained_events_per_s"] / 1e6, x["queue_capacity"]),
                          "", ""))
    for c in res.get("capture", []):
        for depth in ("depth_10", "depth_30"):
            r = c[depth]
            add(fmtrow % ("python %s stack, %d frames: direct / C API" % (c["python"], r["direct_frames"]),
                          "%s / %s p50 (p99 %s / %s)" % (fmt_ns(r["direct_p50_ns"]), fmt_ns(r["capi_p50_ns"]),
                                                         fmt_ns(r["direct_p99_ns"]), fmt_ns(r["capi_p99_ns"])), "", ""))
    s = res.get("interleaved")
    if s:
        cfg = s["config"]
        add(fmtrow % ("JAX step %dx%d MLP fwd+bwd+update + 1 host read" % (cfg["batch"], cfg["width"]),
                      "plain %.3f ms median, %.3f ms fastest" % (s["plain_step_median_ms"], s["plain_step_min_ms"]),
                      "", ""))
        r = s["ratio"]["min"]
        add(fmtrow % ("JAX step ratio collector / plain (median of epochs)",
                      "×%.4f" % r["collector"]["median"], "≤ 1.01",
                      verdict(r["collector"]["median"] <= STEP_RATIO_TARGET)))
        add(fmtrow % ("   per epoch (%d × 5 processes, %d turns × %d steps)" % (
            cfg["epochs"], cfg["turns_per_epoch"], cfg["steps_per_block"]),
            " ".join("%.3f" % x for x in r["collector"]["per_epoch"]), "", ""))
        for n, label in (("plain_b", "   control: 2nd plain process / plain (A/A)"),
                         ("collector_agent", "   collector + Python agent / plain"),
                         ("passthrough", "   TPUSCOPE_ENABLE=0 / plain")):
            add(fmtrow % (label, "×%.4f  (%s)" % (r[n]["median"], " ".join("%.3f" % x for x in r[n]["per_epoch"])),
                          "", ""))
        m = s["ratio"]["median"]
        add(fmtrow % ("   with block medians instead of fastest steps",
                      "×%.4f; A/A ×%.4f; agent ×%.4f; off ×%.4f" % (
                          m["collector"]["median"], m["plain_b"]["median"], m["collector_agent"]["median"],
                          m["passthrough"]["median"]), "", ""))
        evs = [ep["traces"].get("collector", {}) for ep in s["epochs"]]
        add(fmtrow % ("   collector traces: events per process, dropped",
                      "%s, %d dropped" % ("/".join(str(e.get("events", "?")) for e in evs),
                                          sum(e.get("dropped_total", 0) for e in evs)), "", ""))
    s = res.get("steps")
    if s:
        cfg = s["config"]
        plain = [rw["plain"]["median_ms"] for rw in s["rounds"]]
        add(fmtrow % ("separate processes: %d rounds, plain step median" % len(plain),
                      "%.3f ms" % statistics.median(plain), "", ""))
        add(fmtrow % ("JAX step ratio collector / plain, separate runs",
                      "×%.4f" % s["collector_ratio_median"], "(≤ 1.01)",
                      verdict(s["collector_ratio_median"] <= STEP_RATIO_TARGET)))
        add(fmtrow % ("   per round", " ".join("%.3f" % x for x in s["collector_ratios"]), "", ""))
        add(fmtrow % ("JAX step ratio collector + agent / plain",
                      "×%.4f" % s["collector_agent_ratio_median"], "", ""))
        add(fmtrow % ("   per round", " ".join("%.3f" % x for x in s["collector_agent_ratios"]), "", ""))
        add(fmtrow % ("JAX step ratio TPUSCOPE_ENABLE=0 / plain",
                      "×%.4f" % s["passthrough_ratio_median"], "", ""))
        ev = [rw["collector"].get("trace", {}) for rw in s["rounds"]]
        n_ev = [e.get("events", 0) for e in ev]
        drops = sum(e.get("dropped_total", 0) for e in ev)
        add(fmtrow % ("   collector traces: events per run, dropped",
                      "%d (%d steps+warmup), %d dropped" % (statistics.median(n_ev), cfg["steps"] + cfg["warmup"], drops),
                      "", ""))
    add("-" * 100)
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hooks-bin", required=True)
    ap.add_argument("--collector", required=True)
    ap.add_argument("--plugin", required=True)
    ap.add_argument("--agent-dir", required=True)
    ap.add_argument("--json", required=True)
    ap.add_argument("--epochs", type=int, default=7)
    ap.add_argument("--blocks", type=int, default=30)
    ap.add_argument("--block-steps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=0)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--skip-interleaved", action="store_true")
    ap.add_argument("--seed", type=int, default=int(time.time()) % 100000)
    ap.add_argument("--skip-hooks", action="store_true")
    ap.add_argument("--skip-capture", action="store_true")
    ap.add_argument("--skip-steps", action="store_true")
    args = ap.parse_args()
    if args.epochs < 5:
        log("note: fewer than 5 epochs (pairs): the step ratio is not the acceptance number")

    res = {"machine": {"when": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "cores": os.cpu_count(),
                       "load_before": load(), "host": platform.node(), "kernel": platform.release()}}
    t0 = time.time()
    if not args.skip_hooks:
        res["hooks"] = run_hooks(args)
    if not args.skip_capture:
        res["capture"] = run_capture(args)
    if not args.skip_interleaved:
        log("== JAX step benchmark: %d epochs of 5 processes, %d turns of %d steps each ..."
            % (args.epochs, args.blocks, args.block_steps))
        res["interleaved"] = run_interleaved(args)
    if not args.skip_steps and args.rounds > 0:
        log("== JAX step benchmark, separate processes: %d rounds × 4 variants ..." % args.rounds)
        res["steps"] = run_steps(args)
    res["machine"]["load_after"] = load()
    res["machine"]["seconds"] = round(time.time() - t0, 1)
    verdicts = {}
    if "hooks" in res:
        verdicts["plain_hook_p50_le_100ns"] = res["hooks"]["record"]["plain_hook"]["added_p50_ns"] <= PLAIN_HOOK_TARGET_NS
    if "interleaved" in res:
        verdicts["step_ratio_le_1_01"] = res["interleaved"]["collector_ratio"] <= STEP_RATIO_TARGET
    if "steps" in res:
        verdicts["step_ratio_separate_runs_le_1_01"] = res["steps"]["collector_ratio_median"] <= STEP_RATIO_TARGET
    res["verdicts"] = verdicts
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(res, f, indent=2)
    print(table(res))
    print("saved %s (%.0f s)" % (args.json, res["machine"]["seconds"]))


if __name__ == "__main__":
    main()
