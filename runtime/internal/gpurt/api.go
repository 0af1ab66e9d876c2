package gpurt

import "github.com/gumbel-go/gumbel/internal/dynlib"

// Entry is one C entry point of a backend and its name, for errors.
type Entry struct {
	Fn   uintptr
	Name string
}

// Required binds e to the first of names that the library exports, which must be one.
func (e *Entry) Required(names ...string) dynlib.Func {
	f := dynlib.Required(&e.Fn, names...)
	f.Bound = &e.Name
	return f
}

// Optional binds e like Required, but the library may export none of names; e.Fn then
// stays 0 and the shared code does without the call.
func (e *Entry) Optional(names ...string) dynlib.Func {
	f := dynlib.Optional(&e.Fn, names...)
	f.Bound = &e.Name
	return f
}

// API is the driver calls the shared code makes, with the constants they take. HIP's
// runtime copies the CUDA driver API call for call: each of these takes the same words
// in the same order in both (given after each field), so one table serves both backends,
// and each binds it from its own library, by its own names.
type API struct {
	DeviceCount     Entry // (count*)
	DeviceGet       Entry // (device*, ordinal)
	DeviceName      Entry // (buf, size, device)
	DeviceAttribute Entry // (value*, attribute, device)
	DeviceTotalMem  Entry // (bytes*, device); optional
	// SetCurrent makes a device current on the calling OS thread: cuCtxSetCurrent
	// (context), hipSetDevice (ordinal).
	SetCurrent Entry

	MemAlloc     Entry // (pointer*, bytes)
	MemFree      Entry // (pointer)
	HostAlloc    Entry // (pointer*, bytes, flags)
	HostFree     Entry // (pointer)
	AddressRange Entry // (base*, size*, pointer)
	CopyHtoD     Entry // (device pointer, host pointer, bytes, stream)
	CopyDtoH     Entry // (host pointer, device pointer, bytes, stream)
	Memset       Entry // (device pointer, byte, bytes, stream)

	StreamCreate  Entry // (stream*, flags)
	StreamDestroy Entry // (stream)
	StreamSync    Entry // (stream)
	// StreamOwner answers what a stream belongs to: its context (cuStreamGetCtx) or
	// device (hipStreamGetDevice), the word SetCurrent takes. Optional.
	StreamOwner Entry // (stream, owner*)

	EventCreate  Entry // (event*, flags)
	EventDestroy Entry // (event)
	EventRecord  Entry // (event, stream)
	EventSync    Entry // (event)
	EventElapsed Entry // (milliseconds*, start, end)

	ModuleLoad    Entry // (module*, image)
	ModuleUnload  Entry // (module)
	GetFunction   Entry // (function*, module, name)
	FuncAttribute Entry // (value*, attribute, function); optional
	// Launch takes cuLaunchKernel's eleven words: function, grid x, y, z, block x, y,
	// z, shared memory bytes, stream, kernel parameters, extra.
	Launch Entry
	// LaunchEx takes cuLaunchKernelEx's four words: launch configuration, function,
	// kernel parameters, extra. Optional: CUDA 12.0 and later; HIP has none bound.
	LaunchEx Entry

	// The flags of the calls that make objects, and the kernel attribute read.
	HostAllocFlags, StreamFlags, EventFlags, FuncMaxThreads Flag
	// Attrs are the numbers of the device attributes every backend reads.
	Attrs DeviceAttrs
}

// Flag is a constant a call takes, with its name in the C headers, for errors.
type Flag struct {
	Value uintptr
	Name  string
}

// DeviceAttrs are a driver's numbers for the device attributes the shared code reads.
// The Y and Z limits of a block or grid follow the X limit's number in both drivers.
type DeviceAttrs struct {
	Multiprocessors, MaxThreads, WarpSize, MaxBlockX, MaxGridX int
}
