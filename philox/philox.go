// Package philox is the random stream of gumbel: the Philox4x32-10 generator of Salmon,
// Moraes, Dror and Shaw (SC'11, "Parallel random numbers: as easy as 1, 2, 3") and the
// contract that every kernel edition (Go, CUDA, HIP, Metal) follows when it turns that
// generator into sampling noise. The functions here are the reference: a GPU kernel is
// correct when it produces the same words and the same noise as this package.
//
// # The stream contract, version 2
//
// A row's random numbers depend only on (seed, step, vocabulary index, purpose): never on
// the row's position in the batch, the batch size, the launch shape, the split-phase
// choice, or how the vocabulary is sharded. A request is therefore reproducible whatever
// it shares a batch with.
//
//   - Key = (low 32 bits of seed, high 32 bits of seed).
//   - Counter = (index >> 2, low 32 bits of step, high 32 bits of step, purpose).
//     Vocabulary element index uses word index & 3 of the output block.
//   - Purposes (the fourth counter word) separate independent uses:
//     [PurposeGumbel] for the main noise word of every element, [PurposeGumbelTail] for
//     the tail-extension word, [PurposeCategorical] for the categorical draw (element
//     index 0 and 1 give the two words of its 64-bit uniform), [PurposeSpeculative] for
//     the acceptance uniform of a draft token drawn from known probabilities at its
//     decode position ([DraftUniform]: the top 24 bits of word 1 at index 0), and
//     reserved values for later uses. Verification of deterministic drafts draws no
//     uniform of its own: each position's token is the one sampling draws there.
//     Changing any of this changes sampled streams for equal seeds, so it bumps
//     [ContractVersion] and is noted in the CHANGELOG.
//   - A row's seed is its own (a nonzero seed, or seed 0 asked for explicitly). A row
//     without one gets [RowSeed](sampler seed, request id): SplitMix64 mixing, never
//     the row's position. A row with neither a seed nor a request id (request id 0)
//     gets [UnnamedRowSeed](sampler seed, n), n counting such rows of the sampler: no
//     two of them share a stream, and they are reproducible only by replaying the same
//     calls on a sampler with the same seed. A sampler seed not fixed by its user is
//     fresh randomness (crypto/rand, drawn once per sampler). Rows with their own seed
//     draw the same tokens whatever the sampler seed.
//   - Rows with top-k, top-p or min-p draw by Gumbel-max over the filters' kept set with
//     the [PurposeGumbel] and [PurposeGumbelTail] words of the kept elements (version 2;
//     version 1 drew them by inverse CDF with the [PurposeCategorical] uniform, which
//     the categorical path, MLXCEL_SAMPLING_GUMBEL=0, still does).
//
// # Noise numerics
//
// Gumbel-max returns argmax_i(x_i/T + g_i) with g_i = -log(E_i) and E_i an Exp(1)
// variate: an exact sample of softmax(x/T) only if E is close to continuous. [Gumbel]
// builds E from u near 0, where float32 is fine-grained (E = -log1p(-u)), takes
// 1 - u exactly from the complement of the word when u >= 1/2 (so u never rounds to 1),
// and extends u to 64 bits with the tail word when the main word is below 2^24, so the
// noise reaches [MaxGumbel] (about 45) and no token loses its mass to a cap. Every
// operation is a single float32 operation rounded on its own (no fused multiply-add),
// so editions on other hardware agree bit for bit up to the last-place accuracy of log
// and log1p. Where |x/T| is so large that a float32 score x/T + g would lose the noise
// (4096 and beyond), the kernels compare x/T + g exactly instead (kernelsrc/ABI.md,
// "Exact scores"): the noise is the same, the comparison is finer.
package philox

import "math/bits"

// ContractVersion is the version of the stream contract described in the package doc.
// It changes whenever the same (seed, step, index, purpose) would give another value.
const ContractVersion = 2

// Purpose is the fourth counter word: it separates independent uses of one stream.
type Purpose uint32

