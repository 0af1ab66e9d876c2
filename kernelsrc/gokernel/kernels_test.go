package gokernel

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestKernelsNames(t *testing.T) {
	k := Kernels()
	var names []string
	for n, fn := range k {
		require.NotNil(t, fn, n)
		names = append(names, n)
	}
	slices.Sort(names)
	assert.Equal(t, []string{
		"categorical_bf16", "categorical_f16", "categorical_f32",
		"filter_max_bf16", "filter_max_f16", "filter_max_f32",
		"filtered_bf16", "filtered_f16", "filtered_f32",
		"gumbel_argmax_bf16", "gumbel_argmax_f16", "gumbel_argmax_f32",
		"gumbel_exact_bf16", "gumbel_exact_f16", "gumbel_exact_f32",
		"residual_bf16", "residual_f16", "residual_f32",
		"score_bf16", "score_f16", "score_f32",
		"shard_select_bf16", "shard_select_f16", "shard_select_f32",
		"topn_bf16", "topn_f16", "topn_f32",
	}, names)
}
