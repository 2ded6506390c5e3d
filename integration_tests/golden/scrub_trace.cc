// Rewrites a trace so it can be checked in: command-line arguments that are absolute paths,
// and the path of PyTorch's allocator library, keep only their file name, and host names
// become "gpu-host". The frames that hold them are encoded again; every other chunk is copied
// unchanged, framed in the current format (checksums, the closing FileEnd).
//   golden_scrub_trace IN OUT
#include <cstdio>
#include <string>

#include "collector/format/trace_file.h"

namespace {

std::string Scrub(const std::string& arg) {
  if (arg.empty() || arg[0] != '/') return arg;
  return arg.substr(arg.rfind('/') + 1);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace cumemtrace;
  if (argc != 3) {
    fprintf(stderr, "usage: %s IN OUT\n", argv[0]);
    return 2;
  }
  TraceFileReader reader;
  if (!reader.Open(argv[1])) {
    fprintf(stderr, "%s\n", reader.error().c_str());
    return 1;
  }
  std::string out(TraceFilePreamble());
  v1::TraceChunk chunk;
  for (;;) {
    const TraceFileReader::Result result = reader.Next(&chunk);
    if (result != TraceFileReader::Result::kChunk) {
      if (result != TraceFileReader::Result::kEnd) fprintf(stderr, "%s\n", reader.error().c_str());
      break;
    }
    if (chunk.has_file_header()) chunk.mutable_file_header()->set_hostname("gpu-host");
    if (chunk.content_case() == v1::TraceChunk::kWireFrame) {
      v1::StreamMessage message;
      if (message.ParseFromString(chunk.wire_frame()) && message.has_handshake()) {
        v1::Handshake* hello = message.mutable_handshake();
        hello->set_hostname("gpu-host");
        for (std::string& arg : *hello->mutable_command_line()) arg = Scrub(arg);
        chunk.set_wire_frame(message.SerializeAsString());
      } else if (message.has_batch()) {
        bool changed = false;
        for (v1::Event& event : *message.mutable_batch()->mutable_events()) {
          if (!event.has_torch_bridge() || event.torch_bridge().library().empty()) continue;
          event.mutable_torch_bridge()->set_library(Scrub(event.torch_bridge().library()));
          changed = true;
        }
        if (changed) chunk.set_wire_frame(message.SerializeAsString());
      }
    }
    AppendChunk(chunk, &out);
  }
  AppendFileEnd(out.size(), &out);
  FILE* f = fopen(argv[2], "wb");
  if (f == nullptr || fwrite(out.data(), 1, out.size(), f) != out.size()) return 1;
  fclose(f);
  return 0;
}
