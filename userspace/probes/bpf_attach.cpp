#include "userspace/probes/bpf_loader.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <spdlog/spdlog.h>

#include "userspace/probes/bpf_loader_detail.h"
#include "userspace/probes/uprobe_multi.h"

// Probes on library files: uprobes one by one or on one uprobe_multi link, and
// USDT probes through libbpf's USDT manager.
namespace argus {

using bpf_detail::errno_text;
using bpf_detail::program_for;

namespace {

std::string probe_name(const ProbeSpec& spec, const std::string& path) {
  return std::string(spec.retprobe ? "uretprobe" : "uprobe") + " on " + spec.symbol + " in " + path;
}

}  // namespace

Result<Link> BpfLoader::attach_uprobe(const std::string& path, const ProbeSpec& spec) {
  if (multi_) return attach_multi(path, {&spec});
  bpf_program* prog = program_for(skel_, spec.program);
  if (prog == nullptr) return make_error("no BPF program for " + spec.symbol);
  LIBBPF_OPTS(bpf_uprobe_opts, uopts);
  uopts.retprobe = spec.retprobe;
  uopts.bpf_cookie = spec.cookie;
  bpf_link* link = bpf_program__attach_uprobe_opts(prog, -1, path.c_str(), spec.file_offset, &uopts);
  if (link == nullptr) return make_error(probe_name(spec, path) + ": " + errno_text(errno));
  return Link(link);
}

// One uprobe_multi link for specs of one program and direction.
Result<Link> BpfLoader::attach_multi(const std::string& path, const std::vector<const ProbeSpec*>& specs) {
  const ProbeSpec& first = *specs.front();
  bpf_program* prog = program_for(skel_, first.program);
  if (prog == nullptr) return make_error("no BPF program for " + first.symbol);
  std::vector<uint64_t> offsets, cookies;
  for (const ProbeSpec* s : specs) {
    offsets.push_back(s->file_offset);
    cookies.push_back(s->cookie);
  }
  auto fd = uprobe_multi::attach(bpf_program__fd(prog), path, offsets, cookies, first.retprobe);
  if (!fd.ok()) {
    const std::string what = specs.size() == 1 ? probe_name(first, path)
                                               : std::to_string(specs.size()) + " probes in " + path;
    return make_error(what + ": " + fd.error());
  }
  return Link::from_fd(*fd);
}

// Probes of one program and direction share a link. A link the kernel refuses
// (one bad offset fails all of its probes) is retried probe by probe, so that
// only the bad ones are lost and each is named.
AttachedUprobes BpfLoader::attach_uprobes(const std::string& path, const std::vector<ProbeSpec>& specs) {
  if (!multi_) return BpfBackend::attach_uprobes(path, specs);
  std::map<std::pair<ProbeProgram, bool>, std::vector<const ProbeSpec*>> groups;
  for (const auto& spec : specs) groups[{spec.program, spec.retprobe}].push_back(&spec);
  AttachedUprobes out;
  for (const auto& [key, group] : groups) {
    auto link = attach_multi(path, group);
    if (link.ok() || group.size() == 1) {
      out.add(std::move(link), group.size());
      continue;
    }
    for (const ProbeSpec* spec : group) out.add(attach_multi(path, {spec}));
  }
  return out;
}

Result<Link> BpfLoader::attach_gpu_usdt(const std::string& path, bool names) {
  bpf_program* prog = names ? skel_->progs.argus_gpu_name : skel_->progs.argus_gpu_batch;
  const char* probe = names ? ARGUS_GPU_USDT_NAME : ARGUS_GPU_USDT_BATCH;
  bpf_link* link = bpf_program__attach_usdt(prog, -1, path.c_str(), ARGUS_GPU_USDT_PROVIDER, probe, nullptr);
  if (link == nullptr)
    return make_error(std::string("usdt ") + ARGUS_GPU_USDT_PROVIDER + ":" + probe + " in " + path + ": " +
                      errno_text(errno));
  return Link(link);
}

Result<Link> BpfLoader::attach_usdt(const std::string& path, const char* provider, const char* name,
                                    ProbeProgram program) {
  bpf_program* prog = program_for(skel_, program);
  if (prog == nullptr) return make_error(std::string("no BPF program for usdt ") + provider + ":" + name);
  bpf_link* link = bpf_program__attach_usdt(prog, -1, path.c_str(), provider, name, nullptr);
  if (link == nullptr)
    return make_error(std::string("usdt ") + provider + ":" + name + " in " + path + ": " + errno_text(errno));
  return Link(link);
}

}  // namespace argus
