// argusctl: the operator's CLI. Talks to an argus-agent's HTTP API.
//
//   argusctl ranks [--agent URL] [--json] [--all]
//   argusctl stacks JOB [RANK] [--json]
//
// Exit status: 0 ok, 1 the agent could not be asked or answered badly, 2 bad usage.
// Every error is one line on stderr.
//
// Adding a subcommand: write a struct with add(CLI::App&) and run(), register it in
// main() next to RanksCommand.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <ctime>
#include <fstream>
#include <iterator>
#include <cctype>
#include <cstring>
#include <cerrno>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "userspace/net/http_client.h"
#include "userspace/cli/rank_table.h"
#include "userspace/common/result.h"
#include "userspace/python/stack_groups.h"

#ifndef ARGUS_VERSION
#define ARGUS_VERSION "dev"
#endif

namespace {


constexpr const char* kDefaultAgent = "http://127.0.0.1:9745";

// Failures that end the command: printed as one line, exit 1.
struct CommandError {
  std::string message;
  // The agent serves the route only with --debug-routes: no other rank's try
  // can succeed either.
  bool route_disabled = false;
};

std::string one_line(std::string s) {
  for (auto& c : s) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  }
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

// Options every subcommand that talks to an agent has.
struct AgentOptions {
  std::string agent = kDefaultAgent;
  double timeout_s = 5;
  std::string token_file;
  std::string ca_cert;
  bool insecure = false;

  void add(CLI::App& sub) {
    sub.add_option("--agent", agent,
                   "the agent's URL, http:// or https:// (default: $ARGUS_AGENT, else " + std::string(kDefaultAgent) +
                       ")")
        ->envname("ARGUS_AGENT");
    sub.add_option("--token-file", token_file, "send the bearer token in FILE (the agent's --auth-token-file)")
        ->envname("ARGUS_TOKEN_FILE");
    auto* ca = sub.add_option("--ca-cert", ca_cert, "https: trust the CA certificate(s) in FILE (PEM)")
                   ->envname("ARGUS_CA_CERT");
    sub.add_flag("--insecure", insecure, "https: do not verify the agent's certificate")->excludes(ca);
    sub.add_option("--timeout", timeout_s, "seconds to wait for the agent")
        ->check(CLI::Validator(
            [](std::string& v) -> std::string {
              try {
                std::size_t used = 0;
                double d = std::stod(v, &used);
                if (used == v.size() && d > 0 && d <= 3600) return "";
              } catch (const std::exception&) {
              }
              return "'" + v + "' is not a number of seconds between 0 and 3600";
            },
            "SECONDS"))
        ->capture_default_str();
  }

  // The agent's base URL plus path; "host:port" alone means http://host:port.
  std::string url(const std::string& path) const {
    std::string base = agent.find("://") == std::string::npos ? "http://" + agent : agent;
    while (!base.empty() && base.back() == '/') base.pop_back();
    return base + path;
  }

