package gpurt

import (
	"fmt"
	"unsafe"

	"github.com/gumbel-go/gumbel/runtime"
)

// LaunchAttr is one launch attribute of API.LaunchEx (CUlaunchAttribute): its ID, with
// its name in the C headers for errors, and a 32-bit value.
type LaunchAttr struct {
	ID    uint32
	Name  string
	Value uint32
}

// launchConfig is CUlaunchConfig (64-bit layout) followed by the one CUlaunchAttribute
// it points at.
type launchConfig struct {
	grid, block [3]uint32
	shared      uint32
	_           uint32
	stream      uintptr
	attrs       uintptr
	numAttrs    uint32
	_           uint32
	attr        launchAttribute
}

// launchAttribute is CUlaunchAttribute: the ID, padding to 8 bytes, a 64-byte union.
type launchAttribute struct {
	id    uint32
	_     uint32
	value [16]uint32
}

const launchConfigBytes = int(unsafe.Sizeof(launchConfig{}))

// LaunchWith is Launch through API.LaunchEx with one launch attribute; without
// API.LaunchEx it refuses with runtime.ErrUnavailable.
func (s *Stream) LaunchWith(k runtime.Kernel, grid, block runtime.Dim3, args *runtime.Args, a LaunchAttr) error {
	if a.ID == 0 || s.Dev.API.LaunchEx.Fn == 0 {
		return fmt.Errorf("%w: %s: a launch with attribute %s needs the driver's extended launch", runtime.ErrUnavailable, s.Dev.Pkg, a.Name)
	}
	return s.launch(k, grid, block, args, a)
}

// launchEx queues the launch that launch checked and packed, with attribute a. The frame
// is held: the configuration's pinned memory is the stream's, like the arguments.
func (s *Stream) launchEx(kern *Kernel, g, b [3]uintptr, grid, block runtime.Dim3, a LaunchAttr) error {
	c := s.config
	for i := range 3 {
		c.grid[i], c.block[i] = uint32(g[i]), uint32(b[i])
	}
	c.shared, c.stream, c.numAttrs = 0, s.handle, 1
	c.attr.id = a.ID
	c.attr.value = [16]uint32{a.Value}
	ex := s.Dev.API.LaunchEx
	if r := s.Call(ex.Fn, uintptr(unsafe.Pointer(c)), kern.Fn, uintptr(unsafe.Pointer(s.params)), 0); r != 0 {
		return s.Dev.Failed(fmt.Sprintf("%s(%s, grid %v, block %v, %s)", ex.Name, kern.name, grid, block, a.Name), r)
	}
	return nil
}
