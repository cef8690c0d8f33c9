package pmem

import "fmt"

// Requirement is what the caller insists the backing store be. Opening
// never silently downgrades: a path that does not meet the requirement is
// refused with an error saying what to do.
type Requirement uint8

const (
	// RequireNothing accepts any backing, volatile included (tests).
	RequireNothing Requirement = iota
	// RequireDurable refuses volatile backing (tmpfs, ramfs).
	RequireDurable
	// RequirePmem accepts only DAX: a device-DAX device or a file on a
	// DAX file system that can be mapped with MAP_SYNC.
	RequirePmem
)

func (r Requirement) String() string {
	switch r {
	case RequireNothing:
		return "nothing"
	case RequireDurable:
		return "durable"
	case RequirePmem:
		return "pmem"
	}
	return fmt.Sprintf("Requirement(%d)", uint8(r))
}

// probe is what opening a path found out about it; decideMode turns it
// into a mode. Keeping the decision a pure function lets it be tested for
// every kind of backing, DAX included, on machines that have none.
type probe struct {
	path       string
	charDevice bool // a character device
	devDAX     bool // ... whose sysfs subsystem is "dax"
	regular    bool // a regular file
	volatileFS bool // on tmpfs or ramfs
	mapSync    bool // MAP_SHARED_VALIDATE|MAP_SYNC was accepted
	mapSyncErr error
}

// decideMode picks the mode for p or refuses it under req.
func decideMode(p probe, req Requirement) (Mode, error) {
	var mode Mode
	switch {
	case p.charDevice && p.devDAX:
		mode = ModeDevDAX
	case p.charDevice:
		return 0, fmt.Errorf("%w: %s is a character device but not device-DAX: use /dev/daxX.Y or a file", ErrUnsupported, p.path)
	case !p.regular:
		return 0, fmt.Errorf("%w: %s is neither a regular file nor a device-DAX device", ErrUnsupported, p.path)
	case p.volatileFS:
		mode = ModeVolatile
	case p.mapSync:
		mode = ModeFSDAX
	default:
		mode = ModeFile
	}
	switch {
	case req == RequirePmem && !mode.IsPmem():
		why := "it is a plain file (MAP_SYNC was refused"
		if p.mapSyncErr != nil {
			why += ": " + p.mapSyncErr.Error()
		}
		why += ")"
		if mode == ModeVolatile {
			why = "it is on tmpfs/ramfs"
		}
		return 0, fmt.Errorf("%w: %s is not DAX: %s; put the region on a file system mounted with -o dax on a pmem device, use a device-DAX device (/dev/daxX.Y), or drop the pmem requirement to run on %s with msync durability", ErrNotPmem, p.path, why, mode)
	case req == RequireDurable && mode == ModeVolatile:
		return 0, fmt.Errorf("%w: %s is on tmpfs/ramfs and would not survive a reboot; put the region on a persistent file system or a DAX device, or drop the durability requirement for a test node", ErrNotDurable, p.path)
	}
	return mode, nil
}

// mediumPersistence is how a medium in mode m persists: its domain and
// instruction. best is the CPU's best flush instruction (InstrMsync when
// there is none); eadr says the platform reports a CPU-cache persistence
// domain. Device DAX has no msync (the kernel refuses it), so without a
// cache-flush instruction it cannot be made durable and is refused.
func mediumPersistence(m Mode, best Instruction, eadr bool) (Domain, Instruction, error) {
	switch m {
	case ModeFile:
		return DomainStorage, InstrMsync, nil
	case ModeDevDAX, ModeFSDAX:
		d := DomainMemoryController
		if eadr {
			d = DomainCPUCache
		}
		if m == ModeDevDAX && !best.IsCacheFlush() {
			return d, InstrNone, fmt.Errorf("%w: device DAX can only be made durable with a CPU cache-flush instruction and this build has none for this architecture (device DAX refuses msync); use a file on a file system mounted with -o dax, which is persisted with msync here", ErrUnsupported)
		}
		return d, best, nil
	}
	return DomainNone, InstrNone, nil
}

// ParseRequirement reads a requirement as operators write it: none,
// durable or pmem.
func ParseRequirement(s string) (Requirement, error) {
	switch s {
	case "", "none", "nothing":
		return RequireNothing, nil
	case "durable":
		return RequireDurable, nil
	case "pmem":
		return RequirePmem, nil
	}
	return 0, fmt.Errorf("%w: requirement %q: use none, durable or pmem", ErrUnsupported, s)
}
