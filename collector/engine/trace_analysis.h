// Internal: one analysis of a trace as the entry point runs it (engine.h "Inside"), in a mode
// of order and retention the tests choose.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string_view>

#include "collector/engine/accountant.h"
#include "collector/engine/engine.h"
#include "collector/engine/event_order.h"

namespace cumemtrace::internal {

// How the events are ordered and what the sweep keeps.
struct Mode {
  bool sorted = false;  // SortedOrder, else ReorderWindow
  Retention retention = Retention::kLiveAndPeak;
};

// A trace's bytes analyzed in `mode`; timelines only with Retention::kKeepAll. A process
// whose handshake came after events it would have moved onto CLOCK_REALTIME is read again and
// sorted. Null with *error when the bytes are not a trace. Per stream id, *stats says what
// its first read held at most.
std::unique_ptr<AnalyzedTrace> AnalyzeBytes(std::string_view bytes, const AnalysisOptions& options,
                                            Mode mode, const StreamingOptions& streaming,
                                            std::map<uint32_t, StreamingStats>* stats,
                                            std::string* error);

}  // namespace cumemtrace::internal
