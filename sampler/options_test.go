package sampler

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSwitchResolve(t *testing.T) {
	const env = "GUMBEL_SAMPLER_TEST_SWITCH"
	tests := []struct {
		name    string
		sw      Switch
		env     string
		set     bool
		want    bool
		wantErr bool
	}{
		{"on ignores env", On, "0", true, true, false},
		{"off ignores env", Off, "1", true, false, false},
		{"env unset", FromEnv, "", false, true, false},
		{"env 0", FromEnv, "0", true, false, false},
		{"env 0 with spaces", FromEnv, " 0\n", true, false, false},
		{"env 1", FromEnv, "1", true, true, false},
		{"env empty", FromEnv, "", true, true, false},
		{"env other", FromEnv, "false", true, true, false},
		{"unknown switch value", Switch(9), "", false, false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.set {
				t.Setenv(env, tc.env)
			}
			got, err := tc.sw.resolve(env)
			if tc.wantErr {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestBlockSize(t *testing.T) {
	tests := []struct {
		name                  string
		requested, kmax, warp int
		want                  int
		wantErr               bool
	}{
		{"default", 0, 1024, 32, 1024, false},
		{"default, kernel allows less", 0, 768, 32, 768, false},
		{"default, odd kernel limit rounds to warps", 0, 700, 32, 672, false},
		{"default, cpu", 0, 1024, 1, 1024, false},
		{"requested", 256, 1024, 32, 256, false},
		{"requested above the kernel limit", 2048, 1024, 64, 1024, false},
		{"requested, cpu, any width", 7, 1024, 1, 7, false},
		{"unknown warp size counts as 1", 5, 1024, 0, 5, false},
		{"not a warp multiple", 100, 1024, 32, 0, true},
		{"negative", -32, 1024, 32, 0, true},
		{"kernel allows less than a warp", 0, 16, 32, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := blockSize(tc.requested, tc.kmax, tc.warp)
			if tc.wantErr {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

// sizedBuffer is a Buffer that only has a size, for shape checks.
type sizedBuffer int

func (b sizedBuffer) Size() int          { return int(b) }
func (b sizedBuffer) DevicePtr() uintptr { return 0 }
func (b sizedBuffer) Free() error        { return nil }

func TestCheckLogits(t *testing.T) {
	tests := []struct {
		name       string
		lg         Logits
		params     int
		wantStride int
		wantErr    bool
	}{
		{"exact fit", Logits{Data: sizedBuffer(4 * 30), Rows: 3, Vocab: 10}, 3, 10, false},
		{"stride", Logits{Data: sizedBuffer(4 * (2*16 + 10)), Rows: 3, Vocab: 10, RowStride: 16}, 3, 16, false},
		{"offset", Logits{Data: sizedBuffer(8 + 2*20), Offset: 8, DType: BFloat16, Rows: 2, Vocab: 10}, 2, 10, false},
		{"no rows", Logits{Data: sizedBuffer(0), Rows: 0, Vocab: 10}, 0, 10, false},
		{"largest vocab", Logits{Data: sizedBuffer(2 * (1<<31 - 1)), DType: Float16, Rows: 1, Vocab: 1<<31 - 1}, 1, 1<<31 - 1, false},
		{"one byte short", Logits{Data: sizedBuffer(4*30 - 1), Rows: 3, Vocab: 10}, 3, 0, true},
		{"stride makes it short", Logits{Data: sizedBuffer(4 * 30), Rows: 3, Vocab: 10, RowStride: 11}, 3, 0, true},
		{"offset makes it short", Logits{Data: sizedBuffer(4 * 30), Offset: 4, Rows: 3, Vocab: 10}, 3, 0, true},
		{"offset past the end", Logits{Data: sizedBuffer(16), Offset: 32, Rows: 1, Vocab: 1}, 1, 0, true},
		{"misaligned offset", Logits{Data: sizedBuffer(400), Offset: 2, Rows: 1, Vocab: 10}, 1, 0, true},
		{"negative offset", Logits{Data: sizedBuffer(400), Offset: -4, Rows: 1, Vocab: 10}, 1, 0, true},
		{"rows against params", Logits{Data: sizedBuffer(400), Rows: 3, Vocab: 10}, 2, 0, true},
		{"negative rows", Logits{Data: sizedBuffer(400), Rows: -1, Vocab: 10}, -1, 0, true},
		{"vocab 0", Logits{Data: sizedBuffer(400), Rows: 1, Vocab: 0}, 1, 0, true},
		{"vocab 2^31", Logits{Data: sizedBuffer(400), Rows: 1, Vocab: 1 << 31}, 1, 0, true},
		{"stride below vocab", Logits{Data: sizedBuffer(400), Rows: 2, Vocab: 10, RowStride: 9}, 2, 0, true},
		{"negative stride", Logits{Data: sizedBuffer(400), Rows: 2, Vocab: 10, RowStride: -10}, 2, 0, true},
		{"overflowing stride", Logits{Data: sizedBuffer(400), Rows: 3, Vocab: 10, RowStride: 1 << 62}, 3, 0, true},
		{"nil buffer", Logits{Rows: 1, Vocab: 10}, 1, 0, true},
		{"unknown dtype", Logits{Data: sizedBuffer(400), DType: 3, Rows: 1, Vocab: 10}, 1, 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			stride, err := checkLogits(tc.lg, tc.params)
			if tc.wantErr {
				assert.ErrorIs(t, err, ErrShape)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.wantStride, stride)
		})
	}
}
