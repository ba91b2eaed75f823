// Stacks of real interpreters read from outside while they run: one process per
// interpreter serves the nested-function, qualname, line, native-tid, thread
// churn and deep-recursion checks; the line tables also on fixed bytes.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/temp_dir.h"
#include "tests/unit/py_test_util.h"
#include "userspace/procfs/procfs.h"
#include "userspace/python/py_runtime.h"
#include "userspace/python/py_stacks_detail.h"
#include "userspace/python/stack_groups.h"

namespace argus::python {
namespace {

using testing_support::TempDir;

const char* kScript = R"PY(import os, sys, threading, time
sys.setrecursionlimit(10000)
threading.stack_size(64 << 20)

def inner():
    time.sleep(3600)  # L_INNER

def middle():
    inner()  # L_MIDDLE

def outer():
    middle()  # L_OUTER

class Worker:
    def run(self):
        outer()  # L_RUN

def recurse(n):
    if n == 0:
        time.sleep(3600)  # L_BOTTOM
    return recurse(n - 1)  # L_RECURSE

def churn():
    while True:
        t = threading.Thread(target=time.sleep, args=(0.0005,))
        t.start()
        t.join()

w = threading.Thread(target=Worker().run, daemon=True)
w.start()
r = threading.Thread(target=recurse, args=(2000,), daemon=True)
r.start()
time.sleep(0.3)
if len(sys.argv) > 1:
    threading.Thread(target=churn, daemon=True).start()
print("ready", w.native_id, r.native_id, flush=True)
time.sleep(3600)  # L_MAIN
)PY";

int line_of(const std::string& marker) {
  std::istringstream in(kScript);
  std::string l;
  for (int n = 1; std::getline(in, l); ++n) {
    if (l.find("# " + marker) != std::string::npos) return n;
  }
  return -1;
}

const PyThreadStack* thread_with(const PyStackDump& d, const std::string& fn) {
  for (const auto& t : d.threads) {
    for (const auto& f : t.frames) {
      if (f.function == fn) return &t;
    }
  }
  return nullptr;
}

std::string describe(const PyStackDump& d) {
  std::ostringstream o;
  for (const auto& t : d.threads) {
    o << "thread " << t.native_tid << (t.torn ? " torn" : "") << (t.truncated ? " truncated" : "") << "\n";
    for (size_t i = 0; i < std::min<size_t>(t.frames.size(), 8); ++i) {
      o << "  " << t.frames[i].qualname << " " << t.frames[i].file << ":" << t.frames[i].line << "\n";
    }
  }
  return o.str();
}

class PyStacksTest : public ::testing::TestWithParam<test::Interp> {};

TEST_P(PyStacksTest, NestedLinesTidsChurnAndRecursion) {
  auto in = GetParam();
  if (!test::have(in)) {
    test::skip_or_fail(in);
    return;
  }
  TempDir dir("pystk");
  std::string script = test::write_file(dir.str() + "/nested.py", kScript);
  test::PyChild child(in.exe, script);
  std::string ready = child.line();
  int worker_tid = 0, recurse_tid = 0;
  ASSERT_EQ(std::sscanf(ready.c_str(), "ready %d %d", &worker_tid, &recurse_tid), 2) << ready;

  PythonLocator locator;
  auto p = locator.locate(child.pid());
  ASSERT_TRUE(p.ok()) << p.error();
  auto mem = process_memory(child.pid());
  auto d = dump_stacks(*p, *mem, "/proc");
  ASSERT_TRUE(d.ok()) << d.error();
  EXPECT_EQ(d->version, in.version);
  ASSERT_EQ(d->threads.size(), 3u) << describe(*d);

  // outer -> middle -> inner, innermost first, with the lines of the calls.
  const auto* w = thread_with(*d, "inner");
  ASSERT_NE(w, nullptr) << describe(*d);
  ASSERT_GE(w->frames.size(), 4u);
  EXPECT_FALSE(w->torn);
  EXPECT_FALSE(w->truncated);
  const std::vector<std::pair<std::string, std::string>> want = {
      {"inner", "L_INNER"}, {"middle", "L_MIDDLE"}, {"outer", "L_OUTER"}, {"run", "L_RUN"}};
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(w->frames[i].function, want[i].first) << describe(*d);
    EXPECT_EQ(w->frames[i].line, line_of(want[i].second)) << want[i].first << "\n" << describe(*d);
    EXPECT_EQ(w->frames[i].file, script);
  }
  bool has_qualname = p->file->layout.code_qualname.has_value();
  EXPECT_EQ(w->frames[3].qualname, has_qualname ? "Worker.run" : "run");
  // The rest is threading's bootstrap: the outermost frame is _bootstrap.
  EXPECT_EQ(w->frames.back().function, "_bootstrap");
  EXPECT_EQ(w->native_tid, worker_tid);
  EXPECT_EQ(w->namespace_tid, worker_tid);
  EXPECT_NE(w->thread_id, 0u);

