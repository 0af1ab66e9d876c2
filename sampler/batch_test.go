package sampler

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// batchParams are the rows of the batch tests: every route, log-probabilities, top
// log-probabilities and penalties.
func batchParams(rows int) []Params {
	params := mixedParams(rows, 100)
	for i := range params {
		params[i].Logprobs = i%2 == 0
		params[i].TopLogprobs = (i % 3) * 2
		if i%4 == 1 {
			params[i].FrequencyPenalty, params[i].PresencePenalty, params[i].RepetitionPenalty = 0.7, 0.2, 1.3
		}
	}
	return params
}

// installBatchProcessors gives both samplers the same processors: tracked rows with
// penalties, a bias and a ban.
func installBatchProcessors(t *testing.T, vocab int, samplers ...*Sampler) {
	t.Helper()
	for _, s := range samplers {
		require.NoError(t, s.TrackTokens(1, vocab, []int32{1, 2, 3}))
		require.NoError(t, s.TrackTokens(5, vocab, nil))
		require.NoError(t, s.SetLogitBias(2, vocab, []int32{0, 9}, []float32{4, -2}))
		require.NoError(t, s.SetBannedTokens(3, vocab, []int32{4, 5, 6}))
	}
}

func TestBatchLaunchEqualsSample(t *testing.T) {
	dev := openCPU(t)
	const vocab, rows, launches = 700, 9, 4
	for _, draws := range []int{1, 3} {
		for _, opts := range []Options{{Seed: 41}, {Seed: 42, Policy: &forcedSplit, Split: On}, {Seed: 43, Gumbel: Off}, {Seed: 44}} {
			t.Run(fmt.Sprintf("draws=%d seed=%d", draws, opts.Seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(5, opts.Seed))
				logits := randomLogits(rng, rows, vocab, 2)
				if opts.Seed == 44 {
					// Logits near 1e6: gumbel_exact finishes every Gumbel draw (kernelsrc/ABI.md,
					// "Exact scores"), in the batch as in SampleN.
					for i := range logits {
						logits[i] = 1e6 + float32(rng.IntN(4))
					}
				}
				lg := Logits{Data: upload(t, dev, runtime.BytesOf(logits)), Rows: rows, Vocab: vocab}
				a, b := newSampler(t, dev, opts), newSampler(t, dev, opts)
				installBatchProcessors(t, vocab, a, b)
				batch, err := a.NewBatch(rows, vocab, Float32, draws)
				require.NoError(t, err)
				t.Cleanup(func() { _ = batch.Close() })
				params := batchParams(rows)
				for i, p := range params {
					require.NoError(t, batch.SetRow(i, p))
				}
				stepped := make([]Params, rows)
				var got, want Result
				countsA, countsB := make([]uint32, vocab), make([]uint32, vocab)
				for k := range launches {
					require.NoError(t, batch.Launch(lg))
					require.NoError(t, batch.Read(&got))
					for i, p := range params {
						stepped[i] = p
						stepped[i].Step += uint64(k * draws)
					}
					require.NoError(t, b.SampleN(lg, stepped, draws, &want))
					require.Equal(t, draws, got.Draws)
					assert.Equal(t, want.Tokens, got.Tokens, "launch %d", k)
					assert.Equal(t, want.Routes, got.Routes)
					for i := range rows {
						require.NoError(t, got.Errs[i], "row %d", i)
						for z := range draws {
							o := i*draws + z
							if params[i].Logprobs {
								assertRecord(t, want.Logprobs[o], got.Logprobs[o], fmt.Sprintf("launch %d row %d draw %d", k, i, z))
							} else {
								assert.True(t, isNaNRecord(got.Logprobs[o]))
							}
						}
						assert.Equal(t, want.Top[i].Count, got.Top[i].Count, "row %d", i)
						assert.Equal(t, want.Top[i].Tokens, got.Top[i].Tokens, "row %d", i)
					}
					for _, row := range []int{1, 5} {
						require.NoError(t, a.TokenCounts(row, countsA))
						require.NoError(t, b.TokenCounts(row, countsB))
						assert.Equal(t, countsB, countsA, "launch %d: row %d's device-kept counts", k, row)
					}
					// The device advanced every row's step by draws.
					record := make([]byte, rows*RowParamsSize)
					require.NoError(t, a.Stream().CopyToHost(record, batch.params, 0))
					require.NoError(t, a.Stream().Synchronize())
					for i, p := range params {
						step := binary.LittleEndian.Uint64(record[i*RowParamsSize+16:])
						assert.Equal(t, p.Step+uint64((k+1)*draws), step, "row %d's step after launch %d", i, k)
					}
				}
				// SetRow resets a row's step.
				require.NoError(t, batch.SetRow(0, params[0]))
				require.NoError(t, batch.Launch(lg))
				require.NoError(t, batch.Read(&got))
				require.NoError(t, b.SampleN(lg, params, draws, &want))
				assert.Equal(t, want.Tokens[:draws], got.Tokens[:draws])
			})
		}
	}
}

