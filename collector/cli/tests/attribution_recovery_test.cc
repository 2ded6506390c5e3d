// What was running when a tensor was born, read back from what a dead process left: its
// shared ring (layout 3: a TorchAttribution after a TorchRecord flagged kFlagAttribution, and
// kAttributionName records) and its per-thread buffers (layout 2: kAttribution units and the
// slot's attribution in effect at `freed`). Rings and buffers are written here by hand, as a
// tracer of each layout would.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "collector/cli/shared_ring_reader.h"
#include "collector/cli/thread_buffer_reader.h"
#include "cumemtrace/v1/trace.pb.h"
#include "proto/cumemtrace/v1/shared_ring.h"
#include "proto/cumemtrace/v1/thread_buffers.h"

namespace cumemtrace {
namespace {

namespace ring = v1::ring;
namespace tb = v1::thread_buffers;

constexpr uint64_t kCapacity = 4096;

// A ring's data area, record by record.
class RingWriter {
 public:
  explicit RingWriter(uint32_t layout) : layout_(layout) {}

  // A TorchRecord ALLOC, with an attribution after it when `attribution` is given; `cut`
  // leaves the attribution out while keeping the flag (a damaged record).
  RingWriter& Torch(uint64_t address, const ring::TorchAttribution* attribution, bool cut = false) {
    ring::TorchRecord r{};
    r.type = ring::kTorchEvent;
    r.action = v1::TORCH_ALLOCATOR_ACTION_ALLOC;
    r.thread_id = 77;
    r.timestamp_ns = ++ts_;
    r.address = address;
    r.requested_bytes = 4096;
    r.sequence = ++sequence_;
    std::string bytes(sizeof(r), '\0');
    if (attribution != nullptr) {
      r.flags = ring::kFlagAttribution;
      if (!cut) bytes.append(reinterpret_cast<const char*>(attribution), sizeof(*attribution));
    }
    r.size = static_cast<uint32_t>(bytes.size());
    memcpy(bytes.data(), &r, sizeof(r));
    data_ += bytes;
    return *this;
  }
  // A TorchRecord of action AUTOGRAD_NODE (layout 4 on): a forward op that allocated nothing,
  // its attribution after it unless `attribution` is null (a damaged record).
  RingWriter& Node(const ring::TorchAttribution* attribution) {
    ring::TorchRecord r{};
    r.type = ring::kTorchEvent;
    r.action = v1::TORCH_ALLOCATOR_ACTION_AUTOGRAD_NODE;
    r.thread_id = 78;
    r.timestamp_ns = ++ts_;
    std::string bytes(sizeof(r), '\0');
    if (attribution != nullptr) {
      r.flags = ring::kFlagAttribution;
      bytes.append(reinterpret_cast<const char*>(attribution), sizeof(*attribution));
    }
    r.size = static_cast<uint32_t>(bytes.size());
    memcpy(bytes.data(), &r, sizeof(r));
    data_ += bytes;
    return *this;
  }
  // A kAttributionName record.
  RingWriter& Name(uint32_t kind, uint64_t id, const std::string& name) {
    ring::Record r{};
    r.type = ring::kAttributionName;
    r.timestamp_ns = ++ts_;
    r.category = kind;
    r.range_id = id;
    r.text_bytes = static_cast<uint32_t>(name.size());
    std::string bytes(sizeof(r), '\0');
    bytes += name;
    bytes.resize((bytes.size() + 7) / 8 * 8, '\0');
    r.size = static_cast<uint32_t>(bytes.size());
    memcpy(bytes.data(), &r, sizeof(r));
    data_ += bytes;
    return *this;
  }

