"""Workload: N Python threads, each compiling jitted functions over varying shapes and reading
results back to the host in a loop, for a fixed duration. Every result is checked against numpy.

  python tests/workloads/threads_stress.py [--threads N] [--seconds S]
  (defaults: $TPUSCOPE_STRESS_THREADS or 8, $TPUSCOPE_STRESS_SECONDS or 60)

Counts vary with speed; the RESULT line (threads, errors) is deterministic on a correct run.
Exit status 1 if any result was wrong or any thread raised.
"""
import argparse
import os
import sys
import threading
import time

import jax
import jax.monitoring
import jax.numpy as jnp
import numpy as np

_lock = threading.Lock()
_backend_compiles = 0


def _on_duration(event, duration, **kwargs):
    global _backend_compiles
    if event == "/jax/core/compile/backend_compile_duration":
        with _lock:
            _backend_compiles += 1


jax.monitoring.register_event_duration_secs_listener(_on_duration)

# Shared jitted functions (contention on JAX's caches) and their numpy references.
OPS = [
    (jax.jit(lambda x: (x * 2.0 + 1.0).sum()), lambda x: (x * 2.0 + 1.0).sum()),
    (jax.jit(lambda x: (x @ x.T).sum()), lambda x: (x @ x.T).sum()),
    (jax.jit(lambda x: jnp.maximum(x, 0.5).sum()), lambda x: np.maximum(x, 0.5).sum()),
]


def worker(tid, deadline, stats, errors):
    it = compiles_forced = reads = 0
    try:
        while time.monotonic() < deadline:
            rows = 4 + (it * 7 + tid * 3) % 40
            cols = 8 + (it * 5 + tid) % 24
            x = (np.arange(rows * cols, dtype=np.float32).reshape(rows, cols) % 5) * 0.25
            if it % 10 == 9:
                # A brand-new jitted function: always a fresh trace + compile.
                k = float(it % 13)
                fn = jax.jit(lambda a, k=k: (a + k).sum())
                ref = (x + k).sum()
                compiles_forced += 1
            else:
                fn, npf = OPS[(it + tid) % len(OPS)]
                ref = npf(x)
            got = float(fn(jnp.asarray(x)))  # host read
            reads += 1
            if not np.isclose(got, ref, rtol=1e-4, atol=1e-3):
                errors.append(f"thread {tid} iter {it}: got {got} want {ref}")
            it += 1
    except Exception as e:  # noqa: BLE001 - report any failure of the thread
        errors.append(f"thread {tid} raised {type(e).__name__}: {e}")
    stats[tid] = (it, compiles_forced, reads)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=int(os.environ.get("TPUSCOPE_STRESS_THREADS", "8")))
    ap.add_argument("--seconds", type=float, default=float(os.environ.get("TPUSCOPE_STRESS_SECONDS", "60")))
    args = ap.parse_args()

    stats, errors = {}, []
    t0 = time.monotonic()
    deadline = t0 + args.seconds
    threads = [threading.Thread(target=worker, args=(i, deadline, stats, errors), name=f"stress-{i}")
               for i in range(args.threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    iters = sum(s[0] for s in stats.values())
    forced = sum(s[1] for s in stats.values())
    reads = sum(s[2] for s in stats.values())
    print(f"backend={jax.default_backend()} devices={jax.device_count()}")
    print(f"TOTALS threads={args.threads} seconds={wall:.1f} iterations={iters} host_reads={reads} "
          f"fresh_functions={forced} backend_compiles={_backend_compiles}")
    for e in errors[:10]:
        print("ERROR", e, file=sys.stderr)
    print(f"RESULT threads_stress threads={args.threads} finished={len(stats)} errors={len(errors)}")
    sys.exit(1 if errors or len(stats) != args.threads else 0)


if __name__ == "__main__":
    main()
