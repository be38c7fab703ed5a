// `graft models`: the GGUF models on this machine — graft's cache, the
// Hugging Face cache and any --model-dir — with architecture, quantization,
// size and whether each fits here (fit/).
#include <cstdio>
#include <memory>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "fit/fit.h"
#include "io/gguf_file.h"
#include "io/hf_cache.h"
#include "model/arch.h"

namespace graft::cli {

namespace {

struct ModelsArgs {
  std::vector<std::string> dirs;
  int ctx = 0;
  int parallel = 1;
  bool json = false;
};

struct Entry {
  std::string source;  // "graft", "huggingface", "dir"
  std::string name;    // what graft serve accepts
  fs::path path;
};

bool is_gguf(const fs::path& p) {
  return p.extension() == ".gguf" && p.filename().string().rfind("mmproj", 0) != 0;
}

// GGUF files under dir (following links, a few levels deep), sorted.
std::vector<fs::path> gguf_files(const fs::path& dir, int depth = 4) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, fs::directory_options::follow_directory_symlink, ec), end;
       !ec && it != end; it.increment(ec)) {
    if (it.depth() >= depth) it.disable_recursion_pending();
    std::error_code type_ec;
    if (!fs::is_directory(it->path(), type_ec) && is_gguf(it->path())) out.push_back(it->path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<Entry> find_models(const ModelsArgs& a) {
  std::vector<Entry> out;
  for (const fs::path& p : gguf_files(cache_dir())) out.push_back({"graft", p.string(), p});
  hf::HubCache hub;
  for (const hf::Snapshot& s : hub.snapshots()) {
    for (const std::string& f : s.files) {
      if (is_gguf(f)) out.push_back({"huggingface", s.repo.str() + ":" + f, s.dir / f});
    }
  }
  for (const std::string& d : a.dirs) {
    for (const fs::path& p : gguf_files(d)) out.push_back({"dir", p.string(), p});
  }
  return out;
}

struct Row {
  Entry entry;
  std::string arch, quantization, problem;
  int64_t bytes = 0;
  bool adapter = false;
  std::optional<fit::FitAnswer> fit;
  int n_ctx = 0;
};

Row describe(const Entry& e, const ModelsArgs& a, const fit::Usable& usable) {
  Row r;
  r.entry = e;
  std::error_code ec;
  r.bytes = int64_t(fs::file_size(e.path, ec));
  auto gguf = GgufFile::open(e.path.string());
  if (!gguf) {
    r.problem = gguf.error().message;
    return r;
  }
  r.adapter = gguf->find_string("general.type").value_or("") == "adapter";
  r.arch = gguf->find_string("general.architecture").value_or("?");
  if (r.adapter) return r;
  if (!find_architecture(r.arch)) {
    r.problem = "graft does not run " + r.arch;
    return r;
  }
  auto model = fit::FitModel::open(e.path.string());
  if (!model) {
    r.problem = model.error().message;
    return r;
  }
  r.quantization = (*model)->quantization();
  fit::ServeSettings s;
  s.n_ctx = a.ctx;
  s.parallel = a.parallel;
  s = (*model)->resolve(s);
  r.n_ctx = s.n_ctx;
  r.fit = fit::solve(**model, s, usable.bytes);
  return r;
}

}  // namespace

void add_models_command(CLI::App& app) {
  auto a = std::make_shared<ModelsArgs>();
  auto* cmd =
      app.add_subcommand("models",
                         "List the GGUF models here (graft's cache, the Hugging Face cache, --model-dir) "
                         "and whether each fits");
  cmd->add_option("--model-dir", a->dirs, "Another folder of GGUF models (repeatable)")
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--ctx", a->ctx, "Context to check the fit for (default: each model's, at most 8192)")
      ->check(CLI::Range(0, 1 << 24));
  cmd->add_option("--parallel", a->parallel, "Requests at once to check the fit for")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd->add_flag("--json", a->json, "Print JSON");
  cmd->callback([a] {
    fit::baseline_rss();
    const fit::Usable usable = fit::usable_here();
    std::vector<Row> rows;
    for (const Entry& e : find_models(*a)) {
      Row r = describe(e, *a, usable);
      if (!r.adapter) rows.push_back(std::move(r));
    }
    if (a->json) {
      nlohmann::json data = nlohmann::json::array();
      for (const Row& r : rows) {
        nlohmann::json j = {{"name", r.entry.name},
                            {"source", r.entry.source},
                            {"path", r.entry.path.string()},
                            {"arch", r.arch},
                            {"size_bytes", r.bytes}};
        j["quantization"] = r.quantization.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.quantization);
        if (r.fit) {
          j["fits"] = r.fit->fits;
          j["ctx"] = r.n_ctx;
          j["parallel"] = a->parallel;
          j["max_safe_context"] = r.fit->max_safe_context;
          j["needed_bytes"] = r.fit->need.total();
        } else {
          j["fits"] = nullptr;
          j["problem"] = r.problem;
        }
        data.push_back(j);
      }
      std::printf("%s\n", nlohmann::json{{"usable_bytes", usable.bytes}, {"models", data}}.dump(2).c_str());
      return;
    }
    if (rows.empty()) {
      std::printf("no GGUF models in %s, %s%s\n", cache_dir().c_str(), hf::default_hub_dir().c_str(),
                  a->dirs.empty() ? "" : " or the --model-dir folders");
      return;
    }
    std::printf("%-56s %-12s %-8s %10s  %s\n", "MODEL", "ARCH", "QUANT", "SIZE",
                fmt::format("FITS ({} usable, x{})", fit::format_bytes(usable.bytes), a->parallel).c_str());
    for (const Row& r : rows) {
      std::string fits = r.problem;
      if (r.fit) {
        fits = r.fit->fits ? fmt::format("yes at {} tokens (up to {})", r.n_ctx, r.fit->max_safe_context)
                           : (r.fit->max_safe_context > 0
                                  ? fmt::format("no at {} tokens; up to {}", r.n_ctx, r.fit->max_safe_context)
                                  : std::string("no"));
      }
      std::printf("%-56s %-12s %-8s %10s  %s\n", r.entry.name.c_str(), r.arch.c_str(),
                  r.quantization.empty() ? "-" : r.quantization.c_str(), fit::format_bytes(r.bytes).c_str(),
                  fits.c_str());
    }
  });
}

}  // namespace graft::cli
