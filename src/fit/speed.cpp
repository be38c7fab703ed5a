#include "fit/speed.h"

#include <algorithm>

namespace graft::fit {

namespace {

constexpr int kWindow = 256;  // the KV cache's window padding (engine/kv_cache.h)

int padded(int cells) {
  return std::max(kWindow, (cells + kWindow - 1) / kWindow * kWindow);
}

// Seconds for one product of a few rows (decode) with m: a layer's
// matrices at the layer rates, the output projection (one large product) at
// the single product's.
double decode_matrix_seconds(const FitModel::Matrix& m, int rows, const ProbeResult& probe) {
  const TypeRate r = probe.rate(m.type);
  return m.layer >= 0 ? r.layer_decode_seconds(m.bytes, rows) : r.decode_seconds(m.bytes, rows);
}

// Seconds for one product of many rows (a prompt) with m: streaming its
// bytes, then the arithmetic.
double prefill_matrix_seconds(const FitModel::Matrix& m, int rows, const ProbeResult& probe) {
  const TypeRate r = probe.rate(m.type);
  const double flops = 2.0 * double(m.n_in) * double(m.n_out) * rows;
  return double(m.bytes) / r.bytes_per_s + flops / r.prefill_flops;
}

// Seconds of one layer's attention of `rows` rows over `cells` cells each.
double attention_seconds(const ModelConfig& c, const ProbeResult& probe, int rows, int cells, bool prefill) {
  return probe.attention_seconds(double(rows) * cells * c.n_head, c.head_dim, prefill);
}

// One decode step of n rows, each seeing `cells` cells (attention skips
// the masked rest of its window).
double decode_seconds(const FitModel& model, const ServeSettings& s, const ProbeResult& probe, int n,
                      int cells) {
  const ModelConfig& c = model.config();
  double t = 0;
  for (const FitModel::Matrix& m : model.matrices()) t += decode_matrix_seconds(m, n, probe);
  const int n_attention = c.n_layer - c.n_recurrent_layers();
  t += n_attention * n * (attention_seconds(c, probe, 1, cells, false) + probe.attention_op_seconds);
  // The step's graph: one window per sequence, as the cache places them apart.
  const int window = padded(cells);
  std::vector<KvCache::Window> windows;
  for (int i = 0; i < n; ++i) windows.push_back({i, 1, i * window, window});
  const Forward::Measure g = model.measure(s.kv_type, n * window, n, n, s.threads, windows);
  return t + g.n_nodes * probe.node_seconds;
}

double prefill_seconds(const FitModel& model, const ServeSettings& s, const ProbeResult& probe, int tokens) {
  const ModelConfig& c = model.config();
  double t = 0;
  for (const FitModel::Matrix& m : model.matrices()) {
    // The last layer's MLP and the output run on the one row whose logits are wanted.
    const bool last_rows_only = m.layer < 0 || (m.ffn && m.layer == c.n_layer - 1);
    t += last_rows_only ? decode_matrix_seconds(m, 1, probe) : prefill_matrix_seconds(m, tokens, probe);
  }
  const int n_attention = c.n_layer - c.n_recurrent_layers();
  t += n_attention * (attention_seconds(c, probe, tokens, padded(tokens), true) + probe.attention_op_seconds);
  const Forward::Measure g = model.measure(s.kv_type, padded(tokens), tokens, 1, s.threads);
  return t + g.n_nodes * probe.node_seconds;
}

}  // namespace

SpeedPrediction predict_speed(const FitModel& model, const ServeSettings& settings, const ProbeResult& probe,
                              const std::vector<int>& rows) {
  SpeedPrediction p;
  p.prefill_tps = p.prompt_tokens / prefill_seconds(model, settings, probe, p.prompt_tokens);
  // Attention sees, on average, the prompt and half the tokens generated.
  const int cells = p.decode_prompt + p.decode_tokens / 2;
  for (int n : rows) p.decode_tps[n] = n / decode_seconds(model, settings, probe, n, cells);
  p.decode_tps_full_context = 1.0 / decode_seconds(model, settings, probe, 1, padded(settings.n_ctx));
  return p;
}

}  // namespace graft::fit
