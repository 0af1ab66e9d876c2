//go:build darwin

package metal

import (
	"fmt"
	goruntime "runtime"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
	"github.com/ebitengine/purego/objc"

	"github.com/gumbel-go/gumbel/runtime"
)

// Framework paths, loaded by path (the dyld shared cache resolves them even though the
// files are not on disk). CoreGraphics must be loaded for MTLCreateSystemDefaultDevice
// to find a device in a process that is not an app.
var libraryPaths = []struct{ name, path string }{
	{"objc", "/usr/lib/libobjc.A.dylib"},
	{"Foundation", "/System/Library/Frameworks/Foundation.framework/Foundation"},
	{"CoreGraphics", "/System/Library/Frameworks/CoreGraphics.framework/CoreGraphics"},
	{"IOKit", "/System/Library/Frameworks/IOKit.framework/IOKit"},
	{"Metal", "/System/Library/Frameworks/Metal.framework/Metal"},
}

// bindings are the libraries, selectors, classes and functions, looked up once.
type bindings struct {
	libraries []string
	msgSend   uintptr
	// msgSendF64 is objc_msgSend typed for a double result (events only).
	msgSendF64 func(self, sel uintptr) float64
	sels       [numMethods]objc.SEL
	fns        [numFunctions]uintptr

	classNSString       objc.Class
	classCompileOptions objc.Class
	classProcessInfo    objc.Class
}

var (
	bindOnce sync.Once
	bound    *bindings
	bindErr  error
)

// load loads the frameworks and binds everything the backend calls. A missing library,
// class or symbol is an error wrapping runtime.ErrUnavailable.
func load() (*bindings, error) {
	bindOnce.Do(func() { bound, bindErr = bind() })
	return bound, bindErr
}

func bind() (*bindings, error) {
	b := &bindings{}
	handles := map[string]uintptr{}
	for _, l := range libraryPaths {
		h, err := purego.Dlopen(l.path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			return nil, fmt.Errorf("%w: metal: loading %s: %v", runtime.ErrUnavailable, l.path, err)
		}
		handles[l.name] = h
		b.libraries = append(b.libraries, l.path)
	}
	var err error
	if b.msgSend, err = purego.Dlsym(handles["objc"], "objc_msgSend"); err != nil {
		return nil, fmt.Errorf("%w: metal: objc_msgSend: %v", runtime.ErrUnavailable, err)
	}
	// objc_msgSend returns a double in the floating-point register on both
	// architectures (objc_msgSend_fpret is for x87 long double only).
	purego.RegisterFunc(&b.msgSendF64, b.msgSend)
	for i, f := range functions {
		if b.fns[i], err = purego.Dlsym(handles[f.library], f.name); err != nil {
			return nil, fmt.Errorf("%w: metal: %s: %v", runtime.ErrUnavailable, f.name, err)
		}
	}
	for i, m := range methods {
		b.sels[i] = objc.RegisterName(m.selector)
	}
	for _, c := range []struct {
		dst  *objc.Class
		name string
	}{{&b.classNSString, "NSString"}, {&b.classCompileOptions, "MTLCompileOptions"}, {&b.classProcessInfo, "NSProcessInfo"}} {
		if *c.dst = objc.GetClass(c.name); *c.dst == 0 {
			return nil, fmt.Errorf("%w: metal: class %s not found", runtime.ErrUnavailable, c.name)
		}
	}
	return b, nil
}

// caller sends messages without allocating: the argument slice lives in the caller (a
// long-lived heap object), so purego.SyscallN has nothing to move to the heap, and the
// 24-byte structs passed by reference on arm64 live here too. A caller is used by one
// goroutine at a time (its owner's lock).
//
// The helpers that take uintptr arguments are marked go:uintptrescapes: an argument
// written as uintptr(unsafe.Pointer(p)) in the call moves p to the heap (where the stack
// cannot move it while the argument waits in args) and keeps it alive for the call. The
// launch path passes only objects and pointers into heap objects, so nothing is
// allocated there.
type caller struct {
	b    *bindings
	args [12]uintptr
	// triples are the copies of MTLSize (or NSOperatingSystemVersion) arguments.
	triples [2][3]uint64
	// scalar is the memory setBytes:length:atIndex: copies a scalar argument from.
	scalar [8]byte
}

