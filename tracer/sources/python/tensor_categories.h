// What tensors are, as the program's own objects say: the tracer's Python side
// (cumemtrace_categories.py) reads the optimizers' param_groups and state and
// the modules' parameters and buffers, and names each storage through
// cumemtrace_tensor_categories (process/injection.cc). One record per storage, on the calling thread.
#pragma once

#include <cstdint>

namespace cumemtrace::tracer {

// Records `count` storages of one v1::Category: addresses[i] on devices[i], bytes[i] long,
// live at `timestamp_ns` (CLOCK_MONOTONIC, Python's time.monotonic_ns(); 0: now). Returns how
// many were recorded (0 while not recording, or for a category out of range).
uint32_t RecordTensorCategories(uint32_t category, uint32_t count, const uint64_t* addresses,
                                const uint64_t* bytes, const uint32_t* devices,
                                uint64_t timestamp_ns);

}  // namespace cumemtrace::tracer
