// Command ollama is a CPU peer of gumbel's benchmark: the algorithm of ollama's former
// pure-Go sampler, written here from its description (not ollama's code), timed on one
// goroutine on the same logits as `gumbel bench` (bench.LLMLogits, the same seeds), and
// printed as JSON in gumbel's bench.Measurement schema for `gumbel bench --compare`.
//
// One row is sampled the way that sampler did: greedy is a plain scan of the logits for
// the highest; any other configuration copies the row into a fresh []token, keeps the
// top k with a min-heap (then sorts those k, highest first) where top-k is set, divides by
// the temperature, takes a softmax with math.Exp in float64, cuts the top-p prefix and
// the min-p tail, then draws with a cumulative sum and a binary search. The routes:
//
//	ollama:greedy          the scan
//	ollama:temp            temperature 0.8
//	ollama:topk40-topp0.9  top-k 40, top-p 0.9, temperature 0.8
//	ollama:minp0.05        min-p 0.05, temperature 0.8
//
// A step samples one token for each of the batch's rows. device_us and host_us are both
// the median group's wall time per step in µs, allocs_per_call the Go heap allocations per
// step.
//
//	go run ./bench/peers/cpu/ollama --vocab 151936 --batch 1,8 --out ollama.json
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gumbel-go/gumbel/bench"
)

// token is a candidate: its id and its logit, later its probability.
type token struct {
	id    int32
	value float32
}

// settings are one configuration of the sampler; temperature 0 is greedy.
type settings struct {
	topK              int
	temperature       float32
	topP, minP        float32
	route, configName string
}

var configs = []settings{
	{route: "ollama:greedy", configName: "greedy"},
	{route: "ollama:temp", configName: "temp", temperature: 0.8, topP: 1},
	{route: "ollama:topk40-topp0.9", configName: "topk40-topp0.9", topK: 40, temperature: 0.8, topP: 0.9},
	{route: "ollama:minp0.05", configName: "minp0.05", temperature: 0.8, topP: 1, minP: 0.05},
}

// greedy returns the index of the highest logit, the first of equals.
func greedy(logits []float32) int32 {
	best := 0
	for i, v := range logits {
		if v > logits[best] {
			best = i
		}
	}
	return int32(best)
}

// sample draws one token from logits under s with the random number source rng.
func sample(logits []float32, s settings, rng *rand.Rand) int32 {
	if s.temperature == 0 {
		return greedy(logits)
	}
	ts := make([]token, len(logits))
	for i, v := range logits {
		ts[i] = token{int32(i), v}
	}
	if s.topK > 0 && s.topK < len(ts) {
		ts = topK(ts, s.topK)
	}
	temperature(ts, s.temperature)
	softmax(ts)
	ts = topP(ts, s.topP)
	ts = minP(ts, s.minP)

	var sum float32
	for i := range ts {
		sum += ts[i].value
		ts[i].value = sum
	}
	target := rng.Float32() * sum
	i, _ := slices.BinarySearchFunc(ts, target, func(t token, x float32) int {
		if t.value < x {
			return -1
		}
		return 1
	})
	if i == len(ts) {
		i--
	}
	return ts[i].id
}

// topK returns the k highest tokens, highest first: a min-heap of the first k, each later
// token that beats the heap's least replacing it.
func topK(ts []token, k int) []token {
	h := make([]token, k)
	copy(h, ts[:k])
	for i := k/2 - 1; i >= 0; i-- {
		down(h, i)
	}
	for _, t := range ts[k:] {
		if t.value > h[0].value {
			h[0] = t
			down(h, 0)
		}
	}
	slices.SortFunc(h, func(a, b token) int {
		switch {
		case a.value > b.value:
			return -1
		case a.value < b.value:
			return 1
		}
		return 0
	})
	return h
}

// down restores the min-heap order of h below i.
func down(h []token, i int) {
	for {
		least, l, r := i, 2*i+1, 2*i+2
		if l < len(h) && h[l].value < h[least].value {
			least = l
		}
		if r < len(h) && h[r].value < h[least].value {
			least = r
		}
		if least == i {
			return
		}
		h[i], h[least] = h[least], h[i]
		i = least
	}
}

func temperature(ts []token, t float32) {
	t = max(t, 1e-7)
	for i := range ts {
		ts[i].value /= t
	}
}

// softmax turns the values into probabilities, each exp taken in float64.
func softmax(ts []token) {
	top := float32(math.Inf(-1))
	for _, t := range ts {
		top = max(top, t.value)
	}
	var sum float32
	for i := range ts {
		ts[i].value = float32(math.Exp(float64(ts[i].value - top)))
		sum += ts[i].value
	}
	for i := range ts {
		ts[i].value /= sum
	}
}

// topP keeps the shortest prefix whose probability passes p; ts must be sorted highest
// first (after topK), and p >= 1 keeps everything.
func topP(ts []token, p float32) []token {
	if p >= 1 {
		return ts
	}
	var cum float32
	for i, t := range ts {
		cum += t.value
		if cum > p {
			return ts[:i+1]
		}
	}
	return ts
}

// minP keeps the tokens whose probability is at least p times the highest; p <= 0 keeps
// everything.
func minP(ts []token, p float32) []token {
	if p <= 0 {
		return ts
	}
	var top float32
	for _, t := range ts {
		top = max(top, t.value)
	}
	out := ts[:0]
	for _, t := range ts {
		if t.value >= top*p {
			out = append(out, t)
		}
	}
	return out
}