func (c *caller) call(n int) uintptr {
	r, _, _ := purego.SyscallN(c.b.msgSend, c.args[:n]...)
	return r
}

func (c *caller) send0(self uintptr, m method) uintptr {
	c.args[0], c.args[1] = self, uintptr(c.b.sels[m])
	return c.call(2)
}

//go:uintptrescapes
func (c *caller) send1(self uintptr, m method, a uintptr) uintptr {
	c.args[0], c.args[1], c.args[2] = self, uintptr(c.b.sels[m]), a
	return c.call(3)
}

//go:uintptrescapes
func (c *caller) send2(self uintptr, m method, a, b uintptr) uintptr {
	c.args[0], c.args[1], c.args[2], c.args[3] = self, uintptr(c.b.sels[m]), a, b
	return c.call(4)
}

//go:uintptrescapes
func (c *caller) send3(self uintptr, m method, a, b, d uintptr) uintptr {
	c.args[0], c.args[1], c.args[2], c.args[3], c.args[4] = self, uintptr(c.b.sels[m]), a, b, d
	return c.call(5)
}

//go:uintptrescapes
func (c *caller) send4(self uintptr, m method, a, b, d, e uintptr) uintptr {
	c.args[0], c.args[1], c.args[2], c.args[3], c.args[4], c.args[5] = self, uintptr(c.b.sels[m]), a, b, d, e
	return c.call(6)
}

// sendBool0 and sendBool1 send messages that return BOOL: only the low byte is
// defined.
func (c *caller) sendBool0(self uintptr, m method) bool { return c.send0(self, m)&0xFF != 0 }

//go:uintptrescapes
func (c *caller) sendBool1(self uintptr, m method, a uintptr) bool {
	return c.send1(self, m, a)&0xFF != 0
}

// sendDouble0 sends a message that returns a double (through purego's reflective
// call: for events only, never on the launch path).
func (c *caller) sendDouble0(self uintptr, m method) float64 {
	return c.b.msgSendF64(self, uintptr(c.b.sels[m]))
}

// sendTriples2 sends a message whose two arguments are 24-byte structs. arm64 passes
// each as a pointer to a copy the caller made; amd64 passes both in memory on the stack,
// after the six integer registers (self and _cmd take two; four go unused).
func (c *caller) sendTriples2(self uintptr, m method, a, b [3]uint64) {
	c.triples[0], c.triples[1] = a, b
	c.args[0], c.args[1] = self, uintptr(c.b.sels[m])
	if goruntime.GOARCH == "arm64" {
		c.args[2] = uintptr(unsafe.Pointer(&c.triples[0]))
		c.args[3] = uintptr(unsafe.Pointer(&c.triples[1]))
		c.call(4)
		return
	}
	c.args[2], c.args[3], c.args[4], c.args[5] = 0, 0, 0, 0
	for i := range 3 {
		c.args[6+i] = uintptr(a[i])
		c.args[9+i] = uintptr(b[i])
	}
	c.call(12)
}

// sendTripleBool1 sends a message whose one argument is a 24-byte struct and whose
// result is BOOL.
func (c *caller) sendTripleBool1(self uintptr, m method, a [3]uint64) bool {
	c.triples[0] = a
	c.args[0], c.args[1] = self, uintptr(c.b.sels[m])
	n := 3
	if goruntime.GOARCH == "arm64" {
		c.args[2] = uintptr(unsafe.Pointer(&c.triples[0]))
	} else {
		c.args[2], c.args[3], c.args[4], c.args[5] = 0, 0, 0, 0
		for i := range 3 {
			c.args[6+i] = uintptr(a[i])
		}
		n = 9
	}
	return c.call(n)&0xFF != 0
}

