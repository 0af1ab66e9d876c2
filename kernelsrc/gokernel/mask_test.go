package gokernel

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
)

// The masks' vector code (maskApply, maskSkip) against the Go loops and the element-by-
// element definitions, on every start offset within a mask word, short and long lengths,
// and values and masks chosen to break it. Without vector code (other targets, purego)
// the same tests check the Go loops alone.

// maskSpecials are the values a mask must keep bit for bit, or hide and report: NaNs of
// both signs with payloads (quiet and signalling), infinities, signed zeros, denormals
// and the largest finite values.
var maskSpecials = []float32{
	float32(math.NaN()), math.Float32frombits(0xFFC00000), math.Float32frombits(0x7F800001),
	math.Float32frombits(0xFFBFFFFF), math.Float32frombits(0x7FC0DEAD),
	float32(math.Inf(1)), negInf, 0, float32(math.Copysign(0, -1)),
	math.SmallestNonzeroFloat32, -math.SmallestNonzeroFloat32, math.Float32frombits(0x007FFFFF),
	math.Float32frombits(0x807FFFFF), math.MaxFloat32, -math.MaxFloat32, 1, -1, 2.5,
}

// maskPatterns make one mask word: the whole-word cases, single bits, stripes and
// random bits of several densities.
var maskPatterns = []func(r *rand.Rand) uint32{
	func(r *rand.Rand) uint32 { return 0 },
	func(r *rand.Rand) uint32 { return ^uint32(0) },
	func(r *rand.Rand) uint32 { return 1 << r.IntN(32) },
	func(r *rand.Rand) uint32 { return ^uint32(1 << r.IntN(32)) },
	func(r *rand.Rand) uint32 { return 0x55555555 },
	func(r *rand.Rand) uint32 { return 0xAAAAAAAA },
	func(r *rand.Rand) uint32 { return 0x80000001 },
	func(r *rand.Rand) uint32 { return 0x0000FFFF << (8 * r.IntN(3)) },
	func(r *rand.Rand) uint32 { return r.Uint32() },
	func(r *rand.Rand) uint32 { return r.Uint32() & r.Uint32() & r.Uint32() },
	func(r *rand.Rand) uint32 { return r.Uint32() | r.Uint32() | r.Uint32() },
}

// randomMaskWords returns n mask words: one pattern for all (kind < len(maskPatterns))
// or a pattern drawn per word.
func randomMaskWords(r *rand.Rand, n, kind int) []uint32 {
	words := make([]uint32, n)
	for i := range words {
		k := kind
		if k >= len(maskPatterns) {
			k = r.IntN(len(maskPatterns))
		}
		words[i] = maskPatterns[k](r)
	}
	return words
}

// maskedProcessor is a processor with masks only: the mask, the bitmask or both (which
// = 0, 1, 2), of n words each.
func maskedProcessor(r *rand.Rand, n, which, kind int) processor {
	p := processor{active: true}
	if which != 1 {
		p.mask = randomMaskWords(r, n, kind)
	}
	if which != 0 {
		p.bitmask = randomMaskWords(r, n, kind)
		if which == 2 && kind < len(maskPatterns) && r.IntN(2) == 0 {
			p.bitmask = randomMaskWords(r, n, len(maskPatterns)) // two different masks ANDed
		}
	}
	return p
}

// fillMaskValues fills xs in one of several styles: LLM-like with favourites, coarse
// (ties at the best), specials sprinkled or everywhere, ramps, one value, -Inf only.
func fillMaskValues(r *rand.Rand, xs []float32, style int) {
	for i := range xs {
		switch style {
		case 0:
			xs[i] = float32(r.NormFloat64() * 2)
			if r.IntN(100) == 0 {
				xs[i] = 15 + 10*r.Float32()
			}
		case 1:
			xs[i] = float32(math.Round(r.NormFloat64()*4) / 4)
		case 2:
			xs[i] = float32(r.NormFloat64())
			if r.IntN(16) == 0 {
				xs[i] = maskSpecials[r.IntN(len(maskSpecials))]
			}
		case 3:
			xs[i] = maskSpecials[r.IntN(len(maskSpecials))]
		case 4:
			xs[i] = float32(i) * 0.25 // rising: every element a new best
		case 5:
			xs[i] = -float32(i) * 0.25
		case 6:
			xs[i] = 1.5
		case 7:
			xs[i] = negInf
		default:
			xs[i] = math.Float32frombits(r.Uint32()) // any bits: NaN payloads, denormals
		}
	}
}

