// Attention of several sequences' short chunks whose contexts begin with the same cached rows
// (requests sharing a system prompt, prefilled together), float32, blocked for AVX-512.
//
// Why: every query sees every shared row, so all the sequences' query rows meet each block of
// shared keys together (the keys read and transposed once, straight from the KV cache), and
// then each sequence's own rows, causally, carry on the same online softmax: no gathered copy
// of the shared rows, no padded second attention and no merge by log-sum-exps, which is how
// worker/model/shared_prefix.py computes the same with torch's kernel (docs/BENCHMARKS.md,
// Figures behind the code).
//
// Shapes: queries (KVH, R, D), row r = n * G + g for the group's n-th query (sequence by
// sequence, in order) and group member g; caches (rows, KVH, D); shared_slots (L,): the shared
// rows; own_slots (S, O): each sequence's own rows after them, own_counts[s] of them used;
// query_counts (S,): its queries, the last of its own rows. Query q of sequence s sees every
// shared row and its own rows 0 .. own_counts[s] - query_counts[s] + q. Out (KVH, R, D).

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "attention_blocks.h"
#include "parallel.h"

namespace astrai {
namespace {

#if defined(__AVX512F__)
// The group's sequences: where each one's rows start, and its queries and own rows.
struct Sequences {
  const int64_t* queries;          // (S,)
  const int64_t* own;              // (S,)
  const int64_t* slots;            // (S, O)
  int64_t own_stride;              // O
  std::vector<int64_t> first_row;  // (S + 1,): row of each one's first query, then R
};

// One kv head's rows [row0, row0 + rows): every shared key, then each sequence's own keys up
// to its causal limit; q pre-scaled by D^-0.5, shared_t the shared keys transposed.
void attend_block(const float* q, const float* shared_t, const KeyRows& shared_v, int64_t shared,
                  const KeyRows& keys, const KeyRows& values, const Sequences& seqs, int64_t head,
                  int64_t dim, int64_t group, int64_t row0, int64_t rows, float* out) {
  const float* value_rows[kKeys];
  AttendingRows state(q + row0 * dim, out, rows, dim);
  for (int64_t key0 = 0; key0 < shared; key0 += kKeys) {
    const int64_t n = std::min(kKeys, shared - key0);
    for (int64_t j = 0; j < n; ++j) value_rows[j] = shared_v.row(key0 + j) + head;
    state.attend(shared_t + (key0 / kKeys) * dim * kKeys, value_rows, n, 0, rows,
                 [n](int64_t) { return n; });
  }
  std::vector<float> own_t;
  const int64_t count = static_cast<int64_t>(seqs.first_row.size()) - 1;
  for (int64_t s = 0; s < count; ++s) {
    const int64_t begin = std::max(row0, seqs.first_row[s]);
    const int64_t end = std::min(row0 + rows, seqs.first_row[s + 1]);
    if (begin >= end) continue;
    const int64_t own = seqs.own[s], blocks = (own + kKeys - 1) / kKeys;
    const KeyRows own_k{keys.base, keys.stride, seqs.slots + s * seqs.own_stride};
    const KeyRows own_v{values.base, values.stride, own_k.slots};
    own_t.resize(blocks * dim * kKeys);
    // Row begin + i is query (offset + i) / group, which sees own rows up to
    // own - queries + that.
    const int64_t offset = begin - seqs.first_row[s], last0 = own - seqs.queries[s];
    const int64_t at = begin - row0;
    for (int64_t block = 0; block < blocks; ++block) {
      const int64_t key0 = block * kKeys, n = std::min(kKeys, own - key0);
      transpose_keys(own_k, head, own, dim, block, own_t.data());
      for (int64_t j = 0; j < n; ++j) value_rows[j] = own_v.row(key0 + j) + head;
      const auto seen = [&](int64_t i) { return last0 + (offset + i) / group - key0 + 1; };
      state.attend(own_t.data() + block * dim * kKeys, value_rows, n, at, end - begin, seen);
    }
  }
  state.finish();
}
#endif

at::Tensor shared_prefix_attention(const at::Tensor& queries, const at::Tensor& k_cache,
                                   const at::Tensor& v_cache, int64_t group,
                                   const at::Tensor& shared_slots, const at::Tensor& own_slots,
                                   const at::Tensor& query_counts, const at::Tensor& own_counts) {
#if !defined(__AVX512F__)
  TORCH_CHECK(false, "shared_prefix_attention needs AVX-512");
#endif
  check_attention_inputs(queries, k_cache, v_cache);
  const int64_t kv_heads = queries.size(0), rows = queries.size(1), dim = queries.size(2);
  TORCH_CHECK(shared_slots.dim() == 1 && shared_slots.size(0) > 0, "shared_slots (L,), L > 0");
  TORCH_CHECK(own_slots.dim() == 2, "own_slots (S, O)");
  check_slots(shared_slots, k_cache.size(0), "shared_slots");
  check_slots(own_slots, k_cache.size(0), "own_slots");
  const int64_t count = own_slots.size(0);
  for (const at::Tensor* counts : {&query_counts, &own_counts}) {
    TORCH_CHECK(counts->dim() == 1 && counts->size(0) == count &&
                    counts->scalar_type() == at::kLong && counts->is_contiguous(),
                "query_counts and own_counts: (S,) contiguous int64, S = own_slots' rows");
  }
  const int64_t* asked = query_counts.data_ptr<int64_t>();
  const int64_t* own = own_counts.data_ptr<int64_t>();
  std::vector<int64_t> first_row{0};
  for (int64_t s = 0; s < count; ++s) {
    TORCH_CHECK(asked[s] >= 1 && asked[s] <= own[s] && own[s] <= own_slots.size(1),
                "each sequence: 1 <= queries <= own rows <= O");
    first_row.push_back(first_row.back() + asked[s] * group);
  }
  TORCH_CHECK(group >= 1 && first_row.back() == rows, "R = the sequences' queries times the group");
  at::Tensor out = at::empty({kv_heads, rows, dim}, queries.options());
#if defined(__AVX512F__)
  const int64_t shared = shared_slots.size(0);
  const int64_t blocks = (rows + kBlockRows - 1) / kBlockRows;
  const int64_t key_blocks = (shared + kKeys - 1) / kKeys;
  const at::Tensor scaled = queries.mul(1.0 / std::sqrt(static_cast<double>(dim)));
  const float* q = scaled.data_ptr<float>();
  const int64_t stride = kv_heads * dim;
  const KeyRows k{k_cache.data_ptr<float>(), stride, nullptr};
  const KeyRows v{v_cache.data_ptr<float>(), stride, nullptr};
  const KeyRows shared_k{k.base, stride, shared_slots.data_ptr<int64_t>()};
  const KeyRows shared_v{v.base, stride, shared_k.slots};
  const Sequences seqs{asked, own, own_slots.data_ptr<int64_t>(), own_slots.size(1),
                       std::move(first_row)};
  const at::Tensor shared_t =
      transpose_all_keys(shared_k, kv_heads, shared, dim, queries.options());
  const float* kt = shared_t.data_ptr<float>();
  float* o = out.data_ptr<float>();
  parallel_chunks(kv_heads * blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t head = task % kv_heads, block = task / kv_heads;
      const int64_t row0 = block * kBlockRows, n = std::min(kBlockRows, rows - row0);
      attend_block(q + head * rows * dim, kt + head * key_blocks * dim * kKeys, shared_v, shared, k,
                   v, seqs, head * dim, dim, group, row0, n, o + (head * rows + row0) * dim);
    }
  });
#endif
  return out;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(astrai, m) {
  m.def(
      "shared_prefix_attention(Tensor queries, Tensor k_cache, Tensor v_cache, int group, "
      "Tensor shared_slots, Tensor own_slots, Tensor query_counts, Tensor own_counts) -> Tensor");
}

TORCH_LIBRARY_IMPL(astrai, CPU, m) { m.impl("shared_prefix_attention", &shared_prefix_attention); }

}  // namespace astrai
