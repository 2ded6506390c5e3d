// Writes the fabricated training step of collector/output/tests/category_trace.h (every layer
// the page stacks by category, with the allocator bridge) as a trace file, for the browser
// test: category_trace PATH
#include <fstream>
#include <iostream>

#include "collector/output/tests/category_trace.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: category_trace PATH\n";
    return 2;
  }
  std::ofstream out(argv[1], std::ios::binary);
  out << cumemtrace::testing::FileBytes(cumemtrace::testing::CategoryTraceChunks());
  return out ? 0 : 1;
}
