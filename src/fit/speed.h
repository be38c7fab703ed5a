// Speed predictions from the probe's rates: each step is the sum, over the
// weight matrices it multiplies, of the time graft's kernel for the
// matrix's type takes for the step's rows at the rate the probe measured
// (per weight byte, from memory, at 1 and 8 rows; for a prompt, streaming
// the bytes plus the arithmetic), plus attention over the cells each row
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
  // Decode steps of n rows (one per request), each request generating its
  // first decode_tokens tokens after a prompt of decode_prompt tokens (as
  // graft bench --rows n measures), in generated tokens per second over all
  // rows.
  int decode_prompt = 128;
  int decode_tokens = 128;
  std::map<int, double> decode_tps;
  // One row at the end of a full context (settings.n_ctx cells).
  double decode_tps_full_context = 0;
};

// settings must be resolved (FitModel::resolve); rows: the decode batch sizes.
SpeedPrediction predict_speed(const FitModel& model, const ServeSettings& settings, const ProbeResult& probe,
                              const std::vector<int>& rows = {1, 8});

}  // namespace graft::fit
