// FlashInfer's sampling kernels timed as peers of gumbel's bench routes.
//
// Every step samples one token per row of LLM-shaped float32 logits (the shape of
// gumbel's bench.LLMLogits: a normal body of sd 2.5 and 8 strong tokens of 12..18 per
// row) at temperature 0.8. The timing is bench/peers/torch_peers.py's: a CUDA graph of
// kSteps steps, replayed kReplays times back to back between two events; the median of
// kGroups such groups, in µs per step. The output is JSON in gumbel's bench.Measurement
// schema, for `gumbel bench --compare`.
//
// The route flashinfer:chain-verify is speculative decoding's verification step for B requests of K
// drafts each (--chain K, 4 by default; 0 leaves it out): softmax at temperature 0.8
// over the B·(K+1) target rows, then ChainSpeculativeSampling against the drafter's
// probabilities (made once, outside the timed graph). Its entries add "drafts" (K) and
// "accepted_len", the mean number of drafts accepted per request and step (0..K).
//
// FlashInfer's headers are not part of this repository. Build and run with
// bench/peers/flashinfer.sh, or by hand:
//   nvcc -O3 -std=c++17 -arch=sm_90 -I <folder holding flashinfer/> \
//       bench/peers/flashinfer_peers.cu -o flashinfer_peers
//   ./flashinfer_peers [--vocab 32768,65536,151936] [--batch 1,4,8,64] [--chain 4] [--out FILE]

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
static constexpr float kDraftNoise = 1.f;  // sd of the drafter's error on the target's logits

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

// measurement returns one bench.Measurement JSON object (after a comma unless first):
// device_us and graph_us are both the graph-replay time; extra, if any, holds more
// fields (", \"name\": value...").
static std::string measurement(bool first, const char* route, int V, int B, double us, int token,
                               const std::string& extra = "") {
  char line[512];
  snprintf(line, sizeof line,
           "%s\n  {\"route\": \"%s\", \"vocab\": %d, \"batch\": %d, \"dtype\": \"float32\", \"device_us\": %.3f, "
           "\"graph_us\": %.3f, \"host_us\": 0, \"allocs_per_call\": 0, \"token\": %d%s}",
           first ? "" : ",", route, V, B, us, us, token, extra.c_str());
  return line;
}

