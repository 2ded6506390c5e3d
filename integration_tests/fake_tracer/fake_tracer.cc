// A stand-in for the real tracer in end-to-end tests: a program that connects to
// $CUMEMTRACE_SOCKET (or --socket) and speaks the wire protocol, well or badly on purpose.
//
//   fake_tracer [--batches=N] [--events=M]    handshake, then N batches of M memory events
//               [--first-frame=KIND]          send KIND instead of a valid handshake:
//                                             garbage | bad-magic | bad-version | batch
//               [--oversized]                 after the handshake, a frame length > 16 MiB
//               [--garbage-after-handshake]   after the handshake, bytes that are no message
//               [--also-bad-connection]       open a second connection at the same time that
//                                             sends garbage; carry on once it is refused
//               [--partial-frame]             end with half a frame
//               [--die=kill|segv]             die by that signal after sending, socket open
//               [--hold]                      print "holding" on stdout once everything is
//                                             sent, then keep the connection open until killed
//               [--wait-fd=N]                 after the handshake, read descriptor N to EOF
//                                             before sending batches (a start barrier)
//               [--exit=CODE]                 exit status (default 0)
//               [--print-lines=N]             print N numbered lines on stdout first
//               [--print-env=VAR]             print VAR=value (or VAR unset) on stdout
//               [--no-connect]                do not connect at all
//               [--ring=KIND]                 announce a shared ring in the handshake and
//                                             pass a descriptor with it: unsealed (a memfd
//                                             that may shrink) | pipe | lying (sealed, with
//                                             a header and records full of wrong sizes)
//                                             | three (three descriptors at once) | torch
//                                             (two PyTorch allocator events, layout 2's
//                                             form) | torch-v1 (the same in layout 1's)
//                                             | thread-buffers (tensor events in two
//                                             per-thread buffers after the ring, some of
//                                             them carried by the first batch)
//               [--socket=PATH]
//               [--range=NAME]...             wrap batch b in an NVTX range named the
//                                             (b mod count)-th NAME
//               [--long-range=N]              a range NAME of N letters 'a'
//               [--category=NAME]...          the program's objects name batch b's
//                                             allocations: category NAME (parameter,
//                                             activation, ...) number b modulo their count
//               [--pause-ms=N]                sleep N ms after each batch (a program that
//                                             runs for a while, for the live view)
//               [--keep-going]                when the collector goes away, stop sending
//                                             and exit as asked (as the real tracer does)
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "collector/format/framing.h"
#include "cumemtrace/v1/trace.pb.h"
#include "proto/cumemtrace/v1/shared_ring.h"
#include "proto/cumemtrace/v1/thread_buffers.h"

namespace {

namespace v1 = cumemtrace::v1;

bool keep_going = false;  // --keep-going
bool collector_gone = false;

struct Options {
  std::string socket_path;
  int batches = 3;
  int events = 4;
  std::string first_frame;
  bool oversized = false;
  bool garbage_after_handshake = false;
  bool also_bad_connection = false;
  bool partial_frame = false;
  bool hold = false;
  int wait_fd = -1;
  std::string die;
  int exit_code = 0;
  int print_lines = 0;
  std::vector<std::string> print_env;
  bool connect = true;
  std::string ring;
  std::vector<std::string> ranges;
  std::vector<std::string> categories;
  int pause_ms = 0;
};

[[noreturn]] void Fail(const std::string& what) {
  fprintf(stderr, "fake_tracer: %s: %s\n", what.c_str(), strerror(errno));
  exit(99);
}

uint64_t Now(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

int Connect(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) Fail("socket");
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    Fail("connect " + path);
  }
  return fd;
}

void SendAll(int fd, const std::string& bytes) {
  size_t sent = 0;
  while (sent < bytes.size() && !collector_gone) {
    const ssize_t n = send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && keep_going) {
      collector_gone = true;
      break;
    }
    if (n < 0) Fail("send");
    sent += static_cast<size_t>(n);
  }
}

