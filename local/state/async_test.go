package state_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/sless-dev/sless/api/apiv1"
	"github.com/sless-dev/sless/async/asynctest"
	"github.com/sless-dev/sless/local/state"
	"github.com/sless-dev/sless/objects"
)

func TestAsyncQueue(t *testing.T) {
	asynctest.Run(t, func(t *testing.T) objects.AsyncQueue {
		db, err := state.Open(filepath.Join(t.TempDir(), "state.db"), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db.Async
	})
}

// What was accepted survives a restart of sless up; what was running is tried again.
func TestAsyncQueueSurvivesARestart(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.db")
	db, err := state.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	queued, running, dead := asynctest.Event("a", "f", now), asynctest.Event("a", "f", now.Add(time.Millisecond)), asynctest.Event("a", "f", now.Add(2*time.Millisecond))
	for _, ev := range []objects.AsyncEvent{running, dead, queued} {
		if err := db.Async.Enqueue(ctx, ev, 10); err != nil {
			t.Fatal(err)
		}
	}
	// All three claimed: one settles dead-lettered, one queued again, one stays running (the
	// process dies mid-attempt).
	claimed, _, err := db.Async.Claim(ctx, now.Add(time.Second), time.Hour, 10)
	if err != nil || len(claimed) != 3 {
		t.Fatalf("claim: %d %v", len(claimed), err)
	}
	for _, c := range claimed {
		switch c.ID {
		case dead.ID:
			c.State, c.Error = apiv1.AsyncDeadLettered, "the function answered 400"
			c.Attempts = []apiv1.AsyncAttempt{{Time: now, Status: 400}}
		case queued.ID:
			c.State = apiv1.AsyncQueued
		default:
			continue // left running: the process "dies" mid-attempt
		}
		if err := db.Async.Settle(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	db, err = state.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	got, err := db.Async.Get(ctx, "a", "f", dead.ID)
	if err != nil || got.State != apiv1.AsyncDeadLettered || len(got.Attempts) != 1 || string(got.Request.Body) != `{"n":1}` {
		t.Fatalf("dead letter after restart: %+v %v", got, err)
	}
	claimed, _, err = db.Async.Claim(ctx, time.Now(), time.Minute, 10)
	if err != nil || len(claimed) != 2 {
		t.Fatalf("after the restart %d events due (the queued one and the one left running), want 2: %v", len(claimed), err)
	}
}
