// cross_entropy_rows, dropout_mask and replace_node_op (train_ops.h).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/q4_rows.h"
#include "train/train_ops.h"

namespace graft {

namespace {

// dst: the gradient, shaped as the logits; src[0] = logits, src[1] =
// labels, src[2] = weights, src[3] = loss (written here).
void cross_entropy_kernel(ggml_tensor* dst, int ith, int nth, void*) {
  const ggml_tensor* logits = dst->src[0];
  const auto* labels = static_cast<const int32_t*>(dst->src[1]->data);
  const auto* weights = static_cast<const float*>(dst->src[2]->data);
  auto* loss = static_cast<double*>(dst->src[3]->data);
  const int64_t n_vocab = logits->ne[0];
  const int64_t n_rows = logits->ne[1];
  for (int64_t r = ith; r < n_rows; r += nth) {
    const float* in =
        reinterpret_cast<const float*>(static_cast<const char*>(logits->data) + r * logits->nb[1]);
    float* x = reinterpret_cast<float*>(static_cast<char*>(dst->data) + r * dst->nb[1]);
    const int32_t label = labels[r];
    float max = in[0];
    for (int64_t i = 1; i < n_vocab; ++i) max = std::max(max, in[i]);
    const float label_logit = in[label];
    double sum = 0.0;
    for (int64_t i = 0; i < n_vocab; ++i) {
      x[i] = std::exp(in[i] - max);
      sum += x[i];
    }
    loss[r] = std::log(sum) + double(max) - double(label_logit);
    const float w = weights[r];
    const float scale = float(w / sum);
    for (int64_t i = 0; i < n_vocab; ++i) x[i] *= scale;
    x[label] -= w;
  }
}

uint64_t mix(uint64_t z) {  // splitmix64's finalizer
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

void dropout_kernel(ggml_tensor* dst, int ith, int nth, void* userdata) {
  const auto* key = static_cast<const DropoutKey*>(userdata);
  const uint64_t seed = mix(*key->step_key ^ mix(key->node_key + 0x9e3779b97f4a7c15ULL));
  // Drop when the hash's top 32 bits fall below p * 2^32.
  const uint64_t threshold = uint64_t(double(key->p) * 4294967296.0);
  const float keep = 1.0f / (1.0f - key->p);
  const int64_t n = ggml_nelements(dst);
  auto* out = static_cast<float*>(dst->data);
  const int64_t i0 = n * ith / nth;
  const int64_t i1 = n * (ith + 1) / nth;
  for (int64_t i = i0; i < i1; ++i) out[i] = (mix(seed + uint64_t(i)) >> 32) < threshold ? 0.0f : keep;
}

}  // namespace

int use_q4_rows(ggml_context* ctx, ggml_cgraph* graph) {
  int replaced = 0;
  for (int i = 0; i < ggml_graph_n_nodes(graph); ++i) {
    ggml_tensor* node = ggml_graph_node(graph, i);
    if (node->op != GGML_OP_MUL_MAT) continue;
    ggml_tensor* w = node->src[0];
    ggml_tensor* x = node->src[1];
    const bool frozen =
        w->op == GGML_OP_NONE && !(w->flags & (GGML_TENSOR_FLAG_PARAM | GGML_TENSOR_FLAG_INPUT));
    if (!frozen || !q4_rows_supported(w)) continue;
    if (x->type != GGML_TYPE_F32 || !ggml_is_contiguous(x) || x->ne[2] != 1 || x->ne[3] != 1) continue;
    replace_node_op(node, q4_rows_mul_mat_f32(ctx, w, x));
    ++replaced;
  }
  return replaced;
}

void replace_node_op(ggml_tensor* node, const ggml_tensor* op) {
  node->op = op->op;
  std::memcpy(node->op_params, op->op_params, sizeof(node->op_params));
  for (int s = 0; s < GGML_MAX_SRC; ++s) node->src[s] = op->src[s];
}

ggml_tensor* cross_entropy_rows(ggml_context* ctx, ggml_tensor* logits, ggml_tensor* labels,
                                ggml_tensor* weights, ggml_tensor* loss) {
  GGML_ASSERT(logits->type == GGML_TYPE_F32 && ggml_is_contiguous(logits));
  GGML_ASSERT(labels->type == GGML_TYPE_I32 && labels->ne[0] == logits->ne[1]);
  GGML_ASSERT(weights->type == GGML_TYPE_F32 && weights->ne[0] == logits->ne[1]);
  GGML_ASSERT(loss->type == GGML_TYPE_F64 && loss->ne[0] == logits->ne[1]);
  ggml_tensor* args[4] = {logits, labels, weights, loss};
  return ggml_custom_4d(ctx, GGML_TYPE_F32, logits->ne[0], logits->ne[1], 1, 1, args, 4, cross_entropy_kernel,
                        GGML_N_TASKS_MAX, nullptr);
}

ggml_tensor* dropout_mask(ggml_context* ctx, int64_t ne0, int64_t ne1, const DropoutKey* key) {
  return ggml_custom_4d(ctx, GGML_TYPE_F32, ne0, ne1, 1, 1, nullptr, 0, dropout_kernel, GGML_N_TASKS_MAX,
                        const_cast<DropoutKey*>(key));
}

}  // namespace graft
