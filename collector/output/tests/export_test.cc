// Exports parsed back: the Perfetto file with the generated subset parser, the Chrome JSON with
// nlohmann, the CSV tables with a small RFC 4180 reader, pickles with Python's own pickle (the
// memory_viz snapshots are checked further by check_memory_viz.py). Checked against the Report
// and the timeline model, not by string matching.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <tuple>
#include <set>
#include <sstream>

#include "collector/output/exports.h"
#include "collector/output/slice_tracks.h"
#include "collector/output/pickle_writer.h"
#include "collector/engine/tests/fake_allocator.h"
#include "collector/engine/tests/trace_builder.h"
#include "collector/engine/engine.h"
#include "collector/output/summary.h"
#include "perfetto/perfetto_trace_subset.pb.h"

namespace cumemtrace::testing {
namespace {

namespace pp = ::perfetto::protos;
using nlohmann::json;

#ifndef CUMEMTRACE_GOLDEN_DIR
#error "CUMEMTRACE_GOLDEN_DIR must name integration_tests/golden"
#endif

// What `export` asks for: the timelines, every event in exact order.
AnalysisOptions Exact() {
  AnalysisOptions options;
  options.timelines = options.sorted = true;
  return options;
}

std::unique_ptr<AnalyzedTrace> Load(const std::string& path) {
  std::string error;
  auto trace = Analyze({path, {}}, Exact(), &error);
  EXPECT_NE(trace, nullptr) << error;
  return trace;
}

// The JSON report.html embeds for its script, as written there ("" when the page has none).
std::string EmbeddedPageData(const AnalyzedTrace& trace) {
  std::ostringstream page;
  WriteViewerHtml(trace, page);
  const std::string html = page.str();
  const std::string open = "<script id=\"cumemtrace-data\" type=\"application/json\">";
  const size_t begin = html.find(open);
  if (begin == std::string::npos) return {};
  const size_t data_at = begin + open.size();
  const size_t end = html.find("</script>", data_at);
  return end == std::string::npos ? std::string() : html.substr(data_at, end - data_at);
}

// Two threads with nested phases and NVTX ranges of two domains that overlap without nesting,
// kernels on two streams (two of them overlapping), a failed allocation, module globals, and
// a phase name that needs CSV quoting.
std::string SyntheticTrace() {
  StreamBuilder s(1, 4242);
  s.String(1, "forward").String(2, "backward").String(3, "a,\"quoted\" phase").String(4, "dom")
      .String(5, "cudaMalloc").String(6, "gemm_kernel").String(7, "cudaErrorMemoryAllocation")
      .String(8, "libtorch_cuda.so").Device(0, "GPU-A", 1000000).Device(1, "GPU-B", 1000000);
  s.Push(100, 11, 1)                                 // forward on thread 11
      .Alloc(110, 0, 0x1000, 400, kDevice, 11, 5, 8)
      .Push(120, 11, 3)                              // nested quoted phase
      .Alloc(130, 0, 0x2000, 300, kDevice, 11, 5, 8)
      .Push(135, 11, 2, 4)                           // domain "dom" range opened inside...
      .Pop(140, 11)                                  // ...quoted phase closes first: no nesting
      .Alloc(150, 1, 0x9000, 50, kDevice, 11)
      .Pop(160, 11, 4)                               // dom range ends
      .Free(170, 0, 0x2000, 300, kDevice, 11)
      .Pop(180, 11)                                  // forward ends
      .Push(200, 12, 2)                              // backward on thread 12
      .Alloc(210, 0, 0x3000, 500, kDevice, 12)
      .Failed(220, 0, 12, 999999, 2, 5, 7, 100, 1000000)
      .Free(230, 0, 0x1000, 400, kDevice, 12)
      .Alloc(240, 0, 0x7000, 64, 6 /* DEVICE_STATIC */, 12)
      .Pop(250, 12);
  auto kernel = [&](uint64_t start, uint64_t end, uint32_t stream) {
    v1::Event e;
    e.set_timestamp_ns(start);
    v1::Kernel* k = e.mutable_kernel();
    k->set_name_id(6);
    k->set_device(0);
    k->set_stream(stream);
    k->set_end_ns(end);
    k->set_thread_id(11);
    s.Raw(e);
  };
  kernel(105, 125, 7);
  kernel(120, 140, 7);  // overlaps the previous one on the same stream
  kernel(150, 155, 7);
  kernel(150, 190, 8);
  s.Mark(260, 12, 1).Exit(300, 0).LauncherExit(0, 0);
  // One file per process: CTest runs the tests of this binary in parallel processes.
  return WriteTempFile("export_synthetic." + std::to_string(getpid()) + ".cmtrace",
                       FileBytes(s.Chunks()));
}

std::string Golden(const std::string& name) {
  return std::string(CUMEMTRACE_GOLDEN_DIR) + "/" + name + ".cmtrace";
}

// ---- timeline model ---------------------------------------------------------------------

TEST(TimelineModel, StepsAgreeWithTheReport) {
  for (const std::string& path : {SyntheticTrace(), Golden("torch_async"), Golden("torch_native"),
                                  Golden("cuda_phases"), Golden("libtorch_native")}) {
    SCOPED_TRACE(path);
    auto trace = Load(path);
    ASSERT_EQ(trace->timelines.size(), trace->report->processes.size());
    for (size_t i = 0; i < trace->timelines.size(); ++i) {
      const ProcessReport& p = trace->report->processes[i];
      const ProcessTimeline& t = trace->timelines[i];
      ASSERT_EQ(t.devices.size(), p.devices.size());
      for (size_t slot = 0; slot < t.devices.size(); ++slot) {
        const DeviceTimeline& d = t.devices[slot];
        uint64_t max = 0;
        for (size_t k = 0; k < d.device_memory.size(); ++k) {
          max = std::max(max, d.device_memory[k].bytes);
          if (k > 0) {
            EXPECT_LE(d.device_memory[k - 1].time_ns, d.device_memory[k].time_ns);
          }
        }
        EXPECT_EQ(max, p.devices[slot].peak.bytes);
        if (!p.devices[slot].peak.seen) continue;
        ASSERT_NE(d.peak_step, kNoStep);
        EXPECT_EQ(d.device_memory[d.peak_step].time_ns, p.devices[slot].peak.time_ns);
        // The live set at the peak step is the report's live set at the peak.
        uint64_t live = 0, count = 0;
        for (const TimelineAllocation& a : t.allocations) {
          if (a.device_slot != slot || a.birth_step == kNoStep) continue;
          if (a.birth_step <= d.peak_step && (a.death_step == kNoStep || a.death_step > d.peak_step)) {
            live += a.bytes;
            ++count;
          }
        }
        EXPECT_EQ(live, p.devices[slot].peak.bytes);
        EXPECT_EQ(count, p.devices[slot].peak.live_count);
      }
    }
  }
}

// Ranges whose names the rules map to one phase ("forward", then "fwd") are that phase in the
// timeline too, as their allocations are: the exports name and color a range by it.
TEST(TimelineModel, RangesCarryThePhaseTheRulesGaveThem) {
  StreamBuilder s(1, 4243);
  s.String(1, "forward").String(2, "fwd").String(3, "backward").Device(0, "GPU-A", 1000000);
  s.Push(100, 11, 1).Alloc(110, 0, 0x1000, 400, kDevice, 11).Pop(120, 11);
  s.Push(200, 11, 2).Alloc(210, 0, 0x2000, 300, kDevice, 11).Pop(220, 11);
  s.Push(300, 11, 3).Alloc(310, 0, 0x3000, 200, kDevice, 11).Pop(320, 11);
  s.Exit(400, 0).LauncherExit(0, 0);
  auto trace = Load(WriteTempFile("export_phases." + std::to_string(getpid()) + ".cmtrace",
                                  FileBytes(s.Chunks())));
  ASSERT_NE(trace, nullptr);
  const ProcessTimeline& t = trace->timelines.at(0);
  ASSERT_EQ(t.ranges.size(), 3u);
  ASSERT_EQ(t.allocations.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_GE(t.ranges[i].phase, 0) << i;
    EXPECT_EQ(t.ranges[i].phase, t.allocations[i].phase) << i;
  }
  EXPECT_EQ(t.phase_names.at(static_cast<size_t>(t.ranges[1].phase)), "forward");
  EXPECT_EQ(t.phase_names.at(static_cast<size_t>(t.ranges[2].phase)), "backward");
}

TEST(NestingLanes, OverlapsGoToAnotherLaneAndNestedSlicesStay) {
  const std::vector<uint32_t> lanes =
      internal::NestingLanes({{0, 100}, {10, 20}, {15, 30}, {20, 25}, {40, 120}, {130, 140}});
  // [15,30] crosses the end of [10,20]; [40,120] crosses the end of [0,100]; [20,25] nests
  // in [0,100] again once [10,20] has ended, and [130,140] starts after everything.
  EXPECT_EQ(lanes, (std::vector<uint32_t>{0, 0, 1, 0, 1, 0}));
}

// ---- Perfetto ---------------------------------------------------------------------------

struct PerfettoCheck {
  std::map<uint64_t, pp::TrackDescriptor> tracks;
  std::map<uint64_t, std::vector<std::pair<uint64_t, int64_t>>> counters;  // track -> points
  std::map<uint64_t, uint64_t> slices;                                     // track -> count
  std::vector<std::pair<std::string, const pp::TrackEvent*>> instants;
  pp::Trace trace;
};

// Decodes the file and checks what Perfetto requires: every event names a described track,
// every interned name is defined before use, slices on a track begin and end in order and nest.
PerfettoCheck DecodePerfetto(const std::string& bytes) {
  PerfettoCheck c;
  EXPECT_TRUE(c.trace.ParseFromString(bytes));
  std::map<uint64_t, std::string> names;
  std::map<uint64_t, std::vector<uint64_t>> open;  // track -> begin timestamps
  std::map<uint64_t, uint64_t> last_ts;
  bool first = true;
  for (const pp::TracePacket& packet : c.trace.packet()) {
    EXPECT_EQ(packet.trusted_packet_sequence_id(), 1u);
    if (first) {
      EXPECT_EQ(packet.sequence_flags(), pp::TracePacket::SEQ_INCREMENTAL_STATE_CLEARED);
      first = false;
    }
    for (const pp::EventName& n : packet.interned_data().event_names()) names[n.iid()] = n.name();
    if (packet.has_track_descriptor()) {
      const pp::TrackDescriptor& d = packet.track_descriptor();
      EXPECT_FALSE(c.tracks.count(d.uuid())) << "uuid reused";
      if (d.has_parent_uuid()) {
        EXPECT_TRUE(c.tracks.count(d.parent_uuid())) << d.name();
      }
      c.tracks[d.uuid()] = d;
    }
    if (!packet.has_track_event()) continue;
    const pp::TrackEvent& e = packet.track_event();
    EXPECT_TRUE(c.tracks.count(e.track_uuid())) << "event on an undescribed track";
    EXPECT_GE(packet.timestamp(), last_ts[e.track_uuid()]) << "time goes back on a track";
    last_ts[e.track_uuid()] = packet.timestamp();
    if (e.has_name_iid()) {
      EXPECT_TRUE(names.count(e.name_iid())) << "undefined iid";
    }
    switch (e.type()) {
      case pp::TrackEvent::TYPE_COUNTER:
        EXPECT_EQ(c.tracks[e.track_uuid()].counter().unit(), pp::CounterDescriptor::UNIT_SIZE_BYTES);
        c.counters[e.track_uuid()].emplace_back(packet.timestamp(), e.counter_value());
        break;
      case pp::TrackEvent::TYPE_SLICE_BEGIN:
        open[e.track_uuid()].push_back(packet.timestamp());
        ++c.slices[e.track_uuid()];
        break;
      case pp::TrackEvent::TYPE_SLICE_END:
        EXPECT_FALSE(open[e.track_uuid()].empty()) << "end without a begin";
        if (!open[e.track_uuid()].empty()) open[e.track_uuid()].pop_back();
        break;
      case pp::TrackEvent::TYPE_INSTANT:
        c.instants.emplace_back(names[e.name_iid()], &e);
        break;
      default:
        ADD_FAILURE() << "unexpected event type";
    }
  }
  for (const auto& [track, stack] : open) EXPECT_TRUE(stack.empty()) << "slice left open";
  return c;
}

uint64_t Annotation(const pp::TrackEvent& e, const std::string& name) {
  for (const pp::DebugAnnotation& a : e.debug_annotations()) {
    if (a.name() == name) return a.uint_value();
  }
  ADD_FAILURE() << "no annotation " << name;
  return 0;
}

TEST(PerfettoExport, SyntheticTraceHasEveryTrackAndNestingSlices) {
  auto trace = Load(SyntheticTrace());
  std::ostringstream out;
  WritePerfettoTrace(*trace, out);
  PerfettoCheck c = DecodePerfetto(out.str());
  const ProcessReport& p = trace->report->processes[0];

  // Device memory counters: the maximum is the peak, on the GPU 0 track.
  bool saw_gpu0 = false, saw_static = false;
  for (const auto& [track, points] : c.counters) {
    int64_t max = 0;
    for (const auto& point : points) max = std::max(max, point.second);
    const std::string& name = c.tracks[track].name();
    if (name == "GPU 0 device memory in use") {
      saw_gpu0 = true;
      EXPECT_EQ(static_cast<uint64_t>(max), p.devices[0].peak.bytes);
      EXPECT_EQ(max, 900);  // 0x1000 (400) and 0x3000 (500); 0x2000 was freed before
    }
    if (name == "GPU 0 module globals (not the program's)") {
      saw_static = true;
      EXPECT_EQ(max, 64);
    }
  }
  EXPECT_TRUE(saw_gpu0);
  EXPECT_TRUE(saw_static);

  // NVTX: thread 11 has forward, the quoted phase and the dom range; the dom range overlaps
  // the quoted phase without nesting, so it is on an overflow track under thread 11's track.
  uint64_t thread11 = 0;
  for (const auto& [uuid, d] : c.tracks) {
    if (d.has_thread() && d.thread().tid() == 11) thread11 = uuid;
  }
  ASSERT_NE(thread11, 0u);
  EXPECT_EQ(c.tracks[thread11].thread().pid(), 4242);
  uint64_t overflow_slices = 0;
  for (const auto& [uuid, d] : c.tracks) {
    if (d.parent_uuid() == thread11) overflow_slices += c.slices[uuid];
  }
  EXPECT_EQ(c.slices[thread11] + overflow_slices, 3u);
  EXPECT_EQ(overflow_slices, 1u);

  // Kernels: 3 on stream 7 (one on an overflow track), 1 on stream 8.
  uint64_t kernel_slices = 0;
  for (const auto& [uuid, d] : c.tracks) {
    if (d.name().find("kernels") != std::string::npos) kernel_slices += c.slices[uuid];
  }
  EXPECT_EQ(kernel_slices, 4u);

  // Instants: the peak (with its bytes) and the failed allocation.
  std::map<std::string, const pp::TrackEvent*> instants(c.instants.begin(), c.instants.end());
  ASSERT_TRUE(instants.count("peak device memory"));
  ASSERT_TRUE(instants.count("failed allocation"));
  EXPECT_EQ(Annotation(*instants["failed allocation"], "requested_bytes"), 999999u);
}

TEST(PerfettoExport, GoldenTracesDecodeWithTheirPeaks) {
  for (const char* name : {"torch_async", "torch_native", "cuda_phases", "libtorch_native"}) {
    SCOPED_TRACE(name);
    auto trace = Load(Golden(name));
    std::ostringstream out;
    WritePerfettoTrace(*trace, out);
    PerfettoCheck c = DecodePerfetto(out.str());
    int64_t peak = 0;
    for (const auto& [track, points] : c.counters) {
      if (c.tracks[track].name().find("device memory") == std::string::npos) continue;
      for (const auto& point : points) peak = std::max(peak, point.second);
    }
    EXPECT_EQ(static_cast<uint64_t>(peak), trace->report->processes[0].devices[0].peak.bytes);
    uint64_t slices = 0;
    for (const auto& [track, n] : c.slices) slices += n;
    EXPECT_EQ(slices, trace->timelines[0].ranges.size() + trace->timelines[0].kernels.size());
  }
}

// ---- Chrome -----------------------------------------------------------------------------

TEST(ChromeExport, SameContentAsJsonThatNests) {
  for (const std::string& path : {SyntheticTrace(), Golden("torch_async")}) {
    SCOPED_TRACE(path);
    auto trace = Load(path);
    std::ostringstream out;
    WriteChromeTrace(*trace, out);
    const json doc = json::parse(out.str());
    const ProcessReport& p = trace->report->processes[0];
    std::map<std::pair<uint64_t, uint64_t>, std::vector<std::pair<double, double>>> slices;
    double counter_max = 0;
    bool peak_instant = false;
    size_t x_events = 0;
    for (const json& e : doc.at("traceEvents")) {
      const std::string ph = e.at("ph");
      if (ph == "X") {
        ++x_events;
        slices[{e.at("pid"), e.at("tid")}].emplace_back(e.at("ts"), e.at("ts").get<double>() + e.at("dur").get<double>());
      } else if (ph == "C" && e.at("name").get<std::string>().find("device memory") != std::string::npos) {
        counter_max = std::max(counter_max, e.at("args").at("bytes").get<double>());
      } else if (ph == "i" && e.at("name") == "peak device memory") {
        const DeviceReport* device = FindDevice(p, e.at("args").at("device").get<uint32_t>());
        ASSERT_NE(device, nullptr);
        peak_instant = peak_instant || device->index == p.devices[0].index;
        EXPECT_EQ(e.at("args").at("bytes").get<uint64_t>(), device->peak.bytes);
        EXPECT_DOUBLE_EQ(e.at("ts").get<double>(), device->peak.time_ns / 1000.0);
      }
    }
    EXPECT_TRUE(peak_instant);
    EXPECT_EQ(static_cast<uint64_t>(counter_max), p.devices[0].peak.bytes);
    EXPECT_EQ(x_events, trace->timelines[0].ranges.size() + trace->timelines[0].kernels.size());
    // Complete events on one thread nest: sorted by start, each ends inside its enclosing one.
    for (auto& [key, list] : slices) {
      std::sort(list.begin(), list.end(), [](auto& a, auto& b) {
        return a.first != b.first ? a.first < b.first : a.second > b.second;
      });
      std::vector<double> ends;
      for (const auto& [start, end] : list) {
        while (!ends.empty() && ends.back() <= start) ends.pop_back();
        if (!ends.empty()) {
          EXPECT_LE(end, ends.back()) << "overlap on tid " << key.second;
        }
        ends.push_back(end);
      }
    }
  }
}

// ---- CSV --------------------------------------------------------------------------------

std::vector<std::vector<std::string>> ParseCsv(const std::string& text) {
  std::vector<std::vector<std::string>> rows(1);
  std::string field;
  bool quoted = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    if (quoted) {
      if (ch == '"' && i + 1 < text.size() && text[i + 1] == '"') field += text[++i];
      else if (ch == '"') quoted = false;
      else field += ch;
    } else if (ch == '"') {
      quoted = true;
    } else if (ch == ',') {
      rows.back().push_back(field);
      field.clear();
    } else if (ch == '\r' && i + 1 < text.size() && text[i + 1] == '\n') {
      rows.back().push_back(field);
      field.clear();
      rows.emplace_back();
      ++i;
    } else {
      field += ch;
    }
  }
  if (rows.back().empty()) rows.pop_back();
  return rows;
}

TEST(CsvExport, TablesParseBackWithTheReportsFigures) {
  auto trace = Load(SyntheticTrace());
  const ProcessReport& p = trace->report->processes[0];
  std::map<std::string, std::vector<std::vector<std::string>>> tables;
  for (const auto& [name, text] : SummaryCsvTables(*trace->report)) tables[name] = ParseCsv(text);
  for (const char* name : {"devices.csv", "live_at_peak.csv", "by_kind.csv", "by_api.csv",
                           "by_library.csv", "phases.csv", "failed_allocations.csv"}) {
    ASSERT_TRUE(tables.count(name)) << name;
    for (const auto& row : tables[name]) EXPECT_EQ(row.size(), tables[name][0].size()) << name;
  }
  auto column = [&](const std::string& table, const std::string& header) {
    const auto& head = tables[table][0];
    return static_cast<size_t>(std::find(head.begin(), head.end(), header) - head.begin());
  };
  ASSERT_EQ(tables["devices.csv"].size(), 1 + p.devices.size());
  EXPECT_EQ(tables["devices.csv"][1][column("devices.csv", "peak_bytes")],
            std::to_string(p.devices[0].peak.bytes));
  // The quoted phase name survives the round trip.
  std::set<std::string> phases;
  for (size_t r = 1; r < tables["phases.csv"].size(); ++r) {
    phases.insert(tables["phases.csv"][r][column("phases.csv", "phase")]);
  }
  EXPECT_TRUE(phases.count("a,\"quoted\" phase"));
  EXPECT_EQ(tables["phases.csv"].size(), 1 + p.phases.size() * p.devices.size());
  ASSERT_EQ(tables["failed_allocations.csv"].size(), 2u);
  EXPECT_EQ(tables["failed_allocations.csv"][1][column("failed_allocations.csv", "requested_bytes")],
            "999999");
  EXPECT_EQ(tables["failed_allocations.csv"][1][column("failed_allocations.csv", "phase")],
            "backward");
}

// ---- pickle -----------------------------------------------------------------------------

// Runs python3 to unpickle `bytes` and returns the value as JSON (tuples become arrays).
json Unpickle(const std::string& bytes) {
  const std::string path =
      WriteTempFile("value." + std::to_string(getpid()) + ".pickle", bytes);
  const std::string command =
      "python3 -c 'import json, pickle, sys; "
      "print(json.dumps(pickle.load(open(sys.argv[1], \"rb\"))))' " + path;
  FILE* pipe = popen(command.c_str(), "r");
  EXPECT_NE(pipe, nullptr);
  std::string out;
  char buffer[4096];
  for (size_t n; (n = fread(buffer, 1, sizeof(buffer), pipe)) > 0;) out.append(buffer, n);
  EXPECT_EQ(pclose(pipe), 0) << "python3 could not unpickle";
  return json::parse(out);
}

TEST(PickleWriter, PythonReadsBackEveryTypeAndSize) {
  std::ostringstream out;
  internal::PickleWriter w(out);
  const std::vector<int64_t> ints = {0, 1, 255, 256, 65535, 65536, -1, -256, INT32_MAX,
                                     INT32_MIN, int64_t{INT32_MAX} + 1, int64_t{INT32_MIN} - 1,
                                     INT64_MAX, INT64_MIN, 1ll << 40, -(1ll << 47)};
  w.BeginDict();
  w.Str("ints");
  w.BeginList();
  for (int64_t v : ints) w.Int(v);
  w.EndList();
  w.Str("uints");
  w.BeginList();
  w.UInt(uint64_t{1} << 63);
  w.UInt(UINT64_MAX);
  w.EndList();
  w.Str("strings");
  w.BeginList();
  w.Str("");
  w.Str("ünïcode ✓");
  w.Str("ints");  // memoized: the key above
  w.EndList();
  w.Str("flags");
  w.BeginTuple();
  w.Bool(true);
  w.Bool(false);
  w.None();
  w.EndTuple();
  w.Str("long");  // crosses the 1000-item batches of lists and dicts
  w.BeginList();
  for (int i = 0; i < 2500; ++i) w.Int(i);
  w.EndList();
  w.Str("wide");
  w.BeginDict();
  for (int i = 0; i < 1500; ++i) {
    w.Str("k" + std::to_string(i));  // past 256 memo entries: LONG_BINPUT/LONG_BINGET
    w.Int(i);
  }
  w.Str("k7");
  w.Int(-7);  // a repeated key replaces the value, as in Python
  w.EndDict();
  w.EndDict();
  w.Finish();

  const json v = Unpickle(out.str());
  ASSERT_EQ(v.at("ints").size(), ints.size());
  for (size_t i = 0; i < ints.size(); ++i) EXPECT_EQ(v["ints"][i].get<int64_t>(), ints[i]);
  EXPECT_EQ(v["uints"][0].get<uint64_t>(), uint64_t{1} << 63);
  EXPECT_EQ(v["uints"][1].get<uint64_t>(), UINT64_MAX);
  EXPECT_EQ(v["strings"], json::array({"", "ünïcode ✓", "ints"}));
  EXPECT_EQ(v["flags"], json::array({true, false, nullptr}));
  ASSERT_EQ(v["long"].size(), 2500u);
  EXPECT_EQ(v["long"][2499], 2499);
  EXPECT_EQ(v["wide"].size(), 1500u);
  EXPECT_EQ(v["wide"]["k1499"], 1499);
  EXPECT_EQ(v["wide"]["k7"], -7);
}

TEST(MemoryVizExport, SnapshotOfTheSyntheticTrace) {
  auto trace = Load(SyntheticTrace());
  std::ostringstream out;
  WriteMemoryVizSnapshot(*trace, 0, out);
  const json v = Unpickle(out.str());
  // Still allocated at the end: 0x3000 (500 B) on GPU 0 and 0x9000 (50 B) on GPU 1.
  ASSERT_EQ(v.at("segments").size(), 2u);
  std::map<uint64_t, json> segments;
  for (const json& s : v["segments"]) segments[s.at("address")] = s;
  EXPECT_EQ(segments[0x3000]["total_size"], 500);
  EXPECT_EQ(segments[0x3000]["device"], 0);
  EXPECT_EQ(segments[0x3000]["blocks"][0]["state"], "active_allocated");
  EXPECT_EQ(segments[0x9000]["device"], 1);
  ASSERT_EQ(v.at("device_traces").size(), 2u);
  std::vector<std::string> actions;
  std::map<uint64_t, std::string> category;
  for (const json& e : v["device_traces"][0]) {
    actions.push_back(e.at("action"));
    if (e["action"] == "alloc") category[e.at("addr")] = e.at("category");
  }
  EXPECT_EQ(actions, (std::vector<std::string>{
                         "segment_alloc", "alloc", "segment_alloc", "alloc", "free_requested",
                         "free_completed", "segment_free", "segment_alloc", "alloc", "oom",
                         "free_requested", "free_completed", "segment_free"}));
  // The trace has forward and backward phases: categories, in PyTorch's names.
  EXPECT_EQ(category[0x1000], "activation");
  EXPECT_EQ(category[0x2000], "autograd_detail");
  EXPECT_EQ(category[0x3000], "gradient");
  EXPECT_EQ(v["device_traces"][1][0]["category"], "autograd_detail");
}

// A backprop step with a tagged weight: memory_viz's `category` is PyTorch's name of each
// allocation's category, summary.json and the text give the figures by category.
TEST(MemoryVizExport, CategoriesUsePyTorchsNames) {
  StreamBuilder s(1, 10);
  s.String(1, "forward").String(2, "backward").String(3, "optimizer");
  s.Alloc(1, 0, 0x1000, 1000, kDevice, 10);  // a weight, named by the program
  v1::Event tag;
  tag.set_timestamp_ns(2);
  tag.mutable_tensor_category()->set_address(0x1000);
  tag.mutable_tensor_category()->set_bytes(1000);
  tag.mutable_tensor_category()->set_category(v1::CATEGORY_PARAMETER);
  s.Raw(tag);
  s.Push(10, 10, 1).Alloc(11, 0, 0x2000, 500, kDevice, 10).Pop(12, 10);
  s.Push(20, 10, 2).Alloc(21, 0, 0x3000, 1000, kDevice, 10);
  s.Free(22, 0, 0x2000, 500, kDevice, 10).Pop(23, 10);
  s.Push(30, 10, 3).Alloc(31, 0, 0x4000, 2000, kDevice, 10).Pop(32, 10);
  s.Exit(40, 0).LauncherExit(0, 0);
  const std::string path =
      WriteTempFile("categories." + std::to_string(getpid()) + ".cmtrace", FileBytes(s.Chunks()));
  auto trace = Load(path);
  ASSERT_NE(trace, nullptr);
  std::ostringstream out;
  WriteMemoryVizSnapshot(*trace, 0, out);
  const json v = Unpickle(out.str());
  std::map<uint64_t, std::string> category;
  bool unknown = false;
  for (const json& e : v.at("device_traces").at(0)) {
    if (e.at("action") == "alloc") category[e.at("addr")] = e.at("category");
    unknown |= e.at("category") == "unknown";
  }
  EXPECT_EQ(category[0x1000], "parameter");
  EXPECT_EQ(category[0x2000], "activation");
  EXPECT_EQ(category[0x3000], "gradient");
  EXPECT_EQ(category[0x4000], "optimizer_state");
  EXPECT_TRUE(unknown);  // the page needs one (see memory_viz.cc)

  const json summary = json::parse(SummaryJson(*trace->report));
  const json& p = summary.at("processes").at(0);
  EXPECT_EQ(p.at("categories").at("source"), "objects_and_inferred");
  EXPECT_EQ(p.at("categories").at("tags"), 1);
  const json& c = p.at("devices").at(0).at("categories");
  EXPECT_EQ(c.at("tensor_layer"), "device");
  const json& parameter = c.at("by_category").at("parameter");
  EXPECT_EQ(parameter.at("at_end").at("objects_bytes"), 1000);
  EXPECT_EQ(parameter.at("at_device_peak").at("inferred_bytes"), 0);
  EXPECT_EQ(c.at("by_category").at("activation").at("own_peak").at("bytes"), 500);
  EXPECT_EQ(c.at("by_category").at("activation").at("own_peak").at("time_ns"), 10);
  EXPECT_EQ(c.at("by_category").at("activation").at("at_device_peak").at("bytes"), 0);
  EXPECT_EQ(c.at("by_category").at("buffer").at("allocations"), 0);
  std::ostringstream text;
  PrintSummaryText(*trace->report, text);
  EXPECT_NE(text.str().find("    by category:\n"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("      activation"), std::string::npos) << text.str();

  // Without training phases or tags, no categories: the phase of origin, as before.
  StreamBuilder plain(1, 10);
  plain.String(1, "load").Push(1, 10, 1).Alloc(2, 0, 0x1000, 1000, kDevice, 10).Pop(3, 10);
  plain.Exit(4, 0).LauncherExit(0, 0);
  auto untagged = Load(WriteTempFile("no_categories." + std::to_string(getpid()) + ".cmtrace",
                                     FileBytes(plain.Chunks())));
  ASSERT_NE(untagged, nullptr);
  std::ostringstream viz;
  WriteMemoryVizSnapshot(*untagged, 0, viz);
  EXPECT_EQ(Unpickle(viz.str()).at("device_traces").at(0).at(1).at("category"), "load");
}

// Phases inferred from a program without NVTX (the calling thread runs forward and the
// optimizer, an autograd worker the backward pass) say so in the exports' categories, and
// NVTX phases keep "nvtx".
TEST(InferredPhases, AreMarkedInTheChromeAndPerfettoCategories) {
  testing::StreamBuilder s(1, 10);
  for (const auto& [tid, name] : {std::pair<uint32_t, const char*>{10, "python3"}, {11, "pt_autograd_0"}}) {
    v1::Event e;
    e.mutable_thread_name()->set_thread_id(tid);
    e.mutable_thread_name()->set_name(name);
    s.Raw(e);
  }
  s.Alloc(1, 0, 0x1000, 100 << 20, testing::kDevice, 10);  // weights
  uint64_t t = 100;
  for (uint64_t k = 0; k < 4; ++k, t += 100) {
    const uint64_t act = 0x10000 + k * 0x1000, grad = 0x30000 + k * 0x1000;
    s.Alloc(t + 1, 0, act, 10 << 20, testing::kDevice, 10);  // forward
    s.Alloc(t + 4, 0, grad, 5 << 20, testing::kDevice, 11);  // backward
    s.Free(t + 5, 0, act, 10 << 20, testing::kDevice, 11);
    s.Alloc(t + 6, 0, 0x40000 + k * 0x1000, 2 << 20, testing::kDevice, 10);  // optimizer
    s.Free(t + 7, 0, 0x40000 + k * 0x1000, 2 << 20, testing::kDevice, 10);
    s.Free(t + 8, 0, grad, 5 << 20, testing::kDevice, 10);  // zero_grad
  }
  s.Flush();
  const std::string path =
      testing::WriteTempFile("inferred.cmtrace", testing::FileBytes(s.Chunks()));
  auto trace = Load(path);
  ASSERT_NE(trace, nullptr);
  ASSERT_TRUE(trace->report->processes.at(0).phase_inference.applied)
      << trace->report->processes.at(0).phase_inference.reason;

  std::ostringstream chrome;
  WriteChromeTrace(*trace, chrome);
  std::map<std::string, std::set<std::string>> categories;  // phase -> categories
  const json doc = json::parse(chrome.str());
  for (const json& e : doc.at("traceEvents")) {
    if (e.at("ph") != "X" || e.at("cat") == "kernel" || e.at("cat") == "gap") continue;
    categories[e.at("name").get<std::string>()].insert(e.at("cat").get<std::string>());
  }
  for (const char* phase : {"forward", "backward", "optimizer"}) {
    EXPECT_EQ(categories[phase], std::set<std::string>{"inferred_phase"}) << phase;
  }

  std::ostringstream perfetto;
  WritePerfettoTrace(*trace, perfetto);
  PerfettoCheck c = DecodePerfetto(perfetto.str());
  uint64_t inferred = 0, begins = 0;
  for (const pp::TracePacket& packet : c.trace.packet()) {
    if (!packet.has_track_event()) continue;
    const pp::TrackEvent& e = packet.track_event();
    if (e.type() != pp::TrackEvent::TYPE_SLICE_BEGIN) continue;
    ++begins;
    for (const std::string& cat : e.categories()) inferred += cat == "inferred_phase";
  }
  EXPECT_EQ(begins, trace->timelines[0].ranges.size() + trace->timelines[0].kernels.size());
  EXPECT_EQ(inferred, trace->timelines[0].ranges.size());
  EXPECT_GE(inferred, 12u);  // forward, backward and optimizer in each of 4 iterations

  // A program with NVTX phases keeps "nvtx".
  auto golden = Load(Golden("torch_async"));
  std::ostringstream golden_chrome;
  WriteChromeTrace(*golden, golden_chrome);
  const json golden_doc = json::parse(golden_chrome.str());
  uint64_t nvtx = 0;
  for (const json& e : golden_doc.at("traceEvents")) {
    EXPECT_NE(e.value("cat", ""), "inferred_phase");
    nvtx += e.value("cat", "") == "nvtx";
  }
  EXPECT_GT(nvtx, 0u);
}

// A range named "<!--<script>" once made report.html render empty: inside <script>, "<!--"
// followed by "<script" makes the parser take the rest of the page as script text.
TEST(ViewerExport, HostileNamesStayInsideTheDataScript) {
  const std::string hostile[] = {"<!--<script>", "</script><b>x</b>", "a-->b",
                                 "line\xe2\x80\xa8" "sep\xe2\x80\xa9" "end", "&amp;<\\/"};
  StreamBuilder s(1, 4242);
  s.Device(0, "GPU-A", 1000000);
  uint32_t id = 1;
  uint64_t ts = 100;
  for (const std::string& name : hostile) {
    s.String(id, name);
    s.Push(ts, 11, id).Alloc(ts + 1, 0, 0x1000 * id, 100, kDevice, 11).Pop(ts + 2, 11);
    ++id;
    ts += 10;
  }
  s.Exit(ts, 0).LauncherExit(0, 0);
  const std::string path = WriteTempFile("viewer_hostile." + std::to_string(getpid()) + ".cmtrace",
                                         FileBytes(s.Chunks()));
  std::unique_ptr<AnalyzedTrace> trace = Load(path);
  ASSERT_NE(trace, nullptr);
  const std::string data = EmbeddedPageData(*trace);
  ASSERT_FALSE(data.empty());
  for (const char* bad : {"<", ">", "&", "\xe2\x80\xa8", "\xe2\x80\xa9"}) {
    EXPECT_EQ(data.find(bad), std::string::npos) << bad;
  }
  // The same JSON: every name comes back as a phase.
  const json parsed = json::parse(data);
  std::set<std::string> phases;
  for (const json& p : parsed["processes"][0]["phase_names"]) phases.insert(p.get<std::string>());
  for (const std::string& name : hostile) EXPECT_EQ(phases.count(name), 1u) << name;
  EXPECT_EQ(json::parse(EscapeJsonForScript(json(hostile[0]).dump())), hostile[0]);
}

// PyTorch's allocator through the bridge: one 2 MiB segment with tensors at its start and
// 0x1000 in (the one at 0x400 freed), cuBLAS's own 4 MiB, and a 20 MiB segment given back.
TEST(MemoryVizExport, BridgedSegmentsHoldRealBlocks) {
  StreamBuilder s(1, 4242);
  s.handshake().set_allocator_mode("native");
  s.handshake().mutable_clock_pair()->set_monotonic_ns(1);
  s.handshake().mutable_clock_pair()->set_realtime_ns(1'700'000'000'000'000'000);
  s.String(1, "cuMemAlloc_v2").String(2, "libc10_cuda.so").String(3, "libcublasLt.so.13");
  s.Device(0, "GPU", 85899345920ull).Flush();
  v1::Event state;
  state.set_timestamp_ns(5);
  state.mutable_torch_bridge()->set_attached(true);
  s.Raw(state);
  uint64_t sequence = 0;
  uint64_t total = 0;  // the allocator's cumulative allocated counter
  auto torch = [&](uint64_t ts, v1::TorchAllocatorAction action, uint64_t address,
                   uint64_t requested) {
    v1::Event e;
    e.set_timestamp_ns(ts);
    v1::TorchAllocatorEvent* t = e.mutable_torch_allocator();
    t->set_action(action);
    t->set_sequence(++sequence);
    t->set_address(address);
    t->set_requested_bytes(requested);
    t->set_allocated_bytes_total(total);
    s.Raw(e);
  };
  const uint64_t base = 0x7f0000000000;
  s.Alloc(10, 0, base, 2 << 20, kDevice, 7, 1, 2);
  torch(11, v1::TORCH_ALLOCATOR_ACTION_ALLOC, base, 1000);
  total += 1024;
  torch(12, v1::TORCH_ALLOCATOR_ACTION_ALLOC, base + 0x400, 3000);
  total += 3072;
  torch(13, v1::TORCH_ALLOCATOR_ACTION_ALLOC, base + 0x1000, 512);
  total += 512;
  torch(14, v1::TORCH_ALLOCATOR_ACTION_FREE_REQUESTED, base + 0x400, 3000);
  s.Alloc(15, 0, 0x9000000, 4 << 20, kDevice, 8, 1, 3);
  s.Alloc(16, 0, base + (2 << 20), 20 << 20, kDevice, 7, 1, 2);
  s.Free(17, 0, base + (2 << 20), 20 << 20);
  s.Exit(20, 0).Flush();
  const std::string path = WriteTempFile("bridged.cmtrace", FileBytes(s.Chunks()));
  auto trace = Load(path);
  ASSERT_NE(trace, nullptr);
  std::ostringstream out;
  WriteMemoryVizSnapshot(*trace, 0, out);
  const json v = Unpickle(out.str());
  // Python's pickle and check_memory_viz.py's replay: blocks inside live segments, the
  // device's peak replayed from the blocks.
  const std::string check = std::string("'") + CUMEMTRACE_MEMORY_VIZ_CHECK + "' '" +
                            CUMEMTRACE_BIN + "' '" + path + "' '" + path + ".viz'";
  EXPECT_EQ(std::system(check.c_str()), 0) << check;
  std::map<uint64_t, json> segments;
  for (const json& segment : v.at("segments")) segments[segment.at("address")] = segment;
  ASSERT_EQ(segments.size(), 2u);  // the 2 MiB segment and cuBLAS's memory
  const json& seg = segments.at(base);
  EXPECT_EQ(seg["total_size"], 2 << 20);
  EXPECT_EQ(seg["allocated_size"], 1024 + 512);
  std::vector<std::tuple<uint64_t, uint64_t, std::string>> blocks;
  for (const json& b : seg["blocks"]) blocks.emplace_back(b["address"], b["size"], b["state"]);
  EXPECT_EQ(blocks, (std::vector<std::tuple<uint64_t, uint64_t, std::string>>{
                        {base, 1024, "active_allocated"},
                        {base + 0x400, 0xC00, "inactive"},
                        {base + 0x1000, 512, "active_allocated"},
                        {base + 0x1200, (2 << 20) - 0x1200, "inactive"}}));
  EXPECT_EQ(segments.at(0x9000000)["blocks"][0]["state"], "active_allocated");
  std::vector<std::string> actions;
  for (const json& e : v.at("device_traces").at(0)) actions.push_back(e.at("action"));
  EXPECT_EQ(actions, (std::vector<std::string>{
                         "segment_alloc", "alloc", "alloc", "alloc", "free_requested",
                         "free_completed", "segment_alloc", "alloc", "segment_alloc",
                         "segment_free"}));
}


// ---- stacks (`run --stacks`) ----------------------------------------------------------

// A trace with a stack table: two allocations from the model's forward (through torch's
// Linear), one from main, one with a native stack of a module not on this machine, and one
// without a stack.
std::string StackTrace(bool oom = false) {
  StreamBuilder s(1, 4343);
  s.String(1, "/home/ada/model/train.py").String(2, "Model.forward").String(3, "main")
      .String(4, "/venv/lib/python3.12/site-packages/torch/nn/modules/linear.py")
      .String(5, "Linear.forward").Device(0, "GPU", 1 << 30);
  auto frame = [&](uint32_t id, uint32_t function, uint32_t file, uint32_t line) {
    v1::Event e;
    v1::StackFrame* f = e.mutable_stack_frame();
    f->set_id(id);
    f->set_kind(v1::STACK_FRAME_KIND_PYTHON);
    f->set_function_name_id(function);
    f->set_file_name_id(file);
    f->set_line(line);
    s.Raw(e);
  };
  auto stack = [&](uint32_t id, std::vector<uint32_t> frames) {
    v1::Event e;
    e.mutable_stack()->set_id(id);
    for (uint32_t f : frames) e.mutable_stack()->add_frame_ids(f);
    s.Raw(e);
  };
  auto alloc = [&](uint64_t ts, uint64_t address, uint64_t bytes, uint32_t stack_id) {
    v1::Event e;
    e.set_timestamp_ns(ts);
    v1::MemoryOp* m = e.mutable_memory();
    m->set_operation(v1::MEMORY_OPERATION_ALLOCATE);
    m->set_address(address);
    m->set_bytes(bytes);
    m->set_kind(v1::MEMORY_KIND_DEVICE);
    m->set_stack_id(stack_id);
    s.Raw(e);
  };
  frame(1, 5, 4, 125);  // innermost: torch's Linear.forward
  frame(2, 2, 1, 42);   // the model's forward: the user's line
  frame(3, 3, 1, 50);
  v1::Event module;
  module.mutable_native_module()->set_id(1);
  module.mutable_native_module()->set_path("/nonexistent/libgone.so");
  s.Raw(module);
  v1::Event native;
  native.mutable_stack_frame()->set_id(4);
  native.mutable_stack_frame()->set_kind(v1::STACK_FRAME_KIND_NATIVE);
  native.mutable_stack_frame()->set_pc(0x1234);
  native.mutable_stack_frame()->set_module_id(1);
  s.Raw(native);
  stack(1, {1, 2, 3});
  stack(2, {3});
  stack(3, {4});
  alloc(100, 0x10000, 600, 1);
  alloc(110, 0x20000, 200, 1);
  alloc(120, 0x30000, 300, 2);
  alloc(130, 0x40000, 100, 3);
  alloc(140, 0x50000, 5000, 0);
  // With `oom`: a cudaMalloc of 1 MiB fails while all five are live.
  if (oom) s.String(6, "cudaMalloc").Failed(145, 0, 0, 1 << 20, 2, 6, 0, 4096, 1 << 30);
  s.Free(150, 0, 0x50000, 5000).Free(160, 0, 0x20000, 200);
  s.Exit(200, 0).LauncherExit(0, 0);
  const std::string name = std::string("stacks.") + (oom ? "oom." : "") + std::to_string(getpid());
  return WriteTempFile(name + ".cmtrace", FileBytes(s.Chunks()));
}

// An out-of-memory's largest holders carry the user's frame of the stack that made each.
TEST(Stacks, TheLargestHoldersAtAnOutOfMemoryNameTheirUserFrame) {
  auto trace = Load(StackTrace(/*oom=*/true));
  ASSERT_NE(trace, nullptr);
  const auto& failures = trace->report->processes.at(0).failed_allocations;
  ASSERT_EQ(failures.size(), 1u);
  const OomPostMortem& pm = failures[0].post_mortem;
  EXPECT_EQ(pm.held_bytes, 6200u);
  ASSERT_EQ(pm.largest_held.size(), 5u);
  const std::vector<std::pair<uint64_t, std::string>> expected = {
      {5000, ""},
      {600, "/home/ada/model/train.py:42 in Model.forward"},
      {300, "/home/ada/model/train.py:50 in main"},
      {200, "/home/ada/model/train.py:42 in Model.forward"},
      {100, "/nonexistent/libgone.so in 0x1234"}};
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(pm.largest_held[i].bytes, expected[i].first) << i;
    EXPECT_EQ(pm.largest_held[i].stack, expected[i].second) << i;
  }
  EXPECT_EQ(pm.largest_held[1].address, 0x10000u);
  EXPECT_EQ(pm.largest_held[1].time_ns, 0u);  // the first event
  EXPECT_FALSE(pm.categories_given);  // no training phase, no tag
  const json summary = json::parse(SummaryJson(*trace->report));
  const json& largest =
      summary["processes"][0]["failed_allocations"][0]["post_mortem"]["largest_held"];
  ASSERT_EQ(largest.size(), 5u);
  EXPECT_EQ(largest[0]["stack"], nullptr);
  EXPECT_EQ(largest[1]["stack"], "/home/ada/model/train.py:42 in Model.forward");
  EXPECT_EQ(largest[1]["category"], nullptr);
  std::ostringstream text;
  PrintSummaryText(*trace->report, text);
  EXPECT_NE(text.str().find("largest held then:"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("  /home/ada/model/train.py:50 in main\n"), std::string::npos)
      << text.str();
}

TEST(Stacks, SummaryListsTheTopStacksAtThePeakByTheirUserFrame) {
  auto trace = Load(StackTrace());
  ASSERT_NE(trace, nullptr);
  const DeviceReport& d = trace->report->processes.at(0).devices.at(0);
  EXPECT_EQ(d.peak.bytes, 6200u);
  ASSERT_EQ(d.peak.top_stacks.size(), 3u);  // the 5000 B block has no stack
  EXPECT_EQ(d.peak.top_stacks[0].bytes, 800u);
  EXPECT_EQ(d.peak.top_stacks[0].count, 2u);
  EXPECT_EQ(d.peak.top_stacks[0].frame, "/home/ada/model/train.py:42 in Model.forward");
  EXPECT_EQ(d.peak.top_stacks[1].bytes, 300u);
  EXPECT_EQ(d.peak.top_stacks[1].frame, "/home/ada/model/train.py:50 in main");
  EXPECT_EQ(d.peak.top_stacks[2].bytes, 100u);
  EXPECT_EQ(d.peak.top_stacks[2].frame, "/nonexistent/libgone.so in 0x1234");
  const json summary = json::parse(SummaryJson(*trace->report));
  const json& top = summary["processes"][0]["devices"][0]["peak"]["top_stacks"];
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0]["bytes"], 800);
  EXPECT_EQ(top[0]["count"], 2);
  EXPECT_EQ(top[0]["frame"], "/home/ada/model/train.py:42 in Model.forward");
  std::ostringstream text_out;
  PrintSummaryText(*trace->report, text_out);
  const std::string text = text_out.str();
  EXPECT_NE(text.find("top stacks at peak:"), std::string::npos) << text;
  EXPECT_NE(text.find("/home/ada/model/train.py:42 in Model.forward"), std::string::npos) << text;
}

