"""Workload: a train step that closes over a Python-float learning rate which changes every
epoch. The step is re-created each epoch, so every epoch recompiles with the learning rate baked
into the HLO as an f32 constant (the only HLO difference between the compiles).

Run on a plugin by env, e.g.:
  PJRT_NAMES_AND_LIBRARY_PATHS=cpuplugin:/path/pjrt_c_api_cpu_plugin.so JAX_PLATFORMS=cpuplugin \
      python tests/workloads/jax_lr.py
"""
import jax
import jax.numpy as jnp
import numpy as np

EPOCHS = 4
STEPS_PER_EPOCH = 5


def loss_fn(w, x, y):
    return jnp.mean((x @ w - y) ** 2)


def main():
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.standard_normal((64, 8)).astype(np.float32))
    w_true = jnp.asarray(np.arange(8, dtype=np.float32) / 8.0)
    y = x @ w_true
    w = jnp.zeros((8,), jnp.float32)
    lr = 0.1
    for epoch in range(EPOCHS):

        @jax.jit
        def train_step(w, x, y):
            g = jax.grad(loss_fn)(w, x, y)
            return w - lr * g  # lr is a Python float: baked into the compiled program

        for _ in range(STEPS_PER_EPOCH):
            w = train_step(w, x, y)
        loss = float(loss_fn(w, x, y))
        print(f"epoch {epoch} lr={lr} loss={loss:.6f}")
        lr = lr * 0.5
    print(f"RESULT jax_lr epochs={EPOCHS} loss={float(loss_fn(w, x, y)):.6f} wsum={float(w.sum()):.6f}")


if __name__ == "__main__":
    main()
