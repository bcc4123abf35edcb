"""Writes torch_xla/truth/hf_gpt2.<case>.txt from torch_xla's own diagnostics (not from tpuscope).

    python make_truth_torch_xla.py [CASE...]          # all cases without arguments

Runs each case with torch_xla's own CPU client and `PT_XLA_DEBUG_LEVEL=2` through
`truth_torch_xla.py` (which prints torch_xla's metrics report at exit), then writes the command,
a summary of every compile and execution between the script's loop lines, the compile blocks
verbatim, the metrics that matter, the RESULT line, and the reading of it (READINGS below, with
`{name}` standing for the line of a marker, so that they follow the script when it is edited).
Use the torch_xla env's Python: ~/.cache/tpuscope/envs/torch_xla/bin/python make_truth_torch_xla.py
"""
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
SCRIPT = "tests/corpus/torch_xla/hf_gpt2.py"

# Lines the readings name, found by what the script's line holds.
LINES = {
    "model": "loss = model(**batch).loss  # tpuscope-lib",
    "sync": "torch_xla.sync()  # tpuscope-trigger[pad_longest",
    "eval_sync": "torch_xla.sync()  # tpuscope-trigger[eval_batch]",
    "pad": "# tpuscope[pad_longest]",
    "index": "# tpuscope[python_int_index]",
    "scale": "# tpuscope[python_float_scale]",
    "item": "# tpuscope[item_logging]",
    "loader": "# tpuscope[partial_batch]",
    "eval_split": "# tpuscope[eval_batch]",
    "tail": "sums = torch.stack(",
}

READINGS = {
    "clean": """- Compiles in the loop: 2, both at the step's `torch_xla.sync()` (hf_gpt2.py:{sync}): the first
  step's graph (AdamW's state is created in it) and the steady step graph, run by every later step.
  No recompile.
- Host reads in the loop: 0 (TransferFromDeviceTime counts 1: the read after the loop, :{tail}).""",
    "attn_mask": """- Compiles in the loop: 3: the two step graphs at :{sync} (as in clean), and a one-input graph
  at the model call (:{model}) compiled because transformers reads a value inside the forward:
  `padding_mask.all()` in `_ignore_causal_mask_sdpa` (transformers/masking_utils.py:255), reached
  from the model call. It is executed every step. No recompile.
- Host reads in the loop: 24, one per step, all from masking_utils.py:255 inside the model call at
  :{model} (TransferFromDeviceTime 25 = 24 + the read after the loop). Passing no attention_mask
  (clean), a 4D boolean mask, or attn_implementation="eager" removes it (checked with the same
  counter); no config flag does.""",
    "pad_longest": """- Compiles in the loop: 11, in steps 0-5, none later: 6 step graphs at :{sync} (the first step,
  then one per new batch width: 32, 24, 16, 28, 20) and 5 mask graphs at the model call :{model}
  (transformers' `.all()` read, once per width). The widths come from padding each batch to its
  own longest sequence (:{pad}). So the step graph recompiles for new shapes after warm-up, and
  the mask graph with it, in the same steps.
- Host reads in the loop: 24, masking_utils.py:255 inside the model call :{model}, as in attn_mask.""",
    "item_logging": """- Compiles in the loop: 3: a forward-only graph at `loss.item()` (:{item}), compiled once and
  run every step, and the two step graphs at :{sync}. No recompile.
- Host reads in the loop: 24, one `loss.item()` per step at :{item} (TransferFromDeviceTime 25).""",
    "python_int_index": """- Compiles in the loop: 5 in 5 steps, all at :{sync}: `data[step]` (:{index}) slices the device
  tensor with a Python int, a constant of the traced graph, so every step's graph is new
  (torch_xla's IR shows the slice bound k:k+1 with k = the step). constant_changed, every step.
- Host reads in the loop: 0.""",
    "python_float_scale": """- Compiles in the loop: 3, all at :{sync}: the first step's graph, the steady graph for the
  factors 0.4, 0.6, 0.8 (passed as device data: one graph), and at step 4, when the factor
  `min(1.0, (step + 1) / WARMUP_STEPS)` of :{scale} reaches 1.0, a graph in which it is a constant:
  torch_xla's IR dump (XLA_SAVE_TENSORS_FILE) of steps 3 and 4 differs only in
    -  %0 = f32[] xla::device_data(), xla_shape=f32[]
    +  %0 = f32[] prim::Constant(), xla_shape=f32[]
  (torch_xla bakes 0 and 1 in, and passes other Python floats as data). One recompile after
  warm-up: constant_changed.
- Host reads in the loop: 0.""",
    "partial_batch": """- Compiles in the loop: 3, all at :{sync}: the first step's graph, the steady step graph, and at
  step 7 a graph for the last batch of the first epoch, 4 sequences instead of 8: the loader keeps
  the partial batch (:{loader}). The later epochs' partial batches reuse it. One recompile after
  warm-up, for a new batch size: shape_changed.
- Host reads in the loop: 0.""",
    "eval_batch": """- Compiles in the loop: 4: the two step graphs at :{sync} (warm-up), then at the first evaluation
  (after step 8) the evaluation graph at the eval loop's `torch_xla.sync()` (:{eval_sync}) twice:
  for the batches of 4 and for the last batch of 2 (the held-out set of 10 is cut at
  :{eval_split}). Later evaluations reuse both. The evaluation graph recompiles for a new batch
  size: shape_changed.
- Host reads in the loop: 0.
- torch_xla counts 33 steps (MarkStep: 24 training steps and 3 evaluations of 3 batches).""",
}


