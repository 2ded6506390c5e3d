#include "collector/engine/job_summary.h"

#include <algorithm>

#include "collector/engine/engine.h"

namespace cumemtrace::internal {

void AddJobSummary(Report* report) {
  JobReport& job = report->job;
  for (const ProcessReport& p : report->processes) {
    if (p.rank < 0) continue;
    // A rank's device: the one where its memory peaked highest (DDP: one GPU per rank).
    auto device = std::max_element(
        p.devices.begin(), p.devices.end(),
        [](const DeviceReport& a, const DeviceReport& b) { return a.peak.bytes < b.peak.bytes; });
    if (device == p.devices.end()) continue;  // a launcher or helper that used no GPU
    RankFigures r;
    r.rank = p.rank;
    r.local_rank = p.local_rank;
    r.pid = p.pid;
    r.hostname = p.hostname;
    r.device = device->index;
    r.device_uuid = device->uuid;
    r.peak_bytes = device->peak.bytes;
    r.peak_abs_ns = device->peak.time_abs_ns;
    for (const auto& [library, stats] : device->by_library) {
      if (library.rfind("libnccl", 0) == 0) r.nccl_bytes_at_peak += stats.live_at_peak_bytes;
    }
    for (const PhaseReport& phase : p.phases) {
      for (const PhaseDeviceStats& d : phase.devices) {
        if (d.index == device->index) r.phase_peak_bytes[phase.name] = d.peak_bytes;
      }
    }
    job.world_size = std::max(job.world_size, p.world_size);
    job.ranks.push_back(std::move(r));
  }
  if (job.ranks.empty()) return;
  std::sort(job.ranks.begin(), job.ranks.end(),
            [](const RankFigures& a, const RankFigures& b) { return a.rank < b.rank; });
  job.lowest_peak_bytes = job.ranks[0].peak_bytes;
  for (const RankFigures& r : job.ranks) {
    if (r.peak_bytes > job.highest_peak_bytes) {
      job.highest_peak_bytes = r.peak_bytes;
      job.highest_rank = r.rank;
    }
    job.lowest_peak_bytes = std::min(job.lowest_peak_bytes, r.peak_bytes);
    AddOnce(job.hosts, r.hostname);
  }
  job.imbalance = job.highest_peak_bytes == 0
                      ? 0.0
                      : static_cast<double>(job.highest_peak_bytes - job.lowest_peak_bytes) /
                            static_cast<double>(job.highest_peak_bytes);
}

}  // namespace cumemtrace::internal
