// Analyze (engine.h): one analysis (trace_analysis.h) in the mode the options ask for:
// `report` orders events through a reorder window and keeps only the live set and what was
// live at the peak; exports and the lifetime rows sort every event and keep every
// allocation.
#include <algorithm>
#include <functional>
#include <utility>

#include "collector/engine/job_summary.h"
#include "collector/engine/stream_decoder.h"
#include "collector/engine/trace_analysis.h"
#include "collector/format/trace_file.h"

namespace cumemtrace {
namespace internal {
namespace {

// A stream that ended while its process still ran, without the tracer's exit record, was
// cut by the program: it closed the tracer's descriptor (daemons, shells, close_range), and
// the tracer stopped recording when it noticed. Unless the same pid opened a later stream
// (an exec: the new image's tracer goes on), the process is incomplete and the summary says
// what is there.
void SayWhereTheProgramClosedItsConnection(Report* report) {
  for (ProcessReport& p : report->processes) {
    if (!p.closed_while_running) continue;
    const bool exec = std::any_of(
        report->processes.begin(), report->processes.end(), [&p](const ProcessReport& q) {
          return q.has_handshake && q.pid == p.pid && q.stream_id > p.stream_id;
        });
    if (exec) {
      p.closed_while_running = false;
      continue;
    }
    p.complete = false;
    p.incomplete_reasons.push_back(
        // The daemon writes each stream to a file of its own: an exec's next stream may not
        // be in this trace.
        "the program closed the tracer's connection while it ran (or exec'd, and the new "
        "program's stream is not in this trace); " +
        std::to_string(p.ring_records_recovered) +
        " records were recovered from its shared ring, and nothing it did after is in the "
        "trace (the tracer stops recording there)");
  }
}

// kSweep: the accountant (first read, or again sorted); kBursts, kGradients: passes 2 and 3
// of the inference; kFinal: the accountant with the inferred ranges; kClassify, kCategories:
// the two category passes (accountant.h CategoryPass), for a process with categories.
enum class Stage { kSweep, kBursts, kGradients, kFinal, kClassify, kCategories, kDone };

// One process: its order, what consumes it, and where its passes stand.
struct Process {
  Stage stage = Stage::kSweep;
  bool sorted = false;
  size_t index = 0;  // in the report's processes
  uint64_t events = 0;
  bool batch_before_handshake = false;
  StreamingStats stats;
  PhaseInferenceReport outcome;
  std::vector<Burst> bursts;
  uint64_t forward_start = 0;
  std::vector<uint64_t> optimizer_end;
  std::unique_ptr<Accountant> accountant;
  std::unique_ptr<BurstScan> bursts_scan;
  std::unique_ptr<GradientScan> gradient_scan;
  std::unique_ptr<EventOrder> order;
  bool inferred = false;  // the last accounting sweep had inferred ranges (kFinal)
  // The last accounting sweep's accountant, for the category passes, and their one byte per
  // device allocation.
  std::unique_ptr<Accountant> previous;
  std::vector<uint8_t> categories;
};

class TraceAnalysis {
 public:
  TraceAnalysis(const AnalysisOptions& options, Mode mode, const StreamingOptions& streaming)
      : options_(options),
        mode_(mode),
        streaming_(streaming),
        rules_(options.phase_rules ? options.phase_rules.get() : &DefaultRules()),
        trace_(std::make_unique<AnalyzedTrace>()) {
    trace_->report = std::make_unique<Report>();
  }

  static const PhaseRules& DefaultRules() {
    static const PhaseRules rules = PhaseRules::Defaults();
    return rules;
  }

  void AddChunk(const v1::TraceChunk& chunk) {
    if (in_pass_ && Pass(chunk.stream_id()) == nullptr) return;
    decoder_->AddChunk(chunk);
    TakeEvents(chunk.stream_id());
  }

  void AddWireFrame(uint32_t stream_id, std::string_view frame) {
    if (in_pass_ && Pass(stream_id) == nullptr) return;
    decoder_->AddWireFrame(stream_id, frame);
    TakeEvents(stream_id);
  }

  void MarkTruncated(const std::string& reason) {
    if (in_pass_) return;  // the first read said so already
    Report& r = *trace_->report;
    // The first reason is the cause; anything after it follows from it.
    if (!r.truncated) r.truncation_reason = reason;
    r.truncated = true;
  }

  // After the first read: a report entry per stream, final unless the process needs passes.
  void EndFirstRead(std::map<uint32_t, StreamingStats>* stats) {
    for (auto& [stream_id, stream] : decoder_->streams()) {
      Process& p = Get(stream_id, stream);
      p.index = trace_->report->processes.size();
      trace_->report->processes.emplace_back().stream_id = stream_id;
      if (mode_.retention == Retention::kKeepAll) trace_->timelines.emplace_back();
      if (!p.sorted && p.batch_before_handshake && stream.realtime_offset_ns != 0) {
        // Its early events were not shifted onto CLOCK_REALTIME: read again, sorted (rare
        // enough not to be streamed).
        p.sorted = true;
      } else {
        EndStage(p, stream);
      }
      if (stats != nullptr) (*stats)[stream_id] = p.stats;
      stream = DecodedStream();  // its events are swept; free the rest
    }
  }

