package sampler_test

import (
	"fmt"
	"log"
	"sync"

	"github.com/gumbel-go/gumbel/collective"
	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/cpu"
	"github.com/gumbel-go/gumbel/sampler"
)

// A batch of three rows over a vocabulary of eight tokens, each row with its own
// parameters: greedy, Gumbel-max with its own seed, and top-k sampling (the filtered
// route: Gumbel-max over the kept tokens) with a seed derived from the request id. The same seeds and steps give the same tokens on every
// device and in every batch.
func Example() {
	dev, err := cpu.Open()
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	s, err := sampler.New(dev, sampler.Options{Seed: 2024})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	const vocab = 8
	logits := []float32{
		0.1, 2.5, -1, 0.3, 2.5, 0, 1, -3, // greedy: the first of the two 2.5s
		1, 1, 1, 1, 1, 1, 1, 1, // uniform
		-2, 4, 3.5, 0, 1, 3.9, -1, 2, // top-3 keeps tokens 1, 2 and 5
	}
	params := []sampler.Params{
		{Temperature: 0},
		{Temperature: 1, Seed: 42, HasSeed: true, Step: 7},
		{Temperature: 0.8, TopK: 3, RequestID: 9, Step: 7},
	}
	var res sampler.Result // reuse across steps: it is not reallocated
	if err := s.SampleFloat32(logits, vocab, params, &res); err != nil {
		log.Fatal(err)
	}
	for i, tok := range res.Tokens {
		fmt.Printf("row %d: %-11s token %d, err %v\n", i, res.Routes[i], tok, res.Errs[i])
	}
	// Output:
	// row 0: greedy      token 1, err <nil>
	// row 1: gumbel      token 1, err <nil>
	// row 2: filtered    token 1, err <nil>
}

// newCPUSampler opens the CPU device and a sampler on it for the examples.
func newCPUSampler() (runtime.Device, *sampler.Sampler) {
	dev, err := cpu.Open()
	if err != nil {
		log.Fatal(err)
	}
	s, err := sampler.New(dev, sampler.Options{Seed: 2024})
	if err != nil {
		log.Fatal(err)
	}
	return dev, s
}

// Log-probabilities come out of the sampling pass itself: the token's log-probability
// under the raw logits and under the distribution it was drawn from (here the logits
// over the temperature), and, on request, the most likely raw tokens.
func Example_logprobs() {
	dev, s := newCPUSampler()
	defer dev.Close()
	defer s.Close()

	logits := []float32{2, 1, 0, -1, 3, 0.5}
	params := []sampler.Params{{Temperature: 0.5, Seed: 7, HasSeed: true, Logprobs: true, TopLogprobs: 3}}
	var res sampler.Result
	if err := s.SampleFloat32(logits, len(logits), params, &res); err != nil {
		log.Fatal(err)
	}
	lp := res.Logprobs[0]
	fmt.Printf("token %d: raw %.3f, at temperature 0.5 %.3f\n", res.Tokens[0], lp.Raw, lp.Processed)
	top := res.Top[0]
	for j := range top.Count {
		fmt.Printf("top %d: token %d %.3f\n", j, top.Tokens[j], top.Logprobs[j])
	}
	// Output:
	// token 4: raw -0.503, at temperature 0.5 -0.151
	// top 0: token 4 -0.503
	// top 1: token 0 -1.503
	// top 2: token 1 -2.503
}

// Logit processors live on the device, per logits row: a bias list, banned (or
// allowed) tokens, and token counts for repetition, frequency and presence penalties.
// A tracked row's counts are updated by the device after each draw.
func Example_processors() {
	dev, s := newCPUSampler()
	defer dev.Close()
	defer s.Close()

	const vocab = 6
	logits := []float32{3, 2.9, 1, 0, 0, 0}
	// Row 0: token 0 is banned and token 5 gets +4.
	if err := s.SetBannedTokens(0, vocab, []int32{0}); err != nil {
		log.Fatal(err)
	}
	if err := s.SetLogitBias(0, vocab, []int32{5}, []float32{4}); err != nil {
		log.Fatal(err)
	}
	// Row 0 also counts its tokens: a frequency penalty of 2 pushes a sampled token down.
	if err := s.TrackTokens(0, vocab, nil); err != nil {
		log.Fatal(err)
	}
	params := []sampler.Params{{Temperature: 0, FrequencyPenalty: 2}}
	var res sampler.Result
	for step := range 3 {
		params[0].Step = uint64(step)
		if err := s.SampleFloat32(logits, vocab, params, &res); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("step %d: token %d\n", step, res.Tokens[0])
	}
	counts := make([]uint32, vocab)
	if err := s.TokenCounts(0, counts); err != nil {
		log.Fatal(err)
	}
	fmt.Println("counts:", counts)
	// Output:
	// step 0: token 5
	// step 1: token 1
	// step 2: token 5
	// counts: [0 1 0 0 0 2]
}

