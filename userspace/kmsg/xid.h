// GPU Xid errors as the NVIDIA driver writes them to the kernel log:
//   NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.
//   NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception ...
//   NVRM: Xid (0000:03:00): 31, Ch 00000010, ...              (older drivers: no "PCI:")
// Parsing is on plain strings (tested on hostile ones); XidTracker counts them
// and names the ranks on the GPU, by the line's pid or by the rank -> GPU map.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "userspace/model/event.h"

namespace argus::kmsg {

// One /dev/kmsg record: "PRIO,SEQ,TS_USEC,FLAGS[,...];MESSAGE\n[ KEY=VALUE\n]...".
struct KmsgRecord {
  int facility = 0;
  int level = 0;
  uint64_t seq = 0;
  uint64_t ts_usec = 0;  // since boot
  std::string message;   // the text after ';', without the continuation lines
};
std::optional<KmsgRecord> parse_kmsg_record(std::string_view raw);

struct XidLine {
  std::string pci_bus_id;  // "0000:3b:00": lower case, a 4-digit domain, as the driver names the GPU
  int xid = 0;
  int pid = -1;            // -1 when the line has none or '<unknown>'
  std::string name;        // the process name, "" when none
  std::string detail;      // the rest of the line
};
enum class XidParse { kNotXid, kXid, kMalformed };
// kNotXid: the text has no "NVRM: Xid"; kMalformed: it has, and does not parse.
XidParse parse_xid(std::string_view message, XidLine& out);

// A short meaning for the well-known codes, "" for the others.
std::string_view xid_meaning(int xid);

// A rank as the Xid mapping sees it.
struct XidRank {
  std::string job_id;
  int rank = -1;
  int pid = 0;
  int gpu_index = -1;     // CUDA index on this node, -1 unknown
};

struct XidCounts {
  std::map<std::pair<std::string, std::string>, uint64_t> errors;  // (pci_bus_id, xid) -> lines
  uint64_t malformed = 0;  // lines with "NVRM: Xid" that did not parse
  uint64_t lost = 0;       // kernel log records overwritten before they were read
  uint64_t dropped = 0;    // lines counted nowhere: the (GPU, code) series were at their cap
};

// (pci_bus_id, xid) series kept: a node has at most a few dozen GPUs and codes,
// so only hostile lines reach it.
inline constexpr size_t kMaxXidSeries = 1024;

class XidTracker {
 public:
  // One kernel log message. Returns the xid events: one per rank on that GPU
  // (by the line's pid, else by the GPU's index: gpu_index_by_pci maps
  // "0000:3b:00" to the CUDA index), or one with no rank when none is found.
  std::vector<DetectedEvent> on_message(std::string_view message, double now_unix, const std::vector<XidRank>& ranks,
                                        const std::map<std::string, int>& gpu_index_by_pci);
  void count_lost(uint64_t n);
  XidCounts counts() const;

 private:
  mutable std::mutex mu_;
  XidCounts counts_;
};

// "0000:1b:00.0" (sysfs) -> "0000:1b:00" (the driver's form), "" when not a PCI address.
std::string driver_bus_id(std::string_view pci_address);

}  // namespace argus::kmsg
