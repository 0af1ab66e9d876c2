package metal

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// appleDeclarations are the declarations of every message the backend sends, as Apple's
// headers (Foundation, objc, Metal) write them; "from" names the class or protocol.
var appleDeclarations = []struct{ from, decl string }{
	{"NSObject", "+ (instancetype)alloc;"},
	{"NSObject", "- (instancetype)init;"},
	{"NSObject", "- (instancetype)retain OBJC_ARC_UNAVAILABLE;"},
	{"NSObject", "- (oneway void)release OBJC_ARC_UNAVAILABLE;"},
	{"NSObject", "- (BOOL)respondsToSelector:(SEL)aSelector;"},
	{"NSProcessInfo", "@property (class, readonly, strong) NSProcessInfo *processInfo;"},
	{"NSProcessInfo", "- (BOOL)isOperatingSystemAtLeastVersion:(NSOperatingSystemVersion)version;"},
	{"NSString", "- (nullable instancetype)initWithBytes:(const void *)bytes length:(NSUInteger)len encoding:(NSStringEncoding)encoding;"},
	{"NSString", "@property (nullable, readonly) const char *UTF8String NS_RETURNS_INNER_POINTER;"},
	{"NSError", "@property (readonly, copy) NSString *localizedDescription;"},
	{"NSError", "@property (readonly) NSInteger code;"},
	{"NSArray", "@property (readonly) NSUInteger count;"},
	{"NSArray", "- (ObjectType)objectAtIndex:(NSUInteger)index;"},
	{"NSNumber", "@property (readonly) long long longLongValue;"},
	{"MTLDevice", "@property (nonnull, readonly) NSString *name;"},
	{"MTLDevice", "@property (readonly) uint64_t recommendedMaxWorkingSetSize;"},
	{"MTLDevice", "@property (readonly) BOOL hasUnifiedMemory;"},
	{"MTLDevice", "- (BOOL)supportsFamily:(MTLGPUFamily)gpuFamily;"},
	{"MTLDevice", "- (nullable id <MTLCommandQueue>)newCommandQueue;"},
	{"MTLDevice", "- (nullable id <MTLBuffer>)newBufferWithLength:(NSUInteger)length options:(MTLResourceOptions)options;"},
	{"MTLDevice", "- (nullable id <MTLBuffer>)newBufferWithBytesNoCopy:(void *)pointer length:(NSUInteger)length options:(MTLResourceOptions)options deallocator:(void (^ __nullable)(void *pointer, NSUInteger length))deallocator;"},
	{"MTLDevice", "- (nullable id <MTLLibrary>)newLibraryWithSource:(NSString *)source options:(nullable MTLCompileOptions *)options error:(__autoreleasing NSError **)error;"},
	{"MTLDevice", "- (nullable id <MTLComputePipelineState>)newComputePipelineStateWithFunction:(id <MTLFunction>)computeFunction error:(__autoreleasing NSError **)error;"},
	{"MTLCompileOptions", "@property (readwrite, nonatomic) MTLLanguageVersion languageVersion;"},
	{"MTLCompileOptions", "@property (readwrite, nonatomic) BOOL fastMathEnabled;"},
	{"MTLCompileOptions", "@property (readwrite, nonatomic) MTLMathMode mathMode;"},
	{"MTLLibrary", "- (nullable id <MTLFunction>)newFunctionWithName:(NSString *)functionName;"},
	{"MTLComputePipelineState", "@property (readonly) NSUInteger maxTotalThreadsPerThreadgroup;"},
	{"MTLComputePipelineState", "@property (readonly) NSUInteger threadExecutionWidth;"},
	{"MTLBuffer", "- (void *)contents NS_RETURNS_INNER_POINTER;"},
	{"MTLCommandQueue", "- (nullable id <MTLCommandBuffer>)commandBuffer;"},
	{"MTLCommandBuffer", "- (nullable id <MTLComputeCommandEncoder>)computeCommandEncoder;"},
	{"MTLCommandBuffer", "- (void)commit;"},
	{"MTLCommandBuffer", "- (void)waitUntilCompleted;"},
	{"MTLCommandBuffer", "@property (readonly) MTLCommandBufferStatus status;"},
	{"MTLCommandBuffer", "@property (nullable, readonly) NSError *error;"},
	{"MTLCommandBuffer", "@property (readonly) CFTimeInterval GPUEndTime;"},
	{"MTLComputeCommandEncoder", "- (void)setComputePipelineState:(id <MTLComputePipelineState>)state;"},
	{"MTLComputeCommandEncoder", "- (void)setBuffer:(nullable id <MTLBuffer>)buffer offset:(NSUInteger)offset atIndex:(NSUInteger)index;"},
	{"MTLComputeCommandEncoder", "- (void)setBytes:(const void *)bytes length:(NSUInteger)length atIndex:(NSUInteger)index;"},
	{"MTLComputeCommandEncoder", "- (void)dispatchThreadgroups:(MTLSize)threadgroupsPerGrid threadsPerThreadgroup:(MTLSize)threadsPerThreadgroup;"},
	{"MTLCommandEncoder", "- (void)endEncoding;"},
}

