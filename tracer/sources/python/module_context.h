// `run --modules`: the Python side's module hooks (cumemtrace_modules.py) name each module
// path once and say which one each thread is in; the bridge's hook copies the thread's into
// every tensor it sees born there (recorder.h's current_module).
#pragma once

#include <cstdint>

namespace cumemtrace::tracer {

// Defines module path `id` (> 0) as `path`; 0 when not recording or the arguments are bad.
uint32_t DefineModule(uint32_t id, const char* path);
// This thread is now in module `id` (0: none); returns the one it was in.
uint32_t EnterModule(uint32_t id);

}  // namespace cumemtrace::tracer
