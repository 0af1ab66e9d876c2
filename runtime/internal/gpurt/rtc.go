package gpurt

import (
	"fmt"
	goruntime "runtime"
	"sort"
	"strconv"
	"strings"
	"unsafe"

	"github.com/gumbel-go/gumbel/internal/dynlib"
	"github.com/gumbel-go/gumbel/runtime"
)

// RTC is a run-time compiler with NVRTC's interface, which hiprtc copies call for call
// and name for name: create a program from source and in-memory headers, compile it
// with options, read its log and its code, destroy it. Bind binds the functions they
// share and the backend's others, those for its kinds of code.
type RTC struct {
	// Prefix starts the library's function names: "nvrtc", "hiprtc".
	Prefix string
	// Path is the library the functions came from.
	Path         string
	Major, Minor int
	// Status turns a non-zero status into the backend's typed error.
	Status func(code int32) error

	// ErrorString(status) and Version(major*, minor*).
	ErrorString, Version uintptr
	// Create(prog*, src, name, numHeaders, headers, includeNames).
	Create uintptr
	// Destroy(prog*).
	Destroy uintptr
	// Compile(prog, numOptions, options).
	Compile uintptr
	// LogSize(prog, size*) and Log(prog, buf).
	LogSize, Log uintptr
}

// Bind binds the compiler's functions, those every compiler of this interface exports
// and extra, through lookup, installs its words for its statuses through names
// (Codes.Use of the backend's status type) and asks its version. A compiler that cannot
// say its version is unusable.
func (c *RTC) Bind(lookup func(name string) uintptr, names func(words func(code int32) (name, text string)), extra ...dynlib.Func) error {
	req := dynlib.Required
	funcs := append([]dynlib.Func{
		req(&c.ErrorString, c.Prefix+"GetErrorString"),
		req(&c.Version, c.Prefix+"Version"),
		req(&c.Create, c.Prefix+"CreateProgram"),
		req(&c.Destroy, c.Prefix+"DestroyProgram"),
		req(&c.Compile, c.Prefix+"CompileProgram"),
		req(&c.LogSize, c.Prefix+"GetProgramLogSize"),
		req(&c.Log, c.Prefix+"GetProgramLog"),
	}, extra...)
	if err := dynlib.Bind(c.Path, lookup, funcs); err != nil {
		return err
	}
	names(func(code int32) (string, string) { return StringOf(c.ErrorString, code), "" })
	var major, minor int32
	if err := c.status(CallN(c.Version, uintptr(unsafe.Pointer(&major)), uintptr(unsafe.Pointer(&minor)))); err != nil {
		return fmt.Errorf("%w: %sVersion: %w", runtime.ErrUnavailable, c.Prefix, err)
	}
	c.Major, c.Minor = int(major), int(minor)
	return nil
}

// VersionString returns "major.minor".
func (c *RTC) VersionString() string { return strconv.Itoa(c.Major) + "." + strconv.Itoa(c.Minor) }

// status is Status of a result word; 0 is success.
func (c *RTC) status(r uintptr) error {
	if int32(r) == 0 {
		return nil
	}
	return c.Status(int32(r))
}

// Output is one kind of compiled code: its size and copy functions, (prog, size*) and
// (prog, buf), and its name in the functions' names ("PTX", "CUBIN", "Code").
type Output struct {
	Size, Get uintptr
	What      string
}

// Program compiles source (named file in errors and the compiler's messages) with the
// headers, by include name, and the options, and returns the code of out and the
// compiler's log. A failed compilation returns an error wrapping the compiler's status;
// the caller wraps it in a runtime.CompileError with the log.
func (c *RTC) Program(file, source string, headers map[string]string, options []string, out Output) (image []byte, log string, err error) {
	// The compiler reads the strings during the calls below; the pinner keeps them in
	// place while their addresses sit in arrays the GC does not scan.
	var pin goruntime.Pinner
	defer pin.Unpin()
	cstr := func(s string) uintptr {
		b := CString(s)
		pin.Pin(&b[0])
		return uintptr(unsafe.Pointer(&b[0]))
	}
	names := make([]string, 0, len(headers))
	for n := range headers {
		names = append(names, n)
	}
	sort.Strings(names)
	// +1: never empty, so &slice[0] is valid.
	hdrs, incs := make([]uintptr, len(names)+1), make([]uintptr, len(names)+1)
	for i, n := range names {
		hdrs[i], incs[i] = cstr(headers[n]), cstr(n)
	}
	opts := make([]uintptr, len(options)+1)
	for i, o := range options {
		opts[i] = cstr(o)
	}
	pin.Pin(&hdrs[0])
	pin.Pin(&incs[0])
	pin.Pin(&opts[0])

	var prog uintptr
	if err := c.status(CallN(c.Create, uintptr(unsafe.Pointer(&prog)), cstr(source), cstr(file),
		uintptr(len(names)), uintptr(unsafe.Pointer(&hdrs[0])), uintptr(unsafe.Pointer(&incs[0])))); err != nil {
		return nil, "", fmt.Errorf("%sCreateProgram(%s): %w", c.Prefix, file, err)
	}
	defer CallN(c.Destroy, uintptr(unsafe.Pointer(&prog)))

	err = c.status(CallN(c.Compile, prog, uintptr(len(options)), uintptr(unsafe.Pointer(&opts[0]))))
	log = c.programLog(prog)
	if err != nil {
		return nil, log, fmt.Errorf("%sCompileProgram(%s): %w", c.Prefix, strings.Join(options, " "), err)
	}
	var size uintptr
	if err := c.status(CallN(out.Size, prog, uintptr(unsafe.Pointer(&size)))); err != nil {
		return nil, log, fmt.Errorf("%sGet%sSize: %w", c.Prefix, out.What, err)
	}
	if size == 0 {
		return nil, log, fmt.Errorf("%sGet%sSize: the compiler produced no code", c.Prefix, out.What)
	}
	image = make([]byte, size)
	if err := c.status(CallN(out.Get, prog, uintptr(unsafe.Pointer(&image[0])))); err != nil {
		return nil, log, fmt.Errorf("%sGet%s: %w", c.Prefix, out.What, err)
	}
	return image, log, nil
}

// programLog returns the compiler's log, without the trailing NUL.
func (c *RTC) programLog(prog uintptr) string {
	var size uintptr
	if c.status(CallN(c.LogSize, prog, uintptr(unsafe.Pointer(&size)))) != nil || size <= 1 {
		return ""
	}
	buf := make([]byte, size)
	if c.status(CallN(c.Log, prog, uintptr(unsafe.Pointer(&buf[0])))) != nil {
		return ""
	}
	return strings.TrimSpace(string(TrimNUL(buf)))
}
