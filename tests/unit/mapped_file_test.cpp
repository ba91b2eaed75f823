// Opening a file a process maps: only the very regular file the maps line
// names, reached without leaving the process's root. Planted links, FIFOs,
// devices and swapped files are refused, each with its own counted reason.
#include "userspace/procfs/mapped_file.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tests/support/mapping_child.h"
#include "tests/support/temp_dir.h"
#include "userspace/elf/elf_symbols.h"

namespace argus::procfs {
namespace {

namespace fs = std::filesystem;
using testing_support::MappingChild;
using testing_support::TempDir;

const std::string kShim = ARGUS_BUILD_DIR "/lib/libnccl.so.2";  // exports the NCCL API

// A maps line for a path, with the dev and inode of `real` (the file the
// kernel would have mapped).
MapEntry entry_for(const std::string& path_in_ns, const fs::path& real) {
  struct stat st {};
  EXPECT_EQ(::stat(real.c_str(), &st), 0) << real;
  MapEntry m;
  m.start = 0x7f0000000000;
  m.end = 0x7f0000001000;
  m.perms = "r-xp";
  m.dev_major = major(st.st_dev);
  m.dev_minor = minor(st.st_dev);
  m.inode = st.st_ino;
  m.path = path_in_ns;
  return m;
}

// A fake /proc with one pid whose root is a directory of our own (no
// map_files there: the path in the root is all there is, as for an agent
// without CAP_SYS_ADMIN).
class ContainerRoot : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = proc_.path / "4242" / "root";
    fs::create_directories(root_ / "lib");
    fs::copy_file(kShim, root_ / "lib" / "libnccl.so.2");
  }
  std::string proc() const { return proc_.str(); }
  TempDir proc_{"mapped-proc"};
  TempDir host_{"mapped-host"};
  fs::path root_;
};

TEST_F(ContainerRoot, TheMappedFileOpensInsideTheRoot) {
  auto f = open_mapped_file(proc(), 4242, entry_for("/lib/libnccl.so.2", root_ / "lib" / "libnccl.so.2"));
  ASSERT_TRUE(f.ok()) << f.error();
  EXPECT_STREQ(f->via, "root");
  auto symbols = elf::read_symbols_fd(f->fd.get(), "x");
  ASSERT_TRUE(symbols.ok()) << symbols.error();
  EXPECT_NE(symbols->find("ncclAllReduce"), nullptr);
  // /proc/self/fd/N names that same file for libbpf.
  struct stat a {}, b {};
  ASSERT_EQ(::stat(f->self_path().c_str(), &a), 0);
  ASSERT_EQ(::stat((root_ / "lib" / "libnccl.so.2").c_str(), &b), 0);
  EXPECT_EQ(a.st_ino, b.st_ino);
}

// An absolute link resolves inside the process's root, never from the agent's.
TEST_F(ContainerRoot, AbsoluteLinkToAHostFileIsRefused) {
  fs::create_symlink(kShim, root_ / "lib" / "evil.so");
  auto f = open_mapped_file(proc(), 4242, entry_for("/lib/evil.so", kShim));
  ASSERT_FALSE(f.ok());
  EXPECT_STREQ(label_of(f.failure().kind), "mapped_path_missing") << f.error();
  // A relative climb stops at the root too.
  fs::create_symlink("../../../../../../../../.." + kShim, root_ / "lib" / "climb.so");
  auto g = open_mapped_file(proc(), 4242, entry_for("/lib/climb.so", kShim));
  ASSERT_FALSE(g.ok());
  EXPECT_STREQ(label_of(g.failure().kind), "mapped_path_missing") << g.error();
}

TEST_F(ContainerRoot, AFileThatIsNotTheMappedOneIsRefused) {
  // The path names a regular ELF, but not the inode the maps line names.
  fs::copy_file(kShim, host_.path / "other.so");
  auto f = open_mapped_file(proc(), 4242, entry_for("/lib/libnccl.so.2", host_.path / "other.so"));
  ASSERT_FALSE(f.ok());
  EXPECT_STREQ(label_of(f.failure().kind), "mapped_identity_mismatch") << f.error();
}

