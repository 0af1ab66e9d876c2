package sampler

import (
	"errors"
	"fmt"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
	"github.com/gumbel-go/gumbel/runtime"
)

// MaxProcessorRows bounds the logits row index a logit processor can be attached to.
const MaxProcessorRows = 1 << 16

// Logit processors change a row's logits before it is sampled, on the device, in the
// order ABI.md fixes: bias, then penalties, then the allowed-token mask. They belong to a
// logits row index (row i of every later Logits passed to Sample, SampleN,
// SampleDistinct or a Batch), not to a request: move or clear them when a request
// changes rows. All rows with processors share one vocabulary: a setter or a call whose
// vocabulary differs from it returns ErrShape while any row holds processor state.
//
// Processor state lives in grow-only device buffers of rows x vocab elements; the
// setters are not the hot path (they copy to the device and wait for the stream). While
// a Batch is open the buffers never move (its launches, maybe captured in a graph, hold
// their addresses): a setter for a row beyond what they hold then returns ErrRow, and so
// does a NewBatch larger than the open ones.
// Sample calls pick a row's processors up at once; a Batch picks them up at SetRow. A
// row whose processors are turned on after its SetRow needs SetRow again; changed
// contents, and processors turned off, take effect without it (turning one off writes
// neutral values: zero bias, every token allowed, zero counts).

// countSeen marks a prompt token in a row's counts (ABI.md, "Processed logits"); the
// low 31 bits count the times the row sampled the token.
const countSeen = 1 << 31

// rowProcessors is the host's view of one row's processor state.
type rowProcessors struct {
	bias bool
	// allowed and banned are bitmaps of W = ceil(vocab/32) words; nil when off.
	allowed, banned []uint32
	tracked         bool
}

func (r *rowProcessors) any() bool {
	return r.bias || r.allowed != nil || r.banned != nil || r.tracked
}

func (r *rowProcessors) masked() bool { return r.allowed != nil || r.banned != nil }

// processors is the device state of every row's logit processors.
type processors struct {
	// vocab is the vocabulary of every row's state; it may change only while no
	// row has state and no Batch is open.
	vocab int
	rows  []rowProcessors
	// active counts the rows with any state.
	active int
	// bias (float32), counts (uint32) and mask (uint32 bitmap words) hold row r at
	// r*vocab (r*W for the mask), each grown on its own.
	bias, counts, mask deviceScratch
}

func newProcessors() processors {
	return processors{
		bias:   deviceScratch{name: "logit bias"},
		counts: deviceScratch{name: "token count"},
		mask:   deviceScratch{name: "token mask"},
	}
}

func (p *processors) free() error {
	return errors.Join(p.bias.free(), p.counts.free(), p.mask.free())
}

func maskWords(vocab int) int { return (vocab + 31) / 32 }

// row returns row i's state, nil when it has none.
func (p *processors) row(i int) *rowProcessors {
	if i < 0 || i >= len(p.rows) || !p.rows[i].any() {
		return nil
	}
	return &p.rows[i]
}

// checkCall returns ErrShape when a call of rows rows of vocab elements meets a row
// whose processor state has another vocabulary.
func (p *processors) checkCall(rows, vocab int) error {
	if p.active == 0 || vocab == p.vocab {
		return nil
	}
	for i := range min(rows, len(p.rows)) {
		if p.rows[i].any() {
			return fmt.Errorf("%w: vocab %d, but row %d has logit processors for vocab %d", ErrShape, vocab, i, p.vocab)
		}
	}
	return nil
}

// flags returns the processor flags of row i sampled with params q (the call has
// passed checkCall): BIAS, MASK, RECORD when tracked, PENALTIES when tracked and a
// penalty is on. An untracked row's counts are zero, and zero counts change no logit,
// so its penalties need no flag.
func (p *processors) flags(i int, q Params) abi.Flags {
	r := p.row(i)
	if r == nil {
		return 0
	}
	var f abi.Flags
	if r.bias {
		f |= abi.FlagBias
	}
	if r.masked() {
		f |= abi.FlagMask
	}
	if r.tracked {
		f |= abi.FlagRecord
		if penaltiesOn(q) {
			f |= abi.FlagPenalties
		}
	}
	return f
}

// appendArgs appends the bias, counts and mask arguments (ABI arguments 9 to 11),
// unused where no buffer exists yet (then no row has that processor).
func (p *processors) appendArgs(a *runtime.Args, unused runtime.Buffer) {
	for _, d := range [...]*deviceScratch{&p.bias, &p.counts, &p.mask} {
		if d.buf != nil {
			a.Buffer(d.buf)
		} else {
			a.Buffer(unused)
		}
	}
}

