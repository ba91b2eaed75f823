// Symbol resolution: proven on real symbol tables (NCCL, the CUDA stub, libc)
// against binutils' own view, and on hundreds of malformed images that must
// each come back as a clean error (or a table), never a crash.
#include "userspace/elf/elf_symbols.h"

#include <elf.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace argus::elf {
namespace {

namespace fs = std::filesystem;

const std::string kNccl = ARGUS_CUDA_ROOT "/lib/libnccl.so.2";
const std::string kCudaStub = ARGUS_CUDA_ROOT "/lib64/stubs/libcuda.so";
const std::string kLibc = "/lib/x86_64-linux-gnu/libc.so.6";

bool exists(const std::string& p) { return ::access(p.c_str(), R_OK) == 0; }

std::string run(const std::string& cmd) {
  std::string out;
  FILE* f = ::popen(cmd.c_str(), "r");
  if (!f) return out;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  ::pclose(f);
  return out;
}

bool have_readelf() { return std::system("readelf --version >/dev/null 2>&1") == 0; }

std::vector<std::byte> slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  std::vector<std::byte> out(static_cast<size_t>(std::max<std::streamoff>(in.tellg(), 0)));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(out.size()));
  return out;
}

// ---- An independent reference: binutils' readelf -------------------------

struct Load {
  uint64_t offset, vaddr, memsz;
};

std::vector<Load> readelf_loads(const std::string& path) {
  std::vector<Load> loads;
  std::istringstream in(run("readelf -lW '" + path + "'"));
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream l(line);
    std::string type, off, vaddr, paddr, filesz, memsz;
    if (!(l >> type >> off >> vaddr >> paddr >> filesz >> memsz) || type != "LOAD") continue;
    loads.push_back({std::stoull(off, nullptr, 16), std::stoull(vaddr, nullptr, 16), std::stoull(memsz, nullptr, 16)});
  }
  return loads;
}

struct RefSym {
  std::string name, version;
  bool default_version = true;
  uint64_t value = 0, size = 0;
  std::string type, bind;
};

// Defined FUNC/IFUNC/OBJECT entries of readelf --dyn-syms -W.
std::vector<RefSym> readelf_dynsyms(const std::string& path) {
  std::vector<RefSym> out;
  std::istringstream in(run("readelf --dyn-syms -W '" + path + "'"));
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream l(line);
    std::string num, value, size, type, bind, vis, ndx, name;
    if (!(l >> num >> value >> size >> type >> bind >> vis >> ndx >> name)) continue;
    if (num.empty() || num.back() != ':' || ndx == "UND" || ndx == "ABS") continue;
    if (type != "FUNC" && type != "IFUNC" && type != "OBJECT") continue;
    RefSym r;
    r.value = std::stoull(value, nullptr, 16);
    r.size = std::stoull(size, nullptr, size.rfind("0x", 0) == 0 ? 16 : 10);
    r.type = type;
    r.bind = bind;
    size_t at = name.find('@');
    r.name = name.substr(0, at);
    if (at != std::string::npos) {
      r.default_version = name.compare(at, 2, "@@") == 0;
      r.version = name.substr(at + (r.default_version ? 2 : 1));
    }
    out.push_back(r);
  }
  return out;
}

uint64_t expected_offset(const std::vector<Load>& loads, uint64_t v) {
  for (const auto& l : loads) {
    if (v >= l.vaddr && v < l.vaddr + l.memsz) return v - l.vaddr + l.offset;
  }
  return 0;
}

