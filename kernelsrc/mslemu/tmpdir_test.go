package mslemu

import (
	"os"
	"testing"

	"github.com/gumbel-go/gumbel/internal/testenv"
)

// TestMain runs the tests in a temporary folder that is removed even when they are
// interrupted.
func TestMain(m *testing.M) { os.Exit(testenv.Run(m)) }
