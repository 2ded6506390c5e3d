// libFuzzer target for what the collector reads from a traced process's per-thread buffers
// when its stream ends (collector/cli/thread_buffer_reader.h): every byte of the area was
// written by the process, which may have died halfway through any of them.
//
// Beyond "no crash, no hang": every event read is one a unit could say (a valid allocator
// action, never an autograd node, from a slot's own thread), attributions stand beside the
// events one for one and only on ALLOCs, no more units are read than the slots hold, reading
// in slices gives the events of reading at once, and the frames made from the memory file
// parse back, are numbered on from the sequence given and carry those same events.
//
// Input: how to read (1 byte: bit 0 in slices of (byte >> 1) % 7 + 1 events, bit 1 from a
// memory file), the received positions of slots 0 and 1 (8 bytes each), then the area's
// header (112 bytes), its first 4 slots (192 bytes each), and the units, which start at the
// first 4096-byte boundary as they do for up to 20 slots.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "collector/cli/thread_buffer_reader.h"
#include "cumemtrace/v1/trace.pb.h"
#include "proto/cumemtrace/v1/thread_buffers.h"

namespace {

using namespace cumemtrace;
namespace tb = v1::thread_buffers;

constexpr size_t kPrefix = 17;
constexpr size_t kTableSlots = 4;
constexpr uint64_t kUnitsAt = 4096;
constexpr uint64_t kFileOffset = 4096;  // where the area starts in the memory file
constexpr uint64_t kSequence = 7;

uint64_t U64(const uint8_t* p) {
  uint64_t v = 0;
  memcpy(&v, p, sizeof(v));
  return v;
}

bool SameRecord(const v1::ring::TorchRecord& a, const v1::ring::TorchRecord& b) {
  return memcmp(&a, &b, sizeof(a)) == 0;
}

// The events of the memory file's frames, in order, or abort.
std::vector<v1::TorchAllocatorEvent> FromMemoryFile(
    const std::vector<unsigned char>& area, const std::unordered_map<uint32_t, uint64_t>& received,
    std::vector<uint64_t>* times) {
  const int fd = memfd_create("thread-buffers-fuzz", MFD_CLOEXEC);
  if (fd < 0) abort();  // the machine, not the input
  if (ftruncate(fd, static_cast<off_t>(kFileOffset + area.size())) != 0 ||
      pwrite(fd, area.data(), area.size(), kFileOffset) != static_cast<ssize_t>(area.size())) {
    abort();
  }
  std::vector<std::string> frames;
  {
    ThreadBufferRecovery recovery(fd, kFileOffset, area.size(), received, kSequence);
    // A budget of no time: one batch of events per call, as the collector's slices.
    uint64_t calls = 0;
    while (!recovery.Continue(0, &frames)) {
      if (++calls > area.size() / tb::kUnitBytes + 1) abort();
    }
  }
  close(fd);
  std::vector<v1::TorchAllocatorEvent> events;
  uint64_t sequence = kSequence;
  for (const std::string& frame : frames) {
    v1::StreamMessage message;
    if (!message.ParseFromString(frame) || !message.has_batch()) abort();
    if (message.batch().sequence() != sequence++ || message.batch().events_size() == 0) abort();
    for (const v1::Event& event : message.batch().events()) {
      if (!event.has_torch_allocator()) abort();
      events.push_back(event.torch_allocator());
      times->push_back(event.timestamp_ns());
    }
  }
  return events;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* input, size_t size) {
  if (size < kPrefix + sizeof(tb::Header)) return 0;
  const uint8_t how = input[0];
  const std::unordered_map<uint32_t, uint64_t> received = {{0, U64(input + 1)},
                                                           {1, U64(input + 9)}};
  const uint8_t* rest = input + kPrefix;
  size_t rest_size = size - kPrefix;

  // The area: header, up to 4 slots, units at 4096.
  const size_t table_bytes =
      std::min(rest_size - sizeof(tb::Header), kTableSlots * sizeof(tb::Slot));
  const size_t unit_bytes = rest_size - sizeof(tb::Header) - table_bytes;
  std::vector<unsigned char> area(kUnitsAt + unit_bytes, 0);
  memcpy(area.data(), rest, sizeof(tb::Header));
  memcpy(area.data() + tb::kSlotTableOffset, rest + sizeof(tb::Header), table_bytes);
  memcpy(area.data() + kUnitsAt, rest + sizeof(tb::Header) + table_bytes, unit_bytes);

  tb::Header header;
  memcpy(&header, area.data(), sizeof(header));
  // What the walk may read at the most: every unit of every slot the area can hold.
  const uint64_t most_units = unit_bytes / tb::kUnitBytes;
  std::unordered_set<uint32_t> threads;
  for (uint32_t slot = 0; slot < std::min<uint32_t>(header.slot_count, tb::kMaxSlots); ++slot) {
    const uint64_t at = tb::kSlotTableOffset + uint64_t{slot} * sizeof(tb::Slot);
    if (at + sizeof(tb::Slot) > area.size()) break;
    tb::Slot s;
    memcpy(&s, area.data() + at, sizeof(s));
    threads.insert(s.thread_id);
  }

  const ThreadBufferRead whole = ReadThreadBuffers(area.data(), area.size(), received);
  if (whole.events.size() != whole.attributions.size()) abort();
  if (whole.events.size() + whole.rejected > most_units) abort();
  for (size_t i = 0; i < whole.events.size(); ++i) {
    const v1::ring::TorchRecord& r = whole.events[i];
    const auto action = static_cast<v1::TorchAllocatorAction>(r.action);
    if (!v1::TorchAllocatorAction_IsValid(r.action) ||
        action == v1::TORCH_ALLOCATOR_ACTION_AUTOGRAD_NODE) {
      abort();
    }
    if (r.size != sizeof(r) || r.type != v1::ring::kTorchEvent || r.device > 0xff ||
        r.sequence > tb::kSequenceMask || threads.count(r.thread_id) == 0) {
      abort();
    }
    const v1::ring::TorchAttribution& a = whole.attributions[i];
    const bool alloc = action == v1::TORCH_ALLOCATOR_ACTION_ALLOC ||
                       action == v1::TORCH_ALLOCATOR_ACTION_ALLOC_ROUNDED;
    if (!alloc && (a.module | a.op | a.inner_op | a.autograd_thread | a.autograd_sequence) != 0) {
      abort();
    }
  }

  if (how & 1) {
    const size_t slice = (how >> 1) % 7 + 1;
    ThreadBufferRead sliced;
    ThreadBufferWalk walk(area.data(), area.size(), received);
    uint64_t calls = 0;
    while (walk.Next(slice, &sliced)) {
      if (++calls > whole.events.size() / slice + tb::kMaxSlots + 1) abort();
    }
    if (sliced.events.size() != whole.events.size() || sliced.rejected != whole.rejected) abort();
    for (size_t i = 0; i < whole.events.size(); ++i) {
      if (!SameRecord(sliced.events[i], whole.events[i])) abort();
    }
  }

  if (how & 2) {
    std::vector<uint64_t> times;
    const std::vector<v1::TorchAllocatorEvent> events = FromMemoryFile(area, received, &times);
    if (events.size() != whole.events.size()) abort();
    for (size_t i = 0; i < events.size(); ++i) {
      const v1::ring::TorchRecord& r = whole.events[i];
      if (times[i] != r.timestamp_ns || events[i].address() != r.address ||
          events[i].sequence() != r.sequence || events[i].thread_id() != r.thread_id) {
        abort();
      }
    }
  }
  return 0;
}
