// WritePerfettoTrace (exports.h). A Perfetto trace file is a `Trace` message, i.e. a sequence
// of `packet` fields, so packets are serialized and appended one at a time: a trace with ten
// million kernels never exists as one message in memory.
#include <string>
#include <unordered_map>

#include "collector/format/varint.h"
#include "collector/output/exports.h"
#include "collector/output/slice_tracks.h"
#include "perfetto/perfetto_trace_subset.pb.h"

namespace cumemtrace {
namespace {

namespace pp = ::perfetto::protos;

constexpr uint32_t kSequenceId = 1;

class PerfettoWriter {
 public:
  explicit PerfettoWriter(std::ostream& out) : out_(out) {}

  uint64_t NewUuid() { return next_uuid_++; }

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
    packet.Clear();
  }

  void Descriptor(pp::TracePacket& packet) { Emit(packet); }

  // Sets the event's name by interned id, adding the name to the packet's interned data
  // the first time (kernel names repeat millions of times).
  void SetName(pp::TracePacket& packet, const std::string& name) {
    auto [it, inserted] = iids_.emplace(name, iids_.size() + 1);
    if (inserted) {
      pp::EventName* entry = packet.mutable_interned_data()->add_event_names();
      entry->set_iid(it->second);
      entry->set_name(name);
    }
    packet.mutable_track_event()->set_name_iid(it->second);
  }

