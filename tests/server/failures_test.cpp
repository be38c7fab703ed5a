// Fault injection through the whole server: a row that fails ends only its
// own request, a step that fails ends only that step's requests, and the
// server keeps serving. The "model" is the engine tests' fake executor; the
// tokenizer is Qwen2's (fake token ids 1..26 are its first tokens).
#include <gtest/gtest.h>

#include <future>

#include "engine/fake_executor.h"
#include "io/gguf_file.h"
#include "server/http_client.h"
#include "server/server.h"
#include "testing/test_models.h"

namespace graft::server {
namespace {

using graft::testing::FakeExecutor;
using graft::testing::http_request;
using graft::testing::HttpReply;
using graft::testing::sse_payloads;

class Failures : public ::testing::Test {
 protected:
  void SetUp() override {
    auto vocab = GgufFile::open(graft::testing::bundle_vocab("qwen2"));
    ASSERT_TRUE(vocab.ok());
    auto tok = Tokenizer::from_gguf(*vocab);
    ASSERT_TRUE(tok.ok());
    auto tmpl = ChatTemplate::parse("{% for m in messages %}{{ m['content'] }}{% endfor %}");
    ASSERT_TRUE(tmpl.ok());
    FakeExecutor::Options options;
    options.step_delay = std::chrono::milliseconds(2);
    auto executor = std::make_unique<FakeExecutor>(options);
    executor_ = executor.get();
    model_ = ServedModel::assemble("fake", *tok, std::move(*tmpl), std::move(executor), EngineConfig{});
    ServerOptions server_options;
    server_options.http.port = 0;
    server_ = std::make_unique<Server>(*model_, server_options);
    ASSERT_TRUE(server_->start().ok());
  }
  void TearDown() override {
    if (server_) server_->stop();
    model_.reset();
    server_.reset();
  }
  HttpReply complete(std::vector<TokenId> prompt, int max_tokens, bool stream = false) {
    json body = {{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}, {"stream", stream}};
    return http_request(server_->port(), "POST", "/v1/completions", body.dump());
  }
  void expect_serving() {
    EXPECT_EQ(http_request(server_->port(), "GET", "/health").status, 200);
    HttpReply reply = complete({7, 8, 9, 10}, 3);
    ASSERT_EQ(reply.status, 200) << reply.body;
    EXPECT_EQ(json::parse(reply.body)["usage"]["completion_tokens"], 3);
  }

  FakeExecutor* executor_ = nullptr;
  std::unique_ptr<ServedModel> model_;
  std::unique_ptr<Server> server_;
};

TEST_F(Failures, AFailingRowEndsOnlyItsRequest) {
  // The request whose prompt starts with token 26 fails at its third token.
  executor_->fail_rows_where([](const std::vector<TokenId>& seq) { return seq[0] == 26 && seq.size() >= 7; });
  auto failing = std::async(std::launch::async, [&] { return complete({26, 1, 2, 3, 4}, 20); });
  auto other = std::async(std::launch::async, [&] { return complete({5, 6, 7, 8, 9}, 20); });
  HttpReply failed = failing.get();
  EXPECT_EQ(failed.status, 500) << failed.body;
  EXPECT_NE(json::parse(failed.body)["error"]["message"].get<std::string>().find("injected row failure"),
            std::string::npos)
      << failed.body;
  HttpReply served = other.get();
  ASSERT_EQ(served.status, 200) << served.body;
  EXPECT_EQ(json::parse(served.body)["usage"]["completion_tokens"], 20);
  // Streamed, the failure is an error event and the stream still ends.
  HttpReply streamed = complete({26, 1, 2, 3, 4}, 20, /*stream=*/true);
  EXPECT_EQ(streamed.status, 200);
  auto events = sse_payloads(streamed.body);
  ASSERT_GE(events.size(), 2u) << streamed.body;
  EXPECT_EQ(events.back(), "[DONE]");
  EXPECT_TRUE(json::parse(events[events.size() - 2]).contains("error")) << streamed.body;
  expect_serving();
  EXPECT_EQ(model_->engine().stats().requests_failed, 2u);
}

TEST_F(Failures, AFailingStepEndsOnlyItsRequestsAndTheServerGoesOn) {
  executor_->fail_next_steps(1);
  HttpReply failed = complete({1, 2, 3, 4}, 5);
  EXPECT_EQ(failed.status, 500) << failed.body;
  EXPECT_EQ(json::parse(failed.body)["error"]["type"], "server_error");
  expect_serving();
  executor_->throw_in_next_steps(1);
  failed = complete({1, 2, 3, 4}, 5);
  EXPECT_EQ(failed.status, 500) << failed.body;
  expect_serving();
}

}  // namespace
}  // namespace graft::server
