//go:build race

package sampler

// raceEnabled: the race detector is on. Its sync.Pool drops items on purpose, so
// kernels that pool working memory allocate on some calls by design.
const raceEnabled = true
