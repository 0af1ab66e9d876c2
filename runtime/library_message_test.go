package runtime

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLibraryNotFoundMessage: the "not found" error says what was missing on its first
// line, then one tried path per line (issue 21: eight paths on one line were unreadable).
func TestLibraryNotFoundMessage(t *testing.T) {
	s := LibrarySearch{
		What:   "libcuda (the NVIDIA driver)",
		EnvVar: "GUMBEL_TEST_LIBRARY",
		Names:  []string{"libcuda.so.1", "libcuda.so"},
		Dirs:   []string{"/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib/wsl/lib"},
	}
	t.Setenv("GUMBEL_TEST_LIBRARY", "")
	candidates := s.Candidates()
	require.Len(t, candidates, 8)
	_, _, err := s.Find(func(p string) (uintptr, error) {
		return 0, errors.New(p + ": cannot open shared object file: No such file or directory")
	})
	require.ErrorIs(t, err, ErrUnavailable)
	lines := strings.Split(err.Error(), "\n")
	require.Len(t, lines, 1+len(candidates), "a summary line, then one line per tried path:\n%s", err)
	assert.Contains(t, lines[0], "libcuda (the NVIDIA driver) not found")
	assert.Contains(t, lines[0], "set GUMBEL_TEST_LIBRARY")
	assert.Contains(t, lines[0], "8 paths")
	for i, c := range candidates {
		assert.True(t, strings.HasPrefix(lines[1+i], "  "+c+": "), "line %d: %q", 1+i, lines[1+i])
		assert.Equal(t, 1, strings.Count(lines[1+i], c), "the path is not repeated: %q", lines[1+i])
	}
}

// TestLibraryNotFoundOnePath: an explicit path is tried alone; the message stays short.
func TestLibraryNotFoundOnePath(t *testing.T) {
	s := LibrarySearch{What: "libcuda", EnvVar: "GUMBEL_TEST_LIBRARY"}
	t.Setenv("GUMBEL_TEST_LIBRARY", "/opt/x/libcuda.so.1")
	_, _, err := s.Find(func(p string) (uintptr, error) { return 0, errors.New("no such file") })
	require.Error(t, err)
	lines := strings.Split(err.Error(), "\n")
	require.Len(t, lines, 2, "%s", err)
	assert.Equal(t, "  /opt/x/libcuda.so.1: no such file", lines[1])
}