// options are the command line's.
type options struct {
	vocabs, batches         []int
	groups, repeats, warmup int
	configs                 []settings
	out                     string
}

func parseFlags(args []string, w io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("ollama", flag.ContinueOnError)
	fs.SetOutput(w)
	vocabs := fs.String("vocab", "151936", "vocabulary sizes, comma-separated")
	batches := fs.String("batch", "1,8", "batch sizes, comma-separated")
	names := fs.String("configs", "greedy,temp,topk40-topp0.9,minp0.05", "configurations, comma-separated")
	fs.IntVar(&o.groups, "groups", 15, "timed groups per point; the median group is reported")
	fs.IntVar(&o.repeats, "repeats", 5, "steps per group")
	fs.IntVar(&o.warmup, "warmup", 3, "untimed steps first")
	fs.StringVar(&o.out, "out", "", "write the JSON to this file instead of stdout")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	var err error
	if o.vocabs, err = parseInts("--vocab", *vocabs); err != nil {
		return o, err
	}
	if o.batches, err = parseInts("--batch", *batches); err != nil {
		return o, err
	}
	if o.groups < 1 || o.repeats < 1 || o.warmup < 0 {
		return o, fmt.Errorf("--groups and --repeats must be at least 1, --warmup at least 0")
	}
	for _, n := range strings.Split(*names, ",") {
		if n = strings.TrimSpace(n); n == "" {
			continue
		}
		i := slices.IndexFunc(configs, func(s settings) bool { return s.configName == n })
		if i < 0 {
			return o, fmt.Errorf("--configs %q: not one of greedy, temp, topk40-topp0.9, minp0.05", n)
		}
		o.configs = append(o.configs, configs[i])
	}
	if o.configs == nil {
		return o, fmt.Errorf("--configs: empty")
	}
	return o, nil
}

func parseInts(name, s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 || n > 1<<24 {
			return nil, fmt.Errorf("%s %q: want whole numbers from 1 to %d", name, f, 1<<24)
		}
		out = append(out, n)
	}
	if out == nil {
		return nil, fmt.Errorf("%s: empty", name)
	}
	return out, nil
}

// measurement is bench.Measurement's JSON, what `gumbel bench --compare` reads.
type measurement struct {
	Route         string  `json:"route"`
	Vocab         int     `json:"vocab"`
	Batch         int     `json:"batch"`
	DType         string  `json:"dtype"`
	DeviceUs      float64 `json:"device_us"`
	HostUs        float64 `json:"host_us"`
	AllocsPerCall float64 `json:"allocs_per_call"`
	Token         int32   `json:"token"`
}

type report struct {
	Backend      string        `json:"backend"`
	Peer         string        `json:"peer"`
	Threads      int           `json:"threads"`
	Temperature  float64       `json:"temperature"`
	Measurements []measurement `json:"measurements"`
}

// measure times one configuration at one point.
func measure(s settings, logits []float32, vocab, batch int, o options) measurement {
	rng := rand.New(rand.NewPCG(3, 4))
	var first int32
	step := func() {
		for r := range batch {
			t := sample(logits[r*vocab:(r+1)*vocab], s, rng)
			if r == 0 {
				first = t
			}
		}
	}
	for range o.warmup {
		step()
	}
	perStep := make([]float64, o.groups)
	var before, after goruntime.MemStats
	goruntime.ReadMemStats(&before)
	for g := range perStep {
		t0 := time.Now()
		for range o.repeats {
			step()
		}
		perStep[g] = float64(time.Since(t0).Nanoseconds()) / 1e3 / float64(o.repeats)
	}
	goruntime.ReadMemStats(&after)
	us := math.Round(median(perStep)*1000) / 1000
	return measurement{Route: s.route, Vocab: vocab, Batch: batch, DType: "float32", DeviceUs: us, HostUs: us,
		AllocsPerCall: math.Round(float64(after.Mallocs-before.Mallocs)/float64(o.groups*o.repeats)*100) / 100, Token: first}
}

func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func run(args []string, stdout, stderr io.Writer) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	rep := report{Backend: "cpu", Peer: "ollama-style", Threads: 1, Temperature: 0.8, Measurements: []measurement{}}
	for _, v := range o.vocabs {
		for _, b := range o.batches {
			logits := bench.LLMLogits(b, v, uint64(v*1000+b)) // the seed bench.Matrix.Run uses
			for _, s := range o.configs {
				m := measure(s, logits, v, b, o)
				fmt.Fprintf(stderr, "%-24s V=%-7d B=%-3d %10.2f us/step %8.3f ms/row %6.1f allocs/step\n",
					m.Route, v, b, m.DeviceUs, m.DeviceUs/1e3/float64(b), m.AllocsPerCall)
				rep.Measurements = append(rep.Measurements, m)
			}
		}
	}
	js, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	js = append(js, '\n')
	if o.out == "" {
		_, err = stdout.Write(js)
		return err
	}
	if err := os.WriteFile(o.out, js, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "wrote %s\n", o.out)
	return nil
}

func main() {
	goruntime.GOMAXPROCS(1) // one thread, as the llama.cpp-style peer
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if err != flag.ErrHelp {
			fmt.Fprintln(os.Stderr, "ollama:", err)
		}
		os.Exit(2)
	}
}
