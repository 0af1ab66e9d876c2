package metal

// This file lists every Objective-C message and C function the backend sends, with the
// way each argument and result travels in the C calling convention. The darwin code
// registers its selectors from this table and calls through helpers whose arity and
// kinds must agree with it; decl_test.go checks the table against Apple's documented
// declarations and every call site against the table, on any operating system.

// cType is how one argument or result travels on darwin/arm64 and darwin/amd64.
type cType uint8

const (
	// cVoid: no result.
	cVoid cType = iota
	// cWord: an integer (NSUInteger, NSInteger, uint64_t, an NS_ENUM or NS_OPTIONS
	// type) in a general-purpose register.
	cWord
	// cPointer: an object, a class, a selector, a C pointer or a block, in a
	// general-purpose register.
	cPointer
	// cBool: Objective-C BOOL, the low byte of a general-purpose register.
	cBool
	// cDouble: double (CFTimeInterval), in a floating-point register.
	cDouble
	// cTriple: a struct of three 64-bit integers (MTLSize, NSOperatingSystemVersion):
	// 24 bytes, passed by reference to a caller-made copy on arm64 and in memory on
	// the stack on amd64.
	cTriple
)

// objcMethod is one message the backend sends.
type objcMethod struct {
	// selector is the selector's name; it has one ':' per argument.
	selector string
	// class is true for a class method (sent to a Class object).
	class bool
	ret   cType
	args  []cType
}

// method indexes methods.
type method int

// The messages the backend sends.
const (
	mAlloc method = iota
	mInit
	mRetain
	mRelease
	mRespondsToSelector
	mProcessInfo
	mIsOperatingSystemAtLeastVersion
	mInitWithBytesLengthEncoding
	mUTF8String
	mLocalizedDescription
	mCode
	mCount
	mObjectAtIndex
	mLongLongValue
	mDeviceName
	mRecommendedMaxWorkingSetSize
	mHasUnifiedMemory
	mSupportsFamily
	mNewCommandQueue
	mNewBufferWithLength
	mNewBufferWithBytesNoCopy
	mNewLibraryWithSource
	mNewComputePipelineStateWithFunction
	mSetLanguageVersion
	mSetFastMathEnabled
	mSetMathMode
	mNewFunctionWithName
	mMaxTotalThreadsPerThreadgroup
	mThreadExecutionWidth
	mContents
	mCommandBuffer
	mComputeCommandEncoder
	mSetComputePipelineState
	mSetBufferOffsetAtIndex
	mSetBytesLengthAtIndex
	mDispatchThreadgroups
	mEndEncoding
	mCommit
	mWaitUntilCompleted
	mStatus
	mError
	mGPUEndTime
	numMethods
)

var (
	words   = []cType{cWord}
	objects = []cType{cPointer}
)

// methods describes every message, indexed by method.
var methods = [numMethods]objcMethod{
	mAlloc:                               {selector: "alloc", class: true, ret: cPointer},
	mInit:                                {selector: "init", ret: cPointer},
	mRetain:                              {selector: "retain", ret: cPointer},
	mRelease:                             {selector: "release", ret: cVoid},
	mRespondsToSelector:                  {selector: "respondsToSelector:", ret: cBool, args: objects},
	mProcessInfo:                         {selector: "processInfo", class: true, ret: cPointer},
	mIsOperatingSystemAtLeastVersion:     {selector: "isOperatingSystemAtLeastVersion:", ret: cBool, args: []cType{cTriple}},
	mInitWithBytesLengthEncoding:         {selector: "initWithBytes:length:encoding:", ret: cPointer, args: []cType{cPointer, cWord, cWord}},
	mUTF8String:                          {selector: "UTF8String", ret: cPointer},
	mLocalizedDescription:                {selector: "localizedDescription", ret: cPointer},
	mCode:                                {selector: "code", ret: cWord},
	mCount:                               {selector: "count", ret: cWord},
	mObjectAtIndex:                       {selector: "objectAtIndex:", ret: cPointer, args: words},
	mLongLongValue:                       {selector: "longLongValue", ret: cWord},
	mDeviceName:                          {selector: "name", ret: cPointer},
	mRecommendedMaxWorkingSetSize:        {selector: "recommendedMaxWorkingSetSize", ret: cWord},
	mHasUnifiedMemory:                    {selector: "hasUnifiedMemory", ret: cBool},
	mSupportsFamily:                      {selector: "supportsFamily:", ret: cBool, args: words},
	mNewCommandQueue:                     {selector: "newCommandQueue", ret: cPointer},
	mNewBufferWithLength:                 {selector: "newBufferWithLength:options:", ret: cPointer, args: []cType{cWord, cWord}},
	mNewBufferWithBytesNoCopy:            {selector: "newBufferWithBytesNoCopy:length:options:deallocator:", ret: cPointer, args: []cType{cPointer, cWord, cWord, cPointer}},
	mNewLibraryWithSource:                {selector: "newLibraryWithSource:options:error:", ret: cPointer, args: []cType{cPointer, cPointer, cPointer}},
	mNewComputePipelineStateWithFunction: {selector: "newComputePipelineStateWithFunction:error:", ret: cPointer, args: []cType{cPointer, cPointer}},
	mSetLanguageVersion:                  {selector: "setLanguageVersion:", ret: cVoid, args: words},
	mSetFastMathEnabled:                  {selector: "setFastMathEnabled:", ret: cVoid, args: []cType{cBool}},
	mSetMathMode:                         {selector: "setMathMode:", ret: cVoid, args: words},
	mNewFunctionWithName:                 {selector: "newFunctionWithName:", ret: cPointer, args: objects},
	mMaxTotalThreadsPerThreadgroup:       {selector: "maxTotalThreadsPerThreadgroup", ret: cWord},
	mThreadExecutionWidth:                {selector: "threadExecutionWidth", ret: cWord},
	mContents:                            {selector: "contents", ret: cPointer},
	mCommandBuffer:                       {selector: "commandBuffer", ret: cPointer},
	mComputeCommandEncoder:               {selector: "computeCommandEncoder", ret: cPointer},
	mSetComputePipelineState:             {selector: "setComputePipelineState:", ret: cVoid, args: objects},
	mSetBufferOffsetAtIndex:              {selector: "setBuffer:offset:atIndex:", ret: cVoid, args: []cType{cPointer, cWord, cWord}},
	mSetBytesLengthAtIndex:               {selector: "setBytes:length:atIndex:", ret: cVoid, args: []cType{cPointer, cWord, cWord}},
	mDispatchThreadgroups:                {selector: "dispatchThreadgroups:threadsPerThreadgroup:", ret: cVoid, args: []cType{cTriple, cTriple}},
	mEndEncoding:                         {selector: "endEncoding", ret: cVoid},
	mCommit:                              {selector: "commit", ret: cVoid},
	mWaitUntilCompleted:                  {selector: "waitUntilCompleted", ret: cVoid},
	mStatus:                              {selector: "status", ret: cWord},
	mError:                               {selector: "error", ret: cPointer},
	mGPUEndTime:                          {selector: "GPUEndTime", ret: cDouble},
}