// SampleN draws with replacement (each draw is the token a separate call at step+z
// would give); SampleDistinct draws without replacement (Gumbel-top-k: the first is
// the token Sample gives, the next ones are drawn from what is left).
func Example_draws() {
	dev, s := newCPUSampler()
	defer dev.Close()
	defer s.Close()

	logits := []float32{1, 1, 1, 1}
	params := []sampler.Params{{Temperature: 1, Seed: 3, HasSeed: true}}
	var with, without sampler.Result
	if err := s.SampleNFloat32(logits, len(logits), params, 4, &with); err != nil {
		log.Fatal(err)
	}
	if err := s.SampleDistinctFloat32(logits, len(logits), params, 4, &without); err != nil {
		log.Fatal(err)
	}
	fmt.Println("with replacement:   ", with.Tokens)
	fmt.Println("without replacement:", without.Tokens)
	// Output:
	// with replacement:    [0 0 2 2]
	// without replacement: [0 2 1 3]
}

// A Batch keeps every row's parameters on the device and advances each row's step
// there, so Launch queues kernels and nothing else: an engine can capture it in a CUDA
// graph (runtime.GraphCapturer) together with its decode step and replay it.
func ExampleBatch() {
	dev, s := newCPUSampler()
	defer dev.Close()
	defer s.Close()

	const rows, vocab = 2, 5
	host := []float32{
		0, 1, 2, 3, 4,
		4, 3, 2, 1, 0,
	}
	buf, err := dev.Alloc(4 * len(host))
	if err != nil {
		log.Fatal(err)
	}
	defer buf.Free()
	st := s.Stream()
	if err := st.CopyToDevice(buf, 0, runtime.BytesOf(host)); err != nil {
		log.Fatal(err)
	}
	b, err := s.NewBatch(rows, vocab, sampler.Float32, 1)
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()
	if err := b.SetRow(0, sampler.Params{Temperature: 0}); err != nil {
		log.Fatal(err)
	}
	if err := b.SetRow(1, sampler.Params{Temperature: 2, TopK: 3, Seed: 11, HasSeed: true}); err != nil {
		log.Fatal(err)
	}
	lg := sampler.Logits{Data: buf, DType: sampler.Float32, Rows: rows, Vocab: vocab}
	var res sampler.Result
	for step := range 3 {
		if err := b.Launch(lg); err != nil { // steps 0, 1, 2: advanced on the device
			log.Fatal(err)
		}
		if err := b.Read(&res); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("launch %d: %v\n", step, res.Tokens)
	}
	// Output:
	// launch 0: [4 0]
	// launch 1: [4 0]
	// launch 2: [4 1]
}

// Scoring: the log-probabilities and rank of given tokens (a prompt's, an evaluation's,
// a rollout's), one pass per row, nothing drawn. Processed log-probabilities follow the
// row's temperature (and processors and bitmask, when it has them); raw ones do not.
func ExampleSampler_Score() {
	dev, s := newCPUSampler()
	defer dev.Close()
	defer s.Close()

	const vocab = 4
	logits := []float32{
		2, 1, 0, -1, // token 0 is the most likely
		0, 0, 3, 0, // token 1 is tied with two others, below token 2
	}
	buf, err := dev.Alloc(4 * len(logits))
	if err != nil {
		log.Fatal(err)
	}
	defer buf.Free()
	if err := dev.DefaultStream().CopyToDevice(buf, 0, runtime.BytesOf(logits)); err != nil {
		log.Fatal(err)
	}
	params := []sampler.Params{{Temperature: 1}, {Temperature: 0.5}}
	var res sampler.Scores
	if err := s.Score(sampler.Logits{Data: buf, DType: sampler.Float32, Rows: 2, Vocab: vocab}, params, []int32{0, 1}, &res); err != nil {
		log.Fatal(err)
	}
	for i, lp := range res.Logprobs {
		fmt.Printf("row %d: raw %.3f, processed %.3f, rank %d\n", i, lp.Raw, lp.Processed, res.Ranks[i])
	}
	// Output:
	// row 0: raw -0.440, processed -0.440, rank 1
	// row 1: raw -3.139, processed -6.007, rank 4
}

