// The adapter commands end to end through the graft binary:
// make-test-adapter, adapters list | show | stamp, and run --adapter.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

#include <gtest/gtest.h>

#include "fixtures.h"

namespace graft {
namespace {

struct Output {
  int status;
  std::string text;  // stdout and stderr
};

// Runs graft with the user's store inside the scratch folder.
Output graft(const std::string& args) {
  const std::string xdg = testing::scratch_dir() + "/xdg";
  const std::string command = "XDG_DATA_HOME=" + xdg + " " + std::string(GRAFT_BINARY) + " " + args + " 2>&1";
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

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The lines of `graft adapters list` that describe adapters, in order.
std::vector<std::string> listed_ids(const std::string& text) {
  std::vector<std::string> ids;
  size_t start = 0;
  bool table = false;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    if (table && !line.empty()) ids.push_back(line.substr(0, line.find(' ')));
    if (line.rfind("ID ", 0) == 0) table = true;
    start = end + 1;
  }
  return ids;
}

TEST(AdapterCommands, MakeListShowStamp) {
  const std::string base = testing::tiny_base();
  const fs::path store = testing::fresh_dir("cli-store");
  Output made = graft("make-test-adapter --base " + base + " --peft " + (store / "poet").string() +
                      " --rank 4 --alpha 8 --targets q,v --layers 1");
  ASSERT_EQ(made.status, 0) << made.text;
  made = graft("make-test-adapter --base " + base + " --gguf " + (store / "bare.gguf").string() +
               " --dtype f16");
  ASSERT_EQ(made.status, 0) << made.text;

  Output list = graft("adapters list --adapter-dir " + store.string() + " --model " + base);
  ASSERT_EQ(list.status, 0) << list.text;
  EXPECT_EQ(listed_ids(list.text), (std::vector<std::string>{"bare", "poet"})) << list.text;
  EXPECT_TRUE(contains(list.text, "q_proj,v_proj")) << list.text;
  EXPECT_TRUE(contains(list.text, "(unstamped)")) << list.text;

  Output show = graft("adapters show poet --adapter-dir " + store.string());
  ASSERT_EQ(show.status, 0) << show.text;
  EXPECT_TRUE(contains(show.text, "rank         4")) << show.text;
  EXPECT_TRUE(contains(show.text, "layers       1")) << show.text;
  EXPECT_TRUE(contains(show.text, "graft adapters stamp poet")) << show.text;

  Output stamp =
      graft("adapters stamp poet --base " + base + " --task poetry --adapter-dir " + store.string());
  ASSERT_EQ(stamp.status, 0) << stamp.text;
  EXPECT_TRUE(fs::exists(store / "poet" / "graft_adapter.json"));
  show = graft("adapters show poet --adapter-dir " + store.string() + " --model " + base);
  EXPECT_TRUE(contains(show.text, "task         poetry")) << show.text;
  EXPECT_TRUE(contains(show.text, "compatible   yes")) << show.text;

  // Against a model with a wider MLP: an unstamped q/v adapter still fits and
  // is listed first; the stamped one (another fingerprint) and the one with
  // MLP matrices (other shapes) do not, and say why.
  made =
      graft("make-test-adapter --base " + base + " --peft " + (store / "zz-qv").string() + " --targets q,v");
  ASSERT_EQ(made.status, 0) << made.text;
  TestModelSpec wider = testing::tiny_base_spec();
  wider.n_ff = 384;
  list =
      graft("adapters list --adapter-dir " + store.string() + " --model " + testing::test_model_path(wider));
  ASSERT_EQ(list.status, 0) << list.text;
  EXPECT_EQ(listed_ids(list.text), (std::vector<std::string>{"zz-qv", "bare", "poet"})) << list.text;
  EXPECT_TRUE(contains(list.text, "no: made for graft-test-model (fingerprint")) << list.text;
  EXPECT_TRUE(contains(list.text, "ffn_gate.weight is 128 -> 256 in the adapter but 128 -> 384"))
      << list.text;
}

TEST(AdapterCommands, BadInputIsAClearError) {
  const std::string base = testing::tiny_base();
  const fs::path store = testing::fresh_dir("cli-bad");
  Output out = graft("adapters show ../etc --adapter-dir " + store.string());
  EXPECT_EQ(out.status, 1);
  EXPECT_TRUE(contains(out.text, "invalid adapter id '../etc'")) << out.text;
  out = graft("adapters show nope --adapter-dir " + store.string());
  EXPECT_EQ(out.status, 1);
  EXPECT_TRUE(contains(out.text, "no adapter 'nope'")) << out.text;
  out = graft("adapters stamp nope --base " + base + " --adapter-dir " + store.string());
  EXPECT_EQ(out.status, 1);
  out =
      graft("make-test-adapter --base " + base + " --peft " + (store / "x").string() + " --targets lm_head");
  EXPECT_EQ(out.status, 1);
  EXPECT_TRUE(contains(out.text, "unknown target 'lm_head'")) << out.text;
  EXPECT_FALSE(fs::exists(store / "x"));
  out = graft("make-test-adapter --base " + base);
  EXPECT_EQ(out.status, 1);
  EXPECT_TRUE(contains(out.text, "--peft DIR, --mlx DIR, --gguf FILE")) << out.text;
}

TEST(AdapterRun, AdapterChangesTheContinuationAndUnknownIdsAreErrors) {
  const std::string base = testing::tiny_base();
  const fs::path store = testing::fresh_dir("cli-run");
  ASSERT_EQ(graft("make-test-adapter --base " + base + " --peft " + (store / "a").string() + " --strength 1")
                .status,
            0);
  const std::string run =
      "run " + base + " -p 'The quick brown fox' -n 8 --temp 0 -t 2 -c 256 --adapter-dir " + store.string();
  Output plain = graft(run);
  Output adapted = graft(run + " --adapter a");
  Output none = graft(run + " --adapter none");
  ASSERT_EQ(plain.status, 0) << plain.text;
  ASSERT_EQ(adapted.status, 0) << adapted.text;
  auto text = [](const std::string& out) { return out.substr(0, out.find("graft: prompt")); };
  EXPECT_NE(text(adapted.text), text(plain.text));
  EXPECT_EQ(text(none.text), text(plain.text));

  Output unknown = graft(run + " --adapter a+nope");
  EXPECT_EQ(unknown.status, 1);
  EXPECT_TRUE(contains(unknown.text, "no adapter 'nope'")) << unknown.text;
  Output bad_spec = graft(run + " --adapter 'a@x'");
  EXPECT_EQ(bad_spec.status, 1);
  EXPECT_TRUE(contains(bad_spec.text, "'x' is not a scale")) << bad_spec.text;
}

}  // namespace
}  // namespace graft
