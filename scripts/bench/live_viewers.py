"""Live-viewer benchmark: what viewers cost a busy workload, how fast a snapshot answers, and what
a flooding socket costs the client.

Usage: live_viewers.py --tpuscope BIN --collector SO --python PY --plugin SO [--seconds N]
                       [--viewers N] [--snapshots N] [--skip-flood] [--json OUT]

Parts:
- workload memory: tests/workloads/live_busy.py (a jitted JAX loop that never pauses) under
  `tpuscope run`, once with no viewer and once with N viewers that connect and never read; the
  workload's VmRSS is sampled every 0.5 s, and its growth from `ready` to the end (and VmHWM) is
  compared. The collector's stated bound for all viewers together is printed beside it.
- snapshot latency: `tpuscope attach PID --snapshot --json` timed several times on the busy loop.
- flood: a fake socket at the path `attach` uses (this script's pid) that sends a valid trace
  header and then endless valid frames (and, second case, endless garbage); the client's VmHWM
  (from /proc while it runs; it runs under an address-space limit of 8 GiB so a failure cannot
  take the machine) and what it printed.

A benchmark, not a test: numbers are printed, the exit status stays 0.
"""
import argparse
import json
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def status_kib(pid, field):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def wait_file(path, proc, timeout=120):
    start = time.monotonic()
    while not os.path.exists(path):
        if proc.poll() is not None or time.monotonic() - start > timeout:
            raise RuntimeError(f"{path} never appeared (workload status {proc.poll()})")
        time.sleep(0.01)
    with open(path) as f:
        return f.read().strip()


