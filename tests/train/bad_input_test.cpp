// Bad input to `graft train --json`: each case fails before any compute with
// an error event (naming the file and line where there is one), a non-zero
// exit status, and nothing in the store or the run folder.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "testing/test_models.h"
#include "train/process.h"

namespace graft {
namespace {

namespace fs = std::filesystem;
using testing::run_graft;
using testing::RunResult;

struct BadCase {
  std::string name;
  std::vector<std::string> args;  // after `train`
  std::string code;               // the error event's code ("": any)
  std::string message_part;       // part of its message
  int line = 0;                   // the event's line (0: null)
};

class BadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(testing::scratch_dir()) / "train-bad";
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    TestModelSpec spec = testing::tiny_spec("llama", "llama-spm", "f32");
    spec.n_embd = 64;
    spec.n_ff = 128;
    model_ = testing::test_model_path(spec);
    good_ = write("good.jsonl", "{\"prompt\": \"a\", \"completion\": \" b\"}\n{\"text\": \"c d e\"}\n");
  }

  std::string write(const std::string& name, const std::string& content) {
    const fs::path path = dir_ / name;
    std::ofstream(path) << content;
    return path.string();
  }

  // Runs `graft train MODEL --data DATA <extra>` and checks the refusal.
  void expect_refused(const BadCase& c) {
    SCOPED_TRACE(c.name);
    std::vector<std::string> args = {"train",
                                     "--store",
                                     (dir_ / "store").string(),
                                     "--job-dir",
                                     (dir_ / "run").string(),
                                     "--json",
                                     "--threads",
                                     "1",
                                     "--id",
                                     "x"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    const RunResult r = run_graft(args, dir_.string());
    EXPECT_NE(r.status, 0);
    ASSERT_EQ(r.events.size(), 1u) << "one error event, nothing else: " << r.stderr_text;
    const nlohmann::json& e = r.events.front();
    EXPECT_EQ(e["type"], "error");
    if (!c.code.empty()) {
      EXPECT_EQ(e["code"], c.code) << e.dump();
    }
    EXPECT_NE(e["message"].get<std::string>().find(c.message_part), std::string::npos) << e.dump();
    if (c.line > 0) {
      EXPECT_EQ(e["line"], c.line) << e.dump();
      EXPECT_FALSE(e["file"].is_null());
    }
    EXPECT_TRUE(r.bad_lines.empty());
    EXPECT_FALSE(r.stderr_text.empty()) << "a message for people on stderr too";
    EXPECT_FALSE(fs::exists(dir_ / "store" / "x"));
    EXPECT_FALSE(fs::exists(dir_ / "run" / "checkpoints"));
  }

  fs::path dir_;
  std::string model_, good_;
};

TEST_F(BadInput, DataIsRefusedByFileAndLine) {
  const std::string malformed = write("malformed.jsonl", "{\"text\": \"ok\"}\n{\"text\": \"ok\"\n");
  const std::string unknown =
      write("unknown.jsonl", "{\"text\": \"ok\"}\n{\"text\": \"ok\"}\n{\"question\": \"q\"}\n");
  const std::string missing = write("missing.jsonl", "{\"prompt\": \"only a prompt\"}\n");
  const std::string no_assistant =
      write("chat.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n");
  const std::string empty = write("empty.jsonl", "\n\n");
  for (const BadCase& c : std::vector<BadCase>{
           {"malformed JSON", {model_, "--data", malformed}, "invalid_data", "not valid JSON", 2},
           {"unknown shape", {model_, "--data", unknown}, "invalid_data", "unknown example shape", 3},
           {"missing key", {model_, "--data", missing}, "invalid_data", "'prompt' and 'completion'", 1},
           {"no assistant turn", {model_, "--data", no_assistant}, "invalid_data", "no assistant message", 1},
           {"empty data", {model_, "--data", empty}, "invalid_data", "no examples"},
           {"missing data", {model_, "--data", (dir_ / "nope.jsonl").string()}, "", "nope.jsonl"},
           {"bad valid",
            {model_, "--data", good_, "--valid", malformed},
            "invalid_data",
            "not valid JSON",
            2},
       }) {
    expect_refused(c);
  }
}

TEST_F(BadInput, OptionsAndModelsAreRefused) {
  const std::string truncated = (dir_ / "truncated.gguf").string();
  {
    std::ifstream in(model_, std::ios::binary);
    std::string head(200000, '\0');
    in.read(head.data(), std::streamsize(head.size()));
    std::ofstream(truncated, std::ios::binary) << head;
  }
  TestModelSpec hybrid = testing::tiny_spec("qwen35", "llama-bpe", "f32");
  const std::string qwen35 = testing::test_model_path(hybrid);
  for (const BadCase& c : std::vector<BadCase>{
           {"rank 0",
            {model_, "--data", good_, "--rank", "0"},
            "invalid_argument",
            "--rank 0 is out of range"},
           {"rank > width", {model_, "--data", good_, "--rank", "65"}, "invalid_argument", "out of range"},
           {"unknown target", {model_, "--data", good_, "--targets", "q,nose"}, "invalid_argument", "nose"},
           {"untrained target",
            {model_, "--data", good_, "--targets", "qkv"},
            "invalid_argument",
            "does not train"},
           {"bad schedule",
            {model_, "--data", good_, "--lr-schedule", "linear"},
            "invalid_argument",
            "linear"},
           {"bad dropout", {model_, "--data", good_, "--dropout", "1"}, "invalid_argument", "--dropout"},
           {"not a number", {model_, "--data", good_, "--rank", "eight"}, "invalid_argument", "eight"},
           {"unknown option",
            {model_, "--data", good_, "--lora-rank", "8"},
            "invalid_argument",
            "--lora-rank"},
           {"no data", {model_}, "invalid_argument", "--data"},
           {"truncated model", {truncated, "--data", good_}, "invalid_file", "truncated.gguf"},
           {"missing model", {(dir_ / "none.gguf").string(), "--data", good_}, "", "none.gguf"},
           {"recurrent model", {qwen35, "--data", good_}, "unsupported_model", "linear-attention"},
       }) {
    expect_refused(c);
  }
}

TEST_F(BadInput, AnIdAlreadyInTheStoreIsRefused) {
  fs::create_directories(dir_ / "store" / "taken");
  std::ofstream(dir_ / "store" / "taken" / "adapter_config.json") << "{}";
  const RunResult r =
      run_graft({"train", model_, "--data", good_, "--json", "--store", (dir_ / "store").string(),
                 "--job-dir", (dir_ / "run").string(), "--id", "taken", "--iters", "1"},
                dir_.string());
  EXPECT_NE(r.status, 0);
  ASSERT_EQ(r.events.size(), 1u) << r.stderr_text;
  EXPECT_EQ(r.events[0]["code"], "already_exists");
  EXPECT_TRUE(fs::exists(dir_ / "store" / "taken" / "adapter_config.json")) << "the existing adapter stays";
}

}  // namespace
}  // namespace graft