void SendMessage(int fd, const v1::StreamMessage& message) {
  std::string frame;
  cumemtrace::AppendFrame(message.SerializeAsString(), &frame);
  SendAll(fd, frame);
}

v1::StreamMessage Handshake(int argc, char** argv) {
  v1::StreamMessage message;
  v1::Handshake* h = message.mutable_handshake();
  h->set_magic(static_cast<uint32_t>(v1::HANDSHAKE_MAGIC));
  h->set_protocol_version(v1::PROTOCOL_VERSION);
  h->set_pid(static_cast<uint32_t>(getpid()));
  h->set_ppid(static_cast<uint32_t>(getppid()));
  for (int i = 0; i < argc; ++i) h->add_command_line(argv[i]);
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  h->set_hostname(host);
  h->mutable_clock_pair()->set_realtime_ns(Now(CLOCK_REALTIME));
  h->mutable_clock_pair()->set_monotonic_ns(Now(CLOCK_MONOTONIC));
  h->set_timestamp_clock(v1::TIMESTAMP_CLOCK_MONOTONIC);
  h->set_tracer_version("fake");
  const char* mode = getenv("CUMEMTRACE_ALLOCATOR_MODE");
  h->set_allocator_mode(mode != nullptr ? mode : "");
  h->set_injection_mode(v1::INJECTION_MODE_LD_PRELOAD);
  h->set_kernels_enabled(true);
  h->set_trace_start_ns(Now(CLOCK_MONOTONIC));
  return message;
}

void AddNvtx(v1::EventBatch* batch, v1::NvtxOperation operation, uint32_t message_id) {
  v1::Event* event = batch->add_events();
  event->set_timestamp_ns(Now(CLOCK_MONOTONIC));
  v1::Nvtx* nvtx = event->mutable_nvtx();
  nvtx->set_operation(operation);
  nvtx->set_thread_id(static_cast<uint32_t>(getpid()));
  nvtx->set_message_id(message_id);
}

// A batch of `events` device allocations, each of 1 MiB at a distinct address, inside a
// range named `range` when it is not empty.
v1::StreamMessage Batch(uint64_t sequence, int events, const std::string& range = "",
                        const std::string& category = "") {
  v1::StreamMessage message;
  v1::EventBatch* batch = message.mutable_batch();
  batch->set_sequence(sequence);
  const uint32_t range_id = static_cast<uint32_t>(sequence) + 1;
  if (!range.empty()) {
    v1::Event* event = batch->add_events();
    event->set_timestamp_ns(Now(CLOCK_MONOTONIC));
    event->mutable_interned_string()->set_id(range_id);
    event->mutable_interned_string()->set_value(range);
    AddNvtx(batch, v1::NVTX_OPERATION_PUSH, range_id);
  }
  for (int i = 0; i < events; ++i) {
    v1::Event* event = batch->add_events();
    event->set_timestamp_ns(Now(CLOCK_MONOTONIC));
    v1::MemoryOp* op = event->mutable_memory();
    op->set_operation(v1::MEMORY_OPERATION_ALLOCATE);
    op->set_address(0x7f0000000000ull + (sequence * 1000 + static_cast<uint64_t>(i)) * (1 << 20));
    op->set_bytes(1 << 20);
    op->set_kind(v1::MEMORY_KIND_DEVICE);
    op->set_thread_id(static_cast<uint32_t>(getpid()));
    v1::Category value = v1::CATEGORY_UNSPECIFIED;
    std::string upper = "CATEGORY_";
    for (char c : category) upper += static_cast<char>(toupper(static_cast<unsigned char>(c)));
    if (!category.empty() && v1::Category_Parse(upper, &value)) {
      v1::Event* tag = batch->add_events();
      tag->set_timestamp_ns(Now(CLOCK_MONOTONIC));
      tag->mutable_tensor_category()->set_address(op->address());
      tag->mutable_tensor_category()->set_bytes(op->bytes());
      tag->mutable_tensor_category()->set_category(value);
    }
  }
  if (!range.empty()) AddNvtx(batch, v1::NVTX_OPERATION_POP, 0);
  return message;
}

