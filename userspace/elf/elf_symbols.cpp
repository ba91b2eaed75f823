#include "userspace/elf/elf_symbols.h"

#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

namespace argus::elf {
namespace {

// ELF fields are read by memcpy straight into <elf.h> structs: right only on a
// little-endian host, which is every host we ship for (x86-64, aarch64).
static_assert(std::endian::native == std::endian::little, "host must be little-endian");

using Bytes = std::span<const std::byte>;

// .gnu.version entries: the low 15 bits index a version, the top bit hides it
// (a non-default "name@VER" that only explicitly versioned references bind to).
constexpr uint16_t kVersymIndex = 0x7fff;
constexpr uint16_t kVersymHidden = 0x8000;

constexpr std::string_view kLimitPrefix = "limit: ";
// SystemTap's USDT note: owner "stapsdt", type 3 (sys/sdt.h).
constexpr uint32_t kStapsdtNoteType = 3;

// off + len <= size, written so that it cannot overflow.
bool in_bounds(uint64_t off, uint64_t len, uint64_t size) { return off <= size && len <= size - off; }

template <typename T>
T load(Bytes b, uint64_t off) {  // caller has bounds-checked
  T v;
  std::memcpy(&v, b.data() + off, sizeof(T));
  return v;
}

// Where the bytes come from: an image in memory, or a file read in pieces.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual uint64_t size() const = 0;
  // [off, off+len), or nullopt when the range is not all there.
  virtual std::optional<Bytes> read(uint64_t off, uint64_t len) = 0;
};

class MemorySource final : public ByteSource {
 public:
  explicit MemorySource(Bytes image) : image_(image) {}
  uint64_t size() const override { return image_.size(); }
  std::optional<Bytes> read(uint64_t off, uint64_t len) override {
    if (!in_bounds(off, len, image_.size())) return std::nullopt;
    return image_.subspan(off, len);
  }

