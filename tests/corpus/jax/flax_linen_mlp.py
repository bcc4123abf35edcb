"""Corpus: a Flax linen MLP classifier trained the way the Flax MNIST example trains
(`flax.training.train_state.TrainState`, a jitted `apply_model` that returns grads, loss and
accuracy, a jitted `update_model` that applies them), with optax
`chain(clip_by_global_norm, adamw(warmup_cosine_decay_schedule(...)))`, per-epoch shuffled
batches and an evaluation on the test set after every epoch. Synthetic data, 8 epochs x 8 steps
of 64 rows. Unlike the example, `apply_model` takes `state.params` rather than the whole state,
so only `update_model` sees the state's static fields (`apply_fn`, `tx`).

Cases:
  clean            the loader drops the last partial batch, metrics stay on the device until the
                   loop ends, evaluation goes through its own jitted `eval_model`.
  python_float_lr  a per-epoch Python-float learning rate: every epoch rebuilds the optimizer
                   with `state.replace(tx=make_tx(lr))`; `tx` is a static field of TrainState, so
                   `update_model` is traced and compiled again each epoch with the new lr as an
                   HLO constant.
  partial_batch    the loader keeps the last partial batch of each epoch (540 = 8 x 64 + 28):
                   `apply_model` compiles a second time, for batch 28.
  float_logging    `float(loss)` logged every step: one device-to-host read per step.
  eval_batch       evaluation through the training `apply_model` with the whole test set (200
                   rows), as the Flax MNIST example does: `apply_model` compiles a second time.
  python_int_index each epoch's shuffled rows go to the device at once and the step slices its
                   batch out with a Python int batch index, made static (`static_argnums`) because
                   a slice bound must be concrete: `apply_model_at` compiles once per index, i.e.
                   at every step of the first epoch (8 compiles), and hits its cache afterwards.

Run: python flax_linen_mlp.py --case CASE
"""
import argparse
import functools
import math
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training import train_state

CASES = ("clean", "python_float_lr", "partial_batch", "float_logging", "eval_batch", "python_int_index")

NUM_FEATURES = 32
NUM_CLASSES = 10
N_TRAIN = 540  # 8 full batches of 64 and one partial batch of 28
N_TEST = 200
BATCH_SIZE = 64
EPOCHS = 8
STEPS_PER_EPOCH = N_TRAIN // BATCH_SIZE
PEAK_LR = 3e-3
WARMUP_STEPS = 8


class MLP(nn.Module):
    """A simple MLP classifier."""

    features: tuple = (128, 128)

    @nn.compact
    def __call__(self, x):
        for feat in self.features:
            x = nn.Dense(features=feat)(x)
            x = nn.relu(x)
        x = nn.Dense(features=NUM_CLASSES)(x)
        return x


model = MLP()


def make_datasets():
    """Synthetic classification data: labels from a fixed random linear teacher."""
    rng = np.random.default_rng(0)
    teacher = rng.standard_normal((NUM_FEATURES, NUM_CLASSES)).astype(np.float32)
    x = rng.standard_normal((N_TRAIN + N_TEST, NUM_FEATURES)).astype(np.float32)
    y = np.argmax(x @ teacher, axis=-1).astype(np.int32)
    train_ds = {"image": x[:N_TRAIN], "label": y[:N_TRAIN]}
    test_ds = {"image": x[N_TRAIN:], "label": y[N_TRAIN:]}
    return train_ds, test_ds


def make_schedule():
    return optax.warmup_cosine_decay_schedule(
        init_value=0.0,
        peak_value=PEAK_LR,
        warmup_steps=WARMUP_STEPS,
        decay_steps=EPOCHS * STEPS_PER_EPOCH,
        end_value=PEAK_LR * 0.01,
    )


def epoch_lr(epoch):
    """The same warmup-cosine shape, stepped once per epoch in Python."""
    if epoch == 0:
        return PEAK_LR * 0.5
    return PEAK_LR * (0.01 + 0.99 * 0.5 * (1.0 + math.cos(math.pi * (epoch - 1) / (EPOCHS - 1))))


def make_tx(learning_rate):
    return optax.chain(
        optax.clip_by_global_norm(1.0),
        optax.adamw(learning_rate=learning_rate, weight_decay=1e-4),
    )


@jax.jit
def apply_model(params, images, labels):
    """Computes gradients, loss and accuracy for a single batch."""

    def loss_fn(params):
        logits = model.apply({"params": params}, images)
        one_hot = jax.nn.one_hot(labels, NUM_CLASSES)
        loss = jnp.mean(optax.softmax_cross_entropy(logits=logits, labels=one_hot))
        return loss, logits

    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
    (loss, logits), grads = grad_fn(params)
    accuracy = jnp.mean(jnp.argmax(logits, -1) == labels)
    return grads, loss, accuracy


