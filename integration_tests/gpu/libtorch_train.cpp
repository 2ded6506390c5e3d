// A small LibTorch C++ training program with NVTX phases (forward / backward / optimizer).
// It knows nothing about cumemtrace. With --stats FILE it writes the caching allocator's own
// peaks so the GPU suite can compare them with cumemtrace's report.
#include <c10/cuda/CUDACachingAllocator.h>
#include <nvtx3/nvToolsExt.h>
#include <pthread.h>
#include <sched.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

struct Mlp : torch::nn::Module {
  Mlp(int depth, int width) {
    for (int i = 0; i < depth; ++i) {
      layers.push_back(register_module("fc" + std::to_string(i), torch::nn::Linear(width, width)));
    }
    head = register_module("head", torch::nn::Linear(width, 10));
  }
  torch::Tensor forward(torch::Tensor x) {
    for (auto& layer : layers) x = torch::relu(layer->forward(x));
    return head->forward(x);
  }
  std::vector<torch::nn::Linear> layers;
  torch::nn::Linear head{nullptr};
};

int main(int argc, char** argv) {
  int depth = 8, width = 2048, batch = 256, steps = 5, exit_code = 0, pin = -1;
  bool nvtx = true;  // --no-nvtx: the unlabeled twin, for inferred phases
  std::string stats_path;
  std::string timing_path;  // --timing FILE ("-": stdout): median ms per step, as JSON
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--no-nvtx")) {
      nvtx = false;
      continue;
    }
    if (i + 1 >= argc) break;
    if (!strcmp(argv[i], "--depth")) depth = std::stoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--width")) width = std::stoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--batch")) batch = std::stoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--steps")) steps = std::stoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--stats")) stats_path = argv[i + 1];
    else if (!strcmp(argv[i], "--timing")) timing_path = argv[i + 1];
    else if (!strcmp(argv[i], "--exit-code")) exit_code = std::stoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--pin")) pin = std::stoi(argv[i + 1]);
    ++i;
  }
  auto push = [nvtx](const char* name) {
    if (nvtx) nvtxRangePushA(name);
  };
  auto pop = [nvtx] {
    if (nvtx) nvtxRangePop();
  };
  if (pin >= 0) {
    // --pin CPU: this thread alone on one CPU, for timings (benchmarks/gpu/overhead.py).
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(pin, &set);
    pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
  }
  torch::manual_seed(0);
  torch::Device device(torch::kCUDA, 0);
  auto model = std::make_shared<Mlp>(depth, width);
  model->to(device);
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-3));
  auto x = torch::randn({batch, width}, device);
  auto y = torch::randint(0, 10, {batch}, torch::TensorOptions().device(device).dtype(torch::kLong));
  torch::Tensor loss;
  std::vector<double> step_ms;
  for (int step = 0; step < steps; ++step) {
    const auto started = std::chrono::steady_clock::now();
    push("forward");
    loss = torch::nn::functional::cross_entropy(model->forward(x), y);
    pop();
    push("backward");
    loss.backward();
    pop();
    push("optimizer");
    optimizer.step();
    optimizer.zero_grad(true);
    pop();
    if (!timing_path.empty()) {
      torch::cuda::synchronize();
      step_ms.push_back(std::chrono::duration<double, std::milli>(
                            std::chrono::steady_clock::now() - started)
                            .count());
    }
  }
  torch::cuda::synchronize();
  printf("final loss %.4f\n", loss.item<float>());
  if (!timing_path.empty() && step_ms.size() > 3) {
    // The first steps build caches and workspaces: leave them out.
    std::vector<double> steady(step_ms.begin() + 3, step_ms.end());
    std::sort(steady.begin(), steady.end());
    FILE* out = timing_path == "-" ? stdout : fopen(timing_path.c_str(), "w");
    fprintf(out, "{\"libtorch\": %.4f}\n", steady[(steady.size() - 1) / 2]);
    if (out != stdout) fclose(out);
  }
  if (!stats_path.empty()) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(0);
    FILE* out = fopen(stats_path.c_str(), "w");
    fprintf(out, "{\"max_memory_allocated\": %lld, \"max_memory_reserved\": %lld}\n",
            static_cast<long long>(stats.allocated_bytes[0].peak),
            static_cast<long long>(stats.reserved_bytes[0].peak));
    fclose(out);
  }
  return exit_code;
}