TEST(Stacks, MemoryVizBlocksAndAllocEntriesCarryTheFrames) {
  auto trace = Load(StackTrace());
  ASSERT_NE(trace, nullptr);
  std::ostringstream out;
  WriteMemoryVizSnapshot(*trace, 0, out);
  const json v = Unpickle(out.str());
  std::map<uint64_t, json> segments;
  for (const json& segment : v.at("segments")) segments[segment.at("address")] = segment;
  const json expected_frames = json::parse(R"([
    {"filename": "/venv/lib/python3.12/site-packages/torch/nn/modules/linear.py", "line": 125,
     "name": "Linear.forward"},
    {"filename": "/home/ada/model/train.py", "line": 42, "name": "Model.forward"},
    {"filename": "/home/ada/model/train.py", "line": 50, "name": "main"}])");
  EXPECT_EQ(segments.at(0x10000)["frames"], expected_frames);
  EXPECT_EQ(segments.at(0x10000)["blocks"][0]["frames"], expected_frames);
  EXPECT_EQ(segments.at(0x40000)["blocks"][0]["frames"],
            json::parse(R"([{"filename": "/nonexistent/libgone.so", "line": 0,
                             "name": "0x1234"}])"));
  bool saw_alloc = false, saw_free = false;
  for (const json& e : v.at("device_traces").at(0)) {
    if (e["addr"] == 0x20000 && e["action"] == "alloc") {
      saw_alloc = true;
      EXPECT_EQ(e["frames"], expected_frames);
    }
    if (e["addr"] == 0x20000 && e["action"] == "free_requested") {
      saw_free = true;
      EXPECT_TRUE(e["frames"].empty());  // frees have no stack of their own
    }
  }
  EXPECT_TRUE(saw_alloc);
  EXPECT_TRUE(saw_free);
}

