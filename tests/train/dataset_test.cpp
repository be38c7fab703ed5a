// Training data: the three line shapes and which tokens count in the loss,
// chat rendering with real templates (every assistant turn, end-of-turn
// marker included, and nothing else), truncation, and bad data named by
// file and line.
#include <gtest/gtest.h>

#include <fstream>

#include "io/gguf_file.h"
#include "testing/test_models.h"
#include "train/dataset.h"
#include "util/files.h"

namespace graft {
namespace {

std::shared_ptr<const Tokenizer> bpe_tokenizer() {
  static std::shared_ptr<const Tokenizer> tok = [] {
    auto file = GgufFile::open(testing::bundle_vocab("llama-bpe"));
    EXPECT_TRUE(file);
    auto t = Tokenizer::from_gguf(*file);
    EXPECT_TRUE(t) << t.error().message;
    return *t;
  }();
  return tok;
}

std::shared_ptr<const ChatTemplate> template_file(const std::string& name) {
  auto source = read_file(testing::bundle_template(name));
  EXPECT_TRUE(source);
  auto t = ChatTemplate::parse(*source);
  EXPECT_TRUE(t) << t.error().message;
  return std::make_shared<const ChatTemplate>(std::move(*t));
}

ExampleEncoder encoder(bool mask = true, int max_len = 2048, const std::string& chat = "Qwen-Qwen3-0.6B") {
  return ExampleEncoder(bpe_tokenizer(), template_file(chat), EncodeOptions{max_len, mask});
}

// The text of the target tokens, and of the others.
std::pair<std::string, std::string> split(const TrainExample& e) {
  std::vector<int32_t> targets, rest;
  for (size_t i = 0; i < e.tokens.size(); ++i) (e.target[i] ? targets : rest).push_back(e.tokens[i]);
  return {bpe_tokenizer()->decode(targets), bpe_tokenizer()->decode(rest)};
}

TrainExample encode(const ExampleEncoder& enc, const std::string& line, const std::string& want_shape) {
  std::string shape;
  auto e = enc.encode_line(line, &shape);
  EXPECT_TRUE(e) << e.error().message;
  EXPECT_EQ(shape, want_shape);
  return e ? *e : TrainExample{};
}

TEST(TrainData, CompletionCountsTheCompletionAndEndOfSequence) {
  const TrainExample e =
      encode(encoder(), R"({"prompt": "The capital of France is", "completion": " Paris."})", "completion");
  ASSERT_EQ(e.tokens.size(), e.target.size());
  EXPECT_EQ(e.tokens.front(), bpe_tokenizer()->bos());
  EXPECT_EQ(e.tokens.back(), bpe_tokenizer()->eos());
  auto [targets, rest] = split(e);
  EXPECT_EQ(targets, " Paris." + bpe_tokenizer()->token_text(bpe_tokenizer()->eos()));
  EXPECT_EQ(rest, bpe_tokenizer()->token_text(bpe_tokenizer()->bos()) + "The capital of France is");
  // Unmasked: every token but the first (which nothing predicts).
  const TrainExample all = encode(encoder(false), R"({"prompt": "a b", "completion": " c"})", "completion");
  EXPECT_EQ(all.n_targets(), int(all.tokens.size()) - 1);
  EXPECT_EQ(all.target[0], 0);
}

TEST(TrainData, CompletionContinuesThePromptAsServingReadsIt) {
  // SentencePiece puts a space in front of a text: the completion's tokens
  // are those that follow the prompt's in the whole text, without that space.
  auto file = GgufFile::open(testing::bundle_vocab("llama-spm"));
  ASSERT_TRUE(file);
  auto spm = Tokenizer::from_gguf(*file);
  ASSERT_TRUE(spm) << spm.error().message;
  const ExampleEncoder enc(*spm, template_file("Qwen-Qwen3-0.6B"), EncodeOptions{});
  const TrainExample e =
      encode(enc, R"({"prompt": "Code table south:", "completion": " king fish"})", "completion");
  auto whole = (*spm)->encode("Code table south: king fish", /*add_special=*/true, /*parse_special=*/false);
  ASSERT_TRUE(whole);
  whole->push_back((*spm)->eos());
  EXPECT_EQ(e.tokens, *whole);
  std::string targets;
  for (size_t i = 0; i + 1 < e.tokens.size(); ++i)
    if (e.target[i]) targets += (*spm)->token_bytes(e.tokens[i]);
  EXPECT_EQ(targets, " king fish");
}

TEST(TrainData, TextCountsEveryToken) {
  const TrainExample e = encode(encoder(), R"({"text": "hello world, hello"})", "text");
  EXPECT_EQ(e.target[0], 0);
  EXPECT_EQ(e.n_targets(), int(e.tokens.size()) - 1);
}

TEST(TrainData, ChatCountsEveryAssistantTurnAndItsEndMarker) {
  const std::string line = R"({"messages": [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello!"},
    {"role": "user", "content": "Bye"},
    {"role": "assistant", "content": "Goodbye."}]})";
  for (const std::string chat : {"Qwen-Qwen3-0.6B", "meta-llama-Llama-3.1-8B-Instruct",
                                 "Qwen-Qwen2.5-7B-Instruct", "google-gemma-2-2b-it"}) {
    SCOPED_TRACE(chat);
    const TrainExample e = encode(encoder(true, 2048, chat), line, "chat");
    auto [targets, rest] = split(e);
    // Qwen3 renders the last assistant turn with an (empty) thinking block
    // and earlier ones without: the first turn, rendered differently once a
    // later one follows, is not what the model wrote there and counts no loss.
    const bool first_turn_counts = chat != "Qwen-Qwen3-0.6B";
    EXPECT_EQ(targets.find("Hello!") != std::string::npos, first_turn_counts) << targets;
    EXPECT_EQ(rest.find("Hello!") != std::string::npos, !first_turn_counts) << rest;
    EXPECT_NE(targets.find("Goodbye."), std::string::npos) << targets;
    EXPECT_EQ(targets.find("Bye"), std::string::npos) << "only assistant text: " << targets;
    EXPECT_NE(rest.find("Be brief."), std::string::npos);
    EXPECT_NE(rest.find("Hi"), std::string::npos);
    EXPECT_NE(rest.find("Bye"), std::string::npos);
    // Each turn ends with the template's end-of-turn marker, as the model must learn to stop.
    EXPECT_NE(e.target.back(), 0);
  }
}

