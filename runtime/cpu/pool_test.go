package cpu_test

import (
	"fmt"
	goruntime "runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/cpu"
)

// openWorkers opens a device of the given number of workers (GOMAXPROCS at Open).
func openWorkers(t *testing.T, workers int) runtime.Device {
	t.Helper()
	prev := goruntime.GOMAXPROCS(workers)
	d, err := cpu.Open()
	goruntime.GOMAXPROCS(prev)
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	require.Equal(t, workers, d.Info().Multiprocessors)
	return d
}

// TestLaunchesWithPollingAndParkedHelpers: launches back to back (the helpers still
// polling) and after pauses longer than a helper polls (the helpers parked), over grids
// that need fewer helpers than there are and more, each run every block once.
func TestLaunchesWithPollingAndParkedHelpers(t *testing.T) {
	for _, workers := range []int{2, 4} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			d := openWorkers(t, workers)
			var seen [64]atomic.Int32
			k := load(t, d, map[string]runtime.GoKernel{"count": func(b *runtime.BlockContext) {
				seen[b.Block.X].Add(1)
			}})["count"]
			var a runtime.Args
			for i := range 200 {
				n := []int{1, 2, 3, 64}[i%4]
				if i%5 == 0 {
					time.Sleep(200 * time.Microsecond)
				}
				require.NoError(t, d.DefaultStream().Launch(k, runtime.Dim3{X: n, Y: 1, Z: 1}, one, &a))
				for x := range seen {
					want := int32(0)
					if x < n {
						want = 1
					}
					require.Equal(t, want, seen[x].Swap(0), "launch %d of %d blocks, block %d", i, n, x)
				}
			}
		})
	}
}

// TestBlocksMeetWhetherHelperPollsOrParks: the two blocks of a launch run at the same
// time when the helper is woken from parking and when it is still polling from the
// launch before.
func TestBlocksMeetWhetherHelperPollsOrParks(t *testing.T) {
	d := openWorkers(t, 2)
	var arrived atomic.Int32
	k := load(t, d, map[string]runtime.GoKernel{"meet": func(b *runtime.BlockContext) {
		arrived.Add(1)
		for deadline := time.Now().Add(30 * time.Second); arrived.Load() < 2; {
			if time.Now().After(deadline) {
				panic("the other block never arrived")
			}
			goruntime.Gosched()
		}
	}})["meet"]
	var a runtime.Args
	for i := range 20 {
		if i%2 == 0 {
			time.Sleep(time.Millisecond)
		}
		arrived.Store(0)
		require.NoError(t, d.DefaultStream().Launch(k, runtime.Dim3{X: 2, Y: 1, Z: 1}, one, &a), "launch %d", i)
	}
}

// TestCloseStopsHelpers: Close ends the helper goroutines, polling or parked.
func TestCloseStopsHelpers(t *testing.T) {
	before := goruntime.NumGoroutine()
	for _, pause := range []time.Duration{0, 2 * time.Millisecond} {
		prev := goruntime.GOMAXPROCS(4)
		d, err := cpu.Open()
		goruntime.GOMAXPROCS(prev)
		require.NoError(t, err)
		k := load(t, d, map[string]runtime.GoKernel{"k": func(*runtime.BlockContext) {}})["k"]
		var a runtime.Args
		require.NoError(t, d.DefaultStream().Launch(k, runtime.Dim3{X: 8, Y: 1, Z: 1}, one, &a))
		time.Sleep(pause)
		require.NoError(t, d.Close())
	}
	deadline := time.Now().Add(10 * time.Second)
	for goruntime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	assert.LessOrEqual(t, goruntime.NumGoroutine(), before, "helper goroutines left after Close")
}