// callFn0 to callFn4 call one of the C functions.
func (c *caller) callFn0(f function) uintptr {
	r, _, _ := purego.SyscallN(c.b.fns[f], c.args[:0]...)
	return r
}

//go:uintptrescapes
func (c *caller) callFn1(f function, a uintptr) uintptr {
	c.args[0] = a
	r, _, _ := purego.SyscallN(c.b.fns[f], c.args[:1]...)
	return r
}

//go:uintptrescapes
func (c *caller) callFn2(f function, a, b uintptr) uintptr {
	c.args[0], c.args[1] = a, b
	r, _, _ := purego.SyscallN(c.b.fns[f], c.args[:2]...)
	return r
}

//go:uintptrescapes
func (c *caller) callFn4(f function, a, b, d, e uintptr) uintptr {
	c.args[0], c.args[1], c.args[2], c.args[3] = a, b, d, e
	r, _, _ := purego.SyscallN(c.b.fns[f], c.args[:4]...)
	return r
}

// enter locks the goroutine to its thread and pushes an autorelease pool: objects the
// frameworks autorelease during the calls that follow are released by leave, on the
// same thread, instead of piling up in a pool that a Go thread never drains.
func (c *caller) enter() uintptr {
	goruntime.LockOSThread()
	return c.callFn0(fnAutoreleasePoolPush)
}

// leave drains the pool enter pushed and unlocks the thread.
func (c *caller) leave(pool uintptr) {
	c.callFn1(fnAutoreleasePoolPop, pool)
	goruntime.UnlockOSThread()
}

func (c *caller) retain(obj uintptr) uintptr { return c.send0(obj, mRetain) }

func (c *caller) release(obj uintptr) {
	if obj != 0 {
		c.send0(obj, mRelease)
	}
}

// newString returns an owned NSString holding s (release it).
func (c *caller) newString(s string) uintptr {
	obj := c.send0(uintptr(c.b.classNSString), mAlloc)
	var p unsafe.Pointer
	if len(s) > 0 {
		p = unsafe.Pointer(unsafe.StringData(s))
	}
	r := c.send3(obj, mInitWithBytesLengthEncoding, uintptr(p), uintptr(len(s)), utf8StringEncoding)
	goruntime.KeepAlive(s)
	return r
}

// goString copies an NSString (nil gives "").
func (c *caller) goString(str uintptr) string {
	if str == 0 {
		return ""
	}
	p := cMemory(c.send0(str, mUTF8String))
	if p == nil {
		return ""
	}
	n := 0
	for *(*byte)(unsafe.Add(p, n)) != 0 {
		n++
	}
	return string(unsafe.Slice((*byte)(p), n))
}

// cMemory turns an address that C returned into a pointer. The address is outside the
// Go heap, so the garbage collector ignores it; going through memory keeps vet's
// uintptr-to-Pointer rule, which is about Go memory, out of the way.
func cMemory(p uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&p)) }

// Error is a failure reported by Metal through an NSError (or a nil result with none).
type Error struct {
	// Call names the message that failed.
	Call string
	// Code is the NSError's code (0 when Metal gave no NSError).
	Code int64
	// Description is the NSError's localizedDescription.
	Description string
	// Err is the runtime sentinel the failure falls under, if any.
	Err error
}

func (e *Error) Error() string {
	msg := "metal: " + e.Call + " failed"
	if e.Description != "" {
		msg += ": " + e.Description
	}
	if e.Code != 0 {
		msg += fmt.Sprintf(" (code %d)", e.Code)
	}
	return msg
}

// Unwrap returns the runtime sentinel.
func (e *Error) Unwrap() error { return e.Err }

// nsError turns an NSError (possibly nil) into an *Error for call.
func (c *caller) nsError(call string, nserr uintptr, sentinel error) *Error {
	e := &Error{Call: call, Err: sentinel}
	if nserr != 0 {
		e.Code = int64(c.send0(nserr, mCode))
		e.Description = c.goString(c.send0(nserr, mLocalizedDescription))
	}
	return e
}
