// Training data: JSONL files (or a folder holding train.jsonl and optionally
// valid.jsonl and test.jsonl, as mlx-lm's `lora` takes them), each line one
// example in one of three shapes, told apart by its keys:
//   {"messages": [...], "tools": [...]?}  rendered with the model's chat
//       template; the loss counts on the assistant turns only;
//   {"prompt": "...", "completion": "..."}  plain text, no template; the
//       loss counts on the completion (and the end-of-sequence token) only;
//   {"text": "..."}  the loss counts on every token.
// mask_prompt = false counts the loss on every token of every shape.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "chat/template.h"
#include "tokenizer/tokenizer.h"
#include "util/result.h"

namespace graft {

namespace fs = std::filesystem;

struct TrainExample {
  std::vector<int32_t> tokens;
  // target[i]: token i is predicted (from the tokens before it) and counts in the loss.
  std::vector<uint8_t> target;
  int n_targets() const;
};

struct DatasetStats {
  std::string path;
  std::string sha256;                          // of the file's bytes
  int64_t lines = 0;                           // examples read
  int64_t chat = 0, completion = 0, text = 0;  // by shape
  int64_t truncated = 0;                       // longer than max_seq_length, cut
  int64_t dropped = 0;                         // no target token left after the cut
  int64_t tokens = 0;                          // after truncation
  int64_t targets = 0;
};

struct Dataset {
  std::vector<TrainExample> examples;
  DatasetStats stats;
};

// Where a data error is: the file and line (0: the whole file).
struct DataLocation {
  std::string file;
  int line = 0;
};

struct EncodeOptions {
  int max_seq_length = 2048;
  bool mask_prompt = true;
};

// Turns JSONL lines into token sequences for one model.
class ExampleEncoder {
 public:
  // chat_template may be null: then `messages` lines are errors.
  ExampleEncoder(std::shared_ptr<const Tokenizer> tokenizer,
                 std::shared_ptr<const ChatTemplate> chat_template, EncodeOptions options);

  // Reads a whole file. Errors (malformed JSON, a line of unknown shape, a
  // conversation with no assistant turn or that the template refuses, a
  // file with no examples) fill *where and name the line.
  Result<Dataset> load(const fs::path& path, DataLocation* where) const;

  // One example from its JSON text (for load and for tests).
  Result<TrainExample> encode_line(const std::string& line, std::string* shape) const;

 private:
  Result<TrainExample> encode_chat(const ChatJson& line) const;
  Result<std::vector<int32_t>> tokenize(const std::string& text) const;

  std::shared_ptr<const Tokenizer> tokenizer_;
  std::shared_ptr<const ChatTemplate> template_;
  EncodeOptions options_;
};

// The files of a run: --data is a .jsonl file or a folder with train.jsonl
// (+ valid.jsonl, test.jsonl); --valid, when given, names the validation file.
struct DataFiles {
  fs::path train;
  std::optional<fs::path> valid;
  std::optional<fs::path> test;
};
Result<DataFiles> resolve_data_files(const fs::path& data, const std::optional<fs::path>& valid,
                                     DataLocation* where);

}  // namespace graft