// appleFunctions are the C declarations of the functions the backend calls.
var appleFunctions = []struct{ from, decl string }{
	{"Metal/MTLDevice.h", "id <MTLDevice> __nullable MTLCreateSystemDefaultDevice(void);"},
	{"Metal/MTLDevice.h", "NSArray <id<MTLDevice>> *MTLCopyAllDevices(void);"},
	{"objc/objc-internal.h", "void *objc_autoreleasePoolPush(void);"},
	{"objc/objc-internal.h", "void objc_autoreleasePoolPop(void *context);"},
	{"IOKit/IOKitLib.h", "CFMutableDictionaryRef IOServiceMatching(const char *name);"},
	{"IOKit/IOKitLib.h", "io_service_t IOServiceGetMatchingService(mach_port_t mainPort, CFDictionaryRef matching CF_RELEASES_ARGUMENT);"},
	{"IOKit/IOKitLib.h", "CFTypeRef IORegistryEntryCreateCFProperty(io_registry_entry_t entry, CFStringRef key, CFAllocatorRef allocator, IOOptionBits options);"},
	{"IOKit/IOKitLib.h", "kern_return_t IOObjectRelease(io_object_t object);"},
}

// integerTypes are the C and Foundation integer types (and enums) the declarations use.
var integerTypes = map[string]bool{
	"NSUInteger": true, "NSInteger": true, "uint64_t": true, "long long": true, "NSStringEncoding": true,
	"MTLResourceOptions": true, "MTLLanguageVersion": true, "MTLMathMode": true, "MTLCommandBufferStatus": true,
	"MTLGPUFamily": true, "mach_port_t": true, "io_service_t": true, "io_object_t": true,
	"io_registry_entry_t": true, "IOOptionBits": true, "kern_return_t": true,
}

// classify says how a declared C type travels (see cType).
func classify(t *testing.T, typ string) cType {
	t.Helper()
	s := typ
	for _, q := range []string{"__nullable", "_Nullable", "nullable", "nonnull", "__autoreleasing", "oneway", "const"} {
		s = strings.ReplaceAll(s, q, " ")
	}
	s = strings.Join(strings.Fields(s), " ")
	switch {
	case strings.Contains(s, "^"), strings.Contains(s, "*"):
		return cPointer
	case s == "void":
		return cVoid
	case s == "BOOL":
		return cBool
	case s == "double" || s == "CFTimeInterval":
		return cDouble
	case s == "MTLSize" || s == "NSOperatingSystemVersion":
		return cTriple
	case integerTypes[s]:
		return cWord
	case s == "instancetype" || s == "ObjectType" || s == "SEL" || strings.HasPrefix(s, "id ") || s == "id" ||
		strings.HasPrefix(s, "id<") || (strings.HasPrefix(s, "CF") && strings.HasSuffix(s, "Ref")):
		return cPointer
	}
	t.Fatalf("declared type %q (%q) is not classified", typ, s)
	return cVoid
}

// balanced returns the parenthesised text at the start of s (without the parentheses)
// and what follows it.
func balanced(t *testing.T, s string) (inner, rest string) {
	t.Helper()
	s = strings.TrimSpace(s)
	require.True(t, strings.HasPrefix(s, "("), "expected '(' in %q", s)
	depth := 0
	for i, r := range s {
		switch r {
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				return s[1:i], s[i+1:]
			}
		}
	}
	t.Fatalf("unbalanced parentheses in %q", s)
	return "", ""
}

