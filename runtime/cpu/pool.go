package cpu

import (
	"fmt"
	goruntime "runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gumbel-go/gumbel/runtime"
)

// How long a participant polls before it parks. A parked helper can join a launch later
// than the vector scans take for a row (see pool), so parking is for idle time only.
//   - A participant that has run out of blocks polls for the others' last ones for about
//     two of its own blocks (work), at least minHold: one is the most they can have left.
//   - An idle helper then polls for the next launch for idleSpin: the launches of one
//     sampling step, and back-to-back steps, follow each other closer than that; polling
//     longer would only burn the core between steps.
//
// Polling yields the CPU to any other thread waiting for it (osYield): after a wake-up
// the OS may run a helper on the launcher's CPU, where polling without yielding would hold
// the launcher up.
const (
	idleSpin = 50 * time.Microsecond
	minHold  = 20 * time.Microsecond
)

// Helper states. The launcher claims an idle or parked helper for a launch, and takes
// the claim back if it runs out of blocks before the helper begins; the helper alone
// moves from idle to parked, from claimed to running, and back to idle once its part of
// a launch is done.
const (
	helperIdle    int32 = iota // polling for a claim
	helperParked               // blocked on wake, or about to be
	helperClaimed              // given the launch in progress, not begun
	helperRunning              // running blocks of the launch in progress
)

// helper is one helper goroutine's mailbox, padded so that the launcher's claims on one
// helper and its polling do not share a cache line with another's.
type helper struct {
	state atomic.Int32
	wake  chan struct{} // one token when a parked helper is claimed; closed by close
	_     [128 - 16]byte
}

// pool runs the blocks of one launch at a time over persistent goroutines: the launching
// goroutine and up to workers-1 helpers take block indices from an atomic counter. A
// launch reuses the pool's job and block contexts, so it allocates nothing.
//
// Helpers poll for the next launch for a while and are claimed through their state word;
// only a parked one is woken through its channel. A goroutine readied by a channel send
// waits in the sender's run slot (runnext), which an idle P takes only after a short
// sleep that a VM may stretch far past a row's scan: woken for every launch, a helper
// joins late or not at all (docs/benchmark_results/cpu.md has the trace). A launch never
// waits for a helper that has not begun: the launcher takes the claim back once it has
// run out of blocks.
type pool struct {
	mu      sync.Mutex // one launch at a time; guards closed
	closed  bool
	stop    atomic.Bool // closed, for the helpers
	helpers []helper
	kick    chan struct{} // see claim
	job     job
	// ctxs[0] is the launching goroutine's block context, ctxs[i] helper i's: each
	// participant owns one, so kernels may keep a pointer to it for the whole call.
	ctxs []runtime.BlockContext
}

// job is the launch in progress.
type job struct {
	kernel      *kernel
	grid, block runtime.Dim3
	args        *runtime.Args
	total       int64
	next        atomic.Int64
	errMu       sync.Mutex
	err         error         // the first panic, as an error
	seq         atomic.Uint64 // counts launches
	// pending counts the launcher and the claimed helpers that have not finished;
	// whoever takes it to zero ends the launch. A helper that ends it while the
	// launcher is parked (parked set) hands it the done token.
	pending atomic.Int32
	parked  atomic.Bool
	done    chan struct{}
}

func newPool(workers int) *pool {
	p := &pool{
		helpers: make([]helper, workers-1),
		ctxs:    make([]runtime.BlockContext, workers),
	}
	p.job.done = make(chan struct{}, 1)
	for i := range p.helpers {
		p.helpers[i].wake = make(chan struct{}, 1)
		go p.helper(i + 1)
	}
	if len(p.helpers) > 0 {
		p.kick = make(chan struct{})
		go func() {
			for range p.kick {
			}
		}()
	}
	return p
}

func (p *pool) helper(slot int) {
	h := &p.helpers[slot-1]
	j := &p.job
	var seq uint64         // the launch this helper last took part in
	var hold time.Duration // how long to poll while that launch still runs
	for p.await(h, seq, hold) {
		seq = j.seq.Load()
		hold = p.work(slot)
		h.state.Store(helperIdle)
		if j.pending.Add(-1) == 0 && j.parked.Swap(false) {
			j.done <- struct{}{}
			// The launcher now waits in this P's run slot: let it have the P.
			goruntime.Gosched()
		}
	}
}

// await returns true once the helper has begun a launch it is claimed for, and false once
// the pool is closed. It polls while launch seq, the helper's last, still runs (for up
// to hold), and for idleSpin more; then it parks.
func (p *pool) await(h *helper, seq uint64, hold time.Duration) bool {
	finished := time.Now()
	start := finished
	for {
		for i := 1; ; i++ {
			if h.state.Load() == helperClaimed && h.state.CompareAndSwap(helperClaimed, helperRunning) {
				return true
			}
			if p.stop.Load() {
				return false
			}
			if i%64 != 0 {
				continue
			}
			osYield()
			now := time.Now()
			if p.job.seq.Load() == seq && p.job.pending.Load() != 0 && now.Sub(finished) < hold {
				start = now
			} else if now.Sub(start) > idleSpin {
				break
			}
		}
		if !h.state.CompareAndSwap(helperIdle, helperParked) {
			continue // claimed meanwhile
		}
		if _, ok := <-h.wake; !ok {
			return false
		}
		if h.state.CompareAndSwap(helperClaimed, helperRunning) {
			return true
		}
		// The launcher finished before this helper began and took the claim back.
		start, hold = time.Now(), 0
	}
}

