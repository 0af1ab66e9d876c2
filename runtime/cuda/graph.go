package cuda

import (
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/internal/gpurt"
)

// Graph capture is CUDA's alone: the HIP backend does not bind HIP's graph API, so its
// streams are no runtime.GraphCapturer, and none of this is shared with it.

// stream is a shared stream with CUDA's graph capture.
type stream struct {
	*gpurt.Stream
	dev *Device
}

var _ runtime.GraphCapturer = (*stream)(nil)

// errNoGraphs reports a driver without the graph API (before CUDA 11.4).
var errNoGraphs = fmt.Errorf("%w: this CUDA driver has no graph capture (cuStreamBeginCapture_v2, cuGraphInstantiateWithFlags)", runtime.ErrUnavailable)

// BeginCapture starts recording the stream's work into a graph (relaxed mode): the
// launches queued until EndCapture are recorded, not run.
func (s *stream) BeginCapture() error {
	drv := s.dev.drv
	if drv.cuStreamBeginCapture == 0 || drv.cuStreamEndCapture == 0 || drv.cuGraphInstantiate == 0 ||
		drv.cuGraphLaunch == 0 || drv.cuGraphExecDestroy == 0 || drv.cuGraphDestroy == 0 {
		return errNoGraphs
	}
	return s.CallOn("BeginCapture", gpurt.Entry{Fn: drv.cuStreamBeginCapture, Name: "cuStreamBeginCapture_v2"}, s.Handle(), captureModeRelaxed)
}

// EndCapture stops recording and instantiates the graph.
func (s *stream) EndCapture() (runtime.Graph, error) {
	drv := s.dev.drv
	if drv.cuStreamEndCapture == 0 {
		return nil, errNoGraphs
	}
	g := &graph{dev: s.dev}
	err := s.dev.core.Own(func() (gpurt.Resource, error) {
		if r := Result(gpurt.CallN(drv.cuStreamEndCapture, s.Handle(), uintptr(unsafe.Pointer(&g.graph)))); r != Success {
			return nil, failed("cuStreamEndCapture", r)
		}
		if r := Result(gpurt.CallN(drv.cuGraphInstantiate, uintptr(unsafe.Pointer(&g.exec)), g.graph, 0)); r != Success {
			gpurt.CallN(drv.cuGraphDestroy, g.graph)
			return nil, failed("cuGraphInstantiateWithFlags", r)
		}
		return g, nil
	})
	if err != nil {
		return nil, err
	}
	return g, nil
}

// graph is an instantiated CUDA graph.
type graph struct {
	dev    *Device
	graph  uintptr // CUgraph
	exec   uintptr // CUgraphExec
	closed atomic.Bool
}

// Launch queues one replay of the graph on stream st (a stream of the same device).
func (g *graph) Launch(st runtime.Stream) error {
	s, ok := st.(*stream)
	if !ok || s.dev != g.dev {
		return fmt.Errorf("%w: cuda graph: Launch on a stream of another device or backend", runtime.ErrInvalidArgument)
	}
	if g.closed.Load() {
		return fmt.Errorf("cuda graph: Launch: %w", runtime.ErrClosed)
	}
	return s.CallOn("graph Launch", gpurt.Entry{Fn: g.dev.drv.cuGraphLaunch, Name: "cuGraphLaunch"}, g.exec, s.Handle())
}

// Close releases the graph. A second Close does nothing.
func (g *graph) Close() error { return g.dev.core.Disown(g) }

// Release destroys the graph; the context is current.
func (g *graph) Release() error {
	g.closed.Store(true)
	var err error
	if r := Result(gpurt.CallN(g.dev.drv.cuGraphExecDestroy, g.exec)); r != Success {
		err = failed("cuGraphExecDestroy", r)
	}
	if r := Result(gpurt.CallN(g.dev.drv.cuGraphDestroy, g.graph)); r != Success {
		err = errors.Join(err, failed("cuGraphDestroy", r))
	}
	return err
}
