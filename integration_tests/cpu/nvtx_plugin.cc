// A shared library with its own NVTX instance, loaded and unloaded by fault_probe
// --dlopen: each load initializes a new NVTX instance that the tracer must patch, and each
// unload takes that instance's tables away.
#include <nvtx3/nvToolsExt.h>

extern "C" __attribute__((visibility("default"))) void plugin_work() {
  nvtxRangePushA("plugin");
  nvtxRangePop();
}