// Every defined function/object readelf lists must be ours, with the same
// value, version, binding, type and the file offset computed from readelf -l.
void cross_check(const std::string& path, const SymbolTable& t, size_t min_count) {
  auto refs = readelf_dynsyms(path);
  auto loads = readelf_loads(path);
  ASSERT_GE(refs.size(), min_count) << path;
  ASSERT_FALSE(loads.empty()) << path;
  for (const auto& r : refs) {
    const Symbol* match = nullptr;
    for (const Symbol* s : t.find_all(r.name)) {
      if (s->dynamic && s->value == r.value && s->version == r.version) match = s;
    }
    ASSERT_NE(match, nullptr) << path << ": " << r.name << "@" << r.version;
    EXPECT_EQ(match->default_version, r.default_version) << r.name;
    EXPECT_EQ(match->size, r.size) << r.name;
    EXPECT_EQ(match->is_function, r.type != "OBJECT") << r.name;
    EXPECT_EQ(match->ifunc, r.type == "IFUNC") << r.name;
    EXPECT_EQ(match->weak, r.bind == "WEAK") << r.name;
    EXPECT_EQ(match->global, r.bind == "GLOBAL" || r.bind == "UNIQUE") << r.name;
    EXPECT_TRUE(match->mapped) << r.name;
    EXPECT_EQ(match->file_offset, expected_offset(loads, r.value)) << r.name;
  }
}

// ---- Real libraries ----------------------------------------------------------

TEST(ElfSymbols, RealNcclAliasesAndApi) {
  if (!exists(kNccl)) GTEST_SKIP() << kNccl << " absent (the CUDA toolkit/NCCL is optional)";
  auto t = read_symbols(kNccl);
  ASSERT_TRUE(t.ok()) << t.error();
  EXPECT_EQ(t->machine(), EM_X86_64);
  EXPECT_EQ(t->type(), ET_DYN);

  const Symbol* weak = t->find("ncclAllReduce");
  const Symbol* strong = t->find("pncclAllReduce");
  ASSERT_NE(weak, nullptr);
  ASSERT_NE(strong, nullptr);
  EXPECT_TRUE(weak->weak);
  EXPECT_FALSE(weak->global);
  EXPECT_TRUE(strong->global);
  EXPECT_EQ(weak->value, strong->value);
  EXPECT_EQ(weak->file_offset, strong->file_offset);
  EXPECT_TRUE(weak->dynamic);

  for (const char* name : {"ncclAllReduce", "ncclAllGather", "ncclReduceScatter", "ncclBroadcast", "ncclBcast",
                           "ncclReduce", "ncclAlltoAll", "ncclSend", "ncclRecv", "ncclGroupStart", "ncclGroupEnd",
                           "ncclCommInitRank", "ncclCommInitRankConfig", "ncclCommInitRankScalable"}) {
    const Symbol* s = t->find(name);
    ASSERT_NE(s, nullptr) << name;
    EXPECT_TRUE(s->is_function) << name;
    EXPECT_FALSE(s->ifunc) << name;
    EXPECT_TRUE(s->mapped) << name;
    EXPECT_NE(s->file_offset, 0u) << name;
  }
  EXPECT_TRUE(t->exports_any({"noSuchThing", "ncclAllReduce"}));
  EXPECT_FALSE(t->exports_any({"cuLaunchKernel"}));
}

TEST(ElfSymbols, RealNcclOffsetsMatchReadelf) {
  if (!exists(kNccl)) GTEST_SKIP() << kNccl << " absent (the CUDA toolkit/NCCL is optional)";
  if (!have_readelf()) GTEST_SKIP() << "readelf (binutils) not installed";
  auto t = read_symbols(kNccl);
  ASSERT_TRUE(t.ok()) << t.error();
  cross_check(kNccl, *t, 100);
  // nm -D agrees on the address of the weak alias too.
  std::string nm = run("nm -D --defined-only '" + kNccl + "' | grep -E ' ncclAllReduce$'");
  if (!nm.empty()) {
    EXPECT_EQ(std::stoull(nm, nullptr, 16), t->find("ncclAllReduce")->value);
  }
}

