#include "train/dataset.h"

#include <algorithm>
#include <fstream>

#include "util/files.h"
#include "util/hash.h"

namespace graft {

int TrainExample::n_targets() const {
  return int(std::count(target.begin(), target.end(), uint8_t(1)));
}

ExampleEncoder::ExampleEncoder(std::shared_ptr<const Tokenizer> tokenizer,
                               std::shared_ptr<const ChatTemplate> chat_template, EncodeOptions options)
    : tokenizer_(std::move(tokenizer)), template_(std::move(chat_template)), options_(options) {}

Result<std::vector<int32_t>> ExampleEncoder::tokenize(const std::string& text) const {
  return tokenizer_->encode(text, /*add_special=*/false, /*parse_special=*/true);
}

namespace {

// Appends tokens, marking them as targets or not.
void append(TrainExample& e, const std::vector<int32_t>& tokens, bool target) {
  e.tokens.insert(e.tokens.end(), tokens.begin(), tokens.end());
  e.target.insert(e.target.end(), tokens.size(), uint8_t(target ? 1 : 0));
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.size() >= prefix.size() && s.compare(0, prefix.size(), prefix) == 0;
}

std::string keys_of(const ChatJson& j) {
  std::string out;
  for (auto it = j.begin(); it != j.end(); ++it) out += (out.empty() ? "" : ", ") + it.key();
  return out.empty() ? "none" : out;
}

}  // namespace

Result<TrainExample> ExampleEncoder::encode_chat(const ChatJson& line) const {
  if (!template_) return errorf("invalid_data", "the model has no chat template to render 'messages' with");
  const ChatJson& messages = line["messages"];
  if (!messages.is_array() || messages.empty()) {
    return errorf("invalid_data", "'messages' must be a non-empty array of messages");
  }
  const ChatJson tools = line.contains("tools") ? line["tools"] : ChatJson();
  if (!tools.is_null() && !tools.is_array()) return errorf("invalid_data", "'tools' must be an array");
  std::vector<size_t> turns;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (!messages[i].is_object() || !messages[i].contains("role") || !messages[i]["role"].is_string()) {
      return errorf("invalid_data", "message {} has no role", i);
    }
    if (messages[i]["role"] == "assistant") turns.push_back(i);
  }
  if (turns.empty()) return errorf("invalid_data", "the conversation has no assistant message to learn from");

  ChatRenderOptions opts;
  opts.bos_token = tokenizer_->bos() >= 0 ? tokenizer_->token_text(tokenizer_->bos()) : "";
  opts.eos_token = tokenizer_->eos() >= 0 ? tokenizer_->token_text(tokenizer_->eos()) : "";
  auto render = [&](size_t n, bool generation_prompt) -> Result<std::string> {
    ChatJson part = ChatJson::array();
    for (size_t i = 0; i < n; ++i) part.push_back(messages[i]);
    opts.add_generation_prompt = generation_prompt;
    auto text = template_->render(part, tools, opts);
    if (!text)
      return errorf("invalid_data", "the chat template refuses the conversation: {}", text.error().message);
    return text;
  };
  GRAFT_TRY(const std::string full, render(messages.size(), false));

  // Each assistant turn is the text that rendering it adds to the
  // conversation before it (with the generation prompt): what the model
  // writes at that point when served. Turns the template renders
  // differently once later turns follow (some drop earlier reasoning) are
  // not located and count no loss.
  std::vector<std::pair<size_t, size_t>> spans;
  for (size_t turn : turns) {
    GRAFT_TRY(const std::string before, render(turn, true));
    GRAFT_TRY(const std::string upto, render(turn + 1, false));
    if (starts_with(upto, before) && starts_with(full, upto) && upto.size() > before.size() &&
        (spans.empty() || before.size() >= spans.back().second)) {
      spans.push_back({before.size(), upto.size()});
    }
  }
  if (spans.empty()) {
    return errorf("invalid_data",
                  "the chat template renders this conversation so that no assistant turn can "
                  "be told apart from the prompt");
  }
  TrainExample e;
  if (tokenizer_->add_bos() && tokenizer_->bos() >= 0 && !starts_with(full, opts.bos_token)) {
    append(e, {tokenizer_->bos()}, false);
  }
  size_t at = 0;
  for (auto [begin, end] : spans) {
    GRAFT_TRY(auto prompt, tokenize(full.substr(at, begin - at)));
    append(e, prompt, !options_.mask_prompt);
    GRAFT_TRY(auto answer, tokenize(full.substr(begin, end - begin)));
    append(e, answer, true);
    at = end;
  }
  GRAFT_TRY(auto rest, tokenize(full.substr(at)));
  append(e, rest, !options_.mask_prompt);
  return e;
}

