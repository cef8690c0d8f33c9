package pmem

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDecideMode(t *testing.T) {
	eop := errors.New("operation not supported")
	tests := map[string]struct {
		p        probe
		req      Requirement
		want     Mode
		wantErr  error
		inAdvice string
	}{
		"devdax":                       {p: probe{charDevice: true, devDAX: true}, req: RequirePmem, want: ModeDevDAX},
		"fsdax file":                   {p: probe{regular: true, mapSync: true}, req: RequirePmem, want: ModeFSDAX},
		"plain file":                   {p: probe{regular: true, mapSyncErr: eop}, want: ModeFile},
		"plain file, durable required": {p: probe{regular: true}, req: RequireDurable, want: ModeFile},
		"plain file, pmem required":    {p: probe{regular: true, mapSyncErr: eop}, req: RequirePmem, wantErr: ErrNotPmem, inAdvice: "-o dax"},
		"tmpfs":                        {p: probe{regular: true, volatileFS: true}, want: ModeVolatile},
		"tmpfs, durable required":      {p: probe{regular: true, volatileFS: true}, req: RequireDurable, wantErr: ErrNotDurable, inAdvice: "persistent file system"},
		"tmpfs, pmem required":         {p: probe{regular: true, volatileFS: true}, req: RequirePmem, wantErr: ErrNotPmem, inAdvice: "tmpfs"},
		"other character device":       {p: probe{charDevice: true}, wantErr: ErrUnsupported, inAdvice: "/dev/daxX.Y"},
		"directory or socket":          {p: probe{}, wantErr: ErrUnsupported},
		"devdax is durable":            {p: probe{charDevice: true, devDAX: true}, req: RequireDurable, want: ModeDevDAX},
		"fsdax without a pmem demand":  {p: probe{regular: true, mapSync: true}, want: ModeFSDAX},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tc.p.path = "/some/region"
			got, err := decideMode(tc.p, tc.req)
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				require.Contains(t, err.Error(), tc.inAdvice)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestMediumPersistence(t *testing.T) {
	tests := map[string]struct {
		mode     Mode
		best     Instruction
		eadr     bool
		wantDom  Domain
		wantInst Instruction
		wantErr  error
	}{
		"plain file uses msync":                 {ModeFile, InstrCLWB, false, DomainStorage, InstrMsync, nil},
		"fsdax uses the cpu flush":              {ModeFSDAX, InstrCLWB, false, DomainMemoryController, InstrCLWB, nil},
		"devdax on eADR":                        {ModeDevDAX, InstrCLFLUSHOPT, true, DomainCPUCache, InstrCLFLUSHOPT, nil},
		"fsdax without flush insns uses msync":  {ModeFSDAX, InstrMsync, false, DomainMemoryController, InstrMsync, nil},
		"devdax without flush insns is refused": {ModeDevDAX, InstrMsync, false, DomainMemoryController, InstrNone, ErrUnsupported},
		"volatile flushes nothing":              {ModeVolatile, InstrCLWB, false, DomainNone, InstrNone, nil},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			d, i, err := mediumPersistence(tc.mode, tc.best, tc.eadr)
			require.ErrorIs(t, err, tc.wantErr)
			require.Equal(t, tc.wantDom, d)
			require.Equal(t, tc.wantInst, i)
		})
	}
}