TEST(ElfSymbols, RealNcclSymtabOptional) {
  if (!exists(kNccl)) GTEST_SKIP() << kNccl << " absent (the CUDA toolkit/NCCL is optional)";
  auto full = read_symbols(kNccl);
  auto dyn = read_symbols(kNccl, {.include_symtab = false});
  ASSERT_TRUE(full.ok()) << full.error();
  ASSERT_TRUE(dyn.ok()) << dyn.error();
  EXPECT_FALSE(dyn->has_symtab());
  EXPECT_GE(full->symbols().size(), dyn->symbols().size());
  for (const auto& s : dyn->symbols()) EXPECT_TRUE(s.dynamic);
  // .symtab duplicates of exported symbols are folded into the .dynsym entry.
  EXPECT_EQ(full->find_all("ncclAllReduce").size(), 1u);
}

TEST(ElfSymbols, CudaStubDriverApi) {
  if (!exists(kCudaStub)) GTEST_SKIP() << kCudaStub << " absent (the CUDA toolkit is optional)";
  auto t = read_symbols(kCudaStub);
  ASSERT_TRUE(t.ok()) << t.error();
  std::vector<uint64_t> addrs;
  for (const char* name : {"cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchKernelEx", "cuStreamSynchronize",
                           "cuStreamSynchronize_ptsz", "cuMemAlloc_v2", "cuMemAlloc", "cuCtxSynchronize"}) {
    const Symbol* s = t->find(name);
    ASSERT_NE(s, nullptr) << name;
    EXPECT_TRUE(s->is_function && s->global && s->mapped) << name;
    addrs.push_back(s->value);
  }
  std::sort(addrs.begin(), addrs.end());
  EXPECT_EQ(std::adjacent_find(addrs.begin(), addrs.end()), addrs.end()) << "aliased addresses";
  EXPECT_TRUE(t->exports_any({"cuLaunchKernel"}));
  if (have_readelf()) cross_check(kCudaStub, *t, 100);
}

// The simulator's shims must be recognised exactly like the real libraries.
TEST(ElfSymbols, SimShimsExportTheRealNames) {
  const std::string nccl = ARGUS_BUILD_DIR "/lib/libnccl.so.2";
  const std::string cuda = ARGUS_BUILD_DIR "/lib/libcuda.so.1";
  if (!exists(nccl) || !exists(cuda)) GTEST_SKIP() << "simulator shims not built yet";
  auto n = read_symbols(nccl);
  auto c = read_symbols(cuda);
  ASSERT_TRUE(n.ok()) << n.error();
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_TRUE(n->exports_any({"ncclAllReduce"}));
  EXPECT_TRUE(c->exports_any({"cuLaunchKernel"}));
  for (const char* name : {"ncclAllReduce", "ncclSend", "ncclGroupEnd", "ncclCommInitRank"}) {
    const Symbol* s = n->find(name);
    ASSERT_NE(s, nullptr) << name;
    EXPECT_TRUE(s->mapped && s->file_offset != 0) << name;
  }
  for (const char* name : {"cuLaunchKernel", "cuStreamSynchronize", "cuMemAlloc_v2"}) {
    EXPECT_NE(c->find(name), nullptr) << name;
  }
  if (have_readelf()) {
    cross_check(nccl, *n, 10);
    cross_check(cuda, *c, 10);
  }
}

TEST(ElfSymbols, LibcDefaultVersionWins) {
  if (!exists(kLibc)) GTEST_SKIP() << kLibc << " absent (not a Debian x86-64 host)";
  auto t = read_symbols(kLibc);
  ASSERT_TRUE(t.ok()) << t.error();

  auto all = t->find_all("memcpy");
  ASSERT_GE(all.size(), 2u);
  const Symbol* m = t->find("memcpy");
  ASSERT_NE(m, nullptr);
  EXPECT_TRUE(m->default_version);
  EXPECT_EQ(m->version, "GLIBC_2.14");
  EXPECT_TRUE(m->ifunc);  // memcpy@@GLIBC_2.14 is an IFUNC resolver: must be flagged
  bool saw_old = false;
  for (const Symbol* s : all) {
    if (s->version == "GLIBC_2.2.5") {
      saw_old = true;
      EXPECT_FALSE(s->default_version);
      EXPECT_NE(s->value, m->value);
    }
  }
  EXPECT_TRUE(saw_old);

  const Symbol* r = t->find("realpath");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->version, "GLIBC_2.3");
  EXPECT_EQ(t->find_all("realpath").size(), 2u);

  EXPECT_EQ(t->find("no_such_function_anywhere"), nullptr);
  EXPECT_EQ(t->find("environ"), nullptr);  // an object, not a function
  EXPECT_NE(t->find_object("environ"), nullptr);
  if (have_readelf()) cross_check(kLibc, *t, 1000);
}

