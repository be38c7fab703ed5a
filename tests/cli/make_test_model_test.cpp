// `graft make-test-model`: a family's own options are refused with another
// --arch (they would be ignored), naming the option.
#include <gtest/gtest.h>

#include "cli_server.h"
#include "util/files.h"

namespace graft {
namespace {

using testing::contains;
using testing::run_graft;

TEST(MakeTestModel, RefusesAnotherFamilysOptionNamingIt) {
  const fs::path dir = fs::temp_directory_path() / "graft-make-test-model-flags";
  fs::remove_all(dir);
  fs::create_directories(dir);
  struct Case {
    std::string args, flag, families;
  };
  const Case cases[] = {
      {"--arch llama --head-dim-local 8", "--head-dim-local", "gemma4"},
      {"--arch qwen3 --sliding-window 16", "--sliding-window", "gemma3 and gemma4"},
      {"--arch gemma3 --per-layer-embd 8", "--per-layer-embd", "gemma4"},
      {"--arch minicpm --ssm-conv 4", "--ssm-conv", "qwen35"},
      {"--arch gemma4 --scale-emb 12", "--scale-emb", "minicpm"},
  };
  for (const Case& c : cases) {
    const fs::path file = dir / "m.gguf";
    const auto out = run_graft("", "make-test-model " + file.string() + " --embd 64 --layers 2 " + c.args);
    EXPECT_NE(out.status, 0) << c.args;
    EXPECT_TRUE(contains(out.text, c.flag + " is an option of " + c.families + " models only")) << out.text;
    EXPECT_FALSE(fs::exists(file)) << c.args;
  }
  // The family's own options pass.
  const auto ok = run_graft("", "make-test-model " + (dir / "g.gguf").string() +
                                    " --arch gemma3 --embd 64 --layers 2 --heads 2 --kv-heads 1 --ffn 128 "
                                    "--sliding-window 16 --sliding-window-pattern 2");
  EXPECT_EQ(ok.status, 0) << ok.text;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace graft
