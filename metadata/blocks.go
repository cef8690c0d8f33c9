package metadata

import (
	"context"
	"time"

	"github.com/octofs/octofs/metadata/wire"
)

// st_blocks. A regular file's blocks live at its chunks' owners, not in
// its inode record, so the inode's owner asks them (DataHooks.Usage)
// after every change that may have moved them: a commit of writes (its
// mtime moves), a truncate or a grow (its size moves), a trim of the
// blocks past the size or a mark that there are some (InodeHasBlocks).
// Until the answer arrives, and when a node does not answer, st_blocks is
// the estimate from the size (every block below it allocated), as it was
// before the count; a new empty file is 0 at once. The count runs on a
// goroutine, one at a time per file: changes that arrive meanwhile make it
// run once more, and a count that crossed a change is dropped. It is kept
// in memory only (inode.usage): after a restart, a file's first stat
// (getattr, lookup, open) has it counted again (usageWanted).

// usageTimeout bounds one count.
const usageTimeout = 10 * time.Second

// usageChange is what an inode record does to a regular file's count.
type usageChange int

const (
	usageSame  usageChange = iota
	usageEmpty             // a new, empty file: nothing to count
	usageMoved             // the file's blocks may have changed: count again
)

// usageChangeOf tells what applying rec will do to the count of the file
// it is the record of; p.mu is held, and rec is not applied yet.
func (p *partition) usageChangeOf(rec wire.Record) (uint64, usageChange) {
	r, ok := rec.(*wire.InodeRecord)
	if !ok || r.Mode&wire.ModeType != wire.ModeRegular {
		return 0, usageSame
	}
	n := p.inodes[r.Ino]
	switch {
	case n == nil && r.Size == 0:
		return r.Ino, usageEmpty
	case n == nil, usageMoves(&n.rec, r):
		return r.Ino, usageMoved
	}
	return 0, usageSame
}

// usageMoves reports whether a regular file's record going from old to
// rec may have moved its blocks: writes were committed (mtime), the size
// changed, or blocks past the size appeared or were trimmed.
func usageMoves(old, rec *wire.InodeRecord) bool {
	return rec.Size != old.Size || rec.Mtime != old.Mtime || (rec.Flags^old.Flags)&wire.InodeHasBlocks != 0
}

// attrWith is the stat(2) view the inode will have once rec, a new record
// of it, is applied: the answer of a request that commits rec. A change
// that moves a regular file's blocks leaves its st_blocks the estimate
// until they are counted again.
func (n *inode) attrWith(rec *wire.InodeRecord) wire.Attr {
	nn := *n
	nn.rec = *rec
	if n.isRegular() && usageMoves(&n.rec, rec) {
		nn.usageKnown = false
	}
	return nn.attr()
}

// resized is attrWith for a new record rec of regular file n that changes
// its size and writes nothing (setattr's size, a truncate's end): a grow
// allocates no block and a shrink frees those past the new size, so a
// count known before stays known, capped at the blocks below the new
// size, where attrWith would answer the estimate from the size (a file
// grown to 1 TiB by truncate would say 1 TiB of blocks, and cp would copy
// it as a dense file). keep, called once rec is applied, keeps that count
// until the one the commit started says exactly. p.mu is held
// exclusively.
func (p *partition) resized(n *inode, rec *wire.InodeRecord) (a wire.Attr, keep func()) {
	a = n.attrWith(rec)
	if !n.isRegular() || !n.usageKnown {
		return a, func() {}
	}
	usage := min(n.usage, blockBytes(rec.Size))
	a.Blocks = (usage + 511) / 512
	return a, func() {
		if m := p.inodes[rec.Ino]; m != nil && m.rec == *rec {
			m.usage, m.usageKnown = usage, true
		}
	}
}

// noteUsage applies ch to the count of ino, whose record was just
// applied; p.mu is held exclusively.
func (p *partition) noteUsage(ino uint64, ch usageChange) {
	n := p.inodes[ino]
	if n == nil || ch == usageSame {
		return
	}
	n.usageGen++
	if ch == usageEmpty {
		n.usage, n.usageKnown = 0, true
		return
	}
	n.usageKnown = false
	p.countBlocks(ino, true)
}

// countBlocks has ino's blocks counted on a goroutine; p.mu is held.
// changed says the file's blocks may have moved since a count under way
// read the inode: that count then runs once more. A stat's request
// (usageWanted) is met by any count under way, and is dropped for a while
// after a count failed (a node away), or every stat would send another.
func (p *partition) countBlocks(ino uint64, changed bool) {
	p.countMu.Lock()
	defer p.countMu.Unlock()
	if again, ok := p.counting[ino]; ok {
		p.counting[ino] = again || changed
		return
	}
	if !changed && p.svc.now().Sub(p.countFailed) < usageRetry {
		return
	}
	if p.counting == nil {
		p.counting = make(map[uint64]bool)
	}
	p.counting[ino] = false
	p.svc.goBackground(func(ctx context.Context) { p.countUsage(ctx, ino) })
}

// usageWanted is for a handler about to answer n's attributes (p.mu held,
// shared or exclusive): a regular file whose blocks were not counted since
// this node loaded the partition has them counted, so that the next
// answer has them.
func (p *partition) usageWanted(n *inode) {
	if n.isRegular() && !n.usageKnown && n.rec.Size > 0 && n.rec.Flags&wire.InodeFreeing == 0 {
		p.countBlocks(n.rec.Ino, false)
	}
}

// usageRetry is how long after a failed count a stat asks for none.
const usageRetry = 5 * time.Second

// countUsage counts ino's blocks until no change arrived during a count.
func (p *partition) countUsage(ctx context.Context, ino uint64) {
	again := func(failed bool) bool {
		p.countMu.Lock()
		defer p.countMu.Unlock()
		if failed {
			p.countFailed = p.svc.now()
		}
		if !failed && p.counting[ino] {
			p.counting[ino] = false
			return true
		}
		delete(p.counting, ino)
		return false
	}
	for {
		p.mu.RLock()
		n := p.inodes[ino]
		if n == nil || !n.isRegular() || n.rec.Flags&wire.InodeFreeing != 0 {
			p.mu.RUnlock()
			again(false)
			return
		}
		gen, size, past := n.usageGen, n.rec.Size, n.rec.Flags&wire.InodeHasBlocks != 0
		p.mu.RUnlock()
		cctx, cancel := context.WithTimeout(ctx, usageTimeout)
		used, err := p.svc.cfg.Data.Usage(cctx, ino, size, past)
		cancel()
		if err != nil {
			// The estimate stands until a change or a stat counts again.
			p.svc.log.Debug("counting a file's blocks failed; st_blocks stays the estimate", "ino", ino, "err", err)
		} else {
			p.mu.Lock()
			if n = p.inodes[ino]; n != nil && n.usageGen == gen {
				n.usage, n.usageKnown = used, true
			}
			p.mu.Unlock()
		}
		if !again(err != nil) {
			return
		}
	}
}
