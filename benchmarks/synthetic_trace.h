// A synthetic training program's trace, produced through the tracer's own translator and
// encoder (fabricated CUPTI records and host records, as tracer/tests do), so the bytes are
// what a real tracer sends. Shared by the collector benchmarks and make_big_trace.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

namespace cumemtrace::bench {

struct SyntheticTraceOptions {
  // Wire events to produce (at least; the last iteration is finished).
  uint64_t events = 1'000'000;
  // Layers of the model: each iteration is forward, backward, optimizer over them, about
  // 8 events per layer (allocations, frees, kernels) plus 6 NVTX events.
  uint32_t layers = 64;
  // Iterations whose records the sender drains together: host records (NVTX) of a window
  // reach the wire before its CUPTI records, so batches are not time-ordered overall.
  uint32_t iterations_per_drain = 1;
};

struct SyntheticTraceStats {
  uint64_t events = 0;      // wire events, interned strings included
  uint64_t bytes = 0;       // trace file bytes
  uint64_t iterations = 0;
  uint64_t allocations = 0;
};

// Writes a whole trace file (preamble, header, one traced process, its exit) to `sink`, a
// piece at a time: memory stays bounded by one batch and the live allocations, whatever
// `options.events` is.
SyntheticTraceStats WriteSyntheticTrace(const SyntheticTraceOptions& options,
                                        const std::function<void(std::string_view)>& sink);

}  // namespace cumemtrace::bench