std::string Base64Decode(const std::string& b64) {
  std::string bytes;
  uint32_t buffer = 0;
  int bits = 0;
  for (char c : b64) {
    const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    const char* at = strchr(alphabet, c);
    if (c == '=' || at == nullptr) break;
    buffer = (buffer << 6) | static_cast<uint32_t>(at - alphabet);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      bytes.push_back(static_cast<char>((buffer >> bits) & 0xFF));
    }
  }
  return bytes;
}

std::vector<int32_t> Int32Column(const std::string& b64) {
  const std::string bytes = Base64Decode(b64);
  std::vector<int32_t> values(bytes.size() / 4);
  memcpy(values.data(), bytes.data(), values.size() * 4);
  return values;
}

TEST(Stacks, PageDataHasTheStackTableAndAStackColumn) {
  auto trace = Load(StackTrace());
  ASSERT_NE(trace, nullptr);
  const std::string embedded = EmbeddedPageData(*trace);
  ASSERT_FALSE(embedded.empty());
  const json data = json::parse(embedded);
  const json& process = data["processes"][0];
  const json& frames = process.at("stacks").at("frames");
  const json& stacks = process.at("stacks").at("stacks");
  const json& allocations = process["devices"][0]["allocations"];
  const std::vector<int32_t> column = Int32Column(allocations.at("stack"));
  ASSERT_EQ(column.size(), allocations["n"].get<size_t>());
  // Allocations in birth order: 600, 200, 300, 100 with stacks, 5000 without.
  ASSERT_EQ(column.size(), 5u);
  EXPECT_EQ(column[4], -1);
  EXPECT_EQ(column[0], column[1]);
  auto frame_text = [&](int32_t stack, size_t i) {
    const size_t f = stacks.at(static_cast<size_t>(stack)).at(i);
    return frames["file"][f].get<std::string>() + ":" + std::to_string(frames["line"][f].get<int>()) +
           " " + frames["function"][f].get<std::string>() + " " + frames["kind"][f].get<std::string>();
  };
  ASSERT_GE(column[0], 0);
  ASSERT_EQ(stacks.at(static_cast<size_t>(column[0])).size(), 3u);
  EXPECT_EQ(frame_text(column[0], 0),
            "/venv/lib/python3.12/site-packages/torch/nn/modules/linear.py:125 Linear.forward python");
  EXPECT_EQ(frame_text(column[0], 1), "/home/ada/model/train.py:42 Model.forward python");
  EXPECT_EQ(frame_text(column[2], 0), "/home/ada/model/train.py:50 main python");
  EXPECT_EQ(frame_text(column[3], 0), "/nonexistent/libgone.so:0 0x1234 native");
  // Without stacks, neither the table nor the column.
  auto plain = Load(SyntheticTrace());
  ASSERT_NE(plain, nullptr);
  const json plain_data = json::parse(EmbeddedPageData(*plain));
  EXPECT_FALSE(plain_data["processes"][0].contains("stacks"));
  EXPECT_FALSE(plain_data["processes"][0]["devices"][0]["allocations"].contains("stack"));
}

