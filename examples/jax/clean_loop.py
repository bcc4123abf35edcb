"""A clean JAX training loop: nothing to find.

The train step is jitted once; the learning rate schedule is computed inside it from a device
step counter (so it is data, not a baked-in constant); every batch has the same shape; the
losses stay on the device and are read once, after the loop.

Parameters are initialized with eager `jax.numpy` calls, as real code does: each of those is a
tiny one-off compile (`jit_broadcast_in_dim`, `jit_stage`, ...) executed once, some of them under
the same executable name with different shapes. That is not a recompile problem.

Expected diagnosis: no finding (one compile of `jit_train_step` executed every step, no host
sync inside the loop, one read at the end).
"""
import jax
import jax.numpy as jnp
import numpy as np

STEPS = 48
BATCH = 64
BASE_LR = 0.05
DECAY_EVERY = 8


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


@jax.jit
def train_step(params, step, x, y):
    lr = BASE_LR * 0.7 ** (step // DECAY_EVERY)  # step is a device array: no recompile
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    params = jax.tree.map(lambda p, g: p - lr * g, params, grads)
    return params, step + 1, loss


def main():
    rng = np.random.default_rng(0)
    w_true = rng.standard_normal((16,)).astype(np.float32)
    xs = rng.standard_normal((8, BATCH, 16)).astype(np.float32)
    ys = np.tanh(xs @ w_true).astype(np.float32)
    batches = [(jax.device_put(x), jax.device_put(y)) for x, y in zip(xs, ys)]
    params = init_params(rng)  # tpuscope-not: shape_changed (one-off eager init compiles)
    step = jax.device_put(np.int32(0))
    losses = []
    for i in range(STEPS):
        x, y = batches[i % len(batches)]
        params, step, loss = train_step(params, step, x, y)
        losses.append(loss)
    losses = np.asarray(jnp.stack(losses))  # tpuscope-not: host_sync (one read, after the loop)
    print(f"RESULT clean_loop steps={STEPS} loss={losses[-1]:.6f} min_loss={losses.min():.6f}")


if __name__ == "__main__":
    main()
