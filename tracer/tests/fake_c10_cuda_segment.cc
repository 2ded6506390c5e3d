// A stand-in for PyTorch's libc10_cuda.so (built under that name) for the CUPTI probe: its
// one function takes a segment from the (fake) driver, so the tracer sees PyTorch's caching
// allocator make a synchronous allocation call. No torch version lies beside it, so the
// tracer finds no bridge for it: its tensors stay unseen.
#include <cupti.h>

#include <cstdint>

extern "C" {
void fake_cupti_call(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const char* name,
                     void* params, void* return_value, uint32_t correlation, CUcontext context,
                     const char* symbol, void (*run)(void*), void* run_arg);

__attribute__((visibility("default"))) uint64_t fake_c10_cuda_segment(size_t bytes,
                                                                      uint32_t correlation) {
  static uint64_t next = 0x9000000;
  CUdeviceptr address = 0;
  cuMemAlloc_v2_params params{&address, bytes};
  CUresult status = CUDA_SUCCESS;
  fake_cupti_call(
      CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, "cuMemAlloc_v2", &params,
      &status, correlation, reinterpret_cast<CUcontext>(0x1000), nullptr,
      [](void* arg) {
        *static_cast<cuMemAlloc_v2_params*>(arg)->dptr = next;
        next += 0x200000;
      },
      &params);
  return address;
}
}
