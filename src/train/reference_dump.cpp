#include "train/reference_dump.h"

#include <nlohmann/json.hpp>

#include "util/files.h"

namespace graft {

Status write_init(const RunFolder& run, const LoraParams& params, const std::vector<TrainExample>& examples,
                  const BatchPlan& plan, const TrainConfig& config, int total_steps) {
  GRAFT_TRY_STATUS(params.save_state(run.init_weights_path().string(), /*with_moments=*/false));
  std::string out;
  for (int step = 1; step <= total_steps; ++step) {
    nlohmann::json micro = nlohmann::json::array();
    for (int j = 0; j < config.grad_accumulation; ++j) {
      const std::vector<int>& ids = plan.batch(int64_t(step - 1) * config.grad_accumulation + j);
      size_t len = 0;
      for (int id : ids) len = std::max(len, examples[size_t(id)].tokens.size());
      nlohmann::json tokens = nlohmann::json::array(), targets = nlohmann::json::array();
      for (int id : ids) {
        std::vector<int32_t> t = examples[size_t(id)].tokens;
        std::vector<uint8_t> m = examples[size_t(id)].target;
        t.resize(len, 0);
        m.resize(len, 0);
        tokens.push_back(t);
        targets.push_back(m);
      }
      micro.push_back({{"tokens", tokens}, {"targets", targets}});
    }
    out += nlohmann::json({{"step", step}, {"micro_batches", micro}}).dump() + "\n";
  }
  return write_file_atomic(run.batches_path(), out);
}

}  // namespace graft