const maskValueStyles = 9

// maskStyleStep is the stride through the value styles for each mask pattern: all of
// them, or under -short a third, which still meets every style with several patterns.
func maskStyleStep() int {
	if testing.Short() {
		return 3
	}
	return 1
}

// refMaskGroup is maskGroup by its definition, element by element.
func refMaskGroup(p *processor, xs []float32, base int) ([]float32, abi.Seen) {
	out := make([]float32, len(xs))
	var s abi.Seen
	for k, x := range xs {
		if !p.allowed(base + k) {
			s |= seen(x) & abi.SeenNonFinite
			x = negInf
		}
		out[k] = x
	}
	return out, s
}

// checkMaskGroup compares maskGroup and maskGroupGo with the definition on xs from
// global index base.
func checkMaskGroup(t *testing.T, p *processor, xs []float32, base int, what string) {
	t.Helper()
	want, wantSeen := refMaskGroup(p, xs, base)
	for _, f := range []struct {
		name string
		fn   func(xs []float32, base int, dst []float32) abi.Seen
	}{{"maskGroup", p.maskGroup}, {"maskGroupGo", p.maskGroupGo}} {
		got := make([]float32, len(xs)+1)
		got[len(xs)] = 7 // nothing written past the end
		s := f.fn(xs, base, got)
		if s != wantSeen { // plain comparisons: this runs a few hundred thousand times
			t.Fatalf("%s %s: base %d n %d: seen %v, want %v", f.name, what, base, len(xs), s, wantSeen)
		}
		for k := range xs {
			if math.Float32bits(want[k]) != math.Float32bits(got[k]) {
				t.Fatalf("%s %s: base %d n %d element %d (%s): got %#08x want %#08x", f.name, what, base, len(xs),
					base+k, maskBit(p, base+k), math.Float32bits(got[k]), math.Float32bits(want[k]))
			}
		}
		if got[len(xs)] != 7 {
			t.Fatalf("%s %s: base %d n %d: wrote past the end", f.name, what, base, len(xs))
		}
	}
}

func maskBit(p *processor, i int) string {
	if p.allowed(i) {
		return "allowed"
	}
	return "banned"
}

// TestMaskGroupVectorMatchesGo: every start offset in a word, every length 0 to 70,
// each mask pattern, mask, bitmask or both, each style of values (a third of the pairs
// under -short).
func TestMaskGroupVectorMatchesGo(t *testing.T) {
	r := rand.New(rand.NewPCG(51, 51))
	const words = 8
	xs := make([]float32, 32*words)
	for kind := range len(maskPatterns) + 1 {
		for style := kind % maskStyleStep(); style < maskValueStyles; style += maskStyleStep() {
			fillMaskValues(r, xs, style)
			p := maskedProcessor(r, words, (kind+style)%3, kind)
			for off := range 32 {
				for n := 0; n <= 70; n++ {
					base := off + 32*r.IntN(3)
					checkMaskGroup(t, &p, xs[base:base+n], base, fmt.Sprintf("pattern %d style %d", kind, style))
				}
			}
		}
	}
}

// TestMaskGroupHidden: a single banned NaN, +Inf, -Inf or finite value at every place
// of a row that is otherwise clean, in each of the four lanes' vectors of a word and in
// the head and tail, reports exactly what the definition does.
func TestMaskGroupHidden(t *testing.T) {
	r := rand.New(rand.NewPCG(52, 52))
	const n = 100
	xs := make([]float32, n+31)
	for _, base := range []int{0, 4, 7, 31} {
		for _, v := range maskSpecials {
			for at := range n {
				for i := range xs {
					xs[i] = float32(r.NormFloat64())
				}
				xs[at+base] = v
				words := make([]uint32, (len(xs)+31)/32)
				for i := range words {
					words[i] = r.Uint32()
				}
				i := at + base
				for _, allowed := range []bool{false, true} {
					if allowed {
						words[i>>5] |= 1 << (i & 31)
					} else {
						words[i>>5] &^= 1 << (i & 31)
					}
					p := processor{active: true, bitmask: words}
					checkMaskGroup(t, &p, xs[base:base+n], base, fmt.Sprintf("%v at %d allowed %v", v, i, allowed))
				}
			}
		}
	}
}

