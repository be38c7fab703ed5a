// `graft jobs list | show | cancel | pause | resume | events`: the training
// jobs of a running `graft serve`, through its HTTP API (the same routes the
// OpenAI SDKs use).
#include <cstdio>
#include <ctime>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/http_client.h"

namespace graft::cli {

namespace {

using json = nlohmann::json;

struct JobsArgs {
  std::string url = "http://127.0.0.1:8080";
  std::string api_key;
  std::string id;
  int limit = 20;
  bool all = false;
  bool json_output = false;
  bool follow = false;
};

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "graft: %s\n", message.c_str());
  throw CLI::RuntimeError(1);
}

HttpClient client(const JobsArgs& args) {
  auto c = HttpClient::connect_to(args.url, args.api_key);
  if (!c) fail(c.error().message);
  return std::move(c).value();
}

json call(HttpClient& c, const std::string& method, const std::string& target) {
  auto reply = c.request(method, target);
  if (!reply) fail(reply.error().message);
  if (reply->status != 200) fail(error_message(*reply));
  json body = json::parse(reply->body, nullptr, false);
  if (body.is_discarded()) fail("the server's answer is not JSON: " + reply->body.substr(0, 200));
  return body;
}

std::string when(const json& seconds) {
  if (!seconds.is_number()) return "-";
  const auto t = static_cast<std::time_t>(seconds.get<int64_t>());
  std::tm local{};
  localtime_r(&t, &local);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%S", &local);
  return text;
}

std::string text_or_dash(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_float()) return fmt::format("{:.4f}", v.get<double>());
  if (v.is_number()) return std::to_string(v.get<int64_t>());
  return "-";
}

std::string progress(const json& job) {
  const json& p = job.value("progress", json::object());
  const int64_t total = p.value("total_steps", 0);
  if (total == 0) return "-";
  return fmt::format("{}/{}", p.value("step", 0), total);
}

void list(const JobsArgs& args) {
  HttpClient c = client(args);
  std::vector<json> jobs;
  std::string after;
  for (;;) {
    std::string target = fmt::format("/v1/fine_tuning/jobs?limit={}", args.all ? 100 : args.limit);
    if (!after.empty()) target += "&after=" + after;
    json page = call(c, "GET", target);
    for (const json& j : page["data"]) jobs.push_back(j);
    if (!args.all || !page.value("has_more", false) || page["data"].empty()) break;
    after = page["data"].back()["id"].get<std::string>();
  }
  if (args.json_output) {
    std::printf("%s\n", json(jobs).dump(2).c_str());
    return;
  }
  if (jobs.empty()) {
    std::printf("no training jobs on %s\n", c.url().c_str());
    return;
  }
  std::printf("%-30s %-16s %-24s %-11s %-10s %s\n", "ID", "STATUS", "ADAPTER", "STEP", "LOSS", "CREATED");
  for (const json& j : jobs) {
    std::printf("%-30s %-16s %-24s %-11s %-10s %s\n", j.value("id", "").c_str(),
                j.value("status", "").c_str(), j.value("adapter_id", "").c_str(), progress(j).c_str(),
                text_or_dash(j.value("progress", json::object()).value("train_loss", json())).c_str(),
                when(j["created_at"]).c_str());
  }
}

