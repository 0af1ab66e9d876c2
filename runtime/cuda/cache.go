package cuda

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"
)

// EnvCacheDir names the folder of the compiled-module cache; "off" turns it off.
const EnvCacheDir = "GUMBEL_CACHE_DIR"

// cacheKey identifies compiled code: the same source, options, target and NVRTC give
// the same code.
type cacheKey [sha256.Size]byte

// newCacheKey hashes what decides the compiled code. Each part is NUL-terminated, so no
// two different inputs run together into the same bytes.
func newCacheKey(source string, headers map[string]string, options []string, arch, nvrtcVersion string) cacheKey {
	h := sha256.New()
	part := func(s string) {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	for _, p := range []string{"gumbel/runtime/cuda module v2", "nvrtc " + nvrtcVersion, "target " + arch} {
		part(p)
	}
	for _, o := range options {
		part("option " + o)
	}
	sum := func(s string) string {
		d := sha256.Sum256([]byte(s))
		return hex.EncodeToString(d[:])
	}
	names := make([]string, 0, len(headers))
	for n := range headers {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		part("header " + n + " " + sum(headers[n]))
	}
	part("source " + sum(source))
	var k cacheKey
	h.Sum(k[:0])
	return k
}

// String returns the key in hex.
func (k cacheKey) String() string { return hex.EncodeToString(k[:]) }

// moduleImage is compiled code ready for cuModuleLoadData.
type moduleImage struct {
	data []byte
	// ptx: data is NUL-terminated PTX (else a CUBIN).
	ptx bool
}

// memoryCache holds every image this process compiled or read, so a second Load of a
// program skips NVRTC and the disk.
var memoryCache = imageCache{m: map[cacheKey]moduleImage{}}

type imageCache struct {
	mu sync.Mutex
	m  map[cacheKey]moduleImage
}

func (c *imageCache) get(k cacheKey) (moduleImage, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	img, ok := c.m[k]
	return img, ok
}

func (c *imageCache) put(k cacheKey, img moduleImage) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m[k] = img
}

// forget empties the cache (for tests that measure a disk-cache load).
func (c *imageCache) forget() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.m)
}

// cacheDir returns the folder of cache entries, or "" when the disk cache is off or there
// is no user cache folder.
func cacheDir() string {
	dir := os.Getenv(EnvCacheDir)
	switch dir {
	case "off":
		return ""
	case "":
		base, err := os.UserCacheDir()
		if err != nil {
			return ""
		}
		dir = filepath.Join(base, "gumbel")
	}
	return filepath.Join(dir, "cuda")
}

// A cache entry is a header and the code:
//
//	magic "GUMBELCU", format version u32, kind u32 (1 CUBIN, 2 PTX), length u64,
//	key [32], sha256 of the code [32], code
//
// all little-endian. Reading checks every field, so a truncated, corrupted or misplaced
// entry is recompiled rather than handed to the driver.
const (
	entryMagic   = "GUMBELCU"
	entryVersion = 1
	entryCUBIN   = 1
	entryPTX     = 2
	entryHeader  = 8 + 4 + 4 + 8 + 32 + 32
	// entryMaxCode bounds what a reader accepts; real modules are well under a MiB.
	entryMaxCode = 256 << 20
)

// errNotCached: there is no entry for the key (as opposed to a bad one).
var errNotCached = errors.New("not in the cache")

func entryPath(dir string, k cacheKey) string { return filepath.Join(dir, k.String()+".bin") }

// encodeEntry returns the bytes of a cache entry.
func encodeEntry(k cacheKey, img moduleImage) []byte {
	kind := uint32(entryCUBIN)
	if img.ptx {
		kind = entryPTX
	}
	sum := sha256.Sum256(img.data)
	b := make([]byte, 0, entryHeader+len(img.data))
	b = append(b, entryMagic...)
	b = binary.LittleEndian.AppendUint32(b, entryVersion)
	b = binary.LittleEndian.AppendUint32(b, kind)
	b = binary.LittleEndian.AppendUint64(b, uint64(len(img.data)))
	b = append(b, k[:]...)
	b = append(b, sum[:]...)
	return append(b, img.data...)
}

// decodeEntry checks and unpacks a cache entry for key k.
func decodeEntry(k cacheKey, b []byte) (moduleImage, error) {
	if len(b) < entryHeader || string(b[:8]) != entryMagic {
		return moduleImage{}, errors.New("not a gumbel cache entry")
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v != entryVersion {
		return moduleImage{}, fmt.Errorf("entry format %d, want %d", v, entryVersion)
	}
	kind := binary.LittleEndian.Uint32(b[12:])
	if kind != entryCUBIN && kind != entryPTX {
		return moduleImage{}, fmt.Errorf("unknown code kind %d", kind)
	}
	n := binary.LittleEndian.Uint64(b[16:])
	if n == 0 || n > entryMaxCode || n != uint64(len(b)-entryHeader) {
		return moduleImage{}, fmt.Errorf("code length %d does not match the entry's %d bytes", n, len(b)-entryHeader)
	}
	if !bytes.Equal(b[24:56], k[:]) {
		return moduleImage{}, errors.New("entry holds another key")
	}
	code := b[entryHeader:]
	if sum := sha256.Sum256(code); !bytes.Equal(b[56:88], sum[:]) {
		return moduleImage{}, errors.New("checksum mismatch")
	}
	img := moduleImage{data: code, ptx: kind == entryPTX}
	if img.ptx && code[len(code)-1] != 0 {
		return moduleImage{}, errors.New("PTX is not NUL-terminated")
	}
	return img, nil
}

// readCacheEntry returns the cached code for k; errNotCached when there is none, another
// error when the entry is unreadable or corrupt.
func readCacheEntry(dir string, k cacheKey) (moduleImage, error) {
	path := entryPath(dir, k)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return moduleImage{}, errNotCached
	}
	if err != nil {
		return moduleImage{}, fmt.Errorf("cuda module cache: %w", err)
	}
	img, err := decodeEntry(k, b)
	if err != nil {
		return moduleImage{}, fmt.Errorf("cuda module cache: %s: %w (recompiled)", path, err)
	}
	return img, nil
}

// writeCacheEntry stores the code for k atomically: a reader sees the old entry, no
// entry or the whole new one, never a partial file.
func writeCacheEntry(dir string, k cacheKey, img moduleImage) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("cuda module cache: %w", err)
	}
	f, err := os.CreateTemp(dir, k.String()+".*.tmp")
	if err != nil {
		return fmt.Errorf("cuda module cache: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(encodeEntry(k, img))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, entryPath(dir, k))
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("cuda module cache: %w", err)
	}
	return nil
}