// Sends what --first-frame asks for instead of a handshake.
void SendBadFirstFrame(int fd, const std::string& kind, int argc, char** argv) {
  if (kind == "garbage") {
    std::string frame;
    cumemtrace::AppendFrame(std::string("\xff\xff\xff\xff not a message", 18), &frame);
    SendAll(fd, frame);
    return;
  }
  if (kind == "batch") {
    SendMessage(fd, Batch(0, 1));
    return;
  }
  v1::StreamMessage message = Handshake(argc, argv);
  if (kind == "bad-magic") message.mutable_handshake()->set_magic(0xdeadbeef);
  if (kind == "bad-version") message.mutable_handshake()->set_protocol_version(999);
  SendMessage(fd, message);
}

// --ring=torch and torch-v1: an ALLOC and its FREE_REQUESTED (fields numbered so that a
// swap shows), in the ring's current form or as a layout-1 Record with a TorchPayload.
void WriteTorchEvents(unsigned char* data, bool layout_1, uint64_t* write_position) {
  namespace ring = cumemtrace::v1::ring;
  uint64_t at = 0;
  for (uint64_t n = 1; n <= 2; ++n) {
    ring::TorchRecord t{};
    t.size = sizeof(t);
    t.type = ring::kTorchEvent;
    t.action = static_cast<uint8_t>(n);  // ALLOC, FREE_REQUESTED
    t.thread_id = 100 + n;
    t.device = static_cast<uint32_t>(2 + n);
    t.timestamp_ns = 1000 * n;
    t.address = 0x7f0000000000ull;
    t.requested_bytes = 4000 + n;
    t.stream = 5 + n;
    t.sequence = 50 + n;
    t.allocated_total = n == 1 ? 4096 : 0;
    t.allocated_current = n == 1 ? 8192 : 0;
    t.reserved_current = n == 1 ? 2u << 20 : 0;
    t.pool_first = 10 + n;
    t.pool_second = 20 + n;
    if (!layout_1) {
      // The ALLOC with a stack after it (a header and one word), as `run --stacks` writes
      // it: the reader skips it by the record's size.
      const uint64_t stack[2] = {1, 0x1234};
      if (n == 1) {
        t.size += sizeof(stack);
        t.flags = ring::kFlagStack;
      }
      memcpy(data + at, &t, sizeof(t));
      if (n == 1) memcpy(data + at + sizeof(t), stack, sizeof(stack));
      at += t.size;
      continue;
    }
    ring::Record r{};
    r.size = sizeof(r) + sizeof(ring::TorchPayload);
    r.type = ring::kTorchAllocator;
    r.thread_id = t.thread_id;
    r.timestamp_ns = t.timestamp_ns;
    r.device = t.device;
    r.address = t.address;
    r.bytes = t.requested_bytes;
    r.payload_bytes = sizeof(ring::TorchPayload);
    ring::TorchPayload p{};
    p.stream = t.stream;
    p.sequence = t.sequence;
    p.allocated_total = t.allocated_total;
    p.allocated_current = t.allocated_current;
    p.reserved_current = t.reserved_current;
    p.pool_first = t.pool_first;
    p.pool_second = t.pool_second;
    p.action = t.action;
    memcpy(data + at, &r, sizeof(r));
    memcpy(data + at + sizeof(r), &p, sizeof(p));
    at += r.size;
  }
  *write_position = at;
}

// A descriptor of the kind --ring asks for; the ring announced is 64 KiB.
constexpr uint64_t kRingCapacity = 64 << 10;

