"""Bug: a `torch.compile`d model on TorchTPU fed batches of varying sequence length.

Batches are padded to the longest sequence of each batch, so the sequence length takes a new
value (16, 24, 32, 40, 48 tokens) batch after batch. Every new length is a new input shape for
the compiled model; each one costs a compile of a new TPU program.

Usage: compile_variable_seq.py [--dynamic=false|auto|true]   (default: false)

`dynamic=False` is the default here because it is what TorchTPU itself asks for: with
torch.compile's own default (`dynamic=None`, "automatic dynamic"), the second distinct length makes
dynamo recompile the graph with a symbolic sequence length, and TorchTPU lowers that with bounded
dynamic shapes (a `PadRealToStatic` custom call). The XLA CPU plugin that stands in for a TPU has
no implementation of that custom call, so on the stand-in `--dynamic=auto` fails at the second
length (a failed compile, then `NotImplementedError: Failed to lower FX graph with dynamic shapes
... Please set torch.compile(..., dynamic=False, ...)`).

Expected diagnosis: recompiles of the compiled forward program, cause "shape changed" (the
sequence dimension of the input), triggered at the line marked `tpuscope-trigger:
shape_changed`; the varying length comes from the line marked `tpuscope: shape_changed`.
Fix: pad to a few fixed buckets (or to one maximum length).
"""
import os
import sys

import torch

SEQ_LENS = (16, 24, 32, 40, 48, 24, 16, 48, 32, 40)
BATCH = 4
DIM = 32


class TinyEncoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = torch.nn.Linear(DIM, DIM)
        self.mix = torch.nn.Linear(DIM, DIM)
        self.out = torch.nn.Linear(DIM, 1)

    def forward(self, x):
        h = torch.tanh(self.inp(x))
        att = torch.softmax(h @ h.transpose(1, 2) / DIM**0.5, dim=-1)
        h = h + self.mix(att @ h)
        return self.out(h).mean(dim=1)


def dynamic_setting():
    for a in sys.argv[1:]:
        if a.startswith("--dynamic="):
            v = a.split("=", 1)[1]
            return {"auto": None, "false": False, "true": True}[v]
    return False


def main():
    dynamic = dynamic_setting()
    dev = torch.device("tpu")
    torch.manual_seed(0)
    model = TinyEncoder().to(dev)
    cmodel = torch.compile(model, dynamic=dynamic)
    gen = torch.Generator().manual_seed(1)
    outs = []
    with torch.no_grad():
        for seq_len in SEQ_LENS:
            x = torch.randn(BATCH, seq_len, DIM, generator=gen)  # tpuscope: shape_changed
            y = cmodel(x.to(dev))  # tpuscope-trigger: shape_changed
            outs.append(y)
        total = torch.stack([o.sum() for o in outs]).sum().item()  # tpuscope-not: host_sync
    print(f"RESULT compile_variable_seq dynamic={dynamic} batches={len(SEQ_LENS)} "
          f"lengths={len(set(SEQ_LENS))} total={total:.4f}")


if __name__ == "__main__":
    main()
