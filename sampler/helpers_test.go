package sampler

import (
	"math/rand/v2"
	"testing"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/cpu"
	"github.com/stretchr/testify/require"
)

// bigVocab is Qwen's vocabulary size, the size the split phase is tuned for.
const bigVocab = 151936

// openCPU opens the CPU device for one test.
func openCPU(t testing.TB) runtime.Device {
	t.Helper()
	dev, err := cpu.Open()
	require.NoError(t, err)
	t.Cleanup(func() { _ = dev.Close() })
	return dev
}

// newSampler makes a sampler that the test closes.
func newSampler(t testing.TB, dev runtime.Device, opts Options) *Sampler {
	t.Helper()
	s, err := New(dev, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// forcedSplit splits every row into as many blocks as it has elements, up to 64: the
// split phase even for tiny vocabularies and big batches.
var forcedSplit = SplitPolicy{TargetBlocks: 1 << 20, MinElementsPerBlock: 1, MaxBlocksPerRow: 64}

// randomLogits returns rows x vocab logits, normal with the given spread.
func randomLogits(rng *rand.Rand, rows, vocab int, spread float64) []float32 {
	out := make([]float32, rows*vocab)
	for i := range out {
		out[i] = float32(rng.NormFloat64() * spread)
	}
	return out
}

// upload copies host bytes into a new device buffer that the test frees.
func upload(t testing.TB, dev runtime.Device, src []byte) runtime.Buffer {
	t.Helper()
	buf, err := dev.Alloc(len(src))
	require.NoError(t, err)
	t.Cleanup(func() { _ = buf.Free() })
	st := dev.DefaultStream()
	require.NoError(t, st.CopyToDevice(buf, 0, src))
	require.NoError(t, st.Synchronize())
	return buf
}

// paramKinds are the row settings the batch tests cycle through: every route, every
// filter and both seed sources.
var paramKinds = []Params{
	{Temperature: 0},
	{Temperature: 0.7, HasSeed: true},
	{Temperature: 1.3},
	{Temperature: 0.9, TopK: 50, HasSeed: true},
	{Temperature: 1, TopP: 0.9, HasSeed: true},
	{Temperature: 1.1, MinP: 0.05},
	{Temperature: 0.8, TopK: 40, TopP: 0.95, MinP: 0.02, HasSeed: true},
	{Temperature: 0.5, TopK: 1, HasSeed: true},
	{Temperature: 2, TopP: 0.3},
	{Temperature: 1, TopK: 3},
}

// mixedParams returns n rows cycling through paramKinds, each with its own seed (or
// request id) and the given step.
func mixedParams(n int, step uint64) []Params {
	out := make([]Params, n)
	for i := range out {
		p := paramKinds[i%len(paramKinds)]
		p.Seed = 1000 + uint64(i)*7919
		p.RequestID = 50 + uint64(i)
		p.Step = step
		out[i] = p
	}
	return out
}

// sampleOne samples each row of a host batch alone, in a batch of one, with a default
// sampler: the tokens every other arrangement must reproduce.
func sampleOne(t testing.TB, s *Sampler, logits []float32, vocab int, params []Params) []int32 {
	t.Helper()
	out := make([]int32, len(params))
	var res Result
	for i := range params {
		require.NoError(t, s.SampleFloat32(logits[i*vocab:(i+1)*vocab], vocab, params[i:i+1], &res))
		require.NoError(t, res.Errs[0], "row %d", i)
		out[i] = res.Tokens[0]
	}
	return out
}
