// The collector's side of a traced process's per-thread buffers of tensor events
// (proto/cumemtrace/v1/thread_buffers.h), which the tracer carves from its shared ring's memfd
// after the ring's data area: read once when the stream ends, for the events no frame
// carried. Every field was written by the traced process: each count, position and unit is
// checked before it is used, and a unit past a slot's commit is never read.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "proto/cumemtrace/v1/shared_ring.h"

namespace cumemtrace {

struct ThreadBufferRead {
  // The events, their times converted to CLOCK_MONOTONIC with the map the tracer's sender
  // wrote last.
  std::vector<v1::ring::TorchRecord> events;
  uint64_t fallbacks = 0;  // events the tracer wrote into the ring instead
  // Units that could not be read as events (an unknown kind, a TSC time with no map): a
  // damaged area stops its slot there.
  uint64_t rejected = 0;
};

// Reads `area` (`bytes` long: a copy or a read-only view): of each slot, the units from the
// later of its `freed` position and `received[slot]` (how far the received batches reach,
// EventBatch.thread_buffer_positions) up to its commit.
ThreadBufferRead ReadThreadBuffers(const unsigned char* area, uint64_t bytes,
                                   const std::unordered_map<uint32_t, uint64_t>& received);

// The same from the memfd `fd`, whose per-thread buffers start at `offset` (the ring's
// kHeaderBytes + capacity) and take `bytes`, appended as EventBatch frames (serialized
// StreamMessages) numbered from `sequence` to *frames; returns the events read.
uint64_t RecoverThreadBuffers(int fd, uint64_t offset, uint64_t bytes,
                              const std::unordered_map<uint32_t, uint64_t>& received,
                              uint64_t sequence, std::vector<std::string>* frames);

}  // namespace cumemtrace
