"""One process of the step-time benchmark: a jitted training-like step on whatever PJRT plugin the
environment selects (`PJRT_NAMES_AND_LIBRARY_PATHS` + `JAX_PLATFORMS`), timed per step.

Usage: jax_step.py [--steps N] [--warmup N] [--batch B] [--width D] [--donate 0|1] [--serve]
Prints one line `STEP {json}` with the median and quartiles of the step time (ms).

With `--serve` the process warms up, prints `READY`, then waits on stdin: each line `RUN k` runs k
steps and answers `BLOCK {json}` (the block's step times); `EXIT` ends it. The benchmark keeps one
such process per variant alive and has them take turns, so every variant runs under the same
machine load at a granularity of a fraction of a second (a waiting process uses no CPU).

The step is a 2-layer MLP (x: [B, D], w1: [D, D], w2: [D, D]) forward, backward and SGD update,
jitted once, then one host read of the loss per step (`float(loss)`), as training loops do when
they log. Parameters are donated by default, so each step's inputs are the previous step's
outputs (new buffers every step).
"""
import argparse
import json
import os
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--donate", type=int, default=1)
    ap.add_argument("--serve", action="store_true")
    a = ap.parse_args()

    rng = np.random.default_rng(0)
    scale = 1.0 / np.sqrt(a.width)
    params = {
        "w1": jnp.asarray(rng.standard_normal((a.width, a.width), dtype=np.float32) * scale),
        "b1": jnp.zeros((a.width,), jnp.float32),
        "w2": jnp.asarray(rng.standard_normal((a.width, a.width), dtype=np.float32) * scale),
        "b2": jnp.zeros((a.width,), jnp.float32),
    }
    x = jnp.asarray(rng.standard_normal((a.batch, a.width), dtype=np.float32))
    y = jnp.asarray(rng.standard_normal((a.batch, a.width), dtype=np.float32))

    def loss_fn(p, x, y):
        h = jnp.tanh(x @ p["w1"] + p["b1"])
        out = h @ p["w2"] + p["b2"]
        return jnp.mean((out - y) ** 2)

    def step(p, x, y):
        loss, g = jax.value_and_grad(loss_fn)(p, x, y)
        p = jax.tree_util.tree_map(lambda w, gw: w - 1e-3 * gw, p, g)
        return p, loss

    step = jax.jit(step, donate_argnums=(0,) if a.donate else ())

    for _ in range(a.warmup):
        params, loss = step(params, x, y)
        float(loss)
    if a.serve:
        print("READY " + json.dumps({"backend": jax.default_backend(), "pid": os.getpid()}), flush=True)
        for line in sys.stdin:
            cmd = line.split()
            if not cmd or cmd[0] != "RUN":
                break
            times = []
            for _ in range(int(cmd[1])):
                t0 = time.perf_counter()
                params, loss = step(params, x, y)
                float(loss)
                times.append((time.perf_counter() - t0) * 1e3)
            print("BLOCK " + json.dumps({"times_ms": times}), flush=True)
        return
    times = []
    mono_start = time.monotonic()  # CLOCK_MONOTONIC: lines up with `perf record -k mono`
    t_all = time.perf_counter()
    for _ in range(a.steps):
        t0 = time.perf_counter()
        params, loss = step(params, x, y)
        last = float(loss)  # the per-step host read
        times.append(time.perf_counter() - t0)
    wall = time.perf_counter() - t_all
    mono_end = time.monotonic()
    q = statistics.quantiles(times, n=4)
    print(
        "STEP "
        + json.dumps(
            {
                "backend": jax.default_backend(),
                "devices": len(jax.devices()),
                "steps": a.steps,
                "median_ms": statistics.median(times) * 1e3,
                "q1_ms": q[0] * 1e3,
                "q3_ms": q[2] * 1e3,
                "mean_ms": wall / a.steps * 1e3,
                "loss": last,
                "pid": os.getpid(),
                "loop_monotonic_s": [mono_start, mono_end],
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
