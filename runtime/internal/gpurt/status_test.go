package gpurt

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
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
