#include "userspace/detect/rank_exit.h"

#include <signal.h>

#include <cstdio>
#include <cstring>

#include "userspace/detect/gpu_memory.h"

namespace argus {
namespace {

std::string sender_text(const ExitCause& c) {
  if (c.sender_pid == 0) return " from the kernel";
  if (c.sender_pid > 0) return " from pid " + std::to_string(c.sender_pid) + " (`" + c.sender_comm + "`)";
  return "";
}

// Killed (a fatal signal, the OOM killer's among them) rather than exited
// (after running out of GPU memory, among others).
bool was_killed(const RankSnapshot& r) {
  if (r.exit_reason == ExitReason::kOom) return r.exit_cause.oom || r.exit_cause.signal != 0;
  return r.exit_reason == ExitReason::kSignal;
}

// The rank's own end, after a GPU out-of-memory that was its cause.
std::string after_gpu_oom(const RankSnapshot& r) {
  std::string how = r.exit_cause.signal != 0 ? "killed by " + signal_name(r.exit_cause.signal)
                    : r.exit_code >= 0         ? "exited with code " + std::to_string(r.exit_code)
                                               : "ended";
  return how + " after running out of GPU memory: " + gpu_oom_phrase(r.exit_cause.gpu_oom);
}

std::string oom_text(const nlohmann::json& oom) {
  if (!oom.is_object() || !oom.contains("cgroup")) return "";
  const std::string cg = oom.value("cgroup", "");
  if (oom.contains("limit_bytes") && oom["limit_bytes"].is_number())
    return ": memory cgroup " + cg + " at its " + format_bytes(oom["limit_bytes"].get<uint64_t>()) + " limit";
  return ": memory cgroup " + cg + " has no limit (the node ran out of memory)";
}

}  // namespace

std::string signal_name(int sig) {
  if (sig >= SIGRTMIN && sig <= SIGRTMAX) {
    return sig == SIGRTMIN ? "SIGRTMIN" : "SIGRTMIN+" + std::to_string(sig - SIGRTMIN);
  }
  if (sig > 0 && sig < SIGRTMIN) {
    if (const char* abbrev = sigabbrev_np(sig)) return std::string("SIG") + abbrev;
  }
  return "signal " + std::to_string(sig);
}

std::string format_bytes(uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  size_t u = 0;
  while (v >= 1024 && u + 1 < std::size(kUnits)) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  if (u == 0 || v == static_cast<double>(static_cast<uint64_t>(v)))
    std::snprintf(buf, sizeof(buf), "%.0f %s", v, kUnits[u]);
  else
    std::snprintf(buf, sizeof(buf), "%.1f %s", v, kUnits[u]);
  return buf;
}

std::string exit_phrase(const RankSnapshot& r) {
  const ExitCause& c = r.exit_cause;
  if (r.exit_reason == ExitReason::kOom && !c.oom) return after_gpu_oom(r);
  if (r.exit_reason == ExitReason::kOom) return "killed by the OOM killer" + oom_text(c.oom_details);
  if (r.exit_reason == ExitReason::kSignal) return "killed by " + signal_name(r.exit_code) + sender_text(c);
  if (r.exit_code < 0) return "ended (its exit code was not seen)";
  return "exited with code " + std::to_string(r.exit_code);
}

nlohmann::json exit_evidence(const RankSnapshot& r) {
  const ExitCause& c = r.exit_cause;
  const bool killed = was_killed(r);
  const int sig = c.signal != 0 ? c.signal : (r.exit_reason == ExitReason::kSignal ? r.exit_code : 0);
  nlohmann::json j = {{"pid", r.pid}, {"reason", label_of(r.exit_reason)}};
  j["code"] = !killed && r.exit_code >= 0 ? nlohmann::json(r.exit_code) : nlohmann::json(nullptr);
  j["signal"] = sig != 0 ? nlohmann::json(sig) : nlohmann::json(nullptr);
  j["signal_name"] = sig != 0 ? nlohmann::json(signal_name(sig)) : nlohmann::json(nullptr);
  j["sender"] =
      c.sender_pid >= 0 ? nlohmann::json{{"pid", c.sender_pid}, {"comm", c.sender_comm}} : nlohmann::json(nullptr);
  j["oom"] = c.oom ? (c.oom_details.empty() ? nlohmann::json::object() : c.oom_details) : nlohmann::json(nullptr);
  j["last_python_stack"] = c.last_python_stack;
  j["gpu_oom"] = r.exit_reason == ExitReason::kOom && !c.oom ? c.gpu_oom : nlohmann::json(nullptr);
  return j;
}

DetectedEvent rank_exit_event(const RankSnapshot& r, double now_unix) {
  DetectedEvent ev;
  ev.time = now_unix;
  ev.kind = EventKind::kRankExit;
  ev.job_id = r.job_id;
  ev.rank = r.rank;
  ev.summary = "rank " + std::to_string(r.rank) + " of job " + r.job_id + " (pid " + std::to_string(r.pid) + ") " +
               (was_killed(r) ? "was " : "") + exit_phrase(r);
  ev.evidence = exit_evidence(r);
  return ev;
}

}  // namespace argus
