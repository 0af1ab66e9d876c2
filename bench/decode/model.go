package decode

import (
	"errors"
	"fmt"

	"github.com/gumbel-go/gumbel/runtime"
)

// model is the decode model on a device: its kernels, weights, activations and the
// launch arguments of each kernel, built once so that a step allocates nothing.
type model struct {
	cfg                       Config
	mod                       runtime.Module
	embed, hidden, head       runtime.Kernel
	e, w, tokens, x, h        runtime.Buffer
	logits                    runtime.Buffer
	embedArgs, hiddenArgs     runtime.Args
	headArgs                  runtime.Args
	embedBlock, gemvBlockSize runtime.Dim3
	hiddenGrid, headGrid      runtime.Dim3
}

// newModel loads the program, uploads the weights of cfg and prepares the launches.
func newModel(dev runtime.Device, cfg Config) (m *model, err error) {
	m = &model{cfg: cfg}
	defer func() {
		if err != nil {
			err = errors.Join(err, m.close())
			m = nil
		}
	}()
	if m.mod, err = dev.Load(Program); err != nil {
		return nil, err
	}
	for _, k := range []struct {
		name string
		dst  *runtime.Kernel
	}{{"embed_bf16", &m.embed}, {"hidden_bf16", &m.hidden}, {headKernel.name, &m.head}} {
		if *k.dst, err = m.mod.Kernel(k.name); err != nil {
			return nil, err
		}
	}
	e, w := Weights(cfg)
	st := dev.DefaultStream()
	upload := func(src []byte) (runtime.Buffer, error) {
		b, err := dev.Alloc(len(src))
		if err != nil {
			return nil, err
		}
		if err := st.CopyToDevice(b, 0, src); err != nil {
			return nil, errors.Join(err, b.Free())
		}
		return b, nil
	}
	if m.e, err = upload(runtime.BytesOf(e)); err != nil {
		return nil, err
	}
	if m.w, err = upload(runtime.BytesOf(w)); err != nil {
		return nil, err
	}
	if err = st.Synchronize(); err != nil {
		return nil, err
	}
	for _, a := range []struct {
		dst   *runtime.Buffer
		bytes int
	}{{&m.tokens, 4 * cfg.Batch}, {&m.x, 4 * cfg.Batch * cfg.Hidden}, {&m.h, 4 * cfg.Batch * cfg.Hidden}, {&m.logits, 4 * cfg.Batch * cfg.Vocab}} {
		if *a.dst, err = dev.Alloc(a.bytes); err != nil {
			return nil, err
		}
	}

	info := dev.Info()
	block := gemvBlock
	for _, k := range []runtime.Kernel{m.hidden, m.head} {
		block = min(block, k.MaxThreadsPerBlock())
	}
	ws := max(1, info.WarpSize)
	block = block / ws * ws
	if block < 1 {
		return nil, fmt.Errorf("%w: the GEMV kernels allow blocks of only %d threads", ErrConfig, block)
	}
	m.gemvBlockSize = runtime.Dim3{X: block, Y: 1, Z: 1}
	m.embedBlock = runtime.Dim3{X: min(gemvBlock, m.embed.MaxThreadsPerBlock()) / ws * ws, Y: 1, Z: 1}
	m.hiddenGrid = gemvGrid(cfg.Hidden, block, ws, info.Multiprocessors)
	m.headGrid = gemvGridFor(cfg.Vocab, block, ws, info.Multiprocessors, headKernel.rowsPerWarp(cfg.Batch), headKernel.blocksPerSM)

	m.embedArgs.Reset().Buffer(m.e).Buffer(m.tokens).Buffer(m.x).U32(uint32(cfg.Vocab)).U32(uint32(cfg.Hidden))
	m.hiddenArgs.Reset().Buffer(m.w).Buffer(m.x).Buffer(m.h).U32(uint32(cfg.Hidden)).U32(uint32(cfg.Hidden)).U32(uint32(cfg.Batch))
	m.headArgs.Reset().Buffer(m.e).Buffer(m.h).Buffer(m.logits).U32(uint32(cfg.Vocab)).U32(uint32(cfg.Hidden)).U32(uint32(cfg.Batch))
	return m, nil
}

// lmHeadKernel names an LM head kernel and the launch shape its CUDA edition is built for.
type lmHeadKernel struct {
	name        string
	blocksPerSM int
	// rowsPerWarp returns the matrix rows a warp streams at once at batch b.
	rowsPerWarp func(b int) int
}

// headKernel is the LM head the model launches: lm_head_bf16, launch bounds (256, 2), 8
// rows a warp up to batch 4 and 4 above (on an H200 at V = 151936, H = 1024: 4141 GB/s at
// batch 1 and 3465 GB/s at batch 4).
var headKernel = lmHeadKernel{name: "lm_head_bf16", blocksPerSM: 2, rowsPerWarp: func(b int) int {
	if b <= 4 {
		return 8
	}
	return 4
}}

// gemvGrid sizes a launch of the first-edition GEMV kernels over rows matrix rows.
func gemvGrid(rows, block, warp, multiprocessors int) runtime.Dim3 {
	return gemvGridFor(rows, block, warp, multiprocessors, rowsPerWarp, blocksPerSM)
}

// gemvGridFor sizes a GEMV launch over rows matrix rows: enough blocks to fill every
// multiprocessor with perSM blocks, no more than there are row groups of rpw rows a warp.
func gemvGridFor(rows, block, warp, multiprocessors, rpw, perSM int) runtime.Dim3 {
	warps := max(1, block/max(1, warp))
	rpw = max(1, rpw)
	need := (rows + warps*rpw - 1) / (warps * rpw)
	return runtime.Dim3{X: max(1, min(need, max(1, multiprocessors)*max(1, perSM))), Y: 1, Z: 1}
}

// forward queues embed, hidden and LM head on st: logits from the tokens buffer.
func (m *model) forward(st runtime.Stream) error {
	if err := st.Launch(m.embed, runtime.Dim3{X: m.cfg.Batch, Y: 1, Z: 1}, m.embedBlock, &m.embedArgs); err != nil {
		return err
	}
	if err := st.Launch(m.hidden, m.hiddenGrid, m.gemvBlockSize, &m.hiddenArgs); err != nil {
		return err
	}
	return m.lmHead(st)
}

// lmHead queues the LM head alone.
func (m *model) lmHead(st runtime.Stream) error {
	return st.Launch(m.head, m.headGrid, m.gemvBlockSize, &m.headArgs)
}

// close frees what newModel made.
func (m *model) close() error {
	var errs []error
	for _, b := range []runtime.Buffer{m.e, m.w, m.tokens, m.x, m.h, m.logits} {
		if b != nil {
			errs = append(errs, b.Free())
		}
	}
	if m.mod != nil {
		errs = append(errs, m.mod.Close())
	}
	return errors.Join(errs...)
}
