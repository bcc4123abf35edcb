"""A tiny GPT-2 trained with `torch.compile` on TorchTPU: a clean loop and three common mistakes.

transformers' `GPT2LMHeadModel` built from a config (2 layers, 2 heads, n_embd 64, vocab 256; no
download), compiled with `torch.compile(model, dynamic=False)` on `torch.device("tpu")`, trained
with AdamW for 16 steps on synthetic token sequences of varying length fed through a `DataLoader`
whose collate function pads them (input ids, attention mask, labels -100 on the padding). The loss
is accumulated on the device and read once, after the loop, together with the per-parameter sums
that make the checksum (one device-to-host read in the tail).

TorchTPU itself reads one f32[] back from the device each time it compiles a forward graph: the
constant `torch.tensor(0.0, device=...)` of transformers' `masking_utils.eager_mask` becomes a
graph attribute, and TorchTPU's `mark_embedded_constants` pass copies it to the CPU to embed it.
That read belongs to the compile (once in the clean case), not to the user's code.

Cases (`--case`):

- `clean`: every batch padded to the model's maximum length (48): one input shape, the forward
  and backward programs compiled once each, in the first step; no read from the device in the
  loop.
- `pad_longest`: each batch padded to its own longest sequence ("dynamic padding", what
  `DataCollatorWithPadding` does by default). The batches' longest sequences take 4 lengths (48,
  40, 32, 24), so with `dynamic=False` dynamo recompiles the model for each new length: 3
  recompiles (and AOTAutograd compiles a backward program for each).
- `item_logging`: `loss.item()` to print the loss every step: one device-to-host read per step,
  which waits for the step to finish.
- `eval_batch`: every 4 steps, a validation loss through the same compiled model on a batch of 4
  sequences instead of 8: dynamo recompiles the model once for the new batch size (the first
  evaluation), later evaluations reuse that graph. The evaluation stays in train mode with
  gradients enabled (dropout is 0: the same loss): `torch.no_grad()` and `model.eval()` change
  state dynamo guards on and would recompile by themselves, so the case would have two causes.

Two adjustments so that the clean case is clean on TorchTPU with transformers 4.57:

- `attn_implementation="eager"`: with the default SDPA attention TorchTPU lowers attention to a
  Pallas kernel (a `tpu_custom_call`), which the XLA CPU plugin standing in for a TPU cannot
  compile.
- `model.loss_type = "ForCausalLM"`: transformers derives the loss type from the class name,
  finds none for `GPT2LMHeadModel`, and calls `logger.warning_once` inside `forward`, which is a
  graph break for dynamo (a second graph and a second set of programs per step).
"""
import argparse
import functools
import sys

import torch
from torch.utils.data import DataLoader
from transformers import GPT2Config, GPT2LMHeadModel

CASES = ("clean", "pad_longest", "item_logging", "eval_batch")

STEPS = 16
BATCH = 8
MAX_LEN = 48
VOCAB = 256
PAD_ID = 0
# The longest sequence of each training batch (the others are up to 7 tokens shorter).
LONGEST = (48, 40, 32, 24, 40, 48, 24, 32, 48, 32, 40, 24, 32, 48, 24, 40)
EVAL_EVERY = 4
EVAL_BATCH = 4  # tpuscope[eval_batch]: shape_changed


def make_sequences(gen, longest):
    """BATCH counting sequences (start, stride random), the first `longest` tokens long, the
    others up to 7 tokens shorter."""
    shorter = torch.randint(longest - 7, longest + 1, (BATCH - 1,), generator=gen).tolist()
    sequences = []
    for n in [longest] + shorter:
        start, stride = torch.randint(1, VOCAB, (2,), generator=gen).tolist()
        sequences.append((start + stride * torch.arange(n)) % (VOCAB - 1) + 1)
    return sequences


def collate(seqs, pad_to_longest):
    """Pads a list of sequences: input ids, attention mask, and labels (-100 on padding)."""
    if pad_to_longest:
        length = max(len(s) for s in seqs)  # tpuscope[pad_longest]: shape_changed
    else:
        length = MAX_LEN
    input_ids = torch.full((len(seqs), length), PAD_ID, dtype=torch.long)
    attention_mask = torch.zeros((len(seqs), length), dtype=torch.long)
    labels = torch.full((len(seqs), length), -100, dtype=torch.long)
    for i, s in enumerate(seqs):
        input_ids[i, : len(s)] = s
        attention_mask[i, : len(s)] = 1
        labels[i, : len(s)] = s
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--case", choices=CASES, default="clean")
    case = parser.parse_args().case

    dev = torch.device("tpu")
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=VOCAB, n_positions=MAX_LEN, n_embd=64, n_layer=2, n_head=2,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False,
        pad_token_id=PAD_ID, attn_implementation="eager",
    )
    model = GPT2LMHeadModel(config)
    model.loss_type = "ForCausalLM"
    model.to(dev)
    model.train()
    cmodel = torch.compile(model, dynamic=False)
    opt = torch.optim.AdamW(model.parameters(), lr=5e-3, weight_decay=0.01)

    gen = torch.Generator().manual_seed(1)
    sequences = [s for n in LONGEST for s in make_sequences(gen, n)]
    loader = DataLoader(sequences, batch_size=BATCH, shuffle=False,
                        collate_fn=functools.partial(collate, pad_to_longest=case == "pad_longest"))
    eval_batch = collate(make_sequences(gen, MAX_LEN)[:EVAL_BATCH], pad_to_longest=False)
    eval_batch = {k: v.to(dev) for k, v in eval_batch.items()}

    running = torch.zeros((), device=dev)
    eval_total = torch.zeros((), device=dev)
    steps = evals = syncs = 0
    print("tpuscope-corpus: loop start", file=sys.stderr, flush=True)
    for batch in loader:
        batch = {k: v.to(dev) for k, v in batch.items()}
        out = cmodel(**batch)  # tpuscope-trigger[pad_longest]: shape_changed
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        running += out.loss.detach()
        steps += 1
        if case == "item_logging":
            print(f"step {steps} loss {out.loss.item():.4f}")  # tpuscope[item_logging]: host_sync
            syncs += 1
        if case == "eval_batch" and steps % EVAL_EVERY == 0:
            eval_out = cmodel(**eval_batch)  # tpuscope-trigger[eval_batch]: shape_changed
            eval_total += eval_out.loss.detach()
            evals += 1
    print("tpuscope-corpus: loop end", file=sys.stderr, flush=True)

    # One read from the device after the loop: per-parameter sums, mean train and eval losses.
    tail = [p.detach().sum() for p in model.parameters()]
    tail += [running / steps, eval_total / max(evals, 1)]
    sums = torch.stack(tail).cpu().double()
    checksum = sums[:-2].sum().item()
    extra = ""
    if case == "pad_longest":
        extra = f" shapes={len(set(LONGEST))}"
    elif case == "item_logging":
        extra = f" syncs={syncs}"
    elif case == "eval_batch":
        extra = f" evals={evals} eval_loss={sums[-1].item():.6f}"
    loss = sums[-2].item()
    print(f"RESULT case={case} steps={steps} checksum={checksum:.9e} loss={loss:.6f}{extra}")


if __name__ == "__main__":
    main()
