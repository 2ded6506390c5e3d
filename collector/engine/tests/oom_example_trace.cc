// Writes the trace of docs/oom.md's example (fake_allocator.h, OomWithCategories) to the file
// named by its argument, for `cumemtrace report` to read in the example's test.
#include <cstdio>
#include <fstream>
#include <map>

#include "collector/engine/tests/fake_allocator.h"
#include "collector/engine/tests/trace_builder.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: oom_example_trace FILE\n");
    return 2;
  }
  std::map<uint64_t, uint64_t> live;
  const std::string bytes =
      cumemtrace::testing::FileBytes(cumemtrace::testing::OomWithCategories(&live).Chunks());
  std::ofstream out(argv[1], std::ios::binary);
  out << bytes;
  return out ? 0 : 1;
}
