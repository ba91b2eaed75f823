// Follows the kernel log (/dev/kmsg) from now on: each read() returns one
// record; records overwritten before they are read are counted by the gap in
// their sequence numbers, never silently skipped.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "userspace/common/result.h"

namespace argus::kmsg {

class KmsgFollower {
 public:
  // Opens `path` (non-blocking) and moves to its end: a restarted agent does not
  // count the Xids of before it again (a counter that jumps at every restart
  // would fire every alert on increase()).
  static Result<KmsgFollower> open(const std::string& path);
  KmsgFollower(KmsgFollower&& other) noexcept;
  KmsgFollower& operator=(KmsgFollower&& other) noexcept;
  KmsgFollower(const KmsgFollower&) = delete;
  KmsgFollower& operator=(const KmsgFollower&) = delete;
  ~KmsgFollower();

  // Waits up to timeout_ms (-1: no limit) for records, or until wake_fd (when
  // >= 0) is readable, and hands each raw record to on_record. Returns the
  // records read, or a negative errno on a read error.
  int poll(int timeout_ms, const std::function<void(std::string_view)>& on_record, int wake_fd = -1);
  uint64_t lost() const { return lost_; }  // records overwritten before they were read

 private:
  explicit KmsgFollower(int fd) : fd_(fd) {}
  void note_seq(std::string_view record);
  int fd_ = -1;
  uint64_t last_seq_ = 0;
  bool have_seq_ = false;
  uint64_t lost_ = 0;
};

}  // namespace argus::kmsg