def start_workload(args, tmp, xdg, seconds):
    gates = os.path.join(tmp, "gates")
    out = os.path.join(tmp, "out")
    os.makedirs(gates, exist_ok=True)
    os.makedirs(out, exist_ok=True)
    env = dict(os.environ, XDG_RUNTIME_DIR=xdg, LIVE_GATE_DIR=gates, LIVE_SECONDS=str(seconds),
               TPUSCOPE_COLLECTOR=args.collector)
    proc = subprocess.Popen(
        [args.tpuscope, "run", "--out", out + "/", "--plugin", args.plugin, "--", args.python,
         os.path.join(ROOT, "tests/workloads/live_busy.py")],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    pid = int(wait_file(os.path.join(gates, "ready"), proc))
    return proc, pid, gates


def memory_run(args, viewers):
    with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryDirectory() as xdg:
        proc, pid, gates = start_workload(args, tmp, xdg, args.seconds)
        sock_path = os.path.join(xdg, "tpuscope", f"{pid}.sock")
        conns = []
        for _ in range(viewers):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(sock_path)
            conns.append(s)
        rss0 = status_kib(pid, "VmRSS")
        peak = rss0
        samples = []
        hwm = None
        while not os.path.exists(os.path.join(gates, "done")):
            r = status_kib(pid, "VmRSS")
            h = status_kib(pid, "VmHWM")
            if r is None:
                break
            hwm = h
            peak = max(peak, r)
            samples.append(r)
            time.sleep(0.5)
        out, err = proc.communicate(timeout=120)
        for s in conns:
            s.close()
        steps = next((l for l in out.decode(errors="replace").splitlines() if l.startswith("RESULT")), "")
        return {
            "viewers": viewers,
            "rss_at_ready_mib": rss0 / 1024,
            "rss_peak_mib": peak / 1024,
            "rss_last_mib": (samples[-1] if samples else rss0) / 1024,
            "growth_mib": (peak - rss0) / 1024,
            "vmhwm_mib": (hwm or 0) / 1024,
            "result": steps,
            "status": proc.returncode,
        }


def snapshot_run(args):
    times = []
    with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryDirectory() as xdg:
        # Runs until told to stop (or 10 minutes).
        proc, pid, gates = start_workload(args, tmp, xdg, 600)
        time.sleep(3)
        env = dict(os.environ, XDG_RUNTIME_DIR=xdg)
        for _ in range(args.snapshots):
            t0 = time.monotonic()
            r = subprocess.run([args.tpuscope, "attach", str(pid), "--snapshot", "--json"],
                               env=env, capture_output=True)
            dt = time.monotonic() - t0
            ok = r.returncode == 0
            execs = None
            if ok:
                try:
                    execs = json.loads(r.stdout)["traces"][0]["events"]
                except ValueError:
                    ok = False
            times.append({"seconds": dt, "ok": ok, "events": execs,
                          "stderr": r.stderr.decode(errors="replace").strip()[:200]})
            time.sleep(1)
        open(os.path.join(gates, "exit"), "w").close()
        proc.communicate(timeout=120)
    return times


def frame(kind, payload):
    crc = zlib.crc32(struct.pack("<HH", kind, 0) + payload) & 0xFFFFFFFF
    return struct.pack("<IHHI", len(payload), kind, 0, crc) + payload


def flood_run(args, garbage):
    """A fake live socket for this process's pid; returns the client's peak RSS and output."""
    with tempfile.TemporaryDirectory() as xdg:
        d = os.path.join(xdg, "tpuscope")
        os.makedirs(d, mode=0o700)
        path = os.path.join(d, f"{os.getpid()}.sock")
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(path)
        srv.listen(4)
        stop = threading.Event()

        def serve():
            try:
                c, _ = srv.accept()
            except OSError:
                return
            header = b"TPUSCOPE" + struct.pack("<HHI", 1, 0, 16)
            # Execute records (kind 18): t_ns=1 (field 1 varint); garbage: bytes that are no frame.
            chunk = (os.urandom(1 << 16) if garbage else frame(18, b"\x08\x01") * 4096)
            try:
                c.sendall(header)
                while not stop.is_set():
                    c.sendall(chunk)
            except OSError:
                pass
            finally:
                c.close()

        t = threading.Thread(target=serve, daemon=True)
        t.start()
        env = dict(os.environ, XDG_RUNTIME_DIR=xdg)
        t0 = time.monotonic()
        p = subprocess.Popen(["prlimit", f"--as={8 << 30}", "--", args.tpuscope, "attach",
                              str(os.getpid()), "--snapshot"],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        hwm = 0
        killed = False
        while p.poll() is None:
            h = status_kib(p.pid, "VmHWM")
            if h:
                hwm = max(hwm, h)
            if time.monotonic() - t0 > 60:
                p.kill()
                killed = True
            time.sleep(0.05)
        out, err = p.communicate()
        dt = time.monotonic() - t0
        stop.set()
        srv.close()
        return {"garbage": garbage, "client_vmhwm_mib": hwm / 1024, "seconds": dt,
                "status": p.returncode, "killed_after_60s": killed,
                "stderr": err.decode(errors="replace").strip()[-400:]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tpuscope", required=True)
    ap.add_argument("--collector", required=True)
    ap.add_argument("--python", required=True)
    ap.add_argument("--plugin", required=True)
    ap.add_argument("--seconds", type=float, default=25)
    ap.add_argument("--viewers", type=int, default=16)
    ap.add_argument("--snapshots", type=int, default=5)
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument("--skip-snapshot", action="store_true")
    ap.add_argument("--skip-flood", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()
    result = {"machine": f"{os.cpu_count()} cores, load {open('/proc/loadavg').read().split()[:3]}"}
    if not args.skip_memory:
        log(f"== workload memory, no viewer, {args.seconds:.0f} s ...")
        base = memory_run(args, 0)
        log(f"== workload memory, {args.viewers} viewers that never read ...")
        idle = memory_run(args, args.viewers)
        result["memory"] = [base, idle]
        for m in (base, idle):
            print(f"viewers {m['viewers']:>2}: RSS at ready {m['rss_at_ready_mib']:.0f} MiB, peak "
                  f"{m['rss_peak_mib']:.0f} MiB (growth {m['growth_mib']:.0f} MiB), VmHWM "
                  f"{m['vmhwm_mib']:.0f} MiB  [{m['result']}]")
        print(f"growth with {args.viewers} idle viewers minus growth without: "
              f"{idle['growth_mib'] - base['growth_mib']:.1f} MiB; VmHWM difference "
              f"{idle['vmhwm_mib'] - base['vmhwm_mib']:.1f} MiB")
    if not args.skip_snapshot:
        log("== snapshot latency on the busy loop ...")
        snaps = snapshot_run(args)
        result["snapshots"] = snaps
        for s in snaps:
            print(f"attach --snapshot: {s['seconds']:.2f} s ok={s['ok']} events={s['events']}"
                  + ("" if s["ok"] else f" stderr={s['stderr']}"))
    if not args.skip_flood:
        for garbage in (False, True):
            log(f"== flooding socket ({'garbage' if garbage else 'valid frames'}) ...")
            f = flood_run(args, garbage)
            result.setdefault("flood", []).append(f)
            print(f"flood of {'garbage' if garbage else 'valid frames'}: client VmHWM "
                  f"{f['client_vmhwm_mib']:.0f} MiB, {f['seconds']:.1f} s, status {f['status']}"
                  f"{' (killed after 60 s)' if f['killed_after_60s'] else ''}: {f['stderr']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
