"""Corpus: an equinox MLP classifier trained the way equinox's examples train
(`eqx.filter_jit` + `eqx.filter_value_and_grad`, optax, a step-based loop over an infinite
shuffled dataloader), with a step-decay learning rate handed to the step through
`optax.inject_hyperparams`. Synthetic data, 64 steps of 32 rows (1044 rows = 32 full batches of
32 and a partial batch of 20 per epoch, so 64 steps are two epochs).

Cases:
  clean             the loader drops the partial batch; the learning rate goes in as a float32
                    array (a traced leaf).
  python_float_lr   the learning rate goes in as a Python float: filter_jit makes non-array
                    leaves static, so every new rate (4 over the run) compiles `make_step` again
                    with the rate baked in as a constant.
  partial_batch     the loader keeps the partial batch of 20: `make_step` compiles a second time
                    at step 32.

Run: python equinox_mlp.py --case CASE
"""
import argparse
import sys

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

CASES = ("clean", "python_float_lr", "partial_batch")

NUM_FEATURES = 32
NUM_CLASSES = 10
N_TRAIN = 1044  # 32 full batches of 32 and one partial batch of 20
BATCH_SIZE = 32
STEPS = 64
LEARNING_RATE = 3e-3
LR_DECAY_EVERY = 16


def make_dataset():
    """Synthetic classification data: labels from a fixed random linear teacher."""
    rng = np.random.default_rng(0)
    teacher = rng.standard_normal((NUM_FEATURES, NUM_CLASSES)).astype(np.float32)
    x = rng.standard_normal((N_TRAIN, NUM_FEATURES)).astype(np.float32)
    y = np.argmax(x @ teacher, axis=-1).astype(np.int32)
    return x, y


def dataloader(arrays, batch_size, *, seed, keep_partial):
    """Infinite shuffled batches, as in equinox's examples (numpy instead of jax.random)."""
    dataset_size = arrays[0].shape[0]
    rng = np.random.default_rng(seed)
    while True:
        perm = rng.permutation(dataset_size)
        if keep_partial:
            starts = range(0, dataset_size, batch_size)  # tpuscope[partial_batch]: shape_changed
        else:
            starts = range(0, dataset_size - batch_size + 1, batch_size)
        for start in starts:
            batch_perm = perm[start : start + batch_size]
            yield tuple(array[batch_perm] for array in arrays)


def loss(model, x, y):
    logits = jax.vmap(model)(x)
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()


optim = optax.inject_hyperparams(optax.adamw)(learning_rate=LEARNING_RATE, weight_decay=1e-4)


@eqx.filter_jit
def make_step(model, opt_state, x, y, learning_rate):
    opt_state.hyperparams["learning_rate"] = learning_rate
    loss_value, grads = eqx.filter_value_and_grad(loss)(model, x, y)
    updates, opt_state = optim.update(grads, opt_state, eqx.filter(model, eqx.is_array))  # tpuscope-use[python_float_lr]: constant_changed
    model = eqx.apply_updates(model, updates)
    return model, opt_state, loss_value


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--case", choices=CASES, default="clean")
    case = parser.parse_args().case

    x, y = make_dataset()
    model = eqx.nn.MLP(
        in_size=NUM_FEATURES, out_size=NUM_CLASSES, width_size=64, depth=2, key=jax.random.key(0)
    )
    opt_state = optim.init(eqx.filter(model, eqx.is_array))
    loader = dataloader((x, y), BATCH_SIZE, seed=1, keep_partial=(case == "partial_batch"))

    losses = []
    steps = 0
    shapes, lrs = set(), set()  # what the case varies, for RESULT
    print("tpuscope-corpus: loop start", file=sys.stderr, flush=True)
    for step in range(STEPS):
        lr = LEARNING_RATE * 0.5 ** (step // LR_DECAY_EVERY)
        xb, yb = next(loader)
        if case == "python_float_lr":
            model, opt_state, train_loss = make_step(model, opt_state, xb, yb, lr)  # tpuscope[python_float_lr]: constant_changed
        else:
            model, opt_state, train_loss = make_step(model, opt_state, xb, yb, jnp.asarray(lr, jnp.float32))  # tpuscope-trigger[partial_batch]: shape_changed
        shapes.add(xb.shape)
        lrs.add(lr)
        losses.append(train_loss)
        steps += 1
    print("tpuscope-corpus: loop end", file=sys.stderr, flush=True)

    mean_loss = float(np.mean(np.asarray(jax.device_get(losses))))
    leaves = jax.device_get(jax.tree.leaves(eqx.filter(model, eqx.is_array)))
    checksum = sum(float(np.sum(p, dtype=np.float64)) for p in leaves)
    extra = {"python_float_lr": f" lrs={len(lrs)}", "partial_batch": f" shapes={len(shapes)}"}.get(case, "")
    print(f"RESULT case={case} steps={steps} checksum={checksum:.9e} mean_loss={mean_loss:.9e}{extra}")


if __name__ == "__main__":
    main()
