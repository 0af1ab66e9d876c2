// llamacpp_style.cpp: llama.cpp's CPU sampler chains, written for gumbel's benchmark from
// the description of llama.cpp's src/llama-sampling.cpp (not llama.cpp's code), timed on
// one thread on LLM-shaped logits and printed as JSON in gumbel's bench.Measurement schema
// for `gumbel bench --compare`.
//
// Per row, as llama.cpp's common sampler does, a reused array of {id, logit, p} is filled
// from the row's logits, then the chain runs in llama.cpp's default order (top-k, top-p,
// min-p, temperature, dist):
//
//   llamacpp:greedy          argmax over the array
//   llamacpp:temp+dist       temperature 0.8, dist
//   llamacpp:topk40-topp0.9  top-k 40 (std::partial_sort), top-p 0.9 over the 40 sorted
//                            candidates (softmax at temperature 1, as llama.cpp's top-p
//                            sees the logits before the temperature), temperature 0.8, dist
//   llamacpp:minp0.05        min-p 0.05 without sorting (keep logit >= max + log 0.05),
//                            temperature 0.8, dist
//
// dist is llama.cpp's: max, expf, a double sum, then one pass that finds the token where
// the running sum passes sum * u (u from std::mt19937 and uniform_real_distribution<double>)
// and normalises the probabilities.
//
// Logits: like gumbel's bench.LLMLogits (normal body, sd 2.5; 8 strong tokens of 12..18 per
// row, every row different), drawn here with std::mt19937_64, so not the same numbers.
//
// A step samples one token for each of the batch's rows. Per configuration and point, the
// harness runs warm-up steps, then --groups groups of --repeats steps; device_us and
// host_us are both the median group's time per step in µs (there is no device: the wall
// time on this thread). allocs_per_call is 0 (Go heap allocations, not measured here).
//
// Build and run: bash bench/peers/cpu/llamacpp.sh [flags], or
//   g++ -O3 -march=native -std=c++17 -o llamacpp_style llamacpp_style.cpp
//   ./llamacpp_style --vocab 151936 --batch 1,8 [--groups 15] [--repeats 5]
//                    [--configs greedy,temp,topk40-topp0.9,minp0.05] [--out FILE]
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

const float kTemperature = 0.8f;
const int kTopK = 40;
const float kTopP = 0.9f;
const float kMinP = 0.05f;

// candidate is llama.cpp's llama_token_data: a token, its logit and its probability.
struct candidate {
  int id;
  float logit;
  float p;
};

// candidates is llama.cpp's llama_token_data_array over a reused buffer.
struct candidates {
  candidate* data;
  size_t size;
  long selected;
  bool sorted;
};

void apply_temperature(candidates& c, float t) {
  for (size_t i = 0; i < c.size; ++i) c.data[i].logit /= t;
}

// sample_dist draws a token from the softmax of the candidates' logits.
void sample_dist(candidates& c, std::mt19937& rng) {
  if (c.size == 1) {
    c.data[0].p = 1;
    c.selected = 0;
    return;
  }
  float top = c.data[0].logit;
  if (!c.sorted) {
    for (size_t i = 1; i < c.size; ++i) top = std::max(top, c.data[i].logit);
  }
  double total = 0;
  for (size_t i = 0; i < c.size; ++i) {
    const float e = expf(c.data[i].logit - top);
    c.data[i].p = e;
    total += e;
  }
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  const double target = total * uniform(rng);
  double run = 0;
  long pick = -1;
  for (size_t i = 0; i < c.size; ++i) {
    if (pick < 0) {
      run += c.data[i].p;
      if (run >= target) pick = (long)i;
    }
    c.data[i].p = (float)(c.data[i].p / total);
  }
  c.selected = pick < 0 ? (long)c.size - 1 : pick;
}

// keep_top_k keeps the k highest logits, sorted in descending order.
void keep_top_k(candidates& c, int k) {
  const size_t n = std::min((size_t)k, c.size);
  if (!c.sorted) {
    std::partial_sort(c.data, c.data + n, c.data + c.size,
                      [](const candidate& a, const candidate& b) { return a.logit > b.logit; });
    c.sorted = true;
  }
  c.size = n;
}

