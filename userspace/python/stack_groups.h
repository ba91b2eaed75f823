// Python stacks as the API shows them, and grouped across ranks: the
// python-stacks route's document, `argusctl stacks JOB` ("ranks 0-6 (7 ranks)")
// and the stacks a hang event carries share this one shape.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "userspace/python/py_runtime.h"

namespace argus::python {

// [{"native_thread_id", "namespace_thread_id", "thread_id", "truncated", "torn",
//   "frames": [{"function", "qualname", "file", "line"}] (innermost first)}]
nlohmann::json threads_json(const PyStackDump& d);
// GET /api/v1/ranks/{job_id}/{rank}/python-stacks:
// {"job_id", "rank", "pid", "python_version", "threads": threads_json}
nlohmann::json stacks_json(const std::string& job_id, int rank, int pid, const PyStackDump& d);

struct StackGroup {
  std::vector<int> ranks;   // ascending
  nlohmann::json threads;   // the first rank's threads_json
};
// Ranks whose threads show the same frames (function, file, line; thread ids and
// thread order ignored) form one group; the largest group first.
std::vector<StackGroup> group_stacks(const std::vector<std::pair<int, nlohmann::json>>& rank_threads);
// "ranks 0-6 (7 ranks)", "rank 7 (1 rank)", "ranks 0-2,5 (4 ranks)".
std::string rank_list_label(std::vector<int> ranks);
// [{"ranks": [...], "label", "threads"}]
nlohmann::json stack_groups_json(const std::vector<StackGroup>& groups);

// Text for a person: one rank's threads (with their ids), or the groups.
std::string format_threads(const nlohmann::json& threads, bool with_ids, const std::string& indent = "");
std::string format_stack_groups(const std::vector<StackGroup>& groups);

// The grouped stacks of these (rank, pid) pairs, read now, for a hang event:
// {"groups": stack_groups_json, "errors": [{"rank", "pid", "error"}]}, at most
// max_ranks ranks, max_frames frames a thread (bounded size).
nlohmann::json grouped_stacks_of(const std::vector<std::pair<int, int>>& rank_pids, PythonLocator& locator,
                                 const std::string& proc_root, size_t max_ranks = 16, size_t max_frames = 64);

}  // namespace argus::python