  // The sealed memfd, read from position 0: its events (interned strings left out).
  std::vector<v1::Event> Recover(SharedRingReader::Recovered* recovered) const {
    const int fd = memfd_create("ring-attribution", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    EXPECT_GE(fd, 0);
    ring::Header header{};
    header.magic = ring::kMagic;
    header.layout_version = layout_;
    header.capacity = kCapacity;
    header.write_position = data_.size();
    EXPECT_LE(data_.size(), kCapacity);
    EXPECT_EQ(ftruncate(fd, static_cast<off_t>(ring::kHeaderBytes + kCapacity)), 0);
    EXPECT_EQ(pwrite(fd, &header, sizeof(header), 0), static_cast<ssize_t>(sizeof(header)));
    EXPECT_EQ(pwrite(fd, data_.data(), data_.size(), ring::kHeaderBytes),
              static_cast<ssize_t>(data_.size()));
    EXPECT_EQ(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
    SharedRingReader reader;
    v1::SharedRing announced;
    announced.set_layout_version(layout_);
    announced.set_capacity(kCapacity);
    std::string error;
    EXPECT_TRUE(reader.Adopt(fd, announced, &error)) << error;
    std::vector<std::string> frames;
    *recovered = reader.Recover(0, 0, 1, &frames);
    std::vector<v1::Event> events;
    for (const std::string& frame : frames) {
      v1::StreamMessage message;
      EXPECT_TRUE(message.ParseFromString(frame));
      for (const v1::Event& e : message.batch().events()) {
        if (!e.has_interned_string()) events.push_back(e);
      }
    }
    return events;
  }

 private:
  uint32_t layout_;
  std::string data_;
  uint64_t ts_ = 1000;
  uint64_t sequence_ = 0;
};

ring::TorchAttribution Attribution(uint32_t module, uint32_t op, uint32_t inner_op, uint32_t thread,
                                   uint64_t sequence) {
  ring::TorchAttribution a{};
  a.module = module;
  a.op = op;
  a.inner_op = inner_op;
  a.autograd_thread = thread;
  a.autograd_sequence = sequence;
  return a;
}

TEST(RingAttribution, Layout3RecoversAttributionAndNames) {
  const ring::TorchAttribution forward = Attribution(3, 1, 2, 500, 11);
  const ring::TorchAttribution backward = Attribution(0, 4, 0, 500, 11 | ring::kBackwardBit);
  RingWriter w(3);
  w.Name(v1::ATTRIBUTION_KIND_MODULE, 3, "encoder.fc1")
      .Name(v1::ATTRIBUTION_KIND_OPERATOR, 1, "aten::linear");
  w.Torch(0x1000, &forward).Torch(0x2000, &backward).Torch(0x3000, nullptr);
  SharedRingReader::Recovered recovered;
  const std::vector<v1::Event> events = w.Recover(&recovered);
  EXPECT_EQ(recovered.skipped_records, 0u);
  ASSERT_EQ(events.size(), 5u);
  ASSERT_TRUE(events[0].has_attribution_name());
  EXPECT_EQ(events[0].attribution_name().kind(), v1::ATTRIBUTION_KIND_MODULE);
  EXPECT_EQ(events[0].attribution_name().id(), 3u);
  EXPECT_EQ(events[0].attribution_name().name(), "encoder.fc1");
  EXPECT_EQ(events[1].attribution_name().kind(), v1::ATTRIBUTION_KIND_OPERATOR);
  EXPECT_EQ(events[1].attribution_name().name(), "aten::linear");
  const v1::TorchAllocatorEvent& f = events[2].torch_allocator();
  EXPECT_EQ(f.address(), 0x1000u);
  EXPECT_EQ(f.module_id(), 3u);
  EXPECT_EQ(f.operator_id(), 1u);
  EXPECT_EQ(f.inner_operator_id(), 2u);
  EXPECT_EQ(f.autograd_thread(), 500u);
  EXPECT_EQ(f.autograd_sequence(), 11u);
  EXPECT_FALSE(f.backward());
  const v1::TorchAllocatorEvent& b = events[3].torch_allocator();
  EXPECT_EQ(b.operator_id(), 4u);
  EXPECT_EQ(b.autograd_sequence(), 11u);  // the backward bit is a field of its own
  EXPECT_TRUE(b.backward());
  const v1::TorchAllocatorEvent& none = events[4].torch_allocator();
  EXPECT_EQ(none.address(), 0x3000u);
  EXPECT_EQ(none.module_id() + none.operator_id() + none.autograd_sequence(), 0u);
}

// Damage is left out alone: a flagged record too short for its attribution, a name of no
// kind or with an id past 32 bits. The records around it are read.
TEST(RingAttribution, DamagedRecordsAreLeftOutAlone) {
  const ring::TorchAttribution a = Attribution(3, 1, 0, 0, 0);
  RingWriter w(3);
  w.Torch(0x1000, &a, /*cut=*/true);
  w.Name(0, 5, "no kind").Name(v1::ATTRIBUTION_KIND_MODULE, uint64_t{1} << 32, "id too large");
  w.Name(v1::ATTRIBUTION_KIND_MODULE, 0, "no id").Name(9, 5, "a newer kind");
  w.Name(v1::ATTRIBUTION_KIND_OPERATOR, 2, std::string("\xff\xfe not UTF-8", 13));
  w.Torch(0x2000, &a);
  SharedRingReader::Recovered recovered;
  const std::vector<v1::Event> events = w.Recover(&recovered);
  EXPECT_EQ(recovered.skipped_records, 5u);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].attribution_name().id(), 2u);  // bytes: kept as they are
  EXPECT_EQ(events[0].attribution_name().name(), std::string("\xff\xfe not UTF-8", 13));
  EXPECT_EQ(events[1].torch_allocator().address(), 0x2000u);
  EXPECT_EQ(events[1].torch_allocator().module_id(), 3u);
}

// Layout 4: an autograd node is its own event, never an allocator event; one without its
// attribution names nothing and is left out. A layout-3 ring has none: such a record is damage.
TEST(RingAttribution, Layout4RecoversAutogradNodesAsTheirOwnEvents) {
  const ring::TorchAttribution node = Attribution(3, 5, 6, 500, 12);
  const ring::TorchAttribution forward = Attribution(3, 1, 2, 500, 11);
  for (const uint32_t layout : {4u, 3u}) {
    RingWriter w(layout);
    w.Torch(0x1000, &forward).Node(&node).Node(nullptr).Torch(0x2000, nullptr);
    SharedRingReader::Recovered recovered;
    const std::vector<v1::Event> events = w.Recover(&recovered);
    EXPECT_EQ(recovered.skipped_records, layout == 4 ? 1u : 2u);
    ASSERT_EQ(events.size(), layout == 4 ? 3u : 2u);
    EXPECT_EQ(events.front().torch_allocator().address(), 0x1000u);
    EXPECT_EQ(events.back().torch_allocator().address(), 0x2000u);
    if (layout != 4) continue;
    ASSERT_TRUE(events[1].has_torch_autograd_node());
    const v1::TorchAutogradNode& n = events[1].torch_autograd_node();
    EXPECT_EQ(n.thread_id(), 78u);
    EXPECT_EQ(n.module_id(), 3u);
    EXPECT_EQ(n.operator_id(), 5u);
    EXPECT_EQ(n.inner_operator_id(), 6u);
    EXPECT_EQ(n.autograd_thread(), 500u);
    EXPECT_EQ(n.autograd_sequence(), 12u);
  }
}

// A layout-2 ring has no attribution: its flag bit means nothing, and a kAttributionName
// record is none of its types.
TEST(RingAttribution, OlderLayoutsHaveNone) {
  const ring::TorchAttribution a = Attribution(3, 1, 0, 0, 0);
  RingWriter w(2);
  w.Torch(0x1000, &a, /*cut=*/true).Name(v1::ATTRIBUTION_KIND_MODULE, 3, "encoder");
  SharedRingReader::Recovered recovered;
  const std::vector<v1::Event> events = w.Recover(&recovered);
  EXPECT_EQ(recovered.skipped_records, 1u);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].torch_allocator().address(), 0x1000u);
  EXPECT_EQ(events[0].torch_allocator().module_id(), 0u);
}

