// The files and fine-tuning routes on a real tiny model, with a scripted
// stand-in for `graft train --json` (tests/train/fake_trainer.sh): uploads and
// their checks, bad job requests, pages, cancel/pause/resume, SSE with ids and
// Last-Event-ID, and one server per data folder.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <regex>
#include <thread>

#include "server/http_client.h"
#include "server/routes_jobs.h"
#include "testing/test_models.h"
#include "util/hash.h"

namespace graft::server {
namespace {

using graft::testing::http_request;
using graft::testing::HttpReply;
using graft::testing::RawConnection;
using namespace std::chrono_literals;

const std::string kData = "{\"text\": \"a\"}\n{\"text\": \"b\"}\n";

class TrainingRoutes : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    TestModelSpec spec = graft::testing::tiny_spec("qwen3", "qwen2", "f16");
    model_path_ = graft::testing::test_model_path(spec);
    ServeOptions options;
    options.model_path = model_path_;
    options.model_id = "tiny";
    options.n_ctx = 128;
    options.threads = 1;
    auto model = ServedModel::load(options);
    ASSERT_TRUE(model.ok()) << model.error().message;
    model_ = std::move(*model).release();
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }

  // A server whose jobs run the fake trainer in `mode` for `steps` steps.
  void start(const std::string& mode = "ok", int steps = 6, const std::string& delay = "0.02") {
    TrainingOptions o;
    o.data_dir = dir_.path() / "data";
    o.adapter_store = dir_.path() / "adapters";
    o.model_path = model_path_;
    o.trainer = {"/usr/bin/env", "FAKE_STEPS=" + std::to_string(steps),           "FAKE_DELAY=" + delay,
                 "/bin/sh",      GRAFT_SOURCE_DIR "/tests/train/fake_trainer.sh", mode};
    o.max_upload = 64 << 10;
    o.stop_grace = 5s;
    o.data_dirs = {dir_.path() / "datasets"};
    auto service = TrainingService::create(*model_, o, nullptr);
    ASSERT_TRUE(service) << service.error().message;
    training_ = std::move(service).value();
    ServerOptions server_options;
    server_options.http.port = 0;
    server_ = std::make_unique<Server>(*model_, server_options);
    training_->install(*server_);
    ASSERT_TRUE(server_->start().ok());
    port_ = server_->port();
  }
  void TearDown() override {
    if (server_) server_->stop();
    training_.reset();
    server_.reset();
  }

