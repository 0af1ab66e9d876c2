package gokernel

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestScanBelowMatchesGo: scanBelow (SSE on amd64, NEON on arm64) stops where the Go
// form stops and passes the same maximum, on rows with values at, above and below the
// floor, NaN and infinities at every place, and every length up to a few groups.
func TestScanBelowMatchesGo(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	specials := []float32{nan, inf, -inf, 3, 2.5, 0, float32(math.Copysign(0, -1))}
	for trial := range 20000 {
		n := r.IntN(40)
		if trial%100 == 0 {
			n = 1000 + r.IntN(100)
		}
		row := make([]float32, n)
		for i := range row {
			row[i] = float32(r.NormFloat64() * 2)
		}
		for range r.IntN(3) {
			if n > 0 {
				row[r.IntN(n)] = specials[r.IntN(len(specials))]
			}
		}
		floor := []float32{3, 2.5, 0, inf, -inf, nan, 8}[r.IntN(7)]
		gotN, gotTop := scanBelow(row, floor)
		wantN, wantTop := scanBelowGo(row, floor)
		require.Equal(t, wantN, gotN, "trial %d: row %v floor %v", trial, row, floor)
		if wantTop == 0 {
			require.Zero(t, gotTop, "trial %d", trial) // either zero may come back
			continue
		}
		require.Equal(t, math.Float32bits(wantTop), math.Float32bits(gotTop), "trial %d: row %v floor %v", trial, row, floor)
	}
}

// TestScanBelowEveryStop: on every length up to 48, with the row's largest passing
// value at every place and one element that stops the scan (NaN, +Inf, the floor, above
// it) at every place, scanBelow stops where the Go form stops with the same maximum;
// the stops fall in either group of a two-group step and in the tail. Rows of -Inf and
// of signed zeros check the maximum's edge values.
func TestScanBelowEveryStop(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	negZero := float32(math.Copysign(0, -1))
	const floor = 3
	stoppers := []float32{nan, inf, floor, floor + 1}
	check := func(row []float32, floor float32, what string) {
		t.Helper()
		gotN, gotTop := scanBelow(row, floor)
		wantN, wantTop := scanBelowGo(row, floor)
		require.Equal(t, wantN, gotN, "%s: row %v floor %v", what, row, floor)
		if wantTop == 0 {
			require.Zero(t, gotTop, "%s: row %v floor %v", what, row, floor)
			return
		}
		require.Equal(t, math.Float32bits(wantTop), math.Float32bits(gotTop), "%s: row %v floor %v", what, row, floor)
	}
	row := make([]float32, 48)
	for n := range 49 {
		for peak := -1; peak < n; peak++ {
			for stop := -1; stop < n; stop++ {
				r := row[:n]
				for i := range r {
					r[i] = -1 - float32(i%5)
				}
				if peak >= 0 {
					r[peak] = floor - 0.25
				}
				if stop >= 0 {
					r[stop] = stoppers[(peak+stop+2)%len(stoppers)]
				}
				check(r, floor, "every stop")
			}
		}
	}
	for n := range 20 {
		r := row[:n]
		for i := range r {
			r[i] = float32(math.Inf(-1))
		}
		check(r, floor, "-Inf")
		check(r, float32(math.Inf(-1)), "-Inf at a -Inf floor")
		for i := range r {
			r[i] = negZero
		}
		check(r, floor, "-0")
		for i := range r {
			if i%3 == 1 {
				r[i] = 0
			}
		}
		check(r, floor, "±0")
		check(r, 0, "±0 at a zero floor")
		check(r, negZero, "±0 at a -0 floor")
	}
}

// scanBelowForm is one edition of scanBelow.
type scanBelowForm struct {
	name string
	scan func(row []float32, floor float32) (int, float32)
}

