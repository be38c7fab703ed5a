// A fit report: for a model and the settings `graft serve` would use, the
// memory each part takes, whether it fits in the memory usable here (and
// why), the longest context and the most parallel requests that fit, the KV
// budget to use, predicted speeds (when the probe has run), and the same
// memory answers for machines of 8 to 128 GiB. `graft fit`, GET /fit and
// `graft serve`'s defaults all come from here.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fit/memory.h"
#include "fit/probe.h"
#include "fit/speed.h"
#include "fit/system.h"

namespace graft::fit {

// Memory graft may plan with: what is free minus the safety margin.
struct Usable {
  int64_t bytes = 0;
  int64_t free = 0;  // before the margin
  int64_t margin = 0;
  std::string source;  // where `free` comes from
};

// Now, on this machine. `held`: memory this process holds that the plan
// replaces (a running server asking about itself), counted as free.
Usable usable_here(int64_t held = 0);
// Exactly `bytes` (the user says how much graft may use: --memory).
Usable usable_given(int64_t bytes);
// On a machine of `gib` GiB: the OS and other programs keep a tenth (at
// least 1 GiB), then the same margin.
Usable usable_on_machine(int gib);

inline constexpr int kMachineSizesGib[] = {8, 16, 24, 32, 64, 128};

struct MachineRow {
  int memory_gib = 0;
  FitAnswer answer;
};

struct FitReport {
  std::string model_path;
  std::string arch;
  std::string quantization;
  int64_t file_bytes = 0;
  int n_ctx_train = 0;
  ServeSettings settings;  // resolved
  Usable usable;
  FitAnswer answer;
  std::optional<SpeedPrediction> speed;
  std::optional<ProbeResult> probe;
  std::string speed_note;  // why there is no prediction
  std::vector<MachineRow> machines;
};

FitReport make_report(const FitModel& model, const ServeSettings& settings, const Usable& usable,
                      const ProbeResult* probe, bool machines = true);

nlohmann::json to_json(const FitReport& report);
std::string to_text(const FitReport& report);

// Why a server with these settings cannot start, and what would fit (the
// same numbers as `graft fit`).
std::string refusal(const FitReport& report);

}  // namespace graft::fit
