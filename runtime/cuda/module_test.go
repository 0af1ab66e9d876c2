package cuda

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestChooseTarget(t *testing.T) {
	cuda13 := []int{75, 80, 86, 87, 88, 89, 90, 100, 103, 110, 120, 121}
	cuda12 := []int{50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90}
	cases := []struct {
		name         string
		major, minor int
		archs        []int
		cubin        bool
		want         compileTarget
		err          bool
	}{
		{"H200 with NVRTC 13", 9, 0, cuda13, true, compileTarget{"sm_90", true}, false},
		{"B200 with NVRTC 13", 10, 0, cuda13, true, compileTarget{"sm_100", true}, false},
		{"B200 with NVRTC 12.4: PTX of the newest below", 10, 0, cuda12, true, compileTarget{"compute_90", false}, false},
		{"unknown minor: CUBIN of the same major", 8, 9, []int{80, 86}, true, compileTarget{"sm_86", true}, false},
		{"no CUBIN support: PTX", 9, 0, cuda13, false, compileTarget{"compute_90", false}, false},
		{"NVRTC cannot list architectures", 9, 0, nil, true, compileTarget{"sm_90", true}, false},
		{"old NVRTC without CUBIN or list", 8, 6, nil, false, compileTarget{"compute_86", false}, false},
		{"device older than NVRTC supports", 6, 1, cuda13, true, compileTarget{}, true},
		{"empty list", 9, 0, []int{}, true, compileTarget{}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := chooseTarget(c.major, c.minor, c.archs, c.cubin)
			if c.err {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, c.want, got)
		})
	}
}

func TestCompileOptions(t *testing.T) {
	// No fused multiply-add: the ABI rounds a score's product and sum separately.
	assert.Equal(t, []string{"--gpu-architecture=compute_90", "--fmad=false", "-default-device", "--std=c++17"},
		compileOptions(compileTarget{arch: "compute_90"}))
}

func TestLoadSourceString(t *testing.T) {
	assert.Equal(t, "compiled", Compiled.String())
	assert.Equal(t, "disk cache", DiskCache.String())
	assert.Equal(t, "memory cache", MemoryCache.String())
	assert.Equal(t, "LoadSource(0)", LoadSource(0).String())
}
