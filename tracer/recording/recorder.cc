#include "tracer/recording/recorder.h"

#include <cstdio>
#include <cstdlib>
#include <new>

#include "tracer/recording/clock.h"

namespace cumemtrace::tracer {

uint32_t g_tid_generation = 1;

namespace {

constexpr size_t kDefaultQueueRecords = 1u << 20;

size_t QueueCapacityFromEnv() {
  const char* value = getenv("CUMEMTRACE_QUEUE_EVENTS");
  if (value == nullptr || *value == '\0') return kDefaultQueueRecords;
  char* end = nullptr;
  const unsigned long long n = strtoull(value, &end, 10);
  return (end != nullptr && *end == '\0' && n > 0) ? static_cast<size_t>(n) : kDefaultQueueRecords;
}

// On unless "0": the per-thread buffers (thread_buffers.h) carry tensor events by default.
bool PerThreadFromEnv() {
  const char* value = getenv("CUMEMTRACE_PER_THREAD");
  return value == nullptr || value[0] != '0';
}

bool FlagFromEnv(const char* name) {
  const char* value = getenv(name);
  return value != nullptr && value[0] == '1';
}

}  // namespace

Recorder& Recorder::Get() {
  static Recorder* recorder = new Recorder();
  return *recorder;
}

thread_local uint32_t Recorder::t_module = 0;

Recorder::Recorder()
    : queue_(QueueCapacityFromEnv()),
      per_thread_(PerThreadFromEnv()),
      modules_(FlagFromEnv("CUMEMTRACE_MODULES")),
      ops_(FlagFromEnv("CUMEMTRACE_OPS")) {}

void Recorder::RecordAttributionName(uint32_t kind, uint32_t id, std::string name) {
  HostRecord record;
  record.type = HostRecord::Type::kAttributionName;
  record.timestamp_ns = MonotonicNs();
  record.thread_id = CurrentThreadId();
  record.category = kind;
  record.range_id = id;
  record.text = std::move(name);
  Record(std::move(record));
}

void Recorder::StartPending(uint64_t first_event_ns) {
  if (start_ != nullptr) start_(first_event_ns);
  start_pending_.store(false, std::memory_order_release);
}

void Recorder::Notice(v1::NoticeLevel level, const std::string& code, const std::string& text) {
  std::lock_guard<std::mutex> lock(notices_mutex_);
  for (const std::string& printed : printed_codes_) {
    if (printed == code) return;  // each notice once per process
  }
  printed_codes_.push_back(code);
  if (!quiet_) fprintf(stderr, "cumemtrace: %s\n", text.c_str());
  notices_.push_back(PendingNotice{level, code, text});
}

void Recorder::ResetNoticesInChildAfterFork() {
  // Rebuilt, never destroyed: another parent thread may have held them.
  new (&notices_mutex_) std::mutex();
  new (&notices_) std::vector<PendingNotice>();
}

}  // namespace cumemtrace::tracer
