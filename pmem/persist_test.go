package pmem

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCPUFlushInstructions(t *testing.T) {
	m, err := NewAnonMedium(1 << 20)
	require.NoError(t, err)
	defer m.Close()
	buf := m.Bytes()
	insts := CPUInstructions()
	t.Logf("CPU flush instructions: %v; regions on DAX use %v; line %d B", insts, BestInstruction(), CacheLineSize())
	if len(insts) == 0 {
		t.Skip("skipping: this CPU/architecture has no cache-flush instruction wired up (DAX falls back to msync)")
	}
	require.Equal(t, insts[0], BestInstruction())
	for _, i := range insts {
		t.Run(i.String(), func(t *testing.T) {
			for _, tc := range []struct{ off, n int }{{0, 1}, {0, 64}, {63, 2}, {100, 4096}, {len(buf) - 1, 1}} {
				buf[tc.off] = 0xab
				require.NoError(t, FlushLines(i, buf[tc.off:tc.off+tc.n]))
				require.Equal(t, byte(0xab), buf[tc.off], "flushing never changes the data")
			}
		})
	}
}

func TestFlushLinesRefusesOthers(t *testing.T) {
	for _, i := range []Instruction{InstrNone, InstrMsync, Instruction(99)} {
		require.ErrorIs(t, FlushLines(i, make([]byte, 8)), ErrUnsupported, "%v", i)
	}
}
