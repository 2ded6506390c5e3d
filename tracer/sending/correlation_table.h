// Correlation id -> (thread, API) for the records CUPTI delivers later (memory records and
// kernels carry a correlation id but no thread). Owned by the sender thread only.
//
// Direct-mapped by the low bits of the id: O(1), no allocation per call, bounded memory.
// Correlation ids grow monotonically, so a slot is only reused after kSlots newer calls; the
// stored full id tells a stale slot from a match. The 24 MiB of slots are allocated at the
// first call seen and come from calloc (untouched zero pages): a traced process that never
// uses CUDA (a shell, a DataLoader worker) pays nothing for them.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

namespace cumemtrace::tracer {

class CorrelationTable {
 public:
  static constexpr uint32_t kSlots = 1u << 20;

  struct Entry {
    uint32_t correlation_id = 0;
    uint32_t thread_id = 0;
    uint16_t api = 0;                      // index into ApiCatalog
    const std::string* caller = nullptr;   // owned by the translator's module cache
  };

  void Put(uint32_t correlation_id, uint32_t thread_id, uint16_t api,
           const std::string* caller = nullptr) {
    if (slots_ == nullptr) {
      // All-zero bytes are an empty Entry, so calloc's lazily zeroed pages need no writing.
      slots_.reset(static_cast<Entry*>(calloc(kSlots, sizeof(Entry))));
      if (slots_ == nullptr) return;  // no memory: records just lack their thread
    }
    slots_.get()[correlation_id & (kSlots - 1)] = Entry{correlation_id, thread_id, api, caller};
  }
  // Null when the call was not seen (or its slot was reused by a much newer call).
  const Entry* Find(uint32_t correlation_id) const {
    if (correlation_id == 0 || slots_ == nullptr) return nullptr;
    const Entry& e = slots_.get()[correlation_id & (kSlots - 1)];
    return e.correlation_id == correlation_id ? &e : nullptr;
  }

 private:
  struct Free {
    void operator()(Entry* p) const { free(p); }
  };
  std::unique_ptr<Entry, Free> slots_;
};

}  // namespace cumemtrace::tracer
