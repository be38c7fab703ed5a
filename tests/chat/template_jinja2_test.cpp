// Every template in the bundle against Python's jinja2 (set up as Hugging Face
// sets it up), on a richer conversation than the hand-written render tests:
// non-ASCII text, reasoning_content, two parallel tool calls with nested
// arguments, two tool results; with and without a generation prompt. The
// expected files in tests/data/chat/jinja2/ are jinja2's output, written by
// tests/chat/reference_render.py --golden.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "chat/template.h"
#include "conversations.h"
#include "testing/test_models.h"
#include "util/files.h"

namespace graft {
namespace {

namespace fs = std::filesystem;

// Where graft deliberately renders what jinja2 refuses.
const std::map<std::string, std::string> kGraftRendersWhereJinja2Fails = {
    {"fireworks-ai-llama-3-firefunction-v2",
     "graft passes `functions` (the tools as JSON) and `datetime`, which this template needs"},
    {"Kimi-K2-Instruct", "list.append/pop on a list the template built (the HF sandbox forbids it)"},
    {"Kimi-K2-Thinking", "list.append/pop on a list the template built (the HF sandbox forbids it)"},
    {"llama-cpp-deepseek-r1", "map() gives a list, which tojson can print (jinja2 gives a generator)"},
    {"meetkai-functionary-medium-v3.2",
     "tool-call arguments passed as JSON text, which this template concatenates"},
};
// Where graft fails for another reason than jinja2.
const std::map<std::string, std::string> kDifferentError = {
    {"google-gemma-2-2b-it",
     "graft folds the system message into the user's, then the tool role trips the template"},
};

std::string file_text(const fs::path& path) {
  Result<std::string> text = read_file(path);
  EXPECT_TRUE(text.ok()) << path;
  return text.ok() ? *text : "";
}

TEST(ChatTemplateJinja2, EveryTemplateRendersWhatJinja2Renders) {
  fs::path data = fs::path(GRAFT_SOURCE_DIR) / "tests/data/chat/jinja2";
  ChatJson request = ChatJson::parse(file_text(data / "conversation.json"));
  std::vector<fs::path> templates;
  for (const auto& entry : fs::directory_iterator(testing::bundle_dir() + "/models/templates")) {
    if (entry.path().extension() == ".jinja") templates.push_back(entry.path());
  }
  ASSERT_EQ(templates.size(), 68u);
  int same = 0, same_error = 0, deliberate = 0;
  for (const fs::path& file : templates) {
    std::string name = file.stem().string();
    Result<ChatTemplate> t = ChatTemplate::parse(file_text(file));
    ASSERT_TRUE(t.ok()) << name << ": " << t.error().message;
    for (const char* variant : {"a", "b"}) {
      SCOPED_TRACE(name + "." + variant);
      ChatRenderOptions opts;
      opts.bos_token = "<s>";
      opts.eos_token = "</s>";
      opts.now = testing::fixed_now();
      if (std::string(variant) == "b") {
        opts.add_generation_prompt = false;
        opts.extra_kwargs = {{"enable_thinking", false}};
      }
      Result<std::string> out = t->render(request["messages"], request["tools"], opts);
      fs::path expected = data / (name + "." + variant + ".txt");
      fs::path jinja2_error = data / (name + "." + variant + ".err");
      if (fs::exists(expected)) {
        ASSERT_TRUE(out.ok()) << out.error().message;
        EXPECT_EQ(*out, file_text(expected));
        ++same;
      } else if (kGraftRendersWhereJinja2Fails.count(name)) {
        EXPECT_TRUE(out.ok()) << out.error().message;
        ++deliberate;
      } else {
        ASSERT_TRUE(fs::exists(jinja2_error));
        ASSERT_FALSE(out.ok()) << "rendered where jinja2 failed with: " << file_text(jinja2_error);
        if (kDifferentError.count(name)) {
          ++deliberate;
          continue;
        }
        // graft's message is jinja2's, after "chat template, line N: ".
        const std::string& message = out.error().message;
        std::string jinja2_message = file_text(jinja2_error);
        EXPECT_EQ(message.substr(message.size() - std::min(message.size(), jinja2_message.size())),
                  jinja2_message);
        ++same_error;
      }
    }
  }
  std::printf("against jinja2: %d renders identical, %d identical errors, %d deliberate differences\n", same,
              same_error, deliberate);
}

}  // namespace
}  // namespace graft