// The purposes of contract version 1. Values are part of the contract.
const (
	// PurposeGumbel gives the main 32-bit word of an element's Gumbel noise.
	PurposeGumbel Purpose = 1
	// PurposeGumbelTail gives the tail-extension word, read only when the main word
	// is below [TailThreshold].
	PurposeGumbelTail Purpose = 2
	// PurposeCategorical gives the 64-bit uniform of the categorical (inverse-CDF)
	// draw: words of element indices 0 (low) and 1 (high).
	PurposeCategorical Purpose = 3
	// PurposeXTC is reserved for the exclude-top-choices coin.
	PurposeXTC Purpose = 4
	// PurposeSpeculative gives the acceptance uniform of a speculative draft token at a
	// decode position ([DraftUniform]).
	PurposeSpeculative Purpose = 5
)

// Philox4x32 round and key-schedule constants (Random123).
const (
	mul0   = 0xD2511F53
	mul1   = 0xCD9E8D57
	weyl0  = 0x9E3779B9
	weyl1  = 0xBB67AE85
	rounds = 10
)

// Block returns the Philox4x32-10 output block for one counter and key. It reproduces the
// Random123 known-answer vectors.
func Block(ctr [4]uint32, key [2]uint32) [4]uint32 {
	c0, c1, c2, c3 := ctr[0], ctr[1], ctr[2], ctr[3]
	k0, k1 := key[0], key[1]
	for r := 0; r < rounds; r++ {
		if r > 0 {
			k0 += weyl0
			k1 += weyl1
		}
		hi0, lo0 := bits.Mul32(mul0, c0)
		hi1, lo1 := bits.Mul32(mul1, c2)
		c0, c1, c2, c3 = hi1^c1^k0, lo1, hi0^c3^k1, lo0
	}
	return [4]uint32{c0, c1, c2, c3}
}

// Block4 is Block for the four consecutive counters (c0+j, c1, c2, c3), j = 0..3: the 16
// words of vocabulary elements 4·c0 to 4·c0+15, block j's words at 4j to 4j+3. A scan
// that needs every block's words spends most of its time here: on amd64 the four blocks
// run in the lanes of SSE2 registers (block4_amd64.s), elsewhere, and with the purego
// build tag, in block4Generic.
func Block4(c0, c1, c2, c3 uint32, key [2]uint32) [16]uint32 { return block4(c0, c1, c2, c3, key) }

// Block8 is Block for the eight consecutive counters (c0+j, c1, c2, c3), j = 0..7:
// Block4 of c0 and of c0+4, faster where the CPU can run them side by side: in AVX2
// (block8_avx2_amd64.s) or SSE2 on amd64, in NEON on arm64 (block8_arm64.s).
func Block8(c0, c1, c2, c3 uint32, key [2]uint32) [32]uint32 { return block8(c0, c1, c2, c3, key) }

// block4Generic is Block4 in Go: the four chains of multiplications are independent
// and interleaved, so a CPU overlaps them.
func block4Generic(c0, c1, c2, c3 uint32, key [2]uint32) [16]uint32 {
	a0, a1, a2, a3 := c0, c1, c2, c3
	b0, b1, b2, b3 := c0+1, c1, c2, c3
	d0, d1, d2, d3 := c0+2, c1, c2, c3
	e0, e1, e2, e3 := c0+3, c1, c2, c3
	k0, k1 := key[0], key[1]
	for r := 0; r < rounds; r++ {
		if r > 0 {
			k0 += weyl0
			k1 += weyl1
		}
		ah0, al0 := bits.Mul32(mul0, a0)
		ah1, al1 := bits.Mul32(mul1, a2)
		bh0, bl0 := bits.Mul32(mul0, b0)
		bh1, bl1 := bits.Mul32(mul1, b2)
		dh0, dl0 := bits.Mul32(mul0, d0)
		dh1, dl1 := bits.Mul32(mul1, d2)
		eh0, el0 := bits.Mul32(mul0, e0)
		eh1, el1 := bits.Mul32(mul1, e2)
		a0, a1, a2, a3 = ah1^a1^k0, al1, ah0^a3^k1, al0
		b0, b1, b2, b3 = bh1^b1^k0, bl1, bh0^b3^k1, bl0
		d0, d1, d2, d3 = dh1^d1^k0, dl1, dh0^d3^k1, dl0
		e0, e1, e2, e3 = eh1^e1^k0, el1, eh0^e3^k1, el0
	}
	return [16]uint32{a0, a1, a2, a3, b0, b1, b2, b3, d0, d1, d2, d3, e0, e1, e2, e3}
}