  HttpReply upload(const std::string& content, const std::string& purpose = "fine-tune",
                   const std::string& extra_field = "") {
    std::string body = "--B\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\n" + purpose + "\r\n";
    if (!extra_field.empty())
      body += "--B\r\nContent-Disposition: form-data; name=\"" + extra_field + "\"\r\n\r\nx\r\n";
    body += "--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"train.jsonl\"\r\n\r\n" +
            content + "\r\n--B--\r\n";
    RawConnection c(port_);
    c.send(
        "POST /v1/files HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; "
        "boundary=B\r\nContent-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body);
    return c.read_reply();
  }
  std::string upload_id() {
    HttpReply reply = upload(kData);
    EXPECT_EQ(reply.status, 200) << reply.body;
    return json::parse(reply.body)["id"];
  }
  HttpReply call(const std::string& method, const std::string& path, const json& body = nullptr) {
    return http_request(port_, method, path, body.is_null() ? "" : body.dump());
  }
  json ok(const std::string& method, const std::string& path, const json& body = nullptr) {
    HttpReply reply = call(method, path, body);
    EXPECT_EQ(reply.status, 200) << method << " " << path << ": " << reply.body;
    return json::parse(reply.body);
  }
  json create(const json& extra = json::object()) {
    json body = {{"model", "tiny"}, {"training_file", upload_id()}};
    body.update(extra);
    return ok("POST", "/v1/fine_tuning/jobs", body);
  }
  json wait_for(const std::string& id, const std::function<bool(const json&)>& done) {
    const auto until = std::chrono::steady_clock::now() + 30s;
    for (;;) {
      json job = ok("GET", "/v1/fine_tuning/jobs/" + id);
      if (done(job)) return job;
      if (std::chrono::steady_clock::now() > until) {
        ADD_FAILURE() << "job " << id << " stuck: " << job.dump();
        return job;
      }
      std::this_thread::sleep_for(20ms);
    }
  }
  json wait_status(const std::string& id, const std::string& status) {
    return wait_for(id, [&](const json& j) { return j["status"] == status; });
  }
  // Every event of a job, oldest first, through the paged list.
  std::vector<json> all_events(const std::string& id) {
    std::vector<json> events;
    std::string after;
    for (;;) {
      json page = ok(
          "GET", "/v1/fine_tuning/jobs/" + id + "/events?limit=3" + (after.empty() ? "" : "&after=" + after));
      for (const json& e : page["data"]) events.insert(events.begin(), e);
      if (!page["has_more"].get<bool>()) return events;
      after = page["data"].back()["id"];
    }
  }
  static std::vector<std::string> ids_in(const std::string& stream) {
    std::vector<std::string> ids;
    static const std::regex id_line("(^|\n)id: (ftevent-[0-9]+)\n");
    for (auto it = std::sregex_iterator(stream.begin(), stream.end(), id_line); it != std::sregex_iterator();
         ++it) {
      ids.push_back((*it)[2]);
    }
    return ids;
  }

  static inline ServedModel* model_ = nullptr;
  static inline std::string model_path_;
  TempDir dir_{"graft-training-routes"};
  std::unique_ptr<TrainingService> training_;
  std::unique_ptr<Server> server_;
  int port_ = 0;
};

TEST_F(TrainingRoutes, UploadsAreCheckedHashedListedAndDeleted) {
  start();
  HttpReply added = upload(kData);
  ASSERT_EQ(added.status, 200) << added.body;
  json file = json::parse(added.body);
  EXPECT_EQ(file["object"], "file");
  EXPECT_EQ(file["purpose"], "fine-tune");
  EXPECT_EQ(file["filename"], "train.jsonl");
  EXPECT_EQ(file["bytes"], kData.size());
  EXPECT_EQ(file["rows"], 2);
  EXPECT_EQ(file["sha256"], sha256_hex(kData));
  const std::string id = file["id"];
  EXPECT_EQ(ok("GET", "/v1/files/" + id)["sha256"], file["sha256"]);
  EXPECT_EQ(call("GET", "/v1/files/" + id + "/content").body, kData);
  EXPECT_EQ(ok("GET", "/v1/files")["data"][0]["id"], id);

  HttpReply csv = upload("a,b\n1,2\n");
  EXPECT_EQ(csv.status, 400);
  EXPECT_NE(csv.body.find("line 1"), std::string::npos) << csv.body;
  HttpReply broken = upload(kData + "{\"text\": \"c\"}\n{\"text\": \n");
  EXPECT_EQ(broken.status, 400);
  EXPECT_NE(broken.body.find("line 4"), std::string::npos) << broken.body;
  EXPECT_EQ(upload(std::string(70 << 10, 'x')).status, 413);
  HttpReply purpose = upload(kData, "assistants");
  EXPECT_EQ(purpose.status, 400);
  EXPECT_EQ(json::parse(purpose.body)["error"]["param"], "purpose");
  HttpReply extra = upload(kData, "fine-tune", "expires_after");
  EXPECT_EQ(extra.status, 400);
  EXPECT_EQ(json::parse(extra.body)["error"]["param"], "expires_after");
  EXPECT_EQ(call("POST", "/v1/files", json{{"file", "x"}}).status, 400);  // not multipart
  EXPECT_EQ(ok("GET", "/v1/files")["data"].size(), 1u);                   // nothing refused was kept

  EXPECT_EQ(ok("DELETE", "/v1/files/" + id)["deleted"], true);
  EXPECT_EQ(call("GET", "/v1/files/" + id).status, 404);
  EXPECT_EQ(call("DELETE", "/v1/files/" + id).status, 404);
}

TEST_F(TrainingRoutes, InspectReportsRowsFormatsTokenLengthsAndCuts) {
  start();
  const std::string data =
      "{\"text\": \"one two three four five six seven eight\"}\n"
      "{\"prompt\": \"Say hi:\", \"completion\": \" hi\"}\n"
      "{\"messages\": [{\"role\": \"user\", \"content\": \"hello\"}, "
      "{\"role\": \"assistant\", \"content\": \"hi there\"}]}\n";
  HttpReply added = upload(data);
  ASSERT_EQ(added.status, 200) << added.body;
  const std::string id = json::parse(added.body)["id"];

  json report = ok("POST", "/v1/files/inspect", {{"file_id", id}});
  EXPECT_EQ(report["object"], "file.inspection");
  EXPECT_EQ(report["file_id"], id);
  EXPECT_EQ(report["rows"], 3);
  EXPECT_EQ(report["formats"], json({{"messages", 1}, {"prompt_completion", 1}, {"text", 1}}));
  const json& tokens = report["tokens"];
  EXPECT_GT(tokens["min"].get<int>(), 1);
  EXPECT_GE(tokens["max"].get<int>(), tokens["p95"].get<int>());
  EXPECT_GE(tokens["p95"].get<int>(), tokens["p50"].get<int>());
  EXPECT_GE(tokens["p50"].get<int>(), tokens["min"].get<int>());
  EXPECT_EQ(tokens["total"].get<int64_t>(), std::llround(tokens["mean"].get<double>() * 3));
  EXPECT_GT(report["target_tokens"].get<int>(), 0);
  EXPECT_LT(report["target_tokens"].get<int>(), tokens["total"].get<int>());  // prompts are masked
  EXPECT_EQ(report["truncated"], 0);
  EXPECT_EQ(report["sha256"], sha256_hex(data));

  // A shorter cut: the longest examples are truncated, none longer than the cut.
  const int cut = tokens["min"].get<int>();
  json cut_report = ok("POST", "/v1/files/inspect", {{"file_id", id}, {"max_seq_length", cut}});
  EXPECT_GT(cut_report["truncated"].get<int>(), 0);
  EXPECT_LE(cut_report["tokens"]["max"].get<int>(), cut);
  EXPECT_EQ(cut_report["max_seq_length"], cut);

  // By path: only inside --train-data-dir.
  fs::create_directories(dir_.path() / "datasets");
  {
    std::ofstream out(dir_.path() / "datasets" / "train.jsonl");
    out << data;
  }
  EXPECT_EQ(ok("POST", "/v1/files/inspect",
               {{"path", (dir_.path() / "datasets" / "train.jsonl").string()}})["rows"],
            3);
  EXPECT_EQ(call("POST", "/v1/files/inspect", {{"path", (dir_.path() / "datasets" / ".." / "data").string()}})
                .status,
            403);

  // Bad requests name the field; a bad line is named.
  auto refused = [&](const json& body, int status, const std::string& param) {
    HttpReply reply = call("POST", "/v1/files/inspect", body);
    EXPECT_EQ(reply.status, status) << body.dump() << " -> " << reply.body;
    EXPECT_EQ(json::parse(reply.body)["error"]["param"], param) << reply.body;
    return reply;
  };
  refused({{"file_id", "file-nope"}}, 404, "file_id");
  refused({{"file_id", id}, {"rows", 3}}, 400, "rows");
  refused({{"file_id", id}, {"max_seq_length", "long"}}, 400, "max_seq_length");
  refused(json::object(), 400, "file_id");
  const std::string no_answer = "{\"messages\": [{\"role\": \"user\", \"content\": \"hello\"}]}\n";
  const std::string bad_id = json::parse(upload(kData + no_answer).body)["id"];
  HttpReply bad = refused({{"file_id", bad_id}}, 400, "file_id");
  EXPECT_NE(bad.body.find(bad_id + ", line 3: "), std::string::npos) << bad.body;
  EXPECT_NE(bad.body.find(bad_id), std::string::npos) << bad.body;
  EXPECT_EQ(bad.body.find(dir_.path().string()), std::string::npos) << "no server path: " << bad.body;
}

TEST_F(TrainingRoutes, BadJobRequestsAreRefusedNamingTheField) {
  start();
  const std::string file = upload_id();
  auto refused = [&](json body, int status, const std::string& param) {
    json request = {{"model", "tiny"}, {"training_file", file}};
    request.update(body);
    HttpReply reply = call("POST", "/v1/fine_tuning/jobs", request);
    EXPECT_EQ(reply.status, status) << request.dump() << " -> " << reply.body;
    EXPECT_EQ(json::parse(reply.body)["error"]["param"], param) << reply.body;
  };
  refused({{"model", "gpt-4o-mini"}}, 400, "model");
  refused({{"training_file", "file-nope"}}, 404, "training_file");
  refused({{"validation_file", "file-nope"}}, 404, "validation_file");
  refused({{"hyperparameters", {{"n_epochs", 0}}}}, 400, "hyperparameters.n_epochs");
  refused({{"hyperparameters", {{"batch_size", "big"}}}}, 400, "hyperparameters.batch_size");
  refused({{"hyperparameters", {{"momentum", 1}}}}, 400, "hyperparameters.momentum");
  refused({{"method", {{"type", "dpo"}}}}, 400, "method.type");
  refused({{"hyperparameters", {{"n_epochs", 2}}},
           {"method", {{"type", "supervised"}, {"supervised", {{"hyperparameters", {{"n_epochs", 3}}}}}}}},
          400, "method.supervised.hyperparameters");
  refused({{"lora", {{"rank", 0}}}}, 400, "lora.rank");
  refused({{"lora", {{"targets", {"q", "attn"}}}}}, 400, "lora.targets");
  refused({{"lora", {{"learning_rte", 1e-4}}}}, 400, "lora.learning_rte");
  refused({{"lora", {{"iters", 10}}}, {"hyperparameters", {{"n_epochs", 2}}}}, 400, "lora.iters");
  refused({{"suffix", "no/slashes"}}, 400, "suffix");
  refused({{"integrations", {{{"type", "wandb"}}}}}, 400, "integrations");
  refused({{"temperature", 1}}, 400, "temperature");
  EXPECT_EQ(call("POST", "/v1/fine_tuning/jobs", json::array()).status, 400);
  EXPECT_EQ(call("GET", "/v1/fine_tuning/jobs/ftjob-nope").status, 404);
  EXPECT_EQ(ok("GET", "/v1/fine_tuning/jobs")["data"].size(), 0u);

  fs::create_directories(dir_.path() / "adapters" / "taken");
  refused({{"suffix", "taken"}}, 400, "suffix");
}

TEST_F(TrainingRoutes, AJobRunsToTheEndWithPagedEventsAndCheckpoints) {
  start();
  json job = create({{"suffix", "mine"},
                     {"seed", 3},
                     {"hyperparameters", {{"n_epochs", 2}}},
                     {"lora", {{"rank", 4}, {"targets", {"q", "v"}}}},
                     {"metadata", {{"project", "x"}}}});
  EXPECT_EQ(job["object"], "fine_tuning.job");
  EXPECT_EQ(job["status"], "validating_files");
  EXPECT_EQ(job["fine_tuned_model"], nullptr);
  EXPECT_EQ(job["user_provided_suffix"], "mine");
  EXPECT_EQ(job["hyperparameters"]["n_epochs"], 2);
  EXPECT_EQ(job["hyperparameters"]["batch_size"], "auto");
  EXPECT_EQ(job["metadata"]["project"], "x");
  const std::string id = job["id"];
  job = wait_status(id, "succeeded");
  EXPECT_EQ(job["fine_tuned_model"], "mine");
  EXPECT_EQ(job["trained_tokens"], 60);
  EXPECT_EQ(job["error"], nullptr);
  EXPECT_TRUE(job["finished_at"].is_number());
  EXPECT_TRUE(fs::is_directory(dir_.path() / "adapters" / "mine"));

  std::vector<json> events = all_events(id);
  std::vector<int64_t> steps;
  for (const json& e : events) {
    EXPECT_EQ(e["object"], "fine_tuning.job.event");
    if (e["type"] == "metrics") steps.push_back(e["data"]["step"]);
  }
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(events.back()["message"], "The job has successfully completed");
  // The whole stream of a finished job: every event, in order, then the end.
  HttpReply stream = call("GET", "/v1/fine_tuning/jobs/" + id + "/events?stream=true");
  EXPECT_EQ(stream.header("content-type"), "text/event-stream");
  std::vector<std::string> expected;
  for (const json& e : events) expected.push_back(e["id"]);
  EXPECT_EQ(ids_in(stream.body), expected);

  json checkpoints = ok("GET", "/v1/fine_tuning/jobs/" + id + "/checkpoints?limit=2");
  ASSERT_EQ(checkpoints["data"].size(), 2u);
  EXPECT_EQ(checkpoints["data"][0]["object"], "fine_tuning.job.checkpoint");
  EXPECT_EQ(checkpoints["data"][0]["step_number"], 6);
  EXPECT_EQ(checkpoints["data"][0]["fine_tuned_model_checkpoint"], "mine:ckpt-step-6");
  EXPECT_TRUE(checkpoints["has_more"].get<bool>());
  json rest = ok("GET", "/v1/fine_tuning/jobs/" + id +
                            "/checkpoints?after=" + checkpoints["data"][1]["id"].get<std::string>());
  ASSERT_EQ(rest["data"].size(), 1u);
  EXPECT_EQ(rest["data"][0]["step_number"], 2);
}

TEST_F(TrainingRoutes, JobsPageNewestFirst) {
  start("bad-line");
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) ids.push_back(create()["id"]);
  json first = ok("GET", "/v1/fine_tuning/jobs?limit=2");
  ASSERT_EQ(first["data"].size(), 2u);
  EXPECT_EQ(first["data"][0]["id"], ids[4]);
  EXPECT_EQ(first["data"][1]["id"], ids[3]);
  EXPECT_TRUE(first["has_more"].get<bool>());
  json last = ok("GET", "/v1/fine_tuning/jobs?limit=10&after=" + ids[3]);
  ASSERT_EQ(last["data"].size(), 3u);
  EXPECT_EQ(last["data"][2]["id"], ids[0]);
  EXPECT_FALSE(last["has_more"].get<bool>());
  EXPECT_EQ(call("GET", "/v1/fine_tuning/jobs?limit=0").status, 400);
  EXPECT_EQ(call("GET", "/v1/fine_tuning/jobs?after=ftjob-nope").status, 404);
  EXPECT_EQ(call("GET", "/v1/fine_tuning/jobs?order=asc").status, 400);
}

