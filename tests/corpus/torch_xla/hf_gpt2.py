"""A tiny GPT-2 trained on torch_xla with a hand-written loop: a clean loop and five common mistakes.

transformers' `GPT2LMHeadModel` built from a config (2 layers, 2 heads, n_embd 64, vocab 256; no
download), moved to `torch_xla.device()`, trained with AdamW on synthetic token sequences; each
step is `loss = model(**batch).loss; loss.backward(); opt.step(); opt.zero_grad();
torch_xla.sync()`. The loss is accumulated on the device and read once, after the loop, together
with the checksum of the parameters.

Cases (`--case`):

- `clean`: fixed-length batches of 32 tokens cut from one token stream (what `run_clm`'s
  `group_texts` does): no padding, so no `attention_mask` is passed. One step graph, compiled in
  the first two steps (the first step also creates AdamW's state); no read from the device.
- `attn_mask`: the same batches, with the all-ones `attention_mask` a tokenizer returns passed to
  the model. With the default SDPA attention, transformers' mask helper
  (`masking_utils._ignore_causal_mask_sdpa`) asks `padding_mask.all()` on the host to decide
  whether it can skip building a causal mask: one device-to-host read per forward, inside
  transformers, at the model call.
- `pad_longest`: sequences of varying length, each batch padded to its own longest sequence
  ("dynamic padding", what `DataCollatorWithPadding` does by default). The batches' longest
  sequences take 5 lengths, so torch_xla traces a new step graph for each new length (and for
  the first step), and the mask helper's `.all()` graph also once per length; the mask helper
  reads from the device every step as in `attn_mask`.
- `item_logging`: `loss.item()` to print the loss every step, before `torch_xla.sync()`: one
  device-to-host read per step, which executes the forward on its own first (and the step graph
  computes it again).
- `python_int_index`: the whole data set is put on the device once, and each step takes its batch
  with `data[step]`: the Python int is a constant of the traced graph, so every step traces a new
  graph and compiles it. Runs INDEX_STEPS steps only (each one compiles the whole step).
- `python_float_scale`: a hand-rolled warm-up scales the loss by the Python float
  `min(1.0, (step + 1) / WARMUP_STEPS)`. torch_xla passes most Python scalars to the graph as
  device data (0.4, 0.6 and 0.8 share one graph), but bakes 0 and 1 in as constants: the step
  graph is traced anew, and compiled, when the factor reaches 1.0 (step 4), once. (A factor equal
  to another scalar of the same graph, such as GELU's 0.5, would compile a graph of its own too:
  torch_xla then passes the two equal scalars as one parameter. The factors 0.2 ... 1.0 avoid
  that.)

- `partial_batch`: three epochs over 60 sequences in batches of 8, the last batch of each
  epoch kept with its 4 sequences (a `DataLoader` with `drop_last=False`): the step graph is
  traced and compiled once more for the smaller batch, at the end of the first epoch.
- `eval_batch`: every 8 steps, a validation pass under `torch.no_grad()` over 10 held-out
  sequences in batches of 4, one `torch_xla.sync()` per batch as torch_xla's examples do: the
  last batch has 2 sequences, so the evaluation graph is compiled for two batch sizes.

Adjustments so that the clean case is clean on torch_xla with transformers 4.57:

- no `attention_mask` when there is no padding (see `attn_mask`); with padding, a 4D mask or
  `attn_implementation="eager"` avoids the read (not used here);
- `pad_token_id` left unset in the config: with a `pad_token_id` and no `attention_mask`,
  `warn_if_padding_and_no_attention_mask` checks `pad_token_id in input_ids[:, [-1, 0]]`, another
  device-to-host read per forward;
- dropout 0, so that the step is a pure function of the data (the checksum does not depend on the
  random number generator of the XLA build).
"""
import argparse
import sys

import torch
import torch_xla
from transformers import GPT2Config, GPT2LMHeadModel

CASES = (
    "clean", "attn_mask", "pad_longest", "item_logging", "python_int_index", "python_float_scale",
    "partial_batch", "eval_batch",
)

STEPS = 24
INDEX_STEPS = 5
WARMUP_STEPS = 5
BATCH = 8
SEQ_LEN = 32
VOCAB = 256
PAD_ID = 0
# partial_batch: epochs over a data set that batches of BATCH do not divide.
EPOCHS = 3
DATASET = 60
# eval_batch: a validation pass every EVAL_EVERY steps, in batches of EVAL_BATCH.
EVAL_EVERY = 8
EVAL_SEQS = 10
EVAL_BATCH = 4
# pad_longest: the longest sequence of each batch (the others are up to 7 tokens shorter).
LONGEST = (32, 24, 16, 28, 20, 32, 24, 16, 28, 20, 32, 24, 16, 28, 20, 32, 24, 16, 28, 20, 32, 24, 16, 28)


def fixed_batches(gen, steps):
    """`steps` batches of BATCH x SEQ_LEN tokens cut from one stream, with the tokenizer's mask."""
    stream = torch.randint(1, VOCAB, (steps * BATCH * SEQ_LEN,), generator=gen)
    for block in stream.view(steps, BATCH, SEQ_LEN):
        yield {"input_ids": block, "attention_mask": torch.ones_like(block), "labels": block.clone()}


