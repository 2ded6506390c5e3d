// Which library made a CUDA call: the first stack frame outside the CUDA runtime, the
// driver, CUPTI and the tracer. It tells PyTorch's caching allocator (libc10_cuda.so) from
// cuBLAS's own workspaces (libcublasLt.so), which both call cudaMalloc.
#pragma once

#include <string>

namespace cumemtrace::tracer {

// Loads the unwinder ahead of time: its first use dlopens libgcc_s, which should not
// happen for the first time inside a CUDA call.
void PrepareCallerLookup();
// File name (no directory) of the calling module, or "" when no frame qualifies. Costs a
// stack walk: used only for the rare, synchronous allocation calls.
std::string CallerModule();
// True for the modules that sit between a program and the GPU (exposed for tests).
bool IsCudaStackModule(const std::string& file_name);

}  // namespace cumemtrace::tracer