TEST(ElfSymbols, MemoryImageEqualsFile) {
  std::string path = exists(kLibc) ? kLibc : "/proc/self/exe";
  auto bytes = slurp(path);
  auto a = read_symbols(path);
  auto b = parse_symbols(bytes);
  ASSERT_TRUE(a.ok()) << a.error();
  ASSERT_TRUE(b.ok()) << b.error();
  ASSERT_EQ(a->symbols().size(), b->symbols().size());
  for (size_t i = 0; i < a->symbols().size(); ++i) {
    EXPECT_EQ(a->symbols()[i].name, b->symbols()[i].name);
    EXPECT_EQ(a->symbols()[i].file_offset, b->symbols()[i].file_offset);
  }
}

TEST(ElfSymbols, OwnExecutableHasSymtabLocals) {
  // This test binary is not stripped: .symtab adds local (static) functions.
  auto t = read_symbols("/proc/self/exe");
  ASSERT_TRUE(t.ok()) << t.error();
  EXPECT_TRUE(t->has_symtab());
  EXPECT_NE(t->find("main"), nullptr);
  bool saw_local = false;
  for (const auto& s : t->symbols()) saw_local |= !s.global && !s.weak;
  EXPECT_TRUE(saw_local);
}

// ---- Files that are not what they claim ---------------------------------------

class ElfBadFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("argus-elf-test-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& content) {
    std::string p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary) << content;
    return p;
  }
  fs::path dir_;
};

void expect_one_line_error(const ParseResult<SymbolTable>& r, const std::string& needle) {
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find(needle), std::string::npos) << r.error();
  EXPECT_EQ(r.error().find('\n'), std::string::npos) << r.error();
}

