// NVTX domains and registered strings: the handles the tracer gives back to NVTX. Leaked on
// purpose (NVTX has no reliable destroy order at exit), so records may point at them.
#pragma once

#include <string>

namespace cumemtrace::tracer {

struct NvtxDomain {
  std::string name;
};

struct NvtxRegisteredString {
  std::string value;
};

}  // namespace cumemtrace::tracer
