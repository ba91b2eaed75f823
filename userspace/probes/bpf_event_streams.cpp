#include "userspace/probes/bpf_loader.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <spdlog/spdlog.h>

#include <linux/perf_event.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <fstream>
#include <sstream>
#include <string_view>

#include "bpf/argus_py_sample.h"
#include "userspace/probes/bpf_loader_detail.h"

// The records BPF sends: the event ring buffer and the Python sampler's, drained
// by one wakeable poll; the sampler's perf events.
namespace argus {

using bpf_detail::errno_text;

// The loop's wait covers the ring buffers and an eventfd, so that stop() ends
// a long idle wait at once. Without it (no eventfd or epoll: never seen) the
// poll falls back to the ring buffers alone, and a stop waits out the turn.
void BpfLoader::open_wakeable_poll() {
  UniqueFd wake(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  UniqueFd ep(epoll_create1(EPOLL_CLOEXEC));
  if (!wake.valid() || !ep.valid()) {
    spdlog::debug("no wakeable poll ({}): a stop waits for the loop's turn", errno_text(errno));
    return;
  }
  epoll_event rings{};
  rings.events = EPOLLIN;
  rings.data.fd = ring_buffer__epoll_fd(ringbuf_);
  epoll_event woken{};
  woken.events = EPOLLIN;
  woken.data.fd = wake.get();
  if (epoll_ctl(ep.get(), EPOLL_CTL_ADD, rings.data.fd, &rings) != 0 ||
      epoll_ctl(ep.get(), EPOLL_CTL_ADD, wake.get(), &woken) != 0) {
    spdlog::debug("no wakeable poll ({}): a stop waits for the loop's turn", errno_text(errno));
    return;
  }
  wake_fd_ = std::move(wake);
  poll_fd_ = std::move(ep);
}

void BpfLoader::interrupt_poll() {
  if (!wake_fd_.valid()) return;
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = write(wake_fd_.get(), &one, sizeof(one));  // full (2^64-2 wakes pending): already woken
}

int BpfLoader::on_ringbuf_record(void* ctx, void* data, size_t size) {
  auto* self = static_cast<BpfLoader*>(ctx);
  if (self->handler_) self->handler_(data, size);
  return 0;
}

int BpfLoader::on_py_sample(void* ctx, void* data, size_t size) {
  auto* self = static_cast<BpfLoader*>(ctx);
  if (self->py_sample_handler_) self->py_sample_handler_(data, size);
  return 0;
}

std::vector<int> parse_cpu_list(const std::string& text) {
  std::vector<int> cpus;
  std::stringstream in(text);
  std::string part;
  auto number = [](std::string_view t, int& out) {
    auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), out);
    return !t.empty() && ec == std::errc() && p == t.data() + t.size() && out >= 0 && out < (1 << 16);
  };
  while (std::getline(in, part, ',')) {
    while (!part.empty() && (part.back() == '\n' || part.back() == ' ')) part.pop_back();
    if (part.empty()) continue;
    const auto dash = part.find('-');
    int lo = 0, hi = 0;
    if (dash == std::string::npos) {
      if (!number(part, lo)) return {};
      hi = lo;
    } else if (!number(std::string_view(part).substr(0, dash), lo) ||
               !number(std::string_view(part).substr(dash + 1), hi) || hi < lo) {
      return {};
    }
    for (int c = lo; c <= hi; ++c) cpus.push_back(c);
  }
  return cpus;
}

Result<int> BpfLoader::start_python_sampling(uint32_t hz) {
  py_sample_links_.clear();
  if (hz == 0) return 0;
  std::ifstream f("/sys/devices/system/cpu/online");
  std::string text;
  std::getline(f, text);
  std::vector<int> cpus = parse_cpu_list(text);
  if (cpus.empty()) return make_error("cannot read the online CPUs from /sys/devices/system/cpu/online");
  for (int cpu : cpus) {
    perf_event_attr attr{};
    attr.size = sizeof(attr);
    attr.type = PERF_TYPE_SOFTWARE;
    attr.config = PERF_COUNT_SW_CPU_CLOCK;
    attr.freq = 1;
    attr.sample_freq = hz;
    const int fd = static_cast<int>(syscall(SYS_perf_event_open, &attr, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC));
    if (fd < 0) {
      if (errno == ENODEV) continue;  // went offline meanwhile
      const std::string why = errno_text(errno);
      py_sample_links_.clear();
      return make_error("perf_event_open (CPU clock, " + std::to_string(hz) + " Hz) on CPU " + std::to_string(cpu) +
                        ": " + why);
    }
    // The link owns the perf event's fd from here (libbpf closes it on destroy).
    bpf_link* link = bpf_program__attach_perf_event(skel_->progs.argus_py_sample, fd);
    if (link == nullptr) {
      const std::string why = errno_text(errno);
      close(fd);
      py_sample_links_.clear();
      return make_error("cannot attach the Python sampler on CPU " + std::to_string(cpu) + ": " + why);
    }
    py_sample_links_.emplace_back(link);
  }
  return static_cast<int>(py_sample_links_.size());
}

int BpfLoader::poll_events(int timeout_ms) {
  int woken = 0;
  if (poll_fd_.valid()) {
    epoll_event ready[2];
    if (epoll_wait(poll_fd_.get(), ready, 2, timeout_ms) < 0) return -errno;
    uint64_t wakes = 0;
    while (read(wake_fd_.get(), &wakes, sizeof(wakes)) > 0) {
    }
  } else {
    woken = ring_buffer__poll(ringbuf_, timeout_ms);
    if (woken < 0) return woken;
  }
  // Hot events come without a wakeup (argus_submit_hot in bpf/helpers.bpf.h):
  // the poll may time out with records waiting. Drain them every time.
  const int waiting = ring_buffer__consume(ringbuf_);
  return waiting < 0 ? waiting : woken + waiting;
}

}  // namespace argus
