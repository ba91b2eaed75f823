// Every Python thread's stack of one process, read from outside without
// stopping it (GET .../python-stacks, hang evidence).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "userspace/common/result.h"
#include "userspace/model/vocab.h"

namespace argus::python {

struct PyFrame {
  std::string function;  // co_name
  std::string qualname;  // co_qualname (3.11+); = function on 3.10
  std::string file;      // co_filename
  int line = 0;          // 0 when the line could not be computed
};
struct PyThreadStack {
  uint64_t thread_id = 0;  // tstate->thread_id (pthread_t)
  int native_tid = 0;      // in the host's PID namespace; 0 when unknown
  int namespace_tid = 0;   // as the process sees it (its own PID namespace)
  std::vector<PyFrame> frames;  // innermost first
  bool truncated = false;  // deeper than DumpOptions::max_frames
  bool torn = false;       // the thread moved while read, after every retry
};
struct PyStackDump {
  std::string version;     // "3.12.1"
  std::vector<PyThreadStack> threads;
};

// Why a process's stacks could not be read (LocateError), and a line saying so.
using LocateFailure = KindError<LocateError>;

}  // namespace argus::python