  // The main thread: the module's top level.
  const auto* m = thread_with(*d, "<module>");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->frames.size(), 1u);
  EXPECT_EQ(m->frames[0].line, line_of("L_MAIN"));
  EXPECT_EQ(m->native_tid, child.pid());

  // 2000 deep: cut at max_frames and said so; the innermost frames are exact.
  const auto* r = thread_with(*d, "recurse");
  ASSERT_NE(r, nullptr);
  EXPECT_TRUE(r->truncated);
  EXPECT_EQ(r->frames.size(), DumpOptions{}.max_frames);
  EXPECT_EQ(r->frames[0].line, line_of("L_BOTTOM"));
  EXPECT_EQ(r->frames[1].line, line_of("L_RECURSE"));
  EXPECT_EQ(r->native_tid, recurse_tid);
  // The sampler's path: a code object by address, validated by its tag.
  {
    const auto& l = p->file->layout;
    uint64_t interp = main_interpreter(*p, *mem), ts = 0, frame_ptr = 0;
    ASSERT_TRUE(mem->read(interp + l.interp_threads_head, &ts, 8));
    std::optional<detail::CodeInfo> inner;
    uint64_t instr = 0;
    for (int n = 0; ts && n < 16 && !inner; ++n) {
      uint64_t f = 0;
      ASSERT_TRUE(mem->read(ts + l.tstate_frame, &f, 8));
      if (l.cframe_current_frame && f) {
        ASSERT_TRUE(mem->read(f + *l.cframe_current_frame, &f, 8));
      }
      frame_ptr = f;
      uint64_t code = 0;
      if (f && mem->read(f + l.frame_code, &code, 8)) {
        auto c = detail::read_code(*mem, l, code, p->code_type_addr);
        if (c && c->frame.function == "inner") {
          inner = c;
          if (l.instr_is_lasti) {
            int32_t lasti = 0;
            ASSERT_TRUE(mem->read(frame_ptr + l.frame_instr, &lasti, 4));
            instr = static_cast<uint32_t>(lasti);
          } else {
            ASSERT_TRUE(mem->read(frame_ptr + l.frame_instr, &instr, 8));
          }
        }
      }
      ASSERT_TRUE(mem->read(ts + l.tstate_next, &ts, 8));
    }
    ASSERT_TRUE(inner.has_value());
    CodeSymbolizer sym(p->file, 4);
    auto f = sym.resolve(*mem, inner->addr, inner->tag, instr);
    ASSERT_TRUE(f.has_value());
    EXPECT_EQ(f->function, "inner");
    EXPECT_EQ(f->line, line_of("L_INNER"));
    EXPECT_EQ(sym.size(), 1u);
    EXPECT_FALSE(sym.resolve(*mem, inner->addr, inner->tag ^ 1, instr).has_value());  // another code object's tag
    EXPECT_EQ(sym.mismatches(), 1u);
    EXPECT_FALSE(sym.resolve(*mem, 8, inner->tag, instr).has_value());  // unreadable
  }

  DumpOptions all;
  all.max_frames = 4096;
  auto full = dump_stacks(*p, *mem, "/proc", all);
  ASSERT_TRUE(full.ok());
  const auto* rf = thread_with(*full, "recurse");
  ASSERT_NE(rf, nullptr);
  EXPECT_FALSE(rf->truncated);
  EXPECT_EQ(rf->frames.size(), 2001u + 3u);  // recurse x2001, run, _bootstrap_inner, _bootstrap
}

