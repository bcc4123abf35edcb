"""Bug: batches of varying size are fed to a jitted train step.

A bucketing data loader yields batches of 96, 100, 112 or 128 examples. `jax.jit` specializes
on input shapes, so every new batch size traces and compiles `train_step` again: four compiles
of the same function, whose programs differ only in the batch dimension of the `x`/`y`
parameters (f32[96,16] vs f32[100,16] ...) and the shapes derived from it (including the
1/batch constant of the mean).

Expected diagnosis: recompiles of `jit_train_step`, cause "shape changed" (parameter shapes
differ in dimension 0 of the batch arguments), 4 distinct shapes over 24 steps, triggered at the
line marked `tpuscope-trigger: shape_changed`; the shape comes from the line marked
`tpuscope: shape_changed`. Fix: pad batches to one size (and mask), or drop the ragged ones.
"""
import jax
import jax.numpy as jnp
import numpy as np

STEPS = 24
BATCH_SIZES = (96, 100, 112, 128)
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


def batches(rng, xs, ys):
    """A loader that groups examples into buckets of a few sizes (e.g. by length)."""
    start = 0
    for _ in range(STEPS):
        size = int(rng.choice(BATCH_SIZES))
        idx = np.arange(start, start + size) % len(xs)
        start += size
        yield xs[idx], ys[idx]  # tpuscope: shape_changed


def main():
    rng = np.random.default_rng(0)
    w_true = rng.standard_normal((16,)).astype(np.float32)
    xs = rng.standard_normal((2048, 16)).astype(np.float32)
    ys = np.tanh(xs @ w_true).astype(np.float32)
    params = jax.device_put({
        "w1": rng.standard_normal((16, 32)).astype(np.float32) * 0.25,
        "b1": np.zeros((32,), np.float32),
        "w2": rng.standard_normal((32, 1)).astype(np.float32) * 0.25,
    })
    losses = []
    sizes = []
    for x, y in batches(rng, xs, ys):
        params, loss = train_step(params, x, y)  # tpuscope-trigger: shape_changed
        losses.append(loss)
        sizes.append(x.shape[0])
    losses = np.asarray(jnp.stack(losses))  # tpuscope-not: host_sync (one read, after the loop)
    print("batch sizes: " + " ".join(str(s) for s in sizes))
    print(f"RESULT variable_batches steps={STEPS} shapes={len(set(sizes))} loss={losses[-1]:.6f}")


if __name__ == "__main__":
    main()
