// A BpfBackend with no BPF behind it, for runtime tests on fake /proc trees:
// attaches fail, maps read empty, and the records a test queues (seen()) reach
// the runtime's event handler at its next poll. Tests that need map contents
// derive from it and override the reads they feed.
#pragma once
#include <cstring>
#include <deque>
#include <string>

#include "userspace/probes/bpf_backend.h"

namespace argus::testing_support {

class QuietBackend : public BpfBackend {
 public:
  Result<Link> attach_uprobe(const std::string&, const ProbeSpec&) override { return make_error("no BPF here"); }
  Result<Link> attach_gpu_usdt(const std::string&, bool) override { return make_error("no BPF here"); }
  bool set_tgid_state(uint32_t, argus_tgid_state) override { return true; }
  void forget_tgid(uint32_t) override {}
  std::vector<StatEntry> read_stats(uint32_t) const override { return {}; }
  void delete_stats(uint32_t) override {}
  std::map<uint32_t, uint64_t> read_errors() const override { return {}; }
  std::vector<InflightCall> read_inflight_waits() const override { return {}; }
  void delete_seqs(uint32_t) override {}
  void set_event_handler(EventHandler h) override { handler = std::move(h); }
  int poll_events(int) override {
    int n = 0;
    for (; !records.empty(); records.pop_front(), ++n) handler(records.front().data(), records.front().size());
    return n;
  }
  // The first NCCL call of `pid` at `ts`, as the BPF side reports a new process.
  void seen(int pid, uint64_t ts) {
    argus_tgid_seen_event ev{};
    ev.hdr = {ARGUS_EV_TGID_SEEN, static_cast<uint32_t>(pid), static_cast<uint32_t>(pid), 0, ts};
    ev.source = ARGUS_SRC_NCCL;
    std::string bytes(sizeof(ev), '\0');
    std::memcpy(bytes.data(), &ev, sizeof(ev));
    records.push_back(std::move(bytes));
  }

  EventHandler handler;
  std::deque<std::string> records;
};

}  // namespace argus::testing_support
