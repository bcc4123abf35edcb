"""Bug: `float(loss)` inside the training loop, every step, to check for divergence.

The jitted step itself compiles once and the shapes never change, but `float(loss)` copies the
loss to the host and blocks until the step that produced it has finished: every step becomes a
host sync, so the host can never run ahead of the device (no dispatch pipelining).

Expected diagnosis: one host sync per step (40 device->host reads of an f32[] scalar) at the
line marked `tpuscope: host_sync`; no recompiles. Fix: check the loss every N steps, or keep
the check on device (e.g. `jnp.isfinite` folded into the step) and read it once at the end.
"""
import math

import jax
import jax.numpy as jnp
import numpy as np

STEPS = 40
BATCH = 128
LR = 0.05


def loss_fn(params, x, y):
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    pred = (h @ params["w2"])[:, 0]
    return jnp.mean((pred - y) ** 2)


@jax.jit
def train_step(params, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    params = jax.tree.map(lambda p, g: p - LR * g, params, grads)
    return params, loss


def main():
    rng = np.random.default_rng(0)
    w_true = rng.standard_normal((16,)).astype(np.float32)
    xs = rng.standard_normal((8, BATCH, 16)).astype(np.float32)
    ys = np.tanh(xs @ w_true).astype(np.float32)
    batches = [(jax.device_put(x), jax.device_put(y)) for x, y in zip(xs, ys)]
    params = jax.device_put({
        "w1": rng.standard_normal((16, 32)).astype(np.float32) * 0.25,
        "b1": np.zeros((32,), np.float32),
        "w2": rng.standard_normal((32, 1)).astype(np.float32) * 0.25,
    })
    history = []
    for step in range(STEPS):
        x, y = batches[step % len(batches)]
        params, loss = train_step(params, x, y)
        loss_value = float(loss)  # tpuscope: host_sync
        if not math.isfinite(loss_value):
            raise FloatingPointError(f"loss diverged at step {step}")
        history.append(loss_value)
    print(f"RESULT float_loss_in_loop steps={STEPS} loss={history[-1]:.6f} "
          f"min_loss={min(history):.6f}")


if __name__ == "__main__":
    main()
