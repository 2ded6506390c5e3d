// The collector's side of a traced process's shared ring (proto/cumemtrace/v1/shared_ring.h):
// the descriptor received with the handshake, kept until the stream ends, then read once for
// the records no frame carried. Everything in the ring was written by the traced process, so
// every offset, size and count is checked before it is used, and each record is copied out
// of the mapping before it is decoded (the process, or a child that shares the mapping, may
// still be writing); the memfd must be sealed against shrinking, so reading it can never
// raise SIGBUS. Reading is bounded by the ring's size whatever the ring says, and can be
// done in slices so that a collector serving other streams keeps serving them meanwhile.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cumemtrace/v1/trace.pb.h"
#include "proto/cumemtrace/v1/shared_ring.h"

namespace cumemtrace {

// A PyTorch allocator event read from shared memory (a ring's TorchRecord, or a per-thread
// buffer's, made one) as the wire's.
void SetTorchEvent(const v1::ring::TorchRecord& r, v1::TorchAllocatorEvent* torch);
// What was running when the tensor was born (ring layout 3, thread buffers layout 2): the
// backward bit of the sequence becomes TorchAllocatorEvent.backward.
void SetTorchAttribution(const v1::ring::TorchAttribution& a, v1::TorchAllocatorEvent* torch);
// A ring's autograd node (a TorchRecord of action AUTOGRAD_NODE, layout 4 on) as the wire's.
void SetTorchAutogradNode(const v1::ring::TorchRecord& r, const v1::ring::TorchAttribution& a,
                          v1::TorchAutogradNode* node);

class SharedRingReader {
 public:
  SharedRingReader();
  ~SharedRingReader();
  SharedRingReader(const SharedRingReader&) = delete;
  SharedRingReader& operator=(const SharedRingReader&) = delete;

  // Takes ownership of `fd` (closed on failure). False with *error when it is not a ring this
  // collector can read as announced.
  bool Adopt(int fd, const v1::SharedRing& announced, std::string* error);
  bool adopted() const { return fd_ >= 0; }
  // The memory file and where its per-thread buffers are (thread_buffer_reader.h): after the
  // ring's data area, thread_buffer_bytes() long (0: none).
  int fd() const { return fd_; }
  uint64_t thread_buffer_offset() const;
  uint64_t thread_buffer_bytes() const { return thread_buffer_bytes_; }

  struct Recovered {
    uint64_t records = 0;  // host records turned into events
    uint64_t drops = 0;    // ring drops no frame had reported
    // Damage met and passed over: records that could not be decoded (left out alone), and
    // the bytes skipped to reach the next place a record must start.
    uint64_t skipped_records = 0;
    uint64_t skipped_bytes = 0;
    std::string damage;  // what was wrong, for the log; "" when nothing was
  };
  // Begins reading the records from `position` (the last EventBatch.ring_position received)
  // to the ring's write position, and the drops past `reported_drops` (the last
  // ring_dropped), as EventBatch frames (serialized StreamMessages) numbered from
  // `sequence`. Strings get ids from 2^31, never used by the tracer.
  void StartRecovery(uint64_t position, uint64_t reported_drops, uint64_t sequence);
  // Reads on for about `budget_ns` (at least a few records; < 0: until the end), appending
  // the frames completed to *frames. True once the recovery is complete: recovered() is
  // then final and the ring is no longer mapped.
  bool ContinueRecovery(int64_t budget_ns, std::vector<std::string>* frames);
  bool recovering() const { return walk_ != nullptr; }
  const Recovered& recovered() const { return recovered_; }

  // StartRecovery and ContinueRecovery to the end.
  Recovered Recover(uint64_t position, uint64_t reported_drops, uint64_t sequence,
                    std::vector<std::string>* frames);

 private:
  class Walk;

  int fd_ = -1;
  uint64_t capacity_ = 0;
  uint64_t thread_buffer_bytes_ = 0;
  std::unique_ptr<Walk> walk_;
  Recovered recovered_;
};

}  // namespace cumemtrace
