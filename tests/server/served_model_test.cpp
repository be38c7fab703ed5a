// Loading a model for `graft serve`: options out of range are errors that
// say so, never quietly changed.
#include "server/served_model.h"

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

TEST(ServedModel, RefusesAnUnknownKvType) {
  ServeOptions options = tiny_options();
  options.kv_type = "q4_0";
  auto model = ServedModel::load(options);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.error().message.find("q4_0"), std::string::npos) << model.error().message;
}

}  // namespace
}  // namespace graft::server
