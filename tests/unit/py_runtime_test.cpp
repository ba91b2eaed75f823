// The Python layer's foundation on the real interpreter files of this machine
// (pyenv 3.10-3.13 with .symtab, Debian's stripped static 3.11) and on hostile
// fakes: version, layout, GC anchor, refusals.
#include "userspace/python/py_runtime.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "tests/support/temp_dir.h"
#include "userspace/common/unique_fd.h"
#include "userspace/python/py_elf.h"
#include "tests/unit/py_test_util.h"

namespace argus::python {
namespace {

using testing_support::TempDir;

Result<PyInterpreterFile> inspect_path(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return make_error("cannot open " + path);
  return inspect_interpreter(fd.get(), path);
}

class InterpreterFileTest : public ::testing::TestWithParam<test::Interp> {};

TEST_P(InterpreterFileTest, VersionLayoutAndGcAnchor) {
  auto in = GetParam();
  if (!test::have(in)) {
    test::skip_or_fail(in);
    return;
  }
  auto f = inspect_path(in.lib);
  ASSERT_TRUE(f.ok()) << f.error();
  EXPECT_EQ(f->layout.version.str(), in.version);
  EXPECT_FALSE(f->free_threaded);
  EXPECT_NE(f->runtime_vaddr, 0u);
  EXPECT_NE(f->code_type_vaddr, 0u);
  EXPECT_FALSE(f->loads.empty());
  const auto& l = f->layout;
  // Spot checks against ../shared/PYTHON-INTERNALS.md (and gdb on the DWARF).
  switch (l.version.minor) {
    case 10:
      EXPECT_EQ(l.runtime_interpreters_head, 32u);
      EXPECT_EQ(l.tstate_thread_id, 176u);
      EXPECT_FALSE(l.tstate_native_thread_id.has_value());
      EXPECT_TRUE(l.instr_is_lasti);
      EXPECT_EQ(l.interp_gc, 616u);
      break;
    case 11:
      EXPECT_EQ(l.interp_threads_head, 16u);
      EXPECT_EQ(*l.cframe_current_frame, 8u);
      EXPECT_EQ(*l.frame_owner, 69u);
      EXPECT_EQ(l.code_bytecode, 184u);
      EXPECT_EQ(l.interp_gc, 648u);
      break;
    case 12:
      EXPECT_EQ(l.interp_threads_head, 72u);
      EXPECT_EQ(*l.owner_to_skip, 3);
      EXPECT_EQ(l.unicode_ascii_data, 40u);
      EXPECT_EQ(l.interp_gc, 112u);
      break;
    case 13:  // from _Py_DebugOffsets
      EXPECT_EQ(l.runtime_interpreters_head, 632u);
      EXPECT_EQ(l.interp_threads_head, 7344u);
      EXPECT_EQ(l.interp_gc, 7400u);
      EXPECT_EQ(l.tstate_frame, 72u);
      EXPECT_FALSE(l.cframe_current_frame.has_value());
      EXPECT_EQ(l.frame_instr, 56u);
      EXPECT_EQ(*l.frame_owner, 70u);
      EXPECT_EQ(l.code_bytecode, 200u);
      EXPECT_EQ(l.unicode_ascii_data, 40u);
      break;
    default:
      ADD_FAILURE() << "unexpected version " << l.version.str();
  }
  EXPECT_EQ(f->gc_anchor, in.gc_anchor);
  if (in.gc_anchor == "gc_collect_main") {
    EXPECT_EQ(f->gc_symbol, "gc_collect_main");
    // The uprobe offset is the symbol's own, as readelf sees it (PIE: vaddr == offset in .text here).
    std::string out = test::run("readelf -W -s " + in.lib + " | awk '$8==\"gc_collect_main\"{print $2}'");
    ASSERT_FALSE(out.empty());
    EXPECT_EQ(f->gc_entry_offset, std::stoull(out, nullptr, 16));
  }
}

INSTANTIATE_TEST_SUITE_P(Interpreters, InterpreterFileTest, ::testing::ValuesIn(test::interpreters()),
                         [](const auto& info) { return info.param.tag; });

// Debian's stripped static 3.11 without its USDT notes: the anchor falls back to
// the first local call in PyGC_Collect (what gcc made of gc_collect_with_callback).
TEST(PyRuntime, StrippedWithoutUsdtFallsBackToPyGcCollectCall) {
  const std::string sys = "/usr/bin/python3.11";
  if (::access(sys.c_str(), R_OK) != 0 || std::system("objcopy --version >/dev/null 2>&1") != 0) {
    test::skip_or_fail({"debian_3_11", sys, sys, "3.11", ""});
    return;
  }
  TempDir dir("pyrt");
  std::string copy = dir.str() + "/interp";
  ASSERT_EQ(std::system(("objcopy --remove-section .note.stapsdt " + sys + " " + copy).c_str()), 0);
  auto f = inspect_path(copy);
  ASSERT_TRUE(f.ok()) << f.error();
  EXPECT_EQ(f->gc_anchor, "pygc_collect_call");
  EXPECT_NE(f->gc_entry_offset, 0u);
  // The target is a call target objdump agrees on.
  std::string calls = test::run("objdump -d --start-address=0x$(readelf -W --dyn-syms " + copy +
                                " | awk '$8==\"PyGC_Collect\"{print $2}') --stop-address=$((0x$(readelf -W --dyn-syms " +
                                copy + " | awk '$8==\"PyGC_Collect\"{print $2\"+\"$3}'))) " + copy + " | grep call");
  auto arrow = f->gc_symbol.find("0x");
  ASSERT_NE(arrow, std::string::npos);
  EXPECT_NE(calls.find("call   " + f->gc_symbol.substr(arrow + 2)), std::string::npos) << calls << f->gc_symbol;
}

TEST(PyRuntime, GcCollectMainClonesAcceptedColdRefused) {
  using detail::is_gc_collect_main;
  EXPECT_TRUE(is_gc_collect_main("gc_collect_main"));
  EXPECT_TRUE(is_gc_collect_main("gc_collect_main.lto_priv.0"));
  EXPECT_TRUE(is_gc_collect_main("gc_collect_main.constprop.0"));
  EXPECT_TRUE(is_gc_collect_main("gc_collect_main.isra.0"));
  EXPECT_TRUE(is_gc_collect_main("gc_collect_main.part.1"));
  EXPECT_TRUE(is_gc_collect_main("gc_collect_main.llvm.12345"));
  EXPECT_TRUE(is_gc_collect_main("gc_collect_main.constprop.0.isra.0"));
  EXPECT_FALSE(is_gc_collect_main("gc_collect_main.cold"));
  EXPECT_FALSE(is_gc_collect_main("gc_collect_main.part.0.cold"));
  EXPECT_FALSE(is_gc_collect_main("gc_collect_main.lto_priv.0.cold.1"));
  EXPECT_FALSE(is_gc_collect_main("gc_collect_main_x"));
  EXPECT_FALSE(is_gc_collect_main("gc_collect_main."));
  EXPECT_FALSE(is_gc_collect_main("gc_collect_main.123"));
  EXPECT_FALSE(is_gc_collect_main("gc_collect_main..isra"));
  EXPECT_FALSE(is_gc_collect_main("xgc_collect_main"));
}

std::string debug_offsets_image() {
  std::string b(584, '\0');
  std::memcpy(b.data(), "xdebugpy", 8);
  auto put = [&](size_t off, uint64_t v) { std::memcpy(b.data() + off, &v, 8); };
  put(8, 0x030d00f0);
  put(40, 632);
  put(48, 0x2f998), put(64, 7264), put(72, 7344), put(80, 7400);
  put(152, 0x130), put(168, 8), put(184, 72), put(192, 152), put(200, 160);
  put(224, 0x50), put(232, 8), put(240, 0), put(248, 56), put(264, 70);
  put(272, 0xd0), put(280, 112), put(288, 120), put(296, 128), put(304, 136), put(312, 68), put(344, 200);
  put(528, 32), put(560, 40);
  return b;
}

TEST(PyRuntime, DebugOffsetsParsedAndHostileOnesRefused) {
  PyVersion v313{3, 13, 0};
  bool ft = false;
  auto good = detail::layout_from_debug_offsets(debug_offsets_image(), v313, &ft);
  ASSERT_TRUE(good.ok()) << good.error();
  EXPECT_EQ(good->tstate_frame, 72u);
  EXPECT_EQ(good->unicode_compact_data, 56u);

  auto bad_cookie = debug_offsets_image();
  bad_cookie[0] = 'X';
  auto r = detail::layout_from_debug_offsets(bad_cookie, v313, &ft);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("cookie"), std::string::npos);