// A tensor's stack as the tracer records it: the tracer's hook, the PyTorch bridge, CUPTI (a
// frame of it in the middle, as a callback nested in another), PyTorch's allocator, then its
// caller and the program's Python frames. The outputs show from the caller on.
TEST(Stacks, NoOutputShowsTheTracersCuptisOrTheAllocatorsFrames) {
  StreamBuilder s(1, 4343);
  s.String(1, "/home/ada/model/train.py").String(2, "main").Device(0, "GPU", 1 << 30);
  const std::vector<std::string> modules = {
      "/opt/cumemtrace/lib/cumemtrace/libcumemtrace-tracer.so",
      "/home/ada/.cache/cumemtrace/bridges/libcumemtrace-torch-bridge-2.5.1.so",
      "/venv/lib/python3.12/site-packages/torch/lib/libc10_cuda.so",
      "/venv/lib/python3.12/site-packages/torch/lib/libtorch_cpu.so",
      "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13"};
  for (size_t m = 0; m < modules.size(); ++m) {
    v1::Event e;
    e.mutable_native_module()->set_id(static_cast<uint32_t>(m + 1));
    e.mutable_native_module()->set_path(modules[m]);
    s.Raw(e);
  }
  // Frames 1..7, innermost first: tracer, bridge, c10_cuda, c10_cuda, torch_cpu, cupti,
  // torch_cpu; then the Python frame 8.
  const std::vector<uint32_t> module_of = {1, 2, 3, 3, 4, 5, 4};
  for (size_t f = 0; f < module_of.size(); ++f) {
    v1::Event e;
    v1::StackFrame* frame = e.mutable_stack_frame();
    frame->set_id(static_cast<uint32_t>(f + 1));
    frame->set_kind(v1::STACK_FRAME_KIND_NATIVE);
    frame->set_pc(0x1000 * (f + 1));
    frame->set_module_id(module_of[f]);
    s.Raw(e);
  }
  v1::Event python;
  python.mutable_stack_frame()->set_id(8);
  python.mutable_stack_frame()->set_kind(v1::STACK_FRAME_KIND_PYTHON);
  python.mutable_stack_frame()->set_function_name_id(2);
  python.mutable_stack_frame()->set_file_name_id(1);
  python.mutable_stack_frame()->set_line(7);
  s.Raw(python);
  v1::Event stack;
  stack.mutable_stack()->set_id(1);
  for (uint32_t f = 1; f <= 8; ++f) stack.mutable_stack()->add_frame_ids(f);
  s.Raw(stack);
  v1::Event alloc;
  alloc.set_timestamp_ns(100);
  v1::MemoryOp* m = alloc.mutable_memory();
  m->set_operation(v1::MEMORY_OPERATION_ALLOCATE);
  m->set_address(0x10000);
  m->set_bytes(4096);
  m->set_kind(v1::MEMORY_KIND_DEVICE);
  m->set_stack_id(1);
  s.Raw(alloc);
  s.Exit(200, 0).LauncherExit(0, 0);
  auto trace = Load(WriteTempFile("observer_frames." + std::to_string(getpid()) + ".cmtrace",
                                  FileBytes(s.Chunks())));
  ASSERT_NE(trace, nullptr);
  const std::string caller = "/venv/lib/python3.12/site-packages/torch/lib/libtorch_cpu.so";
  // memory_viz: the block's frames are the caller, the other torch_cpu frame, then main.
  std::ostringstream viz;
  WriteMemoryVizSnapshot(*trace, 0, viz);
  const json v = Unpickle(viz.str());
  const json& frames = v.at("segments").at(0).at("blocks").at(0).at("frames");
  ASSERT_EQ(frames.size(), 3u) << frames.dump();
  EXPECT_EQ(frames[0]["filename"], caller);
  EXPECT_EQ(frames[0]["name"], "0x5000");
  EXPECT_EQ(frames[1]["name"], "0x7000");
  EXPECT_EQ(frames[2]["name"], "main");
  // The page's table (the flame graph and the stack panel read it): no such frame at all,
  // and the report's own line names the program.
  const json data = json::parse(EmbeddedPageData(*trace));
  const json& table = data["processes"][0].at("stacks");
  ASSERT_EQ(table.at("stacks").size(), 1u);
  EXPECT_EQ(table["stacks"][0].size(), 3u);
  for (const json& name : table.at("frames").at("file")) {
    const std::string file = name;
    EXPECT_EQ(file.find("libcumemtrace"), std::string::npos) << file;
    EXPECT_EQ(file.find("libcupti"), std::string::npos) << file;
    EXPECT_EQ(file.find("libc10_cuda"), std::string::npos) << file;
  }
  EXPECT_EQ(trace->report->processes.at(0).devices.at(0).peak.top_stacks.at(0).frame,
            "/home/ada/model/train.py:7 in main");
}