// keep_top_p keeps the shortest sorted prefix whose probability reaches p; the candidates
// must be sorted (after keep_top_k).
void keep_top_p(candidates& c, float p) {
  const float top = c.data[0].logit;
  float total = 0;
  for (size_t i = 0; i < c.size; ++i) {
    c.data[i].p = expf(c.data[i].logit - top);
    total += c.data[i].p;
  }
  float cum = 0;
  for (size_t i = 0; i < c.size; ++i) {
    c.data[i].p /= total;
    cum += c.data[i].p;
    if (cum >= p) {
      c.size = i + 1;
      return;
    }
  }
}

// keep_min_p keeps, without sorting, the candidates whose probability is at least p times
// the highest: logit >= max + log p. kept is reused between calls.
void keep_min_p(candidates& c, float p, std::vector<candidate>& kept) {
  float top = c.data[0].logit;
  for (size_t i = 1; i < c.size; ++i) top = std::max(top, c.data[i].logit);
  const float floor = top + logf(p);
  kept.clear();
  for (size_t i = 0; i < c.size; ++i) {
    if (c.data[i].logit >= floor) kept.push_back(c.data[i]);
  }
  std::copy(kept.begin(), kept.end(), c.data);
  c.size = kept.size();
}

enum chain { GREEDY, TEMP, TOPK_TOPP, MINP };

struct config {
  const char* flag;   // its name in --configs
  const char* route;  // its route in the JSON
  chain ch;
};

const config kConfigs[] = {
    {"greedy", "llamacpp:greedy", GREEDY},
    {"temp", "llamacpp:temp+dist", TEMP},
    {"topk40-topp0.9", "llamacpp:topk40-topp0.9", TOPK_TOPP},
    {"minp0.05", "llamacpp:minp0.05", MINP},
};

// llm_logits fills rows x vocab LLM-shaped logits: normal, sd 2.5, with 8 strong tokens
// of 12..18 in every row.
std::vector<float> llm_logits(int rows, int vocab, unsigned long long seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> body(0.0f, 2.5f);
  std::uniform_real_distribution<float> strong(12.0f, 18.0f);
  std::uniform_int_distribution<int> where(0, vocab - 1);
  std::vector<float> out((size_t)rows * vocab);
  for (int r = 0; r < rows; ++r) {
    float* row = out.data() + (size_t)r * vocab;
    for (int i = 0; i < vocab; ++i) row[i] = body(g);
    for (int j = 0; j < 8; ++j) row[where(g)] = strong(g);
  }
  return out;
}

// sampler runs one chain on rows of one vocabulary, with its buffers reused across calls.
struct sampler {
  chain ch;
  int vocab;
  std::vector<candidate> buf;
  std::vector<candidate> kept;
  std::mt19937 rng{7};

  sampler(chain c, int v) : ch(c), vocab(v), buf(v) { kept.reserve(v); }

  int sample_row(const float* logits) {
    for (int i = 0; i < vocab; ++i) buf[i] = candidate{i, logits[i], 0.0f};
    candidates c{buf.data(), (size_t)vocab, -1, false};
    switch (ch) {
      case GREEDY: {
        size_t best = 0;
        for (size_t i = 1; i < c.size; ++i) {
          if (c.data[i].logit > c.data[best].logit) best = i;
        }
        c.selected = (long)best;
        break;
      }
      case TEMP:
        apply_temperature(c, kTemperature);
        sample_dist(c, rng);
        break;
      case TOPK_TOPP:
        keep_top_k(c, kTopK);
        keep_top_p(c, kTopP);
        apply_temperature(c, kTemperature);
        sample_dist(c, rng);
        break;
      case MINP:
        keep_min_p(c, kMinP, kept);
        apply_temperature(c, kTemperature);
        sample_dist(c, rng);
        break;
    }
    return c.data[c.selected].id;
  }
};

std::vector<int> parse_ints(const char* flag, const std::string& s) {
  std::vector<int> out;
  size_t at = 0;
  while (at <= s.size()) {
    size_t end = s.find(',', at);
    if (end == std::string::npos) end = s.size();
    std::string f = s.substr(at, end - at);
    if (!f.empty()) {
      char* rest = nullptr;
      long n = strtol(f.c_str(), &rest, 10);
      if (*rest != '\0' || n < 1 || n > (1L << 24)) {
        fprintf(stderr, "llamacpp_style: %s %s: want whole numbers from 1 to %ld\n", flag, f.c_str(), 1L << 24);
        exit(2);
      }
      out.push_back((int)n);
    }
    at = end + 1;
  }
  if (out.empty()) {
    fprintf(stderr, "llamacpp_style: %s: empty\n", flag);
    exit(2);
  }
  return out;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= s.size()) {
    size_t end = s.find(',', at);
    if (end == std::string::npos) end = s.size();
    if (end > at) out.push_back(s.substr(at, end - at));
    at = end + 1;
  }
  return out;
}