TEST_F(ContainerRoot, FifoAndDeviceAreRefusedUnopened) {
  const fs::path fifo = root_ / "lib" / "fifo.so";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto f = open_mapped_file(proc(), 4242, entry_for("/lib/fifo.so", fifo));
  ASSERT_FALSE(f.ok());
  EXPECT_STREQ(label_of(f.failure().kind), "mapped_not_regular") << f.error();
  // Nobody holds the FIFO open for reading: a non-blocking writer finds no reader.
  const int w = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
  EXPECT_EQ(w, -1);
  EXPECT_EQ(errno, ENXIO);

  fs::create_directories(root_ / "dev");
  if (::mknod((root_ / "dev" / "zero").c_str(), S_IFCHR | 0600, makedev(1, 5)) == 0) {
    auto d = open_mapped_file(proc(), 4242, entry_for("/dev/zero", root_ / "dev" / "zero"));
    ASSERT_FALSE(d.ok());
    EXPECT_STREQ(label_of(d.failure().kind), "mapped_not_regular") << d.error();
  } else {
    ASSERT_NE(std::getenv("CI"), std::string("true")) << "mknod needs root (CAP_MKNOD)";
  }
  // A link to the node's /dev/zero stays inside the root, where there is none to find.
  fs::create_symlink("/dev/null", root_ / "lib" / "null.so");
  auto n = open_mapped_file(proc(), 4242, entry_for("/lib/null.so", "/dev/null"));
  ASSERT_FALSE(n.ok());
  EXPECT_STREQ(label_of(n.failure().kind), "mapped_path_missing") << n.error();
}

TEST_F(ContainerRoot, VanishedProcessAndDeletedFileWithoutTheMapping) {
  auto gone = open_mapped_file(proc(), 999999, entry_for("/lib/libnccl.so.2", root_ / "lib" / "libnccl.so.2"));
  ASSERT_FALSE(gone.ok());
  EXPECT_STREQ(label_of(gone.failure().kind), "vanished") << gone.error();
  auto m = entry_for("/lib/libnccl.so.2", root_ / "lib" / "libnccl.so.2");
  m.deleted = true;  // only map_files reaches a deleted file; this fake /proc has none
  auto d = open_mapped_file(proc(), 4242, m);
  EXPECT_FALSE(d.ok());
}

// On the real /proc: the mapping itself (map_files) and the path agree.
TEST(MappedFile, ARealMappingOpensThroughMapFiles) {
  TempDir dir("mapped-real");
  const fs::path lib = dir.path / "libnccl.so.2";
  fs::copy_file(kShim, lib);
  MappingChild child(lib.string());
  ASSERT_TRUE(child.mapped());
  auto m = child.entry(lib.string());
  ASSERT_TRUE(m.has_value());
  auto f = open_mapped_file("/proc", child.pid(), *m);
  ASSERT_TRUE(f.ok()) << f.error();
  if (::geteuid() == 0) {
    EXPECT_STREQ(f->via, "map_files");
  }
  auto symbols = elf::read_symbols_fd(f->fd.get(), lib.string());
  ASSERT_TRUE(symbols.ok()) << symbols.error();
  EXPECT_NE(symbols->find("ncclAllReduce"), nullptr);
}

// The mapped file is swapped for a link to another file after it was mapped:
// the mapping and the path disagree, so it is refused.
TEST(MappedFile, APathSwappedAfterMappingIsRefused) {
  TempDir dir("mapped-swap");
  const fs::path lib = dir.path / "libnccl.so.2";
  fs::copy_file("/lib/x86_64-linux-gnu/libm.so.6", lib);
  MappingChild child(lib.string());
  ASSERT_TRUE(child.mapped());
  auto m = child.entry(lib.string());
  ASSERT_TRUE(m.has_value());
  // Keep the mapped inode linked (so maps still names this path), then plant a link.
  fs::create_hard_link(lib, dir.path / "kept.so");
  fs::remove(lib);
  fs::create_symlink(kShim, lib);
  m->deleted = false;
  auto f = open_mapped_file("/proc", child.pid(), *m);
  ASSERT_FALSE(f.ok());
  EXPECT_STREQ(label_of(f.failure().kind), "mapped_identity_mismatch") << f.error();
}

}  // namespace
}  // namespace argus::procfs