// Key returns the Philox key of a seed: (low 32 bits, high 32 bits).
func Key(seed uint64) [2]uint32 {
	return [2]uint32{uint32(seed), uint32(seed >> 32)}
}

// Counter returns the counter of the block that holds vocabulary element index for the
// given step and purpose. The element is word index&3 of that block.
func Counter(index uint32, step uint64, purpose Purpose) [4]uint32 {
	return [4]uint32{index >> 2, uint32(step), uint32(step >> 32), uint32(purpose)}
}

// Word returns the 32-bit random word of one element: word index&3 of
// Block(Counter(index, step, purpose), Key(seed)). Kernels compute a block once per four
// consecutive elements; Word is the one-element form for tests and host code.
func Word(seed, step uint64, index uint32, purpose Purpose) uint32 {
	return Block(Counter(index, step, purpose), Key(seed))[index&3]
}

// unnamedDomain separates the seeds of unnamed rows (UnnamedRowSeed) from those of
// request ids (RowSeed): "unnamed!" in ASCII.
const unnamedDomain = 0x756E6E616D656421

// UnnamedRowSeed derives the seed of the n-th row that carries neither a seed nor a
// request id from the sampler's seed: SplitMix64 of a sampler key plus n. For one sampler
// seed it is a bijection of n, so no two such rows of a sampler share a seed; with a
// fresh sampler seed it is fresh randomness.
func UnnamedRowSeed(samplerSeed, n uint64) uint64 {
	return SplitMix64(SplitMix64(samplerSeed^unnamedDomain) + n)
}

// RowSeed derives the seed of a row that carries none from the sampler's seed and the
// row's request id, with SplitMix64 mixing. It never depends on the row's position.
func RowSeed(samplerSeed, requestID uint64) uint64 {
	return SplitMix64(samplerSeed ^ SplitMix64(requestID))
}

// SplitMix64 is the finaliser of Steele, Lea and Flood's SplitMix64 generator applied to
// x + golden gamma: a bijective 64-bit mixer.
func SplitMix64(x uint64) uint64 {
	x += 0x9E3779B97F4A7C15
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9
	x = (x ^ (x >> 27)) * 0x94D049BB133111EB
	return x ^ (x >> 31)
}

// DraftUniform returns the uniform in [0, 1) that decides, on the device, whether the
// draft token at decode position step of a chain drafted with known probabilities is
// accepted (Sampler.VerifyChainProbs): the top 24 bits of word 1 of the
// PurposeSpeculative block at index 0, exact in float32. The token is accepted when
// fl(u·q) < p, q its draft probability and p its target probability. It depends on the
// request's seed and the position only, never on the batch.
func DraftUniform(seed, step uint64) float32 {
	b := Block(Counter(0, step, PurposeSpeculative), Key(seed))
	return float32(b[1]>>8) * 0x1p-24
}

// CategoricalUniform64 returns the 64-bit uniform of the categorical draw of one row:
// words 0 (low half) and 1 (high half) of the PurposeCategorical block at index 0.
func CategoricalUniform64(seed, step uint64) uint64 {
	b := Block(Counter(0, step, PurposeCategorical), Key(seed))
	return uint64(b[1])<<32 | uint64(b[0])
}