var (
	selectorPart = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)\s*:`)
	identifier   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*`)
	macroWord    = regexp.MustCompile(`\s+[A-Z][A-Z0-9_]+(\([^)]*\))?\s*$`)
)

// declared is what one Objective-C declaration gives: one or two messages (a
// read-write property has a getter and a setter).
type declared struct {
	selector string
	class    bool
	ret      cType
	args     []cType
}

// parseObjC reads a method or property declaration.
func parseObjC(t *testing.T, decl string) []declared {
	t.Helper()
	s := strings.TrimSuffix(strings.TrimSpace(decl), ";")
	for macroWord.MatchString(s) {
		s = macroWord.ReplaceAllString(s, "")
	}
	if strings.HasPrefix(s, "@property") {
		attrs, rest := balanced(t, strings.TrimPrefix(s, "@property"))
		rest = strings.TrimSpace(rest)
		cut := strings.LastIndexFunc(rest, func(r rune) bool { return !(unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_') })
		name, typ := rest[cut+1:], rest[:cut+1]
		require.NotEmpty(t, name, "property name in %q", decl)
		ret := classify(t, typ)
		class := strings.Contains(attrs, "class")
		out := []declared{{selector: name, class: class, ret: ret}}
		if !strings.Contains(attrs, "readonly") {
			setter := "set" + strings.ToUpper(name[:1]) + name[1:] + ":"
			out = append(out, declared{selector: setter, class: class, ret: cVoid, args: []cType{ret}})
		}
		return out
	}
	require.True(t, strings.HasPrefix(s, "-") || strings.HasPrefix(s, "+"), "not a declaration: %q", decl)
	d := declared{class: s[0] == '+'}
	retType, rest := balanced(t, s[1:])
	d.ret = classify(t, retType)
	rest = strings.TrimSpace(rest)
	if !strings.Contains(rest, ":") {
		d.selector = identifier.FindString(rest)
		require.Equal(t, rest, d.selector, "trailing text in %q", decl)
		return []declared{d}
	}
	for rest != "" {
		m := selectorPart.FindStringSubmatch(rest)
		require.NotNil(t, m, "selector part expected at %q in %q", rest, decl)
		d.selector += m[1] + ":"
		var argType string
		argType, rest = balanced(t, rest[len(m[0]):])
		d.args = append(d.args, classify(t, argType))
		rest = strings.TrimSpace(rest)
		name := identifier.FindString(rest)
		require.NotEmpty(t, name, "argument name expected at %q in %q", rest, decl)
		rest = strings.TrimSpace(rest[len(name):])
	}
	return []declared{d}
}

// parseC reads a C function declaration.
func parseC(t *testing.T, decl string) (string, cType, []cType) {
	t.Helper()
	s := strings.TrimSuffix(strings.TrimSpace(decl), ";")
	open := strings.Index(s, "(")
	require.Positive(t, open, "no parameter list in %q", decl)
	head := strings.TrimSpace(s[:open])
	cut := strings.LastIndexFunc(head, func(r rune) bool { return !(unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_') })
	name, retType := head[cut+1:], head[:cut+1]
	params, rest := balanced(t, s[open:])
	require.Empty(t, strings.TrimSpace(rest), "trailing text in %q", decl)
	var args []cType
	if strings.TrimSpace(params) != "void" {
		for _, p := range strings.Split(params, ",") {
			p = strings.TrimSpace(macroWord.ReplaceAllString(p, ""))
			pc := strings.LastIndexFunc(p, func(r rune) bool { return !(unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_') })
			args = append(args, classify(t, p[:pc+1]))
		}
	}
	return name, classify(t, retType), args
}

// TestDeclarationsMatchApple checks every message in methods against Apple's
// declaration: the selector, class or instance, argument count (one per ':'), and how
// each argument and the result travel.
func TestDeclarationsMatchApple(t *testing.T) {
	documented := map[string]declared{}
	for _, row := range appleDeclarations {
		for _, d := range parseObjC(t, row.decl) {
			documented[d.selector] = d
		}
	}
	used := map[string]bool{}
	for m, got := range methods {
		doc, ok := documented[got.selector]
		if !assert.True(t, ok, "method %d %q has no Apple declaration in the table", m, got.selector) {
			continue
		}
		used[got.selector] = true
		assert.Equal(t, strings.Count(got.selector, ":"), len(got.args), "%s: arguments against colons", got.selector)
		assert.Equal(t, doc.class, got.class, "%s: class method", got.selector)
		assert.Equal(t, doc.ret, got.ret, "%s: result", got.selector)
		assert.Equal(t, doc.args, nilIfEmpty(got.args), "%s: arguments", got.selector)
	}
	for _, row := range appleDeclarations {
		any := false
		for _, d := range parseObjC(t, row.decl) {
			any = any || used[d.selector]
		}
		assert.True(t, any, "%s %q is declared but never sent", row.from, row.decl)
	}
}

func nilIfEmpty(a []cType) []cType {
	if len(a) == 0 {
		return nil
	}
	return a
}

// TestFunctionsMatchApple checks every C function against its declaration.
func TestFunctionsMatchApple(t *testing.T) {
	require.Len(t, appleFunctions, len(functions))
	documented := map[string][2]any{}
	for _, row := range appleFunctions {
		name, ret, args := parseC(t, row.decl)
		documented[name] = [2]any{ret, args}
	}
	for _, f := range functions {
		doc, ok := documented[f.name]
		if !assert.True(t, ok, "function %q has no declaration", f.name) {
			continue
		}
		assert.Equal(t, doc[0], f.ret, "%s: result", f.name)
		assert.Equal(t, doc[1], nilIfEmpty(f.args), "%s: arguments", f.name)
	}
}

// TestParserReadsDeclarations pins the declaration parser on the shapes it must read.
func TestParserReadsDeclarations(t *testing.T) {
	cases := []struct {
		decl string
		want []declared
	}{
		{"+ (instancetype)alloc;", []declared{{selector: "alloc", class: true, ret: cPointer}}},
		{"- (void)setBytes:(const void *)bytes length:(NSUInteger)length atIndex:(NSUInteger)index;",
			[]declared{{selector: "setBytes:length:atIndex:", ret: cVoid, args: []cType{cPointer, cWord, cWord}}}},
		{"@property (readwrite, nonatomic) BOOL fastMathEnabled;", []declared{
			{selector: "fastMathEnabled", ret: cBool}, {selector: "setFastMathEnabled:", ret: cVoid, args: []cType{cBool}}}},
		{"@property (nullable, readonly) const char *UTF8String NS_RETURNS_INNER_POINTER;",
			[]declared{{selector: "UTF8String", ret: cPointer}}},
		{"- (void)dispatchThreadgroups:(MTLSize)a threadsPerThreadgroup:(MTLSize)b;",
			[]declared{{selector: "dispatchThreadgroups:threadsPerThreadgroup:", ret: cVoid, args: []cType{cTriple, cTriple}}}},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, parseObjC(t, c.decl), c.decl)
	}
	name, ret, args := parseC(t, "kern_return_t IOObjectRelease(io_object_t object);")
	assert.Equal(t, "IOObjectRelease", name)
	assert.Equal(t, cWord, ret)
	assert.Equal(t, []cType{cWord}, args)
}

// sendHelpers are the caller methods of objc_darwin.go: how many arguments each passes
// after the receiver and selector, and the argument and result kinds it can carry.
var sendHelpers = map[string]struct {
	n       int
	ret     []cType
	triples bool
}{
	"send0":           {0, []cType{cVoid, cWord, cPointer}, false},
	"send1":           {1, []cType{cVoid, cWord, cPointer}, false},
	"send2":           {2, []cType{cVoid, cWord, cPointer}, false},
	"send3":           {3, []cType{cVoid, cWord, cPointer}, false},
	"send4":           {4, []cType{cVoid, cWord, cPointer}, false},
	"sendBool0":       {0, []cType{cBool}, false},
	"sendBool1":       {1, []cType{cBool}, false},
	"sendDouble0":     {0, []cType{cDouble}, false},
	"sendTriples2":    {2, []cType{cVoid}, true},
	"sendTripleBool1": {1, []cType{cBool}, true},
}

var fnHelpers = map[string]int{"callFn0": 0, "callFn1": 1, "callFn2": 2, "callFn4": 4}

// constIndex maps the names of one iota const block of decl.go to their values.
func constIndex(t *testing.T, f *ast.File, typeName string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST || len(g.Specs) == 0 {
			continue
		}
		first := g.Specs[0].(*ast.ValueSpec)
		if id, ok := first.Type.(*ast.Ident); !ok || id.Name != typeName {
			continue
		}
		for i, spec := range g.Specs {
			for _, n := range spec.(*ast.ValueSpec).Names {
				out[n.Name] = i
			}
		}
	}
	require.NotEmpty(t, out, "no const block of type %s", typeName)
	return out
}

// TestCallSitesMatchDeclarations reads the darwin sources and checks that every message
// goes through the helper its declaration needs (argument count, BOOL, double and
// struct passing) and that every declared message and function is used.
func TestCallSitesMatchDeclarations(t *testing.T) {
	fset := token.NewFileSet()
	declFile, err := parser.ParseFile(fset, "decl.go", nil, 0)
	require.NoError(t, err)
	methodIdx := constIndex(t, declFile, "method")
	fnIdx := constIndex(t, declFile, "function")
	require.Len(t, methodIdx, int(numMethods)+1) // numMethods itself is in the block
	require.Len(t, fnIdx, int(numFunctions)+1)

	files, err := filepath.Glob("*_darwin.go")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	sent := map[method]int{}
	called := map[function]int{}
	for _, name := range files {
		f, err := parser.ParseFile(fset, name, nil, 0)
		require.NoError(t, err)
		ast.Inspect(f, func(n ast.Node) bool {
			if fd, ok := n.(*ast.FuncDecl); ok && fd.Recv != nil {
				_, isSend := sendHelpers[fd.Name.Name]
				_, isFn := fnHelpers[fd.Name.Name]
				if isSend || isFn {
					return false // the helpers themselves pass their method through
				}
			}
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			pos := fset.Position(call.Pos())
			if h, ok := sendHelpers[sel.Sel.Name]; ok {
				require.GreaterOrEqual(t, len(call.Args), 2, "%s: %s needs a receiver and a method", pos, sel.Sel.Name)
				id, ok := call.Args[1].(*ast.Ident)
				require.True(t, ok, "%s: the method of %s must be a constant", pos, sel.Sel.Name)
				i, ok := methodIdx[id.Name]
				require.True(t, ok, "%s: %s is not a method constant", pos, id.Name)
				m := methods[i]
				sent[method(i)]++
				assert.Len(t, m.args, h.n, "%s: %s sent with %s", pos, m.selector, sel.Sel.Name)
				assert.Len(t, call.Args, 2+h.n, "%s: %s", pos, sel.Sel.Name)
				assert.Contains(t, h.ret, m.ret, "%s: %s returns kind %d, not carried by %s", pos, m.selector, m.ret, sel.Sel.Name)
				for _, a := range m.args {
					assert.Equal(t, h.triples, a == cTriple, "%s: %s argument kinds against %s", pos, m.selector, sel.Sel.Name)
				}
			}
			if n, ok := fnHelpers[sel.Sel.Name]; ok {
				require.NotEmpty(t, call.Args)
				id, ok := call.Args[0].(*ast.Ident)
				require.True(t, ok, "%s: the function of %s must be a constant", pos, sel.Sel.Name)
				i, ok := fnIdx[id.Name]
				require.True(t, ok, "%s: %s is not a function constant", pos, id.Name)
				called[function(i)]++
				assert.Len(t, functions[i].args, n, "%s: %s called with %s", pos, functions[i].name, sel.Sel.Name)
				assert.Len(t, call.Args, 1+n, "%s: %s", pos, sel.Sel.Name)
			}
			return true
		})
	}
	for i, m := range methods {
		assert.Positive(t, sent[method(i)], "%s is declared but never sent", m.selector)
	}
	for i, f := range functions {
		assert.Positive(t, called[function(i)], "%s is declared but never called", f.name)
	}
}