func TestBatchLaunchQueuesLaunchesOnly(t *testing.T) {
	dev := openCPU(t)
	const vocab, rows = 300, 4
	logits := make([]float32, rows*vocab)
	lg := Logits{Data: upload(t, dev, runtime.BytesOf(logits)), Rows: rows, Vocab: vocab}
	gumbel, topK := Params{Temperature: 1}, Params{Temperature: 1, TopK: 3}
	topP, topKP := Params{Temperature: 1, TopP: 0.5}, Params{Temperature: 1, TopK: 3, TopP: 0.5}
	tests := []struct {
		name   string
		gumbel Switch
		params []Params
		want   []string
	}{
		{"greedy and gumbel", On, []Params{{}, gumbel, gumbel, {}}, []string{"gumbel_argmax_f32", "gumbel_exact_f32"}},
		{"filtered only", On, []Params{topK, topK, topK, topK}, []string{"filtered_f32"}},
		{"mixed", On, []Params{topK, gumbel, {}, topK}, []string{"gumbel_argmax_f32", "filtered_f32", "gumbel_exact_f32"}},
		{"top-p alone: filter_max first", On, []Params{topP, gumbel, {}, topK}, []string{"gumbel_argmax_f32", "filter_max_f32", "filtered_f32", "gumbel_exact_f32"}},
		{"top-k and top-p: no filter_max", On, []Params{topKP, topKP, topK, gumbel}, []string{"gumbel_argmax_f32", "filtered_f32", "gumbel_exact_f32"}},
		{"top log-probabilities", On, []Params{gumbel, {TopLogprobs: 3}, gumbel, gumbel}, []string{"gumbel_argmax_f32", "topn_f32", "gumbel_exact_f32"}},
		{"gumbel off: categorical only", Off, []Params{topK, topP, gumbel, topKP}, []string{"categorical_f32"}},
		{"gumbel off: mixed", Off, []Params{topK, gumbel, {}, topP}, []string{"gumbel_argmax_f32", "categorical_f32", "gumbel_exact_f32"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recordingStream{Stream: dev.DefaultStream()}
			s := newSampler(t, dev, Options{Stream: rec, Gumbel: tc.gumbel})
			b, err := s.NewBatch(rows, vocab, Float32, 2)
			require.NoError(t, err)
			defer b.Close()
			for i, p := range tc.params {
				require.NoError(t, b.SetRow(i, p))
			}
			*rec = recordingStream{Stream: rec.Stream}
			require.NoError(t, b.Launch(lg))
			assert.Equal(t, tc.want, rec.launches)
			for _, y := range rec.ys {
				assert.Equal(t, rows, y, "every launch spans the whole batch")
			}
			assert.Zero(t, rec.uploads+rec.downs+rec.zeroes+rec.syncs, "Launch only launches")
			var res Result
			require.NoError(t, b.Read(&res))
			for i, p := range tc.params {
				require.NoError(t, res.Errs[i])
				assert.Equal(t, s.RouteFor(p, vocab), res.Routes[i], "row %d", i)
			}
		})
	}
}

