package gpurt

import (
	"errors"
	"testing"

	"github.com/gumbel-go/gumbel/runtime"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNamerDescribe(t *testing.T) {
	var n Namer[int32]
	assert.Equal(t, "CUresult(2)", n.Describe(2, "CUresult"), "nothing installed: the C type and number")
	f := func(r int32) (string, string) {
		switch r {
		case 1:
			return "ERROR_ONE", "the first"
		case 2:
			return "ERROR_TWO", ""
		case 3:
			return "", "only words"
		case 4:
			return "hipErrorFour", "hipErrorFour"
		}
		return "", ""
	}
	n.Store(&f)
	cases := []struct {
		r    int32
		want string
	}{
		{1, "ERROR_ONE: the first"},
		{2, "ERROR_TWO"},
		{3, "T(3): only words"},
		{4, "hipErrorFour"},
		{-7, "T(-7)"},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, n.Describe(c.r, "T"), "status %d", c.r)
	}
}

func TestBackendFailed(t *testing.T) {
	err := testBackend.Failed("cuMemAlloc_v2(64)", 2)
	assert.Equal(t, "cuMemAlloc_v2(64): status 2", err.Error())
	var s testStatus
	assert.True(t, errors.As(err, &s), "the backend's own status type unwraps")
	assert.Equal(t, testStatus(2), s)
}

func TestCodes(t *testing.T) {
	c := RTCCodes[testStatus]("testResult")
	cases := []struct {
		code testStatus
		is   error
		not  error
	}{
		{1, runtime.ErrOutOfMemory, runtime.ErrCompile},
		{6, runtime.ErrCompile, runtime.ErrOutOfMemory},
		{5, nil, runtime.ErrCompile},
	}
	for _, tc := range cases {
		if tc.is != nil {
			assert.True(t, c.Is(tc.code, tc.is), "%d is %v", tc.code, tc.is)
		}
		assert.False(t, c.Is(tc.code, tc.not), "%d is not %v", tc.code, tc.not)
	}
	prev := c.Load()
	t.Cleanup(func() { c.Store(prev) })
	assert.Equal(t, "testResult(6)", c.Error(6), "no words installed: the C type and number")
	c.Use(func(code int32) (string, string) { return "ERROR_" + string(rune('0'+code)), "" })
	assert.Equal(t, "ERROR_6", c.Error(6))

	assert.NoError(t, ErrorOf[testStatus](0), "0 is success")
	assert.Equal(t, testStatus(3), ErrorOf[testStatus](3))
}

// testDevice is a runtime.Device of a made-up backend, for AsDevice.
type testDevice struct{ runtime.Device }

func TestAsDevice(t *testing.T) {
	d := &testDevice{}
	got, err := AsDevice[*testDevice](testBackend, "Wrap", d)
	require.NoError(t, err)
	assert.Same(t, d, got)
	for _, dev := range []runtime.Device{nil, (*testDevice)(nil), testDevice{}} {
		_, err := AsDevice[*testDevice](testBackend, "Wrap", dev)
		assert.ErrorIs(t, err, runtime.ErrInvalidArgument, "%T", dev)
		assert.ErrorContains(t, err, "test.Wrap: ")
	}
}
