// Internal: PyTorch's two memory layers, made at decode time from the bridge's events
// (design.md "Tensors"), so that every later stage (peaks, lifetimes, phases, iterations,
// exports) sees tensors as allocations like any other:
// - each ALLOC/FREE_REQUESTED pair of the caching allocator becomes an allocation of kind
//   TORCH_ALLOCATED (device memory in use), its size the block's (what max_memory_allocated
//   counts): the allocator's cumulative counter as the device's next event saw it minus the
//   counter the ALLOC saw (a stats probe stands in for a next event);
// - once the bridge is attached, the driver memory libc10_cuda itself allocated (its
//   segments, cudaMalloc or cuMemMap) becomes TORCH_RESERVED: not counted in use again.
// Without the bridge nothing changes: segments stay DEVICE memory, as before.
#pragma once

#include <cstddef>
#include <cstdint>

#include "collector/engine/decoded_stream.h"
#include "cumemtrace/v1/trace.pb.h"

namespace cumemtrace::internal {

void AddTorchBridgeState(DecodedStream& stream, const v1::TorchBridgeState& state);
// An allocator event, in arrival order; may append allocation and release events.
void AddTorchAllocatorEvent(DecodedStream& stream, uint64_t timestamp_ns,
                            const v1::TorchAllocatorEvent& event);
// A forward op that allocated nothing (`run --ops`): what its node's backward allocations
// name. Outside every device's order; changes no figure of the allocator.
void AddTorchAutogradNode(DecodedStream& stream, const v1::TorchAutogradNode& node);
// A module path or operator name that tensor events refer to (`run --modules`, `--ops`).
void AddAttributionName(DecodedStream& stream, const v1::AttributionName& name);
// After each batch: retags the allocator's segments among the events from `first` on.
void RetagTorchSegments(DecodedStream& stream, size_t first);
// At the process's end: an allocation no event followed gets its size estimated.
void FlushTorchAllocations(DecodedStream& stream);

}  // namespace cumemtrace::internal
