// argusctl's rank table, and argusctl itself against an in-process agent stand-in.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "exporters/http_server.h"
#include "exporters/json_api.h"
#include "userspace/cli/rank_table.h"

namespace argus {
namespace {

using nlohmann::json;

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

std::vector<std::string> fields(const std::string& line) {
  std::vector<std::string> out;
  std::istringstream in(line);
  for (std::string f; in >> f;) out.push_back(f);
  return out;
}

json make_doc() {
  return json::parse(R"({
    "node": "n1", "version": "0.1.0", "probes": "default",
    "ranks": [
      {"pid": 300, "job_id": null, "rank": null, "state": "running", "nccl": {}, "cuda": {"sync": {}, "kernel_launches": null, "errors": []}},
      {"pid": 102, "job_id": "train-7", "rank": 1, "state": "running", "collective_wait_ratio": 0.1234,
       "sync_wait_ratio": 0.4567,
       "nccl": {"all_reduce": {"calls": 100, "bytes": 2500000000, "wait_seconds": 1.5},
                "send": {"calls": 20, "bytes": 10000000, "wait_seconds": 0.25}},
       "cuda": {"sync": {"cuStreamSynchronize": {"calls": 9, "wait_seconds": 3.126}},
                "kernel_launches": 4242,
                "errors": [{"api": "cuMemAlloc", "code": "CUDA_ERROR_OUT_OF_MEMORY", "count": 2}]},
       "gpu_memory": {"held_bytes": 83214991360, "total_bytes": 85899345920, "growing": false, "pressure": true},
       "nccl_errors": [{"api": "ncclAllReduce", "code": "ncclSystemError", "count": 1}]},
      {"pid": 101, "job_id": "train-7", "rank": 0, "state": "exited", "exit_reason": "oom",
       "collective_wait_ratio": 0.5, "nccl": {}, "cuda": {"sync": {}, "kernel_launches": null, "errors": []}},
      {"pid": 50, "job_id": "alpha", "rank": 10, "state": "running",
       "process_groups": [{"group": "default_pg", "members": [8, 9, 10, 11], "calls": {"all_reduce": 390, "broadcast": 4}},
                          {"group": "pair", "members": [10, 11], "calls": {"all_reduce": 6}},
                          {"group": "tp", "backend": "nccl", "members": [10], "calls": {"all_reduce": 50}}]}
    ]})");
}

TEST(RankTable, ColumnsAndValues) {
  auto lines = lines_of(cli::format_rank_table(make_doc(), false));
  ASSERT_EQ(lines.size(), 5u) << cli::format_rank_table(make_doc(), false);
  EXPECT_EQ(fields(lines[0]),
            (std::vector<std::string>{"JOB", "RANK", "PID", "STATE", "COLL", "COLL_GB", "COLL%", "SYNC%", "GPU%",
                                      "NCCL_K%", "BUBBLE%", "GPU_MEM", "LAUNCHES", "ERRORS", "FLAGS", "GROUPS"}));
  // Sorted by job, then rank.
  EXPECT_EQ(fields(lines[1]),
            (std::vector<std::string>{"alpha", "10", "50", "running", "400", "0.00", "0.0", "0.0", "-", "-", "-", "-", "-",
                                      "0", "-", "default_pg(8-11),pair(1..."}));
  EXPECT_EQ(fields(lines[2]), (std::vector<std::string>{"train-7", "0", "101", "exited:oom", "0", "0.00", "50.0", "0.0",
                                                        "-", "-", "-", "-", "-", "0", "-", "-"}));
  EXPECT_EQ(fields(lines[3]), (std::vector<std::string>{"train-7", "1", "102", "running", "120", "2.51", "12.3", "45.7",
                                                        "-", "-", "-", "77.5/80", "4242", "3", "mem-full", "-"}));
  EXPECT_EQ(lines[4], "(1 unidentified process hidden; --all shows them)");
}

TEST(RankTable, ColumnsAreAligned) {
  auto lines = lines_of(cli::format_rank_table(make_doc(), true));
  ASSERT_GE(lines.size(), 2u);
  // Right-aligned numeric columns end at the same offset on every line.
  auto end_of = [](const std::string& line, const std::string& word) {
    auto p = line.find(word);
    return p == std::string::npos ? std::string::npos : p + word.size();
  };
  // GROUPS, last, is left-aligned: it starts at the same offset on every line.
  const auto groups_at = lines[0].find("GROUPS");
  ASSERT_NE(groups_at, std::string::npos);
  EXPECT_EQ(lines[1].find("default_pg"), groups_at) << lines[1];
  for (const auto& l : lines) EXPECT_LE(l.size(), 150u) << l;
  EXPECT_EQ(end_of(lines[0], "PID"), end_of(lines[3], "102"));
}

TEST(RankTable, GpuColumnsAndFlags) {
  auto doc = json::parse(R"({"ranks":[
    {"pid":7,"job_id":"j","rank":3,"state":"running","collective_wait_ratio":0.4,"straggler":true,
     "straggler_reason":"gpu","pipeline_bubble":true,"hang_missing":false,
     "gpu":{"busy_ratio":0.61,"nccl_kernel_ratio":0.035,"bubble_ratio":0.25},
     "gpu_memory":{"held_bytes":1073741824,"total_bytes":null,"growing":true,"pressure":false}},
    {"pid":8,"job_id":"j","rank":4,"state":"running","straggler":false,"hang_missing":true,
     "gpu":{"busy_ratio":null,"nccl_kernel_ratio":null,"bubble_ratio":null}}]})");
  auto lines = lines_of(cli::format_rank_table(doc, false));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(fields(lines[1]), (std::vector<std::string>{"j", "3", "7", "running", "0", "0.00", "40.0", "0.0", "61.0",
                                                        "3.5", "25.0", "1.0", "-", "0", "straggler(gpu),bubble,mem-leak",
                                                        "-"}));
  EXPECT_EQ(fields(lines[2])[14], "hang");
  EXPECT_EQ(fields(lines[2])[8], "-");  // no current GPU figures
}