// `export --at oom`: PyTorch's snapshot of the instant of the OOM, not of the trace's end. A
// 512 MiB segment holds eight 64 MiB tensors, every other one freed; after the OOM everything
// is freed and a new segment comes. Python's pickle and check_memory_viz.py --at-oom replay
// it, and its largest inactive block is the post-mortem's largest free block.
TEST(MemoryVizExport, AtOomIsTheStateOfThatInstant) {
  using cumemtrace::testing::kMiB;
  constexpr uint64_t kSeg = 0x7f0000000000;
  FakeAllocator a;
  a.Segment(kSeg, 512 * kMiB);
  for (uint64_t i = 0; i < 8; ++i) a.Alloc(kSeg + i * 64 * kMiB, 64 * kMiB);
  for (uint64_t i = 1; i < 8; i += 2) a.Free(kSeg + i * 64 * kMiB);
  a.Oom(128 * kMiB, 40 * kMiB);
  for (uint64_t i = 0; i < 8; i += 2) a.Free(kSeg + i * 64 * kMiB);
  a.Segment(kSeg + 1024 * kMiB, 20 * kMiB).Alloc(kSeg + 1024 * kMiB, 4 * kMiB);
  const std::string path = WriteTempFile("at_oom.cmtrace", FileBytes(a.Chunks()));
  auto trace = Load(path);
  ASSERT_NE(trace, nullptr);
  uint64_t at_ns = 0;
  ASSERT_TRUE(FirstOutOfMemory(trace->report->processes.at(0), &at_ns));
  std::ostringstream out;
  WriteMemoryVizSnapshotAt(*trace, 0, at_ns, out);
  const json v = Unpickle(out.str());
  ASSERT_EQ(v.at("segments").size(), 1u);  // the later segment is not there yet
  const json& seg = v.at("segments")[0];
  EXPECT_EQ(seg["address"], kSeg);
  EXPECT_EQ(seg["allocated_size"], 256 * kMiB);
  ASSERT_EQ(seg["blocks"].size(), 8u);
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(seg["blocks"][i]["state"], i % 2 == 0 ? "active_allocated" : "inactive") << i;
  }
  const json& entries = v.at("device_traces").at(0);
  std::string last;
  for (const json& e : entries) {
    if (e.at("action") != "snapshot") last = e.at("action");
  }
  EXPECT_EQ(last, "oom");
  const std::string check = std::string("'") + CUMEMTRACE_MEMORY_VIZ_CHECK + "' '" +
                            CUMEMTRACE_BIN + "' '" + path + "' '" + path + ".viz' oom";
  EXPECT_EQ(std::system(check.c_str()), 0) << check;
}

