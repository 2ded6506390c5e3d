// WritePerfettoTrace (exports.h). A Perfetto trace file is a `Trace` message, i.e. a sequence
// of `packet` fields, so packets are serialized and appended one at a time: a trace with ten
// million kernels never exists as one message in memory.
#include <string>
#include <unordered_map>
#include <utility>
#include <variant>

#include "collector/format/varint.h"
#include "collector/output/exports.h"
#include "collector/output/slice_tracks.h"
#include "collector/output/tables.h"
#include "perfetto/perfetto_trace_subset.pb.h"

namespace cumemtrace {
namespace {

namespace pp = ::perfetto::protos;

constexpr uint32_t kSequenceId = 1;

class PerfettoWriter {
 public:
  explicit PerfettoWriter(std::ostream& out) : out_(out) {}

  void Emit(pp::TracePacket& packet) {
    packet.set_trusted_packet_sequence_id(kSequenceId);
    if (first_packet_) {
      // Interned names are valid from here on, for the rest of the sequence.
      packet.set_sequence_flags(pp::TracePacket::SEQ_INCREMENTAL_STATE_CLEARED);
      first_packet_ = false;
    } else if (packet.has_track_event()) {
      packet.set_sequence_flags(pp::TracePacket::SEQ_NEEDS_INCREMENTAL_STATE);
    }
    packet.SerializeToString(&buffer_);
    // Field 1 of Trace, length-delimited: tag 0x0a, varint length, bytes.
    prefix_.assign(1, '\x0a');
    AppendVarint(buffer_.size(), &prefix_);
    out_.write(prefix_.data(), static_cast<std::streamsize>(prefix_.size()));
    out_.write(buffer_.data(), static_cast<std::streamsize>(buffer_.size()));
  }

  // Writes the descriptor of a new track under `parent` (0: none), which `fill` completes;
  // returns the track's uuid.
  template <typename Fill>
  uint64_t Track(uint64_t parent, Fill fill) {
    pp::TracePacket packet;
    pp::TrackDescriptor* d = packet.mutable_track_descriptor();
    const uint64_t uuid = next_uuid_++;
    d->set_uuid(uuid);
    if (parent != 0) d->set_parent_uuid(parent);
    fill(d);
    Emit(packet);
    return uuid;
  }

  // A track under `parent`; with `bytes`, a counter track of bytes.
  uint64_t NamedTrack(uint64_t parent, const std::string& name, bool bytes = false) {
    return Track(parent, [&](pp::TrackDescriptor* d) {
      d->set_name(name);
      if (bytes) d->mutable_counter()->set_unit(pp::CounterDescriptor::UNIT_SIZE_BYTES);
    });
  }

  using Annotations =
      std::initializer_list<std::pair<const char*, std::variant<uint64_t, std::string>>>;

  // Writes an event on `track`, its name by interned id, adding the name to the packet's
  // interned data the first time (kernel names repeat millions of times).
  void Event(uint64_t track, pp::TrackEvent::Type type, uint64_t ts,
             const std::string* name = nullptr, const char* category = nullptr,
             Annotations annotations = {}) {
    pp::TracePacket packet;
    packet.set_timestamp(ts);
    pp::TrackEvent* event = packet.mutable_track_event();
    event->set_type(type);
    event->set_track_uuid(track);
    if (category != nullptr) event->add_categories(category);
    if (name != nullptr) {
      auto [it, inserted] = iids_.emplace(*name, iids_.size() + 1);
      if (inserted) {
        pp::EventName* entry = packet.mutable_interned_data()->add_event_names();
        entry->set_iid(it->second);
        entry->set_name(*name);
      }
      event->set_name_iid(it->second);
    }
    for (const auto& [key, value] : annotations) {
      pp::DebugAnnotation* a = event->add_debug_annotations();
      a->set_name(key);
      if (const uint64_t* number = std::get_if<uint64_t>(&value)) {
        a->set_uint_value(*number);
      } else {
        a->set_string_value(std::get<std::string>(value));
      }
    }
    Emit(packet);
  }

  void Counter(uint64_t track, uint64_t ts, uint64_t value) {
    pp::TracePacket packet;
    packet.set_timestamp(ts);
    pp::TrackEvent* event = packet.mutable_track_event();
    event->set_type(pp::TrackEvent::TYPE_COUNTER);
    event->set_track_uuid(track);
    event->set_counter_value(static_cast<int64_t>(value));
    Emit(packet);
  }

