package sampler

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/runtime"
)

// TestKernelStatusBadParams: the host checks temperature before launching, so status 3
// from the kernel names a row the device refused (buffers, flags, vocabulary), never a
// temperature.
func TestKernelStatusBadParams(t *testing.T) {
	tok, err := rowResult(7, -1, uint32(abi.StatusBadParams), 100)
	assert.Equal(t, int32(-1), tok)
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrKernelRejected)
	assert.NotErrorIs(t, err, ErrTemperature, "status 3 is not a temperature error")
	assert.Contains(t, err.Error(), "row 7:")
	assert.NotContains(t, err.Error(), "temperature")
}

// TestFreedLogitsBuffer: sampling from a freed buffer reports the buffer, not the
// temperature (issue 21).
func TestFreedLogitsBuffer(t *testing.T) {
	s, buf := freedBuffer(t)
	var res Result
	err := s.Sample(Logits{Data: buf, DType: Float32, Rows: 1, Vocab: 8}, []Params{{Temperature: 0.7, HasSeed: true}}, &res)
	if err != nil {
		// A host-side refusal of the freed buffer is fine too, as long as it does not
		// blame the temperature.
		assert.NotErrorIs(t, err, ErrTemperature)
		return
	}
	require.Len(t, res.Errs, 1)
	require.Error(t, res.Errs[0])
	assert.ErrorIs(t, res.Errs[0], ErrKernelRejected)
	assert.NotErrorIs(t, res.Errs[0], ErrTemperature)
	assert.Equal(t, int32(-1), res.Tokens[0])
}

// TestFreedLogitsBufferDistinct: SampleDistinct from a freed buffer names the kernel's
// refusal (the topn kernel's TopNRefused token), not a NaN row.
func TestFreedLogitsBufferDistinct(t *testing.T) {
	s, buf := freedBuffer(t)
	var res Result
	err := s.SampleDistinct(Logits{Data: buf, DType: Float32, Rows: 1, Vocab: 8}, []Params{{Temperature: 0.7, Seed: 3}}, 2, &res)
	if err != nil {
		assert.NotErrorIs(t, err, ErrNonFiniteLogit)
		return
	}
	assert.ErrorIs(t, res.Errs[0], ErrKernelRejected)
	assert.NotErrorIs(t, res.Errs[0], ErrNonFiniteLogit)
}

// TestHostTemperatureStillErrTemperature: the host's own check keeps ErrTemperature.
func TestHostTemperatureStillErrTemperature(t *testing.T) {
	dev := openCPU(t)
	s := newSampler(t, dev, Options{})
	buf := upload(t, dev, runtime.BytesOf([]float32{1, 2, 3, 4}))
	var res Result
	require.NoError(t, s.Sample(Logits{Data: buf, DType: Float32, Rows: 1, Vocab: 4}, []Params{{Temperature: -1}}, &res))
	assert.ErrorIs(t, res.Errs[0], ErrTemperature)
	assert.NotErrorIs(t, res.Errs[0], ErrKernelRejected)
}

// freedBuffer returns a sampler on the CPU device and a buffer of 8 float32 that has
// been freed.
func freedBuffer(t *testing.T) (*Sampler, runtime.Buffer) {
	t.Helper()
	dev := openCPU(t)
	s := newSampler(t, dev, Options{})
	buf, err := dev.Alloc(4 * 8)
	require.NoError(t, err)
	require.NoError(t, buf.Free())
	return s, buf
}
