// FlashInfer's sampling kernels timed as peers of gumbel's bench routes.
//
// Every step samples one token per row of LLM-shaped float32 logits (the shape of
// gumbel's bench.LLMLogits: a normal body of sd 2.5 and 8 strong tokens of 12..18 per
// row) at temperature 0.8. The timing is bench/peers/torch_peers.py's: a CUDA graph of
// kSteps steps, replayed kReplays times back to back between two events; the median of
// kGroups such groups, in µs per step. The output is JSON in gumbel's bench.Measurement
// schema, for `gumbel bench --compare`.
//
// FlashInfer's headers are not part of this repository. Build and run with
// bench/peers/flashinfer.sh, or by hand:
//   nvcc -O3 -std=c++17 -arch=sm_90 -I <folder holding flashinfer/> \
//       bench/peers/flashinfer_peers.cu -o flashinfer_peers
//   ./flashinfer_peers [--vocab 32768,65536,151936] [--batch 1,4,8,64] [--out FILE]

#include <cuda_runtime.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "flashinfer/sampling.cuh"

namespace fi = flashinfer::sampling;

static constexpr int kSteps = 10, kReplays = 10, kGroups = 15;
static constexpr float kTemperature = 0.8f;
static constexpr uint64_t kSeed = 42;
static constexpr size_t kWorkspaceBytes = 8 << 20;  // OnlineSoftmax's per-slice partials

static void check(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) {
    fprintf(stderr, "flashinfer_peers: %s: %s\n", what.c_str(), cudaGetErrorString(e));
    exit(1);
  }
}

// llmLogits returns rows x vocab logits shaped like bench.LLMLogits (another generator,
// so other values): normal with sd 2.5, 8 strong tokens of 12..18 per row, no zeros.
static std::vector<float> llmLogits(int rows, int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> body(0.f, 2.5f);
  std::uniform_real_distribution<float> strong(12.f, 18.f);
  std::uniform_int_distribution<int> token(0, vocab - 1);
  std::vector<float> x((size_t)rows * vocab);
  for (float& v : x) {
    v = body(rng);
    if (v == 0.f) v = 1e-3f;
  }
  for (int r = 0; r < rows; r++)
    for (int j = 0; j < 8; j++) x[(size_t)r * vocab + token(rng)] = strong(rng);
  return x;
}

// divide writes x / t to y: the temperature for sampling_from_logits, which takes none.
static __global__ void divide(const float* __restrict__ x, float* __restrict__ y, size_t n, float t) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    y[i] = x[i] / t;
}

// graphUs captures kSteps calls of step (given the step's index) into a CUDA graph and
// returns the median over kGroups groups of kReplays back-to-back replays, µs per step.
static double graphUs(cudaStream_t s, const std::function<void(uint64_t)>& step) {
  for (uint64_t i = 0; i < 3; i++) step(i);  // warm-up: module loading, kernel attributes
  check(cudaStreamSynchronize(s), "warm-up");
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "begin capture");
  for (uint64_t i = 0; i < kSteps; i++) step(i);
  check(cudaStreamEndCapture(s, &graph), "end capture");
  check(cudaGraphInstantiateWithFlags(&exec, graph, 0), "instantiate graph");
  check(cudaGraphLaunch(exec, s), "replay");  // the first replay uploads the graph
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  std::vector<double> us(kGroups);
  for (double& u : us) {
    check(cudaEventRecord(start, s), "record");
    for (int r = 0; r < kReplays; r++) check(cudaGraphLaunch(exec, s), "replay");
    check(cudaEventRecord(stop, s), "record");
    check(cudaEventSynchronize(stop), "replay");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "elapsed time");
    u = ms * 1e3 / (kReplays * kSteps);
  }
  check(cudaEventDestroy(start), "event");
  check(cudaEventDestroy(stop), "event");
  check(cudaGraphExecDestroy(exec), "graph");
  check(cudaGraphDestroy(graph), "graph");
  std::sort(us.begin(), us.end());
  return us[kGroups / 2];
}

// parseList parses a comma-separated list of positive whole numbers.
static std::vector<int> parseList(const char* flag, const std::string& s) {
  std::vector<int> out;
  for (size_t pos = 0; pos <= s.size();) {
    size_t end = std::min(s.find(',', pos), s.size());
    std::string f = s.substr(pos, end - pos);
    pos = end + 1;
    if (f.empty()) continue;
    char* rest;
    long n = strtol(f.c_str(), &rest, 10);
    if (*rest != '\0' || n < 1 || n > (1L << 30)) {
      fprintf(stderr, "flashinfer_peers: %s %s: want positive whole numbers\n", flag, f.c_str());
      exit(2);
    }
    out.push_back((int)n);
  }
  if (out.empty()) {
    fprintf(stderr, "flashinfer_peers: %s: empty\n", flag);
    exit(2);
  }
  return out;
}

// A peer is one sampling step: softmax(x / T) into probs and a sampling kernel on them,
// or x / T into scaled and a sampling kernel on those logits.
struct Peer {
  const char* route;
  bool softmax;
  std::function<cudaError_t(uint64_t offset)> sample;
};

