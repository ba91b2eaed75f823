// The python-stacks route's answers (through a hand-made source) and the
// grouping `argusctl stacks JOB` and hang events use.
#include <gtest/gtest.h>

#include <chrono>

#include "exporters/api_routes.h"
#include "userspace/net/http_client.h"
#include "userspace/python/stack_groups.h"

namespace argus {
namespace {

using namespace std::chrono_literals;

python::PyStackDump dump_of(const std::vector<std::vector<std::string>>& threads, int tid0 = 100) {
  python::PyStackDump d;
  d.version = "3.12.1";
  int tid = tid0;
  for (const auto& fns : threads) {
    python::PyThreadStack t;
    t.native_tid = t.namespace_tid = tid++;
    t.thread_id = 0x7f00 + static_cast<uint64_t>(tid);
    int line = 10;
    for (const auto& f : fns) t.frames.push_back({f, "C." + f, "/app/train.py", line++});
    d.threads.push_back(t);
  }
  return d;
}

TEST(StackGroups, IdenticalStacksGroupIgnoringThreadIdsAndOrder) {
  std::vector<std::pair<int, nlohmann::json>> docs;
  for (int r = 0; r < 7; ++r) {
    auto d = dump_of({{"allreduce", "step", "main"}, {"loader"}}, 100 * r);
    if (r % 2) std::swap(d.threads[0], d.threads[1]);  // thread order is not part of the stack
    docs.emplace_back(r, python::threads_json(d));
  }
  docs.emplace_back(7, python::threads_json(dump_of({{"save_checkpoint", "step", "main"}, {"loader"}})));
  auto groups = python::group_stacks(docs);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].ranks, (std::vector<int>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(groups[1].ranks, std::vector<int>{7});
  const std::string text = python::format_stack_groups(groups);
  EXPECT_NE(text.find("ranks 0-6 (7 ranks):"), std::string::npos) << text;
  EXPECT_NE(text.find("rank 7 (1 rank):"), std::string::npos) << text;
  EXPECT_NE(text.find("C.save_checkpoint (/app/train.py:10)"), std::string::npos) << text;
  auto j = python::stack_groups_json(groups);
  EXPECT_EQ(j[0]["label"], "ranks 0-6 (7 ranks)");
  EXPECT_EQ(j[1]["ranks"], nlohmann::json::array({7}));
  // A different line is a different stack.
  docs.emplace_back(8, python::threads_json(dump_of({{"save_checkpoint", "step", "main"}, {"loader"}})));
  auto d9 = dump_of({{"save_checkpoint", "step", "main"}, {"loader"}});
  d9.threads[0].frames[0].line = 99;
  docs.emplace_back(9, python::threads_json(d9));
  groups = python::group_stacks(docs);
  ASSERT_EQ(groups.size(), 3u);
  EXPECT_EQ(groups[1].ranks, (std::vector<int>{7, 8}));
}

TEST(StackGroups, RankListLabels) {
  EXPECT_EQ(python::rank_list_label({3}), "rank 3 (1 rank)");
  EXPECT_EQ(python::rank_list_label({2, 0, 1}), "ranks 0-2 (3 ranks)");
  EXPECT_EQ(python::rank_list_label({0, 1, 2, 5, 7, 8}), "ranks 0-2,5,7-8 (6 ranks)");
  EXPECT_EQ(python::rank_list_label({4, 4}), "rank 4 (1 rank)");
}

TEST(StackGroups, FormatsTruncatedTornAndEmpty) {
  auto d = dump_of({{"f"}, {}});
  d.threads[0].truncated = true;
  d.threads[0].torn = true;
  const std::string text = python::format_threads(python::threads_json(d), true);
  EXPECT_NE(text.find("Thread 100 [torn: moved while read]:"), std::string::npos) << text;
  EXPECT_NE(text.find("... (deeper frames cut)"), std::string::npos) << text;
  EXPECT_NE(text.find("(no Python frame)"), std::string::npos) << text;
  EXPECT_EQ(python::format_threads(nlohmann::json::array(), true), "(no Python threads)\n");
}

struct StackSource : ApiSource {
  Snapshot snap;
  using Dump = Result<python::PyStackDump, python::LocateFailure>;
  std::map<int, Dump> dumps;
  Snapshot snapshot() const override { return snap; }
  std::vector<DetectedEvent> events_since(double) const override { return {}; }
  std::vector<TraceRank> trace(double, uint64_t*) const override { return {}; }
  StepHistory gpu_steps(int, size_t) const override { return {}; }
  double seconds_since_heartbeat() const override { return 0; }
  uint64_t monotonic_ns() const override { return 1; }
  Result<python::PyStackDump, python::LocateFailure> python_stacks(int pid) const override {
    auto it = dumps.find(pid);
    return it == dumps.end() ? Dump(make_error(LocateError::kUnreadable, "vanished: pid gone")) : it->second;
  }
};

TEST(PythonStacksRoute, AnswersPerRankAndRefusesClearly) {
  StackSource src;
  auto rank = [](int pid, int r, bool exited) {
    RankSnapshot s;
    s.pid = pid;
    s.job_id = "j";
    s.rank = r;
    s.exited = exited;
    return s;
  };
  src.snap.ranks = {rank(10, 0, false), rank(11, 1, false), rank(12, 2, false), rank(13, 3, true)};
  src.dumps.emplace(10, dump_of({{"inner", "outer"}}));
  src.dumps.emplace(11, StackSource::Dump(make_error(LocateError::kNotPython, "not python: pid 11 maps no Python interpreter")));
  src.dumps.emplace(12, StackSource::Dump(make_error(LocateError::kUnsupportedPython, "unsupported python: debug build")));
  ApiOptions opts;
  opts.debug_routes = true;
  HttpServer http;
  register_api_routes(http, src, opts);
  auto port = http.start("127.0.0.1:0");
  ASSERT_TRUE(port.ok()) << port.error();
  const std::string base = "http://127.0.0.1:" + std::to_string(*port) + "/api/v1/ranks/";
  auto get = [&](const std::string& path) {
    auto r = cli::http_get(base + path, 2000ms);
    EXPECT_TRUE(r.ok());
    return r.ok() ? *r : cli::HttpResponse{};
  };
  auto ok = get("j/0/python-stacks");
  ASSERT_EQ(ok.status, 200) << ok.body;
  auto doc = nlohmann::json::parse(ok.body);
  EXPECT_EQ(doc["job_id"], "j");
  EXPECT_EQ(doc["rank"], 0);
  EXPECT_EQ(doc["pid"], 10);
  EXPECT_EQ(doc["python_version"], "3.12.1");
  ASSERT_EQ(doc["threads"].size(), 1u);
  EXPECT_EQ(doc["threads"][0]["native_thread_id"], 100);
  EXPECT_EQ(doc["threads"][0]["frames"][0]["function"], "inner");
  EXPECT_EQ(doc["threads"][0]["frames"][0]["qualname"], "C.inner");
  EXPECT_EQ(doc["threads"][0]["frames"][1]["line"], 11);
  EXPECT_EQ(doc["threads"][0]["truncated"], false);
  EXPECT_EQ(doc["threads"][0]["torn"], false);

  auto not_py = get("j/1/python-stacks");
  EXPECT_EQ(not_py.status, 422);
  EXPECT_NE(not_py.body.find("no Python interpreter"), std::string::npos);
  EXPECT_EQ(get("j/2/python-stacks").status, 501);
  EXPECT_EQ(get("j/3/python-stacks").status, 404);  // exited
  auto unknown = get("j/9/python-stacks");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_NE(unknown.body.find("no such rank"), std::string::npos);
  EXPECT_EQ(get("nojob/0/python-stacks").status, 404);
  EXPECT_EQ(get("j/x/python-stacks").status, 400);
  src.snap.ranks.push_back(rank(14, 4, false));  // a dump that fails to read
  auto gone = get("j/4/python-stacks");
  EXPECT_EQ(gone.status, 500);
  EXPECT_NE(gone.body.find("vanished"), std::string::npos);
  http.stop();
}

}  // namespace
}  // namespace argus
