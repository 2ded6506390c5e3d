#!/usr/bin/env python3
"""Does `run --stacks=python` read this Python's frames without the GIL? (docs/design.md,
"Stacks"). Builds tracer/sources/python/python_frames.cc alone, with the code names it fills
(tracer/recording/code_names.cc), into a small library (it needs no Python headers: the API
is found with dlsym) and calls it through ctypes, which lets go of the GIL around the call as
PyTorch's operators do, then through ctypes.PyDLL, which keeps it.

    python3 integration_tests/python/python_frames_probe.py [--cxx g++]

Prints the frames seen both ways and exits 0 when they name the caller's functions and lines
(also after the layout is trusted) where they should: with the GIL on every Python, without
it on 3.11 to 3.13 (the versions with a frame layout), and say which frame entered the eval
loop (a method called by map from C did, the function it calls from Python did not; every
frame did before 3.11); 1 when they do not, 2 when the library cannot be built.
"""
import argparse
import ctypes
import os
import subprocess
import sys
import tempfile

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHIM = r"""
#include <cstdio>
#include <string>
#include "tracer/sources/python/python_frames.h"
extern "C" int probe_frames(char* out, int size) {
  uint64_t pairs[2 * 64];
  const uint32_t n = cumemtrace::tracer::CapturePythonFrames(pairs, 64);
  int used = 0;
  for (uint32_t i = 0; i < n && used < size; ++i) {
    std::string function, file;
    cumemtrace::tracer::PythonCodeNames(pairs[2 * i], &function, &file);
    used += snprintf(out + used, size - used, "%s|%s|%llu|%llu\n", function.c_str(),
                     file.c_str(), static_cast<unsigned long long>(pairs[2 * i + 1] & 0xFFFFFFFFu),
                     static_cast<unsigned long long>(pairs[2 * i + 1] >> 32));
  }
  return static_cast<int>(n);
}
"""


def build(cxx, folder):
    shim = os.path.join(folder, "probe.cc")
    with open(shim, "w") as f:
        f.write(SHIM)
    library = os.path.join(folder, "libprobe.so")
    command = [cxx, "-std=c++17", "-O2", "-shared", "-fPIC", "-I", TOP, shim,
               os.path.join(TOP, "tracer", "sources", "python", "python_frames.cc"),
               os.path.join(TOP, "tracer", "recording", "code_names.cc"), "-o", library, "-ldl"]
    built = subprocess.run(command, capture_output=True, text=True)
    if built.returncode != 0:
        print(built.stderr, file=sys.stderr)
        sys.exit(2)
    return library


def frames(function):
    buffer = ctypes.create_string_buffer(1 << 16)
    n = function(buffer, len(buffer))
    rows = [line.split("|") for line in buffer.value.decode().splitlines()]
    return n, [(name, os.path.basename(file), int(line), int(entry))
               for name, file, line, entry in rows]


class Model:
    def forward(self, function):
        return frames(function)  # the line the innermost user frame must name


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cxx", default=os.environ.get("CXX", "g++"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        library = build(args.cxx, folder)
        without_gil = ctypes.CDLL(library).probe_frames  # ctypes releases the GIL
        with_gil = ctypes.PyDLL(library).probe_frames
        for f in (without_gil, with_gil):
            f.argtypes = [ctypes.c_char_p, ctypes.c_int]
            f.restype = ctypes.c_int
        forward_line = Model.forward.__code__.co_firstlineno + 1
        me = os.path.basename(__file__)
        ok = True
        layout = (3, 11) <= sys.version_info[:2] <= (3, 13)
        print(f"Python {sys.version.split()[0]} ({sys.executable}): frames without the GIL "
              + ("expected" if layout else "not expected (no frame layout for it)"))
        # Twenty rounds: the first walks are checked reads, the later ones trusted plain reads.
        for round_ in range(20):
            for label, function in (("without the GIL", without_gil), ("with the GIL", with_gil)):
                n, seen = Model().forward(function)
                want = ("Model.forward" if sys.version_info >= (3, 11) else "forward", me,
                        forward_line)
                good = n >= 3 and seen[1][:3] == want and seen[0][0] == "frames"
                # Entries (shared_ring.h kPythonEntry*: 1 entered, 2 called from Python). The
                # API's walk on 3.11 and later knows them only from a checked direct walk.
                _, mapped = list(map(Model().forward, [function]))[0]
                known = sys.version_info >= (3, 11) and (layout or function is without_gil)
                if sys.version_info < (3, 11):
                    good = good and all(f[3] == 1 for f in seen + mapped)
                elif known:
                    good = good and [f[3] for f in seen[:2]] == [2, 2] and \
                        [f[3] for f in mapped[:2]] == [2, 1] and seen[-1][3] == 1
                if function is without_gil and not layout:
                    good = n == 0
                if round_ in (0, 19) or not good:
                    print(f"round {round_} {label}: {'ok' if good else 'WRONG'}: {seen[:4]}")
                ok = ok and good
        print("frames as expected" if ok else "frames NOT as expected")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