// run executes every block of the grid and returns when all are done.
func (p *pool) run(k *kernel, grid, block runtime.Dim3, args *runtime.Args) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("cpu: Launch %s: %w", k.name, runtime.ErrClosed)
	}
	j := &p.job
	j.kernel, j.grid, j.block, j.args = k, grid, block, args
	j.total = int64(grid.X) * int64(grid.Y) * int64(grid.Z)
	j.next.Store(0)
	j.err = nil
	j.seq.Add(1)

	need := int(min(int64(len(p.helpers)), j.total-1))
	j.pending.Store(int32(need) + 1)
	p.claim(need)
	hold := p.work(0)
	left := j.pending.Add(-1)
	for i := range p.helpers {
		if left == 0 {
			break
		}
		if p.helpers[i].state.CompareAndSwap(helperClaimed, helperIdle) {
			left = j.pending.Add(-1)
		}
	}
	if left != 0 {
		p.waitHelpers(hold)
	}

	err := j.err
	j.kernel, j.args, j.err = nil, nil, nil // keep nothing of the caller's alive
	return err
}

// claim gives the launch in progress to need helpers, polling ones first. A woken helper
// waits in this P's run slot, which the idle P, woken with it, takes only after a sleep
// (see pool), and execution traces showed that P going idle again meanwhile. Readying
// the kick goroutine right after takes the slot and moves the helper to this P's run
// queue, which the idle P takes from at once.
func (p *pool) claim(need int) {
	for i := range p.helpers {
		if need == 0 {
			return
		}
		if p.helpers[i].state.CompareAndSwap(helperIdle, helperClaimed) {
			need--
		}
	}
	for i := range p.helpers {
		if need == 0 {
			return
		}
		h := &p.helpers[i]
		for {
			if s := h.state.Load(); s == helperClaimed || s == helperRunning {
				break // claimed above
			}
			if h.state.CompareAndSwap(helperIdle, helperClaimed) {
				need--
				break
			}
			if h.state.CompareAndSwap(helperParked, helperClaimed) {
				h.wake <- struct{}{}
				select {
				case p.kick <- struct{}{}:
				default: // the kick goroutine has not run since the last kick
				}
				need--
				break
			}
		}
	}
}

// waitHelpers returns once every helper that began the launch is done. It polls while
// they run their last blocks, for up to hold (at least minHold), then parks until the
// last one hands it the done token.
func (p *pool) waitHelpers(hold time.Duration) {
	j := &p.job
	hold = max(hold, minHold)
	start := time.Now()
	for i := 1; j.pending.Load() != 0; i++ {
		if i%64 != 0 {
			continue
		}
		osYield()
		if time.Since(start) > hold {
			j.parked.Store(true)
			if j.pending.Load() == 0 && j.parked.Swap(false) {
				return // the last helper finished before it could see parked
			}
			<-j.done
			return
		}
	}
}

// work runs blocks until none is left, surviving panics in the kernel, and returns how
// long to poll for the other participants' last blocks: twice the time a block took here
// (the blocks of a launch are alike), or nothing when it ran none.
func (p *pool) work(slot int) (hold time.Duration) {
	ctx := &p.ctxs[slot]
	j := &p.job
	ctx.Grid, ctx.BlockDim, ctx.Args = j.grid, j.block, j.args
	start := time.Now()
	blocks := 0
	for !p.runBlocks(ctx, &blocks) {
	}
	ctx.Args = nil
	if blocks == 0 {
		return 0
	}
	return 2 * time.Since(start) / time.Duration(blocks)
}

// runBlocks takes block indices (x fastest) until none is left and reports true; a
// kernel panic is recorded and reported as false, so the caller resumes with the next
// block.
func (p *pool) runBlocks(ctx *runtime.BlockContext, blocks *int) (done bool) {
	j := &p.job
	defer func() {
		if r := recover(); r != nil {
			j.fail(ctx.Block, r)
			done = false
		}
	}()
	gx, gy := int64(j.grid.X), int64(j.grid.Y)
	fn := j.kernel.fn
	for {
		i := j.next.Add(1) - 1
		if i >= j.total {
			return true
		}
		ctx.Block = runtime.Dim3{X: int(i % gx), Y: int(i / gx % gy), Z: int(i / (gx * gy))}
		*blocks++
		fn(ctx)
	}
}

func (j *job) fail(block runtime.Dim3, r any) {
	j.errMu.Lock()
	defer j.errMu.Unlock()
	if j.err == nil {
		j.err = fmt.Errorf("cpu: kernel %s panicked in block %v: %v\n%s", j.kernel.name, block, r, debug.Stack())
	}
}

// close stops the helpers once the launch in progress is done.
func (p *pool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.closed = true
		p.stop.Store(true)
		for i := range p.helpers {
			close(p.helpers[i].wake)
		}
		if p.kick != nil {
			close(p.kick)
		}
	}
}