int main(int argc, char** argv) {
  std::vector<int> vocabs = {32768, 65536, 151936}, batches = {1, 4, 8, 64};
  const char* outPath = nullptr;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    if (i + 1 < argc && a == "--vocab") {
      vocabs = parseList("--vocab", argv[++i]);
    } else if (i + 1 < argc && a == "--batch") {
      batches = parseList("--batch", argv[++i]);
    } else if (i + 1 < argc && a == "--out") {
      outPath = argv[++i];
    } else {
      fprintf(stderr, "usage: flashinfer_peers [--vocab 32768,65536,151936] [--batch 1,4,8,64] [--out FILE]\n");
      return 2;
    }
  }
  FILE* out = outPath ? fopen(outPath, "w") : stdout;  // opened first: a bad path fails at once
  if (!out) {
    fprintf(stderr, "flashinfer_peers: --out %s: %s\n", outPath, strerror(errno));
    return 1;
  }

  cudaDeviceProp prop;
  check(cudaGetDeviceProperties(&prop, 0), "device");
  cudaStream_t s;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
  void* ws;
  check(cudaMalloc(&ws, kWorkspaceBytes), "workspace");

  std::string json;
  for (int V : vocabs) {
    for (int B : batches) {
      const uint32_t v = V, b = B;
      const size_t n = (size_t)B * V;
      std::vector<float> host = llmLogits(B, V, (uint64_t)V * 1000 + B);
      float *logits, *scaled, *probs;
      int* tokens;
      bool* valid;
      check(cudaMalloc(&logits, n * sizeof(float)), "alloc");
      check(cudaMalloc(&scaled, n * sizeof(float)), "alloc");
      check(cudaMalloc(&probs, n * sizeof(float)), "alloc");
      check(cudaMalloc(&tokens, b * sizeof(int)), "alloc");
      check(cudaMalloc(&valid, b * sizeof(bool)), "alloc");
      check(cudaMemcpy(logits, host.data(), n * sizeof(float), cudaMemcpyHostToDevice), "upload");

      // The offset of FlashInfer's Philox stream is the step's index.
      std::vector<Peer> peers = {
          {"flashinfer:sampling_from_logits", false, [&](uint64_t off) {
             return fi::SamplingFromLogits<float, int>(scaled, tokens, nullptr, b, v, true, nullptr, kSeed, nullptr, off, s);
           }},
          {"flashinfer:softmax+sampling_from_probs", true, [&](uint64_t off) {
             return fi::SamplingFromProb<float, int>(probs, tokens, valid, nullptr, b, v, true, nullptr, kSeed, nullptr, off, s);
           }},
          {"flashinfer:softmax+top_k_top_p", true, [&](uint64_t off) {  // k 50 and p 0.9 jointly
             return fi::TopKTopPSamplingFromProb<float, int>(probs, nullptr, nullptr, tokens, valid, nullptr, b, 50, 0.9f, v,
                                                             true, nullptr, kSeed, nullptr, off, s);
           }},
          {"flashinfer:softmax+top_k", true, [&](uint64_t off) {
             return fi::TopKSamplingFromProb<float, int>(probs, tokens, valid, nullptr, nullptr, b, 50, v, true, nullptr, kSeed,
                                                         nullptr, off, s);
           }},
          {"flashinfer:softmax+top_p", true, [&](uint64_t off) {
             return fi::TopPSamplingFromProb<float, int>(probs, tokens, valid, nullptr, nullptr, b, 0.95f, v, true, nullptr,
                                                         kSeed, nullptr, off, s);
           }},
          {"flashinfer:softmax+min_p", true, [&](uint64_t off) {
             return fi::MinPSamplingFromProb<float, int>(probs, nullptr, tokens, valid, nullptr, b, 0.05f, v, true, nullptr,
                                                         kSeed, nullptr, off, s);
           }},
      };
      for (const Peer& p : peers) {
        double us = graphUs(s, [&](uint64_t step) {
          if (p.softmax) {
            check(fi::OnlineSoftmax<float>(logits, probs, b, v, nullptr, kTemperature, ws, kWorkspaceBytes, false, s),
                  "OnlineSoftmax");
          } else {
            divide<<<(unsigned)std::min<size_t>((n + 255) / 256, 4096), 256, 0, s>>>(logits, scaled, n, kTemperature);
            check(cudaGetLastError(), "divide");
          }
          check(p.sample(step), p.route);
        });
        int token = -1;
        check(cudaMemcpyAsync(&token, tokens, sizeof token, cudaMemcpyDeviceToHost, s), "token");
        check(cudaStreamSynchronize(s), "token");
        fprintf(stderr, "%s V=%d B=%d: %.2f µs\n", p.route, V, B, us);
        char line[512];
        snprintf(line, sizeof line,
                 "%s\n  {\"route\": \"%s\", \"vocab\": %d, \"batch\": %d, \"dtype\": \"float32\", \"device_us\": %.3f, "
                 "\"graph_us\": %.3f, \"host_us\": 0, \"allocs_per_call\": 0, \"token\": %d}",
                 json.empty() ? "" : ",", p.route, V, B, us, us, token);
        json += line;
      }
      check(cudaFree(logits), "free");
      check(cudaFree(scaled), "free");
      check(cudaFree(probs), "free");
      check(cudaFree(tokens), "free");
      check(cudaFree(valid), "free");
    }
  }
  fprintf(out, "{\"backend\": \"flashinfer\", \"device\": \"%s\", \"temperature\": %.2f, \"measurements\": [%s\n]}\n",
          prop.name, kTemperature, json.c_str());
  if (out != stdout && fclose(out) != 0) {
    fprintf(stderr, "flashinfer_peers: --out %s: %s\n", outPath, strerror(errno));
    return 1;
  }
  return 0;
}