 private:
  Bytes image_;
};

// pread into owned buffers that live as long as the source. A short read (the
// file shrank since fstat) is an error like any other out-of-bounds range.
class FileSource final : public ByteSource {
 public:
  FileSource(int fd, uint64_t size) : fd_(fd), size_(size) {}
  uint64_t size() const override { return size_; }
  std::optional<Bytes> read(uint64_t off, uint64_t len) override {
    if (!in_bounds(off, len, size_)) return std::nullopt;
    if (len == 0) return Bytes{};
    auto buf = std::make_unique_for_overwrite<std::byte[]>(len);
    uint64_t done = 0;
    while (done < len) {
      ssize_t n = ::pread(fd_, buf.get() + done, len - done, static_cast<off_t>(off + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return std::nullopt;
      done += static_cast<uint64_t>(n);
    }
    Bytes out(buf.get(), len);
    buffers_.push_back(std::move(buf));
    return out;
  }

 private:
  int fd_;
  uint64_t size_;
  std::vector<std::unique_ptr<std::byte[]>> buffers_;
};

using Status = std::optional<ParseError>;  // nullopt = success

ParseError unreadable(std::string message) { return make_error(ParseFailure::kUnreadable, std::move(message)); }

// Two-level preference used by find(): lower sorts first.
int binding_rank(const Symbol& s) { return s.global ? 0 : s.weak ? 1 : 2; }
bool preferred(const Symbol& a, const Symbol& b) {
  return std::make_tuple(!a.default_version, binding_rank(a), !a.dynamic, a.value) <
         std::make_tuple(!b.default_version, binding_rank(b), !b.dynamic, b.value);
}

class Parser {
 public:
  Parser(ByteSource& src, std::string path, const ReadOptions& opts)
      : src_(src), path_(std::move(path)), opts_(opts), cost_(opts.cost != nullptr ? *opts.cost : own_cost_) {
    cost_ = ParseCost{};
  }

  ParseResult<SymbolTable> run() {
    if (auto e = read_header()) return *e;
    if (auto e = read_section_headers()) return *e;
    if (auto e = read_program_headers()) return *e;
    if (limit_) return *limit_;

    int dynsym = find_section(SHT_DYNSYM);
    int symtab = opts_.include_symtab ? find_section(SHT_SYMTAB) : -1;
    if (dynsym >= 0) {
      if (auto e = read_versions(dynsym)) return *e;
      if (auto e = read_table(dynsym, true)) return *e;
    }
    if (symtab >= 0) {
      if (auto e = read_table(symtab, false)) return *e;
    }
    return SymbolTable(std::move(out_), eh_.e_machine, eh_.e_type, symtab >= 0);
  }

  ParseResult<std::vector<UsdtNote>> run_notes() {
    if (auto e = read_header()) return *e;
    if (auto e = read_section_headers()) return *e;
    std::vector<UsdtNote> notes;
    for (size_t i = 0; i < shdrs_.size(); ++i) {
      if (shdrs_[i].sh_type != SHT_NOTE) continue;
      if (auto e = read_notes(i, notes)) return *e;
    }
    return notes;
  }

 private:
  ParseError fail(const std::string& what) const {
    if (limit_) return *limit_;  // a refused read shows as "beyond end of file": name the cap instead
    return unreadable(path_ + ": " + what);
  }
  ParseError over_cap(const std::string& what, uint64_t value, uint64_t cap) const {
    return make_error(ParseFailure::kOverLimit, std::string(kLimitPrefix) + path_ + ": " + what + " " + std::to_string(value) +
                      " over the cap of " + std::to_string(cap));
  }

  // Every byte taken from the file goes through here: the read budget holds
  // whatever sizes the headers claim (a sparse file costs no disk but its
  // claimed sections would cost memory).
  std::optional<Bytes> read(uint64_t off, uint64_t len) {
    if (len > opts_.max_read_bytes - std::min(opts_.max_read_bytes, cost_.bytes_read)) {
      if (!limit_) limit_ = over_cap("bytes to read", cost_.bytes_read + len, opts_.max_read_bytes);
      return std::nullopt;
    }
    auto got = src_.read(off, len);
    if (got) cost_.bytes_read += len;
    return got;
  }

  Status read_header() {
    uint64_t size = src_.size();
    if (size == 0) return fail("empty file");
    if (size > opts_.max_file_bytes) {
      return fail("file larger than " + std::to_string(opts_.max_file_bytes) + " bytes");
    }
    auto ident = read(0, std::min<uint64_t>(size, EI_NIDENT));
    if (!ident || ident->size() < SELFMAG || std::memcmp(ident->data(), ELFMAG, SELFMAG) != 0) {
      return unreadable("not an ELF file: " + path_);
    }
    if (ident->size() < EI_NIDENT || load<unsigned char>(*ident, EI_CLASS) != ELFCLASS64 ||
        load<unsigned char>(*ident, EI_DATA) != ELFDATA2LSB) {
      return unreadable("not a 64-bit little-endian ELF: " + path_);
    }
    auto hdr = read(0, sizeof(Elf64_Ehdr));
    if (!hdr) return fail("truncated ELF header");
    eh_ = load<Elf64_Ehdr>(*hdr, 0);
    if (eh_.e_type != ET_DYN && eh_.e_type != ET_EXEC) {
      return fail("unsupported ELF type " + std::to_string(eh_.e_type) + " (want ET_DYN or ET_EXEC)");
    }
    return std::nullopt;
  }

  Status read_section_headers() {
    // No section headers at all (an sstrip'ed file): nothing to read, not an error.
    if (eh_.e_shoff == 0) return std::nullopt;
    if (eh_.e_shentsize != sizeof(Elf64_Shdr)) {
      return fail("bad section header size " + std::to_string(eh_.e_shentsize));
    }
    uint64_t count = eh_.e_shnum;
    if (count == 0) {
      // >= SHN_LORESERVE sections: the real count is section 0's sh_size.
      auto first = read(eh_.e_shoff, sizeof(Elf64_Shdr));
      if (!first) return fail("section header table beyond end of file");
      count = load<Elf64_Shdr>(*first, 0).sh_size;
    }
    if (count > opts_.max_sections) return over_cap("section header count", count, opts_.max_sections);
    // count * 64 cannot overflow once count is bounded by the file size.
    if (count > src_.size() / sizeof(Elf64_Shdr)) return fail("section header count too large");
    auto table = read(eh_.e_shoff, count * sizeof(Elf64_Shdr));
    if (!table) return fail("section header table beyond end of file");
    shdrs_.reserve(count);
    for (uint64_t i = 0; i < count; ++i) shdrs_.push_back(load<Elf64_Shdr>(*table, i * sizeof(Elf64_Shdr)));
    return std::nullopt;
  }

  Status read_program_headers() {
    uint64_t count = eh_.e_phnum;
    if (count == PN_XNUM) {
      // Too many for e_phnum: the real count is section 0's sh_info.
      if (shdrs_.empty()) return fail("e_phnum is PN_XNUM but there is no section 0");
      count = shdrs_[0].sh_info;
    }
    if (count == 0) return std::nullopt;
    if (eh_.e_phentsize != sizeof(Elf64_Phdr)) {
      return fail("bad program header size " + std::to_string(eh_.e_phentsize));
    }
    if (count > opts_.max_program_headers)
      return over_cap("program header count", count, opts_.max_program_headers);
    if (count > src_.size() / sizeof(Elf64_Phdr)) return fail("program header count too large");
    auto table = read(eh_.e_phoff, count * sizeof(Elf64_Phdr));
    if (!table) return fail("program header table beyond end of file");
    for (uint64_t i = 0; i < count; ++i) {
      auto ph = load<Elf64_Phdr>(*table, i * sizeof(Elf64_Phdr));
      if (ph.p_type != PT_LOAD) continue;
      if (ph.p_vaddr + ph.p_memsz < ph.p_vaddr) return fail("PT_LOAD segment wraps around the address space");
      if (loads_.size() >= opts_.max_load_segments)
        return over_cap("PT_LOAD segment count", loads_.size() + 1, opts_.max_load_segments);
      loads_.push_back(ph);
    }
    // Sorted by address so that a symbol finds its segment by binary search.
    std::stable_sort(loads_.begin(), loads_.end(),
                     [](const Elf64_Phdr& a, const Elf64_Phdr& b) { return a.p_vaddr < b.p_vaddr; });
    return std::nullopt;
  }

  int find_section(uint32_t type, int link = -1) const {
    for (size_t i = 0; i < shdrs_.size(); ++i) {
      if (shdrs_[i].sh_type == type && (link < 0 || shdrs_[i].sh_link == static_cast<uint32_t>(link))) {
        return static_cast<int>(i);
      }
    }
    return -1;
  }

  // The bytes of section idx; an empty span for SHT_NOBITS (e.g. debug-info files).
  std::optional<Bytes> section_data(uint64_t idx) {
    if (idx >= shdrs_.size()) return std::nullopt;
    const Elf64_Shdr& sh = shdrs_[idx];
    if (sh.sh_type == SHT_NOBITS) return Bytes{};
    return read(sh.sh_offset, sh.sh_size);
  }

  // A string table linked from section `from`.
  std::optional<Bytes> linked_strtab(uint64_t from) {
    uint32_t link = shdrs_[from].sh_link;
    if (link == 0 || link >= shdrs_.size() || shdrs_[link].sh_type != SHT_STRTAB) return std::nullopt;
    return section_data(link);
  }

  // A NUL-terminated string at off inside the table, or nullopt.
  static std::optional<std::string_view> str_at(Bytes table, uint64_t off) {
    if (off >= table.size()) return std::nullopt;
    const char* begin = reinterpret_cast<const char*>(table.data()) + off;
    const void* nul = std::memchr(begin, '\0', table.size() - off);
    if (!nul) return std::nullopt;
    return std::string_view(begin, static_cast<const char*>(nul) - begin);
  }

  // Version names of .dynsym: .gnu.version (one uint16 per symbol) indexes the
  // definitions in .gnu.version_d. Structural damage is an error; an index with
  // no definition just leaves the symbol unversioned.
  Status read_versions(int dynsym) {
    int versym = find_section(SHT_GNU_versym, dynsym);
    if (versym < 0) versym = find_section(SHT_GNU_versym);
    if (versym < 0) return std::nullopt;
    const Elf64_Shdr& vs = shdrs_[versym];
    if (vs.sh_entsize != 0 && vs.sh_entsize != sizeof(Elf64_Versym)) return fail("bad .gnu.version entry size");
    auto vdata = section_data(versym);
    if (!vdata) return fail(".gnu.version beyond end of file");
    versym_ = *vdata;

    int verdef = find_section(SHT_GNU_verdef);
    if (verdef < 0) return std::nullopt;
    auto data = section_data(verdef);
    if (!data) return fail(".gnu.version_d beyond end of file");
    auto strtab = linked_strtab(verdef);
    if (!strtab) return fail(".gnu.version_d has no valid string table");
    // Each entry is at least sizeof(Elf64_Verdef) long, which bounds the walk
    // even if vd_next loops.
    uint64_t off = 0;
    for (uint64_t n = 0; n <= data->size() / sizeof(Elf64_Verdef); ++n) {
      if (!in_bounds(off, sizeof(Elf64_Verdef), data->size())) return fail(".gnu.version_d entry out of bounds");
      auto vd = load<Elf64_Verdef>(*data, off);
      if (vd.vd_cnt > 0 && !(vd.vd_flags & VER_FLG_BASE)) {
        uint64_t aux = off + vd.vd_aux;  // both < 2^33: no overflow
        if (!in_bounds(aux, sizeof(Elf64_Verdaux), data->size())) return fail(".gnu.version_d aux out of bounds");
        auto vda = load<Elf64_Verdaux>(*data, aux);
        auto name = str_at(*strtab, vda.vda_name);
        if (!name) return fail(".gnu.version_d name out of bounds");
        version_names_[vd.vd_ndx & kVersymIndex] = std::string(*name);
      }
      if (vd.vd_next == 0) return std::nullopt;
      off += vd.vd_next;
    }
    return fail(".gnu.version_d chain does not end");
  }

  Status read_table(int idx, bool dynamic) {
    const Elf64_Shdr& sh = shdrs_[idx];
    const char* what = dynamic ? ".dynsym" : ".symtab";
    if (sh.sh_type == SHT_NOBITS || sh.sh_size == 0) return std::nullopt;
    if (sh.sh_entsize != sizeof(Elf64_Sym)) return fail(std::string(what) + " has bad entry size");
    if (sh.sh_size % sizeof(Elf64_Sym) != 0) return fail(std::string(what) + " size is not a multiple of its entry size");
    uint64_t count = sh.sh_size / sizeof(Elf64_Sym);
    if (count > opts_.max_symbols) return over_cap(std::string(what) + " symbol count", count, opts_.max_symbols);
    auto data = section_data(idx);
    if (!data) return fail(std::string(what) + " beyond end of file");
    auto strtab = linked_strtab(idx);
    if (!strtab) return fail(std::string(what) + " has no valid string table");

    for (uint64_t i = 1; i < count; ++i) {  // entry 0 is the reserved null symbol
      ++cost_.symbols_visited;
      auto st = load<Elf64_Sym>(*data, i * sizeof(Elf64_Sym));
      if (st.st_shndx == SHN_UNDEF || st.st_name == 0) continue;
      unsigned type = ELF64_ST_TYPE(st.st_info);
      if (type != STT_FUNC && type != STT_GNU_IFUNC && type != STT_OBJECT) continue;
      unsigned bind = ELF64_ST_BIND(st.st_info);
      auto raw = str_at(*strtab, st.st_name);
      if (!raw) return fail(std::string(what) + " symbol name out of bounds or not NUL-terminated");
      if (raw->empty()) continue;

      Symbol s;
      s.value = st.st_value;
      s.size = st.st_size;
      s.weak = bind == STB_WEAK;
      s.global = bind == STB_GLOBAL || bind == STB_GNU_UNIQUE;
      s.is_function = type != STT_OBJECT;
      s.ifunc = type == STT_GNU_IFUNC;
      s.dynamic = dynamic;
      s.section_index = st.st_shndx;
      if (dynamic) {
        s.name = std::string(*raw);
        apply_version(s, i);
      } else {
        split_versioned_name(s, *raw);
        if (!seen_.insert({s.name, s.value}).second) continue;  // already known from .dynsym
      }
      map_to_file(s);
      if (dynamic) seen_.insert({s.name, s.value});
      out_.push_back(std::move(s));
    }
    return std::nullopt;
  }

  void apply_version(Symbol& s, uint64_t i) const {
    if (!in_bounds(i * sizeof(Elf64_Versym), sizeof(Elf64_Versym), versym_.size())) return;
    auto v = load<Elf64_Versym>(versym_, i * sizeof(Elf64_Versym));
    auto it = version_names_.find(v & kVersymIndex);  // 0/1 (local/global) are never defined here
    if (it == version_names_.end()) return;
    s.version = it->second;
    s.default_version = !(v & kVersymHidden);
  }

  // .symtab may carry "name@@VER" / "name@VER" as produced by .symver.
  static void split_versioned_name(Symbol& s, std::string_view raw) {
    size_t at = raw.find('@');
    if (at == std::string_view::npos || at == 0) {
      s.name = std::string(raw);
      return;
    }
    s.name = std::string(raw.substr(0, at));
    bool dflt = at + 1 < raw.size() && raw[at + 1] == '@';
    s.version = std::string(raw.substr(at + (dflt ? 2 : 1)));
    s.default_version = dflt;
  }

  // A uprobe is placed by file offset: find the PT_LOAD that maps the address
  // (the last one starting at or below it; segments of a sane file never overlap).
  void map_to_file(Symbol& s) {
    if (s.section_index == SHN_ABS || s.section_index == SHN_COMMON) return;
    size_t lo = 0, hi = loads_.size();  // first segment starting above the value
    while (lo < hi) {
      ++cost_.segment_steps;
      const size_t mid = lo + (hi - lo) / 2;
      if (loads_[mid].p_vaddr <= s.value)
        lo = mid + 1;
      else
        hi = mid;
    }
    if (lo == 0) return;
    const Elf64_Phdr& ph = loads_[lo - 1];
    if (s.value - ph.p_vaddr < ph.p_memsz) {
      s.file_offset = s.value - ph.p_vaddr + ph.p_offset;
      s.mapped = true;
    }
  }

  // One SHT_NOTE section: 4-byte aligned name and descriptor, as GNU tools
  // write them on 64-bit targets too.
  Status read_notes(uint64_t idx, std::vector<UsdtNote>& out) {
    auto data = section_data(idx);
    if (!data) return fail("note section beyond end of file");
    const auto align4 = [](uint64_t v) { return (v + 3) & ~uint64_t{3}; };
    uint64_t off = 0;
    while (in_bounds(off, sizeof(Elf64_Nhdr), data->size())) {
      auto nh = load<Elf64_Nhdr>(*data, off);
      off += sizeof(Elf64_Nhdr);
      const uint64_t name_off = off, desc_off = off + align4(nh.n_namesz);
      if (!in_bounds(name_off, align4(nh.n_namesz), data->size()) ||
          !in_bounds(desc_off, align4(nh.n_descsz), data->size()))
        return fail("note out of bounds");
      off = desc_off + align4(nh.n_descsz);
      auto owner = str_at(data->subspan(name_off, nh.n_namesz), 0);
      if (nh.n_type != kStapsdtNoteType || !owner || *owner != "stapsdt") continue;
      if (out.size() >= opts_.max_notes) return over_cap("USDT note count", out.size() + 1, opts_.max_notes);
      if (auto e = add_usdt_note(data->subspan(desc_off, nh.n_descsz), out)) return *e;
    }
    return std::nullopt;
  }

  // The descriptor: pc, base, semaphore (3 addresses), then provider, name and
  // args as consecutive NUL-terminated strings.
  Status add_usdt_note(Bytes desc, std::vector<UsdtNote>& out) {
    constexpr uint64_t kAddrs = 3 * sizeof(uint64_t);
    if (desc.size() < kAddrs) return fail("USDT note too short");
    UsdtNote n;
    n.pc = load<uint64_t>(desc, 0);
    uint64_t off = kAddrs;
    for (std::string* field : {&n.provider, &n.name, &n.args}) {
      auto str = str_at(desc, off);
      if (!str) return fail("USDT note string not NUL-terminated");
      *field = std::string(*str);
      off += str->size() + 1;
    }
    out.push_back(std::move(n));
    return std::nullopt;
  }

  ByteSource& src_;
  std::string path_;
  ReadOptions opts_;
  Elf64_Ehdr eh_{};
  std::vector<Elf64_Shdr> shdrs_;
  std::vector<Elf64_Phdr> loads_;
  Bytes versym_;
  std::map<uint16_t, std::string> version_names_;
  std::set<std::pair<std::string, uint64_t>> seen_;
  std::vector<Symbol> out_;
  ParseCost own_cost_;
  ParseCost& cost_;
  std::optional<ParseError> limit_;  // the first cap hit
};

// Closes the fd on every path out of read_symbols.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

SymbolTable::SymbolTable(std::vector<Symbol> symbols, uint16_t machine, uint16_t type, bool has_symtab)
    : symbols_(std::move(symbols)), machine_(machine), type_(type), has_symtab_(has_symtab) {
  std::sort(symbols_.begin(), symbols_.end(), [](const Symbol& a, const Symbol& b) {
    if (a.name != b.name) return a.name < b.name;
    return preferred(a, b);
  });
}

const Symbol* SymbolTable::best(std::string_view name, bool want_function) const {
  // Within one name the vector is already in preference order.
  auto it = std::lower_bound(symbols_.begin(), symbols_.end(), name,
                             [](const Symbol& s, std::string_view n) { return s.name < n; });
  for (; it != symbols_.end() && it->name == name; ++it) {
    if (it->is_function == want_function) return &*it;
  }
  return nullptr;
}

const Symbol* SymbolTable::find(std::string_view name) const { return best(name, true); }
const Symbol* SymbolTable::find_object(std::string_view name) const { return best(name, false); }

std::vector<const Symbol*> SymbolTable::find_all(std::string_view name) const {
  std::vector<const Symbol*> out;
  auto it = std::lower_bound(symbols_.begin(), symbols_.end(), name,
                             [](const Symbol& s, std::string_view n) { return s.name < n; });
  for (; it != symbols_.end() && it->name == name; ++it) out.push_back(&*it);
  return out;
}

bool SymbolTable::exports_any(std::initializer_list<std::string_view> names) const {
  for (auto name : names) {
    for (const Symbol* s : find_all(name)) {
      if (s->dynamic && (s->global || s->weak)) return true;
    }
  }
  return false;
}

ParseResult<SymbolTable> parse_symbols(std::span<const std::byte> image, ReadOptions opts) {
  MemorySource src(image);
  return Parser(src, "<memory>", opts).run();
}

namespace {

// Runs `parse` on a regular file's bytes; anything else is refused before a read.
template <typename Parse>
auto with_regular_file(int fd, const std::string& name, Parse parse) -> decltype(parse(std::declval<FileSource&>())) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return unreadable("stat " + name + ": " + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) return unreadable(name + ": is a directory");
  if (!S_ISREG(st.st_mode)) return unreadable(name + ": not a regular file");
  FileSource src(fd, static_cast<uint64_t>(st.st_size));
  return parse(src);
}

}  // namespace

ParseResult<SymbolTable> read_symbols_fd(int fd, const std::string& name, ReadOptions opts) {
  return with_regular_file(fd, name, [&](FileSource& src) { return Parser(src, name, opts).run(); });
}

ParseResult<SymbolTable> read_symbols(const std::string& path, ReadOptions opts) {
  // O_NONBLOCK: opening a FIFO must not hang the agent; it is refused below.
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY)};
  if (f.fd < 0) return unreadable("open " + path + ": " + std::strerror(errno));
  return read_symbols_fd(f.fd, path, opts);
}

ParseResult<std::vector<UsdtNote>> read_usdt_notes_fd(int fd, const std::string& name, ReadOptions opts) {
  return with_regular_file(fd, name, [&](FileSource& src) { return Parser(src, name, opts).run_notes(); });
}

ParseResult<std::vector<UsdtNote>> parse_usdt_notes(std::span<const std::byte> image, ReadOptions opts) {
  MemorySource src(image);
  return Parser(src, "<memory>", opts).run_notes();
}

}  // namespace argus::elf
