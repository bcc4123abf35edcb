"""What torch_xla's IR debug costs per training step while tpuscope's agent has it on.

The agent switches `torch_xla._XLAC._set_ir_debug(True)` on only while a graph keeps compiling
after warm-up (so the recompiles' HLO names the line a changed constant comes from) and off once
compiles stop. While on, every IR node records its Python frames: tracing a step costs more.

One process, torch_xla's own CPU client (`PJRT_DEVICE=CPU`), a tiny transformers GPT-2 trained
with AdamW (the corpus model), all graphs compiled before measuring. Blocks of steps alternate
off / on; per step it takes the main thread's CPU time (`time.thread_time`, not charged while
the thread is descheduled: steadier than wall time on 2 noisy cores) of tracing (forward,
backward, optimizer) and of the whole step (tracing + `torch_xla.sync()`, a cached graph).
Prints the ratio on/off of the minima and of the medians over all blocks.

    PJRT_DEVICE=CPU python xla_ir_debug.py [--rounds N] [--block N] [--json FILE]
"""
import argparse
import json
import statistics
import sys
import time

import torch
import torch_xla
from transformers import GPT2Config, GPT2LMHeadModel


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--block", type=int, default=8)
    ap.add_argument("--json")
    args = ap.parse_args()
    xlac = torch_xla._XLAC
    if xlac._get_ir_debug():
        sys.exit("IR debug is already on (XLA_IR_DEBUG / XLA_HLO_DEBUG set?): nothing to compare")
    torch.manual_seed(0)
    dev = torch_xla.device()
    cfg = GPT2Config(vocab_size=256, n_positions=64, n_embd=64, n_layer=2, n_head=2,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(cfg).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(1, 256, (8, 32)).to(dev)

    def step():
        t0 = time.thread_time()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        t1 = time.thread_time()
        torch_xla.sync()
        return t1 - t0, time.thread_time() - t0

    # Warm-up: both graphs (first step, steady step) compiled, with the flag off and on (it is
    # not part of the graph hash: on reuses them).
    for on in (False, True, False):
        xlac._set_ir_debug(on)
        for _ in range(3):
            step()
    samples = {False: ([], []), True: ([], [])}
    for r in range(args.rounds):
        for on in ((False, True) if r % 2 == 0 else (True, False)):
            xlac._set_ir_debug(on)
            for _ in range(args.block):
                trace, whole = step()
                samples[on][0].append(trace)
                samples[on][1].append(whole)
    xlac._set_ir_debug(False)
    ms = lambda v: 1e3 * v  # noqa: E731
    out = {}
    for i, what in enumerate(("tracing", "step")):
        off, on = samples[False][i], samples[True][i]
        out[what] = {
            "off_min_ms": ms(min(off)),
            "on_min_ms": ms(min(on)),
            "ratio_min": min(on) / min(off),
            "off_median_ms": ms(statistics.median(off)),
            "on_median_ms": ms(statistics.median(on)),
            "ratio_median": statistics.median(on) / statistics.median(off),
            "steps_each": len(off),
        }
    print("torch_xla IR debug on vs off, per step, main-thread CPU time (GPT-2 2x64, AdamW):")
    for what, v in out.items():
        print(f"  {what:8s} min {v['off_min_ms']:.2f} -> {v['on_min_ms']:.2f} ms (x{v['ratio_min']:.2f})"
              f"   median {v['off_median_ms']:.2f} -> {v['on_median_ms']:.2f} ms (x{v['ratio_median']:.2f})"
              f"   {v['steps_each']} steps each")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
