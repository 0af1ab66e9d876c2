package sampler

import (
	"errors"
	"fmt"

	"github.com/gumbel-go/gumbel/runtime"
)

// growSize is the new capacity of a grow-only buffer that holds have bytes and must
// hold need: at least half as much again as before, so a batch that creeps up one row
// at a time does not reallocate on every call.
func growSize(have, need int) int {
	return max(need, have+have/2)
}

// deviceScratch is a grow-only device buffer.
type deviceScratch struct {
	name string
	buf  runtime.Buffer
}

// ensure makes the buffer hold at least need bytes (and at least one byte, so it can
// always be passed as a kernel argument). It reports whether it allocated.
func (d *deviceScratch) ensure(dev runtime.Device, need int) (bool, error) {
	need = max(need, 8)
	have := 0
	if d.buf != nil {
		have = d.buf.Size()
	}
	if have >= need {
		return false, nil
	}
	size := growSize(have, need)
	buf, err := dev.Alloc(size)
	if err != nil {
		return false, fmt.Errorf("gumbel/sampler: allocating %d bytes of %s scratch: %w", size, d.name, err)
	}
	if d.buf != nil {
		// The old buffer may still be read by queued work only if a previous call
		// failed mid-way; every successful call ends with a Synchronize.
		_ = d.buf.Free()
	}
	d.buf = buf
	return true, nil
}

func (d *deviceScratch) free() error {
	if d.buf == nil {
		return nil
	}
	err := d.buf.Free()
	d.buf = nil
	return err
}

// hostScratch is a grow-only pinned host buffer.
type hostScratch struct {
	name string
	buf  runtime.HostBuffer
}

// bytes returns the first need bytes of the buffer, growing it when it is shorter.
func (h *hostScratch) bytes(dev runtime.Device, need int) ([]byte, error) {
	need = max(need, 8)
	have := 0
	if h.buf != nil {
		have = len(h.buf.Bytes())
	}
	if have < need {
		size := growSize(have, need)
		buf, err := dev.AllocHost(size)
		if err != nil {
			return nil, fmt.Errorf("gumbel/sampler: allocating %d bytes of pinned %s scratch: %w", size, h.name, err)
		}
		if h.buf != nil {
			_ = h.buf.Free()
		}
		h.buf = buf
	}
	return h.buf.Bytes()[:need], nil
}

func (h *hostScratch) free() error {
	if h.buf == nil {
		return nil
	}
	err := h.buf.Free()
	h.buf = nil
	return err
}

// scratch is everything a Sample call needs besides the caller's buffers.
type scratch struct {
	// params holds the RowParams of every launched row: gumbel_argmax rows first,
	// then categorical rows; paramsHost is its pinned staging copy.
	params     deviceScratch
	paramsHost hostScratch
	// results holds a call's outputs as outLayout places them: tokens and status
	// (copied back in one transfer to resultsHost), log-probability records and topn
	// lists.
	results     deviceScratch
	resultsHost hostScratch
	// partials holds gumbel_argmax's per-block (score, index) keys.
	partials deviceScratch
	// counters holds the kernels' per-row arrival counts and flags. The kernels leave
	// it zero, so it is zeroed only when (re)allocated or after a failed call.
	counters deviceScratch
	// logits stages host logits for SampleFloat32 and SampleBits.
	logits deviceScratch
	// bitmask holds the host token bitmasks of a call (Params.Bitmask), one row per
	// masked row; bitmaskHost is its pinned staging copy.
	bitmask     deviceScratch
	bitmaskHost hostScratch
	// unused is the 8-byte buffer passed for the buffer arguments of features no
	// row of a launch uses (ABI.md: never read or written).
	unused deviceScratch
	// merge holds what the ranks of a SampleShard call add up for log-probabilities;
	// mergeHost is its pinned staging copy.
	merge     deviceScratch
	mergeHost hostScratch
	// sel holds a SampleShard call's shard_select rounds (queries, histograms, keys,
	// then the rows' RowParams); selHost is its pinned staging copy.
	sel     deviceScratch
	selHost hostScratch
}

func newScratch() scratch {
	return scratch{
		params:      deviceScratch{name: "row parameter"},
		paramsHost:  hostScratch{name: "row parameter"},
		results:     deviceScratch{name: "token and status"},
		resultsHost: hostScratch{name: "token and status"},
		partials:    deviceScratch{name: "partial"},
		counters:    deviceScratch{name: "counter"},
		logits:      deviceScratch{name: "logits staging"},
		bitmask:     deviceScratch{name: "token bitmask"},
		bitmaskHost: hostScratch{name: "token bitmask"},
		unused:      deviceScratch{name: "placeholder"},
		merge:       deviceScratch{name: "shard merge"},
		mergeHost:   hostScratch{name: "shard merge"},
		sel:         deviceScratch{name: "shard selection"},
		selHost:     hostScratch{name: "shard selection"},
	}
}

func (s *scratch) free() error {
	return errors.Join(
		s.params.free(), s.paramsHost.free(),
		s.results.free(), s.resultsHost.free(),
		s.partials.free(), s.counters.free(), s.logits.free(), s.unused.free(),
		s.bitmask.free(), s.bitmaskHost.free(),
		s.merge.free(), s.mergeHost.free(),
		s.sel.free(), s.selHost.free(),
	)
}