// Threads that start and end while we read: never an error, never a frame
// that is not in the script or the threading module.
// The cheap look at the main thread only: the main thread is in the module's
// top level (asleep); the worker's frames (inner, ...) are never the main
// thread's. A second look answers from the cache.
bool is_module(const PyFrame& f) { return f.function == "<module>"; }
bool is_inner(const PyFrame& f) { return f.function == "inner"; }

TEST_P(PyStacksTest, MainThreadLookSeesOnlyTheMainThread) {
  auto in = GetParam();
  if (!test::have(in)) {
    test::skip_or_fail(in);
    return;
  }
  TempDir dir("pylook");
  std::string script = test::write_file(dir.str() + "/nested.py", kScript);
  test::PyChild child(in.exe, script);
  child.line();  // ready
  PythonLocator locator;
  auto p = locator.locate(child.pid());
  ASSERT_TRUE(p.ok()) << p.error();
  auto mem = process_memory(child.pid());
  MainThreadLook module(is_module), inner(is_inner);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(module.inside(*p, *mem), std::optional<bool>(true)) << i;
    EXPECT_EQ(inner.inside(*p, *mem), std::optional<bool>(false)) << i;
  }
  // A process gone: never a yes.
  ::kill(child.pid(), SIGKILL);
  ::waitpid(child.pid(), nullptr, 0);
  EXPECT_FALSE(module.inside(*p, *mem).value_or(false));
}

TEST_P(PyStacksTest, ThreadChurnDuringDumps) {
  auto in = GetParam();
  if (!test::have(in)) {
    test::skip_or_fail(in);
    return;
  }
  TempDir dir("pystk");
  std::string script = test::write_file(dir.str() + "/nested.py", kScript);
  // The script with an argument (PyChild runs `exe -u file`): a wrapper sets it.
  std::string churn = test::write_file(dir.str() + "/churn.py",
                                       "import sys, runpy\nsys.argv = [sys.argv[0], 'churn']\n"
                                       "runpy.run_path(" "'" + script + "'" ", run_name='__main__')\n");
  test::PyChild c2(in.exe, churn);
  ASSERT_NE(c2.line().find("ready"), std::string::npos);
  PythonLocator locator;
  auto p = locator.locate(c2.pid());
  ASSERT_TRUE(p.ok()) << p.error();
  auto mem = process_memory(c2.pid());
  int saw_extra = 0;
  for (int i = 0; i < 50; ++i) {
    auto d = dump_stacks(*p, *mem, "/proc");
    ASSERT_TRUE(d.ok()) << d.error();
    ASSERT_GE(d->threads.size(), 4u);  // main, worker, recurse, churn (+ the short-lived one)
    if (d->threads.size() > 4) ++saw_extra;
    for (const auto& t : d->threads) {
      for (const auto& f : t.frames) {
        // threading.Thread() registers itself in a WeakSet (`_dangling.add`): _weakrefset.py is
        // a real frame of a thread that starts one (seen in a CI run), as threading.py is.
        bool known = f.file == script || f.file == churn || f.file.find("threading.py") != std::string::npos ||
                     f.file.find("_weakrefset.py") != std::string::npos ||
                     f.file.find("runpy") != std::string::npos;  // "<frozen runpy>" on 3.11+
        EXPECT_TRUE(known) << f.file << " " << f.function;
        EXPECT_FALSE(f.function.empty());
        if (!t.torn) {
          EXPECT_GT(f.line, 0) << f.function;
        }
      }
    }
  }
  RecordProperty("dumps_with_a_short_lived_thread", saw_extra);
}

