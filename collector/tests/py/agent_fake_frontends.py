"""The agent's import hook and step markers, on stand-in frontend packages written here (so the
test needs neither torch nor torch_xla). Run with PYTHONPATH=<collector/python> and
TPUSCOPE_COLLECTOR=<collector.so>."""
import ctypes
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stackcheck import check  # noqa: E402

check("tpuscope_agent" in sys.modules, "the agent was not started by sitecustomize")
FILES = {
    "torch/__init__.py": "",
    "torch/optim/__init__.py": "",
    "torch/optim/optimizer.py": "hooks = []\ndef register_optimizer_step_post_hook(h):\n    hooks.append(h)\n",
    "torch_xla/__init__.py": "import torch\nfrom .core import xla_model\ncalls = []\n"
                             "def sync(wait=False, reset_scope=True):\n    calls.append('sync')\n",
    "torch_xla/core/__init__.py": "",
    "torch_xla/core/xla_model.py": "import torch_xla\ndef mark_step(wait=False, reset_scope=True):\n"
                                   "    torch_xla.sync(wait, reset_scope)\n",
}
root = tempfile.mkdtemp()
for rel, text in FILES.items():
    os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
    with open(os.path.join(root, rel), "w") as f:
        f.write(text)
sys.path.insert(0, root)

# Probing whether a frontend is installed (as transformers and accelerate do) is not an import.
import importlib.util  # noqa: E402

check(importlib.util.find_spec("torch_xla") is not None, "stand-in torch_xla not found")
check("tpuscope_agent.collector" not in sys.modules, "a find_spec probe woke the agent")
import torch_xla  # noqa: E402
import torch_xla.core.xla_model as xm  # noqa: E402
from tpuscope_agent import collector  # noqa: E402

check(collector._frontend_set, "the frontend was not reported")

check(getattr(torch_xla.sync, "__tpuscope_wrapped__", False), "torch_xla.sync not wrapped")
check(getattr(xm.mark_step, "__tpuscope_wrapped__", False), "mark_step not wrapped")
check(torch_xla.__loader__.__class__.__name__ != "_LoaderWithHook", "the module kept our loader")
torch_xla.sync()
xm.mark_step()  # calls torch_xla.sync inside: one step, marked "mark_step"
torch_xla.sync()
check(torch_xla.calls == ["sync"] * 3, f"sync calls {torch_xla.calls}")
check(collector._counts == {"torch_xla.sync": 2, "mark_step": 1}, f"step counts {collector._counts}")
import torch.optim.optimizer as optimizer  # noqa: E402

check(len(optimizer.hooks) == 1, "no optimizer post-step hook")
optimizer.hooks[0](None, (), {})
check(collector._counts.get("optimizer.step") == 1, f"step counts {collector._counts}")
# The agent's PyDLL and a later dlopen of the same path are one library.
check(ctypes.CDLL(os.environ["TPUSCOPE_COLLECTOR"])._handle == collector.lib()._handle,
      "the collector was loaded twice")
check(collector.selfcheck() == 1, "the import-time self-check did not agree")
print("OK agent_fake_frontends", collector._counts, flush=True)