// ---- modules and operators (`run --modules`, `--ops`) ---------------------------------------

// Tensors of the PyTorch bridge with attribution: one forward block in encoder.fc1 under
// aten::linear (inner aten::addmm), one backward block of the same autograd node (its module
// from the forward op; inner aten::mm), one block without attribution; with `unlinked`, then a
// backward block whose forward op allocated nothing.
std::string AttributionTrace(bool unlinked = false) {
  StreamBuilder s(1, 4444);
  s.Device(0, "GPU", 1 << 30).Flush();
  v1::Event state;
  state.set_timestamp_ns(5);
  state.mutable_torch_bridge()->set_attached(true);
  s.Raw(state);
  auto name = [&](v1::AttributionKind kind, uint32_t id, const std::string& text) {
    v1::Event e;
    e.mutable_attribution_name()->set_kind(kind);
    e.mutable_attribution_name()->set_id(id);
    e.mutable_attribution_name()->set_name(text);
    s.Raw(e);
  };
  name(v1::ATTRIBUTION_KIND_MODULE, 1, "encoder.fc1");
  name(v1::ATTRIBUTION_KIND_OPERATOR, 1, "aten::linear");
  name(v1::ATTRIBUTION_KIND_OPERATOR, 2, "AddmmBackward0");
  name(v1::ATTRIBUTION_KIND_OPERATOR, 3, "aten::addmm");
  name(v1::ATTRIBUTION_KIND_OPERATOR, 4, "aten::mm");
  name(v1::ATTRIBUTION_KIND_OPERATOR, 5, "ViewBackward0");
  uint64_t total = 0, sequence = 0;
  auto alloc = [&](uint64_t ts, uint64_t address, uint64_t block, uint32_t module, uint32_t op,
                   bool backward, uint32_t inner = 0, uint64_t autograd_sequence = 7) {
    v1::Event e;
    e.set_timestamp_ns(ts);
    v1::TorchAllocatorEvent* t = e.mutable_torch_allocator();
    t->set_action(v1::TORCH_ALLOCATOR_ACTION_ALLOC);
    t->set_sequence(++sequence);
    t->set_address(address);
    t->set_requested_bytes(block - 100);
    t->set_allocated_bytes_total(total);
    t->set_allocated_bytes_current(total);
    t->set_module_id(module);
    t->set_operator_id(op);
    t->set_inner_operator_id(inner);
    t->set_autograd_sequence(op != 0 ? autograd_sequence : 0);
    t->set_autograd_thread(op != 0 ? 11 : 0);
    t->set_backward(backward);
    total += block;
    s.Raw(e);
  };
  alloc(100, 0x10000, 4096, 1, 1, false, 3);
  alloc(110, 0x20000, 8192, 0, 2, true, 4);
  alloc(120, 0x30000, 1024, 0, 0, false);
  if (unlinked) alloc(125, 0x40000, 2048, 0, 5, true, 0, 9);
  v1::Event probe;
  probe.set_timestamp_ns(130);
  probe.mutable_torch_allocator()->set_action(v1::TORCH_ALLOCATOR_ACTION_STATS_PROBE);
  probe.mutable_torch_allocator()->set_sequence(sequence);
  probe.mutable_torch_allocator()->set_allocated_bytes_total(total);
  probe.mutable_torch_allocator()->set_allocated_bytes_current(total);
  s.Raw(probe);
  s.Exit(200, 0).LauncherExit(0, 0);
  return WriteTempFile("attribution" + std::string(unlinked ? ".unlinked." : ".") +
                           std::to_string(getpid()) + ".cmtrace",
                       FileBytes(s.Chunks()));
}