def lines_of_markers():
    text = open(os.path.join(ROOT, SCRIPT)).read().splitlines()
    found = {}
    for name, needle in LINES.items():
        hits = [i + 1 for i, l in enumerate(text) if needle in l]
        if len(hits) != 1:
            sys.exit(f"{name}: {len(hits)} lines hold {needle!r}")
        found[name] = hits[0]
    return found


def blocks(section):
    """(kind, lines) of every analysis block in a section of stderr."""
    out, cur, kind = [], None, None
    for l in section.splitlines():
        for k, pre in (("compile", "Compilation Analysis: "), ("execute", "Execution Analysis: ")):
            if l.startswith(pre):
                if l[len(pre):].startswith("====="):
                    if cur is None:
                        cur, kind = [l], k
                    else:
                        cur.append(l)
                        out.append((kind, cur))
                        cur = None
                elif cur is not None:
                    cur.append(l)
    return out


def describe(block):
    body = [l.split(": ", 1)[1] if ": " in l else "" for l in block]
    cause = next((b.strip() for b in body if b.startswith("  ") and not b.strip().startswith("Graph")), "?")
    graph = next((b.split()[-1] for b in body if b.strip().startswith("Graph Hash:")), "?")
    frames = [b.strip() for b in body if b.startswith("  ") and b.strip().endswith(")") and " (" in b]
    at = next((f for f in frames if "hf_gpt2.py" in f), "?")
    via = next((f for f in frames if "site-packages/transformers" in f), None)
    via = f" via {via.split(' (')[0]} ({via.split('site-packages/')[1]}" if via else ""
    return f'cause "{cause}", graph {graph}, at {at}{via}'


def one(case, lines):
    cmd = ["env", "PJRT_DEVICE=CPU", "PT_XLA_DEBUG_LEVEL=2", "HF_HUB_OFFLINE=1", sys.executable,
           "tests/corpus/truth_torch_xla.py", SCRIPT, "--case", case]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{case}: exit {p.returncode}\n{p.stderr[-3000:]}")
    err = p.stderr
    a = err.index("tpuscope-corpus: loop start")
    b = err.index("tpuscope-corpus: loop end")
    setup, loop = blocks(err[:a]), blocks(err[a:b])
    summary = []
    for kind, blk in loop:
        d = describe(blk)
        if summary and summary[-1][0] == kind == "execute" and summary[-1][1] == d:
            summary[-1][2] += 1
        else:
            summary.append([kind, d, 1])
    metrics = []
    for name in ("Metric: CompileTime", "Metric: ExecuteTime", "Metric: TransferFromDeviceTime",
                 "Counter: MarkStep", "Counter: UncachedCompile", "Counter: CachedCompile"):
        m = re.search(re.escape(name) + r"\n(\s+\S.*)", err)
        if m:
            metrics.append(f"{name}\n{m.group(1)}")
    result = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
    text = [
        f"# Truth for {SCRIPT} --case {case}, from torch_xla's own diagnostics",
        "# (torch 2.9.0, torch_xla 2.9.0 with its built-in XLA CPU client, transformers 4.57.6);",
        "# written by tests/corpus/make_truth_torch_xla.py.",
        "",
        "COMMAND",
        f"cd <repo> && PJRT_DEVICE=CPU PT_XLA_DEBUG_LEVEL=2 HF_HUB_OFFLINE=1 \\",
        f"  ~/.cache/tpuscope/envs/torch_xla/bin/python tests/corpus/truth_torch_xla.py {SCRIPT} --case {case}",
        "",
        "SET-UP (stderr before `tpuscope-corpus: loop start`)",
        f"  {sum(k == 'compile' for k, _ in setup)} compilation(s), {sum(k == 'execute' for k, _ in setup)} execution(s)",
        "",
        "LOOP (between `tpuscope-corpus: loop start` and `tpuscope-corpus: loop end`), in order",
        f"  {sum(k == 'compile' for k, _ in loop)} compilation(s), {sum(k == 'execute' for k, _ in loop)} execution(s)",
    ]
    text += [f"    {k}{'' if n == 1 else f' x{n}'}: {d}" for k, d, n in summary]
    text += ["", "LOOP: every Compilation Analysis block, verbatim", ""]
    for kind, blk in loop:
        if kind == "compile":
            text += blk + [""]
    text += ["METRICS (torch_xla.debug.metrics.metrics_report() at exit; whole run)"] + metrics
    text += ["", *result, "", "TRUTH:", READINGS[case].format(**lines)]
    path = os.path.join(HERE, "torch_xla", "truth", f"hf_gpt2.{case}.txt")
    with open(path, "w") as f:
        f.write("\n".join(text) + "\n")
    print(f"wrote {path}")


def main():
    lines = lines_of_markers()
    for case in sys.argv[1:] or list(READINGS):
        one(case, lines)


if __name__ == "__main__":
    main()
