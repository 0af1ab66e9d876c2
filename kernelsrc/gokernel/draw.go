package gokernel

import (
	"encoding/binary"
	"math"
	"sync/atomic"

	"github.com/gumbel-go/gumbel/kernelsrc/abi"
)

// seenStatus is the status a row's observations give its draws: 1 for a NaN or +Inf
// processed logit, 2 for no finite one, else 0.
func seenStatus(s abi.Seen) abi.Status {
	switch {
	case s&abi.SeenNonFinite != 0:
		return abi.StatusNonFinite
	case s&abi.SeenFinite == 0:
		return abi.StatusNoFinite
	}
	return abi.StatusOK
}

// finish writes the draw's token and status into whichever of the two slots exist.
func (l *launchRow) finish(token int32, status abi.Status) { l.writeSlot(l.slot, token, status) }

// writeSlot writes a token and a status into output slot o, where the buffers hold it.
func (l *launchRow) writeSlot(o uint64, token int32, status abi.Status) {
	if uint64(len(l.tokens))/4 > o {
		binary.LittleEndian.PutUint32(l.tokens[4*o:], uint32(token))
	}
	if uint64(len(l.status))/4 > o {
		binary.LittleEndian.PutUint32(l.status[4*o:], uint32(status))
	}
}

// writeShardKey stores the draw's shard key when the row is a shard; key is the packed
// winner, read only for status 0.
func (l *launchRow) writeShardKey(key uint64, st abi.Status) {
	if l.shard != nil && uint64(len(l.shard)) > l.slot {
		l.shard[l.slot] = abi.ShardKey(key, st)
	}
}

// writeRecord stores the draw's log-probability record when the row asked for one.
func (l *launchRow) writeRecord(rec [abi.RecordWords]float32) {
	if l.logprobs != nil && uint64(len(l.logprobs))/abi.RecordWords > l.slot {
		copy(l.logprobs[abi.RecordWords*l.slot:abi.RecordWords*(l.slot+1)], rec[:])
	}
}

// nanRecord is the record of a slot whose status is not 0.
var nanRecord = func() (r [abi.RecordWords]float32) {
	for i := range r {
		r[i] = float32(math.NaN())
	}
	return r
}()

// recordOf is a log-probability record: the token's raw logit x and processed value v,
// and the two log-normalisers.
func recordOf(x, v float32, raw, processed lse) [abi.RecordWords]float32 {
	return [abi.RecordWords]float32{
		float32(raw.logprob(float64(x))),
		float32(processed.logprob(float64(v))),
		float32(raw.value()),
		float32(processed.value()),
	}
}

// fail reports a row that cannot be sampled: status 3 and a NaN record, and none of the
// row's end-of-draws work (no RECORD, no ADVANCE), since its arguments are not trusted.
func (l *launchRow) fail() {
	l.finish(-1, abi.StatusBadParams)
	l.writeShardKey(0, abi.StatusBadParams)
	l.writeRecord(nanRecord)
}

// rowDone is called by the block that finished one draw, after its token, status and
// record are written. The last of the row's D draws to get here does the row's RECORD
// and ADVANCE work: every block of every draw has read the step and the counts by then.
func (l *launchRow) rowDone() {
	if l.p.Flags&(abi.FlagAdvance|abi.FlagRecord) == 0 {
		return
	}
	d := l.shape.Draws
	if d > 1 {
		c := &l.counters[l.shape.RowCounter(l.y)]
		// The atomic increment orders this draw's writes before the finisher's reads.
		if atomic.AddUint32(c, 1) != uint32(d) {
			return
		}
		atomic.StoreUint32(c, 0)
	}
	if l.p.Flags&abi.FlagRecord != 0 && !l.exactPending() {
		first := uint64(l.p.Row) * uint64(d)
		for o := first; o < first+uint64(d); o++ {
			if abi.Status(binary.LittleEndian.Uint32(l.status[4*o:])) != abi.StatusOK {
				continue
			}
			tok := int32(binary.LittleEndian.Uint32(l.tokens[4*o:]))
			if tok >= 0 && int(tok) < l.vocab {
				recordToken(&l.counts[tok])
			}
		}
	}
	if l.p.Flags&abi.FlagAdvance != 0 {
		binary.LittleEndian.PutUint64(l.params[l.y*abi.RowParamsSize+abi.StepOffset:], stepPlus(&l.p, d))
	}
}

// exactPending reports a row with a draw left for gumbel_exact (status 5), which then
// counts the row's tokens itself, once every draw has read the counts.
func (l *launchRow) exactPending() bool {
	first := uint64(l.p.Row) * uint64(l.shape.Draws)
	for o := first; o < first+uint64(l.shape.Draws); o++ {
		if abi.Status(binary.LittleEndian.Uint32(l.status[4*o:])) == abi.StatusExact {
			return true
		}
	}
	return false
}

// recordToken adds one to the output count in *c, saturating at abi.CountMask and keeping
// the prompt bit.
func recordToken(c *uint32) {
	for {
		old := atomic.LoadUint32(c)
		if old&abi.CountMask == abi.CountMask {
			return
		}
		if atomic.CompareAndSwapUint32(c, old, old+1) {
			return
		}
	}
}
