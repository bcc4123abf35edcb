"""A clean torch_xla training loop: nothing to find.

Fixed-shape batches already on the device, AdamW with a constant learning rate, one
`torch_xla.sync()` per step, the running loss accumulated on the device and read once after the
loop. The first step's graph also creates the optimizer state, so the step graph is compiled
twice (first step, then the steady state) and reused from then on: that is not a recompile
problem.

Expected diagnosis: no finding (no per-step compile, no host sync inside the loop, one read at
the end).
"""
import torch
import torch_xla

STEPS = 16


def main():
    torch.manual_seed(0)
    dev = torch_xla.device()
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1)
    ).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    w_true = torch.randn(16, 1)
    xs = [torch.randn(64, 16) for _ in range(4)]
    batches = [(x.to(dev), torch.tanh(x @ w_true).to(dev)) for x in xs]
    running = torch.zeros((), device=dev)
    for step in range(STEPS):
        x, y = batches[step % len(batches)]
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        running += loss.detach()
        torch_xla.sync()
    mean_loss = (running / STEPS).item()  # tpuscope-not: host_sync
    print(f"RESULT clean_loop steps={STEPS} mean_loss={mean_loss:.6f}")


if __name__ == "__main__":
    main()