@functools.partial(jax.jit, static_argnums=3)
def apply_model_at(params, epoch_images, epoch_labels, i):
    """`apply_model` on batch `i` of an epoch that is on the device already."""
    images = epoch_images[i * BATCH_SIZE : (i + 1) * BATCH_SIZE]  # tpuscope-use[python_int_index]: constant_changed
    labels = epoch_labels[i * BATCH_SIZE : (i + 1) * BATCH_SIZE]  # tpuscope-use[python_int_index]: constant_changed
    return apply_model(params, images, labels)


@jax.jit
def update_model(state, grads):
    return state.apply_gradients(grads=grads)  # tpuscope-use[python_float_lr]: constant_changed


@jax.jit
def eval_model(params, images, labels):
    logits = model.apply({"params": params}, images)
    one_hot = jax.nn.one_hot(labels, NUM_CLASSES)
    loss = jnp.mean(optax.softmax_cross_entropy(logits=logits, labels=one_hot))
    accuracy = jnp.mean(jnp.argmax(logits, -1) == labels)
    return loss, accuracy


def epoch_perms(train_ds, perm_rng, case):
    """The row indices of each shuffled batch of one epoch."""
    perm = perm_rng.permutation(len(train_ds["image"]))
    if case == "partial_batch":
        return np.array_split(perm, range(BATCH_SIZE, len(perm), BATCH_SIZE))  # tpuscope[partial_batch]: shape_changed
    perm = perm[: STEPS_PER_EPOCH * BATCH_SIZE]  # skip the incomplete batch
    return list(perm.reshape((STEPS_PER_EPOCH, BATCH_SIZE)))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--case", choices=CASES, default="clean")
    case = parser.parse_args().case

    train_ds, test_ds = make_datasets()
    params = model.init(jax.random.key(0), jnp.ones((1, NUM_FEATURES)))["params"]
    schedule = make_schedule()
    if case == "python_float_lr":
        tx = make_tx(epoch_lr(0))
    else:
        tx = make_tx(schedule)
    state = train_state.TrainState.create(apply_fn=model.apply, params=params, tx=tx)
    perm_rng = np.random.default_rng(1)

    train_losses, eval_metrics = [], []
    steps = 0
    apply_shapes, lrs, indices, syncs = set(), set(), set(), 0  # what the case varies, for RESULT
    print("tpuscope-corpus: loop start", file=sys.stderr, flush=True)
    for epoch in range(EPOCHS):
        if case == "python_float_lr":
            state = state.replace(tx=make_tx(epoch_lr(epoch)))  # tpuscope[python_float_lr]: constant_changed
            lrs.add(epoch_lr(epoch))
        perms = epoch_perms(train_ds, perm_rng, case)
        if case == "python_int_index":
            order = np.concatenate(perms)
            epoch_images = jax.device_put(train_ds["image"][order, ...])
            epoch_labels = jax.device_put(train_ds["label"][order, ...])
        for i, perm in enumerate(perms):
            if case == "python_int_index":
                grads, loss, accuracy = apply_model_at(state.params, epoch_images, epoch_labels, i)  # tpuscope[python_int_index]: constant_changed
                indices.add(i)
            else:
                images, labels = train_ds["image"][perm, ...], train_ds["label"][perm, ...]
                grads, loss, accuracy = apply_model(state.params, images, labels)  # tpuscope-trigger[partial_batch]: shape_changed
                apply_shapes.add(images.shape)
            state = update_model(state, grads)  # tpuscope-trigger[python_float_lr]: constant_changed
            steps += 1
            if case == "float_logging":
                print(f"epoch {epoch} step {steps} loss {float(loss):.4f}")  # tpuscope[float_logging]: host_sync
                syncs += 1
            train_losses.append(loss)
        if case == "eval_batch":
            _, test_loss, test_accuracy = apply_model(state.params, test_ds["image"], test_ds["label"])  # tpuscope[eval_batch]: shape_changed
            apply_shapes.add(test_ds["image"].shape)
        else:
            test_loss, test_accuracy = eval_model(state.params, test_ds["image"], test_ds["label"])
        eval_metrics.append((test_loss, test_accuracy))
    print("tpuscope-corpus: loop end", file=sys.stderr, flush=True)

    for epoch, (test_loss, test_accuracy) in enumerate(eval_metrics):
        print(f"epoch {epoch} test_loss {float(test_loss):.4f} test_accuracy {float(test_accuracy) * 100:.2f}")
    mean_loss = float(np.mean(np.asarray(jax.device_get(train_losses))))
    checksum = sum(float(np.sum(p, dtype=np.float64)) for p in jax.tree.leaves(jax.device_get(state.params)))
    extra = {
        "python_float_lr": f" lrs={len(lrs)}",
        "partial_batch": f" shapes={len(apply_shapes)}",
        "float_logging": f" syncs={syncs}",
        "eval_batch": f" shapes={len(apply_shapes)}",
        "python_int_index": f" indices={len(indices)}",
    }.get(case, "")
    print(f"RESULT case={case} steps={steps} checksum={checksum:.9e} mean_loss={mean_loss:.9e}{extra}")


if __name__ == "__main__":
    main()