// checkScanForms compares every edition of scanBelow with scanBelowGo on row and floor:
// the same count, and the same maximum's bits but for the sign of a zero, which the
// contract leaves open (checkScanExact, per target, pins what scanBelow itself returns).
func checkScanForms(t *testing.T, row []float32, floor float32, what string, args ...any) {
	t.Helper()
	wantN, wantTop := scanBelowGo(row, floor)
	for _, f := range scanBelowForms() {
		gotN, gotTop := f.scan(row, floor)
		if gotN != wantN || math.Float32bits(gotTop) != math.Float32bits(wantTop) && !(wantTop == 0 && gotTop == 0) {
			t.Fatalf("%s: %s gives (%d, %v), Go (%d, %v); floor %v, length %d, row %v", fmt.Sprintf(what, args...),
				f.name, gotN, gotTop, wantN, wantTop, floor, len(row), row[:min(len(row), 256)])
		}
	}
	checkScanExact(t, row, floor, what, args...)
}

// poisonAfter fills tail, the memory just past a row, with a value below floor: an
// edition that read past the row's end would pass it and count too far.
func poisonAfter(tail []float32, floor float32) {
	for i := range tail {
		tail[i] = math.Nextafter32(floor, negInf)
	}
}

// scanFloors are the floors the adversarial tests try: ordinary, signed zeros, a
// denormal of each sign, the largest finite values, the infinities and NaN.
var scanFloors = []float32{3, 0, float32(math.Copysign(0, -1)), math.SmallestNonzeroFloat32,
	-math.SmallestNonzeroFloat32, math.MaxFloat32, -math.MaxFloat32, float32(math.Inf(1)), negInf,
	float32(math.NaN())}

// scanStoppers are the values that stop a scan under floor: NaN of both signs, +Inf, the
// floor itself (a tie does not pass) and the next value above it.
func scanStoppers(floor float32) []float32 {
	nan := math.Float32frombits(0x7FC00000)
	return []float32{nan, math.Float32frombits(0xFFC00001), float32(math.Inf(1)), floor,
		math.Nextafter32(floor, float32(math.Inf(1)))}
}

// scanPassers are values below floor: -Inf, signed zeros, denormals, the largest
// negative, ordinary values and the value just under the floor, where each is below it.
func scanPassers(floor float32) []float32 {
	var out []float32
	for _, x := range []float32{negInf, 0, float32(math.Copysign(0, -1)), math.SmallestNonzeroFloat32,
		-math.SmallestNonzeroFloat32, 1e-39, -1e-39, -math.MaxFloat32, -2.5, 1.25, 2.75,
		math.Nextafter32(floor, negInf), floor - 1} {
		if x < floor {
			out = append(out, x)
		}
	}
	return out
}

// TestScanBelowFormsAdversarial: every length 0 to 200, one stopper at every place (or
// none), over values below the floor with runs of ties (and, under the floors at and
// just above zero, signed zeros as the largest), at every start alignment within a
// cache line for the first floor and at one that turns with the length and the place
// for the others: each edition stops where the Go form stops with the same maximum.
func TestScanBelowFormsAdversarial(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 15))
	const maxLen = 200
	aligns := 16
	if testing.Short() {
		aligns = 4
	}
	backing := make([]float32, maxLen+16+32)
	for fi, floor := range scanFloors {
		passers, stoppers := scanPassers(floor), scanStoppers(floor)
		for n := 0; n <= maxLen; n++ {
			for stop := -1; stop < n; stop++ {
				offs, turn := aligns, 0
				if fi > 0 {
					offs, turn = 1, (n+stop+fi)%16
				}
				for off := turn; off < turn+offs; off++ {
					row := backing[off : off+n]
					if len(passers) == 0 {
						for i := range row {
							row[i] = float32(i)
						}
					} else {
						for i := range row {
							row[i] = passers[r.IntN(len(passers))]
						}
						if n > 0 && r.IntN(2) == 0 { // a run of one value: ties
							v := passers[r.IntN(len(passers))]
							for i := r.IntN(n); i < n && r.IntN(3) != 0; i++ {
								row[i] = v
							}
						}
					}
					if stop >= 0 {
						row[stop] = stoppers[(stop+n+off)%len(stoppers)]
					}
					poisonAfter(backing[off+n:], floor)
					checkScanForms(t, row, floor, "floor %d offset %d length %d stop %d", fi, off, n, stop)
				}
			}
		}
	}
}

