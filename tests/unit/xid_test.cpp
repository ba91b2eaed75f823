// GPU Xid lines as the NVIDIA driver writes them, /dev/kmsg records, and the
// events that name the ranks on the GPU.
#include "userspace/kmsg/xid.h"

#include <gtest/gtest.h>

namespace argus::kmsg {
namespace {

TEST(KmsgRecord, ParsesHeaderMessageAndDropsContinuationLines) {
  auto r = parse_kmsg_record("4,1234,5678901,-;NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n"
                             " SUBSYSTEM=pci\n DEVICE=+pci:0000:3b:00.0\n");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->facility, 0);
  EXPECT_EQ(r->level, 4);
  EXPECT_EQ(r->seq, 1234u);
  EXPECT_EQ(r->ts_usec, 5678901u);
  EXPECT_EQ(r->message, "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.");
  auto user = parse_kmsg_record("12,7,8,-,caller=T1;hello");  // facility 1 (user), extra header fields
  ASSERT_TRUE(user);
  EXPECT_EQ(user->facility, 1);
  EXPECT_EQ(user->message, "hello");
  for (const char* bad : {"", "no semicolon", "x,1,2,-;m", "4,1;m", "4,,2,-;m", "4,1,99999999999999999999999,-;m"})
    EXPECT_FALSE(parse_kmsg_record(bad)) << bad;
}

TEST(Xid, ParsesTheDriversForms) {
  XidLine x;
  ASSERT_EQ(parse_xid("NVRM: Xid (PCI:0000:3B:00): 79, pid=1234, name=python, GPU has fallen off the bus.", x),
            XidParse::kXid);
  EXPECT_EQ(x.pci_bus_id, "0000:3b:00");
  EXPECT_EQ(x.xid, 79);
  EXPECT_EQ(x.pid, 1234);
  EXPECT_EQ(x.name, "python");
  EXPECT_EQ(x.detail, "GPU has fallen off the bus.");

  ASSERT_EQ(parse_xid("NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception on "
                      "(GPC 7, TPC 1, SM 0): Out Of Range Address",
                      x),
            XidParse::kXid);
  EXPECT_EQ(x.pci_bus_id, "0000:cb:00");
  EXPECT_EQ(x.xid, 13);
  EXPECT_EQ(x.pid, -1);
  EXPECT_EQ(x.name, "");
  EXPECT_EQ(x.detail, "Graphics SM Warp Exception on (GPC 7, TPC 1, SM 0): Out Of Range Address");

  // Older drivers: no "PCI:", no pid; an 8-digit domain and a function as NVML writes them.
  ASSERT_EQ(parse_xid("NVRM: Xid (0000:03:00): 31, Ch 00000010, engmask 00000101", x), XidParse::kXid);
  EXPECT_EQ(x.pci_bus_id, "0000:03:00");
  EXPECT_EQ(x.xid, 31);
  EXPECT_EQ(x.detail, "Ch 00000010, engmask 00000101");
  ASSERT_EQ(parse_xid("NVRM: Xid (PCI:00000000:1B:00.0): 48, An uncorrectable double bit error", x), XidParse::kXid);
  EXPECT_EQ(x.pci_bus_id, "0000:1b:00");
  EXPECT_EQ(x.xid, 48);
  ASSERT_EQ(parse_xid("NVRM: Xid (PCI:0000:1b:00): 94", x), XidParse::kXid);  // nothing after the code
  EXPECT_EQ(x.xid, 94);
  EXPECT_EQ(x.detail, "");
}

TEST(Xid, HostileLinesAreMalformedOrNotXid) {
  XidLine x;
  EXPECT_EQ(parse_xid("usb 1-1: new device", x), XidParse::kNotXid);
  EXPECT_EQ(parse_xid("NVRM: GPU at PCI:0000:3b:00: GPU-abc", x), XidParse::kNotXid);
  for (const char* bad : {"NVRM: Xid", "NVRM: Xid (PCI:0000:zz:00): 79, x", "NVRM: Xid (PCI:0000:3b): 79, x",
                          "NVRM: Xid (PCI:0000:3b:00): , x", "NVRM: Xid (PCI:0000:3b:00): 0, x",
                          "NVRM: Xid (PCI:0000:3b:00): 99999999, x", "NVRM: Xid (PCI:0000:3b:00) 79, x",
                          "NVRM: Xid (PCI:0000:3b:00.9): 79", "NVRM: Xid (PCI:123456789:3b:00): 79",
                          "NVRM: Xid junk (PCI:0000:3b:00): 79", "NVRM: Xid (PCI:0000:3b:00): -5, x",
                          "NVRM: Xid (PCI:0000:3b:00): 79x, pid=1"})
    EXPECT_EQ(parse_xid(bad, x), XidParse::kMalformed) << bad;
  // A pid that is not a number is dropped, not trusted.
  ASSERT_EQ(parse_xid("NVRM: Xid (PCI:0000:3b:00): 43, pid=12ab, name=x, reset", x), XidParse::kXid);
  EXPECT_EQ(x.pid, -1);
  EXPECT_EQ(x.name, "x");
  std::string long_line = "NVRM: Xid (PCI:0000:3b:00): 13, " + std::string(10000, 'A');
  ASSERT_EQ(parse_xid(long_line, x), XidParse::kXid);
  EXPECT_LE(x.detail.size(), 256u);
}

TEST(Xid, EveryWellKnownCodeHasAMeaning) {
  for (int code : {13, 31, 43, 45, 48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120})
    EXPECT_FALSE(xid_meaning(code).empty()) << code;
  EXPECT_TRUE(xid_meaning(1).empty());
  EXPECT_TRUE(xid_meaning(99999).empty());
}

TEST(Xid, DriverBusIdFromSysfsAddress) {
  EXPECT_EQ(driver_bus_id("0000:1B:00.0"), "0000:1b:00");
  EXPECT_EQ(driver_bus_id("not-an-address"), "");
}

TEST(XidTracker, NamesRanksByPidThenByGpuAndCounts) {
  XidTracker t;
  const std::vector<XidRank> ranks = {{"job", 0, 100, 0}, {"job", 1, 101, 1}, {"other", 0, 200, 1}};
  const std::map<std::string, int> gpus = {{"0000:1b:00", 0}, {"0000:3b:00", 1}};

  // By GPU: both ranks on GPU 1 (two jobs share it).
  auto evs = t.on_message("NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.", 10, ranks, gpus);
  ASSERT_EQ(evs.size(), 2u);
  EXPECT_EQ(evs[0].kind, EventKind::kXid);
  EXPECT_EQ(evs[0].job_id, "job");
  EXPECT_EQ(evs[0].rank, 1);
  EXPECT_EQ(evs[1].job_id, "other");
  EXPECT_EQ(evs[0].evidence["matched_by"], "gpu_index");
  EXPECT_EQ(evs[0].evidence["gpu_index"], 1);
  EXPECT_NE(evs[0].summary.find("fallen off the bus"), std::string::npos) << evs[0].summary;
  EXPECT_NE(evs[0].summary.find("rank 1 of job job (pid 101)"), std::string::npos) << evs[0].summary;

  // By pid: the driver named rank 0's process, on a GPU we cannot map.
  evs = t.on_message("NVRM: Xid (PCI:0000:99:00): 13, pid=100, name=python, Graphics Exception", 11, ranks, gpus);
  ASSERT_EQ(evs.size(), 1u);
  EXPECT_EQ(evs[0].rank, 0);
  EXPECT_EQ(evs[0].evidence["matched_by"], "pid");
  EXPECT_EQ(evs[0].device, "0000:99:00");

  // Nobody on it: one event without a rank.
  evs = t.on_message("NVRM: Xid (PCI:0000:77:00): 48, double bit", 12, ranks, gpus);
  ASSERT_EQ(evs.size(), 1u);
  EXPECT_EQ(evs[0].rank, -1);
  EXPECT_NE(evs[0].summary.find("no tracked rank"), std::string::npos);

  EXPECT_TRUE(t.on_message("NVRM: Xid (PCI:0000:3b:00): oops", 13, ranks, gpus).empty());
  EXPECT_TRUE(t.on_message("eth0: link up", 13, ranks, gpus).empty());
  t.on_message("NVRM: Xid (PCI:0000:3b:00): 79, again", 14, ranks, gpus);

  const auto c = t.counts();
  EXPECT_EQ(c.malformed, 1u);
  EXPECT_EQ((c.errors.at({"0000:3b:00", "79"})), 2u);
  EXPECT_EQ((c.errors.at({"0000:99:00", "13"})), 1u);
  EXPECT_EQ((c.errors.at({"0000:77:00", "48"})), 1u);
  EXPECT_EQ(c.errors.size(), 3u);
}

TEST(XidTracker, SeriesStopAtTheirCapAndTheRestIsCounted) {
  XidTracker t;
  for (size_t i = 0; i < kMaxXidSeries + 5; ++i)
    t.on_message("NVRM: Xid (PCI:0000:3b:00): " + std::to_string(i + 1) + ", x", 0, {}, {});
  t.on_message("NVRM: Xid (PCI:0000:3b:00): 1, x", 0, {}, {});  // an existing series still counts
  const auto c = t.counts();
  EXPECT_EQ(c.errors.size(), kMaxXidSeries);
  EXPECT_EQ(c.dropped, 5u);
  EXPECT_EQ((c.errors.at({"0000:3b:00", "1"})), 2u);
}

}  // namespace
}  // namespace argus::kmsg