// TestBatchSetRowMovesRowsBetweenKernels: SetRow over a row takes its old parameters out
// of the launch counts, so a kernel (filter_max included) is launched exactly while
// some row needs it.
func TestBatchSetRowMovesRowsBetweenKernels(t *testing.T) {
	dev := openCPU(t)
	const vocab, rows = 200, 3
	rng := rand.New(rand.NewPCG(9, 1))
	logits := randomLogits(rng, rows, vocab, 2)
	lg := Logits{Data: upload(t, dev, runtime.BytesOf(logits)), Rows: rows, Vocab: vocab}
	rec := &recordingStream{Stream: dev.DefaultStream()}
	s := newSampler(t, dev, Options{Stream: rec, Seed: 3})
	b, err := s.NewBatch(rows, vocab, Float32, 1)
	require.NoError(t, err)
	defer b.Close()
	seeded := func(p Params) Params { p.Seed, p.HasSeed = 77, true; return p }
	steps := []struct {
		name string
		row  int
		p    Params
		want []string
	}{
		{"start", -1, Params{}, []string{"gumbel_argmax_f32", "filter_max_f32", "filtered_f32", "gumbel_exact_f32"}},
		{"top-p row gets a top-k", 1, seeded(Params{Temperature: 1, TopK: 10, TopP: 0.8}), []string{"gumbel_argmax_f32", "filtered_f32", "gumbel_exact_f32"}},
		{"top-k row becomes min-p", 2, seeded(Params{Temperature: 0.9, MinP: 0.1}), []string{"gumbel_argmax_f32", "filter_max_f32", "filtered_f32", "gumbel_exact_f32"}},
		{"gumbel row becomes filtered", 0, seeded(Params{Temperature: 1, TopK: 5}), []string{"filter_max_f32", "filtered_f32"}},
		{"every filter off", -2, Params{}, []string{"gumbel_argmax_f32", "gumbel_exact_f32"}},
	}
	params := []Params{seeded(Params{Temperature: 1}), seeded(Params{Temperature: 1, TopP: 0.8}), seeded(Params{Temperature: 1, TopK: 7})}
	launched := make([]uint64, rows)
	for _, st := range steps {
		switch st.row {
		case -1:
		case -2:
			for i := range params {
				params[i] = seeded(Params{Temperature: 1})
			}
		default:
			params[st.row] = st.p
		}
		for i, p := range params {
			if st.row < 0 || i == st.row {
				require.NoError(t, b.SetRow(i, p), st.name)
				launched[i] = 0 // SetRow resets the row's step
			}
		}
		*rec = recordingStream{Stream: rec.Stream}
		require.NoError(t, b.Launch(lg), st.name)
		assert.Equal(t, st.want, rec.launches, st.name)
		var res Result
		require.NoError(t, b.Read(&res))
		for i, p := range params {
			require.NoError(t, res.Errs[i], "%s: row %d", st.name, i)
			p.Step += launched[i] // the device advanced the step after each launch
			launched[i]++
			want, _ := refSample(logits[i*vocab:(i+1)*vocab], p, res.Routes[i], 3)
			assert.Equal(t, want, res.Tokens[i], "%s: row %d (%s)", st.name, i, res.Routes[i])
		}
	}
}

