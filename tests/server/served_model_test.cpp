// Loading a model for `graft serve`: options out of range are errors that
// say so, never quietly changed.
#include "server/served_model.h"

#include <map>

#include <gtest/gtest.h>

#include "testing/test_models.h"

namespace graft::server {
namespace {

ServeOptions tiny_options() {
  ServeOptions options;
  options.model_path = graft::testing::test_model_path(graft::testing::tiny_spec("qwen3", "qwen2", "f16"));
  options.n_ctx = 128;
  options.kv_budget_tokens = 512;
  options.threads = 1;
  return options;
}

TEST(ServedModel, RefusesMoreParallelRequestsThanItCanRun) {
  ServeOptions options = tiny_options();
  options.parallel = ServeOptions::kMaxParallel + 1;
  auto model = ServedModel::load(options);
  ASSERT_FALSE(model.ok()) << "--parallel " << options.parallel << " was accepted";
  EXPECT_NE(model.error().message.find("--parallel"), std::string::npos) << model.error().message;
  options.parallel = 0;
  EXPECT_FALSE(ServedModel::load(options).ok());
  options.parallel = ServeOptions::kMaxParallel;
  options.kv_budget_tokens = 128 * 64;
  auto most = ServedModel::load(options);
  ASSERT_TRUE(most.ok()) << most.error().message;
  EXPECT_EQ((*most)->engine().config().max_running, ServeOptions::kMaxParallel);
}

// The same token budget in a quantized cache takes 34/64 (q8_0) and 18/64
// (q4_0) of the F16 bytes, and the stats say which type it is.
TEST(ServedModel, QuantizedKvTypesShrinkTheBudgetsBytes) {
  std::map<std::string, int64_t> bytes;
  for (const char* type : {"f16", "q8_0", "q4_0"}) {
    ServeOptions options = tiny_options();
    options.kv_type = type;
    auto model = ServedModel::load(options);
    ASSERT_TRUE(model.ok()) << type << ": " << model.error().message;
    EXPECT_EQ((*model)->kv_type(), type);
    const EngineStats stats = (*model)->engine().stats();
    EXPECT_EQ(stats.kv_budget_tokens, options.kv_budget_tokens) << type;
    bytes[type] = stats.kv_budget_bytes;
  }
  ASSERT_GT(bytes["f16"], 0);  // the ratios below hold vacuously for empty budgets
  EXPECT_EQ(bytes["q8_0"] * 64, bytes["f16"] * 34);
  EXPECT_EQ(bytes["q4_0"] * 64, bytes["f16"] * 18);
}

TEST(ServedModel, RefusesAnUnknownKvType) {
  ServeOptions options = tiny_options();
  options.kv_type = "q5_1";
  auto model = ServedModel::load(options);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.error().message.find("q5_1"), std::string::npos) << model.error().message;
  EXPECT_NE(model.error().message.find("f16, q8_0 or q4_0"), std::string::npos) << model.error().message;
}

}  // namespace
}  // namespace graft::server
