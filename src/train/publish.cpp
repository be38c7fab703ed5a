#include "train/publish.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "adapters/gguf_lora.h"
#include "adapters/metadata.h"
#include "adapters/peft.h"
#include "adapters/targets.h"

namespace graft {

namespace {

// Makes a rename in `dir` durable.
void sync_folder(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// A test hook (GRAFT_TRAIN_PUBLISH_FAULT): with half the adapter written
// into its hidden folder, "enospc" fails the write as a full disk does and
// "kill" ends the process by SIGKILL, as a crash there would.
std::string_view injected_fault() {
  const char* v = std::getenv("GRAFT_TRAIN_PUBLISH_FAULT");
  return v ? std::string_view(v) : std::string_view();
}

}  // namespace

// Removes what publishes of `id` that died left behind: hidden folders
// ".<id>.tmp-<pid>" whose process is gone.
void clear_dead_publishes(const fs::path& store, const std::string& id) {
  const std::string prefix = "." + id + ".tmp-";
  std::error_code ec;
  for (fs::directory_iterator it(store, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    char* rest = nullptr;
    const long pid = std::strtol(name.c_str() + prefix.size(), &rest, 10);
    if (*rest != '\0' || pid <= 0) continue;
    if (pid != ::getpid() && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
      std::error_code ignored;
      fs::remove_all(it->path(), ignored);
    }
  }
}

Result<fs::path> publish_adapter(const LoraParams& params, float scale, const BaseModel& base,
                                 const PublishInfo& info) {
  const LoraAdapter adapter = params.to_adapter(scale);
  const fs::path final_dir = info.store / info.id;
  const fs::path tmp = info.store / ("." + info.id + ".tmp-" + std::to_string(::getpid()));
  std::error_code ec;
  fs::create_directories(info.store, ec);
  fs::remove_all(tmp, ec);
  clear_dead_publishes(info.store, info.id);
  auto fail = [&](const Error& e) -> Result<fs::path> {
    fs::remove_all(tmp, ec);
    return e;
  };

  PeftWriteOptions peft;
  peft.base_model_name_or_path = base.repo.empty() ? base.name : base.repo;
  if (Status st = write_peft(tmp, adapter, peft); !st) return fail(st.error());
  if (const std::string_view fault = injected_fault(); fault == "kill") {
    ::raise(SIGKILL);
  } else if (fault == "enospc") {
    return fail(make_error("io_error", "cannot write " + (tmp / (info.id + ".gguf")).string() + ": " +
                                           std::strerror(ENOSPC) + " (GRAFT_TRAIN_PUBLISH_FAULT)"));
  } else if (!fault.empty()) {
    return fail(make_error("invalid_argument", "GRAFT_TRAIN_PUBLISH_FAULT must be 'enospc' or 'kill'"));
  }
  GgufLoraWriteOptions gguf;
  gguf.architecture = base.architecture;
  gguf.name = info.id;
  if (Status st = write_gguf_lora(tmp / (info.id + ".gguf"), adapter, gguf); !st) return fail(st.error());

  AdapterMetadata m;
  m.id = info.id;
  m.base_repo = base.repo.empty() ? base.name : base.repo;
  m.base_fingerprint = base.fingerprint;
  m.base_architecture = base.architecture;
  m.rank = params.rank();
  m.alpha = adapter.scaling.alpha;
  m.scale = scale;
  std::vector<int> layers;
  for (const LoraParams::Pair& p : params.pairs()) {
    const std::string name(peft_target_name(p.target));
    if (std::find(m.target_modules.begin(), m.target_modules.end(), name) == m.target_modules.end()) {
      m.target_modules.push_back(name);
    }
    if (std::find(layers.begin(), layers.end(), p.layer) == layers.end()) layers.push_back(p.layer);
  }
  m.layers = layers;
  m.created = utc_now_iso8601();
  m.task = "lora";
  m.dataset = info.data.contains("train") ? info.data["train"]["file"].get<std::string>() : "";
  m.extra["training"] = {{"config", info.config},
                         {"data", info.data},
                         {"train_loss", info.train_loss},
                         {"val_loss", info.val_loss ? nlohmann::json(*info.val_loss) : nlohmann::json()},
                         {"test_loss", info.test_loss ? nlohmann::json(*info.test_loss) : nlohmann::json()},
                         {"tokens_trained", info.tokens},
                         {"steps", info.steps},
                         {"wall_s", info.wall_s},
                         {"trainer", "graft train"}};
  if (Status st = write_adapter_metadata(tmp / kAdapterMetadataFile, m); !st) return fail(st.error());

  if (fs::exists(final_dir, ec)) {
    return fail(make_error("already_exists", "an adapter '" + info.id + "' appeared in the store meanwhile"));
  }
  fs::rename(tmp, final_dir, ec);
  if (ec)
    return fail(
        make_error("io_error", "cannot move the adapter into " + final_dir.string() + ": " + ec.message()));
  sync_folder(info.store);
  return final_dir;
}

}  // namespace graft