// --ring=thread-buffers: two slots of 64 units after the ring (thread_buffers.h). Slot 0
// (thread 301, device 1): a stream definition (9), events 1-5 committed, a sixth written
// but not committed; nothing freed, and the first batch says events up to 2 were sent
// (kThreadBufferSent). Slot 1 (thread 302, device 2): a definition (7), event 1, a
// definition (8), events 2 and 3; freed past event 1, with stream 7 in effect there. The
// collector must recover events 3-5 of device 1 and 2-3 of device 2, with streams 9 and 8.
constexpr uint32_t kBufferSlots = 2, kBufferUnits = 64;
constexpr uint64_t kBufferBytes = 4096 + kBufferSlots * kBufferUnits * 32;
constexpr uint64_t kThreadBufferSent = 3;  // slot 0's position after event 2
void WriteThreadBuffers(unsigned char* area) {
  namespace tb = cumemtrace::v1::thread_buffers;
  auto* header = reinterpret_cast<tb::Header*>(area);
  header->magic = tb::kMagic;
  header->layout_version = tb::kLayoutVersion;
  header->slot_count = kBufferSlots;
  header->slot_units = kBufferUnits;
  auto* slots = reinterpret_cast<tb::Slot*>(area + tb::kSlotTableOffset);
  auto unit = [&](uint32_t slot, uint64_t at, tb::UnitKind kind, uint64_t a, uint64_t sequence) {
    auto* u = reinterpret_cast<tb::Unit*>(area + 4096 + (slot * kBufferUnits + at) * 32);
    const uint64_t device = slot + 1;
    u->a = a;
    u->b = kind == tb::kEvent ? 0x7e0000000000ull + device * 0x1000 + sequence : 0;
    u->c = kind == tb::kEvent ? 512 * sequence : 0;
    u->word = sequence | device << tb::kDeviceShift |
              uint64_t{v1::TORCH_ALLOCATOR_ACTION_ALLOC} << tb::kActionShift |
              uint64_t{kind} << tb::kKindShift;
  };
  unit(0, 0, tb::kDefinition, 9, 1);
  for (uint64_t n = 1; n <= 6; ++n) unit(0, n, tb::kEvent, 1000 * n, n);
  slots[0].state = tb::kOwned;
  slots[0].thread_id = 301;
  slots[0].committed = 6;  // the sixth event is past the commit
  unit(1, 0, tb::kDefinition, 7, 1);
  unit(1, 1, tb::kEvent, 2000, 1);
  unit(1, 2, tb::kDefinition, 8, 2);
  unit(1, 3, tb::kEvent, 4000, 2);
  unit(1, 4, tb::kEvent, 6000, 3);
  slots[1].state = tb::kEnded;
  slots[1].thread_id = 302;
  slots[1].committed = 5;
  slots[1].freed = 2;
  slots[1].stream = 7;
}
int MakeRing(const std::string& kind) {
  namespace ring = cumemtrace::v1::ring;
  if (kind == "pipe") {
    int fds[2];
    if (pipe(fds) != 0) Fail("pipe");
    return fds[0];
  }
  const int fd = memfd_create("fake-ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  const uint64_t extra = kind == "thread-buffers" ? kBufferBytes : 0;
  if (fd < 0 || ftruncate(fd, ring::kHeaderBytes + kRingCapacity + extra) != 0) Fail("memfd");
  if (kind == "unsealed") return fd;
  if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) Fail("seal");
  void* memory = mmap(nullptr, ring::kHeaderBytes + kRingCapacity + extra,
                      PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (memory == MAP_FAILED) Fail("mmap");
  auto* header = static_cast<ring::Header*>(memory);
  header->magic = ring::kMagic;
  header->layout_version = kind == "torch-v1" ? 1 : ring::kLayoutVersion;
  header->capacity = kRingCapacity;
  auto* data = static_cast<unsigned char*>(memory) + ring::kHeaderBytes;
  if (kind == "torch" || kind == "torch-v1") {
    WriteTorchEvents(data, kind == "torch-v1", &header->write_position);
    return fd;
  }
  if (kind == "thread-buffers") {
    WriteThreadBuffers(data + kRingCapacity);
    return fd;
  }
  header->api_count = 1000000;  // beyond the table
  // Past a whole ring's worth of writes: the reader starts one ring back, at offset 0.
  header->write_position = 3 * kRingCapacity;
  header->dropped_total = 7;
  // One readable record (an allocation naming an API index past the table), then records
  // with sizes past the end, zero sizes, and strings longer than themselves.
  for (uint64_t at = 0; at + sizeof(ring::Record) <= kRingCapacity; at += 4096) {
    ring::Record r{};
    const uint64_t n = at / 4096;
    r.size = static_cast<uint32_t>(n == 0 ? 4096 : n % 3 == 1 ? 0xfffffff8 : n % 3 == 2 ? 0 : 120);
    r.type = n == 0 ? ring::kMemory : ring::kNvtx;
    r.api = 60000;
    r.address = 0x7f0000000000ull;
    r.bytes = 1 << 20;
    r.text_bytes = n == 0 ? 0 : 0xffffff00;
    memcpy(data + at, &r, sizeof(r));
  }
  return fd;
}

// Sends the handshake with the ring's descriptor(s) attached.
void SendHandshakeWithRing(int fd, v1::StreamMessage message, const std::string& kind) {
  message.mutable_handshake()->mutable_shared_ring()->set_layout_version(
      kind == "torch-v1" ? 1 : cumemtrace::v1::ring::kLayoutVersion);
  message.mutable_handshake()->mutable_shared_ring()->set_capacity(kRingCapacity);
  if (kind == "thread-buffers") {
    message.mutable_handshake()->mutable_shared_ring()->set_thread_buffer_bytes(kBufferBytes);
  }
  std::string frame;
  cumemtrace::AppendFrame(message.SerializeAsString(), &frame);
  int passed[3] = {MakeRing(kind == "three" ? "lying" : kind), MakeRing("pipe"), MakeRing("pipe")};
  const size_t count = kind == "three" ? 3 : 1;
  iovec data{frame.data(), frame.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(3 * sizeof(int))] = {};
  msghdr header{};
  header.msg_iov = &data;
  header.msg_iovlen = 1;
  header.msg_control = control;
  header.msg_controllen = CMSG_SPACE(count * sizeof(int));
  cmsghdr* c = CMSG_FIRSTHDR(&header);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(count * sizeof(int));
  memcpy(CMSG_DATA(c), passed, count * sizeof(int));
  const ssize_t n = sendmsg(fd, &header, MSG_NOSIGNAL);
  if (n < 0) Fail("sendmsg");
  SendAll(fd, frame.substr(static_cast<size_t>(n)));
}

// Waits until the collector closes `fd` (it refused the connection).
void WaitForClose(int fd) {
  char byte;
  while (recv(fd, &byte, 1, 0) != 0) {
    if (errno != EINTR) break;
  }
}

Options Parse(int argc, char** argv) {
  Options o;
  const char* env_socket = getenv("CUMEMTRACE_SOCKET");
  if (env_socket != nullptr) o.socket_path = env_socket;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&arg](const char* prefix) -> const char* {
      const size_t n = strlen(prefix);
      return arg.compare(0, n, prefix) == 0 ? arg.c_str() + n : nullptr;
    };
    if (const char* v = value("--batches=")) {
      o.batches = atoi(v);
    } else if (const char* v2 = value("--events=")) {
      o.events = atoi(v2);
    } else if (const char* v3 = value("--first-frame=")) {
      o.first_frame = v3;
    } else if (arg == "--oversized") {
      o.oversized = true;
    } else if (arg == "--garbage-after-handshake") {
      o.garbage_after_handshake = true;
    } else if (arg == "--also-bad-connection") {
      o.also_bad_connection = true;
    } else if (const char* v9 = value("--wait-fd=")) {
      o.wait_fd = atoi(v9);
    } else if (arg == "--hold") {
      o.hold = true;
    } else if (arg == "--partial-frame") {
      o.partial_frame = true;
    } else if (const char* v4 = value("--die=")) {
      o.die = v4;
    } else if (const char* v5 = value("--exit=")) {
      o.exit_code = atoi(v5);
    } else if (const char* v6 = value("--print-lines=")) {
      o.print_lines = atoi(v6);
    } else if (const char* v7 = value("--print-env=")) {
      o.print_env.push_back(v7);
    } else if (arg == "--no-connect") {
      o.connect = false;
    } else if (const char* v10 = value("--ring=")) {
      o.ring = v10;
    } else if (const char* v8 = value("--socket=")) {
      o.socket_path = v8;
    } else if (const char* v12 = value("--range=")) {
      o.ranges.push_back(v12);
    } else if (const char* v14 = value("--category=")) {
      o.categories.push_back(v14);
    } else if (const char* v13 = value("--pause-ms=")) {
      o.pause_ms = atoi(v13);
    } else if (arg == "--keep-going") {
      keep_going = true;
    } else if (const char* v11 = value("--long-range=")) {
      o.ranges.push_back(std::string(static_cast<size_t>(atol(v11)), 'a'));
    } else {
      fprintf(stderr, "fake_tracer: unknown argument %s\n", arg.c_str());
      exit(98);
    }
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = Parse(argc, argv);
  for (int i = 0; i < o.print_lines; ++i) printf("line %d of the traced program\n", i);
  for (const std::string& name : o.print_env) {
    const char* value = getenv(name.c_str());
    if (value != nullptr) {
      printf("%s=%s\n", name.c_str(), value);
    } else {
      printf("%s unset\n", name.c_str());
    }
  }
  fflush(stdout);
  if (!o.connect) return o.exit_code;
  if (o.socket_path.empty()) {
    fprintf(stderr, "fake_tracer: no socket (set CUMEMTRACE_SOCKET or --socket)\n");
    return 97;
  }

  const int fd = Connect(o.socket_path);
  if (!o.first_frame.empty()) {
    SendBadFirstFrame(fd, o.first_frame, argc, argv);
    WaitForClose(fd);
    return o.exit_code;
  }
  if (o.ring.empty()) {
    SendMessage(fd, Handshake(argc, argv));
  } else {
    SendHandshakeWithRing(fd, Handshake(argc, argv), o.ring);
  }
  if (o.also_bad_connection) {
    const int bad = Connect(o.socket_path);
    SendBadFirstFrame(bad, "garbage", argc, argv);
    WaitForClose(bad);  // refused while this connection stays open
    close(bad);
  }
  if (o.wait_fd >= 0) {
    char byte;
    while (read(o.wait_fd, &byte, 1) != 0) {
      if (errno != EINTR) break;
    }
    close(o.wait_fd);
  }
  if (o.oversized) {
    SendAll(fd, std::string("\x81\x80\x80\x08", 4));  // varint of 16 MiB + 1
    WaitForClose(fd);
    return o.exit_code;
  }
  if (o.garbage_after_handshake) {
    std::string frame;
    cumemtrace::AppendFrame(std::string("\xff\xff\xff\xff junk", 9), &frame);
    SendAll(fd, frame);
    WaitForClose(fd);
    return o.exit_code;
  }
  for (int b = 0; b < o.batches; ++b) {
    const std::string range = o.ranges.empty() ? "" : o.ranges[static_cast<size_t>(b) % o.ranges.size()];
    const std::string category =
        o.categories.empty() ? "" : o.categories[static_cast<size_t>(b) % o.categories.size()];
    v1::StreamMessage batch = Batch(static_cast<uint64_t>(b), o.events, range, category);
    if (o.ring == "thread-buffers" && b == 0) {
      v1::ThreadBufferPosition* sent = batch.mutable_batch()->add_thread_buffer_positions();
      sent->set_slot(0);
      sent->set_position(kThreadBufferSent);
    }
    SendMessage(fd, batch);
    if (o.pause_ms > 0) usleep(static_cast<useconds_t>(o.pause_ms) * 1000);
  }
  if (o.partial_frame) {
    std::string frame;
    cumemtrace::AppendFrame(Batch(static_cast<uint64_t>(o.batches), o.events).SerializeAsString(),
                            &frame);
    SendAll(fd, frame.substr(0, frame.size() / 2));
  }
  if (o.hold) {
    printf("holding\n");
    fflush(stdout);
    for (;;) pause();
  }
  if (o.die == "kill") raise(SIGKILL);
  if (o.die == "segv") {
    signal(SIGSEGV, SIG_DFL);
    raise(SIGSEGV);
  }
  close(fd);
  return o.exit_code;
}
