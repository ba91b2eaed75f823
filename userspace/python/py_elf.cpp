#include "userspace/python/py_elf.h"

#include <elf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace argus::python::detail {
namespace {

constexpr size_t kMaxPhdrs = 512;
constexpr size_t kMaxShdrs = 4096;
constexpr size_t kMaxShstrtab = 1 << 20;

template <typename T>
T load_at(const std::string& buf, size_t off) {
  T v{};
  std::memcpy(&v, buf.data() + off, sizeof(T));
  return v;
}

}  // namespace

Result<std::string> pread_exact(int fd, uint64_t offset, size_t len) {
  std::string out(len, '\0');
  size_t got = 0;
  while (got < len) {
    ssize_t n = ::pread(fd, out.data() + got, len - got, static_cast<off_t>(offset + got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return make_error("short read at offset " + std::to_string(offset + got));
    got += static_cast<size_t>(n);
  }
  return out;
}

const ElfSection* ElfLayout::section(const std::string& name) const {
  for (const auto& s : sections) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

std::optional<uint64_t> ElfLayout::file_offset(uint64_t vaddr, uint64_t len) const {
  for (const auto& l : loads) {
    if (vaddr >= l.vaddr && len <= l.filesz && vaddr - l.vaddr <= l.filesz - len) {
      return l.offset + (vaddr - l.vaddr);
    }
  }
  return std::nullopt;
}

Result<ElfLayout> read_elf_layout(int fd, const std::string& name) {
  struct stat st{};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return make_error(name + ": not a regular file");
  ElfLayout out;
  out.file_size = static_cast<uint64_t>(st.st_size);
  auto hdr = pread_exact(fd, 0, sizeof(Elf64_Ehdr));
  if (!hdr) return make_error(name + ": truncated ELF header");
  auto eh = load_at<Elf64_Ehdr>(*hdr, 0);
  if (std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
      eh.e_ident[EI_DATA] != ELFDATA2LSB) {
    return make_error(name + ": not a 64-bit little-endian ELF");
  }
  out.type = eh.e_type;
  if (eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum == 0 || eh.e_phnum > kMaxPhdrs) {
    return make_error(name + ": bad program headers");
  }
  auto ph = pread_exact(fd, eh.e_phoff, size_t{eh.e_phnum} * sizeof(Elf64_Phdr));
  if (!ph) return make_error(name + ": truncated program headers");
  for (size_t i = 0; i < eh.e_phnum; ++i) {
    auto p = load_at<Elf64_Phdr>(*ph, i * sizeof(Elf64_Phdr));
    if (p.p_type != PT_LOAD) continue;
    if (p.p_offset > out.file_size || p.p_filesz > out.file_size - p.p_offset) {
      return make_error(name + ": PT_LOAD beyond the end of the file");
    }
    out.loads.push_back({p.p_vaddr, p.p_offset, p.p_filesz, p.p_memsz, (p.p_flags & PF_X) != 0});
  }
  if (out.loads.empty()) return make_error(name + ": no PT_LOAD segment");

  // Sections are optional (a stripped file still has them, a hostile one may not).
  if (eh.e_shentsize != sizeof(Elf64_Shdr) || eh.e_shnum == 0 || eh.e_shnum > kMaxShdrs ||
      eh.e_shstrndx >= eh.e_shnum) {
    return out;
  }
  auto sh = pread_exact(fd, eh.e_shoff, size_t{eh.e_shnum} * sizeof(Elf64_Shdr));
  if (!sh) return out;
  auto strhdr = load_at<Elf64_Shdr>(*sh, size_t{eh.e_shstrndx} * sizeof(Elf64_Shdr));
  if (strhdr.sh_size > kMaxShstrtab || strhdr.sh_offset > out.file_size ||
      strhdr.sh_size > out.file_size - strhdr.sh_offset) {
    return out;
  }
  auto strtab = pread_exact(fd, strhdr.sh_offset, strhdr.sh_size);
  if (!strtab) return out;
  for (size_t i = 0; i < eh.e_shnum; ++i) {
    auto s = load_at<Elf64_Shdr>(*sh, i * sizeof(Elf64_Shdr));
    if (s.sh_name >= strtab->size()) continue;
    size_t end = strtab->find('\0', s.sh_name);
    if (end == std::string::npos) continue;
    out.sections.push_back({strtab->substr(s.sh_name, end - s.sh_name), s.sh_addr, s.sh_offset, s.sh_size, s.sh_type});
  }
  return out;
}

}  // namespace argus::python::detail
