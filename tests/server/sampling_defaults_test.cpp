// The model's recommended sampling (GGUF general.sampling.*) as the default
// of requests that leave a field out, shown in /v1/models, under the flags
// of `graft serve`.
#include "server/sampling_defaults.h"

#include <gtest/gtest.h>

#include "model/gguf_rewrite.h"
#include "server/http_client.h"
#include "server/server.h"
#include "testing/test_models.h"

namespace graft::server {
namespace {

using graft::testing::http_request;

// The tiny test model with sampling recommendations written in.
std::string recommending_model(const std::string& name, std::function<void(gguf_context*)> keys) {
  const std::string from =
      graft::testing::test_model_path(graft::testing::tiny_spec("qwen3", "qwen2", "f16"));
  const std::string to = graft::testing::scratch_dir() + "/" + name + ".gguf";
  graft::testing::GgufEdits edits;
  edits.set_keys = std::move(keys);
  EXPECT_TRUE(graft::testing::rewrite_gguf(from, to, edits).ok());
  return to;
}

TEST(SamplingDefaults, TheModelsRecommendationsReplaceGraftsAndFlagsReplaceThem) {
  const std::string path = recommending_model("recommends", [](gguf_context* ctx) {
    gguf_set_val_f32(ctx, "general.sampling.temp", 0.0f);
    gguf_set_val_i32(ctx, "general.sampling.top_k", 7);
    gguf_set_val_f32(ctx, "general.sampling.penalty_repeat", 1.25f);
    gguf_set_val_i32(ctx, "general.sampling.penalty_last_n", 32);
  });
  ServeOptions options;
  options.model_path = path;
  options.model_id = "tiny";
  options.n_ctx = 128;
  options.kv_budget_tokens = 512;
  options.threads = 1;
  options.sampling_flags = {{"top_k", 3}, {"top_p", 0.5}};
  auto model = ServedModel::load(options);
  ASSERT_TRUE(model.ok()) << model.error().message;
  const SamplingDefaults& d = (*model)->sampling_defaults();
  EXPECT_EQ(d.options.temperature, 0.0f);
  EXPECT_EQ(d.options.repetition_penalty, 1.25f);
  EXPECT_EQ(d.options.penalty_last_n, 32);
  EXPECT_EQ(d.options.top_k, 3);  // the flag wins over the model
  EXPECT_EQ(d.options.top_p, 0.5f);
  EXPECT_EQ(d.options.min_p, SamplingOptions{}.min_p);  // neither: graft's own
  EXPECT_EQ(d.source.at("temperature"), "model");
  EXPECT_EQ(d.source.at("top_k"), "flag");
  EXPECT_EQ(d.source.count("min_p"), 0u);

  ServerOptions server_options;
  server_options.http.port = 0;
  Server server(**model, server_options);
  ASSERT_TRUE(server.start().ok());
  json meta = json::parse(http_request(server.port(), "GET", "/v1/models").body)["data"][0]["meta"];
  EXPECT_EQ(meta["sampling"]["temperature"], 0.0);
  EXPECT_EQ(meta["sampling"]["top_k"], 3);
  EXPECT_EQ(meta["sampling"]["source"]["repeat_penalty"], "model");
  // A request that sets no temperature samples greedily, as the model asks: every seed gives one text.
  auto text = [&](json extra) {
    json request = {{"prompt", "Pick some words:"}, {"max_tokens", 6}};
    for (auto& [key, value] : extra.items()) request[key] = value;
    auto reply = http_request(server.port(), "POST", "/v1/completions", request.dump());
    EXPECT_EQ(reply.status, 200) << reply.body;
    return json::parse(reply.body)["choices"][0]["text"].get<std::string>();
  };
  const std::string greedy = text({{"seed", 1}});
  EXPECT_EQ(text({{"seed", 2}}), greedy);
  EXPECT_EQ(text({{"temperature", 0}}), greedy);
  // A request's own field still wins.
  EXPECT_NE(text({{"temperature", 1.0}, {"top_k", 1000}, {"top_p", 1}, {"min_p", 0}, {"seed", 1}}),
            text({{"temperature", 1.0}, {"top_k", 1000}, {"top_p", 1}, {"min_p", 0}, {"seed", 2}}));
  server.stop();
  model->reset();
}

TEST(SamplingDefaults, SkipsRecommendationsOutOfRangeOrMistyped) {
  const std::string path = recommending_model("recommends-badly", [](gguf_context* ctx) {
    gguf_set_val_f32(ctx, "general.sampling.temp", 7.0f);
    gguf_set_val_str(ctx, "general.sampling.top_p", "high");
    gguf_set_val_f32(ctx, "general.sampling.min_p", 0.1f);
  });
  auto gguf = GgufFile::open(path);
  ASSERT_TRUE(gguf.ok());
  SamplingDefaults d;
  apply_model_sampling(*gguf, d);
  EXPECT_EQ(d.options.temperature, SamplingOptions{}.temperature);
  EXPECT_EQ(d.options.top_p, SamplingOptions{}.top_p);
  EXPECT_FLOAT_EQ(d.options.min_p, 0.1f);
  EXPECT_EQ(d.source.size(), 1u);
}

TEST(SamplingDefaults, FlagsOutOfRangeAreErrors) {
  SamplingDefaults d;
  Status status = apply_sampling_flags({{"temperature", 5}}, d);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.error().message.find("temperature"), std::string::npos);
  EXPECT_FALSE(apply_sampling_flags({{"top_k", 2.5}}, d).ok());
  EXPECT_TRUE(apply_sampling_flags({{"repeat_last_n", -1}}, d).ok());
  EXPECT_EQ(d.options.penalty_last_n, -1);
}

}  // namespace
}  // namespace graft::server
