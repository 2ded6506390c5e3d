// A CUDA program on a machine without a CUDA driver: it loads the CUDA runtime (its path is
// the first argument), asks for devices and gets an error, and labels its work with NVTX.
#include <dlfcn.h>
#include <nvtx3/nvToolsExt.h>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  nvtxRangePushA("setup");
  void* runtime = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
  if (runtime == nullptr) {
    fprintf(stderr, "no_driver_probe: %s\n", dlerror());
    return 3;
  }
  using GetDeviceCount = int (*)(int*);
  auto get_device_count = reinterpret_cast<GetDeviceCount>(dlsym(runtime, "cudaGetDeviceCount"));
  int devices = 0;
  const int error = get_device_count != nullptr ? get_device_count(&devices) : -1;
  nvtxRangePop();
  nvtxRangePushA("train");
  nvtxRangePop();
  printf("cudaGetDeviceCount: error %d, %d devices\n", error, devices);
  return 0;
}
