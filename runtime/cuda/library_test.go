package cuda

import (
	"os"
	"path/filepath"
	goruntime "runtime"
	"testing"

	"github.com/gumbel-go/gumbel/internal/dynlib"
	"github.com/gumbel-go/gumbel/runtime"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestIsStub(t *testing.T) {
	cases := map[string]bool{
		"/usr/local/cuda/lib64/stubs/libcuda.so":                    true,
		"/usr/local/cuda/targets/x86_64-linux/lib/stubs/libcuda.so": true,
		`C:\CUDA\lib\x64\Stubs\nvcuda.dll`:                          true,
		"stubs/libcuda.so":                                          true,
		"/usr/lib/x86_64-linux-gnu/libcuda.so.1":                    false,
		"libcuda.so.1":                                              false,
		"/opt/stubsy/libcuda.so":                                    false,
		"/opt/lib/stubs":                                            false, // a file named stubs is not a stubs folder
		"":                                                          false,
	}
	for path, want := range cases {
		assert.Equal(t, want, isStub(path), path)
	}
}

func TestDriverSearch(t *testing.T) {
	t.Setenv(EnvCUDALibrary, "")
	s := driverSearch()
	c := s.Candidates()
	if goruntime.GOOS == "windows" {
		assert.Equal(t, []string{"nvcuda.dll"}, c)
	} else {
		require.GreaterOrEqual(t, len(c), 2)
		assert.Equal(t, []string{"libcuda.so.1", "libcuda.so"}, c[:2], "versioned soname first")
		assert.Contains(t, c, "/usr/lib/wsl/lib/libcuda.so.1")
	}
	for _, p := range c {
		assert.False(t, s.Reject(p), p)
	}

	t.Setenv(EnvCUDALibrary, "/opt/nvidia/libcuda.so.580")
	assert.Equal(t, []string{"/opt/nvidia/libcuda.so.580"}, driverSearch().Candidates(), "the explicit path alone")
}

func TestNVRTCSearch(t *testing.T) {
	if goruntime.GOOS == "windows" {
		t.Setenv("CUDA_PATH", `C:\CUDA\v13.0`)
		c := nvrtcSearch().Candidates()
		assert.Equal(t, []string{"nvrtc64_130_0.dll", "nvrtc64_120_0.dll"}, c[:2])
		assert.Contains(t, c, filepath.Join(`C:\CUDA\v13.0`, "bin", "x64", "nvrtc64_130_0.dll"))
		return
	}
	home := t.TempDir()
	venv := t.TempDir()
	site := filepath.Join(venv, "lib", "python3.12", "site-packages")
	require.NoError(t, os.MkdirAll(site, 0o755))
	t.Setenv("HOME", home)
	t.Setenv("VIRTUAL_ENV", venv)
	t.Setenv("CUDA_HOME", "/opt/cuda-13.0")
	t.Setenv(EnvNVRTCLibrary, "")
	c := nvrtcSearch().Candidates()
	assert.Equal(t, []string{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"}, c[:3])
	for _, want := range []string{
		"/opt/cuda-13.0/lib64/libnvrtc.so.13",
		"/usr/local/cuda/lib64/libnvrtc.so.13",
		"/usr/local/cuda/targets/" + toolkitTargets()[0] + "/lib/libnvrtc.so.12",
		filepath.Join(site, "nvidia", "cu13", "lib", "libnvrtc.so.13"),
		filepath.Join(site, "nvidia", "cuda_nvrtc", "lib", "libnvrtc.so.12"),
	} {
		assert.Contains(t, c, want)
	}
	// CUDA_HOME comes before the default toolkit folder.
	assert.Less(t, indexOf(c, "/opt/cuda-13.0/lib64/libnvrtc.so.13"), indexOf(c, "/usr/local/cuda/lib64/libnvrtc.so.13"))

	t.Setenv(EnvNVRTCLibrary, "/x/libnvrtc.so.13.0.48")
	assert.Equal(t, []string{"/x/libnvrtc.so.13.0.48"}, nvrtcSearch().Candidates())
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

func TestNewestFirst(t *testing.T) {
	got := newestFirst([]string{"/usr/local/cuda-11.8", "/usr/local/cuda-12.10", "/usr/local/cuda-12.4", "/usr/local/cuda-13.0", "/usr/local/cuda-12"})
	assert.Equal(t, []string{"/usr/local/cuda-13.0", "/usr/local/cuda-12.10", "/usr/local/cuda-12.4", "/usr/local/cuda-12", "/usr/local/cuda-11.8"}, got)
}

func TestFindRefusesStubs(t *testing.T) {
	t.Setenv(EnvCUDALibrary, "/usr/local/cuda/lib64/stubs/libcuda.so")
	var loaded []string
	_, _, err := driverSearch().Find(func(p string) (uintptr, error) {
		loaded = append(loaded, p)
		return 1, nil
	})
	require.Error(t, err)
	assert.ErrorIs(t, err, runtime.ErrUnavailable)
	assert.Contains(t, err.Error(), "refused")
	assert.Empty(t, loaded, "the stub is never handed to the loader")
}

func TestSymbolListsBind(t *testing.T) {
	// The symbol lists bind completely against a library that has everything.
	all := func(string) uintptr { return 1 }
	assert.NoError(t, dynlib.Bind("libcuda", all, (&driver{}).symbols()))
	assert.NoError(t, dynlib.Bind("libnvrtc", all, (&nvrtc{}).extra()))
}

func TestLoadMissingLibrary(t *testing.T) {
	dir := t.TempDir()
	for _, load := range []func() error{
		func() error {
			_, err := loadDriver(runtime.LibrarySearch{What: "libcuda", Names: []string{filepath.Join(dir, "libcuda.so.1")}})
			return err
		},
		func() error {
			_, err := loadNVRTC(runtime.LibrarySearch{What: "libnvrtc", Names: []string{filepath.Join(dir, "libnvrtc.so.13")}})
			return err
		},
	} {
		err := load()
		require.Error(t, err)
		assert.ErrorIs(t, err, runtime.ErrUnavailable)
	}
}

// TestOpenWithoutGPU: on a machine without the NVIDIA driver (CI), Open and the registry
// report the backend unavailable instead of failing harder; on a GPU machine they open it.
func TestOpenWithoutGPU(t *testing.T) {
	d, err := Open(0)
	if err != nil {
		assert.ErrorIs(t, err, runtime.ErrUnavailable)
		assert.Nil(t, d)
		t.Logf("no CUDA here: %v", err)
	} else {
		assert.Equal(t, runtime.CUDA, d.Info().Backend)
		assert.NoError(t, d.Close())
	}

	res := probe()
	assert.Equal(t, runtime.CUDA, res.Backend)
	if err != nil {
		require.Error(t, res.Err)
		assert.ErrorIs(t, res.Err, runtime.ErrUnavailable)
	} else {
		assert.NotEmpty(t, res.Devices)
	}

	assert.Contains(t, runtime.Backends(), runtime.CUDA, "registered from init")
	opened, oerr := runtime.Open(runtime.OpenOptions{Backend: "cuda"})
	if err != nil {
		assert.ErrorIs(t, oerr, runtime.ErrUnavailable)
	} else {
		require.NoError(t, oerr)
		assert.NoError(t, opened.Close())
	}
	_, err = Open(-1)
	assert.Error(t, err)
}
