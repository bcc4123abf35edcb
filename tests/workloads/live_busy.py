"""Workload for the live-viewer tests and benchmark: a jitted JAX loop that executes without a
pause (a process that is never quiet), reading a value back every 100 steps.

Environment:
  LIVE_GATE_DIR  directory of the handshake files (required)
  LIVE_SECONDS   how long the loop runs (default 25)

Writes <dir>/ready (holding its pid) once the loop's graph is compiled, then loops until
LIVE_SECONDS have passed or <dir>/exit exists, writes <dir>/done and prints a RESULT line.
"""
import os
import time

import jax
import jax.numpy as jnp

GATE_DIR = os.environ["LIVE_GATE_DIR"]
SECONDS = float(os.environ.get("LIVE_SECONDS", "25"))


def signal(name):
    tmp = os.path.join(GATE_DIR, f".{name}.tmp")
    with open(tmp, "w") as f:
        f.write(str(os.getpid()))
    os.rename(tmp, os.path.join(GATE_DIR, name))


def main():
    step = jax.jit(lambda v: v * 0.5 + 1.0)
    x = step(jnp.arange(64.0)).block_until_ready()
    signal("ready")
    stop = os.path.join(GATE_DIR, "exit")
    end = time.monotonic() + SECONDS
    steps = 0
    while time.monotonic() < end and not os.path.exists(stop):
        for _ in range(100):
            x = step(x)
        float(x[0])
        steps += 100
    signal("done")
    print(f"RESULT live_busy steps={steps}")


if __name__ == "__main__":
    main()
