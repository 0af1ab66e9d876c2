package nccl

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gumbel-go/gumbel/collective"
	"github.com/gumbel-go/gumbel/internal/testenv"
	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/cpu"
)

// TestMain runs the tests in a temporary folder, the fake library's among them, that is
// removed even when they are interrupted.
func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }

// withDescribe installs a description of statuses for the test's duration.
func withDescribe(t *testing.T, f func(Result) string) {
	prev := describe.Load()
	if f == nil {
		describe.Store(nil)
	} else {
		describe.Store(&f)
	}
	t.Cleanup(func() { describe.Store(prev) })
}

func TestResultNames(t *testing.T) {
	withDescribe(t, nil)
	cases := []struct {
		r    Result
		want string
	}{
		{Success, "ncclSuccess"},
		{UnhandledCudaError, "ncclUnhandledCudaError"},
		{SystemError, "ncclSystemError"},
		{InternalError, "ncclInternalError"},
		{InvalidArgument, "ncclInvalidArgument"},
		{InvalidUsage, "ncclInvalidUsage"},
		{RemoteError, "ncclRemoteError"},
		{InProgress, "ncclInProgress"},
		{Timeout, "ncclTimeout"},
		{9, "ncclResult_t(9)"},
		{-1, "ncclResult_t(-1)"},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, c.r.String())
		assert.Equal(t, c.want, c.r.Error(), "without a library, the name alone")
	}
	withDescribe(t, func(r Result) string {
		if r == InvalidUsage {
			return "invalid usage"
		}
		return ""
	})
	assert.Equal(t, "ncclInvalidUsage: invalid usage", InvalidUsage.Error())
	assert.Equal(t, "ncclSystemError", SystemError.Error(), "no description: the name alone")
}

func TestResultIs(t *testing.T) {
	err := error(InvalidArgument)
	assert.ErrorIs(t, err, collective.ErrArgument)
	assert.ErrorIs(t, err, runtime.ErrInvalidArgument)
	assert.ErrorIs(t, err, InvalidArgument)
	assert.NotErrorIs(t, err, InvalidUsage)
	assert.NotErrorIs(t, InvalidUsage, collective.ErrArgument)
	var r Result
	require.True(t, errors.As(err, &r))
	assert.Equal(t, InvalidArgument, r)
}

func TestOpenMissing(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "libnccl.so.2")
	t.Setenv(EnvLibrary, missing)
	_, err := Open()
	require.ErrorIs(t, err, runtime.ErrUnavailable)
	if supported() == nil {
		assert.Contains(t, err.Error(), "libnccl (NVIDIA's collective communications library) not found (set GUMBEL_NCCL_LIBRARY to its path)")
		assert.Contains(t, err.Error(), missing)
	}
}

// TestSearch: the explicit path alone when it is set, otherwise the sonames first.
func TestSearch(t *testing.T) {
	t.Setenv(EnvLibrary, "/opt/nccl/libnccl.so.2")
	assert.Equal(t, []string{"/opt/nccl/libnccl.so.2"}, search().Candidates())
	t.Setenv(EnvLibrary, "")
	c := search().Candidates()
	require.GreaterOrEqual(t, len(c), 2)
	assert.Equal(t, []string{"libnccl.so.2", "libnccl.so"}, c[:2])
	assert.Contains(t, c, filepath.Join("/usr/local/cuda/lib64", "libnccl.so.2"))
}

// TestRefusesOtherDevices: the public API takes CUDA devices only, and says so before
// calling the library.
func TestRefusesOtherDevices(t *testing.T) {
	d, err := cpu.Open()
	require.NoError(t, err)
	defer d.Close()
	var l Library // no library loaded: nothing may be called
	_, err = l.InitRank(d, UniqueID{}, 1, 0)
	require.ErrorIs(t, err, collective.ErrArgument)
	assert.Contains(t, err.Error(), "nccl: InitRank: ")
	assert.Contains(t, err.Error(), "is a cpu device; NCCL runs on CUDA devices")
	_, err = l.InitAll([]runtime.Device{d})
	require.ErrorIs(t, err, collective.ErrArgument)
	assert.Contains(t, err.Error(), "nccl: InitAll: ")
	_, err = l.InitRank(nil, UniqueID{}, 1, 0)
	assert.ErrorIs(t, err, collective.ErrArgument)
	_, err = l.InitAll(nil)
	assert.ErrorIs(t, err, collective.ErrArgument)
}
