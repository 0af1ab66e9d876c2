//go:build !(linux && (amd64 || arm64))

package nccl

import (
	"fmt"
	goruntime "runtime"

	"github.com/gumbel-go/gumbel/runtime"
)

// supported says why NCCL cannot run here: NVIDIA ships it for Linux only, and on other
// Linux architectures purego cannot pass the unique id by value.
func supported() error {
	return fmt.Errorf("%w: nccl: NCCL runs on linux/amd64 and linux/arm64, not %s/%s", runtime.ErrUnavailable, goruntime.GOOS, goruntime.GOARCH)
}
