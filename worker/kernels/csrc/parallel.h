// Work sharing for the kernels: chunks handed out one at a time to torch's OpenMP threads.
#pragma once

#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace astrai {

// f(begin, end) over [0, n) in chunks of `chunk`, taken by whichever thread is free.
//
// Why not at::parallel_for: it splits the range into one static share per thread, and on a
// 2-core machine serving HTTP, the gateway and the clients preempt a compute thread for a
// moment many times a second; with static shares the other thread then waits at the end of
// every operator. Here it takes over the remaining chunks instead.
template <typename F>
void parallel_chunks(int64_t n, int64_t chunk, const F& f) {
  if (n <= 0) return;
  const int64_t chunks = (n + chunk - 1) / chunk;
  const int threads = static_cast<int>(std::min<int64_t>(at::get_num_threads(), chunks));
  if (threads <= 1 || at::in_parallel_region()) {
    f(0, n);
    return;
  }
  std::atomic<int64_t> next{0};
#pragma omp parallel num_threads(threads)
  {
    for (int64_t begin = next.fetch_add(chunk); begin < n; begin = next.fetch_add(chunk)) {
      f(begin, std::min(n, begin + chunk));
    }
  }
}

// A chunk for parallel_chunks over n items: about four per thread, within [least, most].
// Why: at one row a matmul is a stream of weights, and each jump to a chunk elsewhere costs the
// hardware prefetcher its run-up, so chunks are as long as sharing the work evenly allows.
inline int64_t chunk_for(int64_t n, int64_t least, int64_t most) {
  return std::clamp<int64_t>(n / (4 * static_cast<int64_t>(at::get_num_threads())), least, most);
}

}  // namespace astrai