  argus::cli::ClientOptions client_options() const {
    argus::cli::ClientOptions o;
    o.timeout = std::chrono::milliseconds(static_cast<long long>(timeout_s * 1000));
    o.ca_cert_file = ca_cert;
    o.insecure = insecure;
    if (!token_file.empty()) {
      std::ifstream in(token_file, std::ios::binary);
      if (!in) throw CommandError{"cannot read --token-file " + token_file + ": " + std::strerror(errno)};
      std::string token((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) token.pop_back();
      if (token.empty()) throw CommandError{"--token-file " + token_file + " is empty"};
      o.bearer_token = token;
    }
    return o;
  }

  // GET path, expect 200 and a JSON body.
  nlohmann::json get_json(const std::string& path) const {
    const std::string u = url(path);
    auto resp = argus::cli::http_get(u, client_options());
    if (!resp) throw CommandError{resp.error()};
    if (resp->status == 401) {
      throw CommandError{token_file.empty()
                             ? "the agent at " + url("") + " requires a bearer token: pass --token-file FILE"
                             : "the agent at " + url("") + " refused the token in " + token_file};
    }
    if (resp->status == 404) {  // a debug route the agent serves only with --debug-routes
      nlohmann::json err = nlohmann::json::parse(resp->body, nullptr, false);
      if (err.is_object() && err.value("disabled", false))
        throw CommandError{"the agent at " + url("") + " has " + path.substr(0, path.find('?')) +
                               " turned off: start argus-agent with --debug-routes to use this command",
                           true};
    }
    if (resp->status != 200) {
      std::string body = one_line(resp->body);
      if (body.size() > 200) body = body.substr(0, 200) + "...";
      throw CommandError{"GET " + u + ": HTTP " + std::to_string(resp->status) + (body.empty() ? "" : ": " + body)};
    }
    try {
      return nlohmann::json::parse(resp->body);
    } catch (const nlohmann::json::exception& e) {
      throw CommandError{"invalid JSON from " + u + ": " + e.what()};
    }
  }
};

std::string pretty(const nlohmann::json& j) {
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

// argusctl ranks: the node's ranks and their collective/sync time.
struct RanksCommand {
  AgentOptions agent;
  bool json = false;
  bool all = false;
  std::string job;
  CLI::App* app = nullptr;

  void add(CLI::App& parent) {
    app = parent.add_subcommand("ranks", "list the node's training ranks with their collective and sync time");
    agent.add(*app);
    app->add_flag("--json", json, "print the agent's JSON as is (pretty)");
    app->add_flag("--all", all, "also show processes whose job or rank is not known yet");
    app->add_option("--job", job, "only the ranks of this job_id");
  }

  int run() const {
    nlohmann::json doc = agent.get_json("/api/v1/ranks");
    if (!doc.is_object() || !doc.contains("ranks") || !doc["ranks"].is_array()) {
      throw CommandError{"unexpected answer from " + agent.url("/api/v1/ranks") + ": no \"ranks\" array"};
    }
    if (!job.empty()) {
      nlohmann::json kept = nlohmann::json::array();
      for (const auto& r : doc["ranks"])
        if (r.is_object() && r.value("job_id", nlohmann::json()) == job) kept.push_back(r);
      doc["ranks"] = std::move(kept);
    }
    if (json) {
      std::cout << pretty(doc);
    } else {
      std::cout << argus::cli::format_rank_table(doc, all);
    }
    std::cout.flush();
    return 0;
  }
};

// argusctl events: what the agent detected (stragglers, hangs, exits), oldest first.
struct EventsCommand {
  AgentOptions agent;
  bool json = false;
  double since = 0;
  double last = 0;
  CLI::App* app = nullptr;

  void add(CLI::App& parent) {
    app = parent.add_subcommand("events", "list detected events (stragglers, hangs, rank exits), oldest first");
    agent.add(*app);
    app->add_flag("--json", json, "print the agent's JSON as is (pretty)");
    auto* s = app->add_option("--since", since, "only events at or after this UNIX time")->check(CLI::NonNegativeNumber);
    app->add_option("--last", last, "only events of the last SECONDS")->check(CLI::PositiveNumber)->excludes(s);
  }

  int run() const {
    double from = since;
    if (last > 0) from = static_cast<double>(std::time(nullptr)) - last;
    char query[64];
    std::snprintf(query, sizeof(query), "/api/v1/events?since=%.3f", from);
    nlohmann::json doc = agent.get_json(query);
    if (!doc.is_object() || !doc.contains("events") || !doc["events"].is_array())
      throw CommandError{"unexpected answer from " + agent.url(query) + ": no \"events\" array"};
    if (json) {
      std::cout << pretty(doc);
    } else {
      std::cout << argus::cli::format_event_list(doc);
    }
    std::cout.flush();
    return 0;
  }
};

// argusctl trace: the node's recent timeline as Chrome trace JSON (open it in Perfetto).
struct TraceCommand {
  AgentOptions agent;
  double seconds = 10;
  std::string output;
  CLI::App* app = nullptr;

  void add(CLI::App& parent) {
    app = parent.add_subcommand("trace", "save the node's recent timeline (GPU kernels, collectives, synchronize "
                                         "waits) as Chrome trace JSON for Perfetto");
    agent.add(*app);
    app->add_option("--seconds", seconds, "how far back (1-60: the agent keeps the last 60 s)")
        ->check(CLI::Range(1.0, 60.0))
        ->capture_default_str();
    app->add_option("-o,--output", output, "file to write ('-' = stdout)")->required();
  }

  int run() const {
    char query[64];
    std::snprintf(query, sizeof(query), "/api/v1/trace?seconds=%g", seconds);
    nlohmann::json doc = agent.get_json(query);
    if (!doc.is_object() || !doc.contains("traceEvents") || !doc["traceEvents"].is_array())
      throw CommandError{"unexpected answer from " + agent.url(query) + ": no \"traceEvents\" array"};
    const std::string text = doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    size_t spans = 0;
    for (const auto& e : doc["traceEvents"])
      if (e.is_object() && e.value("ph", "") == "X") ++spans;
    if (output == "-") {
      std::cout << text;
      std::cout.flush();
      return 0;
    }
    const std::string tmp = output + ".tmp";
    {
      std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
      if (!f) throw CommandError{"cannot write " + tmp + ": " + std::strerror(errno)};
      f << text;
      f.close();
      if (!f) throw CommandError{"cannot write " + tmp + ": " + std::strerror(errno)};
    }
    if (std::rename(tmp.c_str(), output.c_str()) != 0) {
      const std::string err = std::strerror(errno);
      std::remove(tmp.c_str());
      throw CommandError{"cannot write " + output + ": " + err};
    }
    std::cerr << "argusctl: wrote " << spans << " spans of the last " << seconds << " s to " << output
              << " (open it at https://ui.perfetto.dev)" << std::endl;
    return 0;
  }
};

// argusctl stacks JOB [RANK]: every Python thread's stack now, of one rank or of
// every rank of the job on the node, grouped by identical stack.
struct StacksCommand {
  AgentOptions agent;
  bool json = false;
  std::string job;
  int rank = -1;
  CLI::App* app = nullptr;

  void add(CLI::App& parent) {
    app = parent.add_subcommand("stacks", "print the Python stacks of a rank, or of every rank of a job on the "
                                          "node grouped by identical stack (needs the agent's --debug-routes)");
    agent.add(*app);
    app->add_option("job", job, "the job_id")->required();
    app->add_option("rank", rank, "the rank (default: every rank of the job on this node)")
        ->check(CLI::NonNegativeNumber);
    app->add_flag("--json", json, "print JSON (the agent's for one rank; {job_id, groups, errors} for a job)");
  }

  static std::string path_for(const std::string& job, int rank) {
    std::string enc;
    for (unsigned char c : job) {
      if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
        enc += static_cast<char>(c);
      } else {
        char b[4];
        std::snprintf(b, sizeof b, "%%%02X", c);
        enc += b;
      }
    }
    return "/api/v1/ranks/" + enc + "/" + std::to_string(rank) + "/python-stacks";
  }

  int run() const {
    if (rank >= 0) {
      nlohmann::json doc = agent.get_json(path_for(job, rank));
      if (json) {
        std::cout << pretty(doc);
      } else {
        std::cout << "job " << job << " rank " << rank << " (pid " << doc.value("pid", 0) << ", Python "
                  << doc.value("python_version", "?") << "):\n"
                  << argus::python::format_threads(doc.value("threads", nlohmann::json::array()), true, "  ");
      }
      std::cout.flush();
      return 0;
    }
    nlohmann::json ranks = agent.get_json("/api/v1/ranks");
    if (!ranks.is_object() || !ranks.contains("ranks") || !ranks["ranks"].is_array())
      throw CommandError{"unexpected answer from " + agent.url("/api/v1/ranks") + ": no \"ranks\" array"};
    std::vector<int> wanted;
    for (const auto& r : ranks["ranks"]) {
      if (!r.is_object() || r.value("job_id", nlohmann::json()) != job || r.value("state", "") != "running") continue;
      if (r.contains("rank") && r["rank"].is_number_integer()) wanted.push_back(r["rank"].get<int>());
    }
    std::sort(wanted.begin(), wanted.end());
    wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
    if (wanted.empty()) throw CommandError{"no running rank of job " + job + " on the agent at " + agent.url("")};
    std::vector<std::pair<int, nlohmann::json>> docs;
    nlohmann::json errors = nlohmann::json::array();
    for (int r : wanted) {
      try {
        nlohmann::json doc = agent.get_json(path_for(job, r));
        docs.emplace_back(r, doc.value("threads", nlohmann::json::array()));
      } catch (const CommandError& e) {
        if (e.route_disabled) throw;
        errors.push_back({{"rank", r}, {"error", e.message}});
      }
    }
    const auto groups = argus::python::group_stacks(docs);
    if (json) {
      std::cout << pretty({{"job_id", job}, {"groups", argus::python::stack_groups_json(groups)}, {"errors", errors}});
    } else {
      std::cout << "job " << job << ": " << docs.size() << " rank(s) with Python stacks, " << groups.size()
                << " distinct\n"
                << argus::python::format_stack_groups(groups);
      for (const auto& e : errors) std::cout << "rank " << e["rank"] << ": " << e["error"].get<std::string>() << "\n";
    }
    std::cout.flush();
    return docs.empty() ? 1 : 0;
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"argusctl: ask an argus-agent about the training ranks on its node", "argusctl"};
  app.set_version_flag("--version", std::string(ARGUS_VERSION));
  app.require_subcommand(1);
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return "argusctl: " + one_line(e.what()) + " (see argusctl --help)\n";
  });