// regionBytes are the bytes of row r's region in each buffer at vocab: offset, size.
func biasRegion(r, vocab int) (int, int) { return 4 * r * vocab, 4 * vocab }
func maskRegion(r, vocab int) (int, int) { return 4 * r * maskWords(vocab), 4 * maskWords(vocab) }

// growKeep makes d hold at least need bytes, keeping its contents when keep is set (the
// setters are not the hot path: it waits for the stream and copies through the host).
func growKeep(dev runtime.Device, st runtime.Stream, d *deviceScratch, need int, keep bool) error {
	if d.buf != nil && d.buf.Size() >= need {
		return nil
	}
	var old []byte
	if keep && d.buf != nil {
		old = make([]byte, d.buf.Size())
		if err := st.CopyToHost(old, d.buf, 0); err != nil {
			return fmt.Errorf("gumbel/sampler: reading the %s buffer: %w", d.name, err)
		}
	}
	if err := st.Synchronize(); err != nil {
		return fmt.Errorf("gumbel/sampler: growing the %s buffer: %w", d.name, err)
	}
	if _, err := d.ensure(dev, need); err != nil {
		return err
	}
	if err := st.Zero(d.buf, 0, d.buf.Size()); err != nil {
		return fmt.Errorf("gumbel/sampler: zeroing the %s buffer: %w", d.name, err)
	}
	if len(old) > 0 {
		if err := st.CopyToDevice(d.buf, 0, old); err != nil {
			return fmt.Errorf("gumbel/sampler: restoring the %s buffer: %w", d.name, err)
		}
	}
	return st.Synchronize()
}

// growProcessor grows a processor buffer, unless a Batch is open: its launches, maybe
// captured in a graph, hold the buffer's address, so it must not move under them.
func (s *Sampler) growProcessor(d *deviceScratch, need int, keep bool) error {
	if s.batches > 0 && (d.buf == nil || d.buf.Size() < need) {
		return fmt.Errorf("%w: the %s buffer holds %d bytes and would have to grow to %d, which it cannot while a Batch is open (launches and graphs hold its address): attach processors to the batch's rows, or close the batch first",
			ErrRow, d.name, bufSize(d), need)
	}
	return growKeep(s.dev, s.stream, d, need, keep)
}

func bufSize(d *deviceScratch) int {
	if d.buf == nil {
		return 0
	}
	return d.buf.Size()
}

// reserveProcessors makes every processor buffer hold rows rows of vocab (for a Batch, whose
// captured launches must never see the buffers move).
func (s *Sampler) reserveProcessors(rows, vocab int) error {
	p := &s.procs
	if err := s.useVocab(vocab); err != nil {
		return err
	}
	keep := p.active > 0
	biasNeed, _ := biasRegion(rows, vocab)
	maskNeed, _ := maskRegion(rows, vocab)
	for _, g := range [...]struct {
		d    *deviceScratch
		need int
	}{{&p.bias, biasNeed}, {&p.counts, biasNeed}, {&p.mask, maskNeed}} {
		if err := s.growProcessor(g.d, g.need, keep); err != nil {
			return err
		}
	}
	return nil
}

// useVocab makes vocab the processors' vocabulary: ErrShape when rows hold state for
// another one, or a Batch holds the layout.
func (s *Sampler) useVocab(vocab int) error {
	p := &s.procs
	if vocab < 1 || vocab >= maxVocab {
		return fmt.Errorf("%w: vocab %d outside [1, 2^31)", ErrShape, vocab)
	}
	if vocab == p.vocab {
		return nil
	}
	if p.active > 0 || s.batches > 0 {
		return fmt.Errorf("%w: vocab %d, but the logit processors hold vocab %d", ErrShape, vocab, p.vocab)
	}
	p.vocab = vocab
	return nil
}

// setterStart checks a setter's call and returns row's state, growing the row table.
func (s *Sampler) setterStart(row, vocab int) (*rowProcessors, error) {
	if s.closed {
		return nil, ErrClosed
	}
	if row < 0 || row >= MaxProcessorRows {
		return nil, fmt.Errorf("%w: row %d outside [0, %d)", ErrRow, row, MaxProcessorRows)
	}
	if err := s.useVocab(vocab); err != nil {
		return nil, err
	}
	if row >= len(s.procs.rows) {
		s.procs.rows = append(s.procs.rows, make([]rowProcessors, row+1-len(s.procs.rows))...)
	}
	return &s.procs.rows[row], nil
}

