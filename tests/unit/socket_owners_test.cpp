// TCP retransmits to ranks: the "socket:[N]" links, the bounded fd scan on
// fake /proc trees (hostile entries included), the remote label, and the
// attributor's passes (deltas, idle keys taken out, caching, unowned sockets).
#include "userspace/procfs/socket_owners.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "tests/support/temp_dir.h"
#include "userspace/wire/labels.h"

namespace argus {
namespace {

namespace fs = std::filesystem;

TEST(SocketOwners, ParsesOnlySocketLinks) {
  EXPECT_EQ(socket_inode_of_link("socket:[12345]"), 12345u);
  EXPECT_EQ(socket_inode_of_link("socket:[18446744073709551615]"), 18446744073709551615ull);
  for (const char* bad : {"socket:[]", "socket:[abc]", "socket:[12a]", "socket:[-1]", "socket:[ 1]", "socket:[1",
                          "socket:1]", "pipe:[123]", "anon_inode:[eventfd]", "/tmp/socket:[1]", "socket:[0]",
                          "socket:[18446744073709551616]", "socket:[123456789012345678901]", "", "socket:["})
    EXPECT_FALSE(socket_inode_of_link(bad).has_value()) << bad;
}

TEST(SocketOwners, RemoteLabels) {
  uint8_t v4[16] = {10, 0, 0, 7};
  EXPECT_EQ(tcp_remote_label(2, v4), "10.0.0.7");
  uint8_t v6[16] = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 7};
  EXPECT_EQ(tcp_remote_label(10, v6), "fd00::7");
  uint8_t mapped[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1};
  EXPECT_EQ(tcp_remote_label(10, mapped), "127.0.0.1");
  EXPECT_EQ(tcp_remote_label(1, v4), "");  // AF_UNIX: no label
}

// PROC/PID/fd with the given link targets (a regular file where target is "").
void make_fds(const fs::path& proc, int pid, const std::vector<std::string>& targets) {
  const fs::path fd = proc / std::to_string(pid) / "fd";
  fs::create_directories(fd);
  for (size_t i = 0; i < targets.size(); ++i) {
    const fs::path entry = fd / std::to_string(i);
    if (targets[i].empty())
      std::ofstream(entry) << "not a link";
    else
      fs::create_symlink(targets[i], entry);
  }
}

TEST(SocketOwners, ScansFdsBoundedAndHostile) {
  testing_support::TempDir dir("sockowners");
  const std::string long_target = "socket:[" + std::string(200, '1') + "]";
  make_fds(dir.path, 7, {"socket:[100]", "pipe:[5]", "", "socket:[xyz]", long_target, "/dev/null", "socket:[101]"});
  auto inos = socket_inodes(dir.str(), 7, 100);
  std::sort(inos.begin(), inos.end());
  EXPECT_EQ(inos, (std::vector<uint64_t>{100, 101}));
  EXPECT_LE(socket_inodes(dir.str(), 7, 2).size(), 2u);   // bounded: only the first two entries read
  EXPECT_TRUE(socket_inodes(dir.str(), 8, 100).empty());  // gone
  fs::create_directories(dir.path / "9");
  std::ofstream(dir.path / "9" / "fd") << "a file, not a directory";
  EXPECT_TRUE(socket_inodes(dir.str(), 9, 100).empty());
}

argus_tcp_key key(uint64_t ino, uint8_t last_octet) {
  argus_tcp_key k{};
  k.ino = ino;
  k.family = 2;
  k.addr[0] = 10;
  k.addr[3] = last_octet;
  return k;
}

struct FakeMap {
  std::vector<TcpRetransEntry> entries;
  std::vector<uint64_t> taken;  // inodes of keys taken out
  TcpRetransAttributor::TakeFn take() {
    return [this](const argus_tcp_key& k) -> std::optional<uint64_t> {
      for (auto it = entries.begin(); it != entries.end(); ++it) {
        if (std::memcmp(&it->key, &k, sizeof(k)) != 0) continue;
        const uint64_t v = it->segs;
        taken.push_back(k.ino);
        entries.erase(it);
        return v;
      }
      return std::nullopt;
    };
  }
  std::vector<TcpRetransEntry> read() const { return entries; }  // as BPF is read: a copy
  void set(const argus_tcp_key& k, uint64_t segs) {
    for (auto& e : entries)
      if (std::memcmp(&e.key, &k, sizeof(k)) == 0) {
        e.segs = segs;
        return;
      }
    entries.push_back({k, segs});
  }
};

TEST(SocketOwners, AttributesDeltasToTheOwningRank) {
  testing_support::TempDir dir("sockattr");
  make_fds(dir.path, 10, {"socket:[500]", "socket:[501]"});
  make_fds(dir.path, 20, {"socket:[600]", "socket:[500]"});  // 500 shared (fork): the lower pid
  make_fds(dir.path, 30, {"socket:[700]"});                  // not a rank
  TcpRetransAttributor attr(dir.str());
  FakeMap map;
  map.set(key(500, 1), 3);
  map.set(key(600, 2), 2);
  map.set(key(700, 3), 5);  // another process's socket
  map.set(key(0, 4), 1);    // orphaned socket: no file
  auto got = attr.update(map.read(), {20, 10}, map.take());
  EXPECT_EQ(got.by_pid[10], (std::map<std::string, uint64_t>{{"10.0.0.1", 3}}));
  EXPECT_EQ(got.by_pid[20], (std::map<std::string, uint64_t>{{"10.0.0.2", 2}}));
  EXPECT_EQ(got.unattributed, 6u);
  EXPECT_EQ(got.fd_scans, 2u);  // one scan of both ranks, for all unknown inodes

  // Next pass: only what is new; 600 is idle and taken out of BPF (with the
  // one segment that came between the read and the take).
  map.set(key(500, 1), 7);
  auto take = map.take();
  auto racing_take = [&](const argus_tcp_key& k) -> std::optional<uint64_t> {
    if (k.ino == 600) map.set(k, 3);
    return take(k);
  };
  got = attr.update(map.read(), {10, 20}, racing_take);
  EXPECT_EQ(got.by_pid[10], (std::map<std::string, uint64_t>{{"10.0.0.1", 4}}));
  EXPECT_EQ(got.by_pid[20], (std::map<std::string, uint64_t>{{"10.0.0.2", 1}}));
  EXPECT_EQ(got.unattributed, 0u);
  EXPECT_EQ(got.fd_scans, 0u);  // all known: cached, or unowned since the last scan
  EXPECT_NE(std::find(map.taken.begin(), map.taken.end(), 600u), map.taken.end());
  EXPECT_NE(std::find(map.taken.begin(), map.taken.end(), 700u), map.taken.end());

  // The rank closed socket 500 (its fd is gone) but BPF still counts it: still its.
  fs::remove(dir.path / "10" / "fd" / "0");
  make_fds(dir.path, 40, {"socket:[800]"});
  map.set(key(500, 1), 9);
  map.set(key(800, 5), 1);  // a new rank's socket: found by a rescan
  got = attr.update(map.read(), {10, 20, 40}, map.take());
  EXPECT_EQ(got.by_pid[10], (std::map<std::string, uint64_t>{{"10.0.0.1", 2}}));
  EXPECT_EQ(got.by_pid[40], (std::map<std::string, uint64_t>{{"10.0.0.5", 1}}));
  EXPECT_EQ(got.unattributed, 0u);
  EXPECT_EQ(got.fd_scans, 3u);
}

TEST(SocketOwners, UnownedSocketsAreNotRescannedEveryPass) {
  testing_support::TempDir dir("sockunowned");
  make_fds(dir.path, 10, {"socket:[500]"});
  TcpRetransAttributor attr(dir.str());
  FakeMap map;
  map.set(key(900, 1), 1);  // nobody's
  auto got = attr.update(map.read(), {10}, map.take());
  EXPECT_EQ(got.unattributed, 1u);
  EXPECT_EQ(got.fd_scans, 1u);
  map.set(key(900, 1), 4);
  got = attr.update(map.read(), {10}, map.take());
  EXPECT_EQ(got.unattributed, 3u);
  EXPECT_EQ(got.fd_scans, 0u);
}

}  // namespace
}  // namespace argus