  bool NeedsPass() const {
    return std::any_of(processes_.begin(), processes_.end(),
                       [](const auto& p) { return p.second->stage != Stage::kDone; });
  }

  void BeginPass() {
    in_pass_ = true;
    decoder_ = std::make_unique<StreamDecoder>();
    for (auto& [id, p] : processes_) {
      if (p->stage == Stage::kDone) continue;
      p->events = 0;
      Start(*p, decoder_->streams()[id]);
    }
  }

  void EndPass() {
    for (auto& [id, p] : processes_) {
      if (p->stage != Stage::kDone) EndStage(*p, decoder_->streams()[id]);
    }
    decoder_ = std::make_unique<StreamDecoder>();
    in_pass_ = false;
  }

  std::unique_ptr<AnalyzedTrace> Take() {
    SayWhereTheProgramClosedItsConnection(trace_->report.get());
    AddJobSummary(trace_->report.get());
    return std::move(trace_);
  }

 private:
  // What consumes the events of p's stage, and the order that feeds it.
  void Start(Process& p, DecodedStream& s) {
    if (p.stage == Stage::kBursts) {
      p.bursts_scan = std::make_unique<BurstScan>(p.outcome);
      p.order = MakeOrder(p.sorted, streaming_, p.bursts_scan.get(), &p.stats);
    } else if (p.stage == Stage::kGradients) {
      p.gradient_scan = std::make_unique<GradientScan>(p.outcome, p.bursts);
      p.order = MakeOrder(p.sorted, streaming_, p.gradient_scan.get(), &p.stats);
    } else {
      const bool category_pass = p.stage == Stage::kClassify || p.stage == Stage::kCategories;
      const bool final = p.stage == Stage::kFinal || (category_pass && p.inferred);
      if (final) AddInferredNames(&s);
      // The category passes keep only the live set: they add figures, not rows.
      p.accountant = std::make_unique<Accountant>(
          options_, category_pass ? Retention::kLiveAndPeak : mode_.retention, rules_, &s,
          &p.stats);
      if (final) {
        // A category pass makes the same ranges again: the outcome's counts stand.
        PhaseInferenceReport again = p.outcome;
        PhaseInferenceReport* outcome = category_pass ? &again : &p.outcome;
        std::vector<Event> ranges =
            InferredRanges(p.bursts, p.optimizer_end, p.forward_start, outcome);
        p.accountant->SetInferred(p.outcome, std::move(ranges));
        p.inferred = true;
      }
      if (category_pass) {
        p.accountant->SetCategoryPass(
            p.stage == Stage::kClassify ? CategoryPass::kClassify : CategoryPass::kApply,
            p.previous.get(), &p.categories);
      }
      p.order = OrderFor(p.sorted, streaming_, p.accountant.get(), &p.stats);
    }
  }

  Process& Get(uint32_t stream_id, DecodedStream& s) {
    std::unique_ptr<Process>& p = processes_[stream_id];
    if (p == nullptr) {
      p = std::make_unique<Process>();
      p->sorted = mode_.sorted;
      Start(*p, s);
    }
    return *p;
  }

  // The process being read again, or null when it is done.
  Process* Pass(uint32_t stream_id) {
    auto it = processes_.find(stream_id);
    if (it == processes_.end() || it->second->stage == Stage::kDone) return nullptr;
    return it->second.get();
  }

  // Moves what the last chunk decoded into the stream's order.
  void TakeEvents(uint32_t stream_id) {
    auto it = decoder_->streams().find(stream_id);
    if (it == decoder_->streams().end() || it->second.events.empty()) return;
    DecodedStream& s = it->second;
    Process& p = in_pass_ ? *Pass(stream_id) : Get(stream_id, s);
    if (!s.has_handshake) p.batch_before_handshake = true;
    p.events += s.events.size();
    p.order->AddEvents(s, s.events);
  }

  // The read of a stage ended: its result, and the next stage.
  void EndStage(Process& p, DecodedStream& s) {
    p.order->DrainAll(s);
    ProcessReport& report = trace_->report->processes[p.index];
    switch (p.stage) {
      case Stage::kSweep:
      case Stage::kFinal: {
        ProcessTimeline* timeline = nullptr;
        if (mode_.retention == Retention::kKeepAll) {
          timeline = &trace_->timelines[p.index];
          *timeline = ProcessTimeline();
        }
        report = p.accountant->Finish(s, p.events, p.order->late_events(), timeline);
        const bool infer = p.stage == Stage::kSweep && p.accountant->needs_inference();
        if (infer) p.outcome = p.accountant->inference();
        if (infer) {
          p.stage = Stage::kBursts;
        } else if (p.accountant->categories_given()) {
          p.previous = std::move(p.accountant);
          p.previous->KeepOnlyClassifier();
          p.stage = Stage::kClassify;
        } else {
          p.stage = Stage::kDone;
        }
        break;
      }
      case Stage::kClassify:
        p.accountant->EndClassify();
        p.stage = Stage::kCategories;
        break;
      case Stage::kCategories:
        p.accountant->FillCategories(s, &report);
        p.previous.reset();
        std::vector<uint8_t>().swap(p.categories);
        p.stage = Stage::kDone;
        break;
      case Stage::kBursts:
        p.bursts = p.bursts_scan->Finish(&p.outcome);
        p.forward_start = p.bursts_scan->forward_start();
        if (p.bursts.empty()) {
          // Not applied after all: the first sweep's report stands, with the reason.
          report.phase_inference = p.outcome;
          p.stage = Stage::kDone;
        } else {
          p.stage = p.outcome.signal == "memory" ? Stage::kGradients : Stage::kFinal;
        }
        break;
      case Stage::kGradients:
        p.optimizer_end = p.gradient_scan->optimizer_end();
        p.stage = Stage::kFinal;
        break;
      case Stage::kDone:
        break;
    }
    p.order.reset();
    p.accountant.reset();
    p.bursts_scan.reset();
    p.gradient_scan.reset();
  }