// TestScanBelowFormsRandom: rows of random length up to 3000 at random offsets, LLM
// values with a few specials, under floors drawn from the row (so that the scans stop
// anywhere) and the fixed ones.
func TestScanBelowFormsRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(16, 16))
	trials := 20000
	if testing.Short() {
		trials = 3000
	}
	backing := make([]float32, 3000+16+32)
	specials := []float32{float32(math.NaN()), math.Float32frombits(0xFFC00001), float32(math.Inf(1)), negInf,
		0, float32(math.Copysign(0, -1)), math.SmallestNonzeroFloat32, -math.SmallestNonzeroFloat32}
	for trial := range trials {
		n := r.IntN(3001)
		if trial%2 == 0 {
			n = r.IntN(100)
		}
		off := r.IntN(16)
		row := backing[off : off+n]
		for i := range row {
			row[i] = float32(r.NormFloat64() * 2)
			if trial%5 == 0 {
				row[i] = float32(math.Round(r.NormFloat64() * 2)) // coarse: ties and zeros
			}
		}
		for range r.IntN(3) {
			if n > 0 {
				row[r.IntN(n)] = specials[r.IntN(len(specials))]
			}
		}
		floor := scanFloors[r.IntN(len(scanFloors))]
		if n > 0 && r.IntN(2) == 0 {
			floor = row[r.IntN(n)]
		}
		poisonAfter(backing[off+n:off+n+32], floor)
		checkScanForms(t, row, floor, "trial %d", trial)
	}
}

// addRandomSeeds gives a fuzz target 20 random byte strings of 8 + 4k bytes, k < words,
// from a fixed seed.
func addRandomSeeds(f *testing.F, seed uint64, words int) {
	r := rand.New(rand.NewPCG(seed, seed))
	for range 20 {
		b := make([]byte, 8+4*r.IntN(words))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		f.Add(b)
	}
}

// FuzzScanBelow: a row from the fuzzer's bytes (values through a table of specials, a
// coarse grid or raw bits), its start alignment and its floor; each edition against
// scanBelowGo.
func FuzzScanBelow(f *testing.F) {
	addRandomSeeds(f, 17, 120)
	specials := []float32{float32(math.NaN()), math.Float32frombits(0xFFC00001), float32(math.Inf(1)), negInf,
		0, float32(math.Copysign(0, -1)), math.SmallestNonzeroFloat32, -math.SmallestNonzeroFloat32, math.MaxFloat32}
	value := func(u uint32) float32 {
		switch u >> 30 {
		case 0:
			return specials[int(u)%len(specials)]
		case 1:
			return float32(int32(u&0xFF)-128) / 8
		default:
			return math.Float32frombits(u)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < 8 {
			return
		}
		off := int(b[0] & 15)
		floor := value(binary.LittleEndian.Uint32(b[4:]))
		if b[1]&1 == 0 {
			floor = scanFloors[int(b[1]>>1)%len(scanFloors)]
		}
		b = b[8:]
		n := len(b) / 4
		backing := make([]float32, off+n+32)
		row := backing[off : off+n]
		for i := range row {
			row[i] = value(binary.LittleEndian.Uint32(b[4*i:]))
			if row[i] >= floor && b[4*i]&3 != 0 { // mostly below: long passes, few stops
				row[i] = -row[i]
			}
		}
		poisonAfter(backing[off+n:], floor)
		checkScanForms(t, row, floor, "fuzz")
	})
}
