package gumbel_test

import (
	"fmt"
	"log"

	"github.com/gumbel-go/gumbel"
	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/sampler"
)

// Sample three decode steps of a small batch, one row per route. The example names the
// CPU device so that its output is the same on every machine; leave Backend empty to
// take a GPU when one opens. A row's tokens depend only on its logits, its parameters
// and its seed and step, never on the rows it shares a batch with.
func Example() {
	dev, err := gumbel.Open(runtime.OpenOptions{Backend: "cpu"})
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	s, err := sampler.New(dev, sampler.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	const vocab = 6
	logits := []float32{
		0.5, 2.0, -1.0, 3.5, 0.0, 1.0, // row 0
		1.0, 1.0, 1.0, 1.0, 1.0, 1.0, // row 1
		4.0, -2.0, 0.5, 3.9, 0.0, -1.0, // row 2
	}
	params := []sampler.Params{
		{Temperature: 0}, // greedy: the largest logit
		{Temperature: 1, Seed: 42, HasSeed: true},                       // Gumbel-max
		{Temperature: 0.7, TopK: 2, TopP: 0.9, Seed: 42, HasSeed: true}, // filtered: tokens 0 or 3
	}
	var res sampler.Result // reused: steady-state calls allocate nothing
	for step := uint64(0); step < 3; step++ {
		for i := range params {
			params[i].Step = step
		}
		if err := s.SampleFloat32(logits, vocab, params, &res); err != nil {
			log.Fatal(err)
		}
		fmt.Println("step", step, "tokens", res.Tokens, "routes", res.Routes)
	}
	// Output:
	// step 0 tokens [3 4 0] routes [greedy gumbel filtered]
	// step 1 tokens [3 4 0] routes [greedy gumbel filtered]
	// step 2 tokens [3 0 0] routes [greedy gumbel filtered]
}