INSTANTIATE_TEST_SUITE_P(Interpreters, PyStacksTest, ::testing::ValuesIn(test::interpreters()),
                         [](const auto& info) { return info.param.tag; });

// A rank in its own PID and mount namespace: the interpreter file is mapped
// from a path that exists only inside (a bind mount), thread ids are the
// namespace's and must come back as the host's.
TEST(PyStacksNamespace, OwnPidAndMountNamespace) {
  const std::string py = "/usr/bin/python3.11";
  if (::geteuid() != 0 || ::access(py.c_str(), X_OK) != 0 || std::system("unshare --version >/dev/null 2>&1") != 0) {
    if (test::ci()) FAIL() << "CI=true: needs root, unshare and " << py;
    GTEST_SKIP() << "needs root, unshare and " << py;
  }
  TempDir dir("pyns");
  std::string script = test::write_file(dir.str() + "/nested.py", kScript);
  std::string hidden = dir.str() + "/hidden-python";
  test::write_file(hidden, "");  // the mount point: an empty file on the host
  std::string launcher = test::write_file(
      dir.str() + "/launch.sh", "mount --bind " + py + " " + hidden + " && exec " + hidden + " -u " + script + "\n");
  test::PyChild ns("sh", launcher, {"unshare", "--fork", "--kill-child", "--pid", "--mount-proc", "--mount"});
  std::string ready = ns.line();
  int worker_ns_tid = 0, recurse_ns_tid = 0;
  ASSERT_EQ(std::sscanf(ready.c_str(), "ready %d %d", &worker_ns_tid, &recurse_ns_tid), 2) << ready;
  // unshare's forked child is the python (pid 1 inside).
  auto kids = procfs::read_file("/proc/" + std::to_string(ns.pid()) + "/task/" + std::to_string(ns.pid()) + "/children");
  ASSERT_TRUE(kids.ok());
  int host_pid = std::atoi(kids->c_str());
  ASSERT_GT(host_pid, 0);
  // The namespace's init ignores all but SIGKILL; --kill-child covers unshare's
  // death, this covers a test that returns early.
  struct KillOnExit {
    int pid;
    ~KillOnExit() { ::kill(pid, SIGKILL); }
  } reaper{host_pid};

  PythonLocator locator;
  auto p = locator.locate(host_pid);
  ASSERT_TRUE(p.ok()) << p.error();
  EXPECT_EQ(p->mapped_path, hidden);
  EXPECT_EQ(p->file->layout.version.minor, 11);
  auto mem = process_memory(host_pid);
  auto d = dump_stacks(*p, *mem, "/proc");
  ASSERT_TRUE(d.ok()) << d.error();
  const auto* w = thread_with(*d, "inner");
  ASSERT_NE(w, nullptr) << describe(*d);
  EXPECT_EQ(w->namespace_tid, worker_ns_tid);
  ASSERT_GT(w->native_tid, 0);
  EXPECT_NE(w->native_tid, worker_ns_tid);
  // The host tid is a thread of the host pid whose innermost NSpid is the one python saw.
  auto status = procfs::read_file("/proc/" + std::to_string(host_pid) + "/task/" + std::to_string(w->native_tid) +
                                  "/status");
  ASSERT_TRUE(status.ok());
  const auto at = status->find("\nNSpid:");
  ASSERT_NE(at, std::string::npos);
  int host_tid = 0, ns_tid = 0;
  ASSERT_EQ(std::sscanf(status->c_str() + at + 7, "%d %d", &host_tid, &ns_tid), 2);
  EXPECT_EQ(host_tid, w->native_tid);
  EXPECT_EQ(ns_tid, worker_ns_tid);
  const auto* m = thread_with(*d, "<module>");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->native_tid, host_pid);
  EXPECT_EQ(m->namespace_tid, 1);
}

