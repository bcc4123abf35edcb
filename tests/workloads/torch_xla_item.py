"""Workload: tiny torch_xla training loop (Linear, SGD, 5 steps), `loss.item()` every step
(a host sync) and `torch_xla.sync()` per step.

The plugin is chosen outside this script (PJRT_DEVICE plus a registered DevicePlugin, see
scripts/envs/FINDINGS.md); the script itself is plain torch_xla.
"""
import torch
import torch_xla

STEPS = 5


def main():
    torch.manual_seed(0)
    dev = torch_xla.device()
    model = torch.nn.Linear(16, 4).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(32, 16).to(dev)
    y = torch.randn(32, 4).to(dev)
    losses = []
    for step in range(STEPS):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        torch_xla.sync()
        losses.append(loss.item())
        print(f"step {step} loss={losses[-1]:.6f}")
    wsum = model.weight.sum().item()
    print(f"device={dev}")
    print(f"RESULT torch_xla_item steps={STEPS} loss={losses[-1]:.5f} wsum={wsum:.5f}")


if __name__ == "__main__":
    main()
