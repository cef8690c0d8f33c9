package metadata

import (
	"context"

	"github.com/octofs/octofs/metadata/wire"
)

// recoverPartition finishes what the partition's log left unfinished:
// intents (create, link, unlink, rmdir, truncate) are run to their end,
// decided renames dispatched again, inodes being freed freed. A client
// repeating a request one of them serves waits for it (its at-most-once
// entry is registered first), so a retry after a restart gets the
// original outcome instead of executing again.
func (s *Service) recoverPartition(p *partition) {
	p.mu.Lock()
	intents := sortedTxns(p.intents)
	decisions := sortedTxns(p.decisions)
	var freeing []uint64
	for ino, n := range p.inodes {
		if n.rec.Flags&wire.InodeFreeing != 0 {
			freeing = append(freeing, ino)
		}
	}
	p.mu.Unlock()
	for _, id := range intents {
		p.mu.RLock()
		in := p.intents[id]
		p.mu.RUnlock()
		e, owned := s.claimRequest(in.ClientID, in.Incarnation, in.Seq)
		s.goBackground(func(ctx context.Context) {
			p.mu.Lock()
			var res result
			if p.intents[id] != nil {
				switch in.Op {
				case wire.IntentCreate:
					res = p.finishCreate(in)
				case wire.IntentLink:
					res = p.finishLink(in)
				case wire.IntentUnlink, wire.IntentRmdir:
					res = p.finishRemove(in)
				case wire.IntentTruncate:
					res = p.finishTruncate(in)
				}
			}
			p.mu.Unlock()
			if owned {
				s.dedup.finish(clientKey{in.ClientID, in.Incarnation}, in.Seq, e, res.status, res.bytes(), final(res.status))
			}
			s.log.Info("recovered an intent", "partition", p.id, "txn", id, "op", in.Op, "status", res.status)
		})
	}
	for _, id := range decisions {
		p.mu.RLock()
		dec := p.decisions[id]
		p.mu.RUnlock()
		e, owned := s.claimRequest(dec.ClientID, dec.Incarnation, dec.Seq)
		s.goBackground(func(ctx context.Context) {
			res := p.finishDecision(dec)
			if owned {
				s.dedup.finish(clientKey{dec.ClientID, dec.Incarnation}, dec.Seq, e, res.status, res.bytes(), final(res.status))
			}
			s.log.Info("re-dispatched a decided rename", "partition", p.id, "txn", id, "status", res.status)
		})
	}
	for _, ino := range freeing {
		s.goBackground(func(ctx context.Context) { p.finishFree(ctx, ino) })
	}
}

// claimRequest registers a request a recovery serves as in flight.
func (s *Service) claimRequest(client, inc, seq uint64) (*dedupEntry, bool) {
	if seq == 0 {
		return nil, false
	}
	return s.dedup.begin(clientKey{client, inc}, seq, 0, s.now())
}