// Speculative decoding: an n-gram drafter proposed two tokens; the target model's
// logits at the three positions decide how many are kept. A greedy request keeps
// exactly the drafts greedy decoding would have produced, then adds the target's own
// token; a sampled request keeps the drafts that equal what Sample draws at their
// positions (each with the target's probability of it), so it emits the tokens that
// sampling one step at a time with its seed would.
func ExampleSampler_VerifyChain() {
	dev, s := newCPUSampler()
	defer dev.Close()
	defer s.Close()

	const vocab = 5
	logits := []float32{
		// request 0, positions 0 to 2
		0, 4, 0, 0, 0, // arg-max 1: the draft 1 is kept
		0, 0, 0, 4, 0, // arg-max 3: the draft 2 is not
		0, 0, 0, 0, 4,
		// request 1, positions 0 to 2: the target is sure of each draft
		30, 0, 0, 0, 0,
		0, 30, 0, 0, 0,
		0, 0, 30, 0, 0,
	}
	buf, err := dev.Alloc(4 * len(logits))
	if err != nil {
		log.Fatal(err)
	}
	defer buf.Free()
	if err := dev.DefaultStream().CopyToDevice(buf, 0, runtime.BytesOf(logits)); err != nil {
		log.Fatal(err)
	}
	lg := sampler.Logits{Data: buf, DType: sampler.Float32, Rows: 6, Vocab: vocab}
	params := []sampler.Params{{Temperature: 0}, {Temperature: 0.8, Seed: 7, Step: 100}}
	drafts := []sampler.Draft{{Tokens: []int32{1, 2}, Row: 0}, {Tokens: []int32{0, 1}, Row: 3}}
	var res sampler.Verified
	if err := s.VerifyChain(lg, params, drafts, &res); err != nil {
		log.Fatal(err)
	}
	for b := range drafts {
		fmt.Printf("request %d: %d accepted, emits %v\n", b, res.Accepted[b], res.Tokens[b])
	}
	// Output:
	// request 0: 1 accepted, emits [1 3]
	// request 1: 2 accepted, emits [0 1 2]
}

// Speculative decoding with a draft model: the drafter sampled its two tokens from its
// own distributions, which VerifyChainProbs reads beside the target's logits. A draft
// the target finds likelier than the drafter did is always kept; at the first
// rejection the token comes from where the target has more mass than the drafter.
func ExampleSampler_VerifyChainProbs() {
	dev, s := newCPUSampler()
	defer dev.Close()
	defer s.Close()

	const vocab = 4
	logits := []float32{
		0, 9, 0, 0, // position 0: the target is sure of token 1
		0, 0, 0, 9, // position 1: and of token 3, not the draft's 2
		9, 0, 0, 0, // position 2: unused once a draft is rejected
	}
	probs := []float32{
		0.1, 0.6, 0.2, 0.1, // the drafter at position 0: it drew token 1
		0.1, 0.1, 0.7, 0.1, // at position 1: it drew token 2
	}
	upload := func(xs []float32, rows int) sampler.Logits {
		buf, err := dev.Alloc(4 * len(xs))
		if err != nil {
			log.Fatal(err)
		}
		if err := dev.DefaultStream().CopyToDevice(buf, 0, runtime.BytesOf(xs)); err != nil {
			log.Fatal(err)
		}
		return sampler.Logits{Data: buf, DType: sampler.Float32, Rows: rows, Vocab: vocab}
	}
	lg, draft := upload(logits, 3), upload(probs, 2)
	defer lg.Data.Free()
	defer draft.Data.Free()
	params := []sampler.Params{{Temperature: 1, Seed: 7, Step: 100}}
	drafts := []sampler.Draft{{Tokens: []int32{1, 2}, Row: 0, ProbsRow: 0}}
	var res sampler.Verified
	if err := s.VerifyChainProbs(lg, draft, params, drafts, &res); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d accepted, emits %v\n", res.Accepted[0], res.Tokens[0])
	// Output:
	// 1 accepted, emits [1 3]
}

