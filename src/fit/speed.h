// Speed predictions from the probe's rates: each step is the sum, over the
// weight matrices it multiplies, of streaming the matrix's bytes plus its
// arithmetic for the step's rows, plus attention over the cells each row
// sees, plus the fixed cost of each graph node (counted in the step's real
// graph, built as Forward builds it).
#pragma once

#include <map>

#include "fit/memory.h"
#include "fit/probe.h"

namespace graft::fit {

struct SpeedPrediction {
  // One prompt of prompt_tokens tokens in one batch, tokens per second.
  int prompt_tokens = 512;
  double prefill_tps = 0;
  // Decode steps of n rows (one per sequence), each row early in its
  // context (a 256-cell window, as a fresh request sees), in generated
  // tokens per second over all rows.
  std::map<int, double> decode_tps;
  // One row at the end of a full context (settings.n_ctx cells).
  double decode_tps_full_context = 0;
};

// settings must be resolved (FitModel::resolve); rows: the decode batch sizes.
SpeedPrediction predict_speed(const FitModel& model, const ServeSettings& settings, const ProbeResult& probe,
                              const std::vector<int>& rows = {1, 8});

}  // namespace graft::fit
