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

// The domains the tracer made (nvtx_injection.cc's DomainCreate). A record read back from the
// ring carries its domain as a pointer the program could have overwritten (the ring is its
// memory): the sender uses one only when it is among these. Lock-free, so a forked child
// never waits for a parent thread's lock; beyond kMaxKnownNvtxDomains a domain's records
// lose their domain (as if none), never more.
constexpr unsigned kMaxKnownNvtxDomains = 4096;
void AddKnownNvtxDomain(const NvtxDomain* domain);
bool IsKnownNvtxDomain(const NvtxDomain* domain);

}  // namespace cumemtrace::tracer
