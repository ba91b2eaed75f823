// A rank's DataLoader workers and what they cost: the processes its main
// thread forked whose name torch set to "pt_data_worker" (_worker_loop), their
// CPU time and reads summed, sampled about once a second. A rank waiting for
// its batches either has workers that cannot keep up (CPU-bound: their CPU per
// second near their count; I/O-bound: reading) or none (the batch is made in
// its main thread). Read from /proc: the workers are never touched.
#pragma once
#include <deque>
#include <map>
#include <string>

#include "userspace/model/snapshot.h"

namespace argus {

class DataLoaderWorkers {
 public:
  static constexpr const char* kWorkerName = "pt_data_worker";
  static constexpr double kSampleSeconds = 1.0;

  DataLoaderWorkers(std::string proc_root, double keep_seconds, long ticks_per_second);

  // Samples rank `pid`'s workers at `now` when a second has passed since the
  // last sample. A rank whose children cannot be read keeps its history.
  void sample(int pid, double now);
  // Their CPU seconds and bytes read per second over the last `span_s` (or the
  // longest span the samples cover, at least one sample period), and how many
  // there were at the last sample; invalid before two samples.
  InputWorkersView rates(double span_s) const;

 private:
  struct Counters {
    uint64_t cpu_ticks = 0, rchar = 0, read_bytes = 0;
  };
  struct Point {
    double t = 0;
    double cpu_s = 0, rchar = 0, read_bytes = 0;  // summed over the workers since the first sample
    int workers = 0;
  };
  std::string proc_root_;
  double keep_s_;
  double ticks_per_s_;
  double next_ = 0;
  std::map<int, Counters> last_;  // worker pid -> its counters at the last sample
  std::deque<Point> history_;
};

}  // namespace argus
