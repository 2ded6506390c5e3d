// Bounded hand-off from program threads to the sender thread. Push never blocks on the
// collector: when the queue is full the record is dropped and counted, and the sender
// reports the loss as a DroppedRecords event (an explicit gap, never invented data).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "tracer/host_record.h"

namespace cumemtrace::tracer {

struct DropWindow {
  uint64_t count = 0;
  uint64_t first_ns = 0;
  uint64_t last_ns = 0;
};

class RecordQueue {
 public:
  explicit RecordQueue(size_t capacity) : capacity_(capacity) {}

  // Returns false (and counts a drop) when the queue is full.
  bool Push(HostRecord&& record);
  // For the one record that must never be lost to a full queue, the process exit: one
  // record past the bound, once per process.
  void PushPastCapacity(HostRecord&& record);
  // Moves all queued records into *out (cleared first) and returns the drops since the
  // last call.
  DropWindow TakeAll(std::vector<HostRecord>* out);
  // Around fork (pthread_atfork): the forking thread holds the lock across fork(), so the
  // child never inherits a vector another thread was in the middle of changing.
  void LockBeforeFork() { mutex_.lock(); }
  void UnlockInParentAfterFork() { mutex_.unlock(); }
  // In the child: the parent's records are the parent's stream, not the child's.
  void ResetInChildAfterFork();
  size_t capacity() const { return capacity_; }

 private:
  size_t capacity_;
  std::mutex mutex_;
  std::vector<HostRecord> records_;
  DropWindow drops_;
};

}  // namespace cumemtrace::tracer
