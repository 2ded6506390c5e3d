// `cumemtrace merge`: several hosts' traces of one job into one trace file, for one job
// report and one exported timeline. Streams keep their bytes; only their ids are renumbered
// so that they stay apart. Hosts are put on one time base by the analysis (each stream's
// handshake carries a CLOCK_REALTIME/CLOCK_MONOTONIC pair).
#include <getopt.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "collector/cli/cli_support.h"
#include "collector/cli/commands.h"
#include "collector/cli/log.h"
#include "collector/cli/trace_summary.h"
#include "collector/format/trace_file.h"

#ifndef CUMEMTRACE_VERSION
#define CUMEMTRACE_VERSION "unknown"
#endif

namespace cumemtrace {
namespace {

constexpr char kMergeHelp[] = R"(Usage: cumemtrace merge -o OUT.cmtrace TRACE TRACE...

Combines the traces of one distributed job, written on several hosts (one `cumemtrace run`
or `cumemtrace daemon` per host), into one trace file. `cumemtrace report OUT.cmtrace` then
gives the job view (every rank's peak, the rank that peaks highest, the spread between
ranks, per-phase peaks per rank) and `cumemtrace export` one timeline, with the hosts put
on one time base through the clock pair each process sent when it connected (CLOCK_REALTIME:
the hosts' clocks must agree, as NTP or PTP keep them, to the precision you want to read).
TRACE is a .cmtrace file or an output folder of `cumemtrace run`. A cut input is merged up
to its last whole chunk, with a warning. The same trace given twice, or a process found in
two inputs (a copy), is refused: it would be counted twice.

Options:
  -o, --output=FILE   the merged trace (required; never replaced)
  -h, --help          show this help

Exit status: 0, 1 when an input cannot be read or the output cannot be written, 2 for bad
usage.
)";

uint64_t RealtimeNow() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace

int MergeCommand(int argc, char** argv) {
  static const option kOptions[] = {
      {"output", required_argument, nullptr, 'o'},
      {"help", no_argument, nullptr, 'h'},
      {nullptr, 0, nullptr, 0},
  };
  std::string output;
  opterr = 0;
  optind = 1;
  for (int opt; (opt = getopt_long(argc, argv, ":o:h", kOptions, nullptr)) != -1;) {
    switch (opt) {
      case 'o':
        if (*optarg == '\0') return EmptyValueError("merge", "--output");
        output = optarg;
        break;
      case 'h': fputs(kMergeHelp, stdout); return 0;
      case ':': return UsageError("merge", std::string("option '") + argv[optind - 1] +
                                               "' needs a value");
      default:
        return UsageError("merge", std::string("unknown option '") + argv[optind - 1] + "'");
    }
  }
  if (output.empty()) return UsageError("merge", "no output file (-o OUT.cmtrace)");
  if (argc - optind < 1) return UsageError("merge", "no traces to merge");
  if (PathExists(output)) return UsageError("merge", output + " already exists");

  std::string merged(TraceFilePreamble());
  {
    v1::TraceChunk header;
    header.set_stream_id(0);
    v1::FileHeader* h = header.mutable_file_header();
    h->set_writer_version(CUMEMTRACE_VERSION);
    h->set_created_realtime_ns(RealtimeNow());
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    h->set_hostname(std::string(host) + " (merge)");
    AppendChunk(header, &merged);
  }
  uint32_t next_stream = 1;
  size_t streams = 0;
  v1::TraceChunk chunk;
  std::vector<std::string> inputs;
  // A process is its host, pid and start time; the same one twice is a copy.
  std::map<std::tuple<std::string, uint32_t, uint64_t>, std::string> processes;
  for (int i = optind; i < argc; ++i) {
    std::string path = argv[i];
    std::string error;
    if (!ResolveTracePath(&path, &error)) {
      LogLine(error);
      return 1;
    }
    for (const std::string& earlier : inputs) {
      if (SameFile(earlier, path)) {
        return UsageError("merge", path + " is given twice (as " + earlier + ")");
      }
    }
    inputs.push_back(path);
    TraceFileReader reader;
    if (!reader.Open(path)) {
      LogLine(reader.error());
      return 1;
    }
    std::map<uint32_t, uint32_t> renumbered;  // this file's stream ids -> the merged file's
    for (bool done = false; !done;) {
      switch (reader.Next(&chunk)) {
        case TraceFileReader::Result::kChunk: {
          if (chunk.has_file_header()) break;  // the merged file has its own
          auto [it, added] = renumbered.emplace(chunk.stream_id(), next_stream);
          if (added) {
            ++next_stream;
            ++streams;
          }
          chunk.set_stream_id(it->second);
          if (chunk.content_case() == v1::TraceChunk::kWireFrame) {
            v1::StreamMessage message;
            if (message.ParseFromString(chunk.wire_frame()) && message.has_handshake()) {
              const v1::Handshake& h = message.handshake();
              const auto [seen, is_new] = processes.emplace(
                  std::make_tuple(h.hostname(), h.pid(), h.trace_start_ns()), path);
              if (!is_new && seen->second != path) {
                return UsageError("merge", "process " + std::to_string(h.pid()) + " of host " +
                                               h.hostname() + " is in both " + seen->second +
                                               " and " + path + "; merged twice, it would " +
                                               "count twice");
              }
            }
          }
          AppendChunk(chunk, &merged);
          break;
        }
        case TraceFileReader::Result::kEnd:
          done = true;
          break;
        case TraceFileReader::Result::kTruncated:
        case TraceFileReader::Result::kError:
          LogLine("warning: " + path + " ends early (" +
                  (reader.error().empty() ? std::string("inside a chunk") : reader.error()) +
                  "); merged up to there");
          done = true;
          break;
      }
    }
  }
  AppendFileEnd(merged.size(), &merged);
  std::string error;
  if (!WriteNewFile(output, merged, &error)) {
    LogLine(error + "; nothing was written");
    return 1;
  }
  LogLine("merged " + std::to_string(streams) + " streams from " + std::to_string(argc - optind) +
          " traces into " + output + " — see it with: cumemtrace report " + output);
  return 0;
}

}  // namespace cumemtrace
