#include "tracer/api_catalog.h"

#include <cupti_driver_cbid.h>
#include <cupti_runtime_cbid.h>
#include <generated_cuda_runtime_api_meta.h>
#include <gtest/gtest.h>

#include <set>
#include <utility>

namespace cumemtrace::tracer {
namespace {

const ApiInfo& Row(CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
  uint16_t count = 0;
  const ApiInfo* apis = ApiCatalog(&count);
  const int row = FindApi(domain, cbid);
  EXPECT_GE(row, 0);
  return apis[row < 0 ? 0 : row];
}

TEST(ApiCatalog, EveryCallbackIdAppearsOnce) {
  uint16_t count = 0;
  const ApiInfo* apis = ApiCatalog(&count);
  std::set<std::pair<int, unsigned>> seen;
  for (uint16_t i = 0; i < count; ++i) {
    EXPECT_TRUE(seen.insert({apis[i].domain, apis[i].cbid}).second) << apis[i].name;
    if (apis[i].role == ApiRole::kAllocate) {
      EXPECT_NE(apis[i].requested_bytes, nullptr) << apis[i].name;
    }
    EXPECT_EQ(FindApi(apis[i].domain, apis[i].cbid), i);
  }
  EXPECT_EQ(FindApi(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020), -1);
}

TEST(ApiCatalog, ReadsRequestedBytesFromCallParameters) {
  void* ptr = nullptr;
  cudaMalloc_v3020_params malloc_params{&ptr, 123456789};
  const ApiInfo& cuda_malloc =
      Row(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020);
  EXPECT_EQ(cuda_malloc.requested_bytes(&malloc_params), 123456789u);
  EXPECT_EQ(cuda_malloc.kind, v1::MEMORY_KIND_DEVICE);

  cudaMallocPitch_v3020_params pitch_params{&ptr, nullptr, 1000, 30};
  const ApiInfo& pitch = Row(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMallocPitch_v3020);
  EXPECT_EQ(pitch.requested_bytes(&pitch_params), 30000u);

  // cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize)
  struct {
    unsigned long long* dptr;
    size_t bytesize;
  } driver_params{nullptr, 4096};
  const ApiInfo& cu_alloc =
      Row(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2);
  EXPECT_EQ(cu_alloc.requested_bytes(&driver_params), 4096u);

  const ApiInfo& host = Row(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMallocHost_v3020);
  EXPECT_EQ(host.kind, v1::MEMORY_KIND_PINNED);
}

}  // namespace
}  // namespace cumemtrace::tracer