TEST(RankTable, UnidentifiedOnlyWithAll) {
  std::string hidden = cli::format_rank_table(make_doc(), false);
  EXPECT_EQ(hidden.find("300"), std::string::npos);
  auto lines = lines_of(cli::format_rank_table(make_doc(), true));
  ASSERT_EQ(lines.size(), 5u);
  auto last = fields(lines[4]);
  ASSERT_GE(last.size(), 4u);
  EXPECT_EQ(last[0], "?");
  EXPECT_EQ(last[1], "?");
  EXPECT_EQ(last[2], "300");
  EXPECT_EQ(last[9], "-");
}

TEST(RankTable, EmptyAndOddDocuments) {
  EXPECT_EQ(cli::format_rank_table(json::parse(R"({"node":"n1","ranks":[]})"), false), "no ranks on n1\n");
  EXPECT_EQ(cli::format_rank_table(json::parse(R"({"ranks":[{"pid":1}]})"), false),
            "no ranks\n(1 unidentified process hidden; --all shows them)\n");
  // Wrong types and missing fields read as unknown instead of throwing.
  json odd = json::parse(R"({"ranks":[{"pid":"x","job_id":5,"rank":"0","nccl":[],"cuda":7}, 3, null]})");
  EXPECT_NO_THROW(cli::format_rank_table(odd, true));
  EXPECT_NO_THROW(cli::format_rank_table(json::array(), true));
  EXPECT_NO_THROW(cli::format_rank_table(json(), true));
}

TEST(RankTable, LongAndHostileJobIds) {
  json doc = json::parse(R"({"ranks":[{"pid":1,"job_id":"","rank":0}]})");
  doc["ranks"][0]["job_id"] = std::string(60, 'j') + "\nX";
  auto lines = lines_of(cli::format_rank_table(doc, false));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(fields(lines[1])[0], std::string(21, 'j') + "...");
}

TEST(RankTable, FromTheAgentsOwnDocument) {
  Snapshot s;
  s.agent.node = "n1";
  RankSnapshot r;
  r.pid = 7;
  r.job_id = "j";
  r.rank = 0;
  r.nccl["all_reduce"] = {3, 3'000'000'000, 2'000'000'000};
  r.launches_counted = true;
  r.kernel_launches = 5;
  s.ranks = {r};
  auto lines = lines_of(cli::format_rank_table(ranks_json(s), false));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(fields(lines[1]),
            (std::vector<std::string>{"j", "0", "7", "running", "3", "3.00", "0.0", "0.0", "-", "-", "-", "-", "5", "0",
                                      "-", "-"}));
}

