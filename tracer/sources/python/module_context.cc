#include "tracer/sources/python/module_context.h"

#include <cstring>

#include "cumemtrace/v1/trace.pb.h"
#include "tracer/recording/recorder.h"

namespace cumemtrace::tracer {
namespace {
// Longer paths are cut: a name is for reading, and the ring's text is bounded anyway.
constexpr size_t kMaxPathBytes = 1024;
}  // namespace

uint32_t DefineModule(uint32_t id, const char* path) {
  Recorder& recorder = Recorder::Get();
  if (!recorder.recording() || !recorder.modules() || id == 0 || path == nullptr) return 0;
  recorder.RecordAttributionName(v1::ATTRIBUTION_KIND_MODULE, id,
                                 std::string(path, strnlen(path, kMaxPathBytes)));
  return 1;
}

uint32_t EnterModule(uint32_t id) {
  const uint32_t previous = Recorder::current_module();
  Recorder::set_current_module(id);
  return previous;
}

}  // namespace cumemtrace::tracer
