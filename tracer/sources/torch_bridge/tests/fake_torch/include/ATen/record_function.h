// A stand-in for the part of torch's ATen/record_function.h the bridge shim uses (its
// RecordFunction callbacks, `run --ops`), so that the shim's operator code is compiled here
// too. Only declarations: the shim finds at::addGlobalCallback and RecordFunction::name in
// the loaded libtorch_cpu at run time, which the tests do not load.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>

namespace at {

enum class RecordScope : uint8_t { FUNCTION = 0, BACKWARD_FUNCTION, TORCHSCRIPT_FUNCTION };

struct ObserverContext {
  virtual ~ObserverContext() = default;
};

class RecordFunction {
 public:
  int64_t seqNr() const { return seq_nr_; }
  RecordScope scope() const { return scope_; }
  uint64_t threadId() const { return thread_id_; }
  uint64_t forwardThreadId() const { return fwd_thread_id_; }
  const char* name() const;

 private:
  int64_t seq_nr_ = -1;
  RecordScope scope_ = RecordScope::FUNCTION;
  uint64_t thread_id_ = 0;
  uint64_t fwd_thread_id_ = 0;
};

using CallbackHandle = uint64_t;

class RecordFunctionCallback {
 public:
  using StartCallback = std::unique_ptr<ObserverContext> (*)(const RecordFunction&);
  using EndCallback = void (*)(const RecordFunction&, ObserverContext*);
  explicit RecordFunctionCallback(StartCallback start, EndCallback end = nullptr)
      : start_(start), end_(end) {}
  RecordFunctionCallback& needsInputs(bool needs) {
    inputs_ = needs;
    return *this;
  }
  RecordFunctionCallback& scopes(std::initializer_list<RecordScope> scopes) {
    scopes_ = scopes.size();
    return *this;
  }

 private:
  StartCallback start_;
  EndCallback end_;
  bool inputs_ = false;
  size_t scopes_ = 0;
};

CallbackHandle addGlobalCallback(RecordFunctionCallback callback);

}  // namespace at