def epoch_batches(gen):
    """EPOCHS passes over DATASET sequences in batches of BATCH, the last (partial) one kept."""
    data = torch.randint(1, VOCAB, (DATASET, SEQ_LEN), generator=gen)
    for _ in range(EPOCHS):
        order = torch.randperm(DATASET, generator=gen)
        for start in range(0, DATASET, BATCH):  # tpuscope[partial_batch]: shape_changed
            block = data[order[start : start + BATCH]]
            yield {"input_ids": block, "attention_mask": torch.ones_like(block), "labels": block.clone()}


def eval_batches(gen):
    """EVAL_SEQS held-out sequences in batches of EVAL_BATCH, the last one smaller."""
    data = torch.randint(1, VOCAB, (EVAL_SEQS, SEQ_LEN), generator=gen)
    return [data[i : i + EVAL_BATCH] for i in range(0, EVAL_SEQS, EVAL_BATCH)]  # tpuscope[eval_batch]: shape_changed


def padded_batches(gen):
    """One batch per entry of LONGEST, each padded to its own longest sequence."""
    for longest in LONGEST:
        lengths = [longest] + torch.randint(longest - 7, longest + 1, (BATCH - 1,), generator=gen).tolist()
        seqs = [torch.randint(1, VOCAB, (n,), generator=gen) for n in lengths]
        width = max(len(s) for s in seqs)  # tpuscope[pad_longest]: shape_changed
        input_ids = torch.full((BATCH, width), PAD_ID, dtype=torch.long)
        attention_mask = torch.zeros((BATCH, width), dtype=torch.long)
        labels = torch.full((BATCH, width), -100, dtype=torch.long)
        for i, s in enumerate(seqs):
            input_ids[i, : len(s)] = s
            attention_mask[i, : len(s)] = 1
            labels[i, : len(s)] = s
        yield {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--case", choices=CASES, default="clean")
    case = parser.parse_args().case

    device = torch_xla.device()
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=VOCAB, n_positions=64, n_embd=64, n_layer=2, n_head=2,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    )
    model = GPT2LMHeadModel(config).to(device)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)

    gen = torch.Generator().manual_seed(1)
    if case == "pad_longest":
        batches = padded_batches(gen)
    elif case == "python_int_index":
        # The data set is small: keep it on the device instead of copying a batch every step.
        data = torch.stack([b["input_ids"] for b in fixed_batches(gen, INDEX_STEPS)]).to(device)
        batches = range(INDEX_STEPS)
    elif case == "partial_batch":
        batches = epoch_batches(gen)
    else:
        batches = fixed_batches(gen, STEPS)
    held_out = [b.to(device) for b in eval_batches(gen)] if case == "eval_batch" else []

    running = torch.zeros((), device=device)
    eval_total = torch.zeros((), device=device)
    steps = syncs = evals = 0
    print("tpuscope-corpus: loop start", file=sys.stderr, flush=True)
    for step, batch in enumerate(batches):
        if case == "python_int_index":
            input_ids = data[step]  # tpuscope[python_int_index]: constant_changed
            batch = {"input_ids": input_ids, "labels": input_ids}
        else:
            if case not in ("attn_mask", "pad_longest"):
                del batch["attention_mask"]  # no padding: the mask is all ones, the model needs none
            batch = {k: v.to(device) for k, v in batch.items()}
        loss = model(**batch).loss  # tpuscope-lib[attn_mask,pad_longest]: host_sync  # tpuscope-with[pad_longest]: shape_changed
        if case == "python_float_scale":
            loss = loss * min(1.0, (step + 1) / WARMUP_STEPS)  # tpuscope[python_float_scale]: constant_changed
        if case == "item_logging":
            print(f"step {step} loss {loss.item():.4f}")  # tpuscope[item_logging]: host_sync
            syncs += 1
        loss.backward()
        opt.step()
        opt.zero_grad()
        running += loss.detach()
        torch_xla.sync()  # tpuscope-trigger[pad_longest,partial_batch]: shape_changed  # tpuscope-trigger[python_int_index,python_float_scale]: constant_changed
        steps += 1
        if held_out and steps % EVAL_EVERY == 0:
            with torch.no_grad():
                for ids in held_out:
                    eval_total += model(input_ids=ids, labels=ids).loss
                    torch_xla.sync()  # tpuscope-trigger[eval_batch]: shape_changed
                    evals += 1
    print("tpuscope-corpus: loop end", file=sys.stderr, flush=True)

    # One read from the device after the loop: per-parameter sums and the mean train loss.
    sums = torch.stack(
        [p.detach().sum() for p in model.parameters()] + [eval_total / max(evals, 1), running / steps]
    ).cpu().double()
    checksum = sums[:-2].sum().item()
    extra = ""
    if case == "pad_longest":
        extra = f" shapes={len(set(LONGEST))}"
    elif case == "item_logging":
        extra = f" syncs={syncs}"
    elif case == "eval_batch":
        extra = f" evals={evals} eval_loss={sums[-2].item():.6f}"
    print(f"RESULT case={case} steps={steps} checksum={checksum:.9e} loss={sums[-1].item():.6f}{extra}")


if __name__ == "__main__":
    main()
