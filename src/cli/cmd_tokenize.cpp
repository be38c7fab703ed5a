// `graft tokenize MODEL [TEXT]`: prints the token ids of a text, as the model
// given (a GGUF file, or the name of a bundle vocabulary such as "llama-bpe")
// tokenizes it.
#include <time.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <memory>

#include "cli/commands.h"
#include "cli/paths.h"
#include "io/gguf_file.h"
#include "tokenizer/tokenizer.h"
#include "util/files.h"

namespace graft::cli {

namespace {

struct TokenizeOptions {
  std::string model;
  std::string text;
  std::string file;
  bool use_stdin = false;
  bool pieces = false;
  bool count = false;
  bool no_special = false;
  bool parse_special = true;  // as the server reads prompts
  bool timing = false;
};

[[noreturn]] void fail(const std::string& message) {
  std::fprintf(stderr, "graft: %s\n", message.c_str());
  throw CLI::RuntimeError(1);
}

std::string resolve_model(const std::string& model) {
  std::error_code ec;
  if (std::filesystem::exists(model, ec)) return model;
  const std::string bundled = bundle_vocab(model);
  if (model.find('/') == std::string::npos && std::filesystem::exists(bundled, ec)) return bundled;
  return model;  // GgufFile::open reports it missing
}

std::string read_input(const TokenizeOptions& opt) {
  const int sources = !opt.text.empty() + !opt.file.empty() + opt.use_stdin;
  if (sources > 1) fail("give the text once: as an argument, with --file, or with --stdin");
  if (!opt.file.empty()) {
    auto data = read_file(opt.file);
    if (!data) fail(data.error().message);
    return std::move(data).value();
  }
  if (opt.use_stdin)
    return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  return opt.text;
}

// CPU time this thread has used, in milliseconds (steadier than wall time on a busy machine).
double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

void run_tokenize(const TokenizeOptions& opt) {
  using Clock = std::chrono::steady_clock;
  const std::string input = read_input(opt);
  const auto t0 = Clock::now();
  auto file = GgufFile::open(resolve_model(opt.model));
  if (!file) fail(file.error().message);
  auto tok = Tokenizer::from_gguf(*file);
  if (!tok) fail(tok.error().message);
  const auto t1 = Clock::now();
  const double cpu1 = thread_cpu_ms();
  auto ids = (*tok)->encode(input, !opt.no_special, opt.parse_special);
  if (!ids) fail(ids.error().message);
  const double cpu_ms = thread_cpu_ms() - cpu1;
  const auto t2 = Clock::now();

  if (opt.count) {
    std::printf("%zu\n", ids->size());
  } else if (opt.pieces) {
    for (TokenId id : *ids) std::printf("%d\t%s\n", id, escape_piece((*tok)->token_bytes(id)).c_str());
  } else {
    std::string line;
    line.reserve(ids->size() * 6);
    for (size_t i = 0; i < ids->size(); ++i) {
      if (i) line.push_back(' ');
      line += std::to_string((*ids)[i]);
    }
    line.push_back('\n');
    std::fwrite(line.data(), 1, line.size(), stdout);
  }
  if (opt.timing) {
    const double load_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
    const double encode_ms = std::chrono::duration<double, std::milli>(t2 - t1).count();
    const double mb = static_cast<double>(input.size()) / 1e6;
    std::fprintf(
        stderr, "load %.1f ms; tokenize %zu bytes -> %zu tokens in %.1f ms, %.1f ms CPU (%.2f MB/s)\n",
        load_ms, input.size(), ids->size(), encode_ms, cpu_ms, encode_ms > 0 ? mb / (encode_ms / 1e3) : 0.0);
  }
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto opt = std::make_shared<TokenizeOptions>();
  auto* cmd =
      app.add_subcommand("tokenize", "Print the token ids of a text as a model's tokenizer splits it");
  cmd->add_option("model", opt->model, "GGUF file (or the name of a bundled vocabulary, e.g. llama-bpe)")
      ->required();
  cmd->add_option("text", opt->text, "Text to tokenize");
  cmd->add_option("-f,--file", opt->file, "Read the text from a file (bytes as they are)");
  cmd->add_flag("--stdin", opt->use_stdin, "Read the text from standard input");
  cmd->add_flag("--pieces", opt->pieces, "One token per line: id, tab, the text it stands for (escaped)");
  cmd->add_flag("--count", opt->count, "Print only the number of tokens");
  cmd->add_flag("--no-special", opt->no_special, "Do not add the BOS/EOS tokens the model adds by default");
  cmd->add_flag("--parse-special,!--no-parse-special", opt->parse_special,
                "Read control-token texts such as <|im_start|> in the text as those tokens (the default, as "
                "the server does with prompts); --no-parse-special tokenizes them as plain text");
  cmd->add_flag("--timing", opt->timing, "Report load and tokenize times on stderr");
  cmd->callback([opt] { run_tokenize(*opt); });
}

}  // namespace graft::cli
