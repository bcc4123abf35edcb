"""Bug: a Python `if` on a device tensor (`if loss > SPIKE:`) inside the training step.

Python needs a real bool, so torch_xla must run the graph built so far (the forward pass and
the comparison), copy the result to the host and wait for it: a host sync in the middle of every
step, at the `if` line. Then the two branches trace different graphs, so the step program comes
in two variants (with and without the loss damping) and the trace sees a compile whenever the
branch taken changes for the first time.

Expected diagnosis: one host sync per step at the line marked `tpuscope: host_sync`
(device->host read of a pred[] scalar), plus a data-dependent graph variant: the step graph is
compiled in two versions (the loss is above SPIKE for the first 4 steps, below it after) that
differ by the ops of the branch body (a multiply by 0.5 from the
line marked `tpuscope: branch_variant`; the compiles are requested at `tpuscope-trigger:
branch_variant`), not by shapes or constants of the same ops. Fix: make the
branch a tensor op (`loss = torch.where(loss > SPIKE, loss * 0.5, loss)`), no Python `if`.
"""
import torch
import torch_xla

STEPS = 12
BATCH = 64
SPIKE = 0.5


def main():
    torch.manual_seed(0)
    dev = torch_xla.device()
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1)
    ).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.2)
    w_true = torch.randn(16, 1)
    xs = [torch.randn(BATCH, 16) for _ in range(4)]
    batches = [(x.to(dev), torch.tanh(x @ w_true).to(dev)) for x in xs]
    damped = 0
    for step in range(STEPS):
        x, y = batches[step % len(batches)]
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        if loss > SPIKE:  # tpuscope: host_sync
            loss = loss * 0.5  # tpuscope: branch_variant
            damped += 1
        loss.backward()
        opt.step()
        torch_xla.sync()  # tpuscope-trigger: branch_variant
    x0, y0 = batches[0]
    final = torch.nn.functional.mse_loss(model(x0), y0).item()  # tpuscope-not: host_sync
    print(f"RESULT branch_on_loss steps={STEPS} damped={damped} loss={final:.6f}")


if __name__ == "__main__":
    main()