TEST_F(ElfBadFiles, ElfEmptyTextDirectoryMissingFifo) {
  expect_one_line_error(read_symbols(write("empty", "")), "empty file");
  expect_one_line_error(read_symbols(write("text", "hello, I am not an ELF file\n")), "not an ELF file");
  expect_one_line_error(read_symbols(write("short", "\x7f" "EL")), "not an ELF file");
  expect_one_line_error(read_symbols(dir_.string()), "is a directory");
  expect_one_line_error(read_symbols((dir_ / "nope.so").string()), "nope.so");
  std::string fifo = (dir_ / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_one_line_error(read_symbols(fifo), "not a regular file");  // and does not block
}

TEST_F(ElfBadFiles, ElfWrongClassOrEndianOrType) {
  std::string elf32 = std::string("\x7f" "ELF") + char(ELFCLASS32) + char(ELFDATA2LSB) + std::string(64, '\0');
  std::string path = write("elf32", elf32);
  expect_one_line_error(read_symbols(path), "not a 64-bit little-endian ELF: " + path);
  std::string be = std::string("\x7f" "ELF") + char(ELFCLASS64) + char(ELFDATA2MSB) + std::string(64, '\0');
  expect_one_line_error(read_symbols(write("be", be)), "not a 64-bit little-endian ELF");

  auto img = slurp("/proc/self/exe");
  Elf64_Ehdr eh;
  std::memcpy(&eh, img.data(), sizeof eh);
  eh.e_type = ET_REL;
  std::memcpy(img.data(), &eh, sizeof eh);
  expect_one_line_error(parse_symbols(img), "unsupported ELF type");
}

TEST(ElfMalformed, SizeLimit) {
  auto img = slurp("/proc/self/exe");
  expect_one_line_error(parse_symbols(img, {.max_file_bytes = 1000}), "larger than");
  expect_one_line_error(read_symbols("/proc/self/exe", {.max_file_bytes = 1000}), "larger than");
}

// Every prefix of a real library parses cleanly or fails cleanly.
TEST(ElfMalformed, TruncatedAtManyLengths) {
  for (const std::string& path : {kLibc, kCudaStub, std::string("/proc/self/exe")}) {
    if (!exists(path)) continue;
    auto img = slurp(path);
    std::vector<size_t> lengths = {0, 1, 4, 5, 16, 63, 64, 65, 120};
    for (size_t n = 0; n < std::min<size_t>(img.size(), 64 << 10); n += 97) lengths.push_back(n);
    // The section headers and symbol tables sit near the end: cut there too.
    for (size_t n = img.size() > (64 << 10) ? img.size() - (64 << 10) : 0; n < img.size(); n += 97) lengths.push_back(n);
    lengths.push_back(img.size() - 1);
    for (size_t n : lengths) {
      auto r = parse_symbols(std::span(img.data(), std::min(n, img.size())));
      if (!r.ok()) {
        EXPECT_EQ(r.error().find('\n'), std::string::npos);
      }
    }
    // A file cut inside its section header table is an error, not a short table.
    auto r = parse_symbols(std::span(img.data(), img.size() - 1));
    EXPECT_FALSE(r.ok()) << path;
  }
}

// ---- Hand-damaged images ------------------------------------------------------

struct Image {
  std::vector<std::byte> bytes;
  Elf64_Ehdr eh() const {
    Elf64_Ehdr e;
    std::memcpy(&e, bytes.data(), sizeof e);
    return e;
  }
  void set_eh(const Elf64_Ehdr& e) { std::memcpy(bytes.data(), &e, sizeof e); }
  Elf64_Shdr sh(size_t i) const {
    Elf64_Shdr s;
    std::memcpy(&s, bytes.data() + eh().e_shoff + i * sizeof s, sizeof s);
    return s;
  }
  void set_sh(size_t i, const Elf64_Shdr& s) { std::memcpy(bytes.data() + eh().e_shoff + i * sizeof s, &s, sizeof s); }
  int find(uint32_t type) const {
    for (size_t i = 0; i < eh().e_shnum; ++i)
      if (sh(i).sh_type == type) return static_cast<int>(i);
    return -1;
  }
};

// The CUDA stub when present (small, with versions absent but a .symtab), else this binary.
Image sample() {
  return Image{slurp(exists(kCudaStub) ? kCudaStub : "/proc/self/exe")};
}

TEST(ElfMalformed, SectionHeaderFieldsOutOfBounds) {
  Image base = sample();
  int dynsym = base.find(SHT_DYNSYM);
  ASSERT_GE(dynsym, 0);
  ASSERT_TRUE(parse_symbols(base.bytes).ok());

  auto damaged = [&](auto mutate) {
    Image img = base;
    mutate(img);
    return parse_symbols(img.bytes);
  };
  auto edit_sh = [&](int idx, auto f) {
    return damaged([&](Image& img) {
      auto s = img.sh(idx);
      f(s);
      img.set_sh(idx, s);
    });
  };
  auto edit_eh = [&](auto f) {
    return damaged([&](Image& img) {
      auto e = img.eh();
      f(e);
      img.set_eh(e);
    });
  };
  const uint64_t kHuge = ~0ull - 7;

  expect_one_line_error(edit_eh([](Elf64_Ehdr& e) { e.e_shoff = 1ull << 40; }), "section header table beyond end");
  expect_one_line_error(edit_eh([&](Elf64_Ehdr& e) { e.e_shoff = kHuge; }), "section header table beyond end");
  expect_one_line_error(edit_eh([](Elf64_Ehdr& e) { e.e_shnum = 0xffff; }), "section header");
  expect_one_line_error(edit_eh([](Elf64_Ehdr& e) { e.e_shentsize = 12; }), "section header size");
  expect_one_line_error(edit_eh([&](Elf64_Ehdr& e) { e.e_phoff = kHuge; }), "program header table beyond end");
  expect_one_line_error(edit_eh([](Elf64_Ehdr& e) { e.e_phentsize = 3; }), "program header size");
  // e_shnum 0 with a section 0 claiming 2^60 sections.
  expect_one_line_error(damaged([](Image& img) {
                          auto s0 = img.sh(0);
                          s0.sh_size = 1ull << 60;
                          img.set_sh(0, s0);
                          auto e = img.eh();
                          e.e_shnum = 0;
                          img.set_eh(e);
                        }),
                        "section header count 1152921504606846976 over the cap");

  expect_one_line_error(edit_sh(dynsym, [](Elf64_Shdr& s) { s.sh_offset = 1ull << 40; }), ".dynsym beyond end");
  expect_one_line_error(edit_sh(dynsym, [&](Elf64_Shdr& s) { s.sh_offset = kHuge; }), ".dynsym beyond end");
  expect_one_line_error(edit_sh(dynsym, [](Elf64_Shdr& s) { s.sh_size = 24ull << 40; }), ".dynsym");
  expect_one_line_error(edit_sh(dynsym, [](Elf64_Shdr& s) { s.sh_size = 24ull * (1ull << 58); }),
                        ".dynsym symbol count 288230376151711744 over the cap");
  expect_one_line_error(edit_sh(dynsym, [](Elf64_Shdr& s) { s.sh_size += 5; }), "multiple of its entry size");
  expect_one_line_error(edit_sh(dynsym, [](Elf64_Shdr& s) { s.sh_entsize = 0; }), "bad entry size");
  expect_one_line_error(edit_sh(dynsym, [](Elf64_Shdr& s) { s.sh_link = 60000; }), "no valid string table");
  expect_one_line_error(edit_sh(dynsym, [&](Elf64_Shdr& s) { s.sh_link = static_cast<uint32_t>(s.sh_link == 0 ? 1 : 0); }),
                        "no valid string table");

  // The string table loses its NULs: names run off its end.
  uint32_t strtab = base.sh(dynsym).sh_link;
  expect_one_line_error(damaged([&](Image& img) {
                          auto s = img.sh(strtab);
                          std::memset(img.bytes.data() + s.sh_offset, 'A', s.sh_size);
                        }),
                        "not NUL-terminated");
  // ... or shrinks below the names' offsets.
  expect_one_line_error(edit_sh(strtab, [](Elf64_Shdr& s) { s.sh_size = 3; }), "out of bounds");
  // A symbol count of 1 (only the null symbol) is a valid, empty table.
  auto one = edit_sh(dynsym, [](Elf64_Shdr& s) { s.sh_size = sizeof(Elf64_Sym); });
  EXPECT_TRUE(one.ok());
}

TEST(ElfMalformed, VersionSectionsDamaged) {
  if (!exists(kLibc)) GTEST_SKIP() << kLibc << " absent";
  Image base{slurp(kLibc)};
  int versym = base.find(SHT_GNU_versym);
  int verdef = base.find(SHT_GNU_verdef);
  ASSERT_GE(versym, 0);
  ASSERT_GE(verdef, 0);

  // Version indices that name no definition: the symbols become unversioned.
  Image img = base;
  auto vs = img.sh(versym);
  for (uint64_t i = 0; i + 1 < vs.sh_size; i += 2) {
    img.bytes[vs.sh_offset + i] = std::byte{0xf0};
    img.bytes[vs.sh_offset + i + 1] = std::byte{0x7f};
  }
  auto r = parse_symbols(img.bytes);
  ASSERT_TRUE(r.ok()) << r.error();
  ASSERT_NE(r->find("memcpy"), nullptr);
  EXPECT_EQ(r->find("memcpy")->version, "");

  // .gnu.version shorter than .dynsym: the rest are unversioned, no over-read.
  img = base;
  vs.sh_size = 8;
  img.set_sh(versym, vs);
  EXPECT_TRUE(parse_symbols(img.bytes).ok());

  // Verdef entries pointing outside their section.
  img = base;
  auto vd = img.sh(verdef);
  Elf64_Verdef def;
  std::memcpy(&def, img.bytes.data() + vd.sh_offset, sizeof def);
  def.vd_next = 0xfffffff0;
  std::memcpy(img.bytes.data() + vd.sh_offset, &def, sizeof def);
  expect_one_line_error(parse_symbols(img.bytes), ".gnu.version_d");

  img = base;
  vd.sh_size = 10;
  img.set_sh(verdef, vd);
  expect_one_line_error(parse_symbols(img.bytes), ".gnu.version_d");
}

// Random damage to the headers: deterministic seed, thousands of cases.
TEST(ElfMalformed, RandomByteFlipsInHeaders) {
  // libc (versions, 3000 symbols) costs more per parse: fewer cases there.
  std::vector<std::pair<Image, int>> bases = {{sample(), 1500}};
  if (exists(kLibc)) bases.push_back({Image{slurp(kLibc)}, 300});
  std::mt19937_64 rng(0xA4605);
  size_t ok = 0, failed = 0;
  for (const auto& [base, cases] : bases) {
    Elf64_Ehdr eh = base.eh();
    uint64_t sh_begin = eh.e_shoff, sh_len = uint64_t{eh.e_shnum} * sizeof(Elf64_Shdr);
    int dynsym = base.find(SHT_DYNSYM);
    auto ds = base.sh(dynsym);
    auto str = base.sh(ds.sh_link);
    // Regions worth hitting: ELF + program headers, section headers, the
    // start of .dynsym and of its string table.
    struct Region {
      uint64_t begin, len;
    };
    std::vector<Region> regions = {{0, sizeof(Elf64_Ehdr) + uint64_t{eh.e_phnum} * sizeof(Elf64_Phdr)},
                                   {sh_begin, sh_len},
                                   {ds.sh_offset, std::min<uint64_t>(ds.sh_size, 4096)},
                                   {str.sh_offset, std::min<uint64_t>(str.sh_size, 4096)}};
    Image img = base;  // damaged in place and repaired after each case: no 2 MiB copy per case
    for (int iter = 0; iter < cases; ++iter) {
      const Region& reg = regions[iter % regions.size()];
      int flips = 1 + static_cast<int>(rng() % 8);
      std::vector<uint64_t> touched;
      for (int f = 0; f < flips; ++f) {
        uint64_t at = reg.begin + rng() % reg.len;
        touched.push_back(at);
        img.bytes[at] = static_cast<std::byte>(rng());
      }
      auto r = parse_symbols(img.bytes);
      for (uint64_t at : touched) img.bytes[at] = base.bytes[at];
      if (r.ok()) {
        ++ok;
        for (const auto& s : r->symbols()) ASSERT_FALSE(s.name.empty());
      } else {
        ++failed;
        EXPECT_EQ(r.error().find('\n'), std::string::npos);
      }
    }
  }
  EXPECT_GT(ok, 0u);
  EXPECT_GT(failed, 0u);
}

TEST(ElfMalformed, GarbageImages) {
  std::mt19937_64 rng(7);
  for (int iter = 0; iter < 500; ++iter) {
    std::vector<std::byte> img(rng() % 4096);
    for (auto& b : img) b = static_cast<std::byte>(rng());
    if (img.size() >= 6 && iter % 2 == 0) {  // half of them pass the ident checks
      std::memcpy(img.data(), ELFMAG, SELFMAG);
      img[EI_CLASS] = std::byte{ELFCLASS64};
      img[EI_DATA] = std::byte{ELFDATA2LSB};
      if (img.size() >= sizeof(Elf64_Ehdr)) {
        img[16] = std::byte{ET_DYN};
        img[17] = std::byte{0};
      }
    }
    auto r = parse_symbols(img);
    if (!r.ok()) {
        EXPECT_EQ(r.error().find('\n'), std::string::npos);
      }
  }
}

}  // namespace
}  // namespace argus::elf