// Two ranks in the same place and a process without Python: one group of two,
// the non-Python one left out (what a hang event carries).
TEST(PyStacksGroups, LiveRanksGroupedNonPythonLeftOut) {
  auto interps = test::interpreters();
  auto in = interps[2];  // 3.12
  if (!test::have(in)) {
    test::skip_or_fail(in);
    return;
  }
  TempDir dir("pygrp");
  std::string script = test::write_file(dir.str() + "/nested.py", kScript);
  test::PyChild a(in.exe, script), b(in.exe, script);
  ASSERT_NE(a.line().find("ready"), std::string::npos);
  ASSERT_NE(b.line().find("ready"), std::string::npos);
  PythonLocator locator;
  auto doc = grouped_stacks_of({{0, a.pid()}, {1, b.pid()}, {2, static_cast<int>(::getpid())}}, locator, "/proc");
  ASSERT_EQ(doc["groups"].size(), 1u) << doc.dump();
  EXPECT_EQ(doc["groups"][0]["ranks"], nlohmann::json::array({0, 1}));
  EXPECT_EQ(doc["groups"][0]["label"], "ranks 0-1 (2 ranks)");
  EXPECT_TRUE(doc["errors"].empty()) << doc.dump();
  // Bounded: 64 frames a thread (the 2000-deep one is cut).
  for (const auto& t : doc["groups"][0]["threads"]) {
    EXPECT_LE(t["frames"].size(), 64u);
  }
}

// ---- Line tables on fixed bytes ------------------------------------------------

TEST(PyLineTables, LocationTableForms) {
  using detail::line_from_location_table;
  // firstlineno 10. Entries: short form (code 0, 2 units, line 10); one-line form
  // code 11 (+1 -> 11, 1 unit); no-column form code 13 with svarint +4 (-> 15, 3 units);
  // long form code 14 with svarint -2 (-> 13, 1 unit); none (code 15, 2 units).
  std::string t;
  t += static_cast<char>(0x80 | (0 << 3) | 1), t += '\x05';
  t += static_cast<char>(0x80 | (11 << 3) | 0), t += '\x01', t += '\x02';
  t += static_cast<char>(0x80 | (13 << 3) | 2), t += '\x08';
  t += static_cast<char>(0x80 | (14 << 3) | 0), t += '\x05', t += '\x00', t += '\x01', t += '\x02';
  t += static_cast<char>(0x80 | (15 << 3) | 1);
  EXPECT_EQ(line_from_location_table(t, 10, -1), 10);
  EXPECT_EQ(line_from_location_table(t, 10, 0), 10);
  EXPECT_EQ(line_from_location_table(t, 10, 1), 10);
  EXPECT_EQ(line_from_location_table(t, 10, 2), 11);
  EXPECT_EQ(line_from_location_table(t, 10, 3), 15);
  EXPECT_EQ(line_from_location_table(t, 10, 5), 15);
  EXPECT_EQ(line_from_location_table(t, 10, 6), 13);
  EXPECT_EQ(line_from_location_table(t, 10, 7), 0);  // no location
  EXPECT_EQ(line_from_location_table(t, 10, 9), 0);  // past the end
  // A multi-byte varint: +100 lines (zigzag 200 = 0b11001000: 8 | 64, then 3).
  std::string big;
  big += static_cast<char>(0x80 | (13 << 3) | 0), big += static_cast<char>(8 | 64), big += '\x03';
  EXPECT_EQ(line_from_location_table(big, 1, 0), 101);
  // Hostile: truncated, not an entry start, empty.
  EXPECT_EQ(line_from_location_table(std::string(1, static_cast<char>(0x80 | (14 << 3))), 1, 0), 0);
  EXPECT_EQ(line_from_location_table("\x01\x02", 1, 0), 0);
  EXPECT_EQ(line_from_location_table("", 1, 0), 0);
  std::string endless(1000, static_cast<char>(0x80 | (14 << 3)));
  EXPECT_EQ(line_from_location_table(endless + std::string(64, '\x7f'), 1, 100000), 0);
}

