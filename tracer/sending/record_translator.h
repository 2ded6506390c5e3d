// Turns what the tracer observed (host records from hooks, CUPTI activity records) into
// wire events. Pure logic over its inputs: the unit tests drive it with fabricated records.
#pragma once

#include <cupti_activity.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>

#include "tracer/recording/clock.h"
#include "tracer/recording/host_record.h"
#include "tracer/sending/correlation_table.h"
#include "tracer/sending/event_encoder.h"
#include "tracer/sending/stack_interner.h"

namespace cumemtrace::tracer {

struct ApiInfo;  // api_catalog.h

// Names of CUDA driver error codes, supplied by whoever can ask the driver (a default in
// tests).
struct ErrorNamer {
  virtual ~ErrorNamer() = default;
  virtual std::string DriverErrorName(int code) const;
};

class RecordTranslator {
 public:
  RecordTranslator(EventEncoder* encoder, CorrelationTable* correlations,
                   const ErrorNamer* error_namer)
      : encoder_(encoder),
        correlations_(correlations),
        error_namer_(error_namer),
        stacks_(encoder, &module_lookup_) {}

  // CUPTI timestamps are shifted by this much to land on the tracer's clock (0 when CUPTI
  // was told to use CLOCK_MONOTONIC itself).
  void set_cupti_clock_offset_ns(int64_t offset) {
    cupti_clock_ = CuptiClockMap{};
    cupti_clock_.offset_ns = offset;
  }
  // Or mapped linearly (a client of the program's gave CUPTI its own clock).
  void set_cupti_clock(const CuptiClockMap& map) { cupti_clock_ = map; }

  // Host records: correlation entries update the table; the rest become events.
  void AddHostRecord(const HostRecord& record);
  // One CUPTI activity record. Returns false for a kind the tracer did not ask for.
  bool AddActivity(const CUpti_Activity* record);

 private:
  // What is live, so that a release is sent with the size, kind and device of the
  // allocation it ends (a free names only an address). Bounded by the live set. Mappings
  // (cuMemMap) apart: one cuMemUnmap may end several of them.
  struct Live {
    uint64_t bytes;
    uint32_t device;
    uint8_t kind;
  };

  uint64_t CuptiTime(uint64_t t) const { return cupti_clock_.ToMonotonic(t); }
  // Memory seen by the driver callbacks (HostRecord::Type::kMemory).
  void AddAllocation(const HostRecord& record);
  void AddRelease(const HostRecord& record);
  // `memory` is what `address` spans: the record's own for an allocation, the ended
  // allocation's for a release.
  void EmitMemory(const HostRecord& record, const ApiInfo* api, uint64_t address,
                  const Live& memory);
  // Memory from CUPTI's MEMORY2 records (CUMEMTRACE_MEMORY_RECORDS=cupti).
  void AddMemory(const CUpti_ActivityMemory4& record);
  void AddMemoryPool(const CUpti_ActivityMemoryPool3& record);
  void AddKernel(const CUpti_ActivityKernel10& record);
  // A kernel seen at its launch call (no GPU record).
  void AddLaunch(const HostRecord& record);

  // Stable storage for calling-module names referenced from the correlation table.
  const std::string* ModuleName(const std::string& name);

  std::unordered_map<uint64_t, Live> live_;
  std::map<uint64_t, Live> mapped_;
  // Kernel name pointers (CUPTI's symbolName) -> interned name, learned from the first
  // launch of each on any thread (which carries a copy).
  std::unordered_map<const char*, uint32_t> launch_names_;

  EventEncoder* encoder_;
  CorrelationTable* correlations_;
  std::unordered_map<std::string, std::unique_ptr<std::string>> modules_;
  const ErrorNamer* error_namer_;
  CuptiClockMap cupti_clock_;
  ModuleLookup module_lookup_;
  StackInterner stacks_;
};

}  // namespace cumemtrace::tracer
