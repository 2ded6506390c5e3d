#include "collector/cli/shared_ring_reader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <string_view>
#include <unordered_map>

#include "proto/cumemtrace/v1/shared_ring.h"

namespace cumemtrace {
namespace {

namespace ring = v1::ring;

constexpr uint32_t kFirstRecoveredStringId = 1u << 31;
constexpr int kEventsPerBatch = 4096;

uint64_t Load(const void* p) {
  return __atomic_load_n(static_cast<const uint64_t*>(p), __ATOMIC_ACQUIRE);
}

// Builds the recovered batches.
class BatchBuilder {
 public:
  BatchBuilder(uint64_t sequence, std::vector<std::string>* frames)
      : sequence_(sequence), frames_(frames) {}

  uint32_t Intern(std::string_view value) {
    if (value.empty()) return 0;
    auto [it, inserted] = ids_.try_emplace(std::string(value), next_id_);
    if (inserted) {
      ++next_id_;
      v1::InternedString* s = Batch()->add_events()->mutable_interned_string();
      s->set_id(it->second);
      s->set_value(it->first);
    }
    return it->second;
  }
  v1::Event* Add(uint64_t timestamp_ns) {
    v1::Event* event = Batch()->add_events();
    event->set_timestamp_ns(timestamp_ns);
    return event;
  }
  // Ends a batch when it is full (only between records: a string defined in a batch is
  // used by the same record's event, which follows it in that batch or the next).
  void MaybeFinish(uint64_t position, uint64_t dropped) {
    if (message_.batch().events_size() >= kEventsPerBatch) Finish(position, dropped);
  }
  void Finish(uint64_t position, uint64_t dropped) {
    if (message_.batch().events_size() == 0) return;
    v1::EventBatch* batch = message_.mutable_batch();
    batch->set_sequence(sequence_++);
    batch->set_ring_position(position);
    batch->set_ring_dropped(dropped);
    frames_->push_back(message_.SerializeAsString());
    message_.Clear();
  }

 private:
  v1::EventBatch* Batch() { return message_.mutable_batch(); }

  v1::StreamMessage message_;
  uint64_t sequence_;
  std::vector<std::string>* frames_;
  std::unordered_map<std::string, uint32_t> ids_;
  uint32_t next_id_ = kFirstRecoveredStringId;
};

// A ring's PyTorch allocator event as the wire's (layout 1's form is made a TorchRecord first).
void SetTorchEvent(const ring::TorchRecord& r, v1::TorchAllocatorEvent* torch) {
  torch->set_action(static_cast<v1::TorchAllocatorAction>(r.action));
  torch->set_device(r.device);
  torch->set_address(r.address);
  torch->set_requested_bytes(r.requested_bytes);
  torch->set_stream(r.stream);
  torch->set_thread_id(r.thread_id);
  torch->set_sequence(r.sequence);
  torch->set_allocated_bytes_total(r.allocated_total);
  torch->set_allocated_bytes_current(r.allocated_current);
  torch->set_reserved_bytes_current(r.reserved_current);
  torch->set_pool_id_first(r.pool_first);
  torch->set_pool_id_second(r.pool_second);
}

std::string DriverErrorName(int code) {
  if (code == 2) return "CUDA_ERROR_OUT_OF_MEMORY";
  return "CUresult " + std::to_string(code);
}

}  // namespace

SharedRingReader::~SharedRingReader() {
  if (fd_ >= 0) close(fd_);
}

bool SharedRingReader::Adopt(int fd, const v1::SharedRing& announced, std::string* error) {
  auto refuse = [&](const std::string& why) {
    *error = "shared ring ignored: " + why;
    close(fd);
    return false;
  };
  if (announced.layout_version() < ring::kOldestLayoutVersion ||
      announced.layout_version() > ring::kLayoutVersion) {
    return refuse("layout version " + std::to_string(announced.layout_version()) +
                  " is not one of " + std::to_string(ring::kOldestLayoutVersion) + " to " +
                  std::to_string(ring::kLayoutVersion));
  }
  const uint64_t capacity = announced.capacity();
  if (capacity < 4096 || capacity > ring::kMaxCapacity || (capacity & (capacity - 1)) != 0) {
    return refuse("capacity " + std::to_string(capacity) + " is not a power of two in range");
  }
  // The per-thread buffers after the data area (thread_buffers.h), bounded as the ring is.
  const uint64_t thread_buffer_bytes = announced.thread_buffer_bytes();
  if (thread_buffer_bytes > ring::kMaxCapacity) {
    return refuse("thread buffers of " + std::to_string(thread_buffer_bytes) + " bytes");
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return refuse("not a memory file");
  if (static_cast<uint64_t>(st.st_size) != ring::kHeaderBytes + capacity + thread_buffer_bytes) {
    return refuse("its size " + std::to_string(st.st_size) + " does not match the handshake");
  }
  // A file that may shrink under the mapping would raise SIGBUS in the collector.
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) return refuse("not sealed against shrinking");
  if (fd_ >= 0) close(fd_);
  fd_ = fd;
  capacity_ = capacity;
  thread_buffer_bytes_ = thread_buffer_bytes;
  return true;
}

uint64_t SharedRingReader::thread_buffer_offset() const { return ring::kHeaderBytes + capacity_; }

SharedRingReader::Recovered SharedRingReader::Recover(uint64_t position, uint64_t reported_drops,
                                                      uint64_t sequence,
                                                      std::vector<std::string>* frames) {
  Recovered recovered;
  if (fd_ < 0) return recovered;
  const size_t bytes = ring::kHeaderBytes + capacity_;
  void* view = mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd_, 0);
  if (view == MAP_FAILED) return recovered;
  const auto* base = static_cast<const unsigned char*>(view);
  ring::Header header;
  memcpy(&header, base, sizeof(header));
  const uint64_t write = Load(base + offsetof(ring::Header, write_position));
  const uint64_t dropped_total = Load(base + offsetof(ring::Header, dropped_total));
  std::vector<ring::ApiEntry> apis;
  if (header.magic == ring::kMagic && header.layout_version >= ring::kOldestLayoutVersion &&
      header.layout_version <= ring::kLayoutVersion && header.capacity == capacity_) {
    const uint32_t count = std::min(header.api_count, ring::kMaxApis);
    apis.resize(count);
    if (count > 0) {  // an empty vector's data() may be null, which memcpy must not get
      memcpy(apis.data(), base + ring::kApiTableOffset, count * sizeof(ring::ApiEntry));
    }
    for (ring::ApiEntry& api : apis) api.name[sizeof(api.name) - 1] = '\0';
  } else {
    position = write;  // not a ring we understand: nothing to read
  }
  auto api_name = [&](uint16_t index) -> std::string_view {
    return index < apis.size() ? std::string_view(apis[index].name) : std::string_view("unknown");
  };

