package collective_test

import (
	"encoding/binary"
	"fmt"
	"log"
	"math"
	"sync"

	"github.com/gumbel-go/gumbel/collective"
	"github.com/gumbel-go/gumbel/runtime"
	"github.com/gumbel-go/gumbel/runtime/cpu"
)

// pack is a row's packed key: the score's order key above the complement of the token,
// so the largest key is the largest score, ties to the lowest token.
func pack(score float32, token int) uint64 {
	b := math.Float32bits(score)
	if b>>31 != 0 {
		b = ^b
	} else {
		b |= 1 << 31
	}
	return uint64(b)<<32 | uint64(^uint32(token))
}

// Vocabulary-parallel sampling over two shards: each rank writes its best key per row,
// and one AllReduce with max leaves the winning key of each row on both ranks.
func Example() {
	dev, err := cpu.Open()
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	comms, err := collective.NewLocal(2)
	if err != nil {
		log.Fatal(err)
	}

	// Two rows over a vocabulary of 8 tokens: rank 0 holds tokens 0-3, rank 1 tokens
	// 4-7. These are each shard's best (score, global token) per row.
	best := [][]uint64{
		{pack(2.5, 1), pack(-0.5, 3)}, // rank 0
		{pack(1.0, 6), pack(0.25, 4)}, // rank 1
	}
	keys := make([]runtime.Buffer, len(comms))
	for rank := range comms {
		if keys[rank], err = dev.Alloc(8 * len(best[rank])); err != nil {
			log.Fatal(err)
		}
		if err := dev.DefaultStream().CopyToDevice(keys[rank], 0, runtime.BytesOf(best[rank])); err != nil {
			log.Fatal(err)
		}
	}

	var wg sync.WaitGroup
	for rank, c := range comms {
		wg.Go(func() {
			if err := c.AllReduce(keys[rank], 0, 2, collective.Uint64, collective.OpMax, dev.DefaultStream()); err != nil {
				log.Fatal(err)
			}
		})
	}
	wg.Wait()

	for rank, c := range comms {
		out := make([]byte, 16)
		if err := dev.DefaultStream().CopyToHost(out, keys[rank], 0); err != nil {
			log.Fatal(err)
		}
		if err := dev.DefaultStream().Synchronize(); err != nil {
			log.Fatal(err)
		}
		for row := range 2 {
			token := ^uint32(binary.LittleEndian.Uint64(out[8*row:]))
			fmt.Printf("rank %d row %d: token %d\n", rank, row, token)
		}
		c.Close()
	}
	// Output:
	// rank 0 row 0: token 1
	// rank 0 row 1: token 4
	// rank 1 row 0: token 1
	// rank 1 row 1: token 4
}
