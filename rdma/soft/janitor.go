package soft

import "time"

// The janitor: one goroutine per device that looks, every tick, at the
// links that may need it, and
//
//   - gives the read turn of a link that no driver took for idleGrace to
//     its background goroutine (link.go), so that the peer's requests are
//     read although the application stopped waiting;
//   - sends an acknowledgement that waited a whole tick for a frame going
//     the other way to ride on (a delayed ACK), and from then on has the
//     link acknowledge at once, until the application answers its peer's
//     messages quickly again (link.pingpong). (Most delayed ACKs never get
//     here: they ride on the answer.)
//
// It replaces a timer per link: re-arming a runtime timer on every round
// trip cost as much CPU as the round trip's own work (it wakes the thread
// asleep in the poller), and took an 8-byte SEND ping-pong from 1.1x to
// 1.4x the TCP ping-pong on a two-core machine. Ticking is not free
// either (a tick of 1 ms cost 0.2x of the same ping-pong), so the tick
// backs off, doubling up to janitorMaxTick, while every link it looks at
// turns out to need nothing, and returns to janitorTick when one does. A
// link is put on the list when it goes idle or owes a delayed ACK, and
// taken off when the janitor finds it needs nothing, so a busy link costs
// a map operation per tick, not per round trip. The janitor runs only
// while the list is not empty.

// The janitor's period: an idle link is handed over, and a delayed ACK
// sent, within one to two ticks, of janitorTick when the janitor has been
// needed lately and up to janitorMaxTick when it has not.
const (
	janitorTick    = time.Millisecond
	janitorMaxTick = 8 * time.Millisecond
)

// watchLocked puts l on its device's janitor list; the caller holds
// l.q.mu.
func (l *link) watchLocked() {
	if l.watched {
		return
	}
	d := l.dev
	d.janMu.Lock()
	defer d.janMu.Unlock()
	if d.janClosed {
		return
	}
	l.watched = true
	l.idleTicks = 0
	l.janGen, l.janAckSeq = l.gen, l.ackSeq
	d.janList[l] = struct{}{}
	if !d.janRunning {
		d.janRunning = true
		d.wg.Add(1)
		go d.janitor()
	}
}

func (d *Device) janitor() {
	defer d.wg.Done()
	d.janMu.Lock()
	tick := max(d.janTick, janitorTick) // the backoff outlives a run
	d.janMu.Unlock()
	t := time.NewTimer(tick)
	defer t.Stop()
	var links []*link
	for {
		select {
		case <-d.done:
			return
		case <-t.C:
		}
		d.janMu.Lock()
		if len(d.janList) == 0 {
			d.janRunning = false
			d.janMu.Unlock()
			return
		}
		links = links[:0]
		for l := range d.janList {
			links = append(links, l)
		}
		d.janMu.Unlock()
		needed := false
		for _, l := range links {
			sendAck, helped := l.sweep(tick)
			if sendAck {
				l.transmit(false)
			}
			needed = needed || helped
		}
		clear(links)
		if needed {
			tick = janitorTick
		} else {
			tick = min(2*tick, janitorMaxTick)
		}
		d.janMu.Lock()
		d.janTick = tick
		d.janMu.Unlock()
		t.Reset(tick)
	}
}

// sweep is the janitor's look at one link, tick after its previous one.
// It reports whether an acknowledgement is to be sent, and whether the
// link needed the janitor.
func (l *link) sweep(tick time.Duration) (sendAck, helped bool) {
	q := l.q
	q.mu.Lock()
	defer q.mu.Unlock()
	busy := false
	if l.mode == rxIdle && !l.detached {
		busy = true
		if l.gen != l.janGen {
			l.janGen, l.idleTicks = l.gen, 0 // a driver came and went
		} else if l.idleTicks += tick; l.idleTicks >= l.grace {
			l.toBackgroundLocked()
			busy, helped = false, true
		}
	}
	if l.ackOwed && l.ackDelay {
		if l.ackSeq == l.janAckSeq {
			// Owed for a whole tick and nothing rode on: send it, and
			// acknowledge at once until the application answers again.
			l.ackDelay = false
			l.pingpong = false
			sendAck, helped = true, true
		} else {
			l.janAckSeq = l.ackSeq
			busy = true
		}
	}
	if !busy {
		d := l.dev
		d.janMu.Lock()
		delete(d.janList, l)
		d.janMu.Unlock()
		l.watched = false
	}
	return sendAck, helped
}