TEST(PyLineTables, Pep626Table) {
  using detail::line_from_pep626_table;
  // firstlineno 5: bytes [0,6) line 6, [6,10) no line, [10,14) line 8, [14,14) empty.
  std::string t = {'\x06', '\x01', '\x04', static_cast<char>(-128), '\x04', '\x02', '\x00', '\x01'};
  EXPECT_EQ(line_from_pep626_table(t, 5, -2), 5);
  EXPECT_EQ(line_from_pep626_table(t, 5, 0), 6);
  EXPECT_EQ(line_from_pep626_table(t, 5, 4), 6);
  EXPECT_EQ(line_from_pep626_table(t, 5, 6), 0);
  EXPECT_EQ(line_from_pep626_table(t, 5, 12), 8);
  EXPECT_EQ(line_from_pep626_table(t, 5, 14), 0);
  EXPECT_EQ(line_from_pep626_table("\x06", 5, 0), 0);  // odd length
}

// Memory made of a few images: strings of every kind, and hostile ones.
class FakeMemory : public RemoteMemory {
 public:
  void put(uint64_t addr, std::string bytes) { regions_[addr] = std::move(bytes); }
  bool read(uint64_t addr, void* out, size_t len) override {
    for (const auto& [base, b] : regions_) {
      if (addr >= base && addr - base <= b.size() && len <= b.size() - (addr - base)) {
        std::memcpy(out, b.data() + (addr - base), len);
        return true;
      }
    }
    return false;
  }

 private:
  std::map<uint64_t, std::string> regions_;
};

std::string unicode_image(const PyLayout& l, int64_t length, unsigned kind, bool ascii, const std::string& data) {
  std::string b(std::max<size_t>(40, ascii ? l.unicode_ascii_data : l.unicode_compact_data), '\0');
  std::memcpy(b.data() + 16, &length, 8);
  uint32_t state = (kind << 2) | (1u << 5) | (ascii ? 1u << 6 : 0u);
  std::memcpy(b.data() + 32, &state, 4);
  return b + data;
}

TEST(PyStrings, CompactKindsAndHostile) {
  PyLayout l;  // 3.12's sizes
  l.unicode_ascii_data = 40;
  l.unicode_compact_data = 56;
  FakeMemory mem;
  mem.put(0x1000, unicode_image(l, 5, 1, true, "hello"));
  mem.put(0x2000, unicode_image(l, 2, 1, false, "\xe9\xff"));                      // UCS1: é ÿ
  mem.put(0x3000, unicode_image(l, 1, 2, false, std::string("\x3b\x04", 2)));    // UCS2: л (U+043B)
  mem.put(0x4000, unicode_image(l, 1, 4, false, std::string("\x00\xf6\x01\x00", 4)));  // UCS4: U+1F600
  mem.put(0x5000, unicode_image(l, 1LL << 40, 1, true, "short"));               // length beyond the memory
  mem.put(0x6000, unicode_image(l, 3, 3, false, "abc"));                         // no such kind
  mem.put(0x7000, unicode_image(l, 10, 1, true, "abcdefghij"));
  using detail::read_py_string;
  EXPECT_EQ(read_py_string(mem, l, 0x1000, 100), "hello");
  EXPECT_EQ(read_py_string(mem, l, 0x2000, 100), "\xc3\xa9\xc3\xbf");
  EXPECT_EQ(read_py_string(mem, l, 0x3000, 100), "\xd0\xbb");
  EXPECT_EQ(read_py_string(mem, l, 0x4000, 100), "\xf0\x9f\x98\x80");
  EXPECT_FALSE(read_py_string(mem, l, 0x5000, 100).has_value());
  EXPECT_FALSE(read_py_string(mem, l, 0x5000, size_t{1} << 40).has_value());  // capped, not allocated
  EXPECT_FALSE(read_py_string(mem, l, 0x6000, 100).has_value());
  EXPECT_EQ(read_py_string(mem, l, 0x7000, 4), "abcd...");
  EXPECT_FALSE(read_py_string(mem, l, 0x9000, 100).has_value());
  EXPECT_FALSE(read_py_string(mem, l, 0, 100).has_value());
}

}  // namespace
}  // namespace argus::python

