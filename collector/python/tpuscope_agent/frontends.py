"""What the agent does when each frontend starts and finishes importing."""

import functools
import os
import sys
import threading

from . import _warn, collector

_WRAPPED = "__tpuscope_wrapped__"
_tls = threading.local()


def before_import(name):
    """Called when `import <name>` starts: the frontend may load its plugin (the collector) while
    it imports (torch autoloads torch_tpu, which loads it), and the collector writes the frontend
    into the trace's manifest then, so say it now."""
    if name != "torch" and collector.lib() is not None:
        collector.set_frontend(name)


def on_import(name, module):
    """Called once, right after `import <name>` (a frontend, or torch) executed."""
    if name == "torch":
        _torch_imported()
        return
    if collector.lib() is None:
        return  # already reported; without the collector there is nothing to feed
    collector.set_frontend(name)
    _selfcheck()
    setup = {"jax": _setup_jax, "torch_xla": _setup_torch_xla, "torch_tpu": _setup_torch_tpu}
    setup[name](module)


def _selfcheck():
    # With the GIL held, here, on the importing thread: lets the collector verify its frame
    # reader against the C API before any hook needs it without the GIL.
    result = collector.selfcheck()
    if result == 0:
        _warn("Python stacks are available only where the GIL is held (see the trace's notes)")


def _guarded(what, fn, *args):
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001 - must never break the user's program
        _warn("%s failed" % what, e)
        return None


# --- JAX --------------------------------------------------------------------------------------


def _setup_jax(jax):
    _guarded("wrapping jax's compile entry", wrap_jax_compile)


def wrap_jax_compile():
    """Wraps `jax._src.compiler.compile_or_get_cached`, the one Python function through which
    every JAX compile reaches the backend (jit, pjit, AOT `.lower().compile()`, and persistent
    cache loads). JAX 0.10.2's `pxla._cached_compilation` calls it as a module attribute, so
    replacing the attribute is enough. PJRT runs the compile on a worker thread without Python
    frames; the stack captured here, on the requesting thread, stands in for it."""
    from jax._src import compiler

    original = compiler.compile_or_get_cached
    if getattr(original, _WRAPPED, False):
        return
    begin = collector.compile_request_begin
    end = collector.compile_request_end

    @functools.wraps(original)
    def compile_or_get_cached(*args, **kwargs):
        token = begin()
        try:
            return original(*args, **kwargs)
        finally:
            end(token)

    setattr(compile_or_get_cached, _WRAPPED, True)
    compiler.compile_or_get_cached = compile_or_get_cached


# --- torch (shared by torch_xla and torch_tpu) ------------------------------------------------

_after_torch = []


def _torch_initializing():
    """True while `import torch` is still executing torch/__init__.py (importlib marks the spec)."""
    torch = sys.modules.get("torch")
    spec = getattr(torch, "__spec__", None)
    return torch is not None and bool(getattr(spec, "_initializing", False))


def after_torch(what, fn, *args):
    """Runs `fn` now, or once `import torch` has finished if it is still running (torch imports
    torch_tpu from inside its own __init__, before the rest of torch is set up)."""
    if _torch_initializing():
        _after_torch.append((what, fn, args))
    else:
        _guarded(what, fn, *args)


def _torch_imported():
    while _after_torch:
        what, fn, args = _after_torch.pop(0)
        _guarded(what, fn, *args)



def _step_marker(fn, marker):
    """Wraps a step function so its return records a `Step` event. Nested markers (mark_step
    calls torch_xla.sync) record only the outermost one."""
    if getattr(fn, _WRAPPED, False):
        return fn

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if getattr(_tls, "in_step", False):
            return fn(*args, **kwargs)
        _tls.in_step = True
        try:
            return fn(*args, **kwargs)
        finally:
            _tls.in_step = False
            # After the call: the graph this step launched belongs to the step that closes here.
            _guarded("marking a step", collector.mark_step, marker)
            _after_step(marker)

    setattr(wrapper, _WRAPPED, True)
    return wrapper


# Called with the marker after each step is marked; each must guard itself (see
# XlaSourceOnRecompile). Empty unless a frontend's setup added one.
_step_watchers = []


def _after_step(marker):
    for watch in _step_watchers:
        watch(marker)


_optimizer_hooked = False


