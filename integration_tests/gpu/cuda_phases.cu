// A plain CUDA program with allocations of known sizes inside NVTX phases. It writes what it
// did (sizes, phases, the failed request) to the JSON file named by its first argument, so
// the GPU suite can check cumemtrace's report against it to the byte. It knows nothing
// about cumemtrace.
#include <cuda.h>
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#include <cstdio>
#include <cstdlib>

#define CHECK(call)                                                               \
  do {                                                                            \
    cudaError_t err_ = (call);                                                    \
    if (err_ != cudaSuccess) {                                                    \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call,                \
              cudaGetErrorString(err_));                                          \
      exit(1);                                                                    \
    }                                                                             \
  } while (0)
#define CHECK_CU(call)                                                            \
  do {                                                                            \
    CUresult err_ = (call);                                                       \
    if (err_ != CUDA_SUCCESS) {                                                   \
      fprintf(stderr, "%s:%d %s: CUresult %d\n", __FILE__, __LINE__, #call, err_); \
      exit(1);                                                                    \
    }                                                                             \
  } while (0)

constexpr size_t MiB = size_t{1} << 20;

__global__ void fill(float* data, size_t n, float value) {
  size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
  if (i < n) data[i] = value;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s EXPECTED.json [exit-code]\n", argv[0]);
    return 2;
  }
  const int exit_code = argc > 2 ? atoi(argv[2]) : 0;
  CHECK(cudaSetDevice(0));
  CHECK(cudaFree(nullptr));  // create the context outside any phase
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));

  // Sizes are multiples of 2 MiB so no layer rounds them.
  const size_t weights_bytes = 64 * MiB;   // cudaMalloc, lives to the end
  const size_t pool_bytes = 32 * MiB;      // cudaMallocFromPoolAsync, explicit pool
  const size_t scratch_bytes = 16 * MiB;   // cudaMallocAsync, freed inside its phase
  const size_t pinned_bytes = 8 * MiB;     // cudaMallocHost
  const size_t managed_bytes = 4 * MiB;    // cudaMallocManaged

  nvtxRangePushA("setup");
  float* weights = nullptr;
  CHECK(cudaMalloc(&weights, weights_bytes));
  fill<<<(weights_bytes / 4 + 255) / 256, 256, 0, stream>>>(weights, weights_bytes / 4, 1.f);
  CHECK(cudaStreamSynchronize(stream));
  nvtxRangePop();

  nvtxRangePushA("async");
  cudaMemPoolProps props = {};
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  cudaMemPool_t pool;
  CHECK(cudaMemPoolCreate(&pool, &props));
  void* pooled = nullptr;
  CHECK(cudaMallocFromPoolAsync(&pooled, pool_bytes, pool, stream));
  void* scratch = nullptr;
  CHECK(cudaMallocAsync(&scratch, scratch_bytes, stream));
  fill<<<(scratch_bytes / 4 + 255) / 256, 256, 0, stream>>>(static_cast<float*>(scratch),
                                                            scratch_bytes / 4, 2.f);
  CHECK(cudaFreeAsync(scratch, stream));
  CHECK(cudaStreamSynchronize(stream));
  nvtxRangePop();

  nvtxRangePushA("vmm");
  CUmemAllocationProp vmm_props = {};
  vmm_props.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  vmm_props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  vmm_props.location.id = 0;
  size_t granularity = 0;
  CHECK_CU(cuMemGetAllocationGranularity(&granularity, &vmm_props,
                                         CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  const size_t vmm_bytes = 4 * granularity;
  CUmemGenericAllocationHandle handle;
  CHECK_CU(cuMemCreate(&handle, vmm_bytes, &vmm_props, 0));
  CUdeviceptr vmm_address = 0;
  CHECK_CU(cuMemAddressReserve(&vmm_address, vmm_bytes, 0, 0, 0));
  CHECK_CU(cuMemMap(vmm_address, vmm_bytes, 0, handle, 0));
  CUmemAccessDesc access = {};
  access.location = vmm_props.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CHECK_CU(cuMemSetAccess(vmm_address, vmm_bytes, &access, 1));
  nvtxRangePop();

  nvtxRangePushA("host");
  void* pinned = nullptr;
  CHECK(cudaMallocHost(&pinned, pinned_bytes));
  void* managed = nullptr;
  CHECK(cudaMallocManaged(&managed, managed_bytes));
  nvtxRangePop();

  // The peak: everything above is live here (scratch was freed inside "async").
  nvtxRangePushA("oom");
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  const size_t oversized = total_bytes * 2;
  void* never = nullptr;
  const cudaError_t oom = cudaMalloc(&never, oversized);
  if (oom != cudaErrorMemoryAllocation) {
    fprintf(stderr, "expected cudaErrorMemoryAllocation, got %d\n", oom);
    return 1;
  }
  cudaGetLastError();  // clear the sticky-free error state of the runtime
  nvtxRangePop();

  nvtxRangePushA("teardown");
  CHECK_CU(cuMemUnmap(vmm_address, vmm_bytes));
  CHECK_CU(cuMemRelease(handle));
  CHECK_CU(cuMemAddressFree(vmm_address, vmm_bytes));
  CHECK(cudaFreeAsync(pooled, stream));
  CHECK(cudaStreamSynchronize(stream));
  CHECK(cudaMemPoolDestroy(pool));
  CHECK(cudaFreeHost(pinned));
  CHECK(cudaFree(managed));
  CHECK(cudaFree(weights));
  nvtxRangePop();

  FILE* out = fopen(argv[1], "w");
  if (out == nullptr) return 1;
  fprintf(out,
          "{\"weights_bytes\": %zu, \"pool_bytes\": %zu, \"scratch_bytes\": %zu, "
          "\"vmm_bytes\": %zu, \"pinned_bytes\": %zu, \"managed_bytes\": %zu, "
          "\"oversized_bytes\": %zu, \"total_bytes\": %zu}\n",
          weights_bytes, pool_bytes, scratch_bytes, vmm_bytes, pinned_bytes, managed_bytes,
          oversized, total_bytes);
  fclose(out);
  printf("cuda_phases done\n");
  return exit_code;
}
