// The CUDA driver calls the tracer watches, one row each: which callback id, what the call
// does to memory, and how to read its operands from the callback's parameter block.
#pragma once

#include <cuda.h>
#include <cupti_callbacks.h>

#include <cstdint>

#include "cumemtrace/v1/trace.pb.h"

namespace cumemtrace::tracer {

enum class ApiRole : uint8_t {
  kAllocate,  // makes memory: recorded at the exit (address known), failures too
  kRelease,   // gives memory back: recorded at the entry, before the address can be reused
  kLaunch,    // launches work: correlation recorded (launching thread of kernels)
};

// What one call says about memory, read from its parameters.
struct CallOperands {
  uint64_t address = 0;  // made (allocation, at exit), given back (release), mapped
  uint64_t bytes = 0;    // asked for (allocation), mapped or unmapped (cuMemMap, cuMemUnmap)
  CUstream stream = nullptr;  // stream-ordered calls
};

struct ApiInfo {
  const char* name;
  CUpti_CallbackId cbid;  // in CUPTI_CB_DOMAIN_DRIVER_API
  ApiRole role;
  v1::MemoryKind kind;  // for kAllocate: the kind of memory made
  // Reads the operands (null for launches). For an allocation, the address is valid only at
  // the exit of a successful call; bytes are valid at the entry too (a failure's request).
  void (*read)(const void* params, CallOperands* out) = nullptr;
  // Stream-ordered allocations are per tensor and frequent: their caller is not unwound.
  bool stream_ordered = false;
  bool per_thread_stream = false;  // the _ptsz variant: a null stream is the thread's own
  // False for cuMemCreate: physical memory counts once it is mapped (cuMemMap), as in
  // CUPTI's own memory records; its failures are still reported.
  bool makes_memory = true;
  // cuMemMap / cuMemUnmap: address ranges, where one unmap may end several mappings.
  bool mapping = false;
};

// All rows; the index of a row is its ApiId (stable within one build, sent as a name).
const ApiInfo* ApiCatalog(uint16_t* count);
// Row index for a driver callback id, or -1 when the tracer does not watch that call.
int FindApi(CUpti_CallbackId cbid);

}  // namespace cumemtrace::tracer
