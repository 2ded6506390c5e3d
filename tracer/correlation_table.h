// Correlation id -> (thread, API) for the records CUPTI delivers later (memory records and
// kernels carry a correlation id but no thread). Owned by the sender thread only.
//
// Direct-mapped by the low bits of the id: O(1), no allocation, bounded memory. Correlation
// ids grow monotonically, so a slot is only reused after kSlots newer calls; the stored full
// id tells a stale slot from a match.
#pragma once

#include <cstdint>
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

  CorrelationTable() : slots_(new Entry[kSlots]) {}

  void Put(uint32_t correlation_id, uint32_t thread_id, uint16_t api,
           const std::string* caller = nullptr) {
    slots_[correlation_id & (kSlots - 1)] = Entry{correlation_id, thread_id, api, caller};
  }
  // Null when the call was not seen (or its slot was reused by a much newer call).
  const Entry* Find(uint32_t correlation_id) const {
    if (correlation_id == 0) return nullptr;
    const Entry& e = slots_[correlation_id & (kSlots - 1)];
    return e.correlation_id == correlation_id ? &e : nullptr;
  }

 private:
  std::unique_ptr<Entry[]> slots_;
};

}  // namespace cumemtrace::tracer