// cFunction is one C function the backend calls.
type cFunction struct {
	name string
	// library is the framework or library that exports it.
	library string
	ret     cType
	args    []cType
}

// function indexes functions.
type function int

// The C functions the backend calls.
const (
	fnCreateSystemDefaultDevice function = iota
	fnCopyAllDevices
	fnAutoreleasePoolPush
	fnAutoreleasePoolPop
	fnIOServiceMatching
	fnIOServiceGetMatchingService
	fnIORegistryEntryCreateCFProperty
	fnIOObjectRelease
	numFunctions
)

// functions describes every C function, indexed by function.
var functions = [numFunctions]cFunction{
	fnCreateSystemDefaultDevice: {name: "MTLCreateSystemDefaultDevice", library: "Metal", ret: cPointer},
	fnCopyAllDevices:            {name: "MTLCopyAllDevices", library: "Metal", ret: cPointer},
	fnAutoreleasePoolPush:       {name: "objc_autoreleasePoolPush", library: "objc", ret: cPointer},
	fnAutoreleasePoolPop:        {name: "objc_autoreleasePoolPop", library: "objc", ret: cVoid, args: objects},
	// IOKit gives the GPU core count, which Metal does not.
	fnIOServiceMatching:               {name: "IOServiceMatching", library: "IOKit", ret: cPointer, args: objects},
	fnIOServiceGetMatchingService:     {name: "IOServiceGetMatchingService", library: "IOKit", ret: cWord, args: []cType{cWord, cPointer}},
	fnIORegistryEntryCreateCFProperty: {name: "IORegistryEntryCreateCFProperty", library: "IOKit", ret: cPointer, args: []cType{cWord, cPointer, cPointer, cWord}},
	fnIOObjectRelease:                 {name: "IOObjectRelease", library: "IOKit", ret: cWord, args: words},
}

// Constants of the Metal and Foundation headers the backend passes.
const (
	// MTLResourceStorageModeShared | MTLResourceCPUCacheModeDefaultCache |
	// MTLResourceHazardTrackingModeDefault: memory both processors address.
	resourceStorageModeShared = 0
	// NSUTF8StringEncoding.
	utf8StringEncoding = 4
	// MTLMathModeSafe.
	mathModeSafe = 0
	// MTLCommandBufferStatus values.
	commandBufferCompleted = 4
	commandBufferError     = 5
)

// MTLLanguageVersion values, newest first, and the macOS major version that brought each.
var languageVersions = []struct {
	value uint64
	name  string
	macOS int
}{
	{0x30002, "3.2", 15},
	{0x30001, "3.1", 14},
	{0x30000, "3.0", 13},
	{0x20004, "2.4", 12},
}

// MTLGPUFamily values for the device's Arch, newest first.
var gpuFamilies = []struct {
	value uint64
	name  string
}{
	{1009, "apple9"}, {1008, "apple8"}, {1007, "apple7"}, {1006, "apple6"}, {1005, "apple5"},
	{1004, "apple4"}, {1003, "apple3"}, {1002, "apple2"}, {1001, "apple1"}, {2002, "mac2"},
}
