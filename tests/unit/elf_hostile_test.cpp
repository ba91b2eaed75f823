// A crafted ELF costs bounded time and memory: header counts are bounded only
// by the file size, and a sparse file is as large as its owner likes. Each
// test builds its hostile image from scratch and holds the parse to the caps
// (ReadOptions) by what the parse reports it did (ParseCost), not by a clock.
#include <elf.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "tests/support/temp_dir.h"
#include "userspace/common/unique_fd.h"
#include "userspace/elf/elf_symbols.h"

namespace argus::elf {
namespace {

// A minimal ET_DYN image: N PT_LOAD segments, a .dynsym of `nsyms` functions
// spread over them, its .dynstr, and a .note section when notes are given.
struct Spec {
  size_t loads = 1;
  size_t nsyms = 10;
  std::vector<std::vector<std::byte>> notes = {};  // raw note records
};

template <typename T>
void put(std::vector<std::byte>& b, size_t off, const T& v) {
  if (b.size() < off + sizeof(T)) b.resize(off + sizeof(T));
  std::memcpy(b.data() + off, &v, sizeof(T));
}

void append(std::vector<std::byte>& b, const void* p, size_t n) {
  const auto* c = static_cast<const std::byte*>(p);
  b.insert(b.end(), c, c + n);
}

constexpr uint64_t kSegment = 0x100000;

std::vector<std::byte> build(const Spec& spec) {
  std::vector<std::byte> img(sizeof(Elf64_Ehdr));
  const size_t phoff = img.size();
  img.resize(phoff + spec.loads * sizeof(Elf64_Phdr));
  for (size_t i = 0; i < spec.loads; ++i) {
    Elf64_Phdr ph{};
    ph.p_type = PT_LOAD;
    ph.p_vaddr = i * kSegment;
    ph.p_offset = 0;
    ph.p_memsz = ph.p_filesz = kSegment;
    put(img, phoff + i * sizeof ph, ph);
  }
  // .dynstr: "\0f0\0f1\0..."
  const size_t strtab_off = img.size();
  std::vector<uint32_t> name_off;
  img.push_back(std::byte{0});
  for (size_t i = 0; i < spec.nsyms; ++i) {
    name_off.push_back(static_cast<uint32_t>(img.size() - strtab_off));
    const std::string n = "f" + std::to_string(i) + '\0';
    append(img, n.data(), n.size());
  }
  const size_t strtab_size = img.size() - strtab_off;
  while (img.size() % 8) img.push_back(std::byte{0});
  const size_t symtab_off = img.size();
  img.resize(symtab_off + (spec.nsyms + 1) * sizeof(Elf64_Sym));
  for (size_t i = 0; i < spec.nsyms; ++i) {
    Elf64_Sym s{};
    s.st_name = name_off[i];
    s.st_info = ELF64_ST_INFO(STB_GLOBAL, STT_FUNC);
    s.st_shndx = 1;
    s.st_value = (i % spec.loads) * kSegment + 16 * (i / spec.loads % 1000) + 16;
    put(img, symtab_off + (i + 1) * sizeof s, s);
  }
  size_t note_off = img.size(), note_size = 0;
  for (const auto& n : spec.notes) append(img, n.data(), n.size());
  note_size = img.size() - note_off;
  while (img.size() % 8) img.push_back(std::byte{0});

  const size_t shoff = img.size();
  std::vector<Elf64_Shdr> sh(spec.notes.empty() ? 3 : 4);
  sh[1].sh_type = SHT_DYNSYM;
  sh[1].sh_offset = symtab_off;
  sh[1].sh_size = (spec.nsyms + 1) * sizeof(Elf64_Sym);
  sh[1].sh_entsize = sizeof(Elf64_Sym);
  sh[1].sh_link = 2;
  sh[2].sh_type = SHT_STRTAB;
  sh[2].sh_offset = strtab_off;
  sh[2].sh_size = strtab_size;
  if (!spec.notes.empty()) {
    sh[3].sh_type = SHT_NOTE;
    sh[3].sh_offset = note_off;
    sh[3].sh_size = note_size;
  }
  for (const auto& s : sh) append(img, &s, sizeof s);

  Elf64_Ehdr eh{};
  std::memcpy(eh.e_ident, ELFMAG, SELFMAG);
  eh.e_ident[EI_CLASS] = ELFCLASS64;
  eh.e_ident[EI_DATA] = ELFDATA2LSB;
  eh.e_ident[EI_VERSION] = EV_CURRENT;
  eh.e_type = ET_DYN;
  eh.e_machine = EM_X86_64;
  eh.e_phoff = phoff;
  eh.e_phentsize = sizeof(Elf64_Phdr);
  eh.e_phnum = static_cast<uint16_t>(spec.loads);
  eh.e_shoff = shoff;
  eh.e_shentsize = sizeof(Elf64_Shdr);
  eh.e_shnum = static_cast<uint16_t>(sh.size());
  put(img, 0, eh);
  return img;
}

std::vector<std::byte> usdt_note(const std::string& provider, const std::string& name, const std::string& args) {
  std::vector<std::byte> desc(24);
  put(desc, 0, uint64_t{0x1234});
  for (const std::string* s : {&provider, &name, &args}) append(desc, s->c_str(), s->size() + 1);
  while (desc.size() % 4) desc.push_back(std::byte{0});
  std::vector<std::byte> rec;
  Elf64_Nhdr nh{8, static_cast<Elf64_Word>(desc.size()), 3};
  append(rec, &nh, sizeof nh);
  append(rec, "stapsdt\0", 8);
  append(rec, desc.data(), desc.size());
  return rec;
}

void expect_limit(const ParseResult<SymbolTable>& r, const std::string& needle) {
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.failure().kind, ParseFailure::kOverLimit) << r.error();
  EXPECT_NE(r.error().find(needle), std::string::npos) << r.error();
}

TEST(ElfHostile, BuiltImageParses) {
  auto img = build({.loads = 3, .nsyms = 30});
  auto t = parse_symbols(img);
  ASSERT_TRUE(t.ok()) << t.error();
  const Symbol* f4 = t->find("f4");
  ASSERT_NE(f4, nullptr);
  EXPECT_TRUE(f4->mapped);
  EXPECT_EQ(f4->file_offset, f4->value - kSegment);  // symbol 4 lies in segment 1 (offset 0)
}

// Mapping a symbol to its segment is a binary search: ~log2(segments) steps
// per symbol, where a scan took segments x symbols (10^12 steps with the caps
// of old: 2^24 symbols x a file's worth of segments).
TEST(ElfHostile, SymbolToSegmentMappingIsLogarithmic) {
  constexpr size_t kSyms = 100000, kLoads = 64;
  ParseCost cost;
  auto t = parse_symbols(build({.loads = kLoads, .nsyms = kSyms}), {.cost = &cost});
  ASSERT_TRUE(t.ok()) << t.error();
  EXPECT_EQ(t->symbols().size(), kSyms);
  EXPECT_EQ(cost.symbols_visited, kSyms);
  EXPECT_LE(cost.segment_steps, kSyms * 7);  // log2(64) + 1
  for (size_t i : {0ul, 63ul, 64ul, 99999ul}) {
    const Symbol* s = t->find("f" + std::to_string(i));
    ASSERT_NE(s, nullptr) << i;
    EXPECT_TRUE(s->mapped) << i;
  }
}

TEST(ElfHostile, CountsOverTheirCapsAreRefused) {
  expect_limit(parse_symbols(build({.loads = 65, .nsyms = 1})), "PT_LOAD segment count 65 over the cap of 64");
  expect_limit(parse_symbols(build({.loads = 4, .nsyms = 200}), {.max_symbols = 100}),
               ".dynsym symbol count 201 over the cap of 100");
  auto img = build({.loads = 1, .nsyms = 1});
  Elf64_Ehdr eh;
  std::memcpy(&eh, img.data(), sizeof eh);
  eh.e_phnum = 60000;  // within the file size once the file is made that big
  put(img, 0, eh);
  img.resize(60000 * sizeof(Elf64_Phdr) + 4096);
  expect_limit(parse_symbols(img), "program header count 60000 over the cap of 512");
}

// A sparse file costs no disk but claims gigabytes: the read budget holds.
class SparseFile : public ::testing::Test {
 protected:
  // Writes the image, with its section headers moved to the end of a sparse file
  // `size` bytes long and the symbol table claiming `claim` bytes.
  UniqueFd write(std::vector<std::byte> img, uint64_t size, uint64_t dynsym_claim, uint64_t strtab_claim) {
    Elf64_Ehdr eh;
    std::memcpy(&eh, img.data(), sizeof eh);
    std::vector<Elf64_Shdr> sh(eh.e_shnum);
    std::memcpy(sh.data(), img.data() + eh.e_shoff, sh.size() * sizeof(Elf64_Shdr));
    if (dynsym_claim) sh[1].sh_size = dynsym_claim;
    if (strtab_claim) sh[2].sh_size = strtab_claim;
    eh.e_shoff = size - sh.size() * sizeof(Elf64_Shdr);
    put(img, 0, eh);
    const std::string path = dir_.path / "sparse.so";
    UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
    EXPECT_TRUE(fd.valid());
    EXPECT_EQ(::pwrite(fd.get(), img.data(), img.size(), 0), static_cast<ssize_t>(img.size()));
    EXPECT_EQ(::ftruncate(fd.get(), static_cast<off_t>(size)), 0);
    const auto n = static_cast<ssize_t>(sh.size() * sizeof(Elf64_Shdr));
    EXPECT_EQ(::pwrite(fd.get(), sh.data(), n, static_cast<off_t>(eh.e_shoff)), n);
    return fd;
  }
  testing_support::TempDir dir_{"elf-hostile"};
};

TEST_F(SparseFile, ClaimedTablesAreBoundedByTheReadBudget) {
  // 3 GiB file, a string table claiming 2.5 GiB: refused at the byte cap.
  auto fd = write(build({.nsyms = 8}), 3ull << 30, 0, 5ull << 29);
  ParseCost cost;
  auto t = read_symbols_fd(fd.get(), "sparse.so", {.cost = &cost});
  expect_limit(t, "bytes to read");
  EXPECT_LE(cost.bytes_read, ReadOptions{}.max_read_bytes);

  // The same with a small budget and a symbol table claiming 2^20 entries.
  auto fd2 = write(build({.nsyms = 8}), 1ull << 30, (1ull << 20) * sizeof(Elf64_Sym), 0);
  ParseCost cost2;
  expect_limit(read_symbols_fd(fd2.get(), "sparse.so", {.max_read_bytes = 4 << 20, .cost = &cost2}),
               "bytes to read");
  EXPECT_LE(cost2.bytes_read, 4u << 20);
}

TEST_F(SparseFile, SectionCountClaimedBySectionZeroIsCapped) {
  auto img = build({.nsyms = 1});
  Elf64_Ehdr eh;
  std::memcpy(&eh, img.data(), sizeof eh);
  Elf64_Shdr s0{};
  s0.sh_size = 40'000'000;  // the count, as for >= SHN_LORESERVE sections
  put(img, eh.e_shoff, s0);
  eh.e_shnum = 0;
  put(img, 0, eh);
  const std::string path = dir_.path / "many.so";
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  ASSERT_EQ(::pwrite(fd.get(), img.data(), img.size(), 0), static_cast<ssize_t>(img.size()));
  ASSERT_EQ(::ftruncate(fd.get(), 4ull << 30), 0);
  ParseCost cost;
  expect_limit(read_symbols_fd(fd.get(), path, {.cost = &cost}), "section header count 40000000 over the cap");
  EXPECT_LT(cost.bytes_read, 4096u);
}

TEST(ElfNotes, UsdtNotesAreRead) {
  Spec spec{.nsyms = 2};
  spec.notes.push_back(usdt_note("argus", "gpu_batch", "8@%rdi 4@%esi 8@%rdx"));
  spec.notes.push_back(usdt_note("argus", "gpu_name", "8@%rdi"));
  spec.notes.push_back(usdt_note("python", "gc__start", "-4@%edi"));
  auto notes = parse_usdt_notes(build(spec));
  ASSERT_TRUE(notes.ok()) << notes.error();
  ASSERT_EQ(notes->size(), 3u);
  EXPECT_EQ((*notes)[0].provider, "argus");
  EXPECT_EQ((*notes)[0].name, "gpu_batch");
  EXPECT_EQ((*notes)[0].args, "8@%rdi 4@%esi 8@%rdx");
  EXPECT_EQ((*notes)[0].pc, 0x1234u);
  EXPECT_EQ((*notes)[2].name, "gc__start");
  auto capped = parse_usdt_notes(build(spec), {.max_notes = 2});
  ASSERT_FALSE(capped.ok());
  EXPECT_EQ(capped.failure().kind, ParseFailure::kOverLimit) << capped.error();
}

TEST(ElfNotes, MalformedNotesAreCleanErrors) {
  auto bad = usdt_note("argus", "gpu_batch", "x");
  Elf64_Nhdr nh;
  std::memcpy(&nh, bad.data(), sizeof nh);
  nh.n_descsz = 0xfffffff0;  // runs off the section
  std::memcpy(bad.data(), &nh, sizeof nh);
  Spec spec{.nsyms = 1};
  spec.notes.push_back(bad);
  auto r = parse_usdt_notes(build(spec));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().find("note out of bounds"), std::string::npos) << r.error();

  auto short_desc = usdt_note("argus", "gpu_batch", "x");
  std::memcpy(&nh, short_desc.data(), sizeof nh);
  nh.n_descsz = 8;  // shorter than its three addresses
  std::memcpy(short_desc.data(), &nh, sizeof nh);
  Spec spec2{.nsyms = 1};
  spec2.notes.push_back(short_desc);
  auto r2 = parse_usdt_notes(build(spec2));
  EXPECT_FALSE(r2.ok());
}

// The real producers carry the probes the agent attaches to.
TEST(ElfNotes, RealProducerHasTheGpuProbes) {
  const std::string lib = ARGUS_BUILD_DIR "/lib/libcuda.so.1";  // the simulator's producer
  UniqueFd fd(::open(lib.c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(fd.valid()) << lib;
  auto notes = read_usdt_notes_fd(fd.get(), lib);
  ASSERT_TRUE(notes.ok()) << notes.error();
  int batch = 0, name = 0;
  for (const auto& n : *notes) {
    batch += n.provider == "argus" && n.name == "gpu_batch";
    name += n.provider == "argus" && n.name == "gpu_name";
  }
  EXPECT_GE(batch, 1);
  EXPECT_GE(name, 1);
}

}  // namespace
}  // namespace argus::elf
