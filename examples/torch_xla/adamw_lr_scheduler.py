"""AdamW with a learning-rate scheduler that changes the rate every step.

Usage: adamw_lr_scheduler.py [--capturable]   (or TPUSCOPE_EXAMPLE_CAPTURABLE=1)

The worry: the scheduler writes a new Python float into `group["lr"]` every step, and with
`capturable=False` AdamW also computes its bias corrections as Python floats from a CPU step
counter (`1 - beta1 ** step` ...). If the stack bakes such floats into the traced graph as
constants, the step graph is different every step and recompiles every step (a field report saw
exactly that on a patched stack). Stock torch_xla 2.9 sends non-special Python scalars to the
device as data instead (an f32[] host->device transfer each), so the graph stays the same.

Expected diagnosis on stock torch_xla 2.9 (CPU stand-in; see examples/README.md for what was
measured): the step graph is compiled once for the first step and once for the steady state,
then reused: no per-step recompile, with either capturable setting, so no finding. The line
marked `tpuscope-not: constant_changed` (the scheduler changing the rate) must not be reported
on this stack; a stack that baked the rate into the graph would recompile every step there.
"""
import os
import sys

import torch
import torch_xla

STEPS = 12
WARMUP = 4


def capturable_wanted():
    return "--capturable" in sys.argv[1:] or os.environ.get("TPUSCOPE_EXAMPLE_CAPTURABLE") == "1"


def main():
    capturable = capturable_wanted()
    torch.manual_seed(0)
    dev = torch_xla.device()
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1)
    ).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01, capturable=capturable)
    # Linear warmup over WARMUP steps, then inverse-sqrt decay: a new rate every step.
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / WARMUP if s < WARMUP else (WARMUP / (s + 1)) ** 0.5
    )
    w_true = torch.randn(16, 1)
    xs = [torch.randn(64, 16) for _ in range(4)]
    batches = [(x.to(dev), torch.tanh(x @ w_true).to(dev)) for x in xs]
    lrs = []
    for step in range(STEPS):
        x, y = batches[step % len(batches)]
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        lrs.append(opt.param_groups[0]["lr"])
        sched.step()  # tpuscope-not: constant_changed
        torch_xla.sync()
    final = loss.item()  # tpuscope-not: host_sync
    print("lrs: " + " ".join(f"{v:.6f}" for v in lrs))
    print(f"RESULT adamw_lr_scheduler capturable={capturable} steps={STEPS} loss={final:.6f} "
          f"distinct_lrs={len(set(lrs))}")


if __name__ == "__main__":
    main()
