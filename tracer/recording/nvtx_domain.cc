#include "tracer/recording/nvtx_domain.h"

#include <atomic>

namespace cumemtrace::tracer {
namespace {

std::atomic<const NvtxDomain*> g_known[kMaxKnownNvtxDomains];
std::atomic<unsigned> g_count{0};

}  // namespace

void AddKnownNvtxDomain(const NvtxDomain* domain) {
  const unsigned slot = g_count.fetch_add(1, std::memory_order_relaxed);
  // Stored before the handle is given back to NVTX, so before any record that names it is
  // pushed (the ring's lock orders that record's push before the sender's read).
  if (slot < kMaxKnownNvtxDomains) g_known[slot].store(domain, std::memory_order_release);
}

bool IsKnownNvtxDomain(const NvtxDomain* domain) {
  if (domain == nullptr) return false;
  unsigned count = g_count.load(std::memory_order_acquire);
  if (count > kMaxKnownNvtxDomains) count = kMaxKnownNvtxDomains;
  for (unsigned i = 0; i < count; ++i) {
    if (g_known[i].load(std::memory_order_acquire) == domain) return true;
  }
  return false;
}

}  // namespace cumemtrace::tracer
