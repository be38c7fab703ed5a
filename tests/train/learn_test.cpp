// It learns: a rank-8 adapter trained by `graft train` on a random-weight
// Q4_0 model, on the two synthetic datasets of tests/data/train/learn
// (written by tests/train/make_learn_data.py):
//   memorize: 32 prompt -> answer pairs; greedy `graft run --adapter` then
//             gives every answer exactly;
//   format:   every answer is the reply " OK: noted."; held-out prompts
//             (new word combinations) get it exactly at least 90% of the time.
// In both, the validation loss falls by at least 90%.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "testing/test_models.h"
#include "train/process.h"

namespace graft {
namespace {

namespace fs = std::filesystem;
using testing::of_type;
using testing::run_graft;

struct Example {
  std::string prompt, completion;
};

std::vector<Example> read_examples(const fs::path& path) {
  std::vector<Example> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    out.push_back({j["prompt"], j["completion"]});
  }
  return out;
}

fs::path data_dir(const std::string& name) {
  return fs::path(GRAFT_SOURCE_DIR) / "tests/data/train/learn" / name;
}

// The tiny Q4_0 llama with SentencePiece's 32k vocabulary, except that every
// output row gets the same scale: the usual test models shrink the logits of
// non-word tokens (so random text reads as words), which leaves the frozen
// head unable to ever rank the end-of-sequence token first, and the answers
// here must end with it.
std::string learn_model() {
  static const std::string path = [] {
    TestModelSpec spec = testing::tiny_spec("llama", "llama-spm", "q4_0");
    spec.unreadable_scale = 1.0f;
    const std::string p = testing::test_models_dir() + "/learn-llama-spm-q4_0.gguf";
    if (!fs::exists(p)) {
      Status status = write_test_model(spec, p);
      EXPECT_TRUE(status) << status.error().message;
    }
    return p;
  }();
  return path;
}

// Trains on the named dataset and returns the store; checks the val loss fall.
fs::path train(const std::string& name, const std::vector<std::string>& extra) {
  const fs::path dir = fs::path(testing::scratch_dir()) / ("learn-" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::vector<std::string> args = {"train",     learn_model(),
                                   "--data",    data_dir(name).string(),
                                   "--store",   (dir / "store").string(),
                                   "--job-dir", (dir / "run").string(),
                                   "--id",      name,
                                   "--rank",    "8",
                                   "--json",    "--save-every",
                                   "0",         "--val-batches",
                                   "-1",        "--threads",
                                   "1"};
  args.insert(args.end(), extra.begin(), extra.end());
  testing::RunResult r = run_graft(args, dir.string());
  EXPECT_EQ(r.status, 0) << r.stderr_text;
  const auto vals = of_type(r, "val");
  EXPECT_GE(vals.size(), 2u);
  if (vals.size() >= 2) {
    const double first = vals.front()["val_loss"], last = vals.back()["val_loss"];
    EXPECT_EQ(vals.front()["step"], 0);
    EXPECT_LE(last, 0.1 * first) << name << ": val loss " << first << " -> " << last;
    std::printf("%s: val loss %.3f -> %.4f\n", name.c_str(), first, last);
  }
  return dir / "store";
}

// Greedy continuation of the prompt with the adapter.
std::string generate(const fs::path& store, const std::string& id, const std::string& prompt, int n) {
  testing::RunResult r = run_graft({"run", learn_model(), "-p", prompt, "-n", std::to_string(n), "--temp",
                                    "0", "--threads", "1", "--adapter-dir", store.string(), "--adapter", id},
                                   store.parent_path().string());
  EXPECT_EQ(r.status, 0) << r.stderr_text;
  std::string text;
  for (const std::string& line : r.bad_lines)
    text += (text.empty() ? "" : "\n") + line;  // stdout is text here
  return text;
}

TEST(ItLearns, MemorizesThirtyTwoAnswers) {
  const fs::path store = train(
      "memorize", {"--iters", "120", "--batch-size", "8", "--learning-rate", "2e-3", "--val-every", "120"});
  int right = 0;
  const std::vector<Example> examples = read_examples(data_dir("memorize") / "train.jsonl");
  for (const Example& e : examples) {
    const std::string out = generate(store, "memorize", e.prompt, 8);
    right += out == e.completion;
    EXPECT_EQ(out, e.completion) << e.prompt;
  }
  std::printf("memorize: %d of %zu answers exact\n", right, examples.size());
}

TEST(ItLearns, KeepsTheReplyFormatOnHeldOutPrompts) {
  const fs::path store =
      train("format", {"--iters", "60", "--batch-size", "8", "--learning-rate", "2e-3", "--val-every", "60"});
  int right = 0;
  const std::vector<Example> examples = read_examples(data_dir("format") / "valid.jsonl");
  for (const Example& e : examples) {
    const std::string out = generate(store, "format", e.prompt, 8);
    right += out == e.completion;
    if (out != e.completion)
      std::printf("  %s -> '%s' (want '%s')\n", e.prompt.c_str(), out.c_str(), e.completion.c_str());
  }
  std::printf("format: %d of %zu held-out prompts right\n", right, examples.size());
  EXPECT_GE(right * 10, int(examples.size()) * 9);
}

}  // namespace
}  // namespace graft