def hook_optimizer_steps():
    """Every `optimizer.step()` of any torch optimizer marks a step (`optimizer.step`)."""
    global _optimizer_hooked
    if _optimizer_hooked:
        return
    from torch.optim.optimizer import register_optimizer_step_post_hook

    def post_step(optimizer, args, kwargs):
        _guarded("marking a step", collector.mark_step, "optimizer.step")
        _after_step("optimizer.step")

    register_optimizer_step_post_hook(post_step)
    _optimizer_hooked = True


# --- torch_xla --------------------------------------------------------------------------------


def _setup_wanted(frontend):
    """Whether to bring `frontend` up on the collector: `tpuscope run` on a machine without a TPU
    sets TPUSCOPE_STANDIN=1 for whichever frontend the script imports; TPUSCOPE_SETUP names one."""
    return os.environ.get("TPUSCOPE_SETUP") == frontend or os.environ.get("TPUSCOPE_STANDIN") == "1"


def _setup_torch_xla(torch_xla):
    if _setup_wanted("torch_xla"):
        _guarded("registering the collector as a torch_xla device plugin", register_xla_plugin)
    _guarded("wrapping torch_xla.sync", wrap_xla_steps, torch_xla)
    _guarded("hooking optimizer steps", hook_optimizer_steps)
    _guarded("watching torch_xla recompiles", watch_xla_recompiles, torch_xla)


def wrap_xla_steps(torch_xla):
    if hasattr(torch_xla, "sync"):
        torch_xla.sync = _step_marker(torch_xla.sync, "torch_xla.sync")
    xm = sys.modules.get("torch_xla.core.xla_model")
    if xm is None:
        import torch_xla.core.xla_model as xm
    if hasattr(xm, "mark_step"):
        xm.mark_step = _step_marker(xm.mark_step, "mark_step")


def register_xla_plugin():
    """Registers the collector as a torch_xla PJRT device plugin named by `PJRT_DEVICE`, before
    the user's code touches the device (`PJRT_DEVICE=CPU` would be torch_xla's in-process client,
    which never goes through a plugin)."""
    from torch_xla.experimental import plugins

    name = os.environ.get("PJRT_DEVICE", "")
    if not name or name.upper() in ("CPU", "CUDA", "TPU", "NEURON", "XPU"):
        raise RuntimeError("PJRT_DEVICE=%r does not name a plugin device" % name)
    if "_" in name:
        # torch_xla's device type is PJRT_DEVICE.split("_")[0]: the name would not match.
        raise RuntimeError("PJRT_DEVICE=%r: a plugin device name cannot contain '_'" % name)
    library = os.environ["TPUSCOPE_COLLECTOR"]

    class TpuscopePlugin(plugins.DevicePlugin):
        def library_path(self):
            return library

        def physical_chip_count(self):
            return 1

        def client_create_options(self):
            # One CPU device, as torch_xla's own CPU client has: with the CPU plugin's default of
            # four, torch_xla 2.9 hangs at the second step's first host read.
            return {"cpu_device_count": int(os.environ.get("TPUSCOPE_STANDIN_DEVICES", "1"))}

        def configure_single_process(self):
            pass

    plugins.register_plugin(name, TpuscopePlugin())


def _off(name):
    """The collector's reading of an off switch (`0`, `off`, `false`, `no`)."""
    return os.environ.get(name, "").strip() in ("0", "off", "false", "no")


def watch_xla_recompiles(torch_xla):
    """Without XLA_IR_DEBUG / XLA_HLO_DEBUG, torch_xla's HLO has no per-op source lines, and a
    recompile's changed constant can be traced only to the `sync()` that compiled it. Recording
    them costs tracing time on every op, so it is switched on only once a graph keeps compiling
    (see XlaSourceOnRecompile). Left alone when the user set either variable (even to 0), with
    TPUSCOPE_ENABLE=0 (nothing records the compiles), or TPUSCOPE_XLA_DEBUG_ON_RECOMPILE=0."""
    if _off("TPUSCOPE_XLA_DEBUG_ON_RECOMPILE") or _off("TPUSCOPE_ENABLE"):
        return
    if "XLA_IR_DEBUG" in os.environ or "XLA_HLO_DEBUG" in os.environ:
        return
    xlac = getattr(torch_xla, "_XLAC", None)
    if not all(
        hasattr(xlac, f) for f in ("_set_ir_debug", "_get_ir_debug", "_xla_counter_value")
    ):
        return  # a torch_xla without the run-time switch: nothing to do
    if xlac._get_ir_debug():
        return  # already on (set before we were)
    _step_watchers.append(XlaSourceOnRecompile(xlac))


