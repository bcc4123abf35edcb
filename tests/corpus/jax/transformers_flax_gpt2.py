"""Corpus: causal-LM training of a tiny `FlaxGPT2LMHeadModel` (2 layers, 2 heads, n_embd 64,
vocab 256, n_positions 64, dropout 0, built from its config, seed=0), written like transformers'
`run_clm_flax.py`: a `TrainState` carrying the dropout rng, a jitted `train_step` that calls the
model with `params=` and `train=True`, optax adamw. The data are random token sequences of
random lengths (8..64), batched by length (like `group_by_length`): 5 batches of 8 per epoch,
in a shuffled order, 4 epochs.

Cases:
  clean          every batch padded to one fixed length (n_positions, 64).
  pad_longest    each batch padded to its own longest sequence: 5 distinct lengths, so
                 `train_step` compiles 5 times (once per length).
  float_logging  `float(loss)` logged every step: one device-to-host read per step.

Run: HF_HUB_OFFLINE=1 python transformers_flax_gpt2.py --case CASE
"""
import argparse
import sys

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.training import train_state
from transformers import FlaxGPT2LMHeadModel, GPT2Config

CASES = ("clean", "pad_longest", "float_logging")

VOCAB_SIZE = 256
MAX_LEN = 64
PAD_ID = 0
N_SEQUENCES = 40
BATCH_SIZE = 8
EPOCHS = 4
LEARNING_RATE = 1e-3


class TrainState(train_state.TrainState):
    dropout_rng: jnp.ndarray


def make_dataset():
    """Random token sequences of random lengths, grouped into batches of similar length."""
    rng = np.random.default_rng(0)
    lengths = rng.integers(8, MAX_LEN + 1, N_SEQUENCES)
    sequences = [rng.integers(1, VOCAB_SIZE, n).astype(np.int32) for n in lengths]
    order = np.argsort(lengths, kind="stable")
    return [[sequences[i] for i in order[s : s + BATCH_SIZE]] for s in range(0, N_SEQUENCES, BATCH_SIZE)]


def collate(sequences, pad_to):
    """Right-pads token sequences to `pad_to` and builds the attention mask."""
    input_ids = np.full((len(sequences), pad_to), PAD_ID, dtype=np.int32)
    attention_mask = np.zeros((len(sequences), pad_to), dtype=np.int32)
    for row, seq in enumerate(sequences):
        input_ids[row, : len(seq)] = seq
        attention_mask[row, : len(seq)] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def loss_fn(logits, labels, mask):
    shift_logits = logits[..., :-1, :]
    shift_labels = labels[..., 1:]
    shift_mask = mask[..., 1:]
    loss = optax.softmax_cross_entropy_with_integer_labels(shift_logits, shift_labels)
    return (loss * shift_mask).sum() / shift_mask.sum()


@jax.jit
def train_step(state, batch):
    dropout_rng, new_dropout_rng = jax.random.split(state.dropout_rng)

    def compute_loss(params):
        logits = state.apply_fn(
            batch["input_ids"],
            attention_mask=batch["attention_mask"],
            params=params,
            dropout_rng=dropout_rng,
            train=True,
        )[0]
        return loss_fn(logits, batch["input_ids"], batch["attention_mask"])

    grad_fn = jax.value_and_grad(compute_loss)
    loss, grad = grad_fn(state.params)
    new_state = state.apply_gradients(grads=grad, dropout_rng=new_dropout_rng)
    return new_state, loss


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--case", choices=CASES, default="clean")
    case = parser.parse_args().case

    config = GPT2Config(
        vocab_size=VOCAB_SIZE, n_positions=MAX_LEN, n_embd=64, n_layer=2, n_head=2,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=PAD_ID, eos_token_id=PAD_ID,
    )
    model = FlaxGPT2LMHeadModel(config, seed=0)
    batches = make_dataset()
    tx = optax.adamw(LEARNING_RATE, weight_decay=0.01)
    state = TrainState.create(
        apply_fn=model.__call__, params=model.params, tx=tx, dropout_rng=jax.random.PRNGKey(1)
    )
    order_rng = np.random.default_rng(1)

    losses = []
    steps = 0
    shapes, syncs = set(), 0  # what the case varies, for RESULT
    print("tpuscope-corpus: loop start", file=sys.stderr, flush=True)
    for epoch in range(EPOCHS):
        for b in order_rng.permutation(len(batches)):
            sequences = batches[b]
            if case == "pad_longest":
                batch = collate(sequences, pad_to=max(len(s) for s in sequences))  # tpuscope[pad_longest]: shape_changed
            else:
                batch = collate(sequences, pad_to=MAX_LEN)
            state, loss = train_step(state, batch)  # tpuscope-trigger[pad_longest]: shape_changed
            shapes.add(batch["input_ids"].shape)
            steps += 1
            if case == "float_logging":
                print(f"epoch {epoch} step {steps} loss {float(loss):.4f}")  # tpuscope[float_logging]: host_sync
                syncs += 1
            losses.append(loss)
    print("tpuscope-corpus: loop end", file=sys.stderr, flush=True)

    mean_loss = float(np.mean(jax.device_get(losses)))
    leaves = jax.tree.leaves(jax.device_get(state.params))
    checksum = sum(float(np.sum(p, dtype=np.float64)) for p in leaves)
    extra = {"pad_longest": f" shapes={len(shapes)}", "float_logging": f" syncs={syncs}"}.get(case, "")
    print(f"RESULT case={case} steps={steps} checksum={checksum:.9e} mean_loss={mean_loss:.9e}{extra}")


if __name__ == "__main__":
    main()
