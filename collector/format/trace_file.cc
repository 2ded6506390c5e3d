#include "collector/format/trace_file.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "collector/format/varint.h"

namespace cumemtrace {
namespace {

constexpr char kPreamble[8] = {'C', 'M', 'T', 'R', 'A', 'C', 'E',
                               static_cast<char>(v1::FILE_FORMAT_VERSION)};

// Reads a chunk's bytes as { stream_id = 1; wire_frame = 2 } and nothing else (the layout
// AppendWireFrameChunk writes); false for anything else, which protobuf then parses.
bool ParseWireFrameChunk(std::string_view chunk, uint32_t* stream_id,
                         std::string_view* wire_frame) {
  const auto* p = reinterpret_cast<const uint8_t*>(chunk.data());
  const uint8_t* end = p + chunk.size();
  *stream_id = 0;
  if (p != end && *p == 0x08) {
    ++p;
    uint64_t id = 0;
    if (!ReadVarint(&p, end, &id) || id > 0xffffffffu) return false;
    *stream_id = static_cast<uint32_t>(id);
  }
  if (p == end || *p != 0x12) return false;
  ++p;
  uint64_t size = 0;
  if (!ReadVarint(&p, end, &size) || size != static_cast<uint64_t>(end - p)) return false;
  *wire_frame = std::string_view(reinterpret_cast<const char*>(p), static_cast<size_t>(size));
  return true;
}

}  // namespace

std::string_view TraceFilePreamble() { return std::string_view(kPreamble, sizeof(kPreamble)); }

void AppendChunk(const v1::TraceChunk& chunk, std::string* out) {
  AppendFrame(chunk.SerializeAsString(), out);
}

void AppendWireFrameChunk(uint32_t stream_id, std::string_view wire_frame, std::string* out) {
  // TraceChunk { stream_id = 1 (varint); wire_frame = 2 (bytes) }, encoded by hand so the
  // frame is copied once; the layout is pinned by a test against the generated parser.
  const size_t body = 1 + VarintSize(stream_id) + 1 + VarintSize(wire_frame.size()) +
                      wire_frame.size();
  AppendVarint(body, out);
  out->push_back(static_cast<char>(0x08));  // field 1, varint
  AppendVarint(stream_id, out);
  out->push_back(static_cast<char>(0x12));  // field 2, length-delimited
  AppendVarint(wire_frame.size(), out);
  out->append(wire_frame.data(), wire_frame.size());
}

TraceFileReader::~TraceFileReader() {
  if (file_ != nullptr) fclose(file_);
}

bool TraceFileReader::Open(const std::string& path) {
  file_ = fopen(path.c_str(), "rb");
  if (file_ == nullptr) {
    error_ = "cannot open " + path + ": " + strerror(errno);
    return false;
  }
  struct stat st {};
  if (fstat(fileno(file_), &st) == 0) {
    if (S_ISDIR(st.st_mode)) {
      error_ = path + " is a directory, not a trace file";
      return false;
    }
    file_bytes_ = static_cast<uint64_t>(st.st_size);
  }
  char preamble[sizeof(kPreamble)];
  return CheckPreamble(std::string_view(preamble, fread(preamble, 1, sizeof(kPreamble), file_)),
                       path);
}

bool TraceFileReader::OpenBytes(std::string_view bytes, const std::string& name) {
  file_bytes_ = bytes.size();
  if (!CheckPreamble(bytes.substr(0, sizeof(kPreamble)), name)) return false;
  decoder_.UseBytes(bytes.substr(sizeof(kPreamble)));
  eof_ = true;
  return true;
}

bool TraceFileReader::CheckPreamble(std::string_view preamble, const std::string& path) {
  const size_t got = preamble.size();
  if (got < 7 || memcmp(preamble.data(), kPreamble, 7) != 0) {
    error_ = path + " is not a cumemtrace trace file (no CMTRACE preamble)";
    return false;
  }
  if (got < sizeof(kPreamble) || preamble[7] != kPreamble[7]) {
    error_ = path + ": unsupported trace file format version " +
             (got < sizeof(kPreamble) ? std::string("(missing)")
                                     : std::to_string(static_cast<unsigned char>(preamble[7]))) +
             " (this cumemtrace reads version " + std::to_string(v1::FILE_FORMAT_VERSION) + ")";
    return false;
  }
  return true;
}

uint64_t TraceFileReader::consumed_bytes() const {
  return sizeof(kPreamble) + decoder_.consumed_bytes();
}

TraceFileReader::Result TraceFileReader::NextView(v1::TraceChunk* chunk, bool* is_wire,
                                                  uint32_t* stream_id,
                                                  std::string_view* wire_frame) {
  if (!error_.empty()) return Result::kError;
  if (is_wire != nullptr) *is_wire = false;
  for (;;) {
    std::string_view frame;
    switch (decoder_.Next(&frame)) {
      case FrameDecoder::Status::kFrame:
        if (is_wire != nullptr && ParseWireFrameChunk(frame, stream_id, wire_frame)) {
          *is_wire = true;
          return Result::kChunk;
        }
        if (!chunk->ParseFromArray(frame.data(), static_cast<int>(frame.size()))) {
          error_ = "corrupt chunk at byte " + std::to_string(consumed_bytes() - frame.size());
          return Result::kError;
        }
        return Result::kChunk;
      case FrameDecoder::Status::kError:
        error_ = "corrupt trace file at byte " + std::to_string(consumed_bytes()) + ": " +
                 decoder_.error();
        return Result::kError;
      case FrameDecoder::Status::kNeedMore:
        break;
    }
    if (eof_) return decoder_.pending_bytes() == 0 ? Result::kEnd : Result::kTruncated;
    char block[1 << 16];
    const size_t got = fread(block, 1, sizeof(block), file_);
    if (got == 0) {
      if (ferror(file_)) {
        error_ = std::string("read error: ") + strerror(errno);
        return Result::kError;
      }
      eof_ = true;
    }
    decoder_.Append(block, got);
  }
}

}  // namespace cumemtrace
