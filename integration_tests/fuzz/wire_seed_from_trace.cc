// Makes wire_stream_fuzzer seeds from a recorded trace: the wire frames of one stream, as
// the tracer sent them, preceded by the fuzzer's read-size byte. Only the first frames up
// to a byte budget are kept (small seeds fuzz faster).
//   wire_seed_from_trace TRACE STREAM_ID MAX_BYTES READ_SIZE_BYTE OUT
#include <cstdio>
#include <cstdlib>
#include <string>

#include "collector/format/framing.h"
#include "collector/format/trace_file.h"

int main(int argc, char** argv) {
  using namespace cumemtrace;
  if (argc != 6) {
    fprintf(stderr, "usage: %s TRACE STREAM_ID MAX_BYTES READ_SIZE_BYTE OUT\n", argv[0]);
    return 2;
  }
  const uint32_t stream_id = static_cast<uint32_t>(strtoul(argv[2], nullptr, 10));
  const size_t max_bytes = strtoul(argv[3], nullptr, 10);
  TraceFileReader reader;
  if (!reader.Open(argv[1])) {
    fprintf(stderr, "%s\n", reader.error().c_str());
    return 1;
  }
  std::string out(1, static_cast<char>(strtoul(argv[4], nullptr, 10)));
  v1::TraceChunk chunk;
  while (reader.Next(&chunk) == TraceFileReader::Result::kChunk) {
    if (chunk.stream_id() != stream_id || chunk.content_case() != v1::TraceChunk::kWireFrame) {
      continue;
    }
    std::string framed;
    AppendFrame(chunk.wire_frame(), &framed);
    if (out.size() + framed.size() > max_bytes && out.size() > 1) break;
    out += framed;
  }
  FILE* f = fopen(argv[5], "wb");
  if (f == nullptr || fwrite(out.data(), 1, out.size(), f) != out.size() || fclose(f) != 0) {
    perror(argv[5]);
    return 1;
  }
  return 0;
}
