package redisstore

import (
	"context"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Subscribe implements driver.Notifier with one SUBSCRIBE to
// Prefix+"released", the channel release.lua publishes each released key on
// (plain PUBLISH reaches subscribers on every node of a Cluster). It returns
// once Redis has confirmed the subscription. One goroutine per call passes
// each key to onRelease; stop closes the subscription and waits for that
// goroutine to exit. go-redis reconnects a broken subscription by itself;
// releases published while it is down are missed, which waiters cover by
// polling.
func (s *Store) Subscribe(ctx context.Context, onRelease func(key string)) (stop func(), err error) {
	pubsub := s.client.Subscribe(ctx, s.channel)
	// Closing the PubSub is what interrupts a Receive blocked on a silent
	// server; do it when ctx ends before the confirmation arrives.
	unwatch := context.AfterFunc(ctx, func() { _ = pubsub.Close() })
	for {
		msg, err := pubsub.Receive(ctx)
		if err != nil {
			unwatch()
			_ = pubsub.Close()
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			return nil, fmt.Errorf("redisstore: subscribe %s: %w", s.channel, err)
		}
		if _, ok := msg.(*redis.Subscription); ok {
			break
		}
	}
	if !unwatch() {
		// ctx ended just as the confirmation came: the PubSub is closed.
		return nil, fmt.Errorf("redisstore: subscribe %s: %w", s.channel, ctx.Err())
	}

	ch := pubsub.Channel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for msg := range ch { // closed by pubsub.Close
			onRelease(msg.Payload)
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			_ = pubsub.Close()
			<-done
		})
	}, nil
}
