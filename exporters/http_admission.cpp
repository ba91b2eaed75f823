#include "exporters/http_admission.h"
#include "exporters/http_message.h"
#include "exporters/http_server_impl.h"
#include "userspace/common/thread_name.h"

#include <sys/socket.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <functional>
#include <list>
#include <system_error>
#include <thread>
#include <utility>

#include <spdlog/spdlog.h>

namespace argus::httpd {

thread_local ConnState* tl_conn = nullptr;

namespace {

// Set by the task queue around a connection it cannot serve: answer 503 and close.
thread_local bool tl_over_capacity = false;
// When the connection was accepted (its first request's deadline counts from there).
thread_local Clock::time_point tl_accepted_at{};

constexpr char kBusyResponse[] =
    "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
    "Content-Length: 20\r\nRetry-After: 1\r\nConnection: close\r\n\r\ntoo many connections";

// Each connection on its own thread, up to max_connections; then a bounded queue;
// beyond that the connection is answered 503 on the accepting thread. Idle threads
// wait a while for more work and then exit, so a flood leaves no thread behind.
class ConnQueue final : public httplib::TaskQueue {
 public:
  explicit ConnQueue(std::shared_ptr<HttpServer::Impl> impl) : impl_(std::move(impl)) {}
  ~ConnQueue() override { shutdown(); }

  void enqueue(std::function<void()> fn) override {
    std::unique_lock lock(mu_);
    reap_locked();
    if (!stop_) {
      jobs_.push_back({std::move(fn), Clock::now()});
      if (idle_ >= jobs_.size()) {
        cv_.notify_one();
        return;
      }
      if (live_ < impl_->opts.max_connections && spawn_locked()) return;
      if (jobs_.size() - idle_ <= impl_->opts.max_queued) {
        impl_->queued.fetch_add(1);
        cv_.notify_one();
        return;
      }
      fn = std::move(jobs_.back().fn);
      jobs_.pop_back();
    }
    lock.unlock();
    tl_over_capacity = true;
    fn();
    tl_over_capacity = false;
  }

  void shutdown() override {
    std::list<Worker> workers;
    {
      std::lock_guard lock(mu_);
      stop_ = true;
      workers.swap(workers_);
    }
    cv_.notify_all();
    for (auto& w : workers) w.thread.join();
  }

 private:
  struct Job {
    std::function<void()> fn;
    Clock::time_point accepted;
  };
  struct Worker {
    std::thread thread;
    bool done = false;
  };
  static constexpr std::size_t kKeepIdleThreads = 4;
  static constexpr auto kIdleExit = std::chrono::seconds(30);

  bool spawn_locked() {
    workers_.emplace_back();
    Worker* w = &workers_.back();
    try {
      w->thread = std::thread([this, w] {
        name_this_thread("argus-http");
        work(w);
      });
    } catch (const std::system_error& e) {
      spdlog::warn("http: cannot start a connection thread: {}", e.what());
      workers_.pop_back();
      return false;
    }
    ++live_;
    return true;
  }

  void reap_locked() {
    for (auto it = workers_.begin(); it != workers_.end();) {
      if (!it->done) {
        ++it;
        continue;
      }
      it->thread.join();  // it set done as its last step under mu_: no deadlock
      it = workers_.erase(it);
    }
  }

  void work(Worker* self) {
    std::unique_lock lock(mu_);
    for (;;) {
      ++idle_;
      const bool woke = cv_.wait_for(lock, kIdleExit, [&] { return stop_ || !jobs_.empty(); });
      --idle_;
      if (jobs_.empty()) {
        if (stop_ || (!woke && live_ > kKeepIdleThreads)) break;
        continue;
      }
      Job job = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      tl_accepted_at = job.accepted;
      job.fn();  // process_and_close_socket: never throws out (it catches)
      job.fn = nullptr;
      lock.lock();
    }
    --live_;
    self->done = true;
  }