// Per-thread buffers of one slot, written by hand.
class BufferWriter {
 public:
  explicit BufferWriter(uint32_t layout) : area_(kBytes, 0) {
    tb::Header header{};
    header.magic = tb::kMagic;
    header.layout_version = layout;
    header.slot_count = 1;
    header.slot_units = kUnits;
    memcpy(area_.data(), &header, sizeof(header));
  }
  BufferWriter& SlotAttribution(uint64_t a, uint64_t b, uint64_t c) {
    slot_.attribution_a = a;
    slot_.attribution_b = b;
    slot_.attribution_c = c;
    return *this;
  }
  BufferWriter& Unit(uint8_t kind, uint8_t action, uint64_t a, uint64_t b, uint64_t c) {
    tb::Unit u{a, b, c,
               (++sequence_ & tb::kSequenceMask) | uint64_t{action} << tb::kActionShift |
                   uint64_t{kind} << tb::kKindShift};
    memcpy(area_.data() + kUnitsOffset + units_ * tb::kUnitBytes, &u, sizeof(u));
    ++units_;
    return *this;
  }
  BufferWriter& Alloc(uint64_t address) {
    return Unit(tb::kEvent, v1::TORCH_ALLOCATOR_ACTION_ALLOC, ++ts_, address, 512);
  }
  BufferWriter& Attribution(uint64_t a, uint64_t b, uint64_t c) {
    return Unit(tb::kAttribution, 0, a, b, c);
  }
  ThreadBufferRead Read() {
    slot_.state = tb::kOwned;
    slot_.thread_id = 77;
    slot_.committed = units_;
    memcpy(area_.data() + tb::kSlotTableOffset, &slot_, sizeof(slot_));
    return ReadThreadBuffers(area_.data(), area_.size(), {});
  }