// setterDone updates the active count after row's state changed from had.
func (s *Sampler) setterDone(r *rowProcessors, had bool) {
	switch now := r.any(); {
	case now && !had:
		s.procs.active++
	case !now && had:
		s.procs.active--
	}
}

// upload writes src at byte off of d, growing d to hold end bytes first, and waits.
func (s *Sampler) uploadRegion(d *deviceScratch, off int, src []byte, keep bool) error {
	if err := s.growProcessor(d, off+len(src), keep); err != nil {
		return err
	}
	if err := s.stream.CopyToDevice(d.buf, off, src); err != nil {
		return fmt.Errorf("gumbel/sampler: uploading the %s: %w", d.name, err)
	}
	if err := s.stream.Synchronize(); err != nil {
		return fmt.Errorf("gumbel/sampler: uploading the %s: %w", d.name, err)
	}
	return nil
}

// checkTokens checks that every token is in [0, vocab) and, with distinct, that none
// repeats.
func checkTokens(tokens []int32, vocab int, distinct bool) error {
	var seen []uint32
	if distinct {
		seen = make([]uint32, maskWords(vocab))
	}
	for j, t := range tokens {
		if t < 0 || int(t) >= vocab {
			return fmt.Errorf("%w: token %d (entry %d) outside [0, %d)", ErrToken, t, j, vocab)
		}
		if distinct {
			if seen[t/32]&(1<<(t%32)) != 0 {
				return fmt.Errorf("%w: token %d listed twice", ErrToken, t)
			}
			seen[t/32] |= 1 << (t % 32)
		}
	}
	return nil
}

// SetLogitBias sets the additive logit bias of row: bias[j] is added to token
// tokens[j]'s logit. nil tokens clears it. Tokens must be distinct and in [0, vocab)
// (ErrToken); bias values finite and one per token (ErrBias). A large negative bias
// makes a token all but impossible; the mask (SetBannedTokens) bans it outright.
func (s *Sampler) SetLogitBias(row, vocab int, tokens []int32, bias []float32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.setLogitBias(row, vocab, tokens, bias)
}

func (s *Sampler) setLogitBias(row, vocab int, tokens []int32, bias []float32) error {
	r, err := s.setterStart(row, vocab)
	if err != nil {
		return err
	}
	had := r.any()
	defer s.setterDone(r, had)
	if tokens == nil {
		if !r.bias {
			return nil
		}
		r.bias = false
		off, size := biasRegion(row, vocab)
		return s.uploadRegion(&s.procs.bias, off, make([]byte, size), true)
	}
	if len(bias) != len(tokens) {
		return fmt.Errorf("%w: %d tokens but %d bias values", ErrBias, len(tokens), len(bias))
	}
	if err := checkTokens(tokens, vocab, true); err != nil {
		return err
	}
	for j, b := range bias {
		if !finite(b) {
			return fmt.Errorf("%w: bias %v for token %d", ErrBias, b, tokens[j])
		}
	}
	values := make([]float32, vocab)
	for j, t := range tokens {
		values[t] = bias[j]
	}
	off, _ := biasRegion(row, vocab)
	if err := s.uploadRegion(&s.procs.bias, off, runtime.BytesOf(values), s.procs.active > 0); err != nil {
		return err
	}
	r.bias = true
	return nil
}

// SetAllowedTokens limits row to the given tokens (every other token's logit becomes
// -Inf); nil allows every token again. An empty non-nil list allows none, and the row
// then fails with ErrNoFiniteLogit. Tokens must be in [0, vocab); repeats are harmless.
func (s *Sampler) SetAllowedTokens(row, vocab int, tokens []int32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.setMaskList(row, vocab, tokens, true)
}

// SetBannedTokens bans the given tokens of row (their logits become -Inf), on top of any
// allowed list; nil bans none. Tokens must be in [0, vocab); repeats are harmless.
func (s *Sampler) SetBannedTokens(row, vocab int, tokens []int32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.setMaskList(row, vocab, tokens, false)
}