// chainVerify measures the route flashinfer:chain-verify at vocabulary V for B requests of K drafts
// each and returns its JSON object. A step is softmax(x / T) over the B·(K+1) target rows
// (request r's rows r·(K+1) .. r·(K+1)+K: its K draft positions, then the bonus one) and
// ChainSpeculativeSampling, which accepts draft i with probability min(1, q/p), samples
// the first rejected position from relu(q - p) (or the bonus position from q) and adds
// each request's counts to two counters. The drafter is made once, outside the graph:
// its logits are the target's logits at the same position plus normal noise of sd
// kDraftNoise, its probabilities their softmax at T, its token the argmax of its row.
static std::string chainVerify(cudaStream_t s, void* ws, int V, int B, int K, bool first) {
  const uint32_t v = V, b = B, k = K;
  const size_t targetRows = (size_t)B * (K + 1), draftRows = (size_t)B * K;
  const size_t nt = targetRows * V, nd = draftRows * V;
  const uint64_t seed = ((uint64_t)V * 1000 + B) * 100 + K;
  std::vector<float> target = llmLogits((int)targetRows, V, seed);
  std::vector<float> draft(nd);
  std::vector<int> draftTokens(draftRows);
  std::mt19937_64 rng(seed + 1);
  std::normal_distribution<float> noise(0.f, kDraftNoise);
  for (size_t r = 0; r < (size_t)B; r++)
    for (size_t i = 0; i < (size_t)K; i++) {
      const float* t = &target[(r * (K + 1) + i) * V];
      float* d = &draft[(r * K + i) * V];
      int best = 0;
      for (int j = 0; j < V; j++) {
        d[j] = t[j] + noise(rng);
        if (d[j] > d[best]) best = j;
      }
      draftTokens[r * K + i] = best;
    }

  float *targetLogits, *targetProbs, *draftLogits, *draftProbs;
  int *draftIds, *outIds, *accepted, *emitted;
  check(cudaMalloc(&targetLogits, nt * sizeof(float)), "alloc");
  check(cudaMalloc(&targetProbs, nt * sizeof(float)), "alloc");
  check(cudaMalloc(&draftLogits, nd * sizeof(float)), "alloc");
  check(cudaMalloc(&draftProbs, nd * sizeof(float)), "alloc");
  check(cudaMalloc(&draftIds, draftRows * sizeof(int)), "alloc");
  check(cudaMalloc(&outIds, targetRows * sizeof(int)), "alloc");
  check(cudaMalloc(&accepted, b * sizeof(int)), "alloc");
  check(cudaMalloc(&emitted, b * sizeof(int)), "alloc");
  check(cudaMemcpy(targetLogits, target.data(), nt * sizeof(float), cudaMemcpyHostToDevice), "upload");
  check(cudaMemcpy(draftLogits, draft.data(), nd * sizeof(float), cudaMemcpyHostToDevice), "upload");
  check(cudaMemcpy(draftIds, draftTokens.data(), draftRows * sizeof(int), cudaMemcpyHostToDevice), "upload");
  check(fi::OnlineSoftmax<float>(draftLogits, draftProbs, b * k, v, nullptr, kTemperature, ws, kWorkspaceBytes, false, s),
        "OnlineSoftmax (drafts)");
  check(cudaMemsetAsync(accepted, 0, b * sizeof(int), s), "clear");
  check(cudaMemsetAsync(emitted, 0, b * sizeof(int), s), "clear");
  check(cudaStreamSynchronize(s), "drafts");
  check(cudaFree(draftLogits), "free");

  // The offset of FlashInfer's Philox stream is the step's index, as for the other peers.
  auto step = [&](uint64_t off) {
    check(fi::OnlineSoftmax<float>(targetLogits, targetProbs, b * (k + 1), v, nullptr, kTemperature, ws, kWorkspaceBytes,
                                   false, s),
          "OnlineSoftmax");
    check(fi::ChainSpeculativeSampling<float, int>(draftProbs, draftIds, targetProbs, outIds, accepted, emitted, b, k, v,
                                                   true, nullptr, kSeed, nullptr, off, s),
          "ChainSpeculativeSampling");
  };
  double us = graphUs(s, step);
  int token = -1;
  check(cudaMemcpyAsync(&token, outIds, sizeof token, cudaMemcpyDeviceToHost, s), "token");

  // Every replay repeats the graph's steps 0 .. kSteps-1 on the same inputs, so these
  // steps run once more eagerly on cleared counters give the timed run's mean. The
  // emitted count is the chain's accepted length; FlashInfer's accepted count also
  // counts drafts past the first rejection that pass their own test.
  check(cudaMemsetAsync(accepted, 0, b * sizeof(int), s), "clear");
  check(cudaMemsetAsync(emitted, 0, b * sizeof(int), s), "clear");
  for (uint64_t i = 0; i < kSteps; i++) step(i);
  std::vector<int> emittedHost(B);
  check(cudaMemcpyAsync(emittedHost.data(), emitted, b * sizeof(int), cudaMemcpyDeviceToHost, s), "counts");
  check(cudaStreamSynchronize(s), "counts");
  double sum = 0;
  for (int e : emittedHost) sum += e;
  const double acceptedLen = sum / ((double)B * kSteps);

  check(cudaFree(targetLogits), "free");
  check(cudaFree(targetProbs), "free");
  check(cudaFree(draftProbs), "free");
  check(cudaFree(draftIds), "free");
  check(cudaFree(outIds), "free");
  check(cudaFree(accepted), "free");
  check(cudaFree(emitted), "free");
  fprintf(stderr, "chain-verify V=%d B=%d K=%d: %.2f µs, %.3f drafts accepted per request\n", V, B, K, us, acceptedLen);
  char extra[96];
  snprintf(extra, sizeof extra, ", \"drafts\": %d, \"accepted_len\": %.4f", K, acceptedLen);
  return measurement(first, "flashinfer:chain-verify", V, B, us, token, extra);
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
  int chain = 4;
  const char* outPath = nullptr;
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    if (i + 1 < argc && a == "--vocab") {
      vocabs = parseList("--vocab", argv[++i]);
    } else if (i + 1 < argc && a == "--batch") {
      batches = parseList("--batch", argv[++i]);
    } else if (i + 1 < argc && a == "--chain") {
      char* rest;
      long n = strtol(argv[++i], &rest, 10);
      if (*argv[i] == '\0' || *rest != '\0' || n < 0 || n > 64) {
        fprintf(stderr, "flashinfer_peers: --chain %s: want a whole number of drafts, 0 (no chain-verify) to 64\n", argv[i]);
        return 2;
      }
      chain = (int)n;
    } else if (i + 1 < argc && a == "--out") {
      outPath = argv[++i];
    } else {
      fprintf(stderr, "usage: flashinfer_peers [--vocab 32768,65536,151936] [--batch 1,4,8,64] [--chain 4] [--out FILE]\n");
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
        json += measurement(json.empty(), p.route, V, B, us, token);
      }
      check(cudaFree(logits), "free");
      check(cudaFree(scaled), "free");
      check(cudaFree(probs), "free");
      check(cudaFree(tokens), "free");
      check(cudaFree(valid), "free");
      if (chain > 0) json += chainVerify(s, ws, V, B, chain, json.empty());
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
