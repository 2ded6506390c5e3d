#!/usr/bin/env python3
"""`cumemtrace run --stacks=python` on a real Python program, without a GPU: the program loads
the fake libcupti (tests/fake_cupti.cc) that the real tracer, preloaded by `run`, subscribes
to, and reports two cuMemAlloc_v2 calls through it from a known method, holding the GIL
(ctypes.PyDLL) as a Python extension calling CUDA would. The trace must name that method's
lines: in summary.json's top stacks, in report.html's stack table and in the memory_viz
export. It runs twice: once holding the GIL (ctypes.PyDLL) as a Python extension calling CUDA
would, once having let go of it (ctypes.CDLL) as PyTorch's operators do around their
allocations (read without the GIL through the interpreter's frame layout, Python 3.11 to 3.13).

  python_stacks_end_to_end.py CUMEMTRACE FAKE_LIBCUPTI WORK_DIR
"""
import base64
import json
import os
import pickle
import re
import shutil
import struct
import subprocess
import sys
import textwrap

PROGRAM = textwrap.dedent('''
    import ctypes, os
    lib = getattr(ctypes, os.environ["LOADER"])(os.environ["FAKE_CUPTI"])

    class Params(ctypes.Structure):
        _fields_ = [("dptr", ctypes.POINTER(ctypes.c_uint64)), ("bytesize", ctypes.c_size_t)]

    def allocate(address, size):
        value = ctypes.c_uint64(address)
        params = Params(ctypes.pointer(value), size)
        status = ctypes.c_int(0)
        # CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2
        lib.fake_cupti_call(1, 243, b"cuMemAlloc_v2", ctypes.byref(params),  # ALLOCATE_LINE
                            ctypes.byref(status), ctypes.c_uint32(address >> 16),
                            ctypes.c_void_p(0x1000), None, None, None)

    class Model:
        def forward(self):
            allocate(0x7000000, 64 << 20)  # BIG_LINE
            allocate(0x9000000, 1 << 20)  # SMALL_LINE

    Model().forward()  # MAIN_LINE
''')


def line_of(marker):
    for number, text in enumerate(PROGRAM.splitlines(), start=1):
        if "# " + marker in text:
            return number
    raise AssertionError(marker)


def main():
    cumemtrace, fake, top = sys.argv[1:4]
    shutil.rmtree(top, ignore_errors=True)
    loaders = ["PyDLL"]
    if (3, 11) <= sys.version_info[:2] <= (3, 13):
        loaders.append("CDLL")
    for loader in loaders:
        check(cumemtrace, fake, os.path.join(top, loader), loader)
        print(f"ok: python stacks end to end, {loader}")
        check_all(cumemtrace, fake, os.path.join(top, loader + "-all"), loader)
        print(f"ok: merged native and python stacks end to end, {loader}")


