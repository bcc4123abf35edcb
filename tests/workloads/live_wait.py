"""Workload for the live-view tests: a jitted JAX loop that stops at two gates, so a test can
attach while it runs and decide when it ends.

Environment:
  LIVE_GATE_DIR  directory of the handshake files (required)
  LIVE_STEPS     steps between the gates (default 2000)

1. compiles and runs a few steps, writes <dir>/ready (holding its pid), waits for <dir>/go;
2. runs LIVE_STEPS steps over four shapes (three more compiles), reading a value back every step
   (a device-to-host transfer and a sync), writes <dir>/done, waits for <dir>/exit;
3. prints a RESULT line and exits.
A gate left closed for 60 s ends the run with status 3 (a failed test must not leave it behind).
"""
import os
import sys
import time

import jax
import jax.numpy as jnp

GATE_DIR = os.environ["LIVE_GATE_DIR"]
STEPS = int(os.environ.get("LIVE_STEPS", "2000"))


def signal(name):
    tmp = os.path.join(GATE_DIR, f".{name}.tmp")
    with open(tmp, "w") as f:
        f.write(str(os.getpid()))
    os.rename(tmp, os.path.join(GATE_DIR, name))


def wait(name):
    path = os.path.join(GATE_DIR, name)
    deadline = time.monotonic() + 60
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            print(f"gate {name} never opened", file=sys.stderr)
            sys.exit(3)
        time.sleep(0.01)


def main():
    step = jax.jit(lambda v: v * 0.5 + 1.0)
    x = jnp.arange(8.0)
    for _ in range(3):
        x = step(x)
    x.block_until_ready()
    signal("ready")
    wait("go")
    total = 0.0
    for i in range(STEPS):
        n = 8 * (1 + (i * 4) // STEPS)  # four shapes, one after another
        y = step(jnp.full((n,), float(i)))
        total += float(y[0])
    signal("done")
    wait("exit")
    print(f"RESULT live_wait steps={STEPS} total={total}")


if __name__ == "__main__":
    main()
