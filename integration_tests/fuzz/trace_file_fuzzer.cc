// libFuzzer target for `cumemtrace report`: a trace file of any content goes through
// Analyze (the trace reader and the engine) and both renderings of the summary.
// The input is handed over as a real file (a memfd) so the reader's own I/O path runs.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>

#include "collector/engine/engine.h"
#include "collector/output/summary.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cumemtrace;
  const int fd = memfd_create("cmtrace-fuzz", MFD_CLOEXEC);
  if (fd < 0) abort();
  for (size_t written = 0; written < size;) {
    const ssize_t n = write(fd, data + written, size - written);
    if (n <= 0) abort();
    written += static_cast<size_t>(n);
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  std::string error;
  std::unique_ptr<AnalyzedTrace> analyzed = Analyze({path, {}}, AnalysisOptions{}, &error);
  close(fd);
  if (analyzed == nullptr) {
    if (error.empty()) abort();  // a file that is refused is refused with a reason
    return 0;
  }
  const Report& report = *analyzed->report;
  std::ostringstream text;
  PrintSummaryText(report, text);
  if (SummaryJson(report).empty()) abort();
  return 0;
}
