// Runs the engine over a trace file and renders its summary, keeping the engine's Report
// type out of the subcommands.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "collector/engine/engine.h"
#include "collector/output/run_figures.h"

namespace cumemtrace {

struct TraceSummary {
  std::string json;     // summary.json content
  std::string text;     // the human-readable summary
  std::string warning;  // non-empty when the file was cut or damaged after a valid start
};

// False with *error set when `path` cannot be read at all or is not a trace file. A file
// cut or damaged after a valid start still gives a summary, with *warning saying so. With
// `detailed`, the one analysis also keeps what the viewer draws (WriteReportHtml): the
// summary is the same, but memory grows with the trace.
bool SummarizeTraceFile(const std::string& path, const AnalysisOptions& options,
                        TraceSummary* summary, std::string* error,
                        std::unique_ptr<AnalyzedTrace>* detailed = nullptr);

// The headline figures of a trace file or a run's output folder (for compare and sweep).
bool FiguresOfTrace(const std::string& path, const AnalysisOptions& options,
                    const std::string& label, RunFigures* figures, std::string* error);

// A run's output folder stands for its trace.cmtrace; other paths are used as they are.
// False with *error when the folder has none.
bool ResolveTracePath(std::string* path, std::string* error);

// A run on the command line of compare and export: `LABEL=PATH` (when no file is named so)
// or PATH, labeled by its file or folder name. Returns (label, path).
std::pair<std::string, std::string> LabeledRun(const std::string& arg);

}  // namespace cumemtrace
