// The core's peak rate of one vector instruction: 12 independent accumulator chains per
// thread, enough to cover each instruction's latency, every thread at once (OpenMP).
// Usage: arithmetic_peak KIND ITERATIONS; prints "KIND <instructions/s> <multiply-adds each>",
// or "KIND unsupported" where this CPU's compiler flags (-march=native) lack the instruction.
#include <immintrin.h>
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cstring>

namespace {

constexpr int kChains = 12;

template <typename V, typename Step>
long long run(long long iterations, V seed, Step step) {
  V acc[kChains];
  for (int i = 0; i < kChains; ++i) acc[i] = seed;
  for (long long it = 0; it < iterations; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < kChains; ++i) acc[i] = step(acc[i]);
  }
  // Keeps the chains' results alive so that the compiler cannot drop them.
  long long sink = 0;
  for (int i = 0; i < kChains; ++i) {
    unsigned char bytes[sizeof(V)];
    std::memcpy(bytes, &acc[i], sizeof(V));
    sink += bytes[0];
  }
  return sink;
}

// Multiply-adds one instruction does, or 0 where it is not compiled in; `out` gets the sink.
int timed(const char* kind, long long iterations, long long* out) {
  long long sink = 0;
  int macs = 0;
  const int seed = static_cast<int>(iterations & 3) + 1;  // not a constant the compiler knows
  if (!std::strcmp(kind, "fma256")) {
    macs = 8;
    const __m256 x = _mm256_set1_ps(1.0f + seed * 1e-7f), y = _mm256_set1_ps(1e-7f);
#pragma omp parallel reduction(+ : sink)
    sink += run(iterations, _mm256_set1_ps(1.0f), [&](__m256 a) { return _mm256_fmadd_ps(a, x, y); });
  }
  else if (!std::strcmp(kind, "maddubs256")) {
    // AVX2's 8-bit products in pairs (what the ymm gemv runs on without VNNI).
    macs = 32;
    const __m256i y = _mm256_set1_epi8(static_cast<char>(seed));
#pragma omp parallel reduction(+ : sink)
    sink += run(iterations, _mm256_set1_epi8(1), [&](__m256i a) { return _mm256_maddubs_epi16(a, y); });
  }
#if defined(__AVX512F__)
  else if (!std::strcmp(kind, "fma512")) {
    macs = 16;
    const __m512 x = _mm512_set1_ps(1.0f + seed * 1e-7f), y = _mm512_set1_ps(1e-7f);
#pragma omp parallel reduction(+ : sink)
    sink += run(iterations, _mm512_set1_ps(1.0f), [&](__m512 a) { return _mm512_fmadd_ps(a, x, y); });
  }
#endif
#if defined(__AVX512VNNI__)
  else if (!std::strcmp(kind, "dpbusd512")) {
    macs = 64;
    const __m512i x = _mm512_set1_epi8(static_cast<char>(seed)), y = _mm512_set1_epi8(3);
#pragma omp parallel reduction(+ : sink)
    sink += run(iterations, _mm512_setzero_si512(), [&](__m512i a) { return _mm512_dpbusd_epi32(a, x, y); });
  } else if (!std::strcmp(kind, "dpwssd512")) {
    macs = 32;
    const __m512i x = _mm512_set1_epi16(static_cast<short>(seed)), y = _mm512_set1_epi16(3);
#pragma omp parallel reduction(+ : sink)
    sink += run(iterations, _mm512_setzero_si512(), [&](__m512i a) { return _mm512_dpwssd_epi32(a, x, y); });
  }
#endif
#if defined(__AVXVNNI__)
  else if (!std::strcmp(kind, "dpbusd256")) {
    macs = 32;
    const __m256i x = _mm256_set1_epi8(static_cast<char>(seed)), y = _mm256_set1_epi8(3);
#pragma omp parallel reduction(+ : sink)
    sink += run(iterations, _mm256_setzero_si256(), [&](__m256i a) { return _mm256_dpbusd_avx_epi32(a, x, y); });
  }
#endif
  *out = sink;
  return macs;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s KIND ITERATIONS\n", argv[0]);
    return 2;
  }
  const long long iterations = std::atoll(argv[2]);
  long long sink = 0;
  timed(argv[1], iterations / 10, &sink);  // warm-up: clocks up, threads made
  const auto started = std::chrono::steady_clock::now();
  const int macs = timed(argv[1], iterations, &sink);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (macs == 0) {
    std::printf("%s unsupported\n", argv[1]);
    return 0;
  }
  const double instructions = static_cast<double>(iterations) * kChains * omp_get_max_threads();
  std::printf("%s %.6g %d %lld\n", argv[1], instructions / seconds, macs, sink & 1);
  return 0;
}
