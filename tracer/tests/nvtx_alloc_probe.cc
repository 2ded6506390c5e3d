// Counts the allocations made during a thread's first NVTX call (NVTX's init: its dlopen of
// NVTX_INJECTION64_PATH, dlsym, the injection's callback) and prints the count. glibc's fork
// holds malloc's locks, so an allocation there keeps the thread inside the NVTX header's
// fork window for the whole of a concurrent fork (docs/reliability.md): a child forked then
// spins forever. The injection test expects 0 with the tracer preloaded.
#include <nvtx3/nvToolsExt.h>
#include <stddef.h>

#include <atomic>
#include <cstdio>
#include <thread>

extern "C" void* __libc_malloc(size_t size);
extern "C" void* __libc_calloc(size_t count, size_t size);
extern "C" void* __libc_realloc(void* pointer, size_t size);
extern "C" void* __libc_memalign(size_t alignment, size_t size);

namespace {
thread_local bool t_counting = false;
std::atomic<int> g_allocations{0};
void Count() {
  if (t_counting) g_allocations.fetch_add(1);
}
}  // namespace

// Every allocation in the process comes here first (the executable's definitions win), the
// dynamic loader's included.
extern "C" void* malloc(size_t size) noexcept {
  Count();
  return __libc_malloc(size);
}
extern "C" void* calloc(size_t count, size_t size) noexcept {
  Count();
  return __libc_calloc(count, size);
}
extern "C" void* realloc(void* pointer, size_t size) noexcept {
  Count();
  return __libc_realloc(pointer, size);
}
extern "C" void* memalign(size_t alignment, size_t size) noexcept {
  Count();
  return __libc_memalign(alignment, size);
}

int main() {
  std::thread first([] {
    t_counting = true;
    nvtxNameCategoryA(1, "init");  // NVTX initializes; the tracer records no category names
    t_counting = false;
  });
  first.join();
  printf("%d\n", g_allocations.load());
  return 0;
}
