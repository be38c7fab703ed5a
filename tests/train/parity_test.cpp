// Parity with a reference trainer: graft's loss at each of 20 steps equals,
// within 1e-3 relative, the loss PyTorch (bench/train_reference.py) computed
// for the same model, initial A/B, batches and AdamW settings. The PyTorch
// curve is recorded by scripts/make-train-goldens.sh into
// tests/data/train/reference/losses.json; PyTorch never runs here.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "testing/test_models.h"
#include "train/process.h"

namespace graft {
namespace {

namespace fs = std::filesystem;

TEST(ReferenceParity, LossCurveMatchesPyTorch) {
  const fs::path golden_path = fs::path(GRAFT_SOURCE_DIR) / "tests/data/train/reference/losses.json";
  std::ifstream in(golden_path);
  ASSERT_TRUE(in) << golden_path;
  const nlohmann::json golden = nlohmann::json::parse(in);
  const nlohmann::json& m = golden["model"];
  TestModelSpec spec = testing::tiny_spec(m["arch"], m["vocab"], m["type"]);
  spec.n_embd = m["n_embd"];
  spec.n_ff = m["n_ff"];

  const fs::path dir = fs::path(testing::scratch_dir()) / "train-parity";
  fs::remove_all(dir);
  std::vector<std::string> args = {"train",
                                   testing::test_model_path(spec),
                                   "--data",
                                   (fs::path(GRAFT_SOURCE_DIR) / golden["data"].get<std::string>()).string(),
                                   "--json",
                                   "--store",
                                   (dir / "store").string(),
                                   "--job-dir",
                                   (dir / "run").string(),
                                   "--id",
                                   "parity",
                                   "--save-every",
                                   "0"};
  for (const auto& o : golden["options"]) args.push_back(o.get<std::string>());
  const testing::RunResult r = testing::run_graft(args, dir.string());
  ASSERT_EQ(r.status, 0) << r.stderr_text;
  const auto steps = testing::of_type(r, "step");
  const std::vector<double> reference = golden["losses"];
  ASSERT_EQ(steps.size(), reference.size());
  double worst = 0.0;
  for (size_t i = 0; i < steps.size(); ++i) {
    const double loss = steps[i]["train_loss"];
    const double rel = std::abs(loss - reference[i]) / std::abs(reference[i]);
    worst = std::max(worst, rel);
    EXPECT_LE(rel, 1e-3) << "step " << i + 1 << ": graft " << loss << ", PyTorch " << reference[i];
  }
  EXPECT_LT(reference.back(), reference.front()) << "the curve falls: the steps do something";
  std::printf("graft vs PyTorch: worst relative loss difference %.2e over %zu steps\n", worst, steps.size());
}

}  // namespace
}  // namespace graft