 private:
  std::ostream& out_;
  std::string buffer_;
  std::string prefix_;  // the packet field's tag and length
  bool first_packet_ = true;
  uint64_t next_uuid_ = 1;
  std::unordered_map<std::string, uint64_t> iids_;
};

void WriteProcess(PerfettoWriter& w, const ProcessReport& p, const ProcessTimeline& t,
                  uint64_t origin) {
  const uint64_t offset = internal::Since(origin, p.first_timestamp_abs_ns);  // time 0's place
  const uint64_t process_track = w.Track(0, [&](pp::TrackDescriptor* d) {
    d->set_name(internal::ProcessLabel(p));
    pp::ProcessDescriptor* process = d->mutable_process();
    process->set_pid(static_cast<int32_t>(p.pid));
    for (const std::string& arg : p.command_line) process->add_cmdline(arg);
    process->set_process_name(internal::ProcessLabel(p));
  });

  for (size_t slot = 0; slot < t.devices.size(); ++slot) {
    const DeviceReport& dr = p.devices[slot];
    const std::string gpu = internal::DeviceLabel(t.devices[slot].index);
    internal::DeviceCounters(
        p, t, slot,
        [&](const std::string& name, const std::vector<MemoryStep>& steps, bool from_zero) {
          const uint64_t track = w.NamedTrack(process_track, name, true);
          if (from_zero) w.Counter(track, offset, 0);
          for (const MemoryStep& s : steps) w.Counter(track, offset + s.time_ns, s.bytes);
        });

    // The peak and the failed allocations of this device, as instants on one track.
    uint64_t events_track = 0;
    auto instant = [&](uint64_t time_ns, const std::string& name,
                       PerfettoWriter::Annotations annotations) {
      if (events_track == 0) events_track = w.NamedTrack(process_track, gpu + " memory events");
      w.Event(events_track, pp::TrackEvent::TYPE_INSTANT, offset + time_ns, &name, "memory",
              annotations);
    };
    if (dr.peak.seen) {
      instant(dr.peak.time_ns, "peak device memory",
              {{"bytes", dr.peak.bytes}, {"live_allocations", dr.peak.live_count}});
    }
    for (const FailedAllocationReport& f : p.failed_allocations) {
      if (f.device != dr.index) continue;
      instant(f.time_ns, "failed allocation",
              {{"api", f.api}, {"requested_bytes", f.requested_bytes}, {"error", f.error_name},
               {"phase", internal::PhaseName(f.phase)},
               {"device_in_use_bytes", f.device_in_use_bytes},
               {"device_free_bytes", f.device_free_bytes}});
    }
  }

  // Records lost before they reached the trace: explicit gaps, as slices on their own track.
  uint64_t drops_track = 0;
  for (const DropSummary& d : p.dropped) {
    for (const DropWindow& window : d.windows) {
      if (!window.has_window) continue;
      if (drops_track == 0) drops_track = w.NamedTrack(process_track, "records dropped (gaps)");
      const std::string name = "records dropped (" + d.source + ")";
      w.Event(drops_track, pp::TrackEvent::TYPE_SLICE_BEGIN, offset + window.first_ns, &name,
              "gap", {{"count", window.count}});
      // A window of one instant still gets a visible width of 1 us.
      w.Event(drops_track, pp::TrackEvent::TYPE_SLICE_END,
              offset + std::max(window.last_ns, window.first_ns + 1000));
    }
  }

  // NVTX ranges per thread, kernels per stream; overflow lanes are child tracks.
  uint64_t own_track = 0;  // the thread's or stream's, which its overflow lanes follow
  for (const internal::SliceTrack& plan : internal::PlanSliceTracks(p, t)) {
    uint64_t track = 0;
    if (plan.lane > 0) {
      track = w.NamedTrack(own_track, plan.name);
    } else if (plan.kernels) {
      track = own_track = w.NamedTrack(process_track, plan.name);
    } else {
      track = own_track = w.Track(process_track, [&](pp::TrackDescriptor* d) {
        pp::ThreadDescriptor* thread = d->mutable_thread();
        thread->set_pid(static_cast<int32_t>(p.pid));
        thread->set_tid(static_cast<int32_t>(plan.thread_id));
        thread->set_thread_name(plan.name);
      });
    }
    // Slices nest on the track: close what ended before the next one starts.
    std::vector<uint64_t> open_ends;
    auto close_until = [&](uint64_t ts) {
      for (; !open_ends.empty() && open_ends.back() <= ts; open_ends.pop_back()) {
        w.Event(track, pp::TrackEvent::TYPE_SLICE_END, offset + open_ends.back());
      }
    };
    for (uint32_t i : plan.slices) {
      const internal::Slice s = internal::SliceOf(p, t, plan, i);
      close_until(s.start_ns);
      w.Event(track, pp::TrackEvent::TYPE_SLICE_BEGIN, offset + s.start_ns, &s.name, s.category);
      open_ends.push_back(s.end_ns);
    }
    close_until(~uint64_t{0});
  }

  if (!t.marks.empty()) {
    const uint64_t track = w.NamedTrack(process_track, "NVTX marks");
    for (const MarkInstant& m : t.marks) {
      w.Event(track, pp::TrackEvent::TYPE_INSTANT, offset + m.time_ns, &t.strings[m.name], nullptr,
              {{"thread_id", m.thread_id}});
    }
  }
}

}  // namespace

void WritePerfettoTrace(const AnalyzedTrace& trace, std::ostream& out) {
  PerfettoWriter writer(out);
  const uint64_t origin = internal::TraceOrigin(*trace.report);
  for (size_t i = 0; i < trace.report->processes.size(); ++i) {
    WriteProcess(writer, trace.report->processes[i], trace.timelines[i], origin);
  }
}

}  // namespace cumemtrace
