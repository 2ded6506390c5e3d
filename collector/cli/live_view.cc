#include "collector/cli/live_view.h"

#include <stdlib.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "collector/engine/categories.h"
#include "collector/engine/report.h"
#include "collector/output/tables.h"

namespace cumemtrace {
namespace {

using internal::Bytes;

// Printable ASCII only: a program's name or a range may hold anything, the terminal must not
// receive control sequences from it.
std::string Printable(const std::string& text) {
  std::string out;
  for (unsigned char c : text) out += c >= 0x20 && c < 0x7f ? static_cast<char>(c) : '?';
  return out;
}

}  // namespace

LiveTally::LiveTally(std::shared_ptr<const PhaseRules> rules) : rules_(std::move(rules)) {}

void LiveTally::Add(uint32_t stream_id, const v1::StreamMessage& message) {
  Stream& s = streams_[stream_id];
  if (message.has_handshake()) {
    const v1::Handshake& h = message.handshake();
    s.pid = h.pid();
    for (int i = 0; i < h.command_line_size() && s.program.size() < 200; ++i) {
      s.program += (i ? " " : "") + h.command_line(i);
    }
    return;
  }
  if (!message.has_batch()) return;
  // A batch holds records in the order CUPTI delivered them (its buffers one after the
  // other), not in time order: strings first (later events name them), then the rest by
  // time, so that a release meets the allocation it ends, as in the report's analysis.
  std::vector<const v1::Event*> events;
  events.reserve(static_cast<size_t>(message.batch().events_size()));
  for (const v1::Event& event : message.batch().events()) {
    if (event.has_interned_string()) {
      s.strings[event.interned_string().id()] = event.interned_string().value();
    } else {
      events.push_back(&event);
    }
  }
  std::stable_sort(events.begin(), events.end(), [](const v1::Event* a, const v1::Event* b) {
    return a->timestamp_ns() < b->timestamp_ns();
  });
  for (const v1::Event* e : events) {
    const v1::Event& event = *e;
    switch (event.payload_case()) {
      case v1::Event::kMemory:
        Memory(s, event.memory(), event.timestamp_ns());
        break;
      case v1::Event::kNvtx: {
        const v1::Nvtx& n = event.nvtx();
        if (n.operation() == v1::NVTX_OPERATION_PUSH || n.operation() == v1::NVTX_OPERATION_START) {
          const auto message_it = s.strings.find(n.message_id());
          std::string name = message_it == s.strings.end() ? "" : message_it->second;
          if (n.domain_id() != 0) {
            const auto domain = s.strings.find(n.domain_id());
            if (domain != s.strings.end()) name = domain->second + ": " + name;
          }
          Open(s, n.thread_id(), n.operation() == v1::NVTX_OPERATION_START ? n.range_id() : 0,
               name);
        } else if (n.operation() == v1::NVTX_OPERATION_POP) {
          Close(s, n.thread_id(), 0);
        } else if (n.operation() == v1::NVTX_OPERATION_END) {
          Close(s, n.thread_id(), n.range_id());
        }
        break;
      }
      case v1::Event::kTorchAllocator: {
        const v1::TorchAllocatorEvent& t = event.torch_allocator();
        if (t.action() == v1::TORCH_ALLOCATOR_ACTION_UNSPECIFIED) break;
        if (t.action() == v1::TORCH_ALLOCATOR_ACTION_ALLOC) {
          Unname(s, t.address(), true);  // a block at a live address: the old one is over
          s.blocks[t.address()] = {t.device(), t.requested_bytes()};
        } else if (t.action() == v1::TORCH_ALLOCATOR_ACTION_FREE_REQUESTED) {
          Unname(s, t.address(), true);
          s.blocks.erase(t.address());
        }
        DeviceState& d = s.devices[t.device()];
        d.torch = true;
        d.tensors = t.allocated_bytes_current() +
                    (t.action() == v1::TORCH_ALLOCATOR_ACTION_ALLOC ? t.requested_bytes() : 0);
        d.tensors_peak = std::max(d.tensors_peak, d.tensors);
        break;
      }
      case v1::Event::kTensorCategory:
        Name(s, event.tensor_category());
        break;
      case v1::Event::kProcessExit:
        s.ended = true;
        break;
      default:
        break;
    }
  }
}

// As the report does (accountant.cc, Tag): a tag names the bridge's block live at its address,
// else the device allocation there; a tag of an address not live is ignored, and of two tags
// of one tensor the higher priority wins.
void LiveTally::Name(Stream& s, const v1::TensorCategory& tag) {
  const auto category = static_cast<uint8_t>(tag.category());
  if (category == 0 || category >= internal::kCategoryCount) return;
  Named named;
  named.category = category;
  const auto block = s.blocks.find(tag.address());
  if (block != s.blocks.end() && block->second.first == tag.device()) {
    named.block = true;
    named.device = block->second.first;
    named.bytes = block->second.second;
  } else {
    const auto live = s.live.find(tag.address());
    if (live == s.live.end() || live->second.device != tag.device()) return;
    named.device = live->second.device;
    named.bytes = live->second.bytes;
  }
  auto [it, added] = s.named.emplace(tag.address(), named);
  if (!added) {
    if (internal::TagPriority(category) <= internal::TagPriority(it->second.category)) return;
    Unname(s, tag.address(), it->second.block);
    it = s.named.emplace(tag.address(), named).first;
  }
  DeviceState& d = s.devices[named.device];
  uint64_t& now = d.category_now[category];
  now += named.bytes;
  uint64_t& peak = d.category_peak[category];
  peak = std::max(peak, now);
}

void LiveTally::Unname(Stream& s, uint64_t address, bool block) {
  const auto it = s.named.find(address);
  if (it == s.named.end() || it->second.block != block) return;
  uint64_t& now = s.devices[it->second.device].category_now[it->second.category];
  now -= std::min(now, it->second.bytes);
  s.named.erase(it);
}

void LiveTally::StreamEnded(uint32_t stream_id) {
  auto it = streams_.find(stream_id);
  if (it != streams_.end()) it->second.ended = true;
}

void LiveTally::Open(Stream& s, uint32_t thread, uint64_t range_id, const std::string& name) {
  const PhaseRules::Mapping mapping = rules_->Map(name);
  int phase = -1;
  if (!mapping.rollup) {
    auto [it, added] = s.phase_ids.emplace(mapping.phase, static_cast<int>(s.phases.size()));
    if (added) s.phases.push_back(mapping.phase);
    phase = it->second;
    // Iterations: a range the rules say marks them, else the range opened most often with
    // nothing else open (forward, in forward > backward > optimizer).
    const bool top_level =
        std::none_of(s.open.begin(), s.open.end(), [](const OpenRange& r) { return r.phase >= 0; });
    if (mapping.iteration && !s.iteration_from_rule) {
      s.iteration_from_rule = true;
      s.iteration_phase = phase;
      s.iterations = 0;
    }
    if (!s.iteration_from_rule && top_level) {
      const uint64_t openings = ++s.top_level_openings[phase];
      if (s.iteration_phase != phase &&
          (s.iteration_phase < 0 || openings > s.top_level_openings[s.iteration_phase])) {
        s.iteration_phase = phase;
        s.iterations = openings - 1;
        for (auto& [index, d] : s.devices) d.has_last_rise = false;
      }
    }
    if (phase == s.iteration_phase) IterationBoundary(s);
  }
  s.open.push_back({thread, range_id, phase});
}

void LiveTally::IterationBoundary(Stream& s) {
  ++s.iterations;
  for (auto& [index, d] : s.devices) {
    if (s.iterations > 1) {
      d.last_rise = d.iteration_peak - d.iteration_entry;
      d.has_last_rise = true;
    }
    d.iteration_entry = d.iteration_peak = d.now;
  }
}

void LiveTally::Close(Stream& s, uint32_t thread, uint64_t range_id) {
  for (auto it = s.open.rbegin(); it != s.open.rend(); ++it) {
    if (range_id != 0 ? it->range_id == range_id : it->thread == thread && it->range_id == 0) {
      s.open.erase(std::next(it).base());
      return;
    }
  }
}

int LiveTally::PhaseOf(const Stream& s, uint32_t thread) const {
  // The innermost phase open on the thread; else the most recently opened one anywhere.
  for (auto it = s.open.rbegin(); it != s.open.rend(); ++it) {
    if (it->phase >= 0 && it->thread == thread && thread != 0) return it->phase;
  }
  for (auto it = s.open.rbegin(); it != s.open.rend(); ++it) {
    if (it->phase >= 0) return it->phase;
  }
  return -1;
}

void LiveTally::Memory(Stream& s, const v1::MemoryOp& op, uint64_t timestamp_ns) {
  if (op.operation() == v1::MEMORY_OPERATION_ALLOCATE) {
    if (op.kind() != v1::MEMORY_KIND_DEVICE && op.kind() != v1::MEMORY_KIND_ARRAY) return;
    // Records arrive in the order CUPTI delivers them, not in time order: a release may come
    // before its allocation (stream-ordered memory). Such an allocation is already over.
    // It pairs with the first release at its address from its own time on.
    const auto early = s.early_releases.find(op.address());
    if (early != s.early_releases.end()) {
      std::vector<uint64_t>& times = early->second;
      const auto release = std::lower_bound(times.begin(), times.end(), timestamp_ns);
      if (release != times.end()) {
        times.erase(release);
        if (times.empty()) s.early_releases.erase(early);
        --s.early_release_count;
        return;
      }
    }
    const int phase = PhaseOf(s, op.thread_id());
    const Allocation allocation{op.device(), op.bytes(), phase, timestamp_ns};
    auto [it, added] = s.live.emplace(op.address(), allocation);
    if (!added) {
      // An older allocation arriving after a newer one at its address was over before the
      // newer began (its release, when it comes, is older than the newer one too).
      if (timestamp_ns < it->second.birth_ns) return;
      // Else a release was lost: the old allocation ends here.
      Unname(s, op.address(), false);
      DeviceState& old = s.devices[it->second.device];
      old.now -= std::min(old.now, it->second.bytes);
      old.by_phase[it->second.phase] -= std::min(old.by_phase[it->second.phase], it->second.bytes);
      it->second = allocation;
    }
    DeviceState& d = s.devices[op.device()];
    d.now += op.bytes();
    d.by_phase[phase] += op.bytes();
    d.peak = std::max(d.peak, d.now);
    d.iteration_peak = std::max(d.iteration_peak, d.now);
  } else if (op.operation() == v1::MEMORY_OPERATION_RELEASE) {
    const auto it = s.live.find(op.address());
    if (it == s.live.end()) {
      // Allocated before tracing started, or its allocation has not arrived yet.
      if (s.early_release_count >= kMaxEarlyReleases) {
        s.early_releases.clear();
        s.early_release_count = 0;
      }
      std::vector<uint64_t>& times = s.early_releases[op.address()];
      times.insert(std::upper_bound(times.begin(), times.end(), timestamp_ns), timestamp_ns);
      ++s.early_release_count;
      return;
    }
    // A release older than the allocation now at its address ended an older one.
    if (timestamp_ns < it->second.birth_ns) return;
    Unname(s, op.address(), false);
    DeviceState& d = s.devices[it->second.device];
    d.now -= std::min(d.now, it->second.bytes);
    uint64_t& phase_bytes = d.by_phase[it->second.phase];
    phase_bytes -= std::min(phase_bytes, it->second.bytes);
    s.live.erase(it);
  }
}

std::vector<LiveTally::Process> LiveTally::Snapshot() const {
  std::vector<Process> out;
  for (const auto& [id, s] : streams_) {
    if (s.devices.empty() && s.phases.empty()) continue;
    Process p;
    p.pid = s.pid;
    p.program = s.program;
    p.ended = s.ended;
    // A range opened once is not yet a repetition: iterations from the second on.
    p.iterations = s.iteration_from_rule || s.iterations >= 2 ? s.iterations : 0;
    if (s.iteration_phase >= 0) p.iteration_range = s.phases[s.iteration_phase];
    for (const auto& [index, d] : s.devices) {
      Device device;
      device.index = index;
      device.now_bytes = d.now;
      device.peak_bytes = d.peak;
      device.has_last_rise = d.has_last_rise;
      device.last_iteration_rise_bytes = d.last_rise;
      device.has_tensors = d.torch;
      device.tensors_now_bytes = d.tensors;
      device.tensors_peak_bytes = d.tensors_peak;
      for (const auto& [phase, bytes] : d.by_phase) {
        if (bytes > 0) device.by_phase.push_back({phase < 0 ? "" : s.phases[phase], bytes});
      }
      std::stable_sort(device.by_phase.begin(), device.by_phase.end(),
                       [](const PhaseBytes& a, const PhaseBytes& b) { return a.bytes > b.bytes; });
      for (const char* name : kCategoryOrder) {
        for (const auto& [category, peak] : d.category_peak) {
          if (peak == 0 || name != std::string(internal::CategoryName(category))) continue;
          device.by_category.push_back({name, d.category_now.at(category), peak});
        }
      }
      p.devices.push_back(std::move(device));
    }
    out.push_back(std::move(p));
  }
  return out;
}

std::string LiveJson(const std::vector<LiveTally::Process>& processes, double elapsed_s) {
  nlohmann::json list = nlohmann::json::array();
  for (const LiveTally::Process& p : processes) {
    nlohmann::json devices = nlohmann::json::array();
    for (const LiveTally::Device& d : p.devices) {
      nlohmann::json phases = nlohmann::json::array();
      for (const LiveTally::PhaseBytes& b : d.by_phase) {
        phases.push_back({{"phase", b.phase}, {"bytes", b.bytes}});
      }
      nlohmann::json categories = nlohmann::json::array();
      for (const LiveTally::CategoryBytes& c : d.by_category) {
        categories.push_back(
            {{"category", c.category}, {"now_bytes", c.now_bytes}, {"peak_bytes", c.peak_bytes}});
      }
      devices.push_back(
          {{"index", d.index},
           {"now_bytes", d.now_bytes},
           {"peak_bytes", d.peak_bytes},
           {"by_phase", phases},
           {"last_iteration_rise_bytes",
            d.has_last_rise ? nlohmann::json(d.last_iteration_rise_bytes) : nlohmann::json()},
           {"tensors", d.has_tensors ? nlohmann::json({{"now_bytes", d.tensors_now_bytes},
                                                       {"peak_bytes", d.tensors_peak_bytes}})
                                     : nlohmann::json()},
           {"by_category", categories}});
    }
    list.push_back({{"pid", p.pid},
                    {"program", p.program},
                    {"ended", p.ended},
                    {"iterations", p.iterations},
                    {"iteration_range", p.iteration_range},
                    {"devices", devices}});
  }
  const nlohmann::json j = {
      {"schema", "cumemtrace.live/1"}, {"elapsed_s", elapsed_s}, {"processes", list}};
  // Names are the programs' bytes: replace what is not UTF-8 rather than fail.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

bool ParseLiveJson(const std::string& text, std::vector<LiveTally::Process>* processes,
                   double* elapsed_s, std::string* error) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object() || j.value("schema", "") != "cumemtrace.live/1") {
    *error = "not a live snapshot (schema cumemtrace.live/1)";
    return false;
  }
  try {
    processes->clear();
    *elapsed_s = j.at("elapsed_s").get<double>();
    for (const nlohmann::json& p : j.at("processes")) {
      LiveTally::Process process;
      process.pid = p.at("pid").get<uint32_t>();
      process.program = p.at("program").get<std::string>();
      process.ended = p.at("ended").get<bool>();
      process.iterations = p.at("iterations").get<uint64_t>();
      process.iteration_range = p.at("iteration_range").get<std::string>();
      for (const nlohmann::json& d : p.at("devices")) {
        LiveTally::Device device;
        device.index = d.at("index").get<uint32_t>();
        device.now_bytes = d.at("now_bytes").get<uint64_t>();
        device.peak_bytes = d.at("peak_bytes").get<uint64_t>();
        const nlohmann::json& rise = d.at("last_iteration_rise_bytes");
        device.has_last_rise = !rise.is_null();
        if (device.has_last_rise) device.last_iteration_rise_bytes = rise.get<uint64_t>();
        const nlohmann::json& tensors = d.at("tensors");
        device.has_tensors = !tensors.is_null();
        if (device.has_tensors) {
          device.tensors_now_bytes = tensors.at("now_bytes").get<uint64_t>();
          device.tensors_peak_bytes = tensors.at("peak_bytes").get<uint64_t>();
        }
        for (const nlohmann::json& b : d.at("by_phase")) {
          device.by_phase.push_back(
              {b.at("phase").get<std::string>(), b.at("bytes").get<uint64_t>()});
        }
        for (const nlohmann::json& c : d.at("by_category")) {
          device.by_category.push_back({c.at("category").get<std::string>(),
                                        c.at("now_bytes").get<uint64_t>(),
                                        c.at("peak_bytes").get<uint64_t>()});
        }
        process.devices.push_back(std::move(device));
      }
      processes->push_back(std::move(process));
    }
  } catch (const nlohmann::json::exception& e) {
    *error = std::string("a malformed live snapshot: ") + e.what();
    return false;
  }
  return true;
}

