package memory

import (
	"context"
	"slices"
	"sync"

	"github.com/google/uuid"

	"github.com/pgoutbox/outbox"
)

// Publisher records messages. The zero value is not usable; call New.
type Publisher struct {
	mu      sync.Mutex
	msgs    []outbox.Message
	counts  map[uuid.UUID]int // publishes per event id
	fail    func(*outbox.Message) error
	changed chan struct{} // closed and replaced on every publish
}

// New returns an empty Publisher.
func New() *Publisher {
	return &Publisher{changed: make(chan struct{}), counts: map[uuid.UUID]int{}}
}

// FailWith makes every later Publish call f first; a non-nil error from f is
// returned instead of recording the message. nil restores normal behaviour.
func (p *Publisher) FailWith(f func(*outbox.Message) error) {
	p.mu.Lock()
	p.fail = f
	p.mu.Unlock()
}

// Publish records msg, or fails as configured with FailWith.
func (p *Publisher) Publish(ctx context.Context, msg *outbox.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p.mu.Lock()
	fail := p.fail
	p.mu.Unlock()
	if fail != nil {
		if err := fail(msg); err != nil {
			return err
		}
	}
	m := *msg
	m.Payload = slices.Clone(msg.Payload)
	p.mu.Lock()
	p.msgs = append(p.msgs, m)
	p.counts[m.ID]++
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
	return nil
}

// Messages returns a copy of everything published so far, in publish order.
func (p *Publisher) Messages() []outbox.Message {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.msgs)
}

// Len returns how many messages were published, duplicates included.
func (p *Publisher) Len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.msgs)
}

// Count returns how many times each event id was published.
func (p *Publisher) Count() map[uuid.UUID]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[uuid.UUID]int, len(p.counts))
	for id, n := range p.counts {
		out[id] = n
	}
	return out
}

// Distinct returns how many distinct event ids were published.
func (p *Publisher) Distinct() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.counts)
}

// WaitFor blocks until cond(messages) is true or ctx is done, re-checking
// after every publish (cond must not keep or modify the slice). It returns
// ctx's error on timeout.
func (p *Publisher) WaitFor(ctx context.Context, cond func([]outbox.Message) bool) error {
	return p.wait(ctx, func() bool { return cond(p.msgs) })
}

func (p *Publisher) wait(ctx context.Context, cond func() bool) error {
	for {
		p.mu.Lock()
		ok := cond()
		ch := p.changed
		p.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

// WaitDistinct blocks until n distinct event ids were published.
func (p *Publisher) WaitDistinct(ctx context.Context, n int) error {
	return p.wait(ctx, func() bool { return len(p.counts) >= n })
}

var _ outbox.Describer = (*Publisher)(nil)

// MessagingSystem implements outbox.Describer.
func (p *Publisher) MessagingSystem() string { return "memory" }

// Destination implements outbox.Describer: the event type.
func (p *Publisher) Destination(msg *outbox.Message) string { return msg.EventType }
