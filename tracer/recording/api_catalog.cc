#include "tracer/recording/api_catalog.h"

#include <cupti_driver_cbid.h>

#include <type_traits>

namespace cumemtrace::tracer {
namespace {

// The driver calls' parameter blocks, as in the toolkit's generated_cuda_meta.h (which
// cannot be included on its own: it names legacy _v1 types). Only the driver layer is
// watched: every runtime allocation, free and launch runs one of these underneath, so one
// layer sees them all, and a second layer would double the cost of every call.
struct AllocParams {  // cuMemAlloc_v2, cuMemAllocManaged, cuMemAllocHost_v2, cuMemHostAlloc
  CUdeviceptr* dptr;
  size_t bytesize;
};
struct AllocAsyncParams {  // cuMemAllocAsync(_ptsz)
  CUdeviceptr* dptr;
  size_t bytesize;
  CUstream stream;
};
struct AllocFromPoolAsyncParams {  // cuMemAllocFromPoolAsync(_ptsz)
  CUdeviceptr* dptr;
  size_t bytesize;
  CUmemoryPool pool;
  CUstream stream;
};
struct AllocPitchParams {  // cuMemAllocPitch_v2
  CUdeviceptr* dptr;
  size_t* pitch;
  size_t width_bytes;
  size_t height;
};
struct CreateParams {  // cuMemCreate
  void* handle;
  size_t size;
};
struct MapParams {  // cuMemMap; cuMemUnmap starts the same way
  CUdeviceptr ptr;
  size_t size;
};
struct FreeParams {  // cuMemFree_v2, cuMemFreeHost (a host pointer, same size)
  CUdeviceptr dptr;
};
struct FreeAsyncParams {  // cuMemFreeAsync(_ptsz)
  CUdeviceptr dptr;
  CUstream stream;
};

// At the exit of a successful allocation the address is written through the first field.
template <typename P>
void ReadAllocation(const void* params, CallOperands* out) {
  const auto* p = static_cast<const P*>(params);
  out->bytes = p->bytesize;
  out->address = p->dptr != nullptr ? static_cast<uint64_t>(*p->dptr) : 0;
  if constexpr (std::is_same_v<P, AllocAsyncParams> || std::is_same_v<P, AllocFromPoolAsyncParams>) {
    out->stream = p->stream;
  }
}
void ReadPitchAllocation(const void* params, CallOperands* out) {
  const auto* p = static_cast<const AllocPitchParams*>(params);
  // The driver picks the pitch: the memory made is pitch x rows, known only at the exit.
  const uint64_t pitch = p->pitch != nullptr && *p->pitch != 0 ? *p->pitch : p->width_bytes;
  out->bytes = pitch * p->height;
  out->address = p->dptr != nullptr ? static_cast<uint64_t>(*p->dptr) : 0;
}
void ReadCreate(const void* params, CallOperands* out) {
  out->bytes = static_cast<const CreateParams*>(params)->size;
}
void ReadMapping(const void* params, CallOperands* out) {
  const auto* p = static_cast<const MapParams*>(params);
  out->address = p->ptr;
  out->bytes = p->size;
}
void ReadFree(const void* params, CallOperands* out) {
  out->address = static_cast<const FreeParams*>(params)->dptr;
}
void ReadFreeAsync(const void* params, CallOperands* out) {
  const auto* p = static_cast<const FreeAsyncParams*>(params);
  out->address = p->dptr;
  out->stream = p->stream;
}

constexpr auto kDevice = v1::MEMORY_KIND_DEVICE;
constexpr auto kPinned = v1::MEMORY_KIND_PINNED;
constexpr auto kManaged = v1::MEMORY_KIND_MANAGED;
constexpr auto kNone = v1::MEMORY_KIND_UNKNOWN;
constexpr auto kAllocate = ApiRole::kAllocate;
constexpr auto kRelease = ApiRole::kRelease;
constexpr auto kLaunch = ApiRole::kLaunch;

// Names keep CUPTI's version suffixes out of the report (cuMemAlloc, not cuMemAlloc_v2).
const ApiInfo kApis[] = {
    // name, callback id, role, kind, operands, stream-ordered, per-thread default stream,
    // makes memory on its own (cuMemCreate's physical memory counts once mapped), mapping.
    {"cuMemAlloc", CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, kAllocate, kDevice,
     ReadAllocation<AllocParams>},
    {"cuMemAllocPitch", CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2, kAllocate, kDevice,
     ReadPitchAllocation},
    {"cuMemAllocHost", CUPTI_DRIVER_TRACE_CBID_cuMemAllocHost_v2, kAllocate, kPinned,
     ReadAllocation<AllocParams>},
    {"cuMemHostAlloc", CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc, kAllocate, kPinned,
     ReadAllocation<AllocParams>},
    {"cuMemAllocManaged", CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged, kAllocate, kManaged,
     ReadAllocation<AllocParams>},
    {"cuMemAllocAsync", CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync, kAllocate, kDevice,
     ReadAllocation<AllocAsyncParams>, true},
    {"cuMemAllocAsync", CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz, kAllocate, kDevice,
     ReadAllocation<AllocAsyncParams>, true, true},
    {"cuMemAllocFromPoolAsync", CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync, kAllocate,
     kDevice, ReadAllocation<AllocFromPoolAsyncParams>, true},
    {"cuMemAllocFromPoolAsync", CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz, kAllocate,
     kDevice, ReadAllocation<AllocFromPoolAsyncParams>, true, true},
    {"cuMemCreate", CUPTI_DRIVER_TRACE_CBID_cuMemCreate, kAllocate, kDevice, ReadCreate, false,
     false, false},
    {"cuMemMap", CUPTI_DRIVER_TRACE_CBID_cuMemMap, kAllocate, kDevice, ReadMapping, false, false,
     true, true},
    {"cuMemFree", CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2, kRelease, kNone, ReadFree},
    {"cuMemFreeHost", CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost, kRelease, kNone, ReadFree},
    {"cuMemFreeAsync", CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync, kRelease, kNone, ReadFreeAsync,
     true},
    {"cuMemFreeAsync", CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz, kRelease, kNone,
     ReadFreeAsync, true, true},
    {"cuMemUnmap", CUPTI_DRIVER_TRACE_CBID_cuMemUnmap, kRelease, kNone, ReadMapping, false,
     false, true, true},
    // Launches: a kernel record carries the correlation id of the driver call that launched it
    // (also when the program called the runtime), so the driver layer gives every kernel its
    // launching thread.
    {"cuLaunchKernel", CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, kLaunch, kNone},
    {"cuLaunchKernel", CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz, kLaunch, kNone},
    {"cuLaunchKernelEx", CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx, kLaunch, kNone},
    {"cuLaunchKernelEx", CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz, kLaunch, kNone},
    {"cuLaunchCooperativeKernel", CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel, kLaunch,
     kNone},
    {"cuLaunchCooperativeKernel", CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz,
     kLaunch, kNone},
    {"cuGraphLaunch", CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch, kLaunch, kNone},
    {"cuGraphLaunch", CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz, kLaunch, kNone},
};

}  // namespace

const ApiInfo* ApiCatalog(uint16_t* count) {
  *count = static_cast<uint16_t>(sizeof(kApis) / sizeof(kApis[0]));
  return kApis;
}

int FindApi(CUpti_CallbackId cbid) {
  // The callback keeps a direct lookup table built from this (see cupti_session.cc).
  for (size_t i = 0; i < sizeof(kApis) / sizeof(kApis[0]); ++i) {
    if (kApis[i].cbid == cbid) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace cumemtrace::tracer
