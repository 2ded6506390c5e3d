// `cumemtrace run --live`: memory while the program runs. LiveTally keeps a running count of
// each traced process's device memory from the messages the collector receives (already
// parsed for validation, so the count costs the collector a map update per event and the
// program nothing); LiveText renders it; LiveTerminal keeps it drawn in the bottom lines of
// the terminal, below a scroll region in which the program's own output goes on.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "collector/engine/phase_rules.h"
#include "cumemtrace/v1/trace.pb.h"

namespace cumemtrace {

class LiveTally {
 public:
  struct PhaseBytes {
    std::string phase;  // "" when no range was open
    uint64_t bytes = 0;
  };
  // Tensors the program's objects named (the tracer's Python side: TensorCategory), by
  // category: live now and the category's own highest so far.
  struct CategoryBytes {
    std::string category;  // "parameter", "optimizer_state", ... (summary.json's names)
    uint64_t now_bytes = 0;
    uint64_t peak_bytes = 0;
  };
  struct Device {
    uint32_t index = 0;
    uint64_t now_bytes = 0;   // device memory in use (DEVICE + ARRAY, as the driver sees it)
    uint64_t peak_bytes = 0;  // the highest so far
    std::vector<PhaseBytes> by_phase;  // memory in use by the phase that allocated it, largest
                                       // first
    bool has_last_rise = false;
    uint64_t last_iteration_rise_bytes = 0;  // the last whole iteration: its peak - its entry
    // PyTorch's tensors, with the bridge to its caching allocator: its own allocated-bytes
    // counter at its latest event (an allocation's block counted at the size asked for until
    // the next event), and the highest seen.
    bool has_tensors = false;
    uint64_t tensors_now_bytes = 0;
    uint64_t tensors_peak_bytes = 0;
    std::vector<CategoryBytes> by_category;  // in kCategoryOrder; empty when none was named
  };
  struct Process {
    uint32_t pid = 0;
    std::string program;  // the command line, cut
    bool ended = false;
    uint64_t iterations = 0;  // openings of the range that marks iterations
    std::string iteration_range;
    std::vector<Device> devices;  // by index
  };

  explicit LiveTally(std::shared_ptr<const PhaseRules> rules);
  // One message of a stream, in arrival order.
  void Add(uint32_t stream_id, const v1::StreamMessage& message);
  void StreamEnded(uint32_t stream_id);
  // Drops a stream (the daemon's, once it has ended: it serves the processes still running).
  void Forget(uint32_t stream_id) { streams_.erase(stream_id); }
  // The processes with device memory or phases, by stream id.
  std::vector<Process> Snapshot() const;

 private:
  struct Allocation {
    uint32_t device = 0;
    uint64_t bytes = 0;
    int phase = -1;
    uint64_t birth_ns = 0;
  };
  struct DeviceState {
    uint64_t now = 0;
    uint64_t peak = 0;
    std::map<int, uint64_t> by_phase;  // phase id (-1: none) -> bytes in use
    uint64_t iteration_entry = 0;
    uint64_t iteration_peak = 0;
    bool has_last_rise = false;
    uint64_t last_rise = 0;
    bool torch = false;
    uint64_t tensors = 0;
    uint64_t tensors_peak = 0;
    std::map<uint8_t, uint64_t> category_now;  // v1::Category -> bytes
    std::map<uint8_t, uint64_t> category_peak;
  };
  // A tensor a TensorCategory named: its size, and whether it is the bridge's block (ended by
  // the allocator's FREE_REQUESTED) or a device allocation (ended by its release).
  struct Named {
    uint32_t device = 0;
    uint64_t bytes = 0;
    uint8_t category = 0;
    bool block = false;
  };
  struct OpenRange {
    uint32_t thread = 0;
    uint64_t range_id = 0;  // start/end ranges; 0 for push/pop
    int phase = -1;         // -1: a per-op range rolled up into its enclosing phase
  };
  struct Stream {
    uint32_t pid = 0;
    std::string program;
    bool ended = false;
    std::unordered_map<uint32_t, std::string> strings;
    std::vector<OpenRange> open;  // in the order opened
    std::unordered_map<uint64_t, Allocation> live;
    // The bridge's live blocks (address -> device and bytes asked for), and the named tensors
    // by address.
    std::unordered_map<uint64_t, std::pair<uint32_t, uint64_t>> blocks;
    std::unordered_map<uint64_t, Named> named;
    // Releases not matched yet: address -> their times, in order.
    std::unordered_map<uint64_t, std::vector<uint64_t>> early_releases;
    size_t early_release_count = 0;
    std::map<uint32_t, DeviceState> devices;
    std::vector<std::string> phases;  // by id
    std::unordered_map<std::string, int> phase_ids;
    std::map<int, uint64_t> top_level_openings;  // phase id -> openings with nothing open
    int iteration_phase = -1;  // the range that marks iterations, -1 until one is seen
    bool iteration_from_rule = false;
    uint64_t iterations = 0;
  };

  void Open(Stream& s, uint32_t thread, uint64_t range_id, const std::string& name);
  void Close(Stream& s, uint32_t thread, uint64_t range_id);
  void IterationBoundary(Stream& s);
  int PhaseOf(const Stream& s, uint32_t thread) const;
  void Memory(Stream& s, const v1::MemoryOp& op, uint64_t timestamp_ns);
  void Name(Stream& s, const v1::TensorCategory& tag);
  // The named tensor at `address` ends (`block`: the bridge's block, else device memory).
  static void Unname(Stream& s, uint64_t address, bool block);
  // Releases of unknown addresses kept for an allocation that arrives late (bounded).
  static constexpr size_t kMaxEarlyReleases = 1 << 16;

  std::shared_ptr<const PhaseRules> rules_;
  std::map<uint32_t, Stream> streams_;
};

// A snapshot as the daemon serves it to `cumemtrace top` (schema "cumemtrace.live/1"), and
// back. ParseLiveJson: false with *error for anything else.
std::string LiveJson(const std::vector<LiveTally::Process>& processes, double elapsed_s);
bool ParseLiveJson(const std::string& text, std::vector<LiveTally::Process>* processes,
                   double* elapsed_s, std::string* error);

// The view, one line each, no longer than `width` columns, at most `max_lines` lines (the
// processes that do not fit are counted on the last line). ASCII only.
std::vector<std::string> LiveText(const std::vector<LiveTally::Process>& processes,
                                  double elapsed_s, size_t width, size_t max_lines,
                                  const std::string& title = "cumemtrace --live");

// Draws LiveText on a terminal (the descriptor of stderr): the bottom lines are kept for the
// view and a scroll region above them holds the program's output. Off (Active() false) when
// the descriptor is not a terminal or TERM is "dumb".
class LiveTerminal {
 public:
  explicit LiveTerminal(int fd);
  ~LiveTerminal();  // Finish()
  bool Active() const { return active_; }
  void Draw(const LiveTally& tally, double elapsed_s);
  // Clears the view and gives the whole terminal back to scrolling.
  void Finish();

 private:
  void Write(const std::string& bytes);
  int fd_;
  bool active_ = false;
  size_t reserved_ = 0;  // lines kept at the bottom
  int rows_ = 0;
};

}  // namespace cumemtrace
