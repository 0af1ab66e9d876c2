// Package statistical checks that a gumbel device samples from the right distribution.
//
// Each [Case] is a logits row, a temperature, a route (Gumbel-max, the categorical path
// behind the kill switch, or the categorical path with top-k, top-p or min-p) and a number
// of draws. [Run] draws that many tokens through the public sampler API, many rows per
// call with the same logits, one seed per case and the draw number as the step (tokens of
// distinct steps are independent under the random stream contract of package philox), and
// compares the counts with the exact distribution computed here in float64 ([Expected]):
// softmax(logits / T), restricted and renormalised to the filtered set for filtered cases,
// with the filter semantics of kernelsrc/ABI.md re-derived by sorting.
//
// # The test
//
// Pearson's chi-square over bins (see [Binning]): every token whose expected count is at
// least [MinExpected] is a bin of its own; lighter tokens are pooled by how many nats they
// lie below the top token, so a sampler that loses the far tail (noise capped near 16.6)
// shows up as empty tail bands; the flat large-vocabulary case bins tokens by index decile,
// which is where a lowest-index tie-break shows. Adjacent pools with fewer than
// [MinExpected] expected draws are merged. A token of probability zero (masked with -Inf or
// removed by a filter) that is drawn even once fails the case outright. The p-value is the
// chi-square survival function of gonum's distuv.ChiSquared.
//
// # The acceptance threshold
//
// A case fails when p < [Alpha] = 1e-6. Seeds are fixed, so a run is deterministic: a
// given implementation either always passes or always fails, and nothing flakes. For a
// correct sampler each case's p-value is uniform, so the chance that the fixed seeds of a
// full suite (about 50 cases) happen to produce a false failure is at most 50 x 1e-6 =
// 5e-5, which is small enough to treat any failure as a bug. The price is power: a case
// catches, at even odds, a bias whose chi-square non-centrality is about 24 on one degree
// of freedom, 37 on nine, 91 on 127 (see [DetectableNoncentrality]); with 1e6 draws that
// is, for example, 0.14 percentage points of mass moved from one index decile of a flat
// row to another, or, among 128 bins, a 10% error in the probability of a token that
// holds 1%. Pass another threshold through Config.Alpha.
//
// # Sizes
//
// [SizeCI] is what `go test` runs on the CPU device, well within two minutes on two cores:
// 1e6 draws for the small-vocabulary Gumbel-max cases, 2.5e5 for the categorical and
// filtered ones, a few thousand for the 151936-token rows, whose [Case.Detects] states
// what they can still detect. [SizeFull] is the GPU suite: 1e6 draws per case, 2e7 for
// the flat 151936-token row, whose tie-bias trap needs that many.
package statistical
