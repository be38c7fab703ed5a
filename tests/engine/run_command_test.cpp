// `graft run`, `graft bench` and `graft tokenize` end to end: output, and bad input as a clear error.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

#include <gtest/gtest.h>

#include "testing/test_models.h"

namespace graft {
namespace {

struct Output {
  int status;
  std::string text;  // stdout and stderr
};

Output run_graft(const std::string& args) {
  const std::string command = std::string(GRAFT_BINARY) + " " + args + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  Output out{-1, {}};
  if (!pipe) return out;
  std::array<char, 4096> buffer{};
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) out.text.append(buffer.data(), n);
  const int status = pclose(pipe);
  out.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

std::string model() {
  return testing::test_model_path(testing::tiny_spec("llama", "llama-bpe", "q8_0"));
}

TEST(RunCommand, StreamsAContinuationAndASummary) {
  Output out = run_graft("run " + model() + " -p 'The quick brown fox' -n 6 --temp 0 -t 2 -c 256");
  EXPECT_EQ(out.status, 0) << out.text;
  EXPECT_NE(out.text.find("graft: prompt 5 tokens"), std::string::npos) << out.text;
  EXPECT_NE(out.text.find("generated 6 tokens"), std::string::npos) << out.text;
  EXPECT_NE(out.text.find("load "), std::string::npos) << out.text;
}

TEST(RunCommand, EmptyPromptIsAClearError) {
  Output out = run_graft("run " + model() + " -p ''");
  EXPECT_EQ(out.status, 1) << out.text;
  EXPECT_NE(out.text.find("the prompt is empty"), std::string::npos) << out.text;
}

TEST(RunCommand, MissingModelIsAClearError) {
  Output out = run_graft("run " + testing::scratch_dir() + "/absent.gguf -p hi");
  EXPECT_EQ(out.status, 1) << out.text;
  EXPECT_NE(out.text.find("absent.gguf"), std::string::npos) << out.text;
}

TEST(RunCommand, PromptLongerThanTheContextIsAClearError) {
  Output out = run_graft("run " + model() + " -p 'one two three four five six seven eight' -n 8 -c 8");
  EXPECT_EQ(out.status, 1) << out.text;
  EXPECT_NE(out.text.find("exceeds the context"), std::string::npos) << out.text;
}

TEST(BenchCommand, ARowListThatIsNotNumbersIsAClearError) {
  for (const char* rows : {"abc", "1,x", "0", "1,99999999999"}) {
    Output out = run_graft("bench " + model() + " --rows " + rows);
    EXPECT_EQ(out.status, 1) << rows << ": " << out.text;
    EXPECT_NE(out.text.find("--rows"), std::string::npos) << rows << ": " << out.text;
    EXPECT_EQ(out.text.find("terminate"), std::string::npos) << rows << ": " << out.text;
  }
}

TEST(BenchCommand, RunsWithAQuantizedKvCacheAndNamesABadOne) {
  Output ok = run_graft("bench " + model() +
                        " -p 8 -n 4 -r 1 --rows 2 --batched-prompt 4 --batched-gen 4 "
                        "--kv-type q8_0");
  EXPECT_EQ(ok.status, 0) << ok.text;
  EXPECT_NE(ok.text.find("KV: q8_0"), std::string::npos) << ok.text;
  EXPECT_NE(ok.text.find("batched2"), std::string::npos) << ok.text;
  Output bad = run_graft("bench " + model() + " -p 8 -n 4 -r 1 --rows '' --kv-type q3_k");
  EXPECT_EQ(bad.status, 1) << bad.text;
  EXPECT_NE(bad.text.find("'q3_k' is not supported"), std::string::npos) << bad.text;
}

TEST(TokenizeCommand, ReadsSpecialTokenTextLikeTheServerUnlessToldNotTo) {
  // Qwen2's vocabulary: <|im_start|> is one control token (151644).
  const std::string vocab = testing::bundle_vocab("qwen2");
  Output parsed = run_graft("tokenize " + vocab + " '<|im_start|>user'");
  EXPECT_EQ(parsed.status, 0) << parsed.text;
  EXPECT_EQ(parsed.text.rfind("151644 ", 0), 0u) << parsed.text;
  Output plain = run_graft("tokenize " + vocab + " --no-parse-special '<|im_start|>user'");
  EXPECT_EQ(plain.status, 0) << plain.text;
  EXPECT_EQ(plain.text.find("151644"), std::string::npos) << plain.text;
  EXPECT_GT(plain.text.size(), parsed.text.size());
}

}  // namespace
}  // namespace graft