 private:
  static constexpr uint32_t kUnits = 64;
  static constexpr uint64_t kUnitsOffset = 4096;  // the slot table, rounded up to a page
  static constexpr uint64_t kBytes = kUnitsOffset + kUnits * tb::kUnitBytes;
  std::vector<unsigned char> area_;
  tb::Slot slot_{};
  uint64_t units_ = 0;
  uint64_t sequence_ = 0;
  uint64_t ts_ = 1000;
};

TEST(ThreadBufferAttribution, Layout2UnitsApplyToTheAllocsAfterThem) {
  BufferWriter w(2);
  // In effect at `freed`: module 5, op 6; then a unit changes it, with a backward sequence.
  w.SlotAttribution(5 | uint64_t{6} << 32, 0, 0);
  w.Alloc(0x1000);
  w.Attribution(3 | uint64_t{1} << 32, 2 | uint64_t{500} << 32, 11 | ring::kBackwardBit);
  w.Alloc(0x2000);
  w.Unit(tb::kEvent, v1::TORCH_ALLOCATOR_ACTION_FREE_REQUESTED, 2000, 0x1000, 0);
  w.Attribution(0, 0, 0);  // nothing running any more
  w.Alloc(0x3000);
  const ThreadBufferRead read = w.Read();
  EXPECT_EQ(read.rejected, 0u);
  ASSERT_EQ(read.events.size(), 4u);
  ASSERT_EQ(read.attributions.size(), read.events.size());
  EXPECT_EQ(read.attributions[0].module, 5u);
  EXPECT_EQ(read.attributions[0].op, 6u);
  EXPECT_EQ(read.attributions[1].module, 3u);
  EXPECT_EQ(read.attributions[1].op, 1u);
  EXPECT_EQ(read.attributions[1].inner_op, 2u);
  EXPECT_EQ(read.attributions[1].autograd_thread, 500u);
  EXPECT_EQ(read.attributions[1].autograd_sequence, 11 | ring::kBackwardBit);
  EXPECT_EQ(read.attributions[2].module, 0u);  // a free has none
  EXPECT_EQ(read.attributions[2].autograd_sequence, 0u);
  EXPECT_EQ(read.attributions[3].module, 0u);
  EXPECT_EQ(read.events[3].address, 0x3000u);

  v1::TorchAllocatorEvent wire;
  SetTorchAttribution(read.attributions[1], &wire);
  EXPECT_TRUE(wire.backward());
  EXPECT_EQ(wire.autograd_sequence(), 11u);
}

// Layout 1 is still read: its slot had no attribution (the fields were reserved), and a
// kAttribution unit is none of its kinds, so the slot stops there as damaged.
TEST(ThreadBufferAttribution, Layout1IsReadWithout) {
  BufferWriter w(1);
  w.SlotAttribution(5, 6, 7).Alloc(0x1000).Attribution(3, 0, 0).Alloc(0x2000);
  const ThreadBufferRead read = w.Read();
  ASSERT_EQ(read.events.size(), 1u);
  EXPECT_EQ(read.attributions[0].module, 0u);
  EXPECT_EQ(read.attributions[0].autograd_sequence, 0u);
  EXPECT_EQ(read.rejected, 2u);
}

}  // namespace
}  // namespace cumemtrace
