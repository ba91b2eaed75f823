// The event log (events/event_log.h): its one RFC 3339 formatter, which events, RDMA events
// included, use, and an event as the contract shapes it.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "userspace/events/event_log.h"

namespace argus {
namespace {

TEST(EventLogRfc3339, ExactValues) {
  EXPECT_EQ(rfc3339(1700000000), "2023-11-14T22:13:20.000Z");
  EXPECT_EQ(rfc3339(1700000000.5), "2023-11-14T22:13:20.500Z");
  EXPECT_EQ(rfc3339(1700000000.123), "2023-11-14T22:13:20.123Z");  // not .122 (binary fraction)
  EXPECT_EQ(rfc3339(1790000000.25), "2026-09-21T14:13:20.250Z");
  EXPECT_EQ(rfc3339(0), "1970-01-01T00:00:00.000Z");
}

// x.9996 s is closer to the next second: it carries, never prints as x.000 (a second early)
// or as x.1000.
TEST(EventLogRfc3339, CarriesIntoTheNextSecond) {
  EXPECT_EQ(rfc3339(1700000000.9996), "2023-11-14T22:13:21.000Z");
  EXPECT_EQ(rfc3339(1700000039.9999), "2023-11-14T22:14:00.000Z");
  EXPECT_EQ(rfc3339(1700000000.9994), "2023-11-14T22:13:20.999Z");
  EXPECT_EQ(rfc3339(1704067199.9997), "2024-01-01T00:00:00.000Z");  // into the next year
}

TEST(EventLogRfc3339, OutOfRangeIsClamped) {
  EXPECT_EQ(rfc3339(-5), "1970-01-01T00:00:00.000Z");
  EXPECT_EQ(rfc3339(std::nan("")), "1970-01-01T00:00:00.000Z");
  EXPECT_EQ(rfc3339(std::numeric_limits<double>::infinity()), "1970-01-01T00:00:00.000Z");
  EXPECT_EQ(rfc3339(1e300), "9999-12-31T23:59:59.999Z");
}

TEST(Detectors, EventsAsTheContractShapesThem) {
  AgentCounters caps;
  EventLog log(3, &caps);
  for (int i = 0; i < 5; ++i) {
    DetectedEvent e;
    e.time = 1700000000.25 + i;
    e.kind = EventKind::kStraggler;
    e.job_id = "j";
    e.rank = i;
    e.summary = "s";
    log.add(e);
  }
  EXPECT_EQ(caps.get(Cap::kDetectedEvents), 2u);
  auto since = log.since(1700000003);
  ASSERT_EQ(since.size(), 2u);
  auto j = event_to_json(since[0]);
  EXPECT_EQ(j["time"], "2023-11-14T22:13:23.250Z");
  EXPECT_EQ(j["kind"], "straggler");
  EXPECT_EQ(j["rank"], 3);
  EXPECT_TRUE(j["device"].is_null());
  EXPECT_TRUE(j.contains("evidence"));
}

}  // namespace
}  // namespace argus