namespace argus::python {
namespace {

// A 3.12-shaped process image in fake memory: one thread, frames F1 -> F2, both
// running code C1. Each case then breaks one thing the way a live process can.
struct FakeProcess {
  static constexpr uint64_t kRuntime = 0x10000, kInterp = 0x20000, kTstate = 0x30000, kCframe = 0x31000,
                            kF1 = 0x40000, kF2 = 0x41000, kCode = 0x50000, kName = 0x60000, kFile = 0x61000,
                            kTable = 0x62000, kCodeType = 0xc0de0;
  FakeMemory mem;
  PyProcess p;
  PyLayout l;

  static void put64(std::string& b, size_t off, uint64_t v) { std::memcpy(b.data() + off, &v, 8); }
  FakeProcess() {
    l.version = {3, 12, 1};
    l.runtime_interpreters_head = 40;
    l.interp_threads_head = 72;
    l.tstate_next = 8, l.tstate_thread_id = 136, l.tstate_native_thread_id = 144;
    l.tstate_frame = 56, l.cframe_current_frame = 0;
    l.frame_code = 0, l.frame_previous = 8, l.frame_instr = 56, l.frame_owner = 70, l.owner_to_skip = 3;
    l.code_firstlineno = 68, l.code_filename = 112, l.code_name = 120, l.code_qualname = 128;
    l.code_linetable = 136, l.code_bytecode = 192;
    l.unicode_ascii_data = 40, l.unicode_compact_data = 56;
    auto file = std::make_shared<PyInterpreterFile>();
    file->layout = l;
    p.pid = 1;
    p.file = file;
    p.runtime_addr = kRuntime;
    p.code_type_addr = kCodeType;

    std::string rt(64, '\0'), interp(128, '\0'), ts(256, '\0'), cf(16, '\0');
    put64(rt, 40, kInterp);
    put64(interp, 72, kTstate);
    put64(ts, 136, 0x7000), put64(ts, 144, 12345), put64(ts, 56, kCframe);
    put64(cf, 0, kF1);
    mem.put(kRuntime, rt), mem.put(kInterp, interp), mem.put(kTstate, ts), mem.put(kCframe, cf);
    mem.put(kF1, frame(kCode, kF2, 1));
    mem.put(kF2, frame(kCode, 0, 9));
    std::string code(256, '\0');
    put64(code, 8, kCodeType);
    put64(code, 16, 10);  // 10 code units
    int32_t first = 5;
    std::memcpy(code.data() + 68, &first, 4);
    put64(code, 112, kFile), put64(code, 120, kName), put64(code, 128, kName), put64(code, 136, kTable);
    mem.put(kCode, code);
    mem.put(kName, unicode_image(l, 1, 1, true, "f"));
    mem.put(kFile, unicode_image(l, 5, 1, true, "/x.py"));
    // Units 0-7 on line 7 (+2), units 8-9 on line 8 (+1): no-column entries.
    std::string table = {static_cast<char>(0x80 | (13 << 3) | 7), '\x04', static_cast<char>(0x80 | (13 << 3) | 1),
                         '\x02'};
    std::string bytes(32, '\0');
    put64(bytes, 16, table.size());
    mem.put(kTable, bytes + table);
  }
  std::string frame(uint64_t code, uint64_t prev, uint64_t unit) const {
    std::string f(80, '\0');
    put64(f, 0, code);
    put64(f, 8, prev);
    put64(f, 56, kCode + 192 + unit * 2);
    return f;
  }
};

TEST(PyStacksFake, ConsistentImage) {
  FakeProcess fp;
  auto d = dump_stacks(fp.p, fp.mem, "/nonexistent");
  ASSERT_TRUE(d.ok()) << d.error();
  ASSERT_EQ(d->threads.size(), 1u);
  const auto& t = d->threads[0];
  EXPECT_FALSE(t.torn);
  EXPECT_FALSE(t.truncated);
  ASSERT_EQ(t.frames.size(), 2u);
  EXPECT_EQ(t.frames[0].function, "f");
  EXPECT_EQ(t.frames[0].file, "/x.py");
  EXPECT_EQ(t.frames[0].line, 7);
  EXPECT_EQ(t.frames[1].line, 8);
  EXPECT_EQ(t.thread_id, 0x7000u);
  EXPECT_EQ(t.native_tid, 0);  // 12345 is no thread of the process: not reported
  EXPECT_EQ(t.namespace_tid, 0);
}

TEST(PyStacksFake, FrameLoopIsCutAndSaid) {
  FakeProcess fp;
  fp.mem.put(FakeProcess::kF2, fp.frame(FakeProcess::kCode, FakeProcess::kF1, 9));  // F2 -> F1 -> F2 ...
  DumpOptions o;
  o.max_frames = 16;
  auto d = dump_stacks(fp.p, fp.mem, "/nonexistent", o);
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->threads[0].truncated);
  EXPECT_EQ(d->threads[0].frames.size(), 16u);
}

TEST(PyStacksFake, ThreadListLoopEnds) {
  FakeProcess fp;
  std::string ts(256, '\0');
  FakeProcess::put64(ts, 8, FakeProcess::kTstate);  // next = itself
  FakeProcess::put64(ts, 56, FakeProcess::kCframe);
  fp.mem.put(FakeProcess::kTstate, ts);
  auto d = dump_stacks(fp.p, fp.mem, "/nonexistent");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->threads.size(), 1u);
}