TEST(Attribution, MemoryVizAllocEntriesCarryModuleAndOperator) {
  auto trace = Load(AttributionTrace());
  ASSERT_NE(trace, nullptr);
  std::ostringstream out;
  WriteMemoryVizSnapshot(*trace, 0, out);
  const json v = Unpickle(out.str());
  std::map<uint64_t, json> allocs;
  for (const json& e : v.at("device_traces").at(0)) {
    if (e["action"] == "alloc") allocs[e["addr"].get<uint64_t>()] = e;
  }
  ASSERT_EQ(allocs.size(), 3u);
  EXPECT_EQ(allocs[0x10000]["frames"],
            json::parse(R"([{"filename": "encoder.fc1", "line": 0, "name": "aten::linear"}])"));
  EXPECT_EQ(allocs[0x20000]["frames"], json::parse(R"([{"filename": "encoder.fc1", "line": 0,
                             "name": "backward: AddmmBackward0"}])"));
  EXPECT_TRUE(allocs[0x30000]["frames"].empty());
}

// Each allocation's attribution in the page data as its names: the allocation column
// "attribution" indexes the process' "attributions", whose columns index its "strings".
struct PageAttribution {
  std::string module, op, inner_op, forward_op;
  int backward = -1;
  uint32_t entry = 0;
};
std::vector<PageAttribution> PageAttributions(const json& process, const json& device) {
  const std::vector<int32_t> column = Int32Column(device["allocations"].at("attribution"));
  EXPECT_EQ(column.size(), device["allocations"]["n"].get<size_t>());
  const json& table = process.at("attributions");
  const json& strings = process.at("strings");
  auto text = [&](const char* key, uint32_t entry) {
    return strings.at(table.at(key).at(entry).get<size_t>()).get<std::string>();
  };
  std::vector<PageAttribution> out;
  for (const int32_t id : column) {
    const auto entry = static_cast<uint32_t>(id);
    EXPECT_LT(entry, table.at("n").get<uint32_t>());
    PageAttribution a;
    a.entry = entry;
    a.module = text("module", entry);
    a.op = text("operator", entry);
    a.inner_op = text("inner_operator", entry);
    a.forward_op = text("forward_operator", entry);
    a.backward = table.at("backward").at(entry).get<int>();
    out.push_back(a);
  }
  return out;
}

