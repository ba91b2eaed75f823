// The agent's own counts of what it received, skipped, refused, capped or
// failed at: one mechanism for every part of the agent. A count is kept per
// label of a vocabulary enum (vocab.h) and exported as the family
// agent_metrics.h names for it, so a new reason is one enum value, counted
// where it happens.
//
// Components take an AgentCounters* (null in tests that do not look).
// Increments are relaxed atomics: the event loop, the HTTP threads and the
// workers count, and any thread reads.
#pragma once
#include <array>
#include <atomic>
#include <cstdint>
#include <tuple>

#include "userspace/model/vocab.h"

namespace argus {

// Counts with no label.
enum class AgentCount : uint8_t {
  kRingbufPollErrors,      // ring-buffer polls that failed (not a signal)
  kMalformedRecords,       // ring-buffer records the decoder refused
  kTcpUnattributed,        // TCP retransmits of sockets no rank was found to own
  kCollectivesUnnumbered,  // late-attached ranks' calls held back and never numbered
  kCommsUnseen,            // communicator handles whose making the agent missed, named by first use
  kP2pUnpaired,            // sends and receives not paired here: a side's rank unknown, or the peer elsewhere
};
template <>
inline constexpr unsigned kVocabSize<AgentCount> = 6;

// A plain copy of every count, for snapshots.
class AgentCounterValues {
 public:
  template <typename E>
  uint64_t get(E label) const {
    return std::get<Row<E>>(rows_).n[static_cast<size_t>(label)];
  }
  template <typename E>
  void set(E label, uint64_t n) {
    std::get<Row<E>>(rows_).n[static_cast<size_t>(label)] = n;
  }

 private:
  template <typename E>
  struct Row {  // one type per vocabulary, though two may be as long
    std::array<uint64_t, kVocabSize<E>> n{};
  };
  std::tuple<Row<EventSource>, Row<SkipReason>, Row<Cap>, Row<Numbering>, Row<AgentCount>> rows_{};
};

class AgentCounters {
 public:
  template <typename E>
  void add(E label, uint64_t n = 1) {
    std::get<Row<E>>(rows_).n[static_cast<size_t>(label)].fetch_add(n, std::memory_order_relaxed);
  }
  template <typename E>
  uint64_t get(E label) const {
    return std::get<Row<E>>(rows_).n[static_cast<size_t>(label)].load(std::memory_order_relaxed);
  }
  AgentCounterValues values() const {
    AgentCounterValues out;
    copy_into<EventSource>(out);
    copy_into<SkipReason>(out);
    copy_into<Cap>(out);
    copy_into<Numbering>(out);
    copy_into<AgentCount>(out);
    return out;
  }

 private:
  template <typename E>
  struct Row {
    std::array<std::atomic<uint64_t>, kVocabSize<E>> n{};
  };
  template <typename E>
  void copy_into(AgentCounterValues& out) const {
    for (unsigned i = 0; i < kVocabSize<E>; ++i) out.set(static_cast<E>(i), get(static_cast<E>(i)));
  }
  std::tuple<Row<EventSource>, Row<SkipReason>, Row<Cap>, Row<Numbering>, Row<AgentCount>> rows_{};
};

// Counts into `counters` when there is one (tests may pass none).
template <typename E>
inline void count_into(AgentCounters* counters, E label, uint64_t n = 1) {
  if (counters != nullptr && n != 0) counters->add(label, n);
}

}  // namespace argus
