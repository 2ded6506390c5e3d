// The Python stack of the calling thread, read from the interpreter's frames (`run --stacks`).
// The CPython C API is looked up with dlsym(RTLD_DEFAULT) at first use: the tracer has no
// Python headers or library at build time, and a program without Python finds nothing and
// records no Python stacks. A thread that let go of the GIL inside a call (PyTorch's
// operators do, around their allocations) has its frames read directly, through the frame
// layout of its CPython version (3.11 to 3.13), checked before it is trusted; otherwise only a
// thread that holds the GIL has a Python stack, read through the API. Never
// PyGILState_Ensure: taking the GIL inside an allocation can deadlock against a thread that
// waits for this one while holding it.
#pragma once

#include <cstdint>
#include <string>

#include "tracer/recording/code_names.h"  // PythonCodeNames: the names of the keys

namespace cumemtrace::tracer {

// Writes up to `max` frames of the calling thread, innermost first, as pairs: out[2 i] a
// code key (names: PythonCodeNames), out[2 i + 1] the line in its low 32 bits and, in the
// two bits above them, whether the frame is its eval loop's entry frame (shared_ring.h
// kPythonEntry*: unknown, entered from C, called from Python within its caller's loop). Returns the
// number of frames; 0 without Python, on a thread with no Python frames (autograd's backward
// threads, CUDA's own), without the GIL on a Python with no known layout, before Py_Initialize,
// during finalization, when another thread is capturing at the same moment, or when re-entered on
// this thread (reading a name can run the garbage collector).
uint32_t CapturePythonFrames(uint64_t* out, uint32_t max);

// Once, after a thread without the GIL got no Python stack because no usable frame layout
// is known (another version, or a layout that failed its check): the text of the tracer's
// notice. False otherwise, and after the first time.
bool TakePythonFramesNotice(std::string* text);

// Tests: the frame layout is checked again from the start, as in a new process (or, with
// usable false, as after it failed its check); no notice told yet.
void ResetPythonFrameLayoutForTesting(bool usable = true);

// In a forked child: a thread of the parent may have held the table's lock.
void ResetPythonFramesInChildAfterFork();

}  // namespace cumemtrace::tracer
