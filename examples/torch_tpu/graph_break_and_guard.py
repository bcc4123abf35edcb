"""Bug: a `torch.compile`d step with a forced graph break and a Python float global that changes.

Two dynamo problems that PJRT alone only sees as their effects:

- `torch._dynamo.graph_break()` (standing in for a debug print, an `.item()` or any other call
  dynamo cannot trace) splits the step into two graphs: the one before the break and a "resume"
  function after it, each compiled on its own, and two programs launched per step instead of one.
- `LOSS_SCALE` is a module-level Python float read inside the compiled code: dynamo bakes its value
  into the graph and guards on it (`G['LOSS_SCALE'] == 0.5`). Each new value fails that guard and
  recompiles the resume function, a new TPU program per value.

Run under `tpuscope run` (which sets TORCH_TRACE) so that the report can put dynamo's own account
of both, with their lines, next to the compiles they caused.

Expected diagnosis: a graph break at the line marked `tpuscope: graph_break` (compiled once, in
the first call); a guard failure at the line marked `tpuscope: guard_failure`, recompiling the
resume function once per new value (len(SCALES) - 1 times).
Fix: remove the break (or move it out of the step); pass the scale as a tensor.
"""
import torch

SCALES = (0.5, 0.25, 0.125)
STEPS_PER_SCALE = 3
BATCH = 8
DIM = 16

LOSS_SCALE = SCALES[0]


def step(x, w):
    h = torch.tanh(x @ w)
    torch._dynamo.graph_break()  # tpuscope: graph_break
    return (h * LOSS_SCALE).sum()  # tpuscope: guard_failure


def main():
    global LOSS_SCALE
    dev = torch.device("tpu")
    torch.manual_seed(0)
    w = torch.randn(DIM, DIM).to(dev)
    xs = [torch.randn(BATCH, DIM).to(dev) for _ in range(STEPS_PER_SCALE)]
    cstep = torch.compile(step, dynamic=False)
    total = torch.zeros((), device=dev)
    steps = 0
    for scale in SCALES:
        LOSS_SCALE = scale
        for x in xs:
            total += cstep(x, w)
            steps += 1
    print(f"RESULT graph_break_and_guard steps={steps} scales={len(SCALES)} "
          f"recompiles={len(SCALES) - 1} total={total.item():.4f}")


if __name__ == "__main__":
    main()
