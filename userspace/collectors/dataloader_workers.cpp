#include "userspace/collectors/dataloader_workers.h"

#include <algorithm>

#include "userspace/procfs/proc_children.h"

namespace argus {

DataLoaderWorkers::DataLoaderWorkers(std::string proc_root, double keep_seconds, long ticks_per_second)
    : proc_root_(std::move(proc_root)),
      keep_s_(keep_seconds),
      ticks_per_s_(ticks_per_second > 0 ? static_cast<double>(ticks_per_second) : 100.0) {}

void DataLoaderWorkers::sample(int pid, double now) {
  if (now < next_) return;
  next_ = now + kSampleSeconds;
  const auto children = procfs::read_children(proc_root_, pid);
  if (!children) return;  // gone, or a kernel without the children file: nothing to add
  Point p = history_.empty() ? Point{} : history_.back();
  p.t = now;
  p.workers = 0;
  std::map<int, Counters> seen;
  for (int child : *children) {
    const auto st = procfs::read_stat(proc_root_, child);
    if (!st || st->comm != kWorkerName) continue;  // another child (a compile worker, a shell)
    const auto io = procfs::read_io(proc_root_, child);
    Counters now_c{st->utime_ticks + st->stime_ticks, io ? io->rchar : 0, io ? io->read_bytes : 0};
    ++p.workers;
    // Counted from when it was first seen: a worker's CPU before that is not this span's.
    if (auto it = last_.find(child); it != last_.end()) {
      const Counters& was = it->second;
      p.cpu_s += static_cast<double>(now_c.cpu_ticks - std::min(now_c.cpu_ticks, was.cpu_ticks)) / ticks_per_s_;
      p.rchar += static_cast<double>(now_c.rchar - std::min(now_c.rchar, was.rchar));
      p.read_bytes += static_cast<double>(now_c.read_bytes - std::min(now_c.read_bytes, was.read_bytes));
    }
    seen[child] = now_c;
  }
  last_ = std::move(seen);  // a worker that exited is dropped with its last counters
  history_.push_back(p);
  while (history_.size() > 2 && history_.front().t < now - keep_s_) history_.pop_front();
}

InputWorkersView DataLoaderWorkers::rates(double span_s) const {
  InputWorkersView v;
  if (history_.size() < 2) return v;
  const Point& end = history_.back();
  const Point* start = &history_.front();
  for (const auto& p : history_)
    if (p.t >= end.t - span_s - kSampleSeconds / 2) {
      start = &p;
      break;
    }
  if (start == &end) start = &history_[history_.size() - 2];
  const double dt = end.t - start->t;
  if (dt <= 0) return v;
  v.valid = true;
  v.workers = end.workers;
  v.seconds = dt;
  v.cpu_per_s = (end.cpu_s - start->cpu_s) / dt;
  v.rchar_per_s = (end.rchar - start->rchar) / dt;
  v.read_bytes_per_s = (end.read_bytes - start->read_bytes) / dt;
  return v;
}

}  // namespace argus
