#include "userspace/probes/uprobe_multi.h"

#include <bpf/bpf.h>
#include <linux/bpf.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace argus::uprobe_multi {
namespace {

// The link_create part of union bpf_attr as kernels >= 6.6 lay it out for
// uprobe_multi (include/uapi/linux/bpf.h); the syscall takes a shorter attr
// and treats the rest as zero.
struct LinkCreateAttr {
  uint32_t prog_fd;
  uint32_t target_fd;
  uint32_t attach_type;
  uint32_t flags;
  uint64_t path;
  uint64_t offsets;
  uint64_t ref_ctr_offsets;
  uint64_t cookies;
  uint32_t cnt;
  uint32_t multi_flags;
  uint32_t pid;
  uint32_t pad;
};
static_assert(sizeof(LinkCreateAttr) == 64, "link_create.uprobe_multi layout");
static_assert(offsetof(LinkCreateAttr, path) == 16, "the union of link_create starts at 16");
static_assert(offsetof(LinkCreateAttr, cnt) == 48, "uprobe_multi.cnt");

constexpr uint32_t kReturnFlag = 1;  // BPF_F_UPROBE_MULTI_RETURN

int link_create(const LinkCreateAttr& attr) {
  return static_cast<int>(syscall(SYS_bpf, BPF_LINK_CREATE, &attr, sizeof(attr)));
}

std::string errno_text(int err) { return std::strerror(err); }

}  // namespace

bool supported(std::string* why) {
  // r0 = 0; exit
  const bpf_insn insns[] = {
      {BPF_ALU64 | BPF_MOV | BPF_K, 0, 0, 0, 0},
      {BPF_JMP | BPF_EXIT, 0, 0, 0, 0},
  };
  LIBBPF_OPTS(bpf_prog_load_opts, opts);
  opts.expected_attach_type = static_cast<bpf_attach_type>(kAttachType);
  const int prog = bpf_prog_load(BPF_PROG_TYPE_KPROBE, "argus_umulti_probe", "GPL", insns, 2, &opts);
  if (prog < 0) {
    if (why != nullptr) *why = "probe program refused: " + errno_text(-prog);
    return false;
  }
  const uint64_t offset = 0;
  LinkCreateAttr attr{};
  attr.prog_fd = static_cast<uint32_t>(prog);
  attr.attach_type = kAttachType;
  attr.path = reinterpret_cast<uint64_t>("/");
  attr.offsets = reinterpret_cast<uint64_t>(&offset);
  attr.cnt = 1;
  const int link = link_create(attr);
  const int err = errno;
  close(prog);
  if (link >= 0) {  // cannot happen on a kernel that checks the path; detach it anyway
    close(link);
    if (why != nullptr) *why = "linked to a directory";
    return false;
  }
  if (err == EBADF) return true;
  if (why != nullptr) *why = "link_create: " + errno_text(err);
  return false;
}

Result<int> attach(int prog_fd, const std::string& path, const std::vector<uint64_t>& offsets,
                   const std::vector<uint64_t>& cookies, bool retprobe) {
  if (offsets.empty() || cookies.size() != offsets.size()) return make_error("uprobe_multi: no offsets");
  LinkCreateAttr attr{};
  attr.prog_fd = static_cast<uint32_t>(prog_fd);
  attr.attach_type = kAttachType;
  attr.path = reinterpret_cast<uint64_t>(path.c_str());
  attr.offsets = reinterpret_cast<uint64_t>(offsets.data());
  attr.cookies = reinterpret_cast<uint64_t>(cookies.data());
  attr.cnt = static_cast<uint32_t>(offsets.size());
  attr.multi_flags = retprobe ? kReturnFlag : 0;
  const int fd = link_create(attr);
  if (fd < 0) return make_error("uprobe_multi link: " + errno_text(errno));
  return fd;
}

}  // namespace argus::uprobe_multi
