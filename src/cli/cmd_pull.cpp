// `graft pull org/name`: downloads a repo's files (or those --include picks)
// from the Hugging Face hub into its cache, where graft serve org/name and
// other tools find them (io/hf_download.h).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>

#include <fmt/format.h>

#include "cli/commands.h"
#include "io/hf_download.h"

namespace graft::cli {

namespace {

struct PullArgs {
  std::string repo;
  std::vector<std::string> include;
  std::string revision = "main";
  int retries = 3;
  bool quiet = false;
};

std::string mib(int64_t bytes) {
  return fmt::format("{:.1f} MiB", double(bytes) / (1 << 20));
}

// A progress line on a terminal, redrawn at most ten times a second.
class ProgressBar {
 public:
  explicit ProgressBar(bool enabled) : enabled_(enabled && ::isatty(STDERR_FILENO)) {}
  void update(const std::string& file, int64_t done, int64_t total) {
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    if (file != file_) {
      file_ = file;
      start_ = now;
      start_bytes_ = done;
    } else if (now - last_ < std::chrono::milliseconds(100) && done != total) {
      return;
    }
    last_ = now;
    const double seconds = std::chrono::duration<double>(now - start_).count();
    const double rate = seconds > 0 ? double(done - start_bytes_) / seconds : 0;
    constexpr int kWidth = 30;
    const int filled = total > 0 ? int(kWidth * double(done) / double(total)) : 0;
    std::string bar(size_t(std::clamp(filled, 0, kWidth)), '#');
    bar.resize(kWidth, '.');
    std::fprintf(stderr, "\r%-40.40s [%s] %s / %s  %s/s   ", file.c_str(), bar.c_str(), mib(done).c_str(),
                 total > 0 ? mib(total).c_str() : "?", mib(int64_t(rate)).c_str());
    std::fflush(stderr);
  }
  void end_line() {
    if (enabled_ && !file_.empty()) std::fprintf(stderr, "\n");
    file_.clear();
  }

 private:
  bool enabled_;
  std::string file_;
  std::chrono::steady_clock::time_point start_, last_;
  int64_t start_bytes_ = 0;
};

void run_pull(const PullArgs& a) {
  auto repo = hf::parse_repo_id(a.repo);
  if (!repo) {
    std::fprintf(stderr, "graft: %s\n", repo.error().message.c_str());
    throw CLI::RuntimeError(1);
  }
  hf::HubCache cache;
  hf::PullOptions o;
  o.revision = a.revision;
  o.include = a.include;
  o.retries = a.retries;
  auto bar = std::make_shared<ProgressBar>(!a.quiet);
  o.progress = [bar](const std::string& file, int64_t done, int64_t total) {
    bar->update(file, done, total);
  };
  o.finished = [bar, quiet = a.quiet](const std::string& file, int64_t bytes, bool was_cached) {
    bar->end_line();
    if (!quiet)
      std::fprintf(stderr, "%s: %s%s\n", file.c_str(), mib(bytes).c_str(),
                   was_cached ? " (already here)" : "");
  };
  if (!a.quiet)
    std::fprintf(stderr, "graft: pulling %s (%s) from %s into %s\n", repo->str().c_str(), a.revision.c_str(),
                 o.endpoint.c_str(), cache.dir().c_str());
  auto result = hf::pull(cache, *repo, o);
  bar->end_line();
  if (!result) {
    std::fprintf(stderr, "graft: %s\n", result.error().message.c_str());
    throw CLI::RuntimeError(1);
  }
  std::printf("%s\n", result->snapshot.c_str());
  int ggufs = 0;
  std::string one;
  for (const hf::PulledFile& f : result->files) {
    if (f.file.size() > 5 && f.file.compare(f.file.size() - 5, 5, ".gguf") == 0) {
      ++ggufs;
      one = f.file;
    }
  }
  if (ggufs > 0 && !a.quiet) {
    std::fprintf(stderr, "graft: serve it with: graft serve %s%s\n", repo->str().c_str(),
                 ggufs == 1 ? (":" + one).c_str() : ":FILE.gguf");
  }
}

}  // namespace

void add_pull_command(CLI::App& app) {
  auto a = std::make_shared<PullArgs>();
  auto* cmd = app.add_subcommand(
      "pull",
      "Download a model repo from the Hugging Face hub into its cache (HF_TOKEN, HF_ENDPOINT, HF_HOME)");
  cmd->add_option("repo", a->repo, "Repo id, org/name")->required();
  cmd->add_option("--include", a->include, "Only files matching this glob, e.g. '*Q4_0.gguf' (repeatable)");
  cmd->add_option("--revision", a->revision, "Branch, tag or commit")->capture_default_str();
  cmd->add_option("--retries", a->retries, "Resumed retries of a file after a cut connection")
      ->capture_default_str()
      ->check(CLI::Range(0, 100));
  cmd->add_flag("--quiet", a->quiet, "No progress output (the snapshot folder is still printed)");
  cmd->callback([a] { run_pull(*a); });
}

}  // namespace graft::cli