  RanksCommand ranks;
  ranks.add(app);
  EventsCommand events;
  events.add(app);
  TraceCommand trace;
  trace.add(app);
  StacksCommand stacks;
  stacks.add(app);

  // "argusctl bogus" would otherwise read as "a subcommand is required".
  const CLI::App& const_app = app;
  std::string names;
  bool known = false;
  for (const CLI::App* sub : const_app.get_subcommands([](const CLI::App*) { return true; })) {
    names += (names.empty() ? "" : ", ") + sub->get_name();
    if (argc > 1 && sub->get_name() == argv[1]) known = true;
  }
  if (argc > 1 && argv[1][0] != '-' && !known) {
    std::cerr << "argusctl: unknown command '" << one_line(argv[1]) << "' (commands: " << names
              << "; see argusctl --help)" << std::endl;
    return 2;
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);  // --help, --version
    std::cerr << "argusctl: " << one_line(e.what()) << " (see argusctl --help)" << std::endl;
    return 2;
  }

  try {
    if (ranks.app->parsed()) return ranks.run();
    if (events.app->parsed()) return events.run();
    if (trace.app->parsed()) return trace.run();
    if (stacks.app->parsed()) return stacks.run();
  } catch (const CommandError& e) {
    std::cerr << "argusctl: " << one_line(e.message) << std::endl;
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "argusctl: " << one_line(e.what()) << std::endl;
    return 1;
  }
  std::cerr << "argusctl: no command given (see argusctl --help)" << std::endl;
  return 2;
}