  auto threaded = debug_offsets_image();
  threaded[16] = 1;
  r = detail::layout_from_debug_offsets(threaded, v313, &ft);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(ft);
  EXPECT_NE(r.error().find("free-threaded"), std::string::npos);

  r = detail::layout_from_debug_offsets(debug_offsets_image(), PyVersion{3, 12, 0}, &ft);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("disagrees"), std::string::npos);

  auto beyond = debug_offsets_image();
  uint64_t huge = 1ull << 40;
  std::memcpy(beyond.data() + 72, &huge, 8);  // threads_head past the interpreter's size
  r = detail::layout_from_debug_offsets(beyond, v313, &ft);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("implausible"), std::string::npos);

  r = detail::layout_from_debug_offsets(std::string(100, 'x'), v313, &ft);
  EXPECT_FALSE(r.ok());
}

// A shared object that exports the interpreter's anchors and _Py_RefTotal, as a
// Py_DEBUG build does: refused by name, not misread.
TEST(PyRuntime, DebugBuildAndNonPythonRefused) {
  if (std::system("cc --version >/dev/null 2>&1") != 0) GTEST_SKIP() << "no C compiler";
  TempDir dir("pyrt");
  std::string src = dir.str() + "/fake.c", so = dir.str() + "/libfake.so";
  FILE* f = std::fopen(src.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("char _PyRuntime[4096] = {1}; char PyCode_Type[400] = {1}; long _Py_RefTotal = 1;\n"
             "const unsigned long Py_Version = 0x030b07f0;\n", f);
  std::fclose(f);
  ASSERT_EQ(std::system(("cc -shared -fPIC -o " + so + " " + src).c_str()), 0);
  auto r = inspect_path(so);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("debug build"), std::string::npos) << r.error();

  auto libc = inspect_path("/lib/x86_64-linux-gnu/libc.so.6");
  ASSERT_FALSE(libc.ok());
  EXPECT_NE(libc.error().find("not a Python interpreter"), std::string::npos) << libc.error();
}

