// libFuzzer target for what the collector runs on bytes from a socket: FrameDecoder with the
// wire limit, WireStreamValidator (handshake, then batches), and AppendWireFrameChunk into
// the trace file, exactly as CollectorServer::ReadFrom does. The bytes arrive in reads of
// a size taken from the input, because a socket splits frames anywhere.
//
// Beyond "no crash": the file bytes the collector would have written must read back as the
// very frames it accepted (nothing written is ever damaged by what comes later), and the
// engine must analyze that stream.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "collector/engine/engine.h"
#include "collector/format/framing.h"
#include "collector/format/trace_file.h"
#include "collector/format/wire_validator.h"
#include "collector/output/summary.h"
#include "cumemtrace/v1/trace.pb.h"

namespace {

using namespace cumemtrace;

constexpr uint32_t kStreamId = 1;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // First byte: the read size (1..256 bytes); the rest is what the peer sent.
  const size_t read_size = static_cast<size_t>(data[0]) + 1;
  const char* bytes = reinterpret_cast<const char*>(data + 1);
  const size_t length = size - 1;

  // As the collector does: a small first frame (the handshake), then full-size frames.
  FrameDecoder decoder(v1::MAX_HANDSHAKE_FRAME_BYTES);
  WireStreamValidator validator;
  std::string file;  // the chunks the collector would append for this stream
  std::vector<std::string> accepted;
  bool closed = false;
  for (size_t offset = 0; offset < length && !closed; offset += read_size) {
    decoder.Append(bytes + offset, std::min(read_size, length - offset));
    for (;;) {
      std::string_view frame;
      const FrameDecoder::Status status = decoder.Next(&frame);
      if (status == FrameDecoder::Status::kNeedMore) break;
      if (status == FrameDecoder::Status::kError) {
        if (decoder.error().empty()) abort();  // a refusal always says why
        closed = true;
        break;
      }
      std::string error;
      const WireStreamValidator::Verdict verdict = validator.Check(frame, &error);
      if (verdict == WireStreamValidator::Verdict::kRefused) {
        if (error.empty()) abort();
        closed = true;
        break;
      }
      if (verdict == WireStreamValidator::Verdict::kHandshake) {
        decoder.set_max_frame_bytes(v1::MAX_WIRE_FRAME_BYTES);
      }
      AppendWireFrameChunk(kStreamId, frame, &file);
      accepted.emplace_back(frame);
    }
  }

  // Read back what was written: every accepted frame, byte for byte, nothing else.
  FrameDecoder reread(v1::MAX_FILE_CHUNK_BYTES);
  reread.Append(file.data(), file.size());
  std::string trace(TraceFilePreamble());
  v1::TraceChunk chunk;
  size_t index = 0;
  for (std::string_view frame; reread.Next(&frame) == FrameDecoder::Status::kFrame; ++index) {
    if (!chunk.ParseFromArray(frame.data(), static_cast<int>(frame.size()))) abort();
    if (index >= accepted.size() || chunk.stream_id() != kStreamId ||
        chunk.wire_frame() != accepted[index]) {
      abort();
    }
    AppendChunk(chunk, &trace);
  }
  if (index != accepted.size() || reread.pending_bytes() != 0) abort();
  AppendFileEnd(trace.size(), &trace);

  AnalysisOptions sorted;
  sorted.sorted = true;
  std::unique_ptr<AnalyzedTrace> analyzed = Analyze({"", trace}, sorted, nullptr);
  if (analyzed == nullptr) abort();
  const Report* report = analyzed->report.get();
  std::ostringstream text;
  PrintSummaryText(*report, text);
  const std::string json = SummaryJson(*report);
  if (json.empty()) abort();
  return 0;
}
