package sampler

import (
	"fmt"
	"math"

	"github.com/gumbel-go/gumbel/runtime"
)

// Token bitmasks are how structured output (JSON schemas, regular expressions,
// grammars) reaches the sampler: a grammar library (xgrammar, llguidance, or the
// caller's own matcher) writes, per constrained row, ceil(vocab/32) 32-bit words in
// which bit j%32 of word j/32 (least significant first) allows token j. The sampling
// kernels apply the mask inside their one pass over the row, after the logit
// processors and before temperature and filters, so no separate pass writes -Inf into
// the logits: processed log-probabilities see the mask, raw ones do not. Bits beyond
// the vocabulary are ignored. A row whose mask allows no token with a finite logit
// fails with ErrNoFiniteLogit; the other rows are served.
//
// A mask comes from the host (Params.Bitmask, one Go slice per row, copied to the
// device with the row parameters, without a wait of its own) or from device memory
// (Logits.Bitmask, rows chosen per logits row by Index), which is the form a Batch
// and a captured graph use. One call takes one of the two.

// Bitmask is a set of token bitmask rows in device memory, for the logits rows of a
// call or a Batch launch.
type Bitmask struct {
	// Data holds Rows rows of Words uint32 (or int32) words from byte Offset. The
	// caller keeps it unchanged until the call returns (a Batch: until the launch's
	// work is done), and may rewrite it between launches of a captured graph.
	Data   runtime.Buffer
	Offset int
	// Rows counts the mask rows.
	Rows int
	// Words is the words per mask row: ceil(vocab/32), or the call fails with ErrShape.
	Words int
	// Index maps logits rows to mask rows: logits row i applies mask row Index[i], or
	// none when Index[i] is -1, so a batch can mix constrained and free rows, and
	// several logits rows (the positions of a speculative draft) can share one mask
	// row or have one each. nil maps logits row i to mask row i, and Rows must then
	// equal the logits rows. A Batch takes its mapping from Batch.SetBitmaskRow
	// instead: Index must be nil there.
	Index []int32
}

// checkBitmask checks a call's device bitmask against rows logits rows of vocab.
func checkBitmask(m *Bitmask, rows, vocab int, batch bool) error {
	if m == nil {
		return nil
	}
	words := maskWords(vocab)
	switch {
	case m.Data == nil:
		return fmt.Errorf("%w: bitmask buffer is nil", ErrShape)
	case m.Words != words:
		return fmt.Errorf("%w: bitmask rows of %d words, vocab %d needs ceil(vocab/32) = %d", ErrShape, m.Words, vocab, words)
	case m.Rows < 0 || m.Rows > math.MaxInt32:
		return fmt.Errorf("%w: %d bitmask rows", ErrShape, m.Rows)
	case m.Offset < 0 || m.Offset%4 != 0:
		return fmt.Errorf("%w: bitmask offset %d is negative or not a multiple of 4", ErrShape, m.Offset)
	case batch && m.Index != nil:
		return fmt.Errorf("%w: a Batch maps rows to bitmask rows with SetBitmaskRow, not Bitmask.Index", ErrShape)
	case !batch && m.Index == nil && m.Rows != rows:
		return fmt.Errorf("%w: %d bitmask rows for %d logits rows, and no Index", ErrShape, m.Rows, rows)
	case !batch && m.Index != nil && len(m.Index) != rows:
		return fmt.Errorf("%w: bitmask index of %d entries for %d logits rows", ErrShape, len(m.Index), rows)
	}
	avail := m.Data.Size() - m.Offset
	if avail < 0 || uint64(m.Rows)*uint64(words)*4 > uint64(avail) {
		return fmt.Errorf("%w: %d bitmask rows of %d words from byte %d need more than the buffer's %d bytes",
			ErrShape, m.Rows, words, m.Offset, m.Data.Size())
	}
	return nil
}

// checkCallBitmasks checks a call's device bitmask against rows logits rows, and that no
// row of it also brings a host one: one call takes one of the two.
func checkCallBitmasks(lg Logits, params []Params, rows int) error {
	if err := checkBitmask(lg.Bitmask, rows, lg.Vocab, false); err != nil {
		return err
	}
	if lg.Bitmask != nil {
		for i := range params {
			if params[i].Bitmask != nil {
				return fmt.Errorf("%w: row %d has a host bitmask (Params.Bitmask) in a call with a device one (Logits.Bitmask)", ErrShape, i)
			}
		}
	}
	return nil
}

// deviceRow returns the mask row logits row i applies under m (checked by
// checkBitmask), -1 for none, or row i's error.
func (m *Bitmask) deviceRow(i int) (int, error) {
	if m == nil {
		return -1, nil
	}
	if m.Index == nil {
		return i, nil
	}
	j := m.Index[i]
	if j < -1 || int64(j) >= int64(m.Rows) {
		return -1, fmt.Errorf("row %d: bitmask row %d outside [-1, %d): %w", i, j, m.Rows, ErrBitmask)
	}
	return int(j), nil
}

// bitmaskCall is where the rows of one call find their masks.
type bitmaskCall struct {
	// dev is the caller's device bitmask (Logits.Bitmask), nil when the call has none.
	dev *Bitmask
	// host lists the rows' host masks (Params.Bitmask): the k-th applies row k of the
	// bitmask scratch.
	host [][]int32
}

// rowOf returns the mask row of logits row i with params p, -1 for none, or the row's
// error. Host masks are listed in the order rowOf meets them.
func (c *bitmaskCall) rowOf(i int, p Params, vocab int) (int, error) {
	if p.Bitmask == nil {
		return c.dev.deviceRow(i)
	}
	if n := maskWords(vocab); len(p.Bitmask) != n {
		return -1, fmt.Errorf("row %d: bitmask of %d words, vocab %d needs ceil(vocab/32) = %d: %w", i, len(p.Bitmask), vocab, n, ErrBitmask)
	}
	c.host = append(c.host, p.Bitmask)
	return len(c.host) - 1, nil
}

// stageBitmasks copies host masks into the bitmask scratch, mask k at row k, and queues
// their upload.
func (s *Sampler) stageBitmasks(masks [][]int32, vocab int) error {
	if len(masks) == 0 {
		return nil
	}
	sc := &s.scratch
	words := maskWords(vocab)
	size := 4 * words * len(masks)
	if _, err := sc.bitmask.ensure(s.dev, size); err != nil {
		return err
	}
	host, err := sc.bitmaskHost.bytes(s.dev, size)
	if err != nil {
		return err
	}
	for k, m := range masks {
		copy(host[4*words*k:], runtime.BytesOf(m))
	}
	s.dirty = true
	if err := s.stream.CopyToDevice(sc.bitmask.buf, 0, host); err != nil {
		return fmt.Errorf("gumbel/sampler: uploading token bitmasks: %w", err)
	}
	return nil
}
