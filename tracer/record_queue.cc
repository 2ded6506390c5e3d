#include "tracer/record_queue.h"

#include <new>

namespace cumemtrace::tracer {

bool RecordQueue::Push(HostRecord&& record) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (records_.size() >= capacity_) {
    if (drops_.count == 0) drops_.first_ns = record.timestamp_ns;
    drops_.last_ns = record.timestamp_ns;
    ++drops_.count;
    return false;
  }
  records_.push_back(std::move(record));
  return true;
}

void RecordQueue::PushPastCapacity(HostRecord&& record) {
  std::lock_guard<std::mutex> lock(mutex_);
  records_.push_back(std::move(record));
}

DropWindow RecordQueue::TakeAll(std::vector<HostRecord>* out) {
  out->clear();
  std::lock_guard<std::mutex> lock(mutex_);
  // The swap hands the sender's emptied vector back, so its allocation is reused.
  out->swap(records_);
  DropWindow drops = drops_;
  drops_ = DropWindow{};
  return drops;
}

void RecordQueue::ResetInChildAfterFork() {
  // Held by the forking thread (LockBeforeFork), which is the child's only thread.
  new (&mutex_) std::mutex();
  records_.clear();
  drops_ = DropWindow{};
}

}  // namespace cumemtrace::tracer
