//go:build darwin

package metal

import (
	"fmt"
	"sync"

	"github.com/gumbel-go/gumbel/runtime"
)

// event is the command buffer a Record committed. Its time is that buffer's GPUEndTime:
// the host clock (mach absolute time, in seconds) at which the GPU finished the buffer,
// so the time between two events is GPU time from the end of the work before the first
// to the end of the work before the second, idle gaps included, as with CUDA events.
type event struct {
	dev *Device

	mu sync.Mutex
	c  caller
	cb uintptr // retained; 0 until recorded
}

func (e *event) set(cb uintptr) {
	e.mu.Lock()
	defer e.mu.Unlock()
	pool := e.c.enter()
	e.c.release(e.cb)
	e.c.leave(pool)
	e.cb = cb
}

// wait waits for the event's command buffer (event locked) and returns its GPUEndTime.
func (e *event) wait() (float64, error) {
	if e.cb == 0 {
		return 0, fmt.Errorf("%w: metal: event not recorded", runtime.ErrInvalidArgument)
	}
	pool := e.c.enter()
	defer e.c.leave(pool)
	e.c.send0(e.cb, mWaitUntilCompleted)
	switch e.c.send0(e.cb, mStatus) {
	case commandBufferCompleted:
		return e.c.sendDouble0(e.cb, mGPUEndTime), nil
	case commandBufferError:
		return 0, e.c.nsError("command buffer", e.c.send0(e.cb, mError), nil)
	}
	return 0, &Error{Call: "event wait: command buffer not completed"}
}

// Synchronize waits until the work recorded before the event is done.
func (e *event) Synchronize() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, err := e.wait()
	return err
}

// ElapsedSince waits for both events and returns the milliseconds between them.
func (e *event) ElapsedSince(start runtime.Event) (float32, error) {
	s, ok := start.(*event)
	if !ok || s == nil || s.dev != e.dev {
		return 0, fmt.Errorf("%w: metal: ElapsedSince: not an event of this device (%T)", runtime.ErrInvalidArgument, start)
	}
	s.mu.Lock()
	t0, err := s.wait()
	s.mu.Unlock()
	if err != nil {
		return 0, err
	}
	e.mu.Lock()
	t1, err := e.wait()
	e.mu.Unlock()
	if err != nil {
		return 0, err
	}
	return float32((t1 - t0) * 1000), nil
}

// Close releases the command buffer the event holds.
func (e *event) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.cb != 0 {
		pool := e.c.enter()
		e.c.release(e.cb)
		e.c.leave(pool)
		e.cb = 0
	}
	return nil
}
