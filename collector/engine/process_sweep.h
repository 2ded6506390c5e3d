// Internal: one process's decoded stream -> its ProcessReport (sort, one sweep, tables).
#pragma once

#include "collector/engine/analysis.h"
#include "collector/engine/decoded.h"
#include "collector/engine/report.h"
#include "collector/engine/timeline_model.h"

namespace cumemtrace::internal {

// Sorts stream.events in place (time, then the tie rule of design.md, then arrival). With
// `timeline`, also fills it from the same sweep (timeline_model.h).
ProcessReport AnalyzeProcess(DecodedStream& stream, const AnalysisOptions& options,
                             ProcessTimeline* timeline = nullptr);

// "DEVICE", "PINNED", ... for a v1::MemoryKind value.
const char* MemoryKindName(uint8_t kind);

}  // namespace cumemtrace::internal
