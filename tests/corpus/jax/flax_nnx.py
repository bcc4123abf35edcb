"""Corpus: a Flax NNX MLP classifier trained the way the NNX MNIST tutorial trains
(`nnx.Optimizer(model, optax.adamw(...), wrt=nnx.Param)`, an `nnx.jit` train step that updates
an `nnx.MultiMetric` of `nnx.metrics.Accuracy` and `nnx.metrics.Average('loss')`, the metrics
computed into a history and reset once per epoch). Synthetic data, 8 epochs x 8 steps of 64 rows
(540 = 8 x 64 + 28).

Cases:
  clean          the loader drops the last partial batch; the history keeps the computed
                 metrics as device arrays until the loop ends.
  partial_batch  the loader keeps the last partial batch of 28: `train_step` compiles a second
                 time.
  float_logging  the running metrics are computed and turned into Python floats every step to be
                 logged: two device-to-host reads per step (loss and accuracy).

Run: python flax_nnx.py --case CASE
"""
import argparse
import sys

import jax
import numpy as np
import optax
from flax import nnx

CASES = ("clean", "partial_batch", "float_logging")

NUM_FEATURES = 32
NUM_CLASSES = 10
N_TRAIN = 540  # 8 full batches of 64 and one partial batch of 28
BATCH_SIZE = 64
EPOCHS = 8
LEARNING_RATE = 0.005
MOMENTUM = 0.9


class MLP(nnx.Module):
    """A simple MLP classifier."""

    def __init__(self, *, rngs: nnx.Rngs):
        self.linear1 = nnx.Linear(NUM_FEATURES, 128, rngs=rngs)
        self.linear2 = nnx.Linear(128, 128, rngs=rngs)
        self.linear3 = nnx.Linear(128, NUM_CLASSES, rngs=rngs)

    def __call__(self, x):
        x = nnx.relu(self.linear1(x))
        x = nnx.relu(self.linear2(x))
        return self.linear3(x)


def make_dataset():
    """Synthetic classification data: labels from a fixed random linear teacher."""
    rng = np.random.default_rng(0)
    teacher = rng.standard_normal((NUM_FEATURES, NUM_CLASSES)).astype(np.float32)
    x = rng.standard_normal((N_TRAIN, NUM_FEATURES)).astype(np.float32)
    y = np.argmax(x @ teacher, axis=-1).astype(np.int32)
    return {"image": x, "label": y}


def train_batches(train_ds, perm_rng, case):
    """Yields the shuffled batches of one epoch."""
    perm = perm_rng.permutation(len(train_ds["image"]))
    if case == "partial_batch":
        stop = len(perm)  # tpuscope[partial_batch]: shape_changed
    else:
        stop = len(perm) - len(perm) % BATCH_SIZE  # drop the incomplete batch
    for start in range(0, stop, BATCH_SIZE):
        idx = perm[start : start + BATCH_SIZE]
        yield {"image": train_ds["image"][idx], "label": train_ds["label"][idx]}


def loss_fn(model: MLP, batch):
    logits = model(batch["image"])
    loss = optax.softmax_cross_entropy_with_integer_labels(logits=logits, labels=batch["label"]).mean()
    return loss, logits


@nnx.jit
def train_step(model: MLP, optimizer: nnx.Optimizer, metrics: nnx.MultiMetric, batch):
    """Train for a single step."""
    grad_fn = nnx.value_and_grad(loss_fn, has_aux=True)
    (loss, logits), grads = grad_fn(model, batch)
    metrics.update(loss=loss, logits=logits, labels=batch["label"])  # In-place updates.
    optimizer.update(model, grads)  # In-place updates.


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--case", choices=CASES, default="clean")
    case = parser.parse_args().case

    train_ds = make_dataset()
    model = MLP(rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adamw(LEARNING_RATE, MOMENTUM), wrt=nnx.Param)
    metrics = nnx.MultiMetric(
        accuracy=nnx.metrics.Accuracy(),
        loss=nnx.metrics.Average("loss"),
    )
    perm_rng = np.random.default_rng(1)

    metrics_history = {"train_loss": [], "train_accuracy": []}
    steps = 0
    shapes, syncs = set(), 0  # what the case varies, for RESULT
    print("tpuscope-corpus: loop start", file=sys.stderr, flush=True)
    for epoch in range(EPOCHS):
        for batch in train_batches(train_ds, perm_rng, case):
            train_step(model, optimizer, metrics, batch)  # tpuscope-trigger[partial_batch]: shape_changed
            shapes.add(batch["image"].shape)
            steps += 1
            if case == "float_logging":
                print(f"step {steps}", {m: f"{float(v):.4f}" for m, v in metrics.compute().items()})  # tpuscope[float_logging]: host_sync
                syncs += 2  # loss and accuracy
        # One history entry per epoch, as the tutorial does every `eval_every` steps.
        for metric, value in metrics.compute().items():
            metrics_history[f"train_{metric}"].append(value)
        metrics.reset()
    print("tpuscope-corpus: loop end", file=sys.stderr, flush=True)

    for epoch in range(EPOCHS):
        loss = float(metrics_history["train_loss"][epoch])
        accuracy = float(metrics_history["train_accuracy"][epoch])
        print(f"epoch {epoch} train_loss {loss:.4f} train_accuracy {accuracy * 100:.2f}")
    leaves = jax.tree.leaves(jax.device_get(nnx.state(model, nnx.Param)))
    checksum = sum(float(np.sum(p, dtype=np.float64)) for p in leaves)
    extra = {"partial_batch": f" shapes={len(shapes)}", "float_logging": f" syncs={syncs}"}.get(case, "")
    print(f"RESULT case={case} steps={steps} checksum={checksum:.9e} train_loss={loss:.9e}{extra}")


if __name__ == "__main__":
    main()