// refGreedyMasked is the masked greedy scan by its definition: mask element by element,
// then the plain greedy loop.
func refGreedyMasked(sc *gumbelScan, xs []float32, base, offset int, p *processor) {
	ys, s := refMaskGroup(p, xs, base)
	sc.seen |= s
	refGreedyScan(sc, ys, base, offset)
}

// maskScanStarts are running bests a chunk may start from: none, a finite one (with its
// SeenFinite), zeros of either sign, the largest finite value.
var maskScanStarts = []float32{negInf, 0, float32(math.Copysign(0, -1)), 1.5, -3, 4, math.MaxFloat32, -math.MaxFloat32}

func startScan(best float32) gumbelScan {
	sc := gumbelScan{bestScore: best}
	if best != negInf {
		sc.best, sc.seen = pack(best, 3), abi.SeenFinite
	}
	return sc
}

// TestScanGreedyMaskedVectorMatchesDefinition: one chunk at every start offset in a
// word and every length 0 to 70, from each kind of running best, with every mask
// pattern and style of values: the same key, best and observations as the definition.
func TestScanGreedyMaskedVectorMatchesDefinition(t *testing.T) {
	r := rand.New(rand.NewPCG(53, 53))
	const words = 8
	xs := make([]float32, 32*words)
	for kind := range len(maskPatterns) + 1 {
		for style := kind % maskStyleStep(); style < maskValueStyles; style += maskStyleStep() {
			fillMaskValues(r, xs, style)
			p := maskedProcessor(r, words, (kind+style)%3, kind)
			for off := range 32 {
				for n := 0; n <= 70; n++ {
					base := off + 32*r.IntN(3)
					start := maskScanStarts[r.IntN(len(maskScanStarts))]
					got, want := startScan(start), startScan(start)
					offset := r.IntN(2) * 1000
					got.scanGreedyMasked(xs[base:base+n], base, offset, &p)
					refGreedyMasked(&want, xs[base:base+n], base, offset, &p)
					require.Equal(t, want, got, "pattern %d style %d base %d n %d start %v", kind, style, base, n, start)
				}
			}
		}
	}
}

// TestScanGreedyMaskedEveryStop: on rows of whole words below the running best, one
// element that stops the skip (an allowed value above the best, an allowed NaN or
// +Inf, a banned NaN or +Inf) or that must not (a banned value above the best, a banned
// -Inf, an allowed value equal to the best) at every place, with a tie of the winner
// after it: the definition's key and observations.
func TestScanGreedyMaskedEveryStop(t *testing.T) {
	r := rand.New(rand.NewPCG(54, 54))
	const n = 160
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	xs := make([]float32, n)
	for _, best := range []float32{2, 0, negInf} {
		for _, c := range []struct {
			v       float32
			allowed bool
		}{{3, true}, {nan, true}, {inf, true}, {nan, false}, {inf, false}, {3, false}, {negInf, false},
			{best, true}, {-1, true}, {math.MaxFloat32, false}, {math.MaxFloat32, true}} {
			for at := range n {
				for i := range xs {
					xs[i] = -1 - float32(i%7)
					if best == negInf {
						xs[i] = negInf
					}
				}
				words := make([]uint32, n/32)
				for i := range words {
					words[i] = r.Uint32()
				}
				xs[at] = c.v
				if c.allowed {
					words[at>>5] |= 1 << (at & 31)
				} else {
					words[at>>5] &^= 1 << (at & 31)
				}
				if tie := at + 1 + r.IntN(n-at); tie < n && c.v-c.v == 0 {
					xs[tie] = c.v
				}
				p := processor{active: true, bitmask: words}
				for _, base := range []int{0, 32, 4} {
					got, want := startScan(best), startScan(best)
					got.scanGreedyMasked(xs[base:], base, 0, &p)
					refGreedyMasked(&want, xs[base:], base, 0, &p)
					require.Equal(t, want, got, "best %v value %v allowed %v at %d base %d", best, c.v, c.allowed, at, base)
				}
			}
		}
	}
}

