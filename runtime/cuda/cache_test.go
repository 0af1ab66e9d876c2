package cuda

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/internal/fakegpu"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// corruptFile flips the last byte of a file.
func corruptFile(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	b[len(b)-1] ^= 0xFF
	require.NoError(t, os.WriteFile(path, b, 0o644))
}

func TestCacheKeyCoversEveryInput(t *testing.T) {
	opts := []string{"--gpu-architecture=sm_90", "--fmad=false"}
	base := newCacheKey("src", nil, opts, "sm_90", "13.0")
	assert.Equal(t, base, newCacheKey("src", nil, opts, "sm_90", "13.0"), "the key is deterministic")
	assert.Len(t, base.String(), 64)
	variants := map[string]cacheKey{
		"source":        newCacheKey("src ", nil, opts, "sm_90", "13.0"),
		"options":       newCacheKey("src", nil, []string{"--gpu-architecture=sm_90", "--fmad=true"}, "sm_90", "13.0"),
		"option order":  newCacheKey("src", nil, []string{"--fmad=false", "--gpu-architecture=sm_90"}, "sm_90", "13.0"),
		"option split":  newCacheKey("src", nil, []string{"--gpu-architecture=sm_90--fmad=false"}, "sm_90", "13.0"),
		"architecture":  newCacheKey("src", nil, opts, "sm_100", "13.0"),
		"NVRTC version": newCacheKey("src", nil, opts, "sm_90", "12.9"),
		"no options":    newCacheKey("src", nil, nil, "sm_90", "13.0"),
		"a header":      newCacheKey("src", map[string]string{"a.cuh": "x"}, opts, "sm_90", "13.0"),
		"header text":   newCacheKey("src", map[string]string{"a.cuh": "y"}, opts, "sm_90", "13.0"),
		"header name":   newCacheKey("src", map[string]string{"b.cuh": "x"}, opts, "sm_90", "13.0"),
	}
	seen := map[cacheKey]string{base: "base"}
	for name, k := range variants {
		if prev, dup := seen[k]; dup {
			t.Errorf("changing the %s gives the key of %s", name, prev)
		}
		seen[k] = name
	}
}

func TestCacheEntryRoundTrip(t *testing.T) {
	k := newCacheKey("src", nil, nil, "sm_90", "13.0")
	for _, img := range []moduleImage{
		{data: []byte("\x7fELF cubin bytes")},
		{data: []byte(".version 8.8\n.target sm_90\x00"), ptx: true},
	} {
		got, err := decodeEntry(k, encodeEntry(k, img))
		require.NoError(t, err)
		assert.Equal(t, img, got)
	}
}

func TestCacheEntryRejectsCorruption(t *testing.T) {
	k := newCacheKey("src", nil, nil, "sm_90", "13.0")
	other := newCacheKey("other", nil, nil, "sm_90", "13.0")
	good := encodeEntry(k, moduleImage{data: []byte("cubin code")})
	mutate := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	cases := map[string][]byte{
		"empty":              nil,
		"truncated header":   good[:20],
		"truncated code":     good[:len(good)-1],
		"appended garbage":   append(append([]byte(nil), good...), 0),
		"bad magic":          mutate(func(b []byte) []byte { b[0] = 'X'; return b }),
		"future version":     mutate(func(b []byte) []byte { b[8] = 9; return b }),
		"unknown kind":       mutate(func(b []byte) []byte { b[12] = 7; return b }),
		"flipped code byte":  mutate(func(b []byte) []byte { b[len(b)-1] ^= 1; return b }),
		"flipped checksum":   mutate(func(b []byte) []byte { b[60] ^= 1; return b }),
		"huge length":        mutate(func(b []byte) []byte { b[23] = 0x7f; return b }),
		"PTX without NUL":    encodeEntry(k, moduleImage{data: []byte(".version 8.8"), ptx: true}),
		"zero-length code":   encodeEntry(k, moduleImage{data: []byte{}}),
		"entry of other key": encodeEntry(other, moduleImage{data: []byte("cubin code")}),
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := decodeEntry(k, b)
			assert.Error(t, err)
		})
	}
}

func TestCacheFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nested", "cuda")
	k := newCacheKey("src", nil, nil, "sm_90", "13.0")
	_, err := readCacheEntry(dir, k)
	assert.ErrorIs(t, err, errNotCached, "a missing folder is a miss, not an error")

	img := moduleImage{data: []byte("cubin v1")}
	require.NoError(t, writeCacheEntry(dir, k, img))
	got, err := readCacheEntry(dir, k)
	require.NoError(t, err)
	assert.Equal(t, img, got)

	img2 := moduleImage{data: []byte("cubin v2, longer")}
	require.NoError(t, writeCacheEntry(dir, k, img2), "an entry is replaced in place")
	got, err = readCacheEntry(dir, k)
	require.NoError(t, err)
	assert.Equal(t, img2, got)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1, "no temporary file is left")
	assert.Equal(t, k.String()+".bin", entries[0].Name())

	corruptFile(t, filepath.Join(dir, entries[0].Name()))
	_, err = readCacheEntry(dir, k)
	require.Error(t, err)
	assert.NotErrorIs(t, err, errNotCached)
	assert.Contains(t, err.Error(), "checksum")

	blocked := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(blocked, nil, 0o644))
	assert.Error(t, writeCacheEntry(filepath.Join(blocked, "cuda"), k, img), "an unwritable folder is reported")
}

func TestCacheDir(t *testing.T) {
	t.Setenv(EnvCacheDir, "off")
	assert.Empty(t, cacheDir())
	t.Setenv(EnvCacheDir, "/somewhere")
	assert.Equal(t, filepath.Join("/somewhere", "cuda"), cacheDir())
	t.Setenv(EnvCacheDir, "")
	t.Setenv("XDG_CACHE_HOME", "/xdg")
	t.Setenv("HOME", "/home/u")
	if base, err := os.UserCacheDir(); err == nil {
		assert.Equal(t, filepath.Join(base, "gumbel", "cuda"), cacheDir())
	} else {
		assert.Empty(t, cacheDir())
	}
}

func TestMemoryCache(t *testing.T) {
	c := imageCache{m: map[cacheKey]moduleImage{}}
	k := newCacheKey("a", nil, nil, "sm_90", "13.0")
	_, ok := c.get(k)
	assert.False(t, ok)
	c.put(k, moduleImage{data: []byte("x")})
	img, ok := c.get(k)
	assert.True(t, ok)
	assert.Equal(t, []byte("x"), img.data)
	c.forget()
	_, ok = c.get(k)
	assert.False(t, ok)
}

// caseLoadCache loads a program cold (NVRTC), warm from disk and warm from memory, and
// then from a corrupted disk entry, which must be recompiled.
func caseLoadCache(t *testing.T, d *Device) {
	dir := t.TempDir()
	t.Setenv(EnvCacheDir, dir)
	memoryCache.forget()
	p := &runtime.Program{Name: "cache_test", CUDA: fakegpu.Source + "\n// " + t.Name() + "\n"}
	load := func(want LoadSource) LoadStats {
		t.Helper()
		m, err := d.Load(p)
		require.NoError(t, err)
		k, err := m.Kernel("add_one")
		require.NoError(t, err)
		assert.Equal(t, "add_one", k.Name())
		require.NoError(t, m.Close())
		st := d.LastLoad()
		assert.Equal(t, want, st.Source)
		assert.Equal(t, "cache_test", st.Program)
		assert.Equal(t, d.Target(), st.Target)
		return st
	}
	cold := load(Compiled)
	require.NoError(t, cold.CacheErr)
	assert.Positive(t, cold.Compile)
	memoryCache.forget()
	disk := load(DiskCache)
	require.NoError(t, disk.CacheErr)
	assert.Zero(t, disk.Compile)
	warm := load(MemoryCache)
	assert.Equal(t, cold.Key, warm.Key)
	t.Logf("Load of %s for %s: cold (NVRTC %v) %v, disk cache %v, memory cache %v",
		p.Name, cold.Target, cold.Compile.Round(time.Microsecond), cold.Total.Round(time.Microsecond),
		disk.Total.Round(time.Microsecond), warm.Total.Round(time.Microsecond))

	// Corrupt the one entry: it must be recompiled and rewritten, never loaded.
	matches := glob(dir + "/cuda/*.bin")
	require.Len(t, matches, 1)
	corruptFile(t, matches[0])
	memoryCache.forget()
	again := load(Compiled)
	require.Error(t, again.CacheErr)
	assert.Contains(t, again.CacheErr.Error(), "checksum")
	memoryCache.forget()
	load(DiskCache)
	assert.Empty(t, glob(dir+"/cuda/*.tmp"), "no temporary files are left behind")
}