// setMaskList sets row's allowed (or banned) list and uploads the bitmap they make
// together: allowed and not banned. The caller holds the lock.
func (s *Sampler) setMaskList(row, vocab int, tokens []int32, allowed bool) error {
	r, err := s.setterStart(row, vocab)
	if err != nil {
		return err
	}
	if err := checkTokens(tokens, vocab, false); err != nil {
		return err
	}
	had := r.any()
	defer s.setterDone(r, had)
	var bits []uint32
	if tokens != nil {
		bits = make([]uint32, maskWords(vocab))
		for _, t := range tokens {
			bits[t/32] |= 1 << (t % 32)
		}
	}
	list := &r.banned
	if allowed {
		list = &r.allowed
	}
	if bits == nil && *list == nil {
		return nil
	}
	*list = bits
	// The bitmap of a row without lists allows everything, so a Batch row whose
	// MASK flag outlived them samples as if it had none.
	words := make([]uint32, maskWords(vocab))
	for w := range words {
		a := ^uint32(0)
		if r.allowed != nil {
			a = r.allowed[w]
		}
		if r.banned != nil {
			a &^= r.banned[w]
		}
		words[w] = a
	}
	off, _ := maskRegion(row, vocab)
	return s.uploadRegion(&s.procs.mask, off, runtime.BytesOf(words), s.procs.active > 0)
}

// TrackTokens starts (or restarts) counting row's tokens for the penalties: the
// prompt's tokens are marked as seen (for the repetition penalty) and every output
// count is zero. From then on each token sampled for the row (by Sample, SampleN or a
// Batch launch; not SampleDistinct, whose tokens are candidates) is counted on the
// device by the sampling kernel itself, so the penalties of the next step see it
// without a copy to the host. Prompt tokens must be in [0, vocab); repeats are
// harmless.
func (s *Sampler) TrackTokens(row, vocab int, prompt []int32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.setterStart(row, vocab)
	if err != nil {
		return err
	}
	if err := checkTokens(prompt, vocab, false); err != nil {
		return err
	}
	had := r.any()
	defer s.setterDone(r, had)
	counts := make([]uint32, vocab)
	for _, t := range prompt {
		counts[t] = countSeen
	}
	off, _ := biasRegion(row, vocab)
	if err := s.uploadRegion(&s.procs.counts, off, runtime.BytesOf(counts), s.procs.active > 0); err != nil {
		return err
	}
	r.tracked = true
	return nil
}

// UntrackTokens stops counting row's tokens; its penalties then see zero counts.
func (s *Sampler) UntrackTokens(row int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.untrack(row)
}

func (s *Sampler) untrack(row int) error {
	if s.closed {
		return ErrClosed
	}
	r := s.procs.row(row)
	if r == nil || !r.tracked {
		return nil
	}
	r.tracked = false
	defer s.setterDone(r, true)
	off, size := biasRegion(row, s.procs.vocab)
	return s.uploadRegion(&s.procs.counts, off, make([]byte, size), true)
}

// ClearProcessors removes every processor of row: bias, allowed and banned tokens,
// and token tracking.
func (s *Sampler) ClearProcessors(row int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.procs.row(row) == nil {
		return nil
	}
	vocab := s.procs.vocab
	return errors.Join(
		s.setLogitBias(row, vocab, nil, nil),
		s.setMaskList(row, vocab, nil, true),
		s.setMaskList(row, vocab, nil, false),
		s.untrack(row),
	)
}

// TokenCounts copies row's device-kept token counts into dst, which must hold the
// processors' vocabulary: bit 31 marks a prompt token, the low 31 bits count the times
// the row sampled the token. A row that is not tracked reads as all zero. It waits for
// the stream.
func (s *Sampler) TokenCounts(row int, dst []uint32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if row < 0 || row >= MaxProcessorRows {
		return fmt.Errorf("%w: row %d outside [0, %d)", ErrRow, row, MaxProcessorRows)
	}
	r := s.procs.row(row)
	if r == nil || !r.tracked {
		clear(dst)
		return nil
	}
	if len(dst) != s.procs.vocab {
		return fmt.Errorf("%w: %d counts asked for, the processors' vocab is %d", ErrShape, len(dst), s.procs.vocab)
	}
	off, _ := biasRegion(row, s.procs.vocab)
	if err := s.stream.CopyToHost(runtime.BytesOf(dst), s.procs.counts.buf, off); err != nil {
		return fmt.Errorf("gumbel/sampler: reading the token counts: %w", err)
	}
	if err := s.stream.Synchronize(); err != nil {
		return fmt.Errorf("gumbel/sampler: reading the token counts: %w", err)
	}
	return nil
}