// TestScanGreedyMaskedRandomRows is the fuzz-style comparison: rows of random length
// scanned chunk after chunk (convertChunk elements from a start at any index, as a
// split row's block does), with random masks and values, against the definition.
func TestScanGreedyMaskedRandomRows(t *testing.T) {
	r := rand.New(rand.NewPCG(55, 55))
	trials := 3000
	if testing.Short() {
		trials = 600
	}
	for trial := range trials {
		v := 1 + r.IntN(2500)
		xs := make([]float32, v)
		fillMaskValues(r, xs, r.IntN(maskValueStyles))
		if r.IntN(2) == 0 { // a few specials in an otherwise clean row
			for range r.IntN(4) {
				xs[r.IntN(v)] = maskSpecials[r.IntN(len(maskSpecials))]
			}
		}
		p := maskedProcessor(r, (v+31)/32, r.IntN(3), r.IntN(len(maskPatterns)+2))
		start := r.IntN(v)
		if r.IntN(2) == 0 {
			start = 0
		}
		offset := r.IntN(1 << 20)
		got, want := gumbelScan{bestScore: negInf}, gumbelScan{bestScore: negInf}
		var buf [convertChunk]float32
		for i := start; i < v; i += convertChunk {
			chunk := xs[i:min(v, i+convertChunk)]
			got.scanGreedyMasked(chunk, i, offset, &p)
			refGreedyMasked(&want, chunk, i, offset, &p)
			// maskGroup on the same chunk against its definition too.
			wantM, wantS := refMaskGroup(&p, chunk, i)
			s := p.maskGroup(chunk, i, buf[:])
			require.Equal(t, wantS, s, "trial %d chunk at %d", trial, i)
			for k := range chunk {
				require.Equal(t, math.Float32bits(wantM[k]), math.Float32bits(buf[k]), "trial %d element %d", trial, i+k)
			}
		}
		require.Equal(t, want, got, "trial %d: v %d start %d", trial, v, start)
	}
}

// FuzzMaskedGreedy: values, mask words, the chunk's start and the running best from
// the fuzzer's bytes; maskGroup and scanGreedyMasked against their definitions.
func FuzzMaskedGreedy(f *testing.F) {
	addRandomSeeds(f, 56, 200)
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < 8 {
			return
		}
		base := int(b[0] & 63)
		start := maskScanStarts[int(b[1])%len(maskScanStarts)]
		which := int(b[2]) % 3
		b = b[8:]
		n := len(b) / 4
		// Values from the bytes, read through a small table or as raw bits; the mask
		// words from the same bytes, rotated, so that both vary together.
		xs := make([]float32, base+n)
		for i := range n {
			u := binary.LittleEndian.Uint32(b[4*i:])
			switch u >> 30 {
			case 0:
				xs[base+i] = maskSpecials[int(u)%len(maskSpecials)]
			case 1:
				xs[base+i] = float32(int32(u&0xFF)-128) / 8
			default:
				xs[base+i] = math.Float32frombits(u)
			}
		}
		words := make([]uint32, (base+n+31)/32)
		for i := range words {
			if 4*i+4 <= len(b) {
				words[i] = binary.LittleEndian.Uint32(b[4*i:])*0x9E3779B9 ^ uint32(i)
			}
		}
		p := processor{active: true}
		switch which {
		case 0:
			p.bitmask = words
		case 1:
			p.mask = words
		default:
			p.mask, p.bitmask = words, append([]uint32(nil), words...)
			for i := range p.bitmask {
				p.bitmask[i] = p.bitmask[i]<<7 | p.bitmask[i]>>25
			}
		}
		checkMaskGroup(t, &p, xs[base:], base, "fuzz")
		got, want := startScan(start), startScan(start)
		got.scanGreedyMasked(xs[base:], base, 0, &p)
		refGreedyMasked(&want, xs[base:], base, 0, &p)
		require.Equal(t, want, got)
	})
}

// BenchmarkMaskGroup reports ns per element of the mask pass over one row (V = 151936)
// in chunks, as the Gumbel and categorical routes run it: random bits, and a grammar's
// kind of mask (as in BenchmarkScanGreedyMasked).
func BenchmarkMaskGroup(b *testing.B) {
	r := rand.New(rand.NewPCG(57, 57))
	xs := llmLogits(r, benchVocab)
	dst := make([]float32, benchVocab)
	for _, kind := range []string{"random", "grammar"} {
		words := benchMaskWords(r, kind)
		p := processor{active: true, bitmask: words}
		for _, impl := range []string{"dispatch", "go"} {
			fn := p.maskGroup
			if impl == "go" {
				fn = p.maskGroupGo
			}
			b.Run(kind+"/"+impl, func(b *testing.B) {
				for b.Loop() {
					for i := 0; i < benchVocab; i += convertChunk {
						end := min(benchVocab, i+convertChunk)
						fn(xs[i:end], i, dst[i:end])
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/benchVocab, "ns/elem")
			})
		}
	}
}