TEST_F(TrainingRoutes, AMalformedLineFailsTheJobNamingIt) {
  start("bad-line");
  const std::string id = create()["id"];
  json job = wait_status(id, "failed");
  EXPECT_EQ(job["error"]["param"], "training_file");
  EXPECT_NE(job["error"]["message"].get<std::string>().find("line 17"), std::string::npos) << job.dump();
}

TEST_F(TrainingRoutes, CancelPauseAndResumeAnswerWithTheJob) {
  start("ok", 1000);
  json job = create();
  const std::string id = job["id"];
  const std::string file = job["training_file"];
  wait_for(id, [](const json& j) { return j["progress"]["checkpoint_step"].get<int>() >= 2; });
  HttpReply in_use = call("DELETE", "/v1/files/" + file);
  EXPECT_EQ(in_use.status, 409) << in_use.body;
  EXPECT_EQ(ok("POST", "/v1/fine_tuning/jobs/" + id + "/pause")["status"], "paused");
  EXPECT_EQ(call("POST", "/v1/fine_tuning/jobs/" + id + "/pause").status, 409);
  EXPECT_EQ(call("DELETE", "/v1/files/" + file).status, 409);  // a paused job still needs it
  EXPECT_EQ(ok("POST", "/v1/fine_tuning/jobs/" + id + "/resume")["status"], "queued");
  wait_status(id, "running");
  EXPECT_EQ(ok("POST", "/v1/fine_tuning/jobs/" + id + "/cancel")["status"], "cancelled");
  EXPECT_EQ(call("POST", "/v1/fine_tuning/jobs/" + id + "/cancel").status, 409);
  EXPECT_EQ(call("POST", "/v1/fine_tuning/jobs/" + id + "/resume").status, 409);
  EXPECT_EQ(call("POST", "/v1/fine_tuning/jobs/ftjob-nope/cancel").status, 404);
  ok("DELETE", "/v1/files/" + file);
}

