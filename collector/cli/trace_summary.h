// Runs the engine over a trace file and renders its summary, keeping the engine's Report
// type out of the subcommands.
#pragma once

#include <string>

namespace cumemtrace {

struct TraceSummary {
  std::string json;     // summary.json content
  std::string text;     // the human-readable summary
  std::string warning;  // non-empty when the file was cut or damaged after a valid start
};

// False with *error set when `path` cannot be read at all or is not a trace file. A file
// cut or damaged after a valid start still gives a summary, with *warning saying so.
bool SummarizeTraceFile(const std::string& path, TraceSummary* summary, std::string* error);

}  // namespace cumemtrace