  void Slice(uint64_t track, pp::TrackEvent::Type type, uint64_t ts, const std::string* name,
             const char* category = nullptr) {
    pp::TracePacket packet;
    packet.set_timestamp(ts);
    pp::TrackEvent* event = packet.mutable_track_event();
    event->set_type(type);
    event->set_track_uuid(track);
    if (category != nullptr) event->add_categories(category);
    if (name != nullptr) SetName(packet, *name);
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

void AddAnnotation(pp::TrackEvent* event, const std::string& name, uint64_t value) {
  pp::DebugAnnotation* a = event->add_debug_annotations();
  a->set_name(name);
  a->set_uint_value(value);
}
void AddAnnotation(pp::TrackEvent* event, const std::string& name, const std::string& value) {
  pp::DebugAnnotation* a = event->add_debug_annotations();
  a->set_name(name);
  a->set_string_value(value);
}

// A track under `parent`; with `bytes`, a counter track of bytes.
uint64_t NamedTrack(PerfettoWriter& w, uint64_t parent, const std::string& name,
                    bool bytes = false) {
  pp::TracePacket packet;
  pp::TrackDescriptor* d = packet.mutable_track_descriptor();
  const uint64_t uuid = w.NewUuid();
  d->set_uuid(uuid);
  d->set_parent_uuid(parent);
  d->set_name(name);
  if (bytes) d->mutable_counter()->set_unit(pp::CounterDescriptor::UNIT_SIZE_BYTES);
  w.Descriptor(packet);
  return uuid;
}

void WriteProcess(PerfettoWriter& w, const ProcessReport& p, const ProcessTimeline& t,
                  uint64_t offset) {
  const uint64_t process_track = w.NewUuid();
  {
    pp::TracePacket packet;
    pp::TrackDescriptor* d = packet.mutable_track_descriptor();
    d->set_uuid(process_track);
    d->set_name(internal::ProcessLabel(p));
    pp::ProcessDescriptor* process = d->mutable_process();
    process->set_pid(static_cast<int32_t>(p.pid));
    for (const std::string& arg : p.command_line) process->add_cmdline(arg);
    process->set_process_name(internal::ProcessLabel(p));
    w.Descriptor(packet);
  }
  const uint64_t end = offset + p.duration_ns;

  for (size_t slot = 0; slot < t.devices.size(); ++slot) {
    const DeviceTimeline& dt = t.devices[slot];
    const DeviceReport& dr = p.devices[slot];
    const std::string gpu = internal::DeviceLabel(dt.index);
    const char* what = p.allocator_mode == "native" && !p.torch.attached ? " device memory (allocator segments)"
                                                    : " device memory in use";
    if (!dt.device_memory.empty()) {
      const uint64_t track = NamedTrack(w, process_track, gpu + what, true);
      w.Counter(track, offset, 0);
      for (const MemoryStep& s : dt.device_memory) w.Counter(track, offset + s.time_ns, s.bytes);
    }
    if (!dt.static_memory.empty()) {
      const uint64_t track =
          NamedTrack(w, process_track, gpu + " module globals (not the program's)", true);
      w.Counter(track, offset, 0);
      for (const MemoryStep& s : dt.static_memory) w.Counter(track, offset + s.time_ns, s.bytes);
    }
    if (dr.not_program.tracer_bytes > 0) {
      const uint64_t track =
          NamedTrack(w, process_track, gpu + " tracer buffers (not the program's)", true);
      w.Counter(track, offset, dr.not_program.tracer_bytes);
      w.Counter(track, end, dr.not_program.tracer_bytes);
    }

    // The peak and the failed allocations of this device, as instants on one track.
    uint64_t events_track = 0;
    auto events = [&]() {
      if (events_track == 0) events_track = NamedTrack(w, process_track, gpu + " memory events");
      return events_track;
    };
    if (dr.peak.seen) {
      const uint64_t track = events();
      pp::TracePacket packet;
      packet.set_timestamp(offset + dr.peak.time_ns);
      pp::TrackEvent* e = packet.mutable_track_event();
      e->set_type(pp::TrackEvent::TYPE_INSTANT);
      e->set_track_uuid(track);
      e->add_categories("memory");
      w.SetName(packet, "peak device memory");
      AddAnnotation(e, "bytes", dr.peak.bytes);
      AddAnnotation(e, "live_allocations", dr.peak.live_count);
      w.Emit(packet);
    }
    for (const FailedAllocationReport& f : p.failed_allocations) {
      if (f.device != dr.index) continue;
      const uint64_t track = events();
      pp::TracePacket packet;
      packet.set_timestamp(offset + f.time_ns);
      pp::TrackEvent* e = packet.mutable_track_event();
      e->set_type(pp::TrackEvent::TYPE_INSTANT);
      e->set_track_uuid(track);
      e->add_categories("memory");
      w.SetName(packet, "failed allocation");
      AddAnnotation(e, "api", f.api);
      AddAnnotation(e, "requested_bytes", f.requested_bytes);
      AddAnnotation(e, "error", f.error_name);
      AddAnnotation(e, "phase", f.phase.empty() ? std::string("(no phase)") : f.phase);
      AddAnnotation(e, "device_in_use_bytes", f.device_in_use_bytes);
      AddAnnotation(e, "device_free_bytes", f.device_free_bytes);
      w.Emit(packet);
    }
  }

  // Records lost before they reached the trace: explicit gaps, as slices on their own track.
  uint64_t drops_track = 0;
  for (const DropSummary& d : p.dropped) {
    for (const DropWindow& window : d.windows) {
      if (!window.has_window) continue;
      if (drops_track == 0) drops_track = NamedTrack(w, process_track, "records dropped (gaps)");
      for (const bool begin : {true, false}) {
        pp::TracePacket packet;
        // A window of one instant still gets a visible width of 1 us.
        packet.set_timestamp(offset + (begin ? window.first_ns
                                             : std::max(window.last_ns, window.first_ns + 1000)));
        pp::TrackEvent* e = packet.mutable_track_event();
        e->set_type(begin ? pp::TrackEvent::TYPE_SLICE_BEGIN : pp::TrackEvent::TYPE_SLICE_END);
        e->set_track_uuid(drops_track);
        if (begin) {
          e->add_categories("gap");
          w.SetName(packet, "records dropped (" + d.source + ")");
          AddAnnotation(e, "count", window.count);
        }
        w.Emit(packet);
      }
    }
  }

  // NVTX ranges per thread, kernels per stream; overflow lanes are child tracks.
  std::unordered_map<uint32_t, uint64_t> thread_tracks;
  std::unordered_map<uint64_t, uint64_t> stream_tracks;
  for (const internal::SliceTrack& plan : internal::PlanSliceTracks(p, t)) {
    uint64_t track = 0;
    if (!plan.kernels && plan.lane == 0) {
      track = w.NewUuid();
      pp::TracePacket packet;
      pp::TrackDescriptor* d = packet.mutable_track_descriptor();
      d->set_uuid(track);
      d->set_parent_uuid(process_track);
      pp::ThreadDescriptor* thread = d->mutable_thread();
      thread->set_pid(static_cast<int32_t>(p.pid));
      thread->set_tid(static_cast<int32_t>(plan.thread_id));
      thread->set_thread_name(plan.name);
      w.Descriptor(packet);
      thread_tracks[plan.thread_id] = track;
    } else if (!plan.kernels) {
      track = NamedTrack(w, thread_tracks[plan.thread_id], plan.name);
    } else if (plan.lane == 0) {
      track = NamedTrack(w, process_track, plan.name);
      stream_tracks[(uint64_t{plan.device} << 32) | plan.stream] = track;
    } else {
      track = NamedTrack(w, stream_tracks[(uint64_t{plan.device} << 32) | plan.stream], plan.name);
    }
    // Slices nest on the track: close what ended before the next one starts.
    std::vector<uint64_t> open_ends;
    auto close_until = [&](uint64_t ts) {
      while (!open_ends.empty() && open_ends.back() <= ts) {
        w.Slice(track, pp::TrackEvent::TYPE_SLICE_END, offset + open_ends.back(), nullptr);
        open_ends.pop_back();
      }
    };
    for (uint32_t i : plan.slices) {
      const uint64_t start = plan.kernels ? t.kernels[i].start_ns : t.ranges[i].start_ns;
      const uint64_t stop = plan.kernels ? t.kernels[i].end_ns : t.ranges[i].end_ns;
      const std::string& name = plan.kernels ? t.strings[t.kernels[i].name]
                                             : internal::PhaseLabel(t, t.ranges[i].phase);
      close_until(start);
      w.Slice(track, pp::TrackEvent::TYPE_SLICE_BEGIN, offset + start, &name,
              plan.kernels ? "kernel" : internal::PhaseCategory(p, t, t.ranges[i].phase));
      open_ends.push_back(stop);
    }
    close_until(~uint64_t{0});
  }

  if (!t.marks.empty()) {
    const uint64_t track = NamedTrack(w, process_track, "NVTX marks");
    for (const MarkInstant& m : t.marks) {
      pp::TracePacket packet;
      packet.set_timestamp(offset + m.time_ns);
      pp::TrackEvent* e = packet.mutable_track_event();
      e->set_type(pp::TrackEvent::TYPE_INSTANT);
      e->set_track_uuid(track);
      w.SetName(packet, t.strings[m.name]);
      AddAnnotation(e, "thread_id", m.thread_id);
      w.Emit(packet);
    }
  }
}

}  // namespace

void WritePerfettoTrace(const AnalyzedTrace& trace, std::ostream& out) {
  PerfettoWriter writer(out);
  const uint64_t origin = internal::TraceOrigin(*trace.report);
  for (size_t i = 0; i < trace.report->processes.size(); ++i) {
    const ProcessReport& p = trace.report->processes[i];
    const uint64_t offset =
        p.first_timestamp_abs_ns >= origin ? p.first_timestamp_abs_ns - origin : 0;
    WriteProcess(writer, p, trace.timelines[i], offset);
  }
}

}  // namespace cumemtrace