// Tree drafts: the drafter proposed two alternatives for the next position and a
// follow-up to the second; a greedy request follows the branch the target agrees with.
func ExampleSampler_VerifyTree() {
	dev, s := newCPUSampler()
	defer dev.Close()
	defer s.Close()

	const vocab = 4
	logits := []float32{
		0, 0, 0, 5, // root: the target's next token is 3
		0, 0, 0, 0, // node 0 (token 1): not followed
		0, 6, 0, 0, // node 1 (token 3): the target's next token is 1
		0, 0, 4, 0, // node 2 (token 1 after node 1): then 2
	}
	buf, err := dev.Alloc(4 * len(logits))
	if err != nil {
		log.Fatal(err)
	}
	defer buf.Free()
	if err := dev.DefaultStream().CopyToDevice(buf, 0, runtime.BytesOf(logits)); err != nil {
		log.Fatal(err)
	}
	lg := sampler.Logits{Data: buf, DType: sampler.Float32, Rows: 4, Vocab: vocab}
	tree := sampler.DraftTree{Tokens: []int32{1, 3, 1}, Parents: []int32{-1, -1, 1}, Row: 0}
	var res sampler.Verified
	if err := s.VerifyTree(lg, []sampler.Params{{Temperature: 0}}, []sampler.DraftTree{tree}, &res); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("accepted nodes %v, emits %v\n", res.Nodes[0], res.Tokens[0])
	// Output:
	// accepted nodes [1 2], emits [3 1 2]
}

// Vocabulary-parallel sampling: two ranks each hold half of a vocabulary of eight tokens
// (as a tensor-parallel LM head leaves them), sample their shard with the same params,
// and merge through a communicator (here the in-process one; collective/nccl across
// GPUs). Every rank gets the token Sample gives over the whole vocabulary, filtered rows
// included.
func ExampleSampler_SampleShard() {
	dev, err := cpu.Open()
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	const vocab, half = 8, 4
	logits := []float32{
		-2, 4, 3.5, 0, 1, 3.9, -1, 2, // top-k 3 + top-p 0.9 keeps tokens among 1, 2 and 5
		0.5, 0, 1, 0.2, 3, -1, 2.5, 0.1, // greedy: token 4, in rank 1's half
	}
	params := []sampler.Params{
		{Temperature: 0.8, TopK: 3, TopP: 0.9, RequestID: 7, Step: 3},
		{Temperature: 0},
	}
	whole, err := sampler.New(dev, sampler.Options{Seed: 2024})
	if err != nil {
		log.Fatal(err)
	}
	defer whole.Close()
	var want sampler.Result
	if err := whole.SampleFloat32(logits, vocab, params, &want); err != nil {
		log.Fatal(err)
	}

	comms, err := collective.NewLocal(2)
	if err != nil {
		log.Fatal(err)
	}
	res := make([]sampler.Result, len(comms))
	var wg sync.WaitGroup
	for rank, c := range comms {
		// Rank r's columns of every row, in its own device buffer.
		var part []float32
		for row := range 2 {
			part = append(part, logits[row*vocab+rank*half:row*vocab+(rank+1)*half]...)
		}
		buf, err := dev.Alloc(4 * len(part))
		if err != nil {
			log.Fatal(err)
		}
		defer buf.Free()
		if err := dev.DefaultStream().CopyToDevice(buf, 0, runtime.BytesOf(part)); err != nil {
			log.Fatal(err)
		}
		s, err := sampler.New(dev, sampler.Options{Seed: 2024}) // the same seed on every rank
		if err != nil {
			log.Fatal(err)
		}
		defer s.Close()
		wg.Go(func() {
			defer c.Close()
			lg := sampler.Logits{Data: buf, DType: sampler.Float32, Rows: 2, Vocab: half}
			sh := sampler.Shard{Offset: rank * half, Global: vocab, Comm: c}
			if err := s.SampleShard(lg, params, sh, &res[rank]); err != nil {
				log.Fatal(err)
			}
		})
	}
	wg.Wait()
	fmt.Println("whole vocabulary:", want.Tokens)
	for rank := range res {
		fmt.Printf("rank %d: %v %v\n", rank, res[rank].Tokens, res[rank].Errs)
	}
	// Output:
	// whole vocabulary: [1 4]
	// rank 0: [1 4] [<nil> <nil>]
	// rank 1: [1 4] [<nil> <nil>]
}