  std::shared_ptr<HttpServer::Impl> impl_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  std::list<Worker> workers_;
  std::size_t live_ = 0, idle_ = 0;
  bool stop_ = false;
};

bool body_method(const std::string& m) {
  return m == "POST" || m == "PUT" || m == "PATCH" || m == "DELETE" || m == "PRI";
}

}  // namespace

void Rejections::count(const char* reason) {
  std::lock_guard lock(mu_);
  ++counts_[reason];
}

void Rejections::note(ConnState* st, const char* reason) {
  if (st == nullptr) {
    count(reason);
  } else if (st->reject == nullptr) {
    st->reject = reason;
    count(reason);
  }
}

std::map<std::string, uint64_t> Rejections::snapshot() const {
  std::lock_guard lock(mu_);
  return counts_;
}

httplib::TaskQueue* new_conn_queue(std::shared_ptr<HttpServer::Impl> impl) { return new ConnQueue(std::move(impl)); }

bool refuse_over_capacity(int fd, Rejections& rejections) {
  if (!tl_over_capacity) return false;
  rejections.count(kRejectOverCapacity);
  ssize_t n = ::send(fd, kBusyResponse, sizeof(kBusyResponse) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
  (void)n;
  ::shutdown(fd, SHUT_WR);
  return true;
}

Clock::time_point accepted_at() { return tl_accepted_at == Clock::time_point{} ? Clock::now() : tl_accepted_at; }

httplib::Server::HandlerResponse admit(const httplib::Request& req, httplib::Response& res, std::size_t max_body_bytes,
                                       Rejections& rejections, const httplib::Server::Handler& handle) {
  ConnState* st = tl_conn;
  auto refuse = [&](int status, const char* reason, const std::string& why) {
    res.status = status;
    res.set_content(why + "\n", "text/plain; charset=utf-8");
    rejections.note(st, reason);
    if (st) st->close_after = true;
    return httplib::Server::HandlerResponse::Handled;
  };
  if (req.has_header("Transfer-Encoding"))
    return refuse(501, kRejectBadRequest, "Transfer-Encoding in requests is not supported");
  if (req.has_header("Content-Encoding"))
    return refuse(415, kRejectBadRequest, "Content-Encoding in requests is not supported");
  uint64_t length = 0;
  const std::size_t copies = req.get_header_value_count("Content-Length");
  for (std::size_t i = 0; i < copies; ++i) {
    const std::string v = req.get_header_value("Content-Length", i);
    if (v.empty() || v.size() > 15 || !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return refuse(400, kRejectBadRequest, "bad Content-Length");
    const uint64_t n = std::stoull(v);
    if (i > 0 && n != length) return refuse(400, kRejectBadRequest, "bad Content-Length");
    length = n;
  }
  if (length > max_body_bytes) return refuse(413, kRejectBodyTooLarge, "request body too large");
  if (body_method(req.method) && length > 0) return httplib::Server::HandlerResponse::Unhandled;
  if (length > 0 && st) st->close_after = true;  // httplib leaves that body unread
  handle(req, res);
  return httplib::Server::HandlerResponse::Handled;
}

httplib::Server::HandlerResponse explain_refusal(httplib::Response& res, Rejections& rejections) {
  ConnState* st = tl_conn;
  if (st == nullptr || st->dispatched || st->reject != nullptr) return httplib::Server::HandlerResponse::Unhandled;
  st->close_after = true;
  if (st->stream->header_too_large()) {
    res.status = 431;
    rejections.note(st, kRejectHeaderTooLarge);
  } else if (st->stream->timed_out()) {
    res.status = 408;
    rejections.note(st, kRejectReadTimeout);
  } else if (res.status == 414) {
    rejections.note(st, kRejectHeaderTooLarge);
  } else if (res.status == 413) {
    rejections.note(st, kRejectBodyTooLarge);
  } else if (!st->stream->eof() && !st->stream->broken()) {
    rejections.note(st, kRejectBadRequest);
  }
  res.set_content(lower(http_reason_phrase(res.status)) + "\n", "text/plain; charset=utf-8");
  return httplib::Server::HandlerResponse::Handled;
}

}  // namespace argus::httpd
