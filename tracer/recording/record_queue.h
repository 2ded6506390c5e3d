// Bounded hand-off from program threads to the sender thread, in a shared-memory ring that
// the collector can read (proto/cumemtrace/v1/shared_ring.h). Push never blocks on the
// collector: when the ring is full the record is dropped and counted, and the sender reports
// the loss as a DroppedRecords event (an explicit gap, never invented data). A record's space
// is reused only once the frame that carries it has been handed to the kernel (Free), so a
// record that is in the ring is either on its way to the collector or still in the ring
// when the process dies, where the collector reads it.
#pragma once

#include <sched.h>
#include <time.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "proto/cumemtrace/v1/shared_ring.h"
#include "tracer/recording/host_record.h"

namespace cumemtrace::tracer {

// The ring's lock, held for the copy of a record (a few cache lines). A std::mutex pays two
// locked instructions per push (lock and unlock), and in a busy program each waits for the
// program's own stores in flight; this lock pays one, and its unlock is a plain store. A
// waiter spins a little, then yields, then sleeps: a preempted holder runs again even when
// the waiter has a higher priority on the same CPU.
class RingLock {
 public:
  void lock() {
    while (held_.exchange(true, std::memory_order_acquire)) {
      for (unsigned waits = 0; held_.load(std::memory_order_relaxed); ++waits) {
        if (waits < 100) {
          Pause();
        } else if (waits < 200) {
          sched_yield();
        } else {
          const timespec nap{0, 50'000};
          nanosleep(&nap, nullptr);
        }
      }
    }
  }
  void unlock() { held_.store(false, std::memory_order_release); }
  // In a forked child, whose only thread is the one that forked (holding it).
  void Reset() { held_.store(false, std::memory_order_relaxed); }

 private:
  static void Pause() {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }
  std::atomic<bool> held_{false};
};

struct DropWindow {
  uint64_t count = 0;
  uint64_t first_ns = 0;
  uint64_t last_ns = 0;
};

class RecordQueue {
 public:
  // `capacity_events` (CUMEMTRACE_QUEUE_EVENTS) sizes the ring: RingBytesFor.
  explicit RecordQueue(size_t capacity_events);

  // Data bytes of the ring for a bound in events: 128 B per event, a power of two within
  // [64 KiB, 32 MiB].
  static uint64_t RingBytesFor(size_t capacity_events);

  // Makes the ring. Shared (a sealed memfd) when the kernel allows it: returns its
  // descriptor (close-on-exec, at a high number) for the handshake, and the caller closes it
  // once sent. Otherwise private memory and -1: the tracer works as before, without what the
  // collector could read after a crash. Before this, Push drops nothing and keeps nothing.
  // shared=false (CUMEMTRACE_SHARED_RING=0) asks for the private memory: the socket alone.
  // `extra_bytes` more are mapped after the ring's data area, in the same memory (the
  // per-thread buffers, thread_buffers.h): extra() once made.
  int Create(bool shared = true, uint64_t extra_bytes = 0);
  bool created() const { return header_ != nullptr; }
  bool shared() const { return shared_; }
  uint64_t ring_bytes() const { return ring_bytes_; }
  unsigned char* extra() {
    return extra_bytes_ > 0 && data_ != nullptr ? data_ + ring_bytes_ : nullptr;
  }
  uint64_t extra_bytes() const { return data_ != nullptr ? extra_bytes_ : 0; }
  // The header page, for the API table (written once, before the ring is handed over).
  v1::ring::Header* header() { return header_; }

  // Returns false (and counts a drop) when the ring is full, unless it waits for room
  // (set_wait_when_full). Any type but kTorchAllocator, which PushTorchRecord writes (as a
  // TorchRecord).
  bool Push(const HostRecord& record);