TEST(Attribution, PageDataHasEachAllocationsModuleAndOperators) {
  auto trace = Load(AttributionTrace());
  ASSERT_NE(trace, nullptr);
  const json data = json::parse(EmbeddedPageData(*trace));
  const json& process = data["processes"][0];
  const json& device = process["devices"][0];
  const std::vector<PageAttribution> a = PageAttributions(process, device);
  ASSERT_EQ(a.size(), 3u);  // in birth order
  EXPECT_EQ(a[0].module, "encoder.fc1");
  EXPECT_EQ(a[0].op, "aten::linear");
  EXPECT_EQ(a[1].module, "encoder.fc1");  // from its forward op
  EXPECT_EQ(a[1].op, "AddmmBackward0");
  EXPECT_EQ(a[2].entry, 0u);  // none
  EXPECT_EQ(a[2].module, "");
  EXPECT_EQ(a[2].op, "");
  // Entry 0 is none, whatever the allocations.
  const json& table = process["attributions"];
  for (const char* key : {"module", "operator", "inner_operator", "backward", "forward_operator"}) {
    ASSERT_EQ(table.at(key).size(), table["n"].get<size_t>()) << key;
    EXPECT_EQ(table[key][0], 0) << key;
  }
  const json& by_module = device.at("attribution").at("by_module");
  ASSERT_FALSE(by_module.empty());
  EXPECT_EQ(by_module[0]["module"], "encoder");
  EXPECT_EQ(by_module[0]["bytes"], 4096 + 8192);
  // Without attribution, neither the column nor the table.
  auto plain = Load(SyntheticTrace());
  ASSERT_NE(plain, nullptr);
  const json plain_data = json::parse(EmbeddedPageData(*plain));
  EXPECT_FALSE(plain_data["processes"][0]["devices"][0]["allocations"].contains("attribution"));
  EXPECT_FALSE(plain_data["processes"][0].contains("attributions"));
  EXPECT_FALSE(plain_data["processes"][0]["devices"][0].contains("attribution"));
}

// The flame graph by operator: each tensor's inner operator, and a backward tensor's forward
// op when linked (none when unlinked, and for a forward tensor); each distinct attribution is
// one entry of the table, each name one string.
TEST(Attribution, PageDataHasInnerAndForwardOperators) {
  auto trace = Load(AttributionTrace(/*unlinked=*/true));
  ASSERT_NE(trace, nullptr);
  const json data = json::parse(EmbeddedPageData(*trace));
  const json& process = data["processes"][0];
  const std::vector<PageAttribution> a = PageAttributions(process, process["devices"][0]);
  ASSERT_EQ(a.size(), 4u);
  EXPECT_EQ(a[0].inner_op, "aten::addmm");
  EXPECT_EQ(a[0].forward_op, "");  // a forward tensor
  EXPECT_EQ(a[0].backward, 0);
  EXPECT_EQ(a[1].op, "AddmmBackward0");
  EXPECT_EQ(a[1].inner_op, "aten::mm");
  EXPECT_EQ(a[1].forward_op, "aten::linear");  // linked to the forward op of sequence 7
  EXPECT_EQ(a[1].backward, 1);
  EXPECT_EQ(a[2].entry, 0u);
  EXPECT_EQ(a[3].op, "ViewBackward0");
  EXPECT_EQ(a[3].inner_op, "");
  EXPECT_EQ(a[3].forward_op, "");         // its forward op allocated nothing: not linked
  EXPECT_EQ(a[3].module, "encoder.fc1");  // the guess from the op before it
  EXPECT_EQ(a[3].backward, 1);
  // None and the three distinct attributions; each name once in the strings.
  EXPECT_EQ(process["attributions"]["n"], 4);
  std::set<std::string> seen;
  for (const json& s : process["strings"])
    EXPECT_TRUE(seen.insert(s.get<std::string>()).second) << s;
}

}  // namespace
}  // namespace cumemtrace::testing

namespace cumemtrace {
namespace {

// Records the tracer lost are shown as explicit gaps in the exported timeline and the text.
TEST(DropGaps, AppearInTheChromeTimelineAndTheTextReport) {
  testing::StreamBuilder s(1, 77);
  s.Alloc(1000, 0, 0x10, 64, testing::kDevice, 77)
      .Dropped(v1::DROP_SOURCE_TRACER_QUEUE, 1234, 5000, 9000)
      .Alloc(20000, 0, 0x20, 64, testing::kDevice, 77)
      .Flush();
  const std::string path =
      testing::WriteTempFile("drops.cmtrace", testing::FileBytes(s.Chunks()));
  std::string error;
  auto trace = Analyze({path, {}}, testing::Exact(), &error);
  ASSERT_NE(trace, nullptr) << error;
  std::ostringstream chrome;
  WriteChromeTrace(*trace, chrome);
  int gaps = 0;
  const nlohmann::json doc = nlohmann::json::parse(chrome.str());  // outlives the loop
  for (const nlohmann::json& e : doc.at("traceEvents")) {
    if (!e.contains("cat") || e.at("cat") != "gap") continue;
    ++gaps;
    EXPECT_EQ(e.at("name"), "records dropped (tracer_queue)");
    EXPECT_EQ(e.at("args").at("count"), 1234);
    EXPECT_DOUBLE_EQ(e.at("dur").get<double>(), 4.0);  // 5000..9000 ns = 4 us
  }
  EXPECT_EQ(gaps, 1);
  std::ostringstream text;
  PrintSummaryText(*trace->report, text);
  EXPECT_NE(text.str().find("gap: 1,234 records from"), std::string::npos) << text.str();
}

}  // namespace
}  // namespace cumemtrace
