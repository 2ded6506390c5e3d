// The library's only exported symbols (see tracer.map) and its LD_PRELOAD constructor.
// Whichever runs first starts the tracer; the others find it started.
#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <string>

#include "tracer/process/tracer_runtime.h"
#include "tracer/sources/cupti/cupti_session.h"
#include "tracer/sources/nvtx/nvtx_injection.h"
#include "tracer/sources/python/module_context.h"
#include "tracer/sources/python/tensor_categories.h"

namespace cumemtrace::tracer {

namespace {

std::string OwnPath() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&OwnPath), &info) == 0 || info.dli_fname == nullptr) {
    return {};
  }
  char resolved[PATH_MAX];
  return realpath(info.dli_fname, resolved) != nullptr ? resolved : info.dli_fname;
}

bool SameFile(const char* a, const std::string& b) {
  struct stat sa {};
  struct stat sb {};
  return stat(a, &sa) == 0 && stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

// LD_PRELOAD may name us by a relative path or through a symlink: compare files.
bool NamedInPreload(const std::string& self) {
  const char* preload = getenv("LD_PRELOAD");
  if (preload == nullptr || self.empty()) return false;
  const std::string list = preload;
  size_t start = 0;
  while (start < list.size()) {
    size_t end = list.find_first_of(": ", start);
    if (end == std::string::npos) end = list.size();
    if (end > start && SameFile(list.substr(start, end - start).c_str(), self)) return true;
    start = end + 1;
  }
  return false;
}

// Runs when the library is loaded, by LD_PRELOAD or by a dlopen from the driver or NVTX.
__attribute__((constructor)) void OnLoad() {
  const std::string self = OwnPath();
  // NVTX looks for an injection only through this variable on Linux, and only at an
  // instance's first NVTX call: set it before the program makes one.
  if (!self.empty() && getenv("NVTX_INJECTION64_PATH") == nullptr) {
    setenv("NVTX_INJECTION64_PATH", self.c_str(), 0);
  }
  const char* cuda_injection = getenv("CUDA_INJECTION64_PATH");
  bool cupti_via_driver = true;
  bool other_tool = false;
  if (cuda_injection == nullptr || *cuda_injection == '\0') {
    // The driver then calls InitializeInjection in this very copy during cuInit, so CUPTI
    // is only loaded into processes that really use CUDA.
    if (!self.empty()) setenv("CUDA_INJECTION64_PATH", self.c_str(), 1);
  } else if (!SameFile(cuda_injection, self)) {
    cupti_via_driver = false;
    // A library that exists there is another CUDA tool (Nsight Systems, compute-sanitizer):
    // the user asked for it, and it subscribes to CUPTI from its own injection, through
    // its own CUPTI, where the tracer cannot stand between. The tracer steps aside rather
    // than make that tool fail. A stale value (no such file, "none") changes nothing.
    struct stat st {};
    other_tool = stat(cuda_injection, &st) == 0 && S_ISREG(st.st_mode);
  }
  // Without LD_PRELOAD we were loaded by the driver or by NVTX, whose entry points come
  // next and start the tracer themselves.
  if (!NamedInPreload(self)) return;
  // Each NVTX instance's first call dlopens NVTX_INJECTION64_PATH while the NVTX header's
  // fork race is open (docs/reliability.md). ld.so finds a loaded library by the name it was
  // loaded under; by another spelling (LD_PRELOAD by a relative path or through a symlink)
  // it opens and reads the file to compare identities, about 10 us more inside the race.
  // A no-load dlopen by that spelling now adds it to the library's names, once.
  const char* nvtx_path = getenv("NVTX_INJECTION64_PATH");
  if (nvtx_path != nullptr && SameFile(nvtx_path, self)) {
    if (void* handle = dlopen(nvtx_path, RTLD_LAZY | RTLD_NOLOAD)) dlclose(handle);
  }
  TracerRuntime& runtime = TracerRuntime::Get();
  runtime.Start(v1::INJECTION_MODE_LD_PRELOAD);
  if (other_tool) {
    runtime.StepAsideForTool(cuda_injection);
  } else if (!cupti_via_driver) {
    runtime.StartCupti();
  }
}

}  // namespace
}  // namespace cumemtrace::tracer

using cumemtrace::tracer::TracerRuntime;

// CUDA driver injection (CUDA_INJECTION64_PATH): called once during cuInit, on the thread
// that triggered it. Returning 1 means success.
extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
  TracerRuntime& runtime = TracerRuntime::Get();
  runtime.Start(cumemtrace::v1::INJECTION_MODE_CUDA_INJECTION);
  runtime.StartCupti();
  return 1;
}

// NVTX injection (NVTX_INJECTION64_PATH): called once per NVTX instance (every library that
// includes the header-only NVTX has its own).
extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtx2(
    cumemtrace::tracer::NvtxExportTableGetter get_export_table) {
  // The NVTX header's fork race is open while this runs (a child forked now spins in the
  // header forever), so it does the least it can: fill the function tables. When NVTX
  // loaded the tracer (no LD_PRELOAD), the tracer's own start (its ring, the connection,
  // the sender thread: about 250 us) waits for the first recorded event. Fork also waits
  // while this runs.
  const cumemtrace::tracer::InitScope init;
  TracerRuntime::Get().StartAtFirstEvent(cumemtrace::v1::INJECTION_MODE_NVTX_INJECTION);
  return cumemtrace::tracer::PatchNvtxTables(get_export_table);
}

// The Python side's names for tensors' storages (sources/python/tensor_categories.h).
extern "C" __attribute__((visibility("default"))) uint32_t cumemtrace_tensor_categories(
    uint32_t category, uint32_t count, const uint64_t* addresses, const uint64_t* bytes,
    const uint32_t* devices, uint64_t timestamp_ns) {
  return cumemtrace::tracer::RecordTensorCategories(category, count, addresses, bytes, devices,
                                                    timestamp_ns);
}

// The Python side's module hooks (`run --modules`, sources/python/module_context.h).
extern "C" __attribute__((visibility("default"))) uint32_t cumemtrace_module_define(
    uint32_t id, const char* path) {
  return cumemtrace::tracer::DefineModule(id, path);
}
extern "C" __attribute__((visibility("default"))) uint32_t cumemtrace_module_enter(uint32_t id) {
  return cumemtrace::tracer::EnterModule(id);
}

// Range calls of cumemtrace's own Python start-up hooks (`run --phase`, tracer/sources/python/).
extern "C" __attribute__((visibility("default"))) int cumemtrace_range_push(const char* name) {
  return cumemtrace::tracer::PushPhaseRange(name);
}
extern "C" __attribute__((visibility("default"))) int cumemtrace_range_pop(void) {
  return cumemtrace::tracer::PopPhaseRange();
}