Result<TrainExample> ExampleEncoder::encode_line(const std::string& text, std::string* shape) const {
  ChatJson line;
  try {
    line = ChatJson::parse(text);
  } catch (const std::exception& ex) {
    return errorf("invalid_data", "not valid JSON: {}", ex.what());
  }
  if (!line.is_object()) return errorf("invalid_data", "each line must be a JSON object");
  TrainExample e;
  const int32_t bos = tokenizer_->add_bos() ? tokenizer_->bos() : -1;
  const int32_t eos = tokenizer_->eos();
  if (line.contains("messages")) {
    *shape = "chat";
    GRAFT_TRY(e, encode_chat(line));
  } else if (line.contains("prompt") || line.contains("completion")) {
    *shape = "completion";
    if (!line.contains("prompt") || !line["prompt"].is_string() || !line.contains("completion") ||
        !line["completion"].is_string()) {
      return errorf("invalid_data", "'prompt' and 'completion' must both be strings");
    }
    if (bos >= 0) append(e, {bos}, false);
    GRAFT_TRY(auto prompt, tokenize(line["prompt"].get<std::string>()));
    append(e, prompt, !options_.mask_prompt);
    GRAFT_TRY(auto completion, tokenize(line["completion"].get<std::string>()));
    append(e, completion, true);
    if (eos >= 0) append(e, {eos}, true);
  } else if (line.contains("text")) {
    *shape = "text";
    if (!line["text"].is_string()) return errorf("invalid_data", "'text' must be a string");
    if (bos >= 0) append(e, {bos}, false);
    GRAFT_TRY(auto tokens, tokenize(line["text"].get<std::string>()));
    append(e, tokens, true);
    if (eos >= 0) append(e, {eos}, true);
  } else {
    return errorf(
        "invalid_data",
        "unknown example shape (keys: {}): expected 'messages', 'prompt' and 'completion', or 'text'",
        keys_of(line));
  }
  // The first token is never predicted.
  if (!e.target.empty()) e.target[0] = 0;
  return e;
}

Result<Dataset> ExampleEncoder::load(const fs::path& path, DataLocation* where) const {
  where->file = path.string();
  where->line = 0;
  GRAFT_TRY(const std::string content, read_file(path));
  Dataset data;
  data.stats.path = path.string();
  data.stats.sha256 = sha256_hex(content);
  size_t begin = 0;
  int line_number = 0;
  while (begin < content.size()) {
    size_t end = content.find('\n', begin);
    if (end == std::string::npos) end = content.size();
    std::string line = content.substr(begin, end - begin);
    begin = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    std::string shape;
    auto example = encode_line(line, &shape);
    if (!example) {
      where->line = line_number;
      return errorf(example.error().code, "{}:{}: {}", path.string(), line_number, example.error().message);
    }
    DatasetStats& s = data.stats;
    ++s.lines;
    (shape == "chat" ? s.chat : shape == "completion" ? s.completion : s.text) += 1;
    TrainExample e = std::move(example).value();
    if (int(e.tokens.size()) > options_.max_seq_length) {
      e.tokens.resize(size_t(options_.max_seq_length));
      e.target.resize(size_t(options_.max_seq_length));
      ++s.truncated;
    }
    if (e.n_targets() == 0) {
      ++s.dropped;
      continue;
    }
    s.tokens += int64_t(e.tokens.size());
    s.targets += e.n_targets();
    data.examples.push_back(std::move(e));
  }
  if (data.examples.empty()) {
    return errorf("invalid_data", "{}: no examples to train on{}", path.string(),
                  data.stats.lines > 0 ? " (every example lost its targets to --max-seq-length)" : "");
  }
  return data;
}

Result<DataFiles> resolve_data_files(const fs::path& data, const std::optional<fs::path>& valid,
                                     DataLocation* where) {
  std::error_code ec;
  DataFiles files;
  where->file = data.string();
  if (fs::is_directory(data, ec)) {
    files.train = data / "train.jsonl";
    if (!fs::is_regular_file(files.train, ec)) {
      where->file = files.train.string();
      return errorf("invalid_data", "{}: the data folder has no train.jsonl", data.string());
    }
    if (fs::is_regular_file(data / "valid.jsonl", ec)) files.valid = data / "valid.jsonl";
    if (fs::is_regular_file(data / "test.jsonl", ec)) files.test = data / "test.jsonl";
  } else if (fs::is_regular_file(data, ec)) {
    files.train = data;
  } else {
    return errorf("invalid_data", "{}: no such file or folder", data.string());
  }
  if (valid) {
    where->file = valid->string();
    if (!fs::is_regular_file(*valid, ec)) return errorf("invalid_data", "{}: no such file", valid->string());
    files.valid = *valid;
  }
  return files;
}

}  // namespace graft