TEST_F(TrainingRoutes, AReconnectingStreamGetsEveryLaterEventExactlyOnce) {
  start("ok", 40, "0.03");
  const std::string id = create()["id"];
  const std::string target = "/v1/fine_tuning/jobs/" + id + "/events?stream=true";
  std::string seen;
  {
    RawConnection c(port_);
    ASSERT_TRUE(c.send("GET " + target + " HTTP/1.1\r\nHost: x\r\n\r\n"));
    while (ids_in(seen).size() < 5) {
      std::string more = c.read_some();
      ASSERT_FALSE(more.empty()) << seen;
      seen += more;
    }
  }  // the client goes away mid-job
  std::vector<std::string> first = ids_in(seen);
  first.resize(5);
  std::this_thread::sleep_for(200ms);  // events go on meanwhile
  RawConnection c(port_);
  ASSERT_TRUE(
      c.send("GET " + target + " HTTP/1.1\r\nHost: x\r\nLast-Event-ID: " + first.back() + "\r\n\r\n"));
  HttpReply rest = c.read_reply();  // until the job ends and the stream with it
  ASSERT_EQ(rest.status, 200);
  std::vector<std::string> ids = first;
  for (const std::string& later : ids_in(rest.body)) ids.push_back(later);
  std::vector<std::string> expected;
  for (const json& e : all_events(id)) expected.push_back(e["id"]);
  EXPECT_EQ(ids, expected);
  EXPECT_EQ(ok("GET", "/v1/fine_tuning/jobs/" + id)["status"], "succeeded");
  EXPECT_EQ(call("GET", target, nullptr).status, 200);
  EXPECT_EQ(http_request(port_, "GET", target, "", {{"Last-Event-ID", "yesterday"}}).status, 400);
}

TEST_F(TrainingRoutes, ASecondServerOnTheSameDataFolderSaysWhoRunsTheJobs) {
  start();
  TrainingOptions o;
  o.data_dir = dir_.path() / "data";
  o.model_path = model_path_;
  o.trainer = {"/bin/false"};
  auto second = TrainingService::create(*model_, o, nullptr);
  ASSERT_TRUE(second);
  EXPECT_NE((*second)->unavailable().find("pid " + std::to_string(::getpid())), std::string::npos)
      << (*second)->unavailable();
  ServerOptions options;
  options.http.port = 0;
  Server other(*model_, options);
  (*second)->install(other);
  ASSERT_TRUE(other.start().ok());
  for (const char* path : {"/v1/fine_tuning/jobs", "/v1/files"}) {
    HttpReply refused = http_request(other.port(), "GET", path);
    EXPECT_EQ(refused.status, 503);
    EXPECT_NE(refused.body.find("another graft serve"), std::string::npos) << refused.body;
  }
  other.stop();
  second->reset();
}

}  // namespace
}  // namespace graft::server
