package cpu

import (
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"

	"github.com/gumbel-go/gumbel/runtime"
)

// pool runs the blocks of one launch at a time over persistent goroutines: the launching
// goroutine and up to workers-1 helpers take block indices from an atomic counter. A
// launch reuses the pool's job and block contexts, so it allocates nothing.
type pool struct {
	mu      sync.Mutex // one launch at a time; guards closed
	closed  bool
	helpers int
	wake    chan struct{} // one token per helper wanted for the current launch
	wg      sync.WaitGroup
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
	err         error // the first panic, as an error
}

func newPool(workers int) *pool {
	p := &pool{
		helpers: workers - 1,
		wake:    make(chan struct{}, workers),
		ctxs:    make([]runtime.BlockContext, workers),
	}
	for i := 1; i <= p.helpers; i++ {
		go p.helper(i)
	}
	return p
}

func (p *pool) helper(slot int) {
	for range p.wake {
		p.work(slot)
		p.wg.Done()
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

	helpers := int(min(int64(p.helpers), j.total-1))
	p.wg.Add(helpers)
	for range helpers {
		p.wake <- struct{}{}
	}
	p.work(0)
	p.wg.Wait()

	err := j.err
	j.kernel, j.args, j.err = nil, nil, nil // keep nothing of the caller's alive
	return err
}

// work runs blocks until none is left, surviving panics in the kernel.
func (p *pool) work(slot int) {
	ctx := &p.ctxs[slot]
	j := &p.job
	ctx.Grid, ctx.BlockDim, ctx.Args = j.grid, j.block, j.args
	for !p.runBlocks(ctx) {
	}
	ctx.Args = nil
}

// runBlocks takes block indices (x fastest) until none is left and reports true; a
// kernel panic is recorded and reported as false, so the caller resumes with the next
// block.
func (p *pool) runBlocks(ctx *runtime.BlockContext) (done bool) {
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
		close(p.wake)
	}
}
