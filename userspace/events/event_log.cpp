#include "userspace/events/event_log.h"

#include <cmath>
#include <cstdio>
#include <ctime>

namespace argus {

void EventLog::add(DetectedEvent ev) {
  std::lock_guard lock(mu_);
  events_.push_back(std::move(ev));
  while (events_.size() > capacity_) {
    events_.pop_front();
    count_into(counters_, Cap::kDetectedEvents);
  }
}

std::vector<DetectedEvent> EventLog::since(double unix_seconds) const {
  std::lock_guard lock(mu_);
  std::vector<DetectedEvent> out;
  for (const auto& e : events_)
    if (e.time >= unix_seconds) out.push_back(e);
  return out;
}


std::string rfc3339(double unix_seconds) {
  // Whole milliseconds first, then split: rounding the fraction alone could print
  // x.9996 s as "x.000" (a second early) or ".1000".
  constexpr double kLast = 253402300799.999;  // 9999-12-31T23:59:59.999Z
  if (!std::isfinite(unix_seconds) || unix_seconds < 0) unix_seconds = 0;
  if (unix_seconds > kLast) unix_seconds = kLast;
  const long long total_ms = std::llround(unix_seconds * 1000.0);
  const auto secs = static_cast<time_t>(total_ms / 1000);
  const int millis = static_cast<int>(total_ms % 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, millis);
  return buf;
}

nlohmann::json event_to_json(const DetectedEvent& ev) {
  nlohmann::json j;
  j["time"] = rfc3339(ev.time);
  j["unix_time"] = ev.time;
  j["kind"] = label_of(ev.kind);
  j["job_id"] = ev.job_id.empty() ? nlohmann::json() : nlohmann::json(ev.job_id);
  j["rank"] = ev.rank < 0 ? nlohmann::json() : nlohmann::json(ev.rank);
  j["device"] = ev.device.empty() ? nlohmann::json() : nlohmann::json(ev.device);
  j["port"] = ev.port < 0 ? nlohmann::json() : nlohmann::json(ev.port);
  j["summary"] = ev.summary;
  j["evidence"] = ev.evidence;
  return j;
}

}  // namespace argus
