#include "train/run_folder.h"

#include <fmt/format.h>

#include "util/files.h"

namespace graft {

namespace {

constexpr const char* kStateWeights = "state.safetensors";
constexpr const char* kStateJson = "state.json";
constexpr const char* kLatest = "latest";

std::string checkpoint_name(int step) {
  return fmt::format("step-{:06d}", step);
}

}  // namespace

Result<RunFolder> RunFolder::create(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir / "checkpoints", ec);
  if (ec) return errorf("io_error", "cannot create the job folder {}: {}", dir.string(), ec.message());
  return RunFolder(dir);
}

fs::path RunFolder::default_path(const std::string& name) {
  const fs::path root = data_dir() / "train";
  fs::path path = root / name;
  std::error_code ec;
  for (int i = 2; fs::exists(path, ec); ++i) path = root / fmt::format("{}-{}", name, i);
  return path;
}

Status RunFolder::write_config(const nlohmann::json& config) const {
  return write_file_atomic(dir_ / "config.json", config.dump(2) + "\n");
}

Result<nlohmann::json> RunFolder::read_config() const {
  GRAFT_TRY(const std::string text, read_file(dir_ / "config.json"));
  try {
    return nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    return errorf("invalid_checkpoint", "{}: not valid JSON: {}", (dir_ / "config.json").string(), e.what());
  }
}

Result<fs::path> RunFolder::save_checkpoint(const LoraParams& params, const CheckpointState& state) const {
  const std::string name = checkpoint_name(state.step);
  const fs::path tmp = checkpoints() / ("." + name + ".tmp");
  const fs::path final_dir = checkpoints() / name;
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) return errorf("io_error", "cannot create {}: {}", tmp.string(), ec.message());
  GRAFT_TRY_STATUS(params.save_state((tmp / kStateWeights).string(), /*with_moments=*/true));
  nlohmann::json j = {{"step", state.step},     {"total_steps", state.total_steps}, {"tokens", state.tokens},
                      {"wall_s", state.wall_s}, {"train_loss", state.train_loss},   {"val_loss", nullptr}};
  if (state.val_loss) j["val_loss"] = *state.val_loss;
  GRAFT_TRY_STATUS(write_file_atomic(tmp / kStateJson, j.dump(2) + "\n"));
  fs::remove_all(final_dir, ec);
  fs::rename(tmp, final_dir, ec);
  if (ec)
    return errorf("io_error", "cannot move the checkpoint into {}: {}", final_dir.string(), ec.message());
  // The previous latest stays until this one is the latest.
  std::string previous;
  if (auto text = read_file(checkpoints() / kLatest)) previous = *text;
  GRAFT_TRY_STATUS(write_file_atomic(checkpoints() / kLatest, name));
  for (const auto& entry : fs::directory_iterator(checkpoints(), ec)) {
    const std::string n = entry.path().filename().string();
    if (n.rfind("step-", 0) == 0 && n != name && n != previous) fs::remove_all(entry.path(), ec);
  }
  return final_dir;
}

Result<std::optional<CheckpointState>> RunFolder::load_latest(LoraParams& params) const {
  std::error_code ec;
  if (!fs::exists(checkpoints() / kLatest, ec)) return std::optional<CheckpointState>();
  GRAFT_TRY(const std::string name, read_file(checkpoints() / kLatest));
  const fs::path dir = checkpoints() / name;
  GRAFT_TRY_STATUS(params.load_state((dir / kStateWeights).string(), /*with_moments=*/true));
  GRAFT_TRY(const std::string text, read_file(dir / kStateJson));
  CheckpointState s;
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    s.step = j.at("step").get<int>();
    s.total_steps = j.at("total_steps").get<int>();
    s.tokens = j.at("tokens").get<int64_t>();
    s.wall_s = j.at("wall_s").get<double>();
    s.train_loss = j.at("train_loss").get<double>();
    if (!j.at("val_loss").is_null()) s.val_loss = j.at("val_loss").get<double>();
  } catch (const std::exception& e) {
    return errorf("invalid_checkpoint", "{}: {}", (dir / kStateJson).string(), e.what());
  }
  return std::optional<CheckpointState>(s);
}

}  // namespace graft
