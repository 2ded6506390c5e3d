// A stand-in libcuda.so.1 for `doctor` on a machine without a GPU: the driver entry points
// doctor calls, answering as a driver for CUDA 13.0 with $FAKE_CUDA_GPUS GPUs (none when
// unset), each named "Fake GPU <n>".
#include <cstdio>
#include <cstdlib>

extern "C" {

__attribute__((visibility("default"))) int cuDriverGetVersion(int* version) {
  *version = 13000;
  return 0;
}

__attribute__((visibility("default"))) int cuInit(unsigned) {
  const char* gpus = getenv("FAKE_CUDA_GPUS");
  return gpus != nullptr && atoi(gpus) > 0 ? 0 : 100;  // CUDA_ERROR_NO_DEVICE
}

__attribute__((visibility("default"))) int cuDeviceGetCount(int* count) {
  const char* gpus = getenv("FAKE_CUDA_GPUS");
  *count = gpus != nullptr ? atoi(gpus) : 0;
  return 0;
}

__attribute__((visibility("default"))) int cuDeviceGetName(char* name, int size, int device) {
  snprintf(name, static_cast<size_t>(size), "Fake GPU %d", device);
  return 0;
}

}  // extern "C"
