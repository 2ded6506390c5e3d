#include "tracer/sources/cupti/caller_module.h"

#include <gtest/gtest.h>

namespace cumemtrace::tracer {
namespace {

TEST(CallerModule, SkipsTheCudaStackAndNamesTheCaller) {
  EXPECT_TRUE(IsCudaStackModule("libcudart.so.13"));
  EXPECT_TRUE(IsCudaStackModule("libcuda.so.1"));
  EXPECT_TRUE(IsCudaStackModule("libcupti.so.13"));
  EXPECT_TRUE(IsCudaStackModule("libcumemtrace-tracer.so"));
  EXPECT_FALSE(IsCudaStackModule("libc10_cuda.so"));
  EXPECT_FALSE(IsCudaStackModule("libcublasLt.so.13"));
  // The tracer's own image is skipped. Here that image is this test program (the tracer
  // core is linked into it), so the first frame left is libc's, which called main().
  PrepareCallerLookup();
  const std::string caller = CallerModule();
  EXPECT_EQ(caller.rfind("libc.so", 0), 0u) << caller;
}

}  // namespace
}  // namespace cumemtrace::tracer
