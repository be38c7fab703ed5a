// `graft train` end to end through the binary: the JSON event stream, the
// adapter it publishes (PEFT, GGUF and graft_adapter.json, loading in graft
// run), checkpoints, SIGTERM, and --resume after SIGKILL giving the very
// same run.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "adapters/gguf_lora.h"
#include "adapters/metadata.h"
#include "adapters/peft.h"
#include "testing/test_models.h"
#include "train/process.h"

namespace graft {
namespace {

namespace fs = std::filesystem;
using testing::of_type;
using testing::run_graft;
using testing::RunResult;

fs::path fresh_dir(const std::string& name) {
  fs::path dir = fs::path(testing::scratch_dir()) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string xdg() {
  return testing::scratch_dir() + "/xdg";
}

// A tiny model with a real tokenizer (SentencePiece, 32k tokens).
std::string tiny_model(const std::string& arch = "llama", const std::string& type = "f32") {
  TestModelSpec spec = testing::tiny_spec(arch, "llama-spm", type);
  spec.n_embd = 64;
  spec.n_ff = 128;
  return testing::test_model_path(spec);
}

fs::path write_lines(const fs::path& path, const std::vector<std::string>& lines) {
  std::ofstream out(path);
  for (const std::string& l : lines) out << l << "\n";
  return path;
}

fs::path completion_data(const fs::path& dir) {
  std::vector<std::string> lines;
  for (int i = 0; i < 12; ++i) {
    lines.push_back(nlohmann::json({{"prompt", "Name " + std::to_string(i) + ":"},
                                    {"completion", " value " + std::to_string(i * 3)}})
                        .dump());
  }
  return write_lines(dir / "train.jsonl", lines);
}

std::vector<std::string> train_args(const std::string& model, const fs::path& data, const fs::path& store,
                                    const fs::path& run, int iters) {
  return {"train",
          model,
          "--data",
          data.string(),
          "--store",
          store.string(),
          "--job-dir",
          run.string(),
          "--iters",
          std::to_string(iters),
          "--batch-size",
          "3",
          "--learning-rate",
          "1e-3",
          "--rank",
          "4",
          "--save-every",
          "3",
          "--json",
          "--threads",
          "1",
          "--id",
          "tiny"};
}

std::vector<double> step_losses(const RunResult& r) {
  std::vector<double> out;
  for (const auto& e : of_type(r, "step")) out.push_back(e["train_loss"].get<double>());
  return out;
}

TEST(TrainCommand, EventsCheckpointsAndAPublishedAdapterThatLoads) {
  const fs::path dir = fresh_dir("train-basic");
  const std::string model = tiny_model();
  RunResult r = run_graft(train_args(model, completion_data(dir), dir / "store", dir / "run", 6), xdg());
  ASSERT_EQ(r.status, 0) << r.stderr_text;
  EXPECT_TRUE(r.bad_lines.empty()) << "stdout carries only JSON: " << r.bad_lines[0];
  ASSERT_FALSE(r.events.empty());
  const nlohmann::json start = r.events.front();
  EXPECT_EQ(start["type"], "start");
  EXPECT_EQ(start["total_steps"], 6);
  EXPECT_EQ(start["train_examples"], 12);
  EXPECT_EQ(start["resumed_from"], 0);
  EXPECT_EQ(start["job_dir"], (dir / "run").string());
  const auto steps = of_type(r, "step");
  ASSERT_EQ(steps.size(), 6u);
  for (size_t i = 0; i < steps.size(); ++i) {
    EXPECT_EQ(steps[i]["step"], int(i) + 1);
    for (const char* key : {"total_steps", "train_loss", "lr", "tokens", "tokens_per_s", "eta_s"}) {
      EXPECT_TRUE(steps[i].contains(key)) << key;
    }
  }
  EXPECT_LT(steps.back()["train_loss"].get<double>(), steps.front()["train_loss"].get<double>());
  const auto checkpoints = of_type(r, "checkpoint");
  ASSERT_EQ(checkpoints.size(), 2u);
  EXPECT_EQ(checkpoints[0]["step"], 3);
  EXPECT_TRUE(fs::exists(checkpoints[1]["path"].get<std::string>()));
  const nlohmann::json done = r.events.back();
  ASSERT_EQ(done["type"], "done");
  EXPECT_EQ(done["adapter_id"], "tiny");
  const fs::path adapter = done["adapter_path"].get<std::string>();
  EXPECT_EQ(adapter, dir / "store" / "tiny");

  // The three forms, and the same weights in PEFT and GGUF.
  auto peft = read_peft(adapter);
  ASSERT_TRUE(peft) << peft.error().message;
  auto gguf = read_gguf_lora(adapter / "tiny.gguf");
  ASSERT_TRUE(gguf) << gguf.error().message;
  ASSERT_EQ(peft->pairs.size(), 14u);
  ASSERT_EQ(gguf->pairs.size(), 14u);
  EXPECT_FLOAT_EQ(peft->scaling.scale(), 20.0f);
  EXPECT_FLOAT_EQ(gguf->scaling.scale(), 20.0f);
  for (size_t i = 0; i < peft->pairs.size(); ++i) {
    EXPECT_EQ(peft->pairs[i].a.floats(), gguf->pairs[i].a.floats());
    EXPECT_EQ(peft->pairs[i].b.floats(), gguf->pairs[i].b.floats());
  }
  auto metadata = read_adapter_metadata(adapter / kAdapterMetadataFile);
  ASSERT_TRUE(metadata && *metadata);
  const AdapterMetadata& m = **metadata;
  EXPECT_EQ(m.id, "tiny");
  EXPECT_EQ(m.rank, 4);
  EXPECT_FALSE(m.base_fingerprint.empty());
  const nlohmann::json& t = m.extra["training"];
  EXPECT_EQ(t["config"]["iters"], 6);
  EXPECT_EQ(t["data"]["train"]["examples"], 12);
  EXPECT_EQ(t["data"]["train"]["sha256"].get<std::string>().size(), 64u);
  EXPECT_EQ(t["tokens_trained"], done["tokens"]);
  EXPECT_DOUBLE_EQ(t["train_loss"].get<double>(), done["train_loss"].get<double>());

  // graft run mounts it from the store.
  RunResult run = run_graft({"run", model, "-p", "Name 4:", "-n", "4", "--temp", "0", "--threads", "1",
                             "--adapter-dir", (dir / "store").string(), "--adapter", "tiny"},
                            xdg());
  EXPECT_EQ(run.status, 0) << run.stderr_text;
  EXPECT_NE(run.stderr_text.find("loaded adapter 'tiny'"), std::string::npos) << run.stderr_text;
}

// Everything in the store but hidden entries (what a scan lists), and the hidden ones.
std::pair<std::vector<std::string>, std::vector<std::string>> store_entries(const fs::path& store) {
  std::vector<std::string> shown, hidden;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(store, ec)) {
    const std::string name = e.path().filename().string();
    (name.starts_with(".") ? hidden : shown).push_back(name);
  }
  return {shown, hidden};
}

TEST(TrainCommand, AWriteFailureWhilePublishingFailsClearlyAndLeavesNoAdapter) {
  const fs::path dir = fresh_dir("train-publish-enospc");
  RunResult r = run_graft(train_args(tiny_model(), completion_data(dir), dir / "store", dir / "run", 3),
                          xdg(), {}, {"GRAFT_TRAIN_PUBLISH_FAULT=enospc"});
  EXPECT_EQ(r.status, 1) << r.stderr_text;
  ASSERT_FALSE(r.events.empty());
  const nlohmann::json last = r.events.back();
  EXPECT_EQ(last["type"], "error");
  EXPECT_EQ(last["code"], "io_error");
  EXPECT_NE(last["message"].get<std::string>().find("No space left on device"), std::string::npos) << last;
  EXPECT_TRUE(of_type(r, "done").empty());
  const auto [shown, hidden] = store_entries(dir / "store");
  EXPECT_TRUE(shown.empty()) << shown[0];
  EXPECT_TRUE(hidden.empty()) << "the half-written folder is removed: " << hidden[0];
}

TEST(TrainCommand, AKillWhilePublishingLeavesNoAdapterAndTheRetryClearsWhatItLeft) {
  const fs::path dir = fresh_dir("train-publish-kill");
  const std::vector<std::string> args =
      train_args(tiny_model(), completion_data(dir), dir / "store", dir / "run", 3);
  RunResult killed = run_graft(args, xdg(), {}, {"GRAFT_TRAIN_PUBLISH_FAULT=kill"});
  EXPECT_EQ(killed.status, 128 + SIGKILL) << killed.stderr_text;
  EXPECT_TRUE(of_type(killed, "done").empty());
  {
    const auto [shown, hidden] = store_entries(dir / "store");
    EXPECT_TRUE(shown.empty()) << "no adapter in the store: " << shown[0];
    ASSERT_EQ(hidden.size(), 1u) << "the killed publish left its hidden folder";
    EXPECT_TRUE(fs::exists(dir / "store" / hidden[0] / kPeftWeightsFile)) << "killed half way";
    EXPECT_FALSE(fs::exists(dir / "store" / hidden[0] / "tiny.gguf"));
  }
  // The store's scan does not list it.
  RunResult listed = run_graft({"adapters", "list", "--adapter-dir", (dir / "store").string()}, xdg());
  EXPECT_EQ(listed.status, 0) << listed.stderr_text;
  EXPECT_EQ(listed.stderr_text.find("tiny"), std::string::npos) << listed.stderr_text;
  for (const std::string& line : listed.bad_lines) EXPECT_EQ(line.find("tiny"), std::string::npos) << line;

  // The retry (as the job runner does it) lands the whole adapter and clears the remains.
  RunResult retried =
      run_graft({"train", "--resume", (dir / "run").string(), "--json", "--threads", "1"}, xdg());
  ASSERT_EQ(retried.status, 0) << retried.stderr_text;
  ASSERT_FALSE(retried.events.empty());
  EXPECT_EQ(retried.events.back()["type"], "done");
  const auto [shown, hidden] = store_entries(dir / "store");
  EXPECT_EQ(shown, std::vector<std::string>{"tiny"});
  EXPECT_TRUE(hidden.empty()) << hidden[0];
  EXPECT_TRUE(read_peft(dir / "store" / "tiny"));
  EXPECT_TRUE(read_gguf_lora(dir / "store" / "tiny" / "tiny.gguf"));
}

TEST(TrainCommand, ResumeAfterKillGivesTheSameRun) {
  const fs::path dir = fresh_dir("train-resume");
  const std::string model = tiny_model("qwen3", "q8_0");
  const fs::path data = completion_data(dir);
  RunResult whole = run_graft(train_args(model, data, dir / "store-a", dir / "run-a", 8), xdg());
  ASSERT_EQ(whole.status, 0) << whole.stderr_text;

  // Killed once step 4 is done: its checkpoint (step 3) is the latest.
  RunResult killed =
      run_graft(train_args(model, data, dir / "store-b", dir / "run-b", 8), xdg(),
                [](const nlohmann::json& e) { return e["type"] == "step" && e["step"] == 4 ? SIGKILL : 0; });
  EXPECT_EQ(killed.status, 128 + SIGKILL);
  EXPECT_FALSE(fs::exists(dir / "store-b" / "tiny")) << "no half adapter in the store";
  RunResult resumed =
      run_graft({"train", "--resume", (dir / "run-b").string(), "--json", "--threads", "1"}, xdg());
  ASSERT_EQ(resumed.status, 0) << resumed.stderr_text;
  // The checkpoint of step 3, unless the run got to step 6 before the kill landed.
  const int from = resumed.events.front()["resumed_from"];
  EXPECT_TRUE(from == 3 || from == 6) << from;
  const auto resumed_steps = of_type(resumed, "step");
  ASSERT_FALSE(resumed_steps.empty());
  EXPECT_EQ(resumed_steps.front()["step"], from + 1);

  const std::vector<double> all = step_losses(whole);
  const std::vector<double> tail = step_losses(resumed);
  ASSERT_EQ(tail.size(), size_t(8 - from));
  for (size_t i = 0; i < tail.size(); ++i)
    EXPECT_EQ(tail[i], all[size_t(from) + i]) << "step " << from + 1 + int(i);
  auto a = read_peft(dir / "store-a" / "tiny");
  auto b = read_peft(dir / "store-b" / "tiny");
  ASSERT_TRUE(a && b);
  double worst = 0.0;
  for (size_t i = 0; i < a->pairs.size(); ++i) {
    for (auto side : {&LoraPair::a, &LoraPair::b}) {
      const std::vector<float> x = (a->pairs[i].*side).floats(), y = (b->pairs[i].*side).floats();
      ASSERT_EQ(x.size(), y.size());
      for (size_t k = 0; k < x.size(); ++k) worst = std::max(worst, double(std::abs(x[k] - y[k])));
    }
  }
  EXPECT_LE(worst, 1e-6);
}

TEST(TrainCommand, SigtermStopsAfterTheStepWithACheckpoint) {
  const fs::path dir = fresh_dir("train-stop");
  const std::string model = tiny_model();
  RunResult stopped =
      run_graft(train_args(model, completion_data(dir), dir / "store", dir / "run", 12), xdg(),
                [](const nlohmann::json& e) { return e["type"] == "step" && e["step"] == 2 ? SIGTERM : 0; });
  EXPECT_EQ(stopped.status, 0) << stopped.stderr_text;
  ASSERT_FALSE(stopped.events.empty());
  const nlohmann::json last = stopped.events.back();
  ASSERT_EQ(last["type"], "stopped");
  const int step = last["step"];
  EXPECT_GE(step, 2);
  EXPECT_LT(step, 12);
  const auto checkpoints = of_type(stopped, "checkpoint");
  ASSERT_FALSE(checkpoints.empty());
  EXPECT_EQ(checkpoints.back()["step"], step);
  EXPECT_FALSE(fs::exists(dir / "store" / "tiny"));
  RunResult rest =
      run_graft({"train", "--resume", (dir / "run").string(), "--json", "--threads", "1"}, xdg());
  EXPECT_EQ(rest.status, 0) << rest.stderr_text;
  EXPECT_EQ(rest.events.front()["resumed_from"], step);
  EXPECT_EQ(rest.events.back()["type"], "done");
  // Resuming refuses changes to the run's settings.
  RunResult refused =
      run_graft({"train", "--resume", (dir / "run").string(), "--json", "--rank", "8"}, xdg());
  EXPECT_NE(refused.status, 0);
  ASSERT_FALSE(refused.events.empty());
  EXPECT_EQ(refused.events.back()["type"], "error");
}

}  // namespace
}  // namespace graft
