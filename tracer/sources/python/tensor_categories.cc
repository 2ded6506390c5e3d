#include "tracer/sources/python/tensor_categories.h"

#include "cumemtrace/v1/trace.pb.h"
#include "tracer/recording/clock.h"
#include "tracer/recording/host_record.h"
#include "tracer/recording/recorder.h"

namespace cumemtrace::tracer {

uint32_t RecordTensorCategories(uint32_t category, uint32_t count, const uint64_t* addresses,
                                const uint64_t* bytes, const uint32_t* devices,
                                uint64_t timestamp_ns) {
  Recorder& recorder = Recorder::Get();
  if (!recorder.recording() || addresses == nullptr || bytes == nullptr || devices == nullptr ||
      category == v1::CATEGORY_UNSPECIFIED || !v1::Category_IsValid(static_cast<int>(category))) {
    return 0;
  }
  // One time for the whole call: the storages were all live when the program's objects
  // were read, which is what the collector needs to find them. A time in the future is the
  // caller's mistake: now instead.
  const uint64_t now = MonotonicNs();
  if (timestamp_ns == 0 || timestamp_ns > now) timestamp_ns = now;
  const uint32_t thread = CurrentThreadId();
  uint32_t recorded = 0;
  for (uint32_t i = 0; i < count; ++i) {
    if (addresses[i] == 0) continue;  // an empty storage has no memory to name
    HostRecord record;
    record.type = HostRecord::Type::kTensorCategory;
    record.timestamp_ns = timestamp_ns;
    record.thread_id = thread;
    record.category = category;
    record.device = devices[i];
    record.address = addresses[i];
    record.bytes = bytes[i];
    recorder.Record(std::move(record));
    ++recorded;
  }
  return recorded;
}

}  // namespace cumemtrace::tracer