def run(cumemtrace, fake, work, loader, stacks):
    """Runs PROGRAM under `cumemtrace run --stacks=STACKS`: (script, output folder)."""
    os.makedirs(work)
    script = os.path.join(work, "stacks_program.py")
    with open(script, "w") as f:
        f.write(PROGRAM)
    out = os.path.join(work, "out")
    env = dict(os.environ, FAKE_CUPTI=fake, LD_PRELOAD=fake, LOADER=loader,
               # Names no file: the tracer starts CUPTI (the fake) from its constructor.
               CUDA_INJECTION64_PATH=os.path.join(work, "no-such-injection"))
    env.pop("CUMEMTRACE_STACKS", None)
    proc = subprocess.run([cumemtrace, "run", f"--stacks={stacks}", "-o", out, "--", "python3",
                           script], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return script, out


def page_stacks(out):
    """report.html's stacks by allocation size: [(function, file, line, kind)], innermost first."""
    html = open(os.path.join(out, "report.html"), encoding="utf-8").read()
    data = json.loads(re.search(
        r'<script id="cumemtrace-data" type="application/json">(.*?)</script>', html, re.S).group(1))
    process = next(p for p in data["processes"] if "stacks" in p)
    frames, stacks = process["stacks"]["frames"], process["stacks"]["stacks"]
    columns = process["devices"][0]["allocations"]
    sizes = struct.unpack(f"<{columns['n']}d", base64.b64decode(columns["bytes"]))
    stack_of = struct.unpack(f"<{columns['n']}i", base64.b64decode(columns["stack"]))
    seen = {}
    for size, s in zip(sizes, stack_of):
        assert s >= 0, "an allocation without a stack"
        seen[int(size)] = [(frames["function"][f], frames["file"][f], frames["line"][f],
                            frames["kind"][f]) for f in stacks[s]]
    return seen, frames


def check_all(cumemtrace, fake, work, loader):
    """--stacks=all: the tracer's and CUPTI's (here the fake's) frames are in no stack, and the
    interpreter's native frames gave way to the Python frames they ran, in their place."""
    script, out = run(cumemtrace, fake, work, loader, "all")
    seen, frames = page_stacks(out)
    for name in frames["file"]:
        base = os.path.basename(name)
        assert not base.startswith(("libcumemtrace", "libcupti")), name
    stack = seen[64 << 20]
    python = [(f[0], f[2]) for f in stack if f[3] == "python"]
    forward = "Model.forward" if sys.version_info >= (3, 11) else "forward"
    assert python == [("allocate", line_of("ALLOCATE_LINE")), (forward, line_of("BIG_LINE")),
                      ("<module>", line_of("MAIN_LINE"))], stack
    if all(f[0].startswith("0x") for f in stack if f[3] == "native"):
        # A build without libdw names no native frame: nothing to merge by.
        print("note: native frames are not named here; the merge is not checked")
        return
    interpreter = os.path.basename(os.path.realpath(sys.executable))
    for function, file, _, kind in stack:
        if kind == "native":
            assert not function.startswith("_PyEval_EvalFrameDefault"), stack
            assert not os.path.basename(file).startswith(("libpython", interpreter)), stack
    # Merged: ctypes' native frames (the call into the fake) come before the Python frame that
    # made the call, the first frame of all is native, and the Python frames come together.
    kinds = [f[3] for f in stack]
    first_python = kinds.index("python")
    assert first_python > 0 and kinds[0] == "native", stack


def check(cumemtrace, fake, work, loader):
    script, out = run(cumemtrace, fake, work, loader, "python")
    allocate, big, small = line_of("ALLOCATE_LINE"), line_of("BIG_LINE"), line_of("SMALL_LINE")

    # summary.json: the two stacks, largest first, named by the user's innermost frame.
    summary = json.load(open(os.path.join(out, "summary.json")))
    tops = [d["peak"].get("top_stacks", []) for p in summary["processes"] for d in p["devices"]]
    tops = [t for t in tops if t]
    assert len(tops) == 1, tops
    top = tops[0]
    assert [t["bytes"] for t in top] == [64 << 20, 1 << 20], top
    assert top[0]["frame"] == f"{script}:{allocate} in allocate", top

    # report.html: each allocation's stack, innermost first, in the page's layout.
    seen = {size: [(f, os.path.basename(file), line, kind) for f, file, line, kind in stack]
            for size, stack in page_stacks(out)[0].items()}
    name = os.path.basename(script)
    forward = "Model.forward" if sys.version_info >= (3, 11) else "forward"  # co_qualname
    assert seen[64 << 20][:3] == [("allocate", name, allocate, "python"),
                                  (forward, name, big, "python"),
                                  ("<module>", name, line_of("MAIN_LINE"), "python")], seen[64 << 20]
    assert seen[1 << 20][1] == (forward, name, small, "python"), seen[1 << 20]

    # memory_viz: PyTorch's frames on the segments still allocated at the end.
    viz_path = os.path.join(work, "viz.pickle")
    subprocess.run([cumemtrace, "export", "--format", "memory-viz", "-o", viz_path,
                    os.path.join(out, "trace.cmtrace")], check=True, capture_output=True)
    viz = pickle.load(open(viz_path, "rb"))
    segment = next(s for s in viz["segments"] if s["total_size"] == 64 << 20)
    assert segment["frames"][:2] == [
        {"filename": script, "line": allocate, "name": "allocate"},
        {"filename": script, "line": big, "name": forward}], segment["frames"]


if __name__ == "__main__":
    main()