  BatchBuilder out(sequence, frames);
  std::unordered_map<uint64_t, uint32_t> launch_names;  // kernel name key -> interned id
  const unsigned char* data = base + ring::kHeaderBytes;
  // Never more than one ring's worth: anything older was overwritten (it cannot be, unless
  // the ring lies), and a write position behind ours means nothing is left.
  if (write > position + capacity_) position = write - capacity_;
  while (position < write) {
    const uint64_t offset = position % capacity_;
    if (capacity_ - offset < 8) break;
    uint32_t size = 0;
    memcpy(&size, data + offset, sizeof(size));
    const uint8_t type = data[offset + offsetof(ring::Record, type)];
    if (size < 8 || size % 8 != 0 || size > capacity_ - offset) break;  // damaged: stop
    position += size;
    if (type == ring::kPadding) continue;
    if (type == ring::kTorchEvent) {
      if (size < sizeof(ring::TorchRecord)) break;
      ring::TorchRecord r;
      memcpy(&r, data + offset, sizeof(r));
      SetTorchEvent(r, out.Add(r.timestamp_ns)->mutable_torch_allocator());
      ++recovered.records;
      out.MaybeFinish(position, reported_drops);
      continue;
    }
    if (size < sizeof(ring::Record)) break;
    ring::Record r;
    memcpy(&r, data + offset, sizeof(r));
    const uint64_t strings =
        uint64_t{r.text_bytes} + r.caller_bytes + r.domain_bytes + r.payload_bytes;
    if (strings > size - sizeof(ring::Record)) break;
    const char* text_at = reinterpret_cast<const char*>(data + offset + sizeof(r));
    const std::string_view text(text_at, r.text_bytes);
    const std::string_view caller(text_at + r.text_bytes, r.caller_bytes);
    const std::string_view domain(text_at + r.text_bytes + r.caller_bytes, r.domain_bytes);
    const char* payload = text_at + r.text_bytes + r.caller_bytes + r.domain_bytes;
    bool made_event = true;
    switch (r.type) {
      case ring::kNvtx: {
        const uint32_t domain_id = out.Intern(domain);
        const uint32_t message_id = out.Intern(text);
        v1::Nvtx* nvtx = out.Add(r.timestamp_ns)->mutable_nvtx();
        nvtx->set_operation(static_cast<v1::NvtxOperation>(r.nvtx_operation));
        nvtx->set_thread_id(r.thread_id);
        nvtx->set_domain_id(domain_id);
        nvtx->set_message_id(message_id);
        nvtx->set_range_id(r.range_id);
        nvtx->set_category(r.category);
        nvtx->set_color(r.color);
        break;
      }
      case ring::kMemory: {
        // A release names its address; the collector's sweep finds the size, kind and device
        // of the allocation it ends. A cuMemUnmap ends the mapping at its own address only.
        const uint32_t api_id = out.Intern(api_name(r.api));
        const uint32_t caller_id = out.Intern(caller);
        v1::MemoryOp* op = out.Add(r.timestamp_ns)->mutable_memory();
        op->set_operation(r.release ? v1::MEMORY_OPERATION_RELEASE
                                    : v1::MEMORY_OPERATION_ALLOCATE);
        op->set_address(r.address);
        op->set_bytes(r.release ? 0 : r.bytes);
        op->set_kind(r.release ? v1::MEMORY_KIND_UNKNOWN
                               : static_cast<v1::MemoryKind>(r.memory_kind));
        op->set_device(r.device);
        op->set_stream(r.stream_id);
        op->set_is_async(r.is_async != 0);
        op->set_correlation_id(r.correlation_id);
        op->set_thread_id(r.thread_id);
        op->set_api_name_id(api_id);
        op->set_caller_module_id(caller_id);
        break;
      }
      case ring::kFailedAllocation: {
        const uint32_t api_id = out.Intern(api_name(r.api));
        const uint32_t error_id = out.Intern(DriverErrorName(r.error_code));
        const uint32_t caller_id = out.Intern(caller);
        v1::FailedAllocation* failed = out.Add(r.timestamp_ns)->mutable_failed_allocation();
        failed->set_api_name_id(api_id);
        failed->set_requested_bytes(r.bytes);
        failed->set_error_code(r.error_code);
        failed->set_error_name_id(error_id);
        failed->set_device(r.device);
        failed->set_device_free_bytes(r.device_free_bytes);
        failed->set_device_total_bytes(r.device_total_bytes);
        failed->set_thread_id(r.thread_id);
        failed->set_correlation_id(r.correlation_id);
        failed->set_kind(r.api < apis.size() ? static_cast<v1::MemoryKind>(apis[r.api].kind)
                                             : v1::MEMORY_KIND_UNKNOWN);
        failed->set_caller_module_id(caller_id);
        break;
      }
      case ring::kThreadName: {
        v1::ThreadName* name = out.Add(r.timestamp_ns)->mutable_thread_name();
        name->set_thread_id(r.thread_id);
        name->set_name(std::string(text));
        break;
      }
      case ring::kProcessExit:
        out.Add(r.timestamp_ns)->mutable_process_exit()->set_exit_code(r.error_code);
        break;
      case ring::kTorchAllocator: {  // layout 1's form
        if (r.payload_bytes < sizeof(ring::TorchPayload)) {
          made_event = false;
          break;
        }
        ring::TorchPayload p;
        memcpy(&p, payload, sizeof(p));
        ring::TorchRecord t{};
        t.action = p.action;
        t.thread_id = r.thread_id;
        t.device = r.device;
        t.address = r.address;
        t.requested_bytes = r.bytes;
        t.stream = p.stream;
        t.sequence = p.sequence;
        t.allocated_total = p.allocated_total;
        t.allocated_current = p.allocated_current;
        t.reserved_current = p.reserved_current;
        t.pool_first = p.pool_first;
        t.pool_second = p.pool_second;
        SetTorchEvent(t, out.Add(r.timestamp_ns)->mutable_torch_allocator());
        break;
      }
      case ring::kTensorCategory: {
        if (!v1::Category_IsValid(static_cast<int>(r.category))) {
          made_event = false;
          break;
        }
        v1::TensorCategory* tag = out.Add(r.timestamp_ns)->mutable_tensor_category();
        tag->set_device(r.device);
        tag->set_address(r.address);
        tag->set_bytes(r.bytes);
        tag->set_category(static_cast<v1::Category>(r.category));
        break;
      }
      case ring::kTorchBridgeState:
        made_event = out.Add(r.timestamp_ns)->mutable_torch_bridge()->ParseFromArray(
            payload, static_cast<int>(r.payload_bytes));
        break;
      case ring::kLaunch: {
        // The name comes with a thread's first launch of it; later ones carry only its key.
        uint64_t key = 0;
        if (r.payload_bytes >= sizeof(key)) memcpy(&key, payload, sizeof(key));
        uint32_t name_id = 0;
        if (!text.empty()) {
          name_id = out.Intern(text);
          if (key != 0) launch_names[key] = name_id;
        } else {
          const auto it = launch_names.find(key);
          name_id = it != launch_names.end() ? it->second : out.Intern("?");
        }
        v1::Kernel* kernel = out.Add(r.timestamp_ns)->mutable_kernel();
        kernel->set_name_id(name_id);
        kernel->set_device(r.device);
        kernel->set_correlation_id(r.correlation_id);
        kernel->set_thread_id(r.thread_id);
        kernel->set_launch_only(true);
        break;
      }
      default:  // correlations and devices: only the live tracer can use them
        made_event = false;
        break;
    }
    if (made_event) ++recovered.records;
    out.MaybeFinish(position, reported_drops);
  }
  if (dropped_total > reported_drops) {
    recovered.drops = dropped_total - reported_drops;
    v1::DroppedRecords* dropped = out.Add(header.dropped_last_ns)->mutable_dropped();
    dropped->set_source(v1::DROP_SOURCE_TRACER_QUEUE);
    dropped->set_count(recovered.drops);
    dropped->set_first_ns(header.dropped_first_ns);
    dropped->set_last_ns(header.dropped_last_ns);
  }
  out.Finish(position, dropped_total);
  munmap(view, bytes);
  return recovered;
}

}  // namespace cumemtrace
