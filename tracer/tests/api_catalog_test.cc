#include "tracer/recording/api_catalog.h"

#include <cupti_driver_cbid.h>
#include <gtest/gtest.h>

#include <set>

namespace cumemtrace::tracer {
namespace {

const ApiInfo& Row(CUpti_CallbackId cbid) {
  uint16_t count = 0;
  const ApiInfo* apis = ApiCatalog(&count);
  const int row = FindApi(cbid);
  EXPECT_GE(row, 0);
  return apis[row < 0 ? 0 : row];
}

TEST(ApiCatalog, EveryCallbackIdAppearsOnceAndMemoryCallsHaveOperands) {
  uint16_t count = 0;
  const ApiInfo* apis = ApiCatalog(&count);
  std::set<unsigned> seen;
  for (uint16_t i = 0; i < count; ++i) {
    EXPECT_TRUE(seen.insert(apis[i].cbid).second) << apis[i].name;
    if (apis[i].role != ApiRole::kLaunch) {
      EXPECT_NE(apis[i].read, nullptr) << apis[i].name;
    }
    EXPECT_EQ(FindApi(apis[i].cbid), i);
  }
  EXPECT_EQ(FindApi(CUPTI_DRIVER_TRACE_CBID_cuMemcpy), -1);
}

TEST(ApiCatalog, ReadsAddressSizeAndStreamFromDriverParameters) {
  // cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize), as the driver leaves it at the exit.
  CUdeviceptr made = 0x7f00001000;
  struct {
    CUdeviceptr* dptr;
    size_t bytesize;
  } alloc{&made, 4096};
  CallOperands o;
  Row(CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2).read(&alloc, &o);
  EXPECT_EQ(o.address, 0x7f00001000u);
  EXPECT_EQ(o.bytes, 4096u);
  EXPECT_EQ(Row(CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2).kind, v1::MEMORY_KIND_DEVICE);
  // At the entry of a call that then fails, the address is not written yet: still the size.
  alloc.dptr = nullptr;
  o = CallOperands{};
  Row(CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2).read(&alloc, &o);
  EXPECT_EQ(o.address, 0u);
  EXPECT_EQ(o.bytes, 4096u);

  // cuMemAllocFromPoolAsync(dptr, bytesize, pool, stream)
  auto* stream = reinterpret_cast<CUstream>(0x77);
  struct {
    CUdeviceptr* dptr;
    size_t bytesize;
    void* pool;
    CUstream stream;
  } pool_alloc{&made, 512, nullptr, stream};
  o = CallOperands{};
  const ApiInfo& from_pool = Row(CUPTI_DRIVER_TRACE_CBID_cuMemAllocFromPoolAsync);
  from_pool.read(&pool_alloc, &o);
  EXPECT_EQ(o.stream, stream);
  EXPECT_EQ(o.bytes, 512u);
  EXPECT_TRUE(from_pool.stream_ordered);

  // cuMemAllocPitch_v2: the memory made is the pitch the driver chose times the rows.
  size_t pitch = 1024;
  struct {
    CUdeviceptr* dptr;
    size_t* pitch;
    size_t width;
    size_t height;
    unsigned element;
  } pitched{&made, &pitch, 1000, 30, 4};
  o = CallOperands{};
  Row(CUPTI_DRIVER_TRACE_CBID_cuMemAllocPitch_v2).read(&pitched, &o);
  EXPECT_EQ(o.bytes, 30u * 1024u);

  // cuMemFreeAsync(dptr, stream) and cuMemUnmap(ptr, size)
  struct {
    CUdeviceptr dptr;
    CUstream stream;
  } free_async{0x7f00001000, stream};
  o = CallOperands{};
  Row(CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync).read(&free_async, &o);
  EXPECT_EQ(o.address, 0x7f00001000u);
  EXPECT_EQ(o.stream, stream);
  struct {
    CUdeviceptr ptr;
    size_t size;
  } unmap{0x7e00000000, 6 << 20};
  o = CallOperands{};
  Row(CUPTI_DRIVER_TRACE_CBID_cuMemUnmap).read(&unmap, &o);
  EXPECT_EQ(o.address, 0x7e00000000u);
  EXPECT_EQ(o.bytes, 6u << 20);

  // Physical memory counts once mapped; pinned host memory is its own kind.
  EXPECT_FALSE(Row(CUPTI_DRIVER_TRACE_CBID_cuMemCreate).makes_memory);
  EXPECT_TRUE(Row(CUPTI_DRIVER_TRACE_CBID_cuMemMap).makes_memory);
  EXPECT_EQ(Row(CUPTI_DRIVER_TRACE_CBID_cuMemHostAlloc).kind, v1::MEMORY_KIND_PINNED);
  EXPECT_EQ(Row(CUPTI_DRIVER_TRACE_CBID_cuMemAllocManaged).kind, v1::MEMORY_KIND_MANAGED);
}

}  // namespace
}  // namespace cumemtrace::tracer