// argusctl end to end, against an HttpServer that serves a canned snapshot.
class RankTableArgusctl : public ::testing::Test {
 protected:
  void SetUp() override {
    binary_ = std::string(ARGUS_BUILD_DIR) + "/bin/argusctl";
    if (::access(binary_.c_str(), X_OK) != 0) GTEST_SKIP() << "argusctl not built at " << binary_;
    Snapshot s;
    s.agent.node = "n1";
    RankSnapshot r;
    r.pid = 7;
    r.job_id = "jobx";
    r.rank = 0;
    s.ranks = {r};
    std::string body = render_ranks_json(s);
    server_.route("GET", "/api/v1/ranks", [body](const HttpRequest&) { return HttpResponse::json(200, body); });
    auto p = server_.start("127.0.0.1:0");
    ASSERT_TRUE(p.ok()) << p.error();
    agent_ = "http://127.0.0.1:" + std::to_string(*p);
  }

  // Runs argusctl with args; returns exit code, fills out (stdout) and err (stderr).
  int run(const std::string& args, std::string& out, std::string& err, const std::string& env = "") {
    char errpath[] = "/tmp/argusctl-err-XXXXXX";
    int fd = ::mkstemp(errpath);
    if (fd < 0) return -1;
    ::close(fd);
    std::string cmd = "env -u ARGUS_AGENT " + env + " " + binary_ + " " + args + " 2>" + errpath;
    FILE* p = ::popen(cmd.c_str(), "r");
    if (!p) return -1;
    out.clear();
    char buf[512];
    while (std::fgets(buf, sizeof(buf), p)) out += buf;
    int status = ::pclose(p);
    FILE* e = std::fopen(errpath, "r");
    err.clear();
    while (e && std::fgets(buf, sizeof(buf), e)) err += buf;
    if (e) std::fclose(e);
    ::unlink(errpath);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  std::string binary_;
  std::string agent_;
  HttpServer server_;
};

TEST_F(RankTableArgusctl, RanksTableAndJson) {
  std::string out, err;
  EXPECT_EQ(run("ranks --agent " + agent_, out, err), 0) << err;
  EXPECT_NE(out.find("JOB"), std::string::npos) << out;
  EXPECT_NE(out.find("jobx"), std::string::npos) << out;
  EXPECT_EQ(run("ranks --json", out, err, "ARGUS_AGENT=" + agent_), 0) << err;
  EXPECT_EQ(json::parse(out)["ranks"][0]["job_id"], "jobx");
}

TEST_F(RankTableArgusctl, ErrorsAreOneLine) {
  std::string out, err;
  server_.stop();
  EXPECT_EQ(run("ranks --agent " + agent_, out, err), 1);
  EXPECT_EQ(err, "argusctl: cannot connect to " + agent_.substr(7) + " (connection refused or unreachable)\n");
  EXPECT_EQ(run("ranks --bogus", out, err), 2);
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_EQ(err.rfind("argusctl: ", 0), 0u) << err;
  EXPECT_EQ(run("", out, err), 2);
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_EQ(run("ranks --agent ftp://x/", out, err), 1);
  EXPECT_EQ(err.rfind("argusctl: invalid URL 'ftp://x/api/v1/ranks': only http:// and https://", 0), 0u) << err;
  EXPECT_EQ(run("ranks --agent " + agent_ + " --token-file /nonexistent/token", out, err), 1);
  EXPECT_EQ(err, "argusctl: cannot read --token-file /nonexistent/token: No such file or directory\n");
  EXPECT_EQ(run("ranks --agent " + agent_ + " --ca-cert x.pem --insecure", out, err), 2) << "one or the other";
}

TEST_F(RankTableArgusctl, BadAnswersAreOneLine) {
  server_.route("GET", "/bad/api/v1/ranks", [](const HttpRequest&) { return HttpResponse::json(200, "{not json\n"); });
  server_.route("GET", "/down/api/v1/ranks", [](const HttpRequest&) { return HttpResponse::text(503, "busy\nnow\n"); });
  std::string out, err;
  EXPECT_EQ(run("ranks --agent " + agent_ + "/bad", out, err), 1);
  EXPECT_EQ(err.rfind("argusctl: invalid JSON from " + agent_ + "/bad/api/v1/ranks: ", 0), 0u) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_EQ(run("ranks --agent " + agent_ + "/down/", out, err), 1);
  EXPECT_EQ(err, "argusctl: GET " + agent_ + "/down/api/v1/ranks: HTTP 503: busy now\n");
}

}  // namespace
}  // namespace argus
