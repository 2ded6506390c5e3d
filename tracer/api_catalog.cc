#include "tracer/api_catalog.h"

#include <cuda_runtime_api.h>
#include <cupti_driver_cbid.h>
#include <cupti_runtime_cbid.h>
#include <generated_cuda_runtime_api_meta.h>

namespace cumemtrace::tracer {
namespace {

// Leading fields of the driver calls' parameter blocks, as in the toolkit's
// generated_cuda_meta.h (which cannot be included on its own: it names legacy _v1 types).
struct cuMemAlloc_v2_params {
  void* dptr;
  size_t bytesize;
};
using cuMemAllocHost_v2_params = cuMemAlloc_v2_params;
using cuMemHostAlloc_params = cuMemAlloc_v2_params;
using cuMemAllocManaged_params = cuMemAlloc_v2_params;
using cuMemAllocAsync_params = cuMemAlloc_v2_params;
using cuMemAllocAsync_ptsz_params = cuMemAlloc_v2_params;
using cuMemAllocFromPoolAsync_params = cuMemAlloc_v2_params;
using cuMemAllocFromPoolAsync_ptsz_params = cuMemAlloc_v2_params;
struct cuMemCreate_params {
  void* handle;
  size_t size;
};
struct cuMemMap_params {
  unsigned long long ptr;
  size_t size;
};
struct cuMemAllocPitch_v2_params {
  void* dptr;
  size_t* pPitch;
  size_t WidthInBytes;
  size_t Height;
};

template <typename Params>
uint64_t SizeField(const void* params) {
  return static_cast<const Params*>(params)->size;
}
template <typename Params>
uint64_t BytesizeField(const void* params) {
  return static_cast<const Params*>(params)->bytesize;
}
uint64_t CudaMallocPitchBytes(const void* params) {
  auto* p = static_cast<const cudaMallocPitch_v3020_params*>(params);
  return static_cast<uint64_t>(p->width) * p->height;
}
uint64_t CuMemAllocPitchBytes(const void* params) {
  auto* p = static_cast<const cuMemAllocPitch_v2_params*>(params);
  return static_cast<uint64_t>(p->WidthInBytes) * p->Height;
}

constexpr CUpti_CallbackDomain kRuntime = CUPTI_CB_DOMAIN_RUNTIME_API;
constexpr CUpti_CallbackDomain kDriver = CUPTI_CB_DOMAIN_DRIVER_API;
constexpr auto kDevice = v1::MEMORY_KIND_DEVICE;
constexpr auto kPinned = v1::MEMORY_KIND_PINNED;
constexpr auto kManaged = v1::MEMORY_KIND_MANAGED;
constexpr auto kNone = v1::MEMORY_KIND_UNKNOWN;


// Names keep CUPTI's version suffixes out of the report (cudaMalloc, not cudaMalloc_v3020).
const ApiInfo kApis[] = {
    // Runtime allocations.
    {"cudaMalloc", kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020, ApiRole::kAllocate, kDevice,
     SizeField<cudaMalloc_v3020_params>},
    {"cudaMallocPitch", kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaMallocPitch_v3020,
     ApiRole::kAllocate, kDevice, CudaMallocPitchBytes},
    {"cudaMallocHost", kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaMallocHost_v3020,
     ApiRole::kAllocate, kPinned, SizeField<cudaMallocHost_v3020_params>},
    {"cudaHostAlloc", kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaHostAlloc_v3020, ApiRole::kAllocate,
     kPinned, SizeField<cudaHostAlloc_v3020_params>},
    {"cudaMallocManaged", kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaMallocManaged_v6000,
     ApiRole::kAllocate, kManaged, SizeField<cudaMallocManaged_v6000_params>},
    {"cudaMallocAsync", kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_v11020,
     ApiRole::kAllocate, kDevice, SizeField<cudaMallocAsync_v11020_params>, true},
    {"cudaMallocAsync", kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_ptsz_v11020,
     ApiRole::kAllocate, kDevice, SizeField<cudaMallocAsync_ptsz_v11020_params>, true},
    {"cudaMallocFromPoolAsync", kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaMallocFromPoolAsync_v11020,
     ApiRole::kAllocate, kDevice, SizeField<cudaMallocFromPoolAsync_v11020_params>, true},
    {"cudaMallocFromPoolAsync", kRuntime,
     CUPTI_RUNTIME_TRACE_CBID_cudaMallocFromPoolAsync_ptsz_v11020, ApiRole::kAllocate, kDevice,
     SizeField<cudaMallocFromPoolAsync_ptsz_v11020_params>, true},
    // Driver allocations (cuMemCreate makes the physical allocation behind VMM mappings).
    {"cuMemAlloc", kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, ApiRole::kAllocate, kDevice,
     BytesizeField<cuMemAlloc_v2_params>},
    {"cuMemAllocPitch", kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2, ApiRole::kAllocate,
     kDevice, CuMemAllocPitchBytes},
    {"cuMemAllocHost", kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemAllocHost_v2, ApiRole::kAllocate,
     kPinned, BytesizeField<cuMemAllocHost_v2_params>},
    {"cuMemHostAlloc", kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc, ApiRole::kAllocate,
     kPinned, BytesizeField<cuMemHostAlloc_params>},
    {"cuMemAllocManaged", kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged, ApiRole::kAllocate,
     kManaged, BytesizeField<cuMemAllocManaged_params>},
    {"cuMemAllocAsync", kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync, ApiRole::kAllocate,
     kDevice, BytesizeField<cuMemAllocAsync_params>, true},
    {"cuMemAllocAsync", kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync_ptsz, ApiRole::kAllocate,
     kDevice, BytesizeField<cuMemAllocAsync_ptsz_params>, true},
    {"cuMemAllocFromPoolAsync", kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync,
     ApiRole::kAllocate, kDevice, BytesizeField<cuMemAllocFromPoolAsync_params>, true},
    {"cuMemAllocFromPoolAsync", kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync_ptsz,
     ApiRole::kAllocate, kDevice, BytesizeField<cuMemAllocFromPoolAsync_ptsz_params>, true},
    {"cuMemCreate", kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemCreate, ApiRole::kAllocate, kDevice,
     SizeField<cuMemCreate_params>},
    {"cuMemMap", kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemMap, ApiRole::kAllocate, kDevice,
     SizeField<cuMemMap_params>},
    // Releases.
    {"cudaFree", kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020, ApiRole::kRelease, kNone,
     nullptr},
    {"cudaFreeHost", kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaFreeHost_v3020, ApiRole::kRelease,
     kNone, nullptr},
    {"cudaFreeAsync", kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_v11020, ApiRole::kRelease,
     kNone, nullptr},
    {"cudaFreeAsync", kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_ptsz_v11020,
     ApiRole::kRelease, kNone, nullptr},
    {"cuMemFree", kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2, ApiRole::kRelease, kNone, nullptr},
    {"cuMemFreeHost", kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemFreeHost, ApiRole::kRelease, kNone,
     nullptr},
    {"cuMemFreeAsync", kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync, ApiRole::kRelease, kNone,
     nullptr},
    {"cuMemFreeAsync", kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync_ptsz, ApiRole::kRelease,
     kNone, nullptr},
    {"cuMemUnmap", kDriver, CUPTI_DRIVER_TRACE_CBID_cuMemUnmap, ApiRole::kRelease, kNone, nullptr},
    // Launches: the runtime and the driver layer each get a correlation id; a kernel record
    // carries one of them, so both are recorded.
    {"cudaLaunchKernel", kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
     ApiRole::kLaunch, kNone, nullptr},
    {"cudaLaunchKernel", kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000,
     ApiRole::kLaunch, kNone, nullptr},
    {"cudaLaunchKernelExC", kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060,
     ApiRole::kLaunch, kNone, nullptr},
    {"cudaLaunchKernelExC", kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060,
     ApiRole::kLaunch, kNone, nullptr},
    {"cudaLaunchCooperativeKernel", kRuntime,
     CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000, ApiRole::kLaunch, kNone, nullptr},
    {"cudaGraphLaunch", kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000,
     ApiRole::kLaunch, kNone, nullptr},
    {"cudaGraphLaunch", kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000,
     ApiRole::kLaunch, kNone, nullptr},
    {"cuLaunchKernel", kDriver, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, ApiRole::kLaunch, kNone,
     nullptr},
    {"cuLaunchKernel", kDriver, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz, ApiRole::kLaunch,
     kNone, nullptr},
    {"cuLaunchKernelEx", kDriver, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx, ApiRole::kLaunch,
     kNone, nullptr},
    {"cuLaunchKernelEx", kDriver, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz, ApiRole::kLaunch,
     kNone, nullptr},
    {"cuLaunchCooperativeKernel", kDriver, CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel,
     ApiRole::kLaunch, kNone, nullptr},
    {"cuGraphLaunch", kDriver, CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch, ApiRole::kLaunch, kNone,
     nullptr},
    {"cuGraphLaunch", kDriver, CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz, ApiRole::kLaunch, kNone,
     nullptr},
};


}  // namespace

const ApiInfo* ApiCatalog(uint16_t* count) {
  *count = static_cast<uint16_t>(sizeof(kApis) / sizeof(kApis[0]));
  return kApis;
}

int FindApi(CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  // Linear over ~40 rows is cheaper than it looks, but this runs on every watched call, so
  // the callback keeps a direct lookup table built from this (see cupti_session.cc).
  for (size_t i = 0; i < sizeof(kApis) / sizeof(kApis[0]); ++i) {
    if (kApis[i].domain == domain && kApis[i].cbid == cbid) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace cumemtrace::tracer
