// Writes the fabricated training step of collector/output/tests/category_trace.h (every layer
// the page stacks by category, with the allocator bridge) as a trace file, for the browser
// test: category_trace PATH [CHURN] (CHURN: that many 1 MiB blocks allocated and freed in the
// optimizer, for a long series)
#include <cstdlib>
#include <fstream>
#include <iostream>

#include "collector/output/tests/category_trace.h"

int main(int argc, char** argv) {
  if (argc != 2 && argc != 3) {
    std::cerr << "usage: category_trace PATH [CHURN]\n";
    return 2;
  }
  const int churn = argc == 3 ? std::atoi(argv[2]) : 0;
  std::ofstream out(argv[1], std::ios::binary);
  out << cumemtrace::testing::FileBytes(cumemtrace::testing::CategoryTraceChunks(churn));
  return out ? 0 : 1;
}
