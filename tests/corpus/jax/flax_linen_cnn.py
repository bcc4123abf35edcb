"""Corpus: the Flax MNIST example's CNN and training loop (`TrainState`, jitted `apply_model`
returning grads, loss and accuracy, jitted `update_model`, per-epoch shuffled batches), with
narrower layers and synthetic 28x28 images (class templates plus noise). 3 epochs of 9 steps
of 32 images (300 = 9 x 32 + 12).

Cases:
  clean                  the loader drops the incomplete batch (as the example does); the
                         losses stay on the device until the loop ends.
  partial_batch_logging  the loader keeps the last partial batch of 12 AND `float(loss)` is
                         logged every step: `apply_model` compiles a second time for batch 12,
                         and every step reads its loss back to the host.

Run: python flax_linen_cnn.py --case CASE
"""
import argparse
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training import train_state

CASES = ("clean", "partial_batch_logging")

NUM_CLASSES = 10
N_TRAIN = 300  # 9 full batches of 32 and one partial batch of 12
BATCH_SIZE = 32
EPOCHS = 3
STEPS_PER_EPOCH = N_TRAIN // BATCH_SIZE
LEARNING_RATE = 0.1
MOMENTUM = 0.9


class CNN(nn.Module):
    """A simple CNN model."""

    @nn.compact
    def __call__(self, x):
        x = nn.Conv(features=8, kernel_size=(3, 3))(x)
        x = nn.relu(x)
        x = nn.avg_pool(x, window_shape=(2, 2), strides=(2, 2))
        x = nn.Conv(features=16, kernel_size=(3, 3))(x)
        x = nn.relu(x)
        x = nn.avg_pool(x, window_shape=(2, 2), strides=(2, 2))
        x = x.reshape((x.shape[0], -1))  # flatten
        x = nn.Dense(features=64)(x)
        x = nn.relu(x)
        x = nn.Dense(features=NUM_CLASSES)(x)
        return x


def make_dataset():
    """Synthetic 28x28x1 images: one random template per class plus noise."""
    rng = np.random.default_rng(0)
    templates = rng.uniform(0.0, 1.0, (NUM_CLASSES, 28, 28, 1)).astype(np.float32)
    labels = rng.integers(0, NUM_CLASSES, N_TRAIN).astype(np.int32)
    noise = rng.normal(0.0, 0.5, (N_TRAIN, 28, 28, 1)).astype(np.float32)
    return {"image": templates[labels] + noise, "label": labels}


@jax.jit
def apply_model(state, images, labels):
    """Computes gradients, loss and accuracy for a single batch."""

    def loss_fn(params):
        logits = state.apply_fn({"params": params}, images)
        one_hot = jax.nn.one_hot(labels, NUM_CLASSES)
        loss = jnp.mean(optax.softmax_cross_entropy(logits=logits, labels=one_hot))
        return loss, logits

    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)
    (loss, logits), grads = grad_fn(state.params)
    accuracy = jnp.mean(jnp.argmax(logits, -1) == labels)
    return grads, loss, accuracy


@jax.jit
def update_model(state, grads):
    return state.apply_gradients(grads=grads)


def train_epoch(state, train_ds, batch_size, perm_rng, case, seen):
    """Train for a single epoch."""
    train_ds_size = len(train_ds["image"])
    perms = perm_rng.permutation(train_ds_size)
    if case == "partial_batch_logging":
        perms = np.array_split(perms, range(batch_size, train_ds_size, batch_size))  # tpuscope[partial_batch_logging]: shape_changed
    else:
        steps_per_epoch = train_ds_size // batch_size
        perms = perms[: steps_per_epoch * batch_size]  # skip incomplete batch
        perms = perms.reshape((steps_per_epoch, batch_size))

    epoch_loss = []
    epoch_accuracy = []
    for i, perm in enumerate(perms):
        batch_images = train_ds["image"][perm, ...]
        batch_labels = train_ds["label"][perm, ...]
        grads, loss, accuracy = apply_model(state, batch_images, batch_labels)  # tpuscope-trigger[partial_batch_logging]: shape_changed
        seen["shapes"].add(batch_images.shape)
        state = update_model(state, grads)
        if case == "partial_batch_logging":
            print(f"batch {i} loss {float(loss):.4f}")  # tpuscope[partial_batch_logging]: host_sync
            seen["syncs"] += 1
        epoch_loss.append(loss)
        epoch_accuracy.append(accuracy)
    return state, epoch_loss, epoch_accuracy


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--case", choices=CASES, default="clean")
    case = parser.parse_args().case

    train_ds = make_dataset()
    cnn = CNN()
    params = cnn.init(jax.random.key(0), jnp.ones([1, 28, 28, 1]))["params"]
    tx = optax.sgd(LEARNING_RATE, MOMENTUM)
    state = train_state.TrainState.create(apply_fn=cnn.apply, params=params, tx=tx)
    perm_rng = np.random.default_rng(1)

    history = []
    seen = {"shapes": set(), "syncs": 0}  # what the case varies, for RESULT
    print("tpuscope-corpus: loop start", file=sys.stderr, flush=True)
    for epoch in range(1, EPOCHS + 1):
        state, epoch_loss, epoch_accuracy = train_epoch(state, train_ds, BATCH_SIZE, perm_rng, case, seen)
        history.append((epoch_loss, epoch_accuracy))
    print("tpuscope-corpus: loop end", file=sys.stderr, flush=True)

    for epoch, (epoch_loss, epoch_accuracy) in enumerate(history, start=1):
        train_loss = np.mean(jax.device_get(epoch_loss))
        train_accuracy = np.mean(jax.device_get(epoch_accuracy))
        print(f"epoch:{epoch:3}, train_loss: {train_loss:.4f}, train_accuracy: {train_accuracy * 100:.2f}")
    steps = int(jax.device_get(state.step))
    leaves = jax.tree.leaves(jax.device_get(state.params))
    checksum = sum(float(np.sum(p, dtype=np.float64)) for p in leaves)
    extra = f" shapes={len(seen['shapes'])} syncs={seen['syncs']}" if case == "partial_batch_logging" else ""
    print(f"RESULT case={case} steps={steps} checksum={checksum:.9e} train_loss={train_loss:.9e}{extra}")


if __name__ == "__main__":
    main()