void usage() {
  fprintf(stderr,
          "usage: llamacpp_style [--vocab 151936] [--batch 1,8] [--groups 15] [--repeats 5] [--warmup 3]\n"
          "                      [--configs greedy,temp,topk40-topp0.9,minp0.05] [--out FILE]\n");
  exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  std::string vocabs = "151936", batches = "1,8", configs = "greedy,temp,topk40-topp0.9,minp0.05", out_path;
  int groups = 15, repeats = 5, warmup = 3;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") usage();
    if (i + 1 >= argc) usage();
    std::string v = argv[++i];
    if (a == "--vocab") vocabs = v;
    else if (a == "--batch") batches = v;
    else if (a == "--configs") configs = v;
    else if (a == "--out") out_path = v;
    else if (a == "--groups") groups = parse_ints("--groups", v)[0];
    else if (a == "--repeats") repeats = parse_ints("--repeats", v)[0];
    else if (a == "--warmup") warmup = atoi(v.c_str());
    else usage();
  }
  std::vector<const config*> chosen;
  for (const std::string& name : split(configs)) {
    const config* found = nullptr;
    for (const config& c : kConfigs) {
      if (name == c.flag) found = &c;
    }
    if (!found) {
      fprintf(stderr, "llamacpp_style: --configs %s: not one of greedy, temp, topk40-topp0.9, minp0.05\n", name.c_str());
      return 2;
    }
    chosen.push_back(found);
  }

  std::string json = "{\"backend\": \"cpu\", \"peer\": \"llama.cpp-style\", \"threads\": 1, \"temperature\": 0.8, \"measurements\": [";
  bool first = true;
  long sink = 0;
  for (int vocab : parse_ints("--vocab", vocabs)) {
    for (int batch : parse_ints("--batch", batches)) {
      const std::vector<float> logits = llm_logits(batch, vocab, (unsigned long long)vocab * 1000 + batch);
      for (const config* cfg : chosen) {
        sampler s(cfg->ch, vocab);
        int token = 0;
        auto step = [&]() {
          for (int r = 0; r < batch; ++r) {
            int t = s.sample_row(logits.data() + (size_t)r * vocab);
            if (r == 0) token = t;
            sink += t;
          }
        };
        for (int w = 0; w < warmup; ++w) step();
        std::vector<double> per_step(groups);
        for (int g = 0; g < groups; ++g) {
          auto t0 = std::chrono::steady_clock::now();
          for (int k = 0; k < repeats; ++k) step();
          auto t1 = std::chrono::steady_clock::now();
          per_step[g] = std::chrono::duration<double, std::micro>(t1 - t0).count() / repeats;
        }
        std::sort(per_step.begin(), per_step.end());
        const size_t n = per_step.size();
        const double us = n % 2 ? per_step[n / 2] : (per_step[n / 2 - 1] + per_step[n / 2]) / 2;
        fprintf(stderr, "%-26s V=%-7d B=%-3d %10.2f us/step %8.3f ms/row\n", cfg->route, vocab, batch, us, us / 1e3 / batch);
        char line[512];
        snprintf(line, sizeof line,
                 "%s\n  {\"route\": \"%s\", \"vocab\": %d, \"batch\": %d, \"dtype\": \"float32\", \"device_us\": %.3f, "
                 "\"host_us\": %.3f, \"allocs_per_call\": 0, \"token\": %d}",
                 first ? "" : ",", cfg->route, vocab, batch, us, us, token);
        json += line;
        first = false;
      }
    }
  }
  json += "\n]}\n";
  if (sink == 42) fputc(' ', stderr);  // keep the samples observable
  if (out_path.empty()) {
    fputs(json.c_str(), stdout);
    return 0;
  }
  FILE* f = fopen(out_path.c_str(), "w");
  if (!f || fputs(json.c_str(), f) < 0 || fclose(f) != 0) {
    fprintf(stderr, "llamacpp_style: --out %s: %s\n", out_path.c_str(), strerror(errno));
    return 1;
  }
  fprintf(stderr, "wrote %s\n", out_path.c_str());
  return 0;
}
