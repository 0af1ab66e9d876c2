package statistical

import (
	"math"

	"github.com/gumbel-go/gumbel/philox"
)

// Layout of the DiffuseTail shape, in nats below the dominant token (units of logit/T).
const (
	// tailNats is where the tail begins: beyond the reach of noise capped at about 16.6.
	tailNats = 20
	// tailNatsMax is where it ends.
	tailNatsMax = 30
	// tailStep is the spacing of the tail's levels; tokens share a level's logit, which
	// is what lets a test simulate a Gumbel-max sampler over the whole row cheaply.
	tailStep = 0.25
	// tailNearLevels levels from tailNats on hold tailNearTokens tokens each: most of
	// the tail's mass sits in its first nat, since 150K tokens spread evenly over 20 to
	// 30 nats would hold only 3e-5 of the mass.
	tailNearLevels = 4
	tailNearTokens = 25_000
	// bodyTokens lie bodyFirstNats, +0.5, ... below the dominant token.
	bodyTokens    = 12
	bodyFirstNats = 3
	// dominantLogit is the dominant token's logit times 1/T.
	dominantLogit = 4
)

// Logits returns the logits row of a shape at a vocabulary size and temperature. Rows are
// deterministic (built from SplitMix64, not from a generator whose stream may change
// between Go releases). Only DiffuseTail depends on the temperature: its logits are
// scaled by T, so its tail sits 20 to 30 nats below the top after the temperature too.
func Logits(shape Shape, vocab int, temperature float32) []float32 {
	x := make([]float32, vocab)
	g := gaussians{state: uint64(shape)*0x9E3779B97F4A7C15 + uint64(vocab)}
	switch shape {
	case Peaked:
		for i := range x {
			x[i] = float32(g.next())
		}
		x[vocab/3] = 7
		x[(2*vocab)/3+1] = 4.5
	case Flat:
		for i := range x {
			x[i] = 1.25
		}
	case Bimodal:
		v := float64(vocab)
		for i := range x {
			a := (float64(i) - 0.25*v) / (0.06 * v)
			b := (float64(i) - 0.7*v) / (0.04 * v)
			x[i] = float32(4*math.Exp(-a*a) + 3.5*math.Exp(-b*b) + 0.5*g.next())
		}
	case Masked:
		for i := range x {
			x[i] = float32(1.5 * g.next())
		}
		neg := float32(math.Inf(-1))
		for i := range x {
			if philox.SplitMix64(uint64(i)^0x6d61736b)%3 == 0 {
				x[i] = neg
			}
		}
		x[0], x[vocab-1] = neg, neg
		top := argmax(x)
		if top > 0 {
			x[top-1] = neg
		}
		if top+1 < vocab {
			x[top+1] = neg
		}
	case DiffuseTail:
		diffuseTail(x, temperature)
	case Spread:
		for i := range x {
			x[i] = float32(g.next())
		}
	}
	return x
}

// diffuseTail fills x with the DiffuseTail shape: nats below the top assigned to a
// scattered order of the indices, then logit = (dominantLogit - nats)·T.
func diffuseTail(x []float32, temperature float32) {
	vocab := len(x)
	order := make([]int, vocab)
	for i := range order {
		order[i] = i
	}
	// Fisher-Yates with a fixed SplitMix64 stream: levels land on scattered indices,
	// so no index decile holds a level on its own.
	s := uint64(0x7461696c)
	for i := vocab - 1; i > 0; i-- {
		s = philox.SplitMix64(s)
		j := int(s % uint64(i+1))
		order[i], order[j] = order[j], order[i]
	}
	nats := make([]float64, vocab)
	k := 0
	nats[order[k]] = 0
	k++
	for b := 0; b < bodyTokens && k < vocab; b++ {
		nats[order[k]] = bodyFirstNats + 0.5*float64(b)
		k++
	}
	for l := 0; l < tailNearLevels; l++ {
		for j := 0; j < tailNearTokens && k < vocab; j++ {
			nats[order[k]] = tailNats + tailStep*float64(l)
			k++
		}
	}
	// The rest spread evenly over the remaining levels up to tailNatsMax.
	farLevels := int((tailNatsMax-tailNats)/tailStep) + 1 - tailNearLevels
	rest := vocab - k
	for j := 0; j < rest; j++ {
		level := tailNearLevels + j*farLevels/max(rest, 1)
		nats[order[k]] = tailNats + tailStep*float64(level)
		k++
	}
	t := float64(temperature)
	for i, d := range nats {
		x[i] = float32((dominantLogit - d) * t)
	}
}

// gaussians is a deterministic stream of standard normal numbers (Box-Muller over
// SplitMix64).
type gaussians struct {
	state uint64
	spare float64
	has   bool
}

func (g *gaussians) uniform() float64 {
	g.state += 0x9E3779B97F4A7C15
	// 53 random bits in (0, 1): never 0, so the logarithm below is finite.
	return (float64(philox.SplitMix64(g.state)>>11) + 0.5) * 0x1p-53
}

func (g *gaussians) next() float64 {
	if g.has {
		g.has = false
		return g.spare
	}
	r := math.Sqrt(-2 * math.Log(g.uniform()))
	theta := 2 * math.Pi * g.uniform()
	g.spare, g.has = r*math.Sin(theta), true
	return r * math.Cos(theta)
}

// argmax returns the index of the largest value, the lowest index on ties.
func argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}