  // CUMEMTRACE_WAIT_WHEN_FULL=1 (`run --wait-when-full`), for users who need every record,
  // as heapprofd's block_client: a Push that finds the ring full waits, outside the lock
  // (a short spin, then a futex the sender's Free wakes), and tries again, instead of
  // dropping. It drops and counts as before, never waiting, when the option is off or is
  // turned off while it waits (the process layer does so when the collector is gone and
  // when the sender ends: at exit, after a lost connection), on the sender thread
  // (MarkSenderThread: it would wait for itself), and when the sender has not gone round
  // its loop for kSenderStallNs while it waits (a sender stuck on something the waiting
  // thread holds). PushTorchRecord never waits: the bridge's hook holds PyTorch's
  // allocator lock, which the sender's probe of the allocator may want.
  void set_wait_when_full(bool on);
  bool wait_when_full() const { return wait_when_full_.load(std::memory_order_relaxed); }
  // The calling thread is the sender: its Pushes never wait.
  static void MarkSenderThread();
  // Sender only: once per turn of its loop, so that a waiting Push knows it is alive.
  void SenderBeat() { sender_beats_.fetch_add(1, std::memory_order_relaxed); }
  static constexpr uint64_t kSenderStallNs = 2'000'000'000;
  void set_sender_stall_ns_for_tests(uint64_t ns) { sender_stall_ns_ = ns; }
  // Pushes that waited for room, and those that gave up waiting (then dropped).
  uint64_t waited_pushes() const { return waited_pushes_.load(std::memory_order_relaxed); }
  uint64_t waits_given_up() const { return waits_given_up_.load(std::memory_order_relaxed); }
  // The PyTorch bridge's events, one or two per tensor: the busiest path of all, so the
  // bridge builds the record in the ring's own layout on its stack before the lock (all but
  // size, type and flags, which this sets), and it is copied into the ring in one pass,
  // with no HostRecord between (which costs more to build and copy than the rest), in a
  // record of its own of 96 bytes, not 176 (shared_ring.h's TorchRecord).
  // TakeAll reads it back as a kTorchAllocator HostRecord. `attribution`: an ALLOC's module
  // and operators (`run --modules`, `--ops`), or nullptr. `stack`: as HostRecord::stack.
  bool PushTorchRecord(v1::ring::TorchRecord& record,
                       const v1::ring::TorchAttribution* attribution = nullptr,
                       const uint64_t* stack = nullptr, uint32_t stack_words = 0);
  // For the one record that must never be lost to a full ring, the process exit: written
  // into a reserve the other records never use.
  void PushPastCapacity(const HostRecord& record);
  // Sender only: appends the records written since the last call to *out (cleared first),
  // at most `max_records` of them (the rest wait for the next call), with the ring position
  // after each in *ends, and returns the drops since the last call; *dropped_total is the
  // running total of drops. A record's `stack` points into the queue until the next call.
  DropWindow TakeAll(std::vector<HostRecord>* out, std::vector<uint64_t>* ends = nullptr,
                     uint64_t* dropped_total = nullptr, size_t max_records = SIZE_MAX);
  // Sender only: records are written that TakeAll has not taken yet.
  bool HasUntaken() const;
  // Sender only: how far TakeAll has read (records, padding and damage skipped).
  uint64_t taken_position() const { return read_position_; }
  // What TakeAll found that no tracer writes (the program wrote over its ring), left out:
  // bytes where no record could start, and records whose sizes do not hold their fields.
  uint64_t damaged_bytes() const { return damaged_bytes_.load(std::memory_order_relaxed); }
  uint64_t damaged_records() const { return damaged_records_.load(std::memory_order_relaxed); }
  // Sender only: every record below `position` has reached the kernel's socket buffer.
  void Free(uint64_t position);
  // Sender only: makes the ring's pages up to kPopulateAhead past the write position present
  // and writable, until the whole ring is, so that no program thread takes the page fault of
  // a page's first use (in PyTorch programs, a push's first pass over the ring cost about
  // twice the later ones).
  void PopulateAhead();

  // Around fork (pthread_atfork): the forking thread holds the lock across fork(), so the
  // child never inherits a record half written.
  void LockBeforeFork() { lock_.lock(); }
  void UnlockInParentAfterFork() { lock_.unlock(); }
  // In the child: the parent's ring is the parent's stream. The child lets go of it without
  // writing to it and makes its own (Create) when its stream starts.
  void ResetInChildAfterFork();
  size_t capacity() const { return capacity_events_; }

 private:
  // Where a record of `size` bytes goes (the caller holds the lock): past a padding record
  // when it would wrap, leaving `reserve` bytes free; nullptr when the ring is too full.
  // *end is the write position once it is written (PublishLocked).
  unsigned char* ReserveLocked(uint64_t size, uint64_t reserve, uint64_t* end);
  void PublishLocked(uint64_t end);
  bool WriteLocked(const HostRecord& record, uint64_t reserve);
  void CountDropLocked(uint64_t timestamp_ns);
  // Whether a Push that found the ring full waits (the caller holds the lock); *since_ns
  // and *beats follow the sender's progress across the attempts of one Push.
  bool ShouldWaitLocked(uint64_t* since_ns, uint64_t* beats);
  // Waits until Free makes room (room_seq_ moves from `seq`), 1 ms at most.
  void WaitForRoom(uint32_t seq);
  void WakeRoomWaiters();
  // TakeAll's parts: a stack copied out of the ring for out's last record (pointed to once
  // taken_stack_words_ stops growing), and a TorchRecord of `size` bytes read into out.
  struct TakenStack {
    size_t record;  // index in out
    size_t offset;  // in taken_stack_words_
  };
  void TakeStack(const unsigned char* words, size_t count, std::vector<HostRecord>* out,
                 std::vector<TakenStack>* stacks);
  void ReadTorchRecord(const unsigned char* at, uint32_t size, std::vector<HostRecord>* out,
                       std::vector<TakenStack>* stacks);

  size_t capacity_events_;
  uint64_t ring_bytes_;
  uint64_t max_text_bytes_;
  RingLock lock_;
  v1::ring::Header* header_ = nullptr;
  unsigned char* data_ = nullptr;
  size_t mapping_bytes_ = 0;
  uint64_t extra_bytes_ = 0;  // mapped after the ring's data
  bool shared_ = false;
  uint64_t read_position_ = 0;  // the sender's
  uint64_t populated_ = 0;      // the sender's: ring bytes made present, from 0
  uint64_t drops_taken_ = 0;    // the sender's
  std::vector<uint64_t> taken_stack_words_;  // the sender's: stacks of the last TakeAll
  std::atomic<bool> wait_when_full_{false};
  // Moved by every Free (a futex word); waiters sleep on it.
  std::atomic<uint32_t> room_seq_{0};
  std::atomic<uint32_t> room_waiters_{0};
  std::atomic<uint64_t> sender_beats_{0};
  uint64_t sender_stall_ns_ = kSenderStallNs;
  std::atomic<uint64_t> waited_pushes_{0};
  std::atomic<uint64_t> waits_given_up_{0};
  std::atomic<uint64_t> damaged_bytes_{0};
  std::atomic<uint64_t> damaged_records_{0};
};

}  // namespace cumemtrace::tracer