void show(const JobsArgs& args) {
  HttpClient c = client(args);
  json j = call(c, "GET", "/v1/fine_tuning/jobs/" + args.id);
  if (args.json_output) {
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  const json& p = j.value("progress", json::object());
  auto row = [](const char* name, const std::string& value) {
    std::printf("%-12s %s\n", name, value.c_str());
  };
  row("job", j.value("id", ""));
  row("status", j.value("status", ""));
  row("model", j.value("model", ""));
  row("adapter", j.value("adapter_id", "") + (j["fine_tuned_model"].is_string() ? " (in the store)" : ""));
  row("files",
      "training " + text_or_dash(j["training_file"]) + ", validation " + text_or_dash(j["validation_file"]));
  row("progress",
      fmt::format("step {}, last checkpoint at step {}", progress(j), text_or_dash(p["checkpoint_step"])));
  row("loss",
      fmt::format("train {}, validation {}", text_or_dash(p["train_loss"]), text_or_dash(p["valid_loss"])));
  row("tokens", text_or_dash(j["trained_tokens"]));
  row("created", when(j["created_at"]));
  if (j["estimated_finish"].is_number()) row("finishes", when(j["estimated_finish"]) + " (estimated)");
  if (j["finished_at"].is_number()) row("finished", when(j["finished_at"]));
  if (j["error"].is_object()) row("error", text_or_dash(j["error"]["message"]));
}

void act(const JobsArgs& args, const std::string& action) {
  HttpClient c = client(args);
  json j = call(c, "POST", "/v1/fine_tuning/jobs/" + args.id + "/" + action);
  std::printf("%s: %s\n", j.value("id", "").c_str(), j.value("status", "").c_str());
}

void print_event(const json& e, bool as_json) {
  if (as_json) {
    std::printf("%s\n", e.dump().c_str());
  } else {
    const std::string level = e.value("level", "info");
    std::printf("%s  %-5s %s\n", when(e["created_at"]).c_str(), level.c_str(),
                e.value("message", "").c_str());
  }
  std::fflush(stdout);
}

void events(const JobsArgs& args) {
  HttpClient c = client(args);
  if (args.follow) {
    // The stream starts with the whole history, then goes on until the job ends.
    Status s = c.stream("/v1/fine_tuning/jobs/" + args.id + "/events?stream=true", "",
                        [&](const std::string&, const std::string& data) {
                          json e = json::parse(data, nullptr, false);
                          if (e.is_object() && e.contains("error")) fail(e["error"].value("message", data));
                          if (e.is_object()) print_event(e, args.json_output);
                          return true;
                        });
    if (!s) fail(s.error().message);
    return;
  }
  std::vector<json> all;  // newest first, page after page
  std::string after;
  for (;;) {
    std::string target = "/v1/fine_tuning/jobs/" + args.id + "/events?limit=1000";
    if (!after.empty()) target += "&after=" + after;
    json page = call(c, "GET", target);
    for (const json& e : page["data"]) all.push_back(e);
    if (!page.value("has_more", false) || page["data"].empty()) break;
    after = page["data"].back()["id"].get<std::string>();
  }
  for (auto it = all.rbegin(); it != all.rend(); ++it) print_event(*it, args.json_output);
}

}  // namespace

void add_jobs_command(CLI::App& app) {
  auto args = std::make_shared<JobsArgs>();
  auto* cmd =
      app.add_subcommand("jobs", "Training jobs of a running graft serve: list, show, cancel, events");
  cmd->require_subcommand(1);
  cmd->add_option("--url", args->url, "The server")->capture_default_str()->envname("GRAFT_URL");
  cmd->add_option("--api-key", args->api_key, "The server's API key")->envname("GRAFT_API_KEY");

  auto* list_cmd = cmd->add_subcommand("list", "Jobs, newest first");
  list_cmd->add_option("--limit", args->limit, "How many")->capture_default_str()->check(CLI::Range(1, 100));
  list_cmd->add_flag("--all", args->all, "Every job");
  list_cmd->add_flag("--json", args->json_output, "The job objects as JSON");
  list_cmd->callback([args] { list(*args); });

  auto* show_cmd = cmd->add_subcommand("show", "One job: status, progress, loss, error");
  show_cmd->add_option("id", args->id, "Job id (ftjob-...)")->required();
  show_cmd->add_flag("--json", args->json_output, "The job object as JSON");
  show_cmd->callback([args] { show(*args); });

  for (const char* action : {"cancel", "pause", "resume"}) {
    const std::string help = std::string(action) == "cancel" ? "Cancel a job (its checkpoints are kept)"
                             : std::string(action) == "pause"
                                 ? "Pause a job at a checkpoint"
                                 : "Resume a paused job from its last checkpoint";
    auto* sub = cmd->add_subcommand(action, help);
    sub->add_option("id", args->id, "Job id (ftjob-...)")->required();
    sub->callback([args, action] { act(*args, action); });
  }

  auto* events_cmd = cmd->add_subcommand("events", "A job's events, oldest first");
  events_cmd->add_option("id", args->id, "Job id (ftjob-...)")->required();
  events_cmd->add_flag("--follow,-f", args->follow, "Keep printing new events until the job ends");
  events_cmd->add_flag("--json", args->json_output, "One event object per line");
  events_cmd->callback([args] { events(*args); });
}

}  // namespace graft::cli
