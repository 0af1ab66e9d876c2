package sampler_test

import (
	"fmt"
	"log"

	"github.com/gumbel-go/gumbel/runtime/cpu"
	"github.com/gumbel-go/gumbel/sampler"
)

// A batch of three rows over a vocabulary of eight tokens, each row with its own
// parameters: greedy, Gumbel-max with its own seed, and top-k sampling with a seed
// derived from the request id. The same seeds and steps give the same tokens on every
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
	// row 2: categorical token 5, err <nil>
}
