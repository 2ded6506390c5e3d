// The CUDA API calls the tracer subscribes to, one row each: which callback id, what the
// call does to memory, and how to read the requested size from its parameters.
#pragma once

#include <cupti_callbacks.h>

#include <cstdint>

#include "cumemtrace/v1/trace.pb.h"

namespace cumemtrace::tracer {

enum class ApiRole : uint8_t {
  kAllocate,  // creates memory: watched for failures, correlation recorded
  kRelease,   // frees memory: correlation recorded (thread of the free)
  kLaunch,    // launches work: correlation recorded (launching thread of kernels)
};

struct ApiInfo {
  const char* name;
  CUpti_CallbackDomain domain;
  CUpti_CallbackId cbid;
  ApiRole role;
  v1::MemoryKind kind;  // for kAllocate: the kind of memory asked for
  // For kAllocate: bytes requested, read from the callback's functionParams.
  uint64_t (*requested_bytes)(const void* params);
  // Stream-ordered allocations are per tensor and frequent: their caller is not unwound.
  bool stream_ordered = false;
};

// All rows; the index of a row is its ApiId (stable within one build, sent as a name).
const ApiInfo* ApiCatalog(uint16_t* count);
// Row index for a callback, or -1 when the tracer does not watch that call.
int FindApi(CUpti_CallbackDomain domain, CUpti_CallbackId cbid);

}  // namespace cumemtrace::tracer