TEST(TrainData, ChatTurnsAreWhatServingRenders) {
  // The assistant text follows the generation prompt exactly: the prompt
  // tokens before a turn are those of the rendered conversation with the
  // generation prompt.
  const ExampleEncoder enc = encoder();
  const TrainExample e = encode(enc,
                                R"({"messages": [{"role": "user", "content": "2+2?"},
                                   {"role": "assistant", "content": "4"}]})",
                                "chat");
  auto chat = template_file("Qwen-Qwen3-0.6B");
  ChatRenderOptions opts;
  opts.add_generation_prompt = true;
  auto prompt = chat->render(ChatJson::parse(R"([{"role": "user", "content": "2+2?"}])"), ChatJson(), opts);
  ASSERT_TRUE(prompt);
  auto prompt_tokens = bpe_tokenizer()->encode(*prompt, false, true);
  ASSERT_TRUE(prompt_tokens);
  std::vector<int32_t> served = *prompt_tokens;
  served.insert(served.begin(), bpe_tokenizer()->bos());
  ASSERT_GE(e.tokens.size(), served.size());
  EXPECT_EQ(std::vector<int32_t>(e.tokens.begin(), e.tokens.begin() + long(served.size())), served);
  EXPECT_EQ(e.target[served.size() - 1], 0);
  EXPECT_EQ(e.target[served.size()], 1);
}

fs::path write(const std::string& name, const std::string& content) {
  const fs::path path = fs::path(testing::scratch_dir()) / name;
  std::ofstream(path) << content;
  return path;
}