// 3.14 (or any version without a layout) is refused by name.
TEST(PyRuntime, UnknownVersionRefused) {
  if (std::system("cc --version >/dev/null 2>&1") != 0) GTEST_SKIP() << "no C compiler";
  TempDir dir("pyrt");
  std::string src = dir.str() + "/fake.c", so = dir.str() + "/libfake.so";
  FILE* f = std::fopen(src.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("char _PyRuntime[4096] = {1}; char PyCode_Type[400] = {1};\n"
             "const unsigned long Py_Version = 0x030e00f0;\n", f);
  std::fclose(f);
  ASSERT_EQ(std::system(("cc -shared -fPIC -o " + so + " " + src).c_str()), 0);
  auto r = inspect_path(so);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("3.14.0 has no layout"), std::string::npos) << r.error();
}

}  // namespace
}  // namespace argus::python

namespace argus::python {
namespace {

// A live interpreter of every kind: found by its symbols, the runtime at the
// address its mappings give, and its GC counters show the two gc.collect() calls.
TEST_P(InterpreterFileTest, LocatedLiveAndGcCountersRead) {
  auto in = GetParam();
  if (!test::have(in)) {
    test::skip_or_fail(in);
    return;
  }
  TempDir dir("pyrt");
  std::string script = test::write_file(dir.str() + "/gc.py",
                                        "import gc, time\n"
                                        "gc.collect(); gc.collect()\n"
                                        "print('ready', flush=True)\n"
                                        "time.sleep(60)\n");
  test::PyChild child(in.exe, script);
  ASSERT_EQ(child.line(), "ready");
  PythonLocator locator;
  auto p = locator.locate(child.pid());
  ASSERT_TRUE(p.ok()) << p.error();
  EXPECT_EQ(p->file->layout.version.str(), in.version);
  EXPECT_EQ(p->runtime_addr, p->file->runtime_vaddr + p->load_bias);
  if (in.lib == in.exe) {
    EXPECT_EQ(p->load_bias, 0u);  // Debian's non-PIE executable
  }
  auto mem = process_memory(child.pid());
  EXPECT_NE(main_interpreter(*p, *mem), 0u);
  auto counts = read_gc_collections(*p, *mem);
  ASSERT_TRUE(counts.has_value());
  EXPECT_GE((*counts)[2], 2);
  auto cfg = bpf_config(*p, gc_stats_address(*p, *mem));
  EXPECT_EQ(cfg.version, p->file->layout.version.hex());
  EXPECT_EQ(cfg.runtime_addr, p->runtime_addr);
  EXPECT_NE(cfg.gc_stats_addr, 0u);
  EXPECT_EQ(cfg.frame_owner == ARGUS_PY_NO_OFFSET, p->file->layout.version.minor == 10);
  // A second locate is served from the cache, same file object.
  auto again = locator.locate(child.pid());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->file.get(), p->file.get());
  EXPECT_TRUE(locator.refusals().empty());
}

TEST(PyRuntime, NonPythonProcessIsNotPython) {
  PythonLocator locator;
  auto r = locator.locate(static_cast<int>(::getpid()));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().rfind("not python", 0), 0u) << r.error();
}

}  // namespace
}  // namespace argus::python
