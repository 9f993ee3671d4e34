// Causal attention of a prefill chunk over its sequence's keys, float32, blocked for AVX-512.
//
// Why: torch's CPU flash kernel, given the chunk's causal mask as a tensor, reads a mask value
// for every score and computes at about half the cores' FMA rate; past a few thousand tokens
// attention is most of a prefill (docs/BENCHMARKS.md, "The native causal prefill
// attention"). Here a block of query rows meets a block of keys in registers: scores by
// broadcasting each query element against a transposed key block, the softmax online (a
// running max and sum per row), the values accumulated the same way, and the causal limit
// read from the positions.
//
// Shapes: queries (KVH, R, D), the rows of one kv head's query heads, row r = q * G + g for
// query q and group member g, the queries being the last R / G of the sequence's T keys;
// keys, values (T, KVH, D), or with `slots` (T,) the KV cache's rows, key t at slots[t].
// Row r sees keys 0 .. T - R / G + r / G. Out (KVH, R, D).

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <type_traits>

#include "attention_blocks.h"
#include "parallel.h"

namespace astrai {
namespace {

#if defined(__AVX512F__)
// One kv head's rows [row0, row0 + rows) over the keys they see; q pre-scaled by D^-0.5.
void attend_block(const float* q, const float* key_t, const KeyRows& values, int64_t head,
                  int64_t dim, int64_t first_query_pos, int64_t group, int64_t row0, int64_t rows,
                  float* out) {
  const float* value_rows[kKeys];
  AttendingRows state(q + row0 * dim, out, rows, dim);
  const int64_t keys_seen = first_query_pos + (row0 + rows - 1) / group + 1;
  for (int64_t key0 = 0; key0 < keys_seen; key0 += kKeys) {
    const int64_t n = std::min(kKeys, keys_seen - key0);
    for (int64_t j = 0; j < n; ++j) value_rows[j] = values.row(key0 + j) + head;
    // Row i's last key is first_query_pos + (row0 + i) / group.
    const auto seen = [&](int64_t i) { return first_query_pos + (row0 + i) / group - key0 + 1; };
    state.attend(key_t + (key0 / kKeys) * dim * kKeys, value_rows, n, 0, rows, seen);
  }
  state.finish();
}
#endif

bool prefill_attention_available() {
#if defined(__AVX512F__)
  return true;
#else
  return false;
#endif
}

at::Tensor prefill_attention(const at::Tensor& queries, const at::Tensor& keys,
                             const at::Tensor& values, int64_t group,
                             const std::optional<at::Tensor>& slots) {
  TORCH_CHECK(prefill_attention_available(), "prefill_attention needs AVX-512");
  check_attention_inputs(queries, keys, values);
  const int64_t kv_heads = queries.size(0), rows = queries.size(1), dim = queries.size(2);
  const int64_t* slot = nullptr;
  int64_t total_keys = keys.size(0);
  if (slots.has_value()) {  // keys and values are the cache; key t is its row slots[t]
    TORCH_CHECK(slots->dim() == 1, "slots: one cache row a key");
    check_slots(*slots, keys.size(0), "slots");
    total_keys = slots->size(0);
    slot = slots->data_ptr<int64_t>();
  }
  TORCH_CHECK(group >= 1 && rows % group == 0 && rows / group <= total_keys,
              "R a multiple of the group, its queries no more than the keys");
  at::Tensor out = at::empty({kv_heads, rows, dim}, queries.options());
#if defined(__AVX512F__)
  const int64_t first_query_pos = total_keys - rows / group;
  const int64_t blocks = (rows + kBlockRows - 1) / kBlockRows;
  const int64_t key_blocks = (total_keys + kKeys - 1) / kKeys;
  // Scaled once here rather than every score.
  const at::Tensor scaled = queries.mul(1.0 / std::sqrt(static_cast<double>(dim)));
  const float* q = scaled.data_ptr<float>();
  const KeyRows k{keys.data_ptr<float>(), kv_heads * dim, slot};
  const KeyRows v{values.data_ptr<float>(), kv_heads * dim, slot};
  const at::Tensor key_t = transpose_all_keys(k, kv_heads, total_keys, dim, queries.options());
  const float* kt = key_t.data_ptr<float>();
  float* o = out.data_ptr<float>();
  // The last blocks see the most keys: taken first, they do not end the call on one thread.
  parallel_chunks(kv_heads * blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t head = task % kv_heads, block = blocks - 1 - task / kv_heads;
      const int64_t row0 = block * kBlockRows, n = std::min(kBlockRows, rows - row0);
      attend_block(q + head * rows * dim, kt + head * key_blocks * dim * kKeys, v, head * dim, dim,
                   first_query_pos, group, row0, n, o + (head * rows + row0) * dim);
    }
  });
#endif
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(astrai, m) {
  m.def(
      "prefill_attention(Tensor queries, Tensor keys, Tensor values, int group, "
      "Tensor? slots=None) -> Tensor");
  m.def("prefill_attention_available() -> bool", &prefill_attention_available);
}

TORCH_LIBRARY_IMPL(astrai, CPU, m) { m.impl("prefill_attention", &prefill_attention); }

}  // namespace astrai