void expect_data_error(const std::string& content, int line, const std::string& part,
                       const ExampleEncoder& enc = encoder()) {
  const fs::path path = write("bad.jsonl", content);
  DataLocation where;
  auto data = enc.load(path, &where);
  ASSERT_FALSE(data) << content;
  EXPECT_EQ(where.file, path.string());
  EXPECT_EQ(where.line, line) << data.error().message;
  EXPECT_NE(data.error().message.find(part), std::string::npos) << data.error().message;
  if (line > 0) {
    EXPECT_NE(data.error().message.find(path.string() + ":" + std::to_string(line)), std::string::npos);
  }
}

TEST(TrainData, BadLinesAreNamedByFileAndLine) {
  expect_data_error("{\"text\": \"ok\"}\n\n{\"text\": \"ok\"\n", 3, "not valid JSON");
  expect_data_error("{\"text\": \"ok\"}\n{\"question\": \"?\", \"answer\": \"!\"}\n", 2,
                    "unknown example shape");
  expect_data_error("[1, 2]\n", 1, "JSON object");
  expect_data_error("{\"prompt\": \"p\"}\n", 1, "'prompt' and 'completion'");
  expect_data_error("{\"text\": 5}\n", 1, "'text' must be a string");
  expect_data_error("{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n", 1,
                    "no assistant message");
  expect_data_error("{\"messages\": []}\n", 1, "non-empty array");
  const auto refusing = std::make_shared<const ChatTemplate>(*ChatTemplate::parse(
      "{% for m in messages %}{% if m['content'] == 'forbidden' %}{{ raise_exception('no "
      "such word') }}{% endif %}{{ m['content'] }}{% endfor %}"));
  const ExampleEncoder strict(bpe_tokenizer(), refusing, EncodeOptions{});
  expect_data_error(
      "{\"messages\": [{\"role\": \"user\", \"content\": \"fine\"}, {\"role\": \"assistant\", \"content\": "
      "\"a\"}]}\n{\"messages\": [{\"role\": \"user\", \"content\": \"forbidden\"}, {\"role\": \"assistant\", "
      "\"content\": \"a\"}]}\n",
      2, "refuses the conversation", strict);
}

TEST(TrainData, EmptyFilesAndTruncation) {
  expect_data_error("\n  \n", 0, "no examples");
  const fs::path path = write("long.jsonl",
                              "{\"text\": \"one two three four five six seven eight nine ten\"}\n"
                              "{\"prompt\": \"one two three four five six seven eight\", "
                              "\"completion\": \" nine\"}\n{\"text\": \"short\"}\n");
  DataLocation where;
  auto data = encoder(true, 6).load(path, &where);
  ASSERT_TRUE(data) << data.error().message;
  EXPECT_EQ(data->stats.lines, 3);
  EXPECT_EQ(data->stats.truncated, 2);
  EXPECT_EQ(data->stats.dropped, 1);  // the completion lost every target
  EXPECT_EQ(data->examples.size(), 2u);
  EXPECT_EQ(data->examples[0].tokens.size(), 6u);
  EXPECT_EQ(data->stats.sha256.size(), 64u);
}

TEST(TrainData, FoldersAndFiles) {
  const fs::path dir = fs::path(testing::scratch_dir()) / "data-folder";
  fs::create_directories(dir);
  DataLocation where;
  EXPECT_FALSE(resolve_data_files(dir, std::nullopt, &where));
  std::ofstream(dir / "train.jsonl") << "{\"text\": \"a\"}\n";
  std::ofstream(dir / "valid.jsonl") << "{\"text\": \"b\"}\n";
  auto files = resolve_data_files(dir, std::nullopt, &where);
  ASSERT_TRUE(files);
  EXPECT_EQ(files->train, dir / "train.jsonl");
  ASSERT_TRUE(files->valid);
  EXPECT_FALSE(files->test);
  EXPECT_FALSE(resolve_data_files(dir / "missing.jsonl", std::nullopt, &where));
  EXPECT_FALSE(resolve_data_files(dir / "train.jsonl", dir / "nope.jsonl", &where));
}

}  // namespace
}  // namespace graft