class XlaSourceOnRecompile:
    """Switches torch_xla's IR debug on while graphs keep compiling after warm-up.

    torch_xla 2.9 reads XLA_IR_DEBUG / XLA_HLO_DEBUG once, into `FLAGS_torch_lazy_ir_debug`;
    `_XLAC._set_ir_debug` sets that same flag at run time. With it on, each IR node created
    records its Python frames and lowering writes them into the HLO's OpMetadata, so the graphs
    traced after the switch carry source lines. The flag is not part of the graph hash: graphs
    already cached are not compiled again.

    Polled after each step: `UncachedCompile` (torch_xla's graph-cache misses) costs well under
    a microsecond. Ticks come from sync/mark_step, or from optimizer steps in a program that
    never syncs explicitly. After `QUIET` ticks without a compile (or twice the last gap between
    compiles, if longer) it is switched off again, so a program whose compiles stopped stops
    paying for the frames. Each switch is a `Step` event with marker `tpuscope.ir_debug_on` /
    `tpuscope.ir_debug_off` in the trace."""

    WARMUP = 2  # ticks whose compiles are the program's own warm-up
    NEEDED = 2  # ticks with a compile after warm-up (since the last switch-off) that switch it on
    QUIET = 16

    def __init__(self, xlac):
        self._compiles = functools.partial(xlac._xla_counter_value, "UncachedCompile")
        self._set = xlac._set_ir_debug
        self._get = xlac._get_ir_debug
        self._lock = threading.Lock()
        self._clock = None  # "sync" or "optimizer": which markers tick
        self._ticks = 0
        self._seen = 0  # the counter at the last tick
        self._hits = 0
        self._last_hit = 0  # the tick of the last compile
        self._gap = 0  # ticks between the last two compiles
        self._on = False
        self._dead = False

    def __call__(self, marker):
        if self._dead or not self._lock.acquire(False):
            return  # another thread is ticking: one tick is enough
        try:
            self._tick("optimizer" if marker == "optimizer.step" else "sync")
        except Exception as e:  # noqa: BLE001 - must never break the user's program
            self._dead = True
            _warn("watching torch_xla recompiles failed", e)
        finally:
            self._lock.release()

    def _tick(self, kind):
        if kind != self._clock:
            if self._clock == "sync":
                return
            # Sync markers, once seen, are the clock: an optimizer step is not a graph boundary.
            self._clock, self._ticks = kind, 0
        n = self._compiles() or 0  # None until the first compile
        compiled = n != self._seen  # also when the user cleared the counters
        self._seen = n
        self._ticks += 1
        if self._ticks <= self.WARMUP:
            return
        if compiled:
            if self._last_hit:
                self._gap = self._ticks - self._last_hit
            self._last_hit = self._ticks
            self._hits += 1
            if not self._on and self._hits >= self.NEEDED:
                self._switch(True)
        elif self._on and self._ticks - self._last_hit >= max(self.QUIET, 2 * self._gap):
            self._switch(False)

    def _switch(self, on):
        if self._get() != self._on:
            self._dead = True  # someone else switched it: theirs from now on
            return
        self._set(on)
        self._on = on
        self._hits = 0
        marker = "tpuscope.ir_debug_on" if on else "tpuscope.ir_debug_off"
        _guarded("marking the IR debug switch", collector.mark_step, marker)


# --- torch_tpu --------------------------------------------------------------------------------


def _setup_torch_tpu(torch_tpu):
    # `import torch` autoloads torch_tpu (entry point `torch.backends`) from the end of torch's
    # __init__, so this may run while torch is still importing: wait for it to finish.
    after_torch("hooking optimizer steps", hook_optimizer_steps)
    if _setup_wanted("torch_tpu"):
        after_torch("starting the torch_tpu device", start_torch_tpu_device, torch_tpu)


def start_torch_tpu_device(torch_tpu):
    """torch_tpu 0.2.0 brings its device up only if a PCI scan finds a TPU; without one, the
    private `_loader._init_device("tpu")` forces it, on the plugin `TPU_LIBRARY_PATH` names (the
    collector, standing in). The PJRT client itself is created on the first device op."""
    loader = getattr(torch_tpu, "_loader", None)
    if loader is None:
        import torch_tpu._loader as loader
    if not getattr(loader, "_DEVICE_INITIALIZED", False):
        loader._init_device("tpu")
