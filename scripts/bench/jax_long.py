"""A JAX training loop that runs for a given time, for the real long trace of the report and view
benchmarks (scripts/bench/real_trace.sh records it under `tpuscope run`).

What a real loop does, so the trace holds what a long run's does:
- a jitted MLP train step with donated parameters, fed a new host batch every step (host-to-device
  transfers), its loss read every LOG_EVERY steps (`float(loss)`: a host sync from one line);
- an eval step (another executable) every EVAL_EVERY steps, its metric read;
- a learning rate passed as a Python float that decays every DECAY_EVERY steps: baked in as a
  constant, so each new value recompiles the train step (a recompile family with its HLO);
- epochs of uneven length whose last batch is smaller (a second shape, compiled once);
- steps of uneven cost (a few batch sizes cycle).

Usage: jax_long.py [--seconds S]   (default 180)
Prints `RESULT steps=N compiles_expected=K` at the end.
"""
import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

WIDTH = 128
BATCH = 64
LOG_EVERY = 20
EVAL_EVERY = 2000
DECAY_EVERY = 5000
EPOCH = 1500


def loss_fn(p, x, y):
    h = jnp.tanh(x @ p["w1"] + p["b1"])
    h = jnp.tanh(h @ p["w2"] + p["b2"])
    return jnp.mean(((h @ p["w3"])[:, 0] - y) ** 2)


def train_step(p, x, y, lr):
    loss, g = jax.value_and_grad(loss_fn)(p, x, y)
    return jax.tree.map(lambda a, b: a - lr * b, p, g), loss


# `lr` is static: a Python float baked into the program, so a new value compiles anew.
train = jax.jit(train_step, static_argnums=3, donate_argnums=0)


@jax.jit
def evaluate(p, x, y):
    return loss_fn(p, x, y)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=180.0)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    s = 1.0 / np.sqrt(WIDTH)
    p = {
        "w1": jnp.asarray(rng.standard_normal((32, WIDTH)).astype(np.float32) * s),
        "b1": jnp.zeros((WIDTH,), jnp.float32),
        "w2": jnp.asarray(rng.standard_normal((WIDTH, WIDTH)).astype(np.float32) * s),
        "b2": jnp.zeros((WIDTH,), jnp.float32),
        "w3": jnp.asarray(rng.standard_normal((WIDTH, 1)).astype(np.float32) * s),
    }
    xs = rng.standard_normal((16, BATCH, 32)).astype(np.float32)
    ys = rng.standard_normal((16, BATCH)).astype(np.float32)
    ex, ey = jax.device_put(xs[0]), jax.device_put(ys[0])
    lr = 0.05
    steps = 0
    lrs = {lr}
    end = time.monotonic() + a.seconds
    while time.monotonic() < end:
        in_epoch = steps % EPOCH
        # The last batch of an epoch is short.
        n = BATCH // 2 if in_epoch == EPOCH - 1 else BATCH
        x, y = xs[steps % 16][:n], ys[steps % 16][:n]
        p, loss = train(p, x, y, lr)
        steps += 1
        if steps % LOG_EVERY == 0:
            float(loss)
        if steps % EVAL_EVERY == 0:
            float(evaluate(p, ex, ey))
        if steps % DECAY_EVERY == 0:
            lr = round(lr * 0.8, 6)
            lrs.add(lr)
    jax.block_until_ready(p)
    # Each learning rate compiles the full and the short batch's step; plus the eval.
    print(f"RESULT steps={steps} compiles_expected={2 * len(lrs) + 1}", flush=True)


if __name__ == "__main__":
    main()
