"""Workload for the killed-run tests and sample: a jitted train step every 20 ms, its weights
read back to the host each step, that runs until something kills it.

Environment:
  LIVE_GATE_DIR  directory of the handshake file (required)
  READY_AFTER    steps before <dir>/ready is written, holding the pid (default 10)

Never ends by itself within 60 s; past that it exits with status 3 (a test that failed to kill
it must not leave it behind).
"""
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

GATE_DIR = os.environ["LIVE_GATE_DIR"]
READY_AFTER = int(os.environ.get("READY_AFTER", "10"))


def signal(name):
    tmp = os.path.join(GATE_DIR, f".{name}.tmp")
    with open(tmp, "w") as f:
        f.write(str(os.getpid()))
    os.rename(tmp, os.path.join(GATE_DIR, name))


def loss_fn(w, x, y):
    return jnp.mean((x @ w - y) ** 2)


@jax.jit
def train_step(w, x, y):
    return w - 0.1 * jax.grad(loss_fn)(w, x, y)


def main():
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((64, 8)).astype(np.float32))
    y = jnp.asarray(rng.standard_normal(64).astype(np.float32))
    w = jnp.zeros((8,), jnp.float32)
    steps = 0
    end = time.monotonic() + 60
    while time.monotonic() < end:
        w = train_step(w, x, y)
        np.asarray(w)  # the host reads the weights: one transfer a step
        steps += 1
        if steps == READY_AFTER:
            signal("ready")
        time.sleep(0.02)
    print(f"never killed after {steps} steps", file=sys.stderr)
    sys.exit(3)


if __name__ == "__main__":
    main()
