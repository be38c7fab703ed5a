#include "tokenizer/bundle_vocabs.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <sstream>

#include "io/gguf_file.h"
#include "testing/test_models.h"
#include "util/files.h"

namespace graft::testing {

namespace {

constexpr std::string_view kPrefix = "ggml-vocab-";
constexpr std::string_view kSuffix = ".gguf";

}  // namespace

std::vector<std::string> bundle_vocab_names() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(bundle_dir() + "/models", ec)) {
    const std::string file = entry.path().filename().string();
    if (file.size() > kPrefix.size() + kSuffix.size() && file.compare(0, kPrefix.size(), kPrefix) == 0 &&
        file.compare(file.size() - kSuffix.size(), kSuffix.size(), kSuffix) == 0) {
      names.push_back(file.substr(kPrefix.size(), file.size() - kPrefix.size() - kSuffix.size()));
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string> bundle_vocabs_with_vectors() {
  std::vector<std::string> names;
  for (const std::string& name : bundle_vocab_names()) {
    const std::string base = bundle_vocab(name);
    if (std::filesystem::exists(base + ".inp") && std::filesystem::exists(base + ".out"))
      names.push_back(name);
  }
  return names;
}

Result<std::shared_ptr<const Tokenizer>> load_bundle_tokenizer(const std::string& name) {
  static std::mutex mutex;
  static std::map<std::string, Result<std::shared_ptr<const Tokenizer>>> cache;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = cache.find(name);
  if (it != cache.end()) return it->second;
  auto file = GgufFile::open(bundle_vocab(name));
  if (!file) return file.error();
  auto tok = Tokenizer::from_gguf(*file);
  cache.emplace(name, tok);
  return tok;
}

std::string unexpected_load_failure(const std::string& name, const Error& error) {
  // Tokenizer kinds graft does not implement; a vocabulary of any other kind must load.
  static const std::set<std::string> kUnsupportedModels = {"bert", "t5"};
  auto file = GgufFile::open(bundle_vocab(name));
  if (!file) return name + ": " + file.error().message;
  const std::string model = file->find_string("tokenizer.ggml.model").value_or("?");
  if (error.code != "unsupported") return name + " failed to load (" + error.code + "): " + error.message;
  if (!kUnsupportedModels.count(model)) {
    return name + " (tokenizer.ggml.model = " + model + ") should be supported: " + error.message;
  }
  return "";
}

Result<std::vector<VectorCase>> read_vectors(const std::string& name) {
  const std::string base = bundle_vocab(name);
  GRAFT_TRY(std::string inp, read_file(base + ".inp"));
  GRAFT_TRY(std::string outp, read_file(base + ".out"));
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> inputs;
  for (size_t pos = 0; pos < inp.size();) {
    const size_t next = inp.find(sep, pos);
    if (next == std::string::npos) {
      inputs.push_back(inp.substr(pos));
      break;
    }
    inputs.push_back(inp.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::vector<std::string> lines;
  std::istringstream out_stream(outp);
  for (std::string line; std::getline(out_stream, line);) lines.push_back(line);
  if (inputs.size() != lines.size()) {
    return errorf("invalid_file", "{}: {} inputs but {} outputs", base, inputs.size(), lines.size());
  }
  std::vector<VectorCase> cases;
  for (size_t i = 0; i < inputs.size(); ++i) {
    VectorCase c{inputs[i], {}};
    std::istringstream ids(lines[i]);
    for (long id; ids >> id;) c.ids.push_back(static_cast<TokenId>(id));
    cases.push_back(std::move(c));
  }
  return cases;
}

std::string ids_to_string(const std::vector<TokenId>& ids) {
  std::ostringstream s;
  for (size_t i = 0; i < ids.size(); ++i) s << (i ? " " : "") << ids[i];
  return s.str();
}

}  // namespace graft::testing