std::vector<std::string> LiveText(const std::vector<LiveTally::Process>& processes,
                                  double elapsed_s, size_t width, size_t max_lines,
                                  const std::string& title) {
  std::vector<std::string> lines;
  char head[96];
  snprintf(head, sizeof(head), "  +%.0f s  (memory now, peak so far)", elapsed_s);
  lines.push_back(title + head);
  if (processes.empty()) lines.push_back("  no traced process with device memory or phases");
  size_t shown = 0;
  for (const LiveTally::Process& p : processes) {
    std::vector<std::string> block;
    std::string header = "pid " + std::to_string(p.pid) + "  " + Printable(p.program);
    if (p.ended) header += "  (exited)";
    block.push_back(header);
    std::string iterations;
    if (p.iterations > 0) {
      iterations =
          "  iteration " + std::to_string(p.iterations) + " (" + Printable(p.iteration_range) + ")";
    }
    for (const LiveTally::Device& d : p.devices) {
      std::string line = "  GPU " + std::to_string(d.index) + "  now " + Bytes(d.now_bytes) +
                         "  peak " + Bytes(d.peak_bytes);
      if (d.has_tensors) {
        line += "  PyTorch tensors " + Bytes(d.tensors_now_bytes) + " (peak " +
                Bytes(d.tensors_peak_bytes) + ")";
      }
      line += iterations;
      if (d.has_last_rise) line += ", last iteration +" + Bytes(d.last_iteration_rise_bytes);
      block.push_back(line);
      std::string phases = "    by phase:";
      for (size_t k = 0; k < d.by_phase.size(); ++k) {
        phases += (k ? ", " : " ") +
                  (d.by_phase[k].phase.empty() ? "(no phase)" : Printable(d.by_phase[k].phase)) +
                  " " + Bytes(d.by_phase[k].bytes);
      }
      if (!d.by_phase.empty()) block.push_back(phases);
      std::string categories = "    by category:";
      for (size_t k = 0; k < d.by_category.size(); ++k) {
        const LiveTally::CategoryBytes& c = d.by_category[k];
        categories += (k ? ", " : " ") + Printable(c.category) + " " + Bytes(c.now_bytes) +
                      " (peak " + Bytes(c.peak_bytes) + ")";
      }
      if (!d.by_category.empty()) block.push_back(categories);
    }
    if (p.devices.empty()) block.push_back("  no device memory" + iterations);
    if (lines.size() + block.size() + (shown + 1 < processes.size() ? 1 : 0) > max_lines) break;
    lines.insert(lines.end(), block.begin(), block.end());
    ++shown;
  }
  if (shown < processes.size()) {
    lines.push_back("  ... and " + std::to_string(processes.size() - shown) + " more processes");
  }
  if (lines.size() > max_lines) lines.resize(max_lines);
  for (std::string& line : lines) {
    if (line.size() > width) line.resize(width);
  }
  return lines;
}