  const AnalysisOptions options_;
  const Mode mode_;
  const StreamingOptions streaming_;
  const PhaseRules* rules_;
  std::unique_ptr<StreamDecoder> decoder_ = std::make_unique<StreamDecoder>();
  std::map<uint32_t, std::unique_ptr<Process>> processes_;
  bool in_pass_ = false;
  std::unique_ptr<AnalyzedTrace> trace_;
};

// Every chunk of `reader` (opened) into `analysis`, saying how far it is to `progress` (pass
// `pass`) when there is one.
void ReadChunks(TraceFileReader& reader, TraceAnalysis& analysis, const AnalysisOptions& options,
                int pass) {
  v1::TraceChunk chunk;
  bool is_wire = false;
  uint32_t stream_id = 0;
  std::string_view wire_frame;
  constexpr uint64_t kProgressStep = uint64_t{4} << 20;
  uint64_t next_progress = kProgressStep;
  if (options.progress) options.progress(pass, 0, reader.file_bytes());  // the pass starts
  using Result = TraceFileReader::Result;
  Result result;
  while ((result = reader.NextView(&chunk, &is_wire, &stream_id, &wire_frame)) == Result::kChunk) {
    if (is_wire) {
      analysis.AddWireFrame(stream_id, wire_frame);
    } else {
      analysis.AddChunk(chunk);
    }
    if (options.progress && reader.consumed_bytes() >= next_progress) {
      options.progress(pass, reader.consumed_bytes(), reader.file_bytes());
      next_progress = reader.consumed_bytes() + kProgressStep;
    }
  }
  // Cut short or damaged: the reader says how and where.
  if (result == Result::kTruncated || result == Result::kError) {
    analysis.MarkTruncated(reader.error());
  }
  if (options.progress) options.progress(pass, reader.file_bytes(), reader.file_bytes());
}

// The analysis of what `open` opens, read as often as the passes need.
std::unique_ptr<AnalyzedTrace> Analyze(const std::function<bool(TraceFileReader*)>& open,
                                       const AnalysisOptions& options, Mode mode,
                                       const StreamingOptions& streaming,
                                       std::map<uint32_t, StreamingStats>* stats,
                                       std::string* error) {
  TraceFileReader reader;
  if (!open(&reader)) {
    if (error != nullptr) *error = reader.error();
    return nullptr;
  }
  TraceAnalysis analysis(options, mode, streaming);
  ReadChunks(reader, analysis, options, 1);
  analysis.EndFirstRead(stats);
  for (int pass = 2; analysis.NeedsPass(); ++pass) {
    TraceFileReader again;
    if (!open(&again)) break;
    analysis.BeginPass();
    ReadChunks(again, analysis, options, pass);
    analysis.EndPass();
  }
  return analysis.Take();
}

}  // namespace

std::unique_ptr<AnalyzedTrace> AnalyzeBytes(std::string_view bytes, const AnalysisOptions& options,
                                            Mode mode, const StreamingOptions& streaming,
                                            std::map<uint32_t, StreamingStats>* stats,
                                            std::string* error) {
  return Analyze([bytes](TraceFileReader* r) { return r->OpenBytes(bytes, "the trace"); }, options,
                 mode, streaming, stats, error);
}

}  // namespace internal

std::unique_ptr<AnalyzedTrace> Analyze(const TraceSource& source, const AnalysisOptions& options,
                                       std::string* error) {
  internal::Mode mode{options.sorted, internal::Retention::kLiveAndPeak};
  if (options.timelines || options.keep_lifetimes) mode.retention = internal::Retention::kKeepAll;
  // One row per allocation: the output is as large as the trace anyway.
  if (options.keep_lifetimes && !options.timelines) mode.sorted = true;
  if (!source.path.empty()) {
    auto trace = internal::Analyze([&source](TraceFileReader* r) { return r->Open(source.path); },
                                   options, mode, internal::StreamingOptions(), nullptr, error);
    if (trace != nullptr) trace->report->trace_file = source.path;
    return trace;
  }
  return internal::AnalyzeBytes(source.bytes, options, mode, internal::StreamingOptions(), nullptr,
                                error);
}

}  // namespace cumemtrace