func TestBatchBadInput(t *testing.T) {
	dev := openCPU(t)
	s := newSampler(t, dev, Options{})
	const vocab = 50
	for _, tc := range []struct {
		name               string
		rows, vocab, draws int
		dtype              DType
	}{
		{"no rows", 0, vocab, 1, Float32},
		{"too many rows", maxRowsPerLaunch + 1, vocab, 1, Float32},
		{"no vocab", 2, 0, 1, Float32},
		{"bad dtype", 2, vocab, 1, BFloat16 + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.NewBatch(tc.rows, tc.vocab, tc.dtype, tc.draws)
			assert.ErrorIs(t, err, ErrShape)
		})
	}
	b, err := s.NewBatch(2, vocab, Float32, 1)
	require.NoError(t, err)
	logits := make([]float32, 2*vocab)
	lg := Logits{Data: upload(t, dev, runtime.BytesOf(logits)), Rows: 2, Vocab: vocab}
	assert.ErrorIs(t, b.Launch(lg), ErrRowNotSet)
	assert.ErrorIs(t, b.SetRow(2, Params{}), ErrRow)
	assert.ErrorIs(t, b.SetRow(-1, Params{}), ErrRow)
	assert.ErrorIs(t, b.SetRow(0, Params{Temperature: -1}), ErrTemperature)
	assert.ErrorIs(t, b.SetRow(0, Params{RepetitionPenalty: -1}), ErrPenalty)
	assert.ErrorIs(t, b.SetRow(0, Params{TopLogprobs: 21}), ErrTopLogprobs)
	require.NoError(t, b.SetRow(0, Params{}))
	assert.ErrorIs(t, b.Launch(lg), ErrRowNotSet, "row 1 still unset")
	require.NoError(t, b.SetRow(1, Params{Temperature: 1}))
	require.NoError(t, b.Launch(lg))
	assert.ErrorIs(t, b.Launch(Logits{Data: lg.Data, Rows: 1, Vocab: 2 * vocab}), ErrShape)
	assert.ErrorIs(t, b.Launch(Logits{Data: lg.Data, Rows: 2, Vocab: vocab - 1}), ErrShape)
	assert.ErrorIs(t, b.Launch(Logits{Data: lg.Data, Rows: 2, Vocab: vocab, DType: BFloat16}), ErrShape)
	assert.ErrorIs(t, b.Read(nil), ErrShape)
	// The batch holds the processors' vocabulary.
	assert.ErrorIs(t, s.SetLogitBias(0, vocab+1, []int32{1}, []float32{1}), ErrShape)
	require.NoError(t, b.Close())
	require.NoError(t, b.Close(), "closing twice")
	assert.ErrorIs(t, b.Launch(lg), ErrClosed)
	require.NoError(t, s.SetLogitBias(0, vocab+1, []int32{1}, []float32{1}), "free again once the batch is closed")
}

func TestBatchFreezesProcessorBuffers(t *testing.T) {
	dev := openCPU(t)
	s := newSampler(t, dev, Options{})
	const vocab = 64
	b, err := s.NewBatch(4, vocab, Float32, 1)
	require.NoError(t, err)
	before := [...]runtime.Buffer{s.procs.bias.buf, s.procs.counts.buf, s.procs.mask.buf}
	require.NoError(t, s.SetLogitBias(3, vocab, []int32{1}, []float32{2}), "a row of the batch")
	require.NoError(t, s.TrackTokens(0, vocab, []int32{5}))
	assert.ErrorIs(t, s.SetLogitBias(40, vocab, []int32{1}, []float32{2}), ErrRow, "past the reservation")
	assert.ErrorIs(t, s.TrackTokens(4, vocab, nil), ErrRow)
	_, err = s.NewBatch(8, vocab, Float32, 1)
	assert.ErrorIs(t, err, ErrRow, "a larger batch would move the buffers")
	small, err := s.NewBatch(2, vocab, Float32, 1)
	require.NoError(t, err, "a smaller batch fits")
	assert.Equal(t, before, [...]runtime.Buffer{s.procs.bias.buf, s.procs.counts.buf, s.procs.mask.buf}, "the buffers never moved")
	require.NoError(t, small.Close())
	require.NoError(t, b.Close())
	require.NoError(t, s.SetLogitBias(40, vocab, []int32{1}, []float32{2}), "no batch open: the buffers grow")
	counts := make([]uint32, vocab)
	require.NoError(t, s.TokenCounts(0, counts))
	assert.Equal(t, uint32(countSeen), counts[5], "growth kept the state")
	require.NoError(t, s.SetLogitBias(3, vocab, nil, nil))
	var res Result
	logits := make([]float32, 41*vocab)
	params := make([]Params, 41)
	require.NoError(t, s.SampleFloat32(logits, vocab, params, &res))
	assert.Equal(t, int32(1), res.Tokens[40], "row 40's bias")
	assert.Equal(t, int32(0), res.Tokens[3], "row 3's bias cleared")
}
