//go:build darwin

package metal

import "unsafe"

// fallbackCores is used when the IORegistry has no core count (an Intel Mac's GPU, or a
// registry layout this code does not know): a small Apple GPU's count, so that split
// policies err toward fewer, larger blocks.
const fallbackCores = 8

// agxAccelerator is the IOKit class of Apple's GPU driver, NUL-terminated.
var agxAccelerator = []byte("AGXAccelerator\x00")

// gpuCores reads the GPU core count from the IORegistry entry of Apple's GPU driver
// (AGXAccelerator's "gpu-core-count"); Metal itself does not report it.
func (d *Device) gpuCores() int {
	matching := d.c.callFn1(fnIOServiceMatching, uintptr(unsafe.Pointer(&agxAccelerator[0])))
	if matching == 0 {
		return fallbackCores
	}
	// IOServiceGetMatchingService consumes matching. Main port 0 is kIOMainPortDefault.
	service := uint32(d.c.callFn2(fnIOServiceGetMatchingService, 0, matching))
	if service == 0 {
		return fallbackCores
	}
	defer d.c.callFn1(fnIOObjectRelease, uintptr(service))
	key := d.c.newString("gpu-core-count")
	defer d.c.release(key)
	// An NSString is a CFStringRef, and the CFNumber that comes back an NSNumber.
	num := d.c.callFn4(fnIORegistryEntryCreateCFProperty, uintptr(service), key, 0, 0)
	if num == 0 {
		return fallbackCores
	}
	defer d.c.release(num)
	if n := int(int64(d.c.send0(num, mLongLongValue))); n > 0 && n < 1<<16 {
		return n
	}
	return fallbackCores
}
