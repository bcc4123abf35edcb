"""Attributes perf samples (output of `perf script --no-inline -F comm,tid,time,ip,sym,dso`) to
the parts of the collector. Used by scripts/bench/profile.sh.

Usage: attribute.py plain|execute PERF_SCRIPT_TEXT
       attribute.py jax PERF_SCRIPT_TEXT LOOP_START LOOP_END
"""
import collections
import sys

COLLECTOR = "libtpuscope_collector"
PLUGIN = "pjrt_c_api_cpu_plugin"
# Frames that do work on someone else's behalf: a sample there belongs to the nearest caller
# outside them.
RUNTIME = ("libc.so", "kernel.kallsyms", "[vdso]", "ld-linux", "libgcc_s", "libstdc++")


def parse(path):
    samples, cur = [], None
    with open(path, errors="replace") as f:
        for line in f:
            if not line.strip():
                if cur:
                    samples.append(cur)
                cur = None
                continue
            if not line[0].isspace():
                head = line.split()
                t = None
                for h in head[2:]:
                    try:
                        t = float(h.rstrip(":"))
                        break
                    except ValueError:
                        pass
                cur = {"comm": head[0], "time": t, "frames": []}
            elif cur is not None:
                parts = line.strip().split(" ", 1)
                cur["frames"].append(parts[1] if len(parts) > 1 else "")
    if cur:
        samples.append(cur)
    return samples


def sym(frame):
    return frame.split(" (")[0]


def owner(frames):
    """The innermost frame that is not libc / kernel / vdso / loader."""
    for f in frames:
        if not any(r in f for r in RUNTIME):
            return f
    return frames[0] if frames else ""


def show(counter, total, limit=25):
    for k, v in counter.most_common(limit):
        print("  %6d  %5.1f%%  %s" % (v, 100.0 * v / total, k))


def hook_breakdown(samples, entry, classify):
    """Samples on the benchmark's main thread inside the hook `entry`, by `classify(frames)`."""
    main = [s for s in samples if not s["comm"].startswith("tpuscope")]
    inside = [s for s in main if any(entry in f for f in s["frames"])]
    c = collections.Counter(classify(s["frames"]) for s in inside)
    print("samples on the calling thread inside %s: %d (of %d on that thread)" % (entry, len(inside), len(main)))
    show(c, max(1, len(inside)))
    writer = [s for s in samples if s["comm"] == "tpuscope-writer"]
    print("writer thread: %d samples; by function:" % len(writer))
    show(collections.Counter(sym(owner(s["frames"]))[:90] for s in writer), max(1, len(writer)), 12)


def classify_plain(frames):
    txt = " | ".join(frames)
    if PLUGIN in frames[0] if frames else False:
        return "the real PJRT_Event_Await"
    if "clock_gettime" in txt or "monotonic_ns" in txt:
        return "clock_gettime (t0, t1)"
    if "malloc" in txt or "free" in txt or "__rust_alloc" in txt or "__rdl_alloc" in txt:
        # Which allocation: the record's `reason` String or the boxed Event.
        if "to_string" in txt or "From<&str>" in txt:
            return "malloc: String for Sync.reason (to_string)"
        if "box_new" in txt or "Box<T>::new" in txt or "Recorder::push" in txt:
            return "malloc: Box<Event> in Recorder::push"
        return "malloc: other"
    if "memmove" in txt or "memcpy" in txt:
        if "box_new" in txt or "Box<T>::new" in txt or "Recorder::push" in txt:
            return "memcpy: copying the Event into its queue slot"
        return "memcpy: moving the Event / Record (building it)"
    if "ArrayQueue" in txt:
        return "queue push (ArrayQueue)"
    if "__tls_get_addr" in txt:
        return "thread-locals (__tls_get_addr)"
    return "hook code: " + sym(frames[0])[:80]


def classify_execute(frames):
    txt = " | ".join(frames)
    i = max(i for i, f in enumerate(frames) if "ffi::hooks::execute" in f)
    inner = frames[:i]
    if inner and PLUGIN in owner(inner) and "arg_signature" not in txt and "track" not in txt \
            and "watch_completion" not in txt and "describe" not in txt:
        return "the real execute"
    for key, label in (("shape_id", "arg signature: shape of a new buffer (plugin queries, lock)"),
                       ("arg_signature", "arg signature: hash / lookup"),
                       ("live_buffers", "output tracking: live-buffer map"),
                       ("track", "output tracking: plugin size / device queries"),
                       ("watch_completion", "completion: PJRT_Event_OnReady registration"),
                       ("Recorder", "record: Box<Event> + queue push"),
                       ("recorder::record", "record: Box<Event> + queue push"),
                       ("clock_gettime", "clock_gettime"),
                       ("monotonic_ns", "clock_gettime")):
        if key in txt:
            return label
    return "hook code: " + sym(inner[0] if inner else frames[0])[:80]


def jax_share(samples, start, end):
    loop = [s for s in samples if s["time"] is not None and start <= s["time"] <= end]
    total = len(loop)
    print("samples in the timed loop: %d (of %d)" % (total, len(samples)))
    own = [s for s in loop if s["comm"].startswith("tpuscope")]
    inline = [s for s in loop if not s["comm"].startswith("tpuscope") and COLLECTOR in owner(s["frames"])]
    print("collector threads (writer, memory sampler): %5.2f%% of all samples" % (100.0 * len(own) / max(1, total)))
    print("collector code on the frontend's threads:   %5.2f%% of all samples" % (100.0 * len(inline) / max(1, total)))
    by_hook = collections.Counter()
    for s in inline:
        col = [f for f in s["frames"] if COLLECTOR in f]
        by_hook[sym(col[-1]) if col else "?"] += 1
    show(by_hook, max(1, total), 12)
    print("threads:")
    show(collections.Counter(s["comm"] for s in loop), max(1, total), 12)


def main():
    what, path = sys.argv[1], sys.argv[2]
    samples = parse(path)
    if what == "plain":
        hook_breakdown(samples, "transfers::event_await", classify_plain)
    elif what == "execute":
        hook_breakdown(samples, "ffi::hooks::execute", classify_execute)
    else:
        jax_share(samples, float(sys.argv[3]), float(sys.argv[4]))


if __name__ == "__main__":
    main()