TEST(PyStacksFake, GarbageIsMarkedTornNeverInvented) {
  FakeProcess fp;
  // A frame whose code pointer leads nowhere: the walk stops there.
  fp.mem.put(FakeProcess::kF2, fp.frame(0x999999, 0, 1));
  auto d = dump_stacks(fp.p, fp.mem, "/nonexistent");
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->threads[0].torn);
  ASSERT_EQ(d->threads[0].frames.size(), 1u);  // F1 only
  // An instruction outside its code object (a reused frame slot): same.
  FakeProcess fp2;
  fp2.mem.put(FakeProcess::kF1, fp2.frame(FakeProcess::kCode, FakeProcess::kF2, 500));
  d = dump_stacks(fp2.p, fp2.mem, "/nonexistent");
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->threads[0].torn);
  EXPECT_TRUE(d->threads[0].frames.empty());
}

// A thread whose top frame changes on every read: retried, then marked torn.
TEST(PyStacksFake, MovingThreadRetriedThenMarked) {
  struct Moving : RemoteMemory {
    FakeProcess fp;
    int reads = 0;
    bool read(uint64_t addr, void* out, size_t len) override {
      if (addr == FakeProcess::kCframe && len == 8) {
        uint64_t v = (++reads % 2) ? FakeProcess::kF1 : FakeProcess::kF2;
        std::memcpy(out, &v, 8);
        return true;
      }
      return fp.mem.read(addr, out, len);
    }
  } m;
  DumpOptions o;
  o.retries = 3;
  auto d = dump_stacks(m.fp.p, m, "/nonexistent", o);
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->threads[0].torn);
  EXPECT_EQ(m.reads, 2 * (o.retries + 1));  // top frame before and after each of the 4 walks
  for (const auto& f : d->threads[0].frames) EXPECT_EQ(f.function, "f");
}

TEST(PyStacksFake, UninitialisedOrUnreadableRuntime) {
  FakeProcess fp;
  fp.mem.put(FakeProcess::kRuntime, std::string(64, '\0'));
  auto d = dump_stacks(fp.p, fp.mem, "/nonexistent");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.error().find("not initialised"), std::string::npos);
  FakeMemory empty;
  d = dump_stacks(fp.p, empty, "/nonexistent");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.error().find("cannot read"), std::string::npos);
}

}  // namespace
}  // namespace argus::python
