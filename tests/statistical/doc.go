// Package statistical checks that a gumbel device samples from the right distribution.
//
// Each [Case] is a logits row, a temperature, a route (Gumbel-max; the filtered route,
// Gumbel-max over the set that top-k, top-p or min-p keeps; or, behind the kill switch,
// the categorical path, with or without those filters) and a number of draws. [Run] draws that many tokens through the public sampler API, many rows per
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
// chi-square survival function, [ChiSquareSurvival].
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
// # Logit processors, several draws and log-probabilities
//
// Logit processors (a sparse bias, allowed and banned tokens, the repetition penalty on a
// tracked prompt, token bitmasks for structured output) are cases of their own
// ([Case.Processors]): the reference applies them to the row in the float32 order of
// kernelsrc/ABI.md ([ProcessedLogits]) and the test is against the exact float64 softmax
// of the processed logits, on the Gumbel route, on a filtered route and behind the kill
// switch with the same filter. A bitmask rides in every draw's Params; the pair cases
// draw masked rows too, and the "bitmask" check covers greedy rows, masks in device
// memory and rows whose mask leaves nothing. Frequency and presence penalties act on
// counts the device keeps: a [TrackedCase] lets every row draw a few tokens (counted by the kernel), compares the
// device's counts with a recount, then tests the next draw against the distribution those
// counts give ([RunTracked]). [ModePairs] cases test SampleN (every draw has the row's law,
// and the draws of a pair are independent: the ordered pair against p_a·p_b) and
// [ModeDistinct] cases SampleDistinct (the ordered pair against the successive-sampling law
// p_a·p_b/(1 - p_a)). The log-probability records, the top log-probabilities, SampleN
// against Sample, and determinism across batch positions and Batch.Launch are property
// [Check]s.
//
// # Sizes
//
// [SizeCI] is what `go test` runs on the CPU device, in well under a minute on two cores:
// 1e6 draws for the small-vocabulary Gumbel-max cases at T = 1, 2.5e5 for those at the
// other temperatures and for the categorical and filtered ones (the filtered cases on a
// reduced grid, mirrored behind the kill switch on a smaller one), a few thousand for the
// 151936-token rows; 1e5 for the processor cases, 4e5 pairs for the pair cases and 3e4
// tested draws for the tracked cases. A case drawn too few times to catch every bias the
// suite is about states in [Case.Detects] what it still detects, and the tests show that
// each still catches the bugs it is there for with probability 0.99: a wrong temperature
// (TestTemperatureCasesHaveTeeth), a skipped or misapplied processor
// (TestProcessorCasesHaveTeeth, RunTracked's non-centralities), dependent or wrongly
// renormalised pairs (TestPairCasesCatchBiasedSamplers). [SizeFull] is
// the GPU suite: 1e6 draws per case, 2e7 for the flat 151936-token row, whose tie-bias
// trap needs that many.
package statistical