LiveTerminal::LiveTerminal(int fd) : fd_(fd) {
  const char* term = getenv("TERM");
  active_ = isatty(fd) != 0 && (term == nullptr || std::string(term) != "dumb");
}

LiveTerminal::~LiveTerminal() { Finish(); }

void LiveTerminal::Write(const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = write(fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

void LiveTerminal::Draw(const LiveTally& tally, double elapsed_s) {
  if (!active_) return;
  winsize size{};
  if (ioctl(fd_, TIOCGWINSZ, &size) != 0 || size.ws_row < 4 || size.ws_col < 20) return;
  const int rows = size.ws_row;
  // A terminal shrunk below the lines kept for the view: wait until it grows again.
  if (static_cast<size_t>(rows) < 2 * reserved_ + 1) return;
  // At most a third of the terminal, so that the program's output keeps most of it.
  const size_t most = std::max<size_t>(2, static_cast<size_t>(rows) / 3);
  const std::vector<std::string> lines =
      LiveText(tally.Snapshot(), elapsed_s, static_cast<size_t>(size.ws_col) - 1, most);
  std::string out;
  const size_t want = std::min(lines.size(), most);
  if (want > reserved_ || rows != rows_) {
    // Make room below the cursor: scroll the text up by the lines the view needs more, then
    // shrink the scroll region to the lines above the view (which sends the cursor home, so
    // it is saved and put back, moved up with the text).
    const size_t more = want > reserved_ ? want - reserved_ : 0;
    if (rows_ == 0) {
      out += std::string(want, '\n') + "\x1b[" + std::to_string(want) + "A";
    } else if (more > 0) {
      out +=
          "\x1b"
          "7\x1b[" +
          std::to_string(rows - static_cast<int>(reserved_)) + ";1H" + std::string(more, '\n') +
          "\x1b"
          "8\x1b[" +
          std::to_string(more) + "A";
    }
    reserved_ = std::max(reserved_, want);
    rows_ = rows;
    out +=
        "\x1b"
        "7\x1b[1;" +
        std::to_string(rows - static_cast<int>(reserved_)) +
        "r\x1b"
        "8";
  }
  out +=
      "\x1b"
      "7";
  for (size_t i = 0; i < reserved_; ++i) {
    out += "\x1b[" + std::to_string(rows - static_cast<int>(reserved_) + 1 + static_cast<int>(i)) +
           ";1H\x1b[2K";
    if (i < lines.size()) out += lines[i];
  }
  out +=
      "\x1b"
      "8";
  Write(out);  // one write: the program's output cannot land inside a line of the view
}

void LiveTerminal::Finish() {
  if (!active_ || reserved_ == 0) return;
  std::string out =
      "\x1b"
      "7";
  for (size_t i = 0; i < reserved_; ++i) {
    out += "\x1b[" + std::to_string(rows_ - static_cast<int>(reserved_) + 1 + static_cast<int>(i)) +
           ";1H\x1b[2K";
  }
  out +=
      "\x1b[r\x1b"
      "8";
  Write(out);
  reserved_ = 0;
  active_ = false;
}

}  // namespace cumemtrace
