"""Bug: the learning rate is a Python float closed over by the jitted train step, and the step
is rebuilt every epoch with the decayed rate.

JAX bakes a closed-over Python float into the traced program as a constant, so every epoch
traces and compiles `train_step` again; the compiled programs differ only in that one f32
constant (0.05, 0.035, 0.0245, ...).

Expected diagnosis: one recompile of `jit_train_step` per epoch after the first, cause
"constant changed" (an f32 scalar constant holding the learning rate), pointing at the line
marked `tpuscope: constant_changed` (where `lr` enters the program; the compile itself is
requested at the line marked `tpuscope-trigger: constant_changed`). Fix: pass the learning
rate as an argument (`train_step(params, x, y, lr)`) or compute it from a step counter inside
the jitted function.
"""
import jax
import jax.numpy as jnp
import numpy as np

EPOCHS = 6
STEPS_PER_EPOCH = 8
BATCH = 64
BASE_LR = 0.05
DECAY = 0.7


def init_params(rng):
    return {
        "w1": jnp.asarray(rng.standard_normal((16, 32)).astype(np.float32) * 0.25),
        "b1": jnp.zeros((32,), jnp.float32),
        "w2": jnp.asarray(rng.standard_normal((32, 1)).astype(np.float32) * 0.25),
        "b2": jnp.zeros((1,), jnp.float32),
    }


def loss_fn(params, x, y):
    h = jnp.tanh(x @ params["w1"] + params["b1"])
    pred = (h @ params["w2"] + params["b2"])[:, 0]
    return jnp.mean((pred - y) ** 2)


def make_train_step(lr):
    @jax.jit
    def train_step(params, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        params = jax.tree.map(lambda p, g: p - lr * g, params, grads)  # tpuscope: constant_changed
        return params, loss

    return train_step


def main():
    rng = np.random.default_rng(0)
    w_true = rng.standard_normal((16,)).astype(np.float32)
    xs = rng.standard_normal((STEPS_PER_EPOCH, BATCH, 16)).astype(np.float32)
    ys = np.tanh(xs @ w_true).astype(np.float32)
    batches = [(jax.device_put(x), jax.device_put(y)) for x, y in zip(xs, ys)]
    params = init_params(rng)  # tpuscope-not: shape_changed (one-off eager init compiles)
    lr = BASE_LR
    epoch_losses = []
    for epoch in range(EPOCHS):
        train_step = make_train_step(lr)
        for x, y in batches:
            params, loss = train_step(params, x, y)  # tpuscope-trigger: constant_changed
        epoch_losses.append(loss)
        lr *= DECAY
    losses = np.asarray(jnp.stack(epoch_losses))  # tpuscope-not: host_sync (after the loop)
    print("epoch losses: " + " ".join(f"{v:.5f}" for v in losses))
    print(f"RESULT lr_python_float epochs={EPOCHS} steps={EPOCHS * STEPS_PER_EPOCH} "
          f"loss={losses[-1]:.6f} final_lr={lr / DECAY:.6f}")


if __name__ == "__main__":
    main()
