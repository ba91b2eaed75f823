#include "userspace/procfs/thread_calls.h"

#include <sys/uio.h>

#include <cerrno>
#include <charconv>
#include <filesystem>

namespace argus::procfs {
namespace {

// A number as the kernel prints it here: decimal, or hex with 0x.
bool parse_number(std::string_view s, uint64_t& out) {
  int base = 10;
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    s.remove_prefix(2);
    base = 16;
  }
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out, base);
  return ec == std::errc() && p == s.data() + s.size();
}

std::vector<std::string_view> fields_of(std::string_view s) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\t')) ++i;
    size_t j = i;
    while (j < s.size() && s[j] != ' ' && s[j] != '\n' && s[j] != '\t') ++j;
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

std::string_view file_name(std::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

}  // namespace

ReadResult<ThreadSyscall> parse_thread_syscall(std::string_view content) {
  const auto f = fields_of(content);
  ThreadSyscall t;
  if (f.size() == 1 && f[0] == "running") {
    t.running = true;
    return t;
  }
  // "-1 SP PC" or "NR A1 A2 A3 A4 A5 A6 SP PC".
  if (f.size() != 3 && f.size() != 9) return make_error(ErrorKind::kMalformed, "malformed: syscall has " + std::to_string(f.size()) + " fields");
  if (f[0] == "-1") {
    t.nr = -1;
  } else {
    uint64_t nr = 0;
    if (!parse_number(f[0], nr)) return make_error(ErrorKind::kMalformed, "malformed: syscall number");
    t.nr = static_cast<long>(nr);
  }
  if (!parse_number(f[f.size() - 2], t.sp) || !parse_number(f[f.size() - 1], t.pc))
    return make_error(ErrorKind::kMalformed, "malformed: syscall stack or program counter");
  return t;
}

std::vector<LibraryText> library_texts(const ParsedMaps& maps, const std::vector<std::string>& prefixes) {
  std::vector<LibraryText> out;
  for (const auto& m : maps.entries) {
    if (!m.executable() || !m.file_backed()) continue;
    const auto name = file_name(m.path);
    for (const auto& p : prefixes)
      if (name.substr(0, p.size()) == p) {
        out.push_back({m.path, m.start, m.end});
        break;
      }
  }
  return out;
}

const LibraryText* return_address_into(const std::vector<uint64_t>& words, const std::vector<LibraryText>& libs) {
  for (uint64_t w : words)
    for (const auto& l : libs)
      if (w >= l.start && w < l.end) return &l;
  return nullptr;
}

std::vector<ThreadInLibrary> threads_inside(const std::string& proc_root, int pid,
                                            const std::vector<LibraryText>& libs, size_t stack_bytes,
                                            size_t* unreadable) {
  std::vector<ThreadInLibrary> out;
  if (libs.empty()) return out;
  const std::string task_dir = proc_root + "/" + std::to_string(pid) + "/task";
  std::error_code ec;
  std::filesystem::directory_iterator it(task_dir, ec), end;
  for (; !ec && it != end; it.increment(ec)) {
    int tid = 0;
    const std::string name = it->path().filename();
    if (std::from_chars(name.data(), name.data() + name.size(), tid).ec != std::errc()) continue;
    auto text = read_file(task_dir + "/" + name + "/syscall", 4096);
    auto sc = text ? parse_thread_syscall(*text) : ReadResult<ThreadSyscall>(text.failure());
    if (!sc) {
      if (unreadable) ++*unreadable;
      continue;
    }
    if (sc->running || sc->sp == 0) continue;  // on a CPU: not waiting
    // The library itself may be where it blocks (its own futex wait): the PC counts as a frame.
    std::vector<uint64_t> words(stack_bytes / sizeof(uint64_t));
    iovec local{words.data(), words.size() * sizeof(uint64_t)};
    iovec remote{reinterpret_cast<void*>(sc->sp), local.iov_len};
    const ssize_t got = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (got <= 0) {
      if (unreadable) ++*unreadable;
      continue;
    }
    words.resize(static_cast<size_t>(got) / sizeof(uint64_t));
    words.insert(words.begin(), sc->pc);
    if (const LibraryText* lib = return_address_into(words, libs))
      out.push_back({tid, std::string(file_name(lib->path)), sc->nr, sc->sp});
  }
  return out;
}

}  // namespace argus::procfs
