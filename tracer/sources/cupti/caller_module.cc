#include "tracer/sources/cupti/caller_module.h"

#include <dlfcn.h>
#include <execinfo.h>

#include <cstring>

namespace cumemtrace::tracer {
namespace {

const char* BaseName(const char* path) {
  const char* slash = strrchr(path, '/');
  return slash != nullptr ? slash + 1 : path;
}

bool StartsWith(const std::string& s, const char* prefix) {
  return s.compare(0, strlen(prefix), prefix) == 0;
}

void* OwnBase() {
  Dl_info info{};
  return dladdr(reinterpret_cast<void*>(&OwnBase), &info) != 0 ? info.dli_fbase : nullptr;
}

}  // namespace

bool IsCudaStackModule(const std::string& name) {
  return StartsWith(name, "libcuda.so") || StartsWith(name, "libcudart") ||
         StartsWith(name, "libcupti") || StartsWith(name, "libcumemtrace-tracer");
}

void PrepareCallerLookup() {
  void* frame[1];
  backtrace(frame, 1);
}

std::string CallerModule() {
  static void* const own_base = OwnBase();
  void* frames[64];
  const int n = backtrace(frames, 64);
  for (int i = 1; i < n; ++i) {
    Dl_info info{};
    if (dladdr(frames[i], &info) == 0 || info.dli_fname == nullptr) continue;
    if (info.dli_fbase == own_base) continue;
    const std::string name = BaseName(info.dli_fname);
    if (name.empty() || IsCudaStackModule(name)) continue;
    return name;
  }
  return {};
}

}  // namespace cumemtrace::tracer
